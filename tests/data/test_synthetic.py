"""The ``synthetic`` dataset: deterministic from its options, each option does what it says."""

from __future__ import annotations

import numpy as np
import pytest

from mixdp_core.data import load_dataset
from mixdp_core.data.synthetic import participation_ratio, spectrum, synthetic_features
from mixdp_core.errors import ConfigError


def test_same_options_same_arrays_other_seed_other_arrays():
    a = synthetic_features(classes=5, dim=12, train_per_class=7, test_per_class=3, data_seed=4)
    b = synthetic_features(classes=5, dim=12, train_per_class=7, test_per_class=3, data_seed=4)
    c = synthetic_features(classes=5, dim=12, train_per_class=7, test_per_class=3, data_seed=5)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    X_tr, y_tr, X_te, y_te = a
    assert X_tr.shape == (35, 12) and X_te.shape == (15, 12) and X_tr.dtype == np.float32
    assert np.bincount(y_tr).tolist() == [7] * 5 and np.bincount(y_te).tolist() == [3] * 5


def test_effective_rank_sets_the_spectrum():
    prs = [participation_ratio(spectrum(256, r)) for r in (2, 16, 128, 1e6)]
    assert prs == sorted(prs) and prs[-1] == pytest.approx(256, rel=1e-3)
    # the sample covariance of the within-class noise follows the requested spectrum
    X, y, _, _ = synthetic_features(classes=2, dim=64, train_per_class=4000, effective_rank=4, data_seed=1)
    R = X - np.stack([X[y == c].mean(0) for c in range(2)])[y]
    ev = np.sort(np.linalg.eigvalsh(np.cov(R.T)))[::-1]
    assert participation_ratio(ev) == pytest.approx(participation_ratio(spectrum(64, 4)), rel=0.1)


def test_separation_sets_the_difficulty():
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.methods import make_method

    errs = []
    for sep in (1.0, 4.0, 8.0):
        fs = load_dataset("synthetic", classes=20, dim=32, train_per_class=40, test_per_class=20, separation=sep).features
        sp = make_split(fs, SplitSpec(public_per_class=2, seed=0))
        m = make_method("paragon").fit(sp)
        errs.append(float(np.mean(m.predict(sp.X_test) != sp.y_test)))
    assert errs[0] > errs[1] > errs[2] and errs[0] > 0.5 and errs[2] < 0.2, errs


def test_options_are_checked_before_a_run(tmp_path):
    from mixdp_core.runs.runner import RunConfig

    with pytest.raises(ConfigError) as e:
        RunConfig(dataset="synthetic", encoder="pixels", method="only_public", dataset_kwargs={"classes": 1})
    assert e.value.field == "classes"
    with pytest.raises(ConfigError) as e:
        RunConfig(dataset="synthetic", encoder="pixels", method="only_public", dataset_kwargs={"shots": 1})
    assert e.value.field == "shots" and "train_per_class" in str(e.value)
    with pytest.raises(ConfigError) as e:
        synthetic_features(classes=1000, dim=4096, train_per_class=5000)
    assert e.value.field == "dim" and "512 MiB" in str(e.value)
    with pytest.raises(ConfigError):
        load_dataset("synthetic:/tmp/x")


def test_sizes_a_method_cannot_hold_and_public_shares_that_leave_no_private_row_are_refused_before_drawing(
        monkeypatch):
    """1,000 classes × 6,000 rows at D = 2 passed the feature cap and failed allocating the
    rows × classes scores (3.7 GiB) after the set was drawn; 31 public rows of 30-row classes
    were refused after 44 s of generation, a failed run stored."""
    from mixdp_core.data import synthetic
    from mixdp_core.runs.runner import RunConfig

    drawn = []
    monkeypatch.setattr(synthetic, "spectrum", lambda *a: drawn.append(a) or None)  # nothing may be drawn
    with pytest.raises(ConfigError, match=r"^classes: classes x \(train \+ test per class\) x classes = "
                                          r"6,000,000,000 scores; at most 50,000,000"):
        synthetic_features(classes=1000, dim=2, train_per_class=5000, test_per_class=1000)
    assert drawn == []
    with pytest.raises(ConfigError, match=r"^public_per_class: must be below the synthetic data's "
                                          r"train_per_class \(30\)"):
        RunConfig(dataset="synthetic", encoder="pixels", method="only_public", public_per_class=31,
                  dataset_kwargs={"classes": 1000, "dim": 4096, "train_per_class": 30, "test_per_class": 2})
    with pytest.raises(ConfigError, match=r"^public_per_class: .*\(200\)"):  # the loader's default rows
        RunConfig(dataset="synthetic", encoder="pixels", method="only_public", public_per_class=200)
    # from another domain the public rows leave every private row in place
    RunConfig(dataset="synthetic", encoder="pixels", method="only_public", public_per_class=31,
              dataset_kwargs={"train_per_class": 30}, public_from="synthetic")


