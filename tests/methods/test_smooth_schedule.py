"""The 'smooth' schedule's ingredients: clip-aware smoothness bound, noisy count, honest tuning."""

from __future__ import annotations

import numpy as np
import pytest

from mixdp_core import accounting
from mixdp_core.methods import make_method
from mixdp_core.methods._linear import softmax_residual
from mixdp_core.methods.adamix.engine import clipped_smoothness


def _clipped_grad(x, y, W, tau):
    E, _ = softmax_residual((x[None, :] @ W).astype(np.float64), np.array([y]))
    g = np.outer(x, E[0])
    n = np.linalg.norm(g)
    return g * min(1.0, tau / n) if n > 0 else g


@pytest.mark.parametrize("tau", [1e-3, 0.02, 0.2, 1.0])
def test_clipped_gradient_map_is_min_half_2tau_lipschitz(tau):
    rng = np.random.default_rng(0)
    L = clipped_smoothness(tau)
    worst = worst_unclipped = 0.0
    for _ in range(400):
        D, C = 8, 5
        x = rng.standard_normal(D)
        x /= np.linalg.norm(x)
        W = rng.standard_normal((D, C)) * rng.choice([0.1, 1.0, 5.0])
        dW = rng.standard_normal((D, C)) * 1e-4
        y = int(rng.integers(C))
        ratio = np.linalg.norm(_clipped_grad(x, y, W + dW, tau) - _clipped_grad(x, y, W, tau)) / np.linalg.norm(dW)
        worst = max(worst, ratio)
        raw = np.linalg.norm(_clipped_grad(x, y, W + dW, np.inf) - _clipped_grad(x, y, W, np.inf)) / np.linalg.norm(dW)
        worst_unclipped = max(worst_unclipped, raw)
    assert worst <= L * (1 + 1e-3)
    assert worst_unclipped <= 0.5 * (1 + 1e-3)  # beta = 1/2 for ||x|| = 1
    if tau <= 0.02:
        assert worst_unclipped > 2 * tau  # the smaller bound is due to clipping, not to luck


def test_smooth_run_releases_a_noisy_class_histogram_and_accounts_it(small_split):
    """Default class_balance: the first releases are the class histogram (sensitivity 1), staged
    (histogram_share=None): m = round(a/(1+a) T), a = 0.3 sqrt(10/C); a pilot of m1 = ceil(m/4)
    releases (noise sigma/sqrt(m1) per class); a chi² test at 5 % on it (classes drawn with equal
    probabilities: variance n_hat/C + sigma²/m1 + 1/12 per bin); the other
    m - m1 only if it rejects (an independent stream, combined by inverse variance). n_hat = the
    histogram's sum + 2 sqrt(C) sigma_h (upper bound) + N_public; offsets from its shrunk counts.
    Recomputed here from the replayed noise, on this balanced split and on an imbalanced one."""
    from scipy.stats import chi2

    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features
    from mixdp_core.methods.adamix.engine import log_prior, shrunk_class_counts
    from mixdp_core.randomness import noise_rng

    imbalanced = make_split(get_features("digits", "pixels"), SplitSpec(public_per_class=5, imbalance_ratio=10.0, seed=0))
    fired = []
    for sp in (small_split, imbalanced):
        m = make_method("adamix", target_epsilon=2.0, noise_multiplier=10.0, seed=3, noise="reproducible").fit(sp)
        T = accounting.calibrate_steps(noise_multiplier=10.0, target_epsilon=2.0, target_delta=1e-5)
        C = sp.n_classes
        a = 0.3 * np.sqrt(10 / C)
        k = max(1, round(a / (1 + a) * T))
        k1 = int(np.ceil(k / 4))
        n = np.bincount(sp.y_private, minlength=C)
        h1 = np.rint(n + 10.0 / np.sqrt(k1) * noise_rng("reproducible", 3, 0xC0418).standard_normal(C))
        stat = np.sum((h1 - h1.mean()) ** 2) / (max(h1.sum(), 0.0) / C + 100.0 / k1 + 1 / 12)
        if stat > chi2.ppf(0.95, C - 1):
            h2 = np.rint(n + 10.0 / np.sqrt(k - k1) * noise_rng("reproducible", 3, 0xC041A).standard_normal(C))
            hist, used = (k1 * h1 + (k - k1) * h2) / k, k
        else:
            hist, used = h1, k1
        fired.append(used == k)
        assert k > k1 > 1 and m.count_releases_ == used and m.steps_ == T and m.history_[0].step == used
        assert sum(r.count for r in m.ledger_.releases if r.what == "noisy class histogram") == used
        s_h = 10.0 / np.sqrt(used)
        n_pub = len(sp.y_public)
        assert m.n_hat_ == pytest.approx(hist.sum() + 2 * np.sqrt(C) * s_h + n_pub)
        np.testing.assert_allclose(m.class_counts_, shrunk_class_counts(hist, s_h))
        assert log_prior(m.class_counts_).shape == (C,)
        assert m.history_[0].extra["noisy_count"] == pytest.approx(hist.sum())
    assert fired == [False, True]  # the balanced split keeps the pilot; the imbalanced one spends the rest


