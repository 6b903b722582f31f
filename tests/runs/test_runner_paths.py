"""Runner life-cycle paths with a controllable fake method (no DP involved)."""

import multiprocessing as mp
import os
import signal
import time

import pytest

from mixdp_core.errors import ConfigError
from mixdp_core.runs import CANCELLED, COMPLETED, FAILED, RUNNING, RunStore
from mixdp_core.runs.runner import RunConfig, execute


def _cfg(name, **params):
    return RunConfig(dataset="digits", encoder="pixels", method=name, method_params=params)


def test_runconfig_validation(fake_method):
    with pytest.raises(ConfigError, match="^method: unknown method 'nope'; choose one of: .*_fake"):
        RunConfig(dataset="digits", encoder="pixels", method="nope")
    with pytest.raises(ConfigError, match="^epsilon:"):
        RunConfig(dataset="digits", encoder="pixels", method=fake_method, target_epsilon=0)
    with pytest.raises(ConfigError, match="^delta:"):
        RunConfig(dataset="digits", encoder="pixels", method=fake_method, target_delta=1.0)
    with pytest.raises(ConfigError, match="^seed:"):
        RunConfig(dataset="digits", encoder="pixels", method=fake_method, seed=-1)
    with pytest.raises(ConfigError, match="^public_per_class:"):
        RunConfig(dataset="digits", encoder="pixels", method=fake_method, public_per_class=0)
    with pytest.raises(ConfigError, match="^imbalance_ratio:"):
        RunConfig(dataset="digits", encoder="pixels", method=fake_method, imbalance_ratio=0.5)
    with pytest.raises(ConfigError, match="^bogus: not a parameter"):
        _cfg(fake_method, bogus=1)
    with pytest.raises(ConfigError, match="^target_epsilon: set it as RunConfig"):
        _cfg(fake_method, target_epsilon=1)
    with pytest.raises(ConfigError, match="^encoder: unknown encoder"):
        RunConfig(dataset="digits", encoder="no_such_encoder", method=fake_method)
    with pytest.raises(ConfigError, match="^dataset: unknown dataset"):
        RunConfig(dataset="no_such_dataset", encoder="pixels", method=fake_method)
    a, b = _cfg(fake_method, steps=3), _cfg(fake_method, steps=3)
    assert a.config_hash() == b.config_hash()
    assert a.config_hash() != _cfg(fake_method, steps=4).config_hash()
    assert a.split_hash() == _cfg(fake_method, steps=4).split_hash()
    assert RunConfig.from_dict(a.to_dict()) == a


def test_a_long_tailed_split_hash_names_its_tail_stream(fake_method):
    """The tail's order moved to a stream of its own (2026-11-30): a long-tailed split keeps
    other private rows than a stored run with the same options made before, whose paragon
    the Performance Boost must not borrow. Balanced splits did not change: same hash."""
    from mixdp_core.runs.runner import _hash

    def old_hash(c):
        d = {k: getattr(c, k) for k in ("dataset", "encoder", "dataset_root", "dataset_kwargs", "encoder_kwargs",
                                         "seed", "public_per_class", "imbalance_ratio", "public_from")}
        return _hash(d)

    bal = RunConfig(dataset="digits", encoder="pixels", method=fake_method)
    tail = RunConfig(dataset="digits", encoder="pixels", method=fake_method, imbalance_ratio=10.0)
    assert bal.split_hash() == old_hash(bal)
    assert tail.split_hash() != old_hash(tail) and tail.split_hash() != bal.split_hash()


