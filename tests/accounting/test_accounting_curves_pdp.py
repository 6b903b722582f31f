"""Privacy curves and per-instance DP."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

import mixdp_core.accounting as A


def test_privacy_curve_full_batch():
    sigma, T, dlt = 8.0, 300, 1e-5
    c = A.privacy_curve(noise_multiplier=sigma, steps=T, delta=dlt)
    assert c.shape == (T,)
    assert np.all(np.diff(c) >= 0)
    assert c[-1] == A.epsilon(A.ComposedGaussian(sigma, T), delta=dlt)
    assert c[0] == A.epsilon(A.GaussianMechanism(sigma), delta=dlt)
    assert c[99] == pytest.approx(A.epsilon(A.ComposedGaussian(sigma, 100), delta=dlt))


def test_calibrated_run_curve_stays_within_budget():
    sigma, eps, dlt = 5.0, 2.0, 1e-5
    T = A.calibrate_steps(noise_multiplier=sigma, target_epsilon=eps, target_delta=dlt)
    c = A.privacy_curve(noise_multiplier=sigma, steps=T, delta=dlt)
    assert c.max() <= eps


def test_dpsgd_curve_rdp_every_step():
    s, q, T, dlt = 1.2, 0.02, 400, 1e-5
    c = A.dpsgd_privacy_curve(noise_multiplier=s, sample_rate=q, steps=T, delta=dlt)
    assert c.shape == (T,) and np.all(np.diff(c) >= 0)
    assert c[-1] == pytest.approx(A.epsilon(A.PoissonSubsampledGaussian(s, q, T), delta=dlt), rel=1e-12)
    assert c[49] == pytest.approx(A.epsilon(A.PoissonSubsampledGaussian(s, q, 50), delta=dlt), rel=1e-12)
    # q = 1 falls back to the exact full-batch curve
    full = A.dpsgd_privacy_curve(noise_multiplier=s, sample_rate=1.0, steps=20, delta=dlt)
    np.testing.assert_array_equal(full, A.privacy_curve(noise_multiplier=s, steps=20, delta=dlt))


def test_dpsgd_curve_with_points_is_an_upper_bound():
    s, q, T, dlt = 1.2, 0.02, 400, 1e-5
    every = A.dpsgd_privacy_curve(noise_multiplier=s, sample_rate=q, steps=T, delta=dlt)
    coarse = A.dpsgd_privacy_curve(noise_multiplier=s, sample_rate=q, steps=T, delta=dlt, points=7)
    assert coarse.shape == (T,)
    assert np.all(coarse >= every - 1e-12)
    assert coarse[-1] == pytest.approx(every[-1])
    assert len(np.unique(coarse)) <= 7


def test_dpsgd_curve_pld_points():
    s, q, T, dlt = 1.5, 0.05, 60, 1e-5
    c = A.dpsgd_privacy_curve(noise_multiplier=s, sample_rate=q, steps=T, delta=dlt, accountant="pld", points=2)
    assert c.shape == (T,)
    assert c[-1] == pytest.approx(A.epsilon(A.PoissonSubsampledGaussian(s, q, T), delta=dlt, accountant="pld"))
    assert c[-1] <= A.epsilon(A.PoissonSubsampledGaussian(s, q, T), delta=dlt)  # PLD tighter than RDP


def test_pdp_always_clipped_equals_run_epsilon_and_below_clip_is_lower():
    sigma, T, dlt = 10.0, 120, 1e-5
    run_eps = A.epsilon(A.ComposedGaussian(sigma, T), delta=dlt)
    rng = np.random.default_rng(0)
    norms = rng.uniform(0, 3.0, size=(T, 5))  # 5 samples, clip norm 1
    norms[:, 0] = 5.0  # always clipped
    norms[:, 1] = 0.5  # always below the clip
    norms[:, 4] = 0.0  # contributes nothing
    sum_sq = sum(A.pdp_ratio_sq(norms[t], clip_norm=1.0) for t in range(T))
    eps_i = A.pdp_epsilon(sum_sq, noise_multiplier=sigma, delta=dlt)
    assert eps_i.shape == (5,)
    assert eps_i[0] == pytest.approx(run_eps, rel=1e-12)
    assert eps_i[1] < run_eps and eps_i[1] == pytest.approx(A.epsilon(A.ComposedGaussian(sigma / 0.5, T), delta=dlt))
    assert eps_i[4] == 0.0
    assert np.all(eps_i <= run_eps * (1 + 1e-12))


def test_pdp_vectorized_speed():
    rng = np.random.default_rng(1)
    sq = rng.uniform(0, 400, size=100_000)
    t = time.perf_counter()
    eps = A.pdp_epsilon(sq, noise_multiplier=10.0, delta=1e-5)
    assert time.perf_counter() - t < 2.0  # ~0.2 s
    assert eps.shape == sq.shape and np.all(np.diff(eps[np.argsort(sq)]) >= 0)
    assert A.pdp_epsilon(np.zeros((2, 3)), noise_multiplier=1.0, delta=1e-5).shape == (2, 3)
    assert float(A.pdp_epsilon(np.array(4.0), noise_multiplier=2.0, delta=1e-5)) == pytest.approx(
        A.gaussian_epsilon(1.0, delta=1e-5)
    )
    assert math.isfinite(eps.max())


def test_per_instance_epsilon_never_exceeds_the_runs_at_a_large_budget(monkeypatch):
    """At σ = 0.06 (ε ≈ 1,000) a row's PLD profile was inf (dp-accounting's own answer there) and
    its RDP bound 12,961 beside the run's 980: every ratio is at most 1, so the run's own ε caps
    every row. (The real case takes minutes of PLD at that σ: the two bounds are stubbed to what
    they returned.)"""
    from mixdp_core.accounting.pdp import SubsampledGaussianPDP

    q, s, T = 0.02, 1.0, 50
    acc = SubsampledGaussianPDP(3, sample_rate=q, noise_multiplier=s)
    acc.add_steps(np.random.default_rng(0).uniform(0.0, 1.0, size=(3, T)))
    run = A.epsilon(A.PoissonSubsampledGaussian(s, q, T), delta=1e-5, accountant="pld")
    monkeypatch.setattr(SubsampledGaussianPDP, "_pld_epsilon", lambda self, d, **k: np.array([np.inf, 0.5, np.inf]))
    monkeypatch.setattr(SubsampledGaussianPDP, "_rdp_epsilon", lambda self, d, **k: np.array([12961.0, 0.7, 0.4]))
    eps = acc.epsilon(delta=1e-5, accountant="pld")
    assert eps.tolist() == pytest.approx([run, 0.5, 0.4])


@pytest.mark.parametrize("accountant", ["rdp", "pld", "prv"])
def test_full_batch_dpsgd_is_the_exact_gaussian_for_every_accountant(accountant):
    """At q = 1 every step is a Gaussian: the run calibrates and reports the closed form
    ε(√T/σ), so its curve and every row's ε_i must too, whatever accountant it names (with RDP
    a review found the last step record and pDP at 1.09 beside a reported 1.00). A row clipped
    at ratio r at every step is exactly (r√T/σ)-GDP."""
    from mixdp_core.accounting import gaussian_epsilon
    from mixdp_core.accounting.curves import dpsgd_epsilon
    from mixdp_core.accounting.pdp import SubsampledGaussianPDP

    sigma, T, d = 11.797, 10, 1e-5
    exact = float(gaussian_epsilon(np.sqrt(T) / sigma, delta=d))
    assert dpsgd_epsilon(noise_multiplier=sigma, sample_rate=1.0, steps=T, delta=d, accountant=accountant) == \
        pytest.approx(exact, rel=1e-12)
    acc = SubsampledGaussianPDP(3, sample_rate=1.0, noise_multiplier=sigma)
    acc.add(np.array([1.0, 0.5, 0.0]), steps=T)
    eps = acc.epsilon(delta=d, accountant=accountant)
    assert eps[0] == pytest.approx(exact, rel=1e-12) and eps.max() <= exact
    assert eps[1] == pytest.approx(float(gaussian_epsilon(0.5 * np.sqrt(T) / sigma, delta=d)), rel=1e-12)
    assert eps[2] == 0.0