def test_smooth_run_releases_a_noisy_count_and_accounts_it(small_split):
    # replayed noise, so that the released count can be recomputed here
    m = make_method("adamix", target_epsilon=2.0, noise_multiplier=5.0, seed=3, noise="reproducible",
                    class_balance="none").fit(small_split)
    T = accounting.calibrate_steps(noise_multiplier=5.0, target_epsilon=2.0, target_delta=1e-5)
    assert m.count_releases_ == 1 and m.steps_ == T and m.history_[0].step == 1
    n_pub, n_priv = len(small_split.y_public), len(small_split.y_private)
    # n_hat = round(N_private + N(0, sigma^2)) + 2 sigma (upper confidence bound) + N_public
    from mixdp_core.randomness import noise_rng

    released = np.rint(n_priv + 5.0 * noise_rng("reproducible", 3, 0xC0417).standard_normal())
    assert m.n_hat_ == pytest.approx(released + 2 * 5.0 + n_pub)
    assert float(m.n_hat_ - n_pub - 2 * 5.0).is_integer()  # snapped to the integer grid


def test_honest_tuning_reports_the_selection_epsilon(small_split):
    streamed = []
    m = make_method("ngd", target_epsilon=3.0, noise_multiplier=5.0, honest_tuning=True, tuning_gamma=0.5,
                    seed=1).fit(small_split, on_step=lambda r: streamed.append(r))
    assert streamed == m.history_  # the released record reaches on_step (the store, the app), only it
    # default tuning_eta = 0: logarithmic number of repetitions
    T_rep = accounting.selection_steps(noise_multiplier=5.0, target_epsilon=3.0, target_delta=1e-5, eta=0.0,
                                       gamma=0.5, extra_releases=1)
    mu_run = np.sqrt(T_rep + 1) / 5.0
    want = accounting.selection_epsilon(mu_run, delta=1e-5, eta=0.0, gamma=0.5)
    assert m.privacy_.epsilon == pytest.approx(want, rel=1e-12)
    assert m.privacy_.epsilon <= 3.0
    # K stays inside the mechanism: one record (the released repetition), its releases only
    assert len(m.history_) == 1 and not hasattr(m, "tuning_repetitions_")
    assert all(h.test_error is None for h in m.history_)  # selection never reads test data
    assert m.steps_ == T_rep + 1  # count + steps of the released repetition
    assert m.expected_repetitions_ == pytest.approx(accounting.tnb_expected_count(0.0, 0.5))


def test_honest_tuning_grid_holds_the_default_and_eta_changes_the_budget(small_split):
    from mixdp_core.methods.adamix import HONEST_GRID, NOISE_MARGIN_Z

    assert HONEST_GRID[0] == (1.0, 1.0) and len(set(HONEST_GRID)) == len(HONEST_GRID)
    geo = make_method("adamix", target_epsilon=3.0, noise_multiplier=5.0, honest_tuning=True, tuning_eta=1.0)
    log = make_method("adamix", target_epsilon=3.0, noise_multiplier=5.0, honest_tuning=True)
    # Thm. 2's overhead grows with (1 + eta): the logarithmic draw leaves more steps per repetition
    assert log._selection_plan()[0] > geo._selection_plan()[0]
    m = log.fit(small_split)
    # the selection's one record (a second, where the released model's prior is corrected, has none)
    zs = [h.extra["candidate_z"] for h in m.history_ if "candidate_z" in h.extra]
    assert len(zs) == 1 and len(m.history_) == 1 + m.prior_corrected_
    assert all(z in {zm * NOISE_MARGIN_Z for zm, _ in HONEST_GRID} for z in zs)
    assert m.privacy_.epsilon <= 3.0 and "TNB(0, 0.2)" in m.privacy_.mechanism


