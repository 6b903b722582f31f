"""Properties of the AdaMix-family defaults on small few-shot digits splits.

Each test fails on the former defaults (Thm.-3 lambda on the summed loss with
eta_1 = 1/lambda, public ridge 1/N_pub, unscaled start): there the first noisy step moves W
far past the public solution and the error at eps = 1 exceeds Only-Public's by > 10 points.
"""

from __future__ import annotations

import numpy as np
import pytest

from mixdp_core.data.splits import SplitSpec, make_split
from mixdp_core.methods import make_method

from .conftest import digits_featureset

EPS = (0.5, 1.0, 3.0, 8.0)
SEEDS = (0, 1)



def _last_release(m):
    """The run's last release record (the prior correction's record, post-processing, follows it)."""
    return next(r for r in reversed(m.history_) if "prior_correction" not in r.extra)

def _err(m, split):
    return float(np.mean(m.predict(split.X_test) != split.y_test))


@pytest.fixture(scope="module")
def fewshot_splits():
    """1 public / class + ~125 private / class; 2 public / class + ~10 private / class."""
    return {
        "one_shot": [make_split(digits_featureset(), SplitSpec(public_per_class=1, seed=s)) for s in SEEDS],
        "scarce": [make_split(digits_featureset(n_train=120), SplitSpec(public_per_class=2, seed=s)) for s in SEEDS],
    }


def _curve(method, splits, **params):
    return np.array([np.mean([_err(make_method(method, target_epsilon=e, seed=s, noise="reproducible", **params).fit(sp), sp)
                              for s, sp in zip(SEEDS, splits)]) for e in EPS])


@pytest.mark.parametrize("regime", ["one_shot", "scarce"])
def test_public_data_never_hurt_and_more_budget_never_hurts(fewshot_splits, regime):
    splits = fewshot_splits[regime]
    pub = np.mean([_err(make_method("only_public").fit(sp), sp) for sp in splits])
    ada = _curve("adamix", splits)
    assert np.all(ada <= pub + 0.01), (ada, pub)  # property 1, every eps >= 0.5
    assert np.all(np.diff(ada) <= 0.015), ada  # property 2: non-increasing within seed noise


def test_only_public_is_the_adamix_start(fewshot_splits):
    # property 4: one public solution (1 shot: nothing to leave out, the ridge is ONE_SHOT_L2);
    # the private phase starts at a positive rescaling of it (same predictions as Only-Public)
    from mixdp_core.methods._linear import ONE_SHOT_L2, fit_public

    sp = fewshot_splits["one_shot"][0]
    pub = make_method("only_public").fit(sp)
    assert pub.l2_ == ONE_SHOT_L2
    # on the map both share (centred on the public mean: public rows only)
    W = fit_public(pub.feature_map_(sp.X_public), sp.y_public, sp.n_classes, l2=pub.l2_)
    np.testing.assert_allclose(pub.W_, W, rtol=1e-5, atol=1e-6)
    m = make_method("adamix", target_epsilon=1.0)
    m.fit(sp, on_step=lambda r: True)  # stop after the first noisy step
    assert m.init_scale_ > 0 and m.public_l2_ == pub.l2_
    np.testing.assert_array_equal(m.feature_map_.center, pub.feature_map_.center)
    Xt = pub.feature_map_(sp.X_test)
    np.testing.assert_array_equal((Xt @ (W * np.float32(m.init_scale_))).argmax(1), pub.predict(sp.X_test))


def test_gain_and_paper_ordering_in_scarce_fewshot(fewshot_splits):
    # The property tests of this module replay their noise (noise="reproducible") so that
    # their outcome is a fixed function of the code at the seeds they were written for, not a
    # new coin flip at every CI run; the secure default is covered by tests/privacy.
    # property 3: >= 10 % relative error reduction over Only-Public at eps = 3 and
    # paragon < AdaMix < Only-Public < Fully-Private where private data are scarce
    splits = fewshot_splits["scarce"]
    par = np.mean([_err(make_method("paragon").fit(sp), sp) for sp in splits])
    pub = np.mean([_err(make_method("only_public").fit(sp), sp) for sp in splits])
    ada = np.mean([_err(make_method("adamix", target_epsilon=3.0, seed=s, noise="reproducible").fit(sp), sp) for s, sp in zip(SEEDS, splits)])
    fp = np.mean([_err(make_method("fully_private", target_epsilon=3.0, seed=s, noise="reproducible").fit(sp), sp)
                  for s, sp in zip(SEEDS, splits)])
    assert ada <= 0.9 * pub, (ada, pub)
    assert par < ada < pub < fp, (par, ada, pub, fp)