def test_completed_run_and_reuse(tmp_path, fake_method, digits_features):
    st = RunStore(tmp_path)
    seen = []
    cfg = _cfg(fake_method, steps=7)
    rid = execute(cfg, store=st, features=digits_features, on_record=seen.append)
    rec = st.get_run(rid)
    assert rec.status == COMPLETED and rec.error is None
    assert [s["step"] for s in st.steps(rid)] == list(range(1, 8)) == [r.step for r in seen]
    m = rec.metrics
    assert 0 <= m["test_error"] <= 1 and 0 <= m["mia_auc"] <= 1 and m["epsilon"] is None
    assert m["steps"] == 7 and m["n_private"] == 1200 - 50
    art = st.load_artifacts(rid)
    assert art["y_pred"].shape == (len(digits_features.y_test),) and "mia_fpr" in art
    assert execute(cfg, store=st, features=digits_features, reuse=True) == rid
    assert execute(cfg, store=st, features=digits_features, reuse=False) != rid


def test_exception_marks_failed_keeps_history(tmp_path, fake_method, digits_features):
    st = RunStore(tmp_path)
    with pytest.raises(RuntimeError, match="boom at step 4"):
        execute(_cfg(fake_method, steps=9, fail_at=4), store=st, features=digits_features, flush_every_s=0)
    (rec,) = st.list_runs()
    assert rec.status == FAILED and "RuntimeError: boom at step 4" in rec.error
    assert [s["step"] for s in st.steps(rec.run_id)] == [1, 2, 3]
    with pytest.raises(KeyboardInterrupt):
        execute(_cfg(fake_method, steps=9, interrupt_at=2), store=st, features=digits_features)
    rec = st.list_runs()[0]
    assert rec.status == FAILED and rec.error == "KeyboardInterrupt"
    assert [s["step"] for s in st.steps(rec.run_id)] == [1]


def test_cancel_flag_from_store(tmp_path, fake_method, digits_features):
    st = RunStore(tmp_path)

    def press_cancel(rec):  # what the app's Cancel button does, from another handle
        if rec.step == 3:
            other = RunStore(tmp_path)
            (run,) = other.list_runs(status=RUNNING)
            assert other.request_cancel(run.run_id)

    rid = execute(_cfg(fake_method, steps=50), store=st, features=digits_features, on_record=press_cancel,
                  flush_every_s=0)
    rec = st.get_run(rid)
    assert rec.status == CANCELLED
    assert [s["step"] for s in st.steps(rid)] == [1, 2, 3]
    assert rec.metrics["steps"] == 3


def _child(root, feats):  # forked: inherits the registry patched by the fake_method fixture
    execute(_cfg("_fake", steps=10_000, sleep_s=0.01), store=RunStore(root), features=feats, flush_every_s=0)


def test_killed_runner_process_marked_failed(tmp_path, fake_method, digits_features):
    ctx = mp.get_context("fork")
    p = ctx.Process(target=_child, args=(str(tmp_path), digits_features))
    p.start()
    st = RunStore(tmp_path)
    deadline = time.time() + 30
    while time.time() < deadline:
        runs = st.list_runs()
        if runs and len(st.steps(runs[0].run_id)) >= 5:
            break
        time.sleep(0.05)
    assert RunStore(tmp_path).get_run(runs[0].run_id).status == RUNNING  # live: untouched
    os.kill(p.pid, signal.SIGKILL)
    p.join(30)
    rec = RunStore(tmp_path).get_run(runs[0].run_id)
    assert rec.status == FAILED and "interrupted" in rec.error
    assert len(RunStore(tmp_path).steps(rec.run_id)) >= 5


def test_config_hash_changes_with_the_code(fake_method, monkeypatch):
    """A run produced by other mixdp_core sources is never reused as an identical run."""
    from mixdp_core.runs import runner

    a = _cfg(fake_method, steps=3)
    h = a.config_hash()
    monkeypatch.setattr(runner, "_source_identity", lambda: {"mixdp_core_source_sha256": "other-code"})
    assert a.config_hash() != h
    assert a.split_hash() == _cfg(fake_method, steps=3).split_hash()