def test_honest_tuning_bounds_its_repetitions_before_any_work():
    """E[K] is about 1/γ: γ = 1e-6 ran past 100 s (a million full runs expected)."""
    from mixdp_core.errors import ConfigError

    with pytest.raises(ConfigError, match="tuning_gamma"):
        make_method("adamix", honest_tuning=True, tuning_gamma=1e-6)
    make_method("adamix", honest_tuning=True, tuning_gamma=0.001)
    # each repetition's steps meet the step ceiling as a single run's do (ε = 1000 at σ = 100
    # gave 16 million steps per repetition, and the preflight passed)
    from mixdp_core.errors import BudgetError

    with pytest.raises(BudgetError, match="target_epsilon: this budget implies"):
        make_method("adamix", honest_tuning=True, target_epsilon=1000, noise_multiplier=100.0).preflight()


def test_honest_tuning_hides_its_repetitions_from_the_live_view(small_split):
    """The live step observer saw every hidden repetition's steps (K × T calls): K was then
    readable from the owner's live charts. It sees none of them; the held-out guard's
    combination with honest tuning is refused instead of silently ignored."""
    from mixdp_core.errors import ConfigError
    from mixdp_core.methods._observe import observing_steps

    calls = []
    with observing_steps(lambda **kw: calls.append(kw["rec"].step)):
        make_method("adamix", target_epsilon=3.0, noise_multiplier=5.0, honest_tuning=True,
                    tuning_gamma=0.5, prior_correction="none").fit(small_split)
    assert calls == []
    # the released model's prior correction (post-processing of the one selected repetition)
    # streams its one record, whatever K was; whether it applies follows the released run's
    # noisy pilot and guard, so both outcomes are checked rather than assumed
    with observing_steps(lambda **kw: calls.append(kw["rec"].step)):
        m = make_method("adamix", target_epsilon=3.0, noise_multiplier=5.0, honest_tuning=True,
                        tuning_gamma=0.5, prior_correction="public").fit(small_split)
    assert calls == ([1] if m.prior_corrected_ else [])
    calls.clear()
    with observing_steps(lambda **kw: calls.append(kw["rec"].step)):
        make_method("adamix", target_epsilon=3.0, noise_multiplier=5.0).fit(small_split)
    assert calls  # a plain run streams to the live view
    with pytest.raises(ConfigError, match="guard_holdout"):
        make_method("adamix", honest_tuning=True, guard_holdout=0.3)
    with pytest.raises(ConfigError, match="guard_holdout"):
        make_method("adamix", public_guard=False, guard_holdout=0.3)


@pytest.mark.parametrize("kw, field", [
    ({"schedule": "constant", "learning_rate": 1e6}, "learning_rate"),
    ({"schedule": "theorem3", "weight_decay": 1e-300}, "weight_decay"),
    ({"schedule": "constant", "clip": "fixed", "clip_norm": 1e30}, "clip_norm"),
])
def test_weights_leaving_float32_stop_the_run_naming_the_field(small_split, kw, field):
    """These finished 'OK' with NaN weights (every prediction class 0) and an ε beside them."""
    from mixdp_core.errors import ConfigError

    with np.errstate(all="ignore"), pytest.raises(ConfigError, match=f"^{field}: the weights left float32"):
        make_method("adamix", target_epsilon=3.0, **kw).fit(small_split)


def test_a_tiny_clip_norm_is_told_to_rise_not_to_fall(small_split):
    """Under the smooth schedule a tiny clip makes the step 1/(2 clip) huge: the advice said
    "lower learning_rate or clip_norm", and lowering clip_norm makes it worse."""
    from mixdp_core.errors import ConfigError

    with np.errstate(all="ignore"), pytest.raises(ConfigError, match="^clip_norm: .*raise clip_norm") as e:
        make_method("fully_private", target_epsilon=3.0, clip_norm=1e-45).fit(small_split)
    assert "lower learning_rate or clip_norm" not in str(e.value)