@pytest.mark.parametrize("kw, field", [({"shared_mean": "abc"}, "shared_mean"), ({"ambiguity": None}, "ambiguity"),
                                       ({"shared_mean": [1]}, "shared_mean"), ({"shift": -1}, "shift"),
                                       ({"shift": "abc"}, "shift")])
def test_the_loader_names_a_bad_option_it_would_have_converted_or_ignored(kw, field):
    """The library's loader compared float(v) with 0 before the generator's check (bare
    ValueError / TypeError), and never checked shift in the private domain."""
    with pytest.raises(ConfigError) as e:
        load_dataset("synthetic", **kw)
    assert e.value.field == field


def test_a_run_on_many_classes_through_the_cli(tmp_path, capsys, monkeypatch):
    import json

    from mixdp_core.cli import main

    monkeypatch.setenv("MIXDP_HOME", str(tmp_path / "h"))
    monkeypatch.setenv("MIXDP_CACHE", str(tmp_path / "c"))
    rc = main(["train", "--dataset", "synthetic", "--dataset-arg", "classes=120", "--dataset-arg", "dim=64",
               "--dataset-arg", "train_per_class=20", "--method", "adamix", "--public-per-class", "2",
               "--epsilon", "3", "--json", "--no-progress"])  # ε = 3: 206 gradient steps, not ε = 8's 1,110
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["status"] == "completed" and out["epsilon"] <= 3 + 1e-9


def test_shared_mean_and_ambiguity_leave_the_default_arrays_unchanged_and_do_what_they_say():
    from mixdp_core.data.synthetic import synthetic_features

    kw = dict(classes=6, dim=12, train_per_class=300, test_per_class=10, separation=30.0, data_seed=4)
    base = synthetic_features(**kw)
    same = synthetic_features(**kw, shared_mean=0.0, ambiguity=0.0)
    for a, b in zip(base, same):
        np.testing.assert_array_equal(a, b)  # old caches and runs stay valid
    shifted = synthetic_features(**kw, shared_mean=2.0)
    delta = shifted[0] - base[0]
    np.testing.assert_allclose(delta, np.broadcast_to(delta[0], delta.shape), atol=1e-4)  # one common vector
    assert np.all(delta[0] >= 0) and np.linalg.norm(delta[0]) == pytest.approx(2.0 * np.sqrt(12), rel=1e-5)
    amb = synthetic_features(**kw, ambiguity=0.2)
    X, y = amb[0], amb[1]
    mu = np.stack([base[0][base[1] == c].mean(0) for c in range(6)])  # well-separated clean class means
    nearest = np.argmin(((X[:, None, :] - mu[None]) ** 2).sum(-1), axis=1)
    assert np.mean(nearest != y) == pytest.approx(0.2, abs=0.03)  # about that share sits in another class
    np.testing.assert_array_equal(amb[1], base[1])  # labels kept


def test_new_synthetic_options_are_checked_with_their_range():
    from mixdp_core.data.synthetic import synthetic_features
    from mixdp_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"ambiguity: must be a number in \[0, 0.5\]"):
        synthetic_features(ambiguity=0.7)
    with pytest.raises(ConfigError, match="shared_mean"):
        synthetic_features(shared_mean=-1)


def test_shift_moves_only_the_public_domains_class_means_by_shift_times_their_spread():
    """domain="public": class means move by shift × (a class mean's own law); the private
    domain is the same for every shift, and public rows never reuse a private row's noise."""
    from mixdp_core.data.synthetic import synthetic_features

    kw = dict(classes=40, dim=16, train_per_class=400, test_per_class=5, separation=5.0, effective_rank=1e6,
              data_seed=3)
    priv = synthetic_features(**kw)
    for a, b in zip(priv, synthetic_features(**kw, shift=2.0)):
        np.testing.assert_array_equal(a, b)  # private domain: shift ignored, caches stay valid
    pub0 = synthetic_features(**kw, domain="public")
    assert not np.any(np.isclose(pub0[0], priv[0]).all(axis=1))  # fresh draws, even at shift 0

    def means(X, y):
        return np.stack([X[y == c].mean(0) for c in range(40)])

    mu, mu0 = means(*priv[:2]), means(*pub0[:2])
    spread = np.linalg.norm(mu - mu.mean(0), axis=1).mean()
    assert np.linalg.norm(mu0 - mu, axis=1).mean() < 0.25 * spread  # shift 0: same class means
    for sh in (0.5, 2.0):
        pub = synthetic_features(**kw, shift=sh, domain="public")
        moved = np.linalg.norm(means(*pub[:2]) - mu, axis=1).mean()
        # an independent copy of a class mean's law, scaled by sh (flat spectrum: the class means'
        # norm is separation; mean-estimate noise ~ sqrt(16/400) adds little)
        assert moved == pytest.approx(sh * spread, rel=0.2)
    with pytest.raises(ConfigError, match=r"shift: must be a number in \[0, 10\]"):
        synthetic_features(shift=11.0, domain="public")
    with pytest.raises(ConfigError, match="domain: must be one of private, public"):
        synthetic_features(domain="elsewhere")