def test_run_config_refuses_an_infeasible_budget():
    """ε below one full-batch step at σ = 20: the config's preflight refuses (execute calls it,
    so every caller is covered; constructing the config only checks the fields)."""
    from mixdp_core.accounting import BudgetError

    cfg = RunConfig(dataset="digits", encoder="pixels", method="adamix", target_epsilon=0.05,
                    method_params={"noise_multiplier": 20.0})
    with pytest.raises(BudgetError, match="noise_multiplier"):
        cfg.preflight()
    RunConfig(dataset="digits", encoder="pixels", method="adamix", target_epsilon=0.2,
              method_params={"noise_multiplier": 20.0}).preflight()


def test_a_missing_data_source_is_refused_before_a_run_row_exists(tmp_path):
    from mixdp_core.errors import ConfigError, DataError
    from mixdp_core.runs import RunStore
    from mixdp_core.runs.runner import RunConfig, execute

    st = RunStore(tmp_path)
    for spec, err in (("image_folder:/nonexistent/x", DataError), ("features:/nonexistent.npz", DataError),
                      ("features", ConfigError)):
        with pytest.raises(err):
            execute(RunConfig(dataset=spec, encoder="pixels", method="only_public"), store=st)
    assert st.list_runs() == []


def test_a_path_named_data_sets_files_are_part_of_the_run_identity(tmp_path, monkeypatch):
    """The same relative spec in two folders, or a feature file replaced in place, gave one
    config hash: the other data's run came back as 'reused' (its error, its ε, and no ledger
    entry for the data actually named). Named data sets keep their hash."""
    import numpy as np

    from mixdp_core.data import datasets
    from mixdp_core.runs.runner import RunConfig

    def write(path, n, seed):
        rng = np.random.default_rng(seed)
        np.savez(path, X_train=rng.normal(size=(n, 4)).astype(np.float32), y_train=np.arange(n) % 3,
                 X_test=rng.normal(size=(9, 4)).astype(np.float32), y_test=np.arange(9) % 3)

    monkeypatch.setattr(datasets, "_FINGERPRINT_TTL_S", 0.0)  # every hash looks at the files now
    for d, n in (("a", 60), ("b", 90)):
        (tmp_path / d).mkdir()
        write(tmp_path / d / "f.npz", n, 0)
    cfg = RunConfig(dataset="features:f.npz", encoder="pixels", method="only_public")
    monkeypatch.chdir(tmp_path / "a")
    ha = cfg.config_hash()
    assert cfg.config_hash() == ha  # stable while the file is unchanged
    monkeypatch.chdir(tmp_path / "b")
    assert cfg.config_hash() != ha
    monkeypatch.chdir(tmp_path / "a")
    st = os.stat("f.npz")
    write(tmp_path / "a" / "f.npz", 60, 1)  # same size, other values
    os.utime("f.npz", ns=(st.st_atime_ns, st.st_mtime_ns))  # even with its old mtime put back
    assert cfg.config_hash() != ha
    d = RunConfig(dataset="digits", encoder="pixels", method="only_public")
    assert datasets.data_fingerprint(d.dataset) is None


def test_a_public_domain_with_other_classes_is_refused_before_anything_is_encoded(tmp_path, monkeypatch):
    """The split found a class mismatch only after both image data sets were encoded (hours on a
    real one); the two listings decide it first."""
    import mixdp_core.features.cache as cache
    from mixdp_core.runs.runner import RunConfig, train
    from tests.conftest import write_png_tree

    a = write_png_tree(tmp_path / "a", classes=("a", "b"), per_class=6)
    b = write_png_tree(tmp_path / "b", classes=("a", "c"), per_class=6)
    encoded = []
    real = cache.get_features
    monkeypatch.setattr(cache, "get_features", lambda *x, **k: encoded.append(x) or real(*x, **k))
    r = train(RunConfig(dataset=f"image_folder:{a}", encoder="pixels", method="adamix", public_per_class=2,
                        public_from=f"image_folder:{b}"), cache_dir=tmp_path / "c")
    assert r.status == "failed" and r.error.startswith("DataError: public_from:") and "['a', 'c']" in r.error
    assert encoded == []
