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


def test_smooth_run_releases_a_noisy_count_and_accounts_it(small_split):
    m = make_method("adamix", target_epsilon=2.0, noise_multiplier=5.0, seed=3).fit(small_split)
    T = accounting.calibrate_steps(noise_multiplier=5.0, target_epsilon=2.0, target_delta=1e-5)
    assert m.count_releases_ == 1 and m.steps_ == T and m.history_[0].step == 1
    n_pub, n_priv = len(small_split.y_public), len(small_split.y_private)
    # n_hat = (N_private + N(0, sigma^2)) + 2 sigma (upper confidence bound) + N_public
    draw = m.n_hat_ - n_pub - 2 * 5.0 - n_priv
    assert draw != 0 and abs(draw) < 6 * 5.0


def test_honest_tuning_reports_the_selection_epsilon(small_split):
    m = make_method("ngd", target_epsilon=3.0, noise_multiplier=5.0, honest_tuning=True, tuning_gamma=0.5,
                    seed=1).fit(small_split)
    T_rep = accounting.selection_steps(noise_multiplier=5.0, target_epsilon=3.0, target_delta=1e-5, eta=1.0,
                                       gamma=0.5, extra_releases=1)
    mu_run = np.sqrt(T_rep + 1) / 5.0
    want = accounting.selection_epsilon(mu_run, delta=1e-5, eta=1.0, gamma=0.5)
    assert m.privacy_.epsilon == pytest.approx(want, rel=1e-12)
    assert m.privacy_.epsilon <= 3.0
    assert m.tuning_repetitions_ >= 1 and len(m.history_) == m.tuning_repetitions_
    assert all(h.test_error is None for h in m.history_)  # selection never reads test data
    assert m.steps_ == m.tuning_repetitions_ * (T_rep + 1)  # count + steps per repetition