def test_public_from_synthetic_takes_the_public_rows_from_the_shifted_domain_and_bad_combinations_are_refused():
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.runs.runner import RunConfig, _load_features, train

    kw = {"classes": 6, "dim": 24, "train_per_class": 60, "test_per_class": 30, "separation": 8.0,
          "effective_rank": 1e6}
    errs = []
    for sh in (0.0, 3.0):
        c = RunConfig(dataset="synthetic", encoder="pixels", method="only_public", public_per_class=2,
                      dataset_kwargs={**kw, "shift": sh}, public_from="synthetic")
        feats, pub = _load_features(c, cache_dir=None, progress=None)
        split = make_split(feats, SplitSpec(public_per_class=2, public_from="synthetic"), public_features=pub)
        assert len(split.y_private) == 6 * 60  # every private-domain train row stays private
        # the public rows are the public domain's rows, none of the private domain's
        assert not (split.X_public[:, None, :] == feats.X_train[None]).all(-1).any()
        assert (split.X_public[:, None, :] == pub.X_train[None]).all(-1).any(1).all()  # ... and the public domain's
        r = train(c)
        assert r.status == "completed", r.error
        errs.append(r.metrics["test_error"])
    assert errs[1] > errs[0] + 0.1  # public shots from a shifted domain hurt Only-Public
    with pytest.raises(ConfigError, match="shift: moves the public domain only"):
        RunConfig(dataset="synthetic", encoder="pixels", method="only_public", dataset_kwargs={**kw, "shift": 1.0})
    with pytest.raises(ConfigError, match="public_from: 'synthetic' is the public domain of dataset 'synthetic' only"):
        RunConfig(dataset="digits", encoder="pixels", method="only_public", public_from="synthetic")
    with pytest.raises(ConfigError, match="domain: not an option of dataset 'synthetic'"):
        RunConfig(dataset="synthetic", encoder="pixels", method="only_public", dataset_kwargs={"domain": "public"},
                  public_from="synthetic")


def test_the_shift_reaches_the_episodes_figure_and_leaves_the_privacy_ledger_key_alone():
    """Every path that loads a synthetic public domain goes through ``public_source``: the
    episodes figure's public rows are the public domain's (never private rows, same dimension);
    and the shift changes only public rows, so the private data set's ledger key is the same."""
    from mixdp_core.runs import ledger as L
    from mixdp_core.runs.figures.base import Context
    from mixdp_core.runs.figures.episodes import _episode_data

    kw = {"classes": 6, "dim": 24, "train_per_class": 30, "test_per_class": 10, "separation": 4.0, "shift": 1.0}
    ctx = Context(dataset="synthetic", encoder="pixels", dataset_kwargs=kw, public_from="synthetic")
    d = _episode_data(ctx, 2, 0)
    Xp, _ = d["public"]
    assert Xp.shape == (12, 24) and d["pool"].shape[1] == 24
    assert not (Xp[:, None, :] == d["X"][None]).all(-1).any()  # no private row among the public ones
    assert L.dataset_key("synthetic", dataset_kwargs=kw) == L.dataset_key("synthetic", dataset_kwargs={**kw, "shift": 0.0})
    assert L.dataset_key("synthetic", dataset_kwargs=kw) != L.dataset_key("synthetic", dataset_kwargs={**kw, "dim": 25})
    from mixdp_core.runs.runner import RunConfig

    with pytest.raises(ConfigError, match="public_from: the synthetic public domain is named 'synthetic' alone"):
        RunConfig(dataset="synthetic", encoder="pixels", method="only_public", public_from="synthetic:x")


def test_drawing_holds_one_block_of_float64_rows_not_the_whole_matrix_and_the_blocks_change_nothing(monkeypatch):
    import tracemalloc

    from mixdp_core.data import synthetic

    kw = dict(classes=40, dim=512, train_per_class=480, test_per_class=20, ambiguity=0.05)
    tracemalloc.start()
    try:
        X_tr, y_tr, X_te, y_te = synthetic_features(**kw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    out = X_tr.nbytes + X_te.nbytes  # 41 MB of float32 rows
    # the result, the D x D rotation and a few float64 temporaries of one block each; drawn
    # in one go, three float64 copies of the whole matrix (about 8x the result) were live
    block = synthetic.ROW_BLOCK_VALUES * 8
    assert peak < out + 2 * 512 * 512 * 8 + 5 * block, (peak, out)
    # a block size that cuts classes mid-way gives the same arrays bit for bit
    monkeypatch.setattr(synthetic, "ROW_BLOCK_VALUES", 512 * 37)
    again = synthetic_features(**kw)
    for a, b in zip((X_tr, y_tr, X_te, y_te), again):
        np.testing.assert_array_equal(a, b)