def test_public_guard_keeps_adamix_near_only_public_under_domain_shift():
    """Property 1 where the private phase hurts: private/test pixels shifted by +6, 2 clean
    public digits per class, eps = 0.5. Without the guard AdaMix ends ~3.6 points above
    Only-Public (measured 26.7 vs 23.1 % over seeds 0-3); the guard's one noisy paired count
    (accounted: the reported eps stays <= the target) keeps it near the public start."""
    import dataclasses

    fs = digits_featureset()
    shifted = dataclasses.replace(fs, X_train=(fs.X_train + 6.0).astype(np.float32),
                                  X_test=(fs.X_test + 6.0).astype(np.float32))
    seeds = (0, 1, 2, 3)
    splits = [make_split(shifted, SplitSpec(public_per_class=2, seed=s, public_from="clean"), public_features=fs)
              for s in seeds]
    # uncentred inputs: the setting where the private phase hurts (public-mean centering, the
    # default, removes the harm here: unguarded 18.5 vs Only-Public 24.4 %), so the guard is tested
    pub = np.mean([_err(make_method("only_public", feature_center="none").fit(sp), sp) for sp in splits])
    runs = {g: [make_method("adamix", target_epsilon=0.5, seed=s, public_guard=g, noise="reproducible",
                            feature_center="none", init_scale="noise").fit(sp) for s, sp in zip(seeds, splits)]
            for g in (False, True)}
    err = {g: np.mean([_err(m, sp) for m, sp in zip(runs[g], splits)]) for g in runs}
    assert err[False] > pub + 0.025, (err, pub)  # the setting really breaks property 1 unguarded
    assert err[True] <= pub + 0.015, (err, pub)
    assert all(m.privacy_.epsilon <= 0.5 + 1e-9 for m in runs[True])
    assert all(m.steps_ == m.calibrated_steps_ for m in runs[True])  # count + grad steps + guard = T


def test_public_guard_is_a_one_sided_test_at_one_noise_std():
    """When the private phase changed no prediction (true paired gain 0), the guard releases
    the private model only if N(0, sigma^2) > GUARD_Z sigma: over 400 noise seeds that happens
    1 - Phi(1) ~ 15.9 % of the time (a threshold of 0 would keep it half the time)."""
    from scipy.stats import binomtest, norm

    from mixdp_core.methods.adamix import GUARD_Z
    from mixdp_core.methods.adamix.engine import NoisyGDProblem

    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 6)).astype(np.float32)
    y = rng.integers(0, 3, 50)
    W_start = rng.standard_normal((6, 3)).astype(np.float32)
    W_private = 2.0 * W_start  # same argmax on every row: paired gain exactly 0
    prob = NoisyGDProblem(X, y, X[:0], y[:0], None, None, 3)
    kept = 0
    for s in range(400):
        m = make_method("adamix", target_epsilon=1.0, seed=s)
        W, rec = m._public_guard(prob, W_private, W_start, step=5, total=5)
        kept += bool(m.guard_kept_private_)
        assert np.array_equal(W, W_private if m.guard_kept_private_ else W_start)
        assert rec.extra["guard_kept_private"] == float(
            rec.extra["guard_noisy_gain"] > GUARD_Z * m.config.noise_multiplier)
    assert GUARD_Z == 1.0
    assert binomtest(kept, 400, 1.0 - norm.cdf(GUARD_Z)).pvalue > 1e-3, kept


def test_checkpoint_test_is_one_sided_sensitivity_one_and_finds_a_better_early_average():
    """The early-checkpoint test: (i) its paired count changes by at most 1 when a private row
    is removed (add/remove sensitivity 1), (ii) with no true difference it releases the earlier
    average only when N(0, sigma^2) > GUARD_Z sigma (1 - Phi(1) of 400 noise seeds), (iii) an
    earlier average that is right on every row where the final one is wrong wins."""
    from scipy.stats import binomtest, norm

    from mixdp_core.methods.adamix import GUARD_Z
    from mixdp_core.methods.adamix.engine import NoisyGDProblem

    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 6)).astype(np.float32)
    y = rng.integers(0, 3, 200)
    W_final = rng.standard_normal((6, 3)).astype(np.float32)
    prob = NoisyGDProblem(X, y, X[:0], y[:0], None, None, 3)
    m = make_method("adamix", target_epsilon=1.0, seed=3, noise="reproducible")  # same draw twice
    W_other = rng.standard_normal((6, 3)).astype(np.float32)
    full = m._noisy_paired_gain(prob, W_other, W_final, stream=0x6A4E)
    for i in range(0, 200, 17):  # same noise draw (same seed and stream): the difference is row i's term
        keep = np.arange(200) != i
        sub = NoisyGDProblem(X[keep], y[keep], X[:0], y[:0], None, None, 3)
        assert abs(full - m._noisy_paired_gain(sub, W_other, W_final, stream=0x6A4E)) <= 1.0
    kept = 0
    for s in range(400):
        m = make_method("adamix", target_epsilon=1.0, seed=s)
        W, rec = m._checkpoint_test(prob, W_final, 3.0 * W_final, early_step=4, step=20, total=22)
        kept += bool(m.checkpoint_kept_early_)
        assert rec.extra["checkpoint_kept_early"] == float(rec.extra["checkpoint_noisy_gain"]
                                                           > GUARD_Z * m.config.noise_multiplier)
    assert binomtest(kept, 400, 1.0 - norm.cdf(GUARD_Z)).pvalue > 1e-3, kept
    # an earlier average right on every row (one-hot on the label) against a final one that
    # is wrong on most: a gain of > 100 rows, 5 noise stds
    Xo = np.eye(3, dtype=np.float32)[y]
    probo = NoisyGDProblem(Xo, y, Xo[:0], y[:0], None, None, 3)
    W_good, W_bad = np.eye(3, dtype=np.float32), np.roll(np.eye(3, dtype=np.float32), 1, axis=1)
    m = make_method("adamix", target_epsilon=1.0, seed=0)
    W, rec = m._checkpoint_test(probo, W_bad, W_good, early_step=4, step=20, total=22)
    assert m.checkpoint_kept_early_ and np.array_equal(W, W_good)


def test_early_checkpoint_is_one_accounted_release_of_the_run(small_split):
    """With the default early_checkpoint the run spends one of its T releases on the test
    (count + gradient steps + checkpoint test + guard = T, the reported ε that of T composed
    Gaussian releases), streams its record after the last gradient step, and its checkpoint is
    a quarter of the way in; without it the gradient phase gets that release back."""
    from mixdp_core import accounting
    from mixdp_core.methods.adamix import CHECKPOINT_DIVISOR

    on = make_method("adamix", target_epsilon=3.0, seed=0, noise="reproducible").fit(small_split)
    off = make_method("adamix", target_epsilon=3.0, seed=0, early_checkpoint=False, noise="reproducible").fit(small_split)
    T, k = on.calibrated_steps_, on.count_releases_  # k: the class histogram's releases (histogram_share)
    g = on.guard_releases_  # the guard's releases' worth (guard_resolution)
    assert on.steps_ == off.steps_ == T and k == off.count_releases_ > 1 and g == off.guard_releases_ >= 1
    rec = [h for h in on.history_ if "checkpoint_noisy_gain" in h.extra]
    assert len(rec) == 1 and rec[0].step == T - g and "guard_noisy_gain" in _last_release(on).extra
    assert rec[0].extra["checkpoint_step"] == (T - k - g - 1) // CHECKPOINT_DIVISOR
    assert not any("checkpoint_noisy_gain" in h.extra for h in off.history_)
    grad = lambda m: sum(1 for h in m.history_ if not ({"noisy_count", "guard_noisy_gain",  # noqa: E731
                                                          "checkpoint_noisy_gain"} & set(h.extra)))
    assert grad(off) == grad(on) + 1 == T - k - g
    eps_T = accounting.privacy_report(accounting.ComposedGaussian(noise_multiplier=20.0, steps=T), delta=1e-5).epsilon
    assert on.privacy_.epsilon == pytest.approx(eps_T, rel=1e-9) and on.privacy_.epsilon <= 3.0 + 1e-9
    assert _last_release(on).epsilon_spent == pytest.approx(eps_T, rel=1e-9)
    # pDP: every private row is charged the histogram, the checkpoint test and the guard
    assert np.all(on.pdp_sq_ratio_sum_ >= k + 1.0 + g - 1e-9)
    # the test needs >= 8 gradient steps after it: at eps = 0.5 (T = 8) there is none
    small = make_method("adamix", target_epsilon=0.5, seed=0).fit(small_split)
    assert small.checkpoint_kept_early_ is None and small.steps_ == small.calibrated_steps_
