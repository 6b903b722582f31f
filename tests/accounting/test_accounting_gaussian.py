"""Closed-form μ-GDP ↔ (ε, δ): identities, monotonicity, stability, speed."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import mixdp_core.accounting as A

FAST = settings(max_examples=80, deadline=None, database=None)

sigmas = st.floats(min_value=0.05, max_value=1e4, allow_nan=False)
mus = st.floats(min_value=1e-6, max_value=60.0, allow_nan=False)
deltas = st.floats(min_value=1e-14, max_value=0.5, allow_nan=False)
log_deltas = st.floats(min_value=-300.0, max_value=-1.0)


@FAST
@given(mu=mus, dlt=deltas)
def test_epsilon_is_tight_inverse_of_delta(mu, dlt):
    eps = A.gaussian_epsilon(mu, delta=dlt)
    assert eps >= 0
    assert A.gaussian_delta(mu, eps) <= dlt  # never under-states ε
    if eps > 0:  # and is tight: a slightly smaller ε would violate δ
        assert A.gaussian_delta(mu, eps * (1 - 1e-7) - 1e-12) > dlt


@FAST
@given(mu=mus, ld=log_deltas)
def test_tiny_delta_is_stable(mu, ld):
    dlt = math.exp(ld)
    eps = A.gaussian_epsilon(mu, delta=dlt)
    assert math.isfinite(eps)
    assert A.gaussian_log_delta(mu, eps) <= ld + 1e-9
    # never above the simple zCDP bound μ²/2 + μ√(2 log 1/δ)
    assert eps <= mu * mu / 2 + mu * math.sqrt(-2 * ld) + 1e-9


@FAST
@given(s1=sigmas, s2=sigmas, dlt=deltas, T=st.integers(1, 10_000))
@example(s1=0.05, s2=0.05000000000000001, dlt=0.25, T=1)  # σ one ulp apart (found on CI)
def test_epsilon_decreasing_in_sigma(s1, s2, dlt, T):
    """ε is non-increasing in σ, up to the solver's stop rule (1e-12 relative, always rounding
    ε up): σ values a few ulps apart may swap at that precision."""
    lo, hi = sorted((s1, s2))
    e_lo = A.epsilon(A.ComposedGaussian(lo, T), delta=dlt)
    e_hi = A.epsilon(A.ComposedGaussian(hi, T), delta=dlt)
    assert e_lo >= e_hi * (1 - 1e-11)
    if hi > lo * (1 + 1e-9):  # σ meaningfully apart: strictly ordered
        assert e_lo >= e_hi


@FAST
@given(mu1=mus, mu2=mus, e1=st.floats(0, 50), e2=st.floats(0, 50))
def test_delta_monotone(mu1, mu2, e1, e2):
    m_lo, m_hi = sorted((mu1, mu2))
    e_lo, e_hi = sorted((e1, e2))
    assert A.gaussian_delta(m_lo, e_lo) <= A.gaussian_delta(m_hi, e_lo) + 1e-15
    assert A.gaussian_delta(m_lo, e_hi) <= A.gaussian_delta(m_lo, e_lo) + 1e-15


@FAST
@given(sigma=sigmas, T=st.integers(1, 100_000), dlt=deltas)
def test_T_steps_equal_one_gaussian_at_sigma_over_sqrt_T(sigma, T, dlt):
    composed = A.epsilon(A.ComposedGaussian(sigma, T), delta=dlt)
    single = A.epsilon(A.GaussianMechanism(sigma / math.sqrt(T)), delta=dlt)
    as_comp = A.epsilon(A.Composition([A.GaussianMechanism(sigma)] * min(T, 50)), delta=dlt)
    # equal up to the 1e-12 relative tolerance of the ε solver (μ is rounded differently)
    assert composed == pytest.approx(single, rel=1e-10, abs=1e-15)
    assert as_comp == pytest.approx(A.epsilon(A.ComposedGaussian(sigma, min(T, 50)), delta=dlt), rel=1e-10, abs=1e-15)
    # q = 1 DP-SGD is full-batch NoisyGD
    assert A.epsilon(A.PoissonSubsampledGaussian(sigma, 1.0, T), delta=dlt) == composed


@FAST
@given(sigma=sigmas, T=st.integers(1, 10_000), dlt=deltas)
def test_exact_beats_zcdp_beats_simple(sigma, T, dlt):
    ev = A.ComposedGaussian(sigma, T)
    rho = A.zcdp_rho(ev)
    assert rho == pytest.approx(T / (2 * sigma**2))
    assert A.gdp_mu(ev) == pytest.approx(math.sqrt(T) / sigma)
    exact = A.epsilon(ev, delta=dlt)
    tight = A.zcdp_to_epsilon(rho, delta=dlt)
    simple = A.zcdp_to_epsilon(rho, delta=dlt, method="simple")
    assert exact <= tight * (1 + 1e-9) + 1e-12
    assert tight <= simple * (1 + 1e-12)
    assert A.epsilon(ev, delta=dlt, accountant="zcdp") == pytest.approx(tight)
    assert A.epsilon(ev, delta=dlt, accountant="rdp") >= exact * (1 - 1e-9)


def test_edge_values():
    assert A.gaussian_epsilon(0.0, delta=1e-5) == 0.0
    assert A.gaussian_epsilon(math.inf, delta=1e-5) == math.inf
    assert A.gaussian_delta(0.0, 0.0) == 0.0
    assert A.gaussian_delta(math.inf, 3.0) == 1.0
    assert A.gaussian_delta(1.0, math.inf) == 0.0
    # δ(0) = 2Φ(μ/2) − 1 ≤ δ  ⇒  ε = 0
    assert A.gaussian_epsilon(1e-6, delta=1e-3) == 0.0
    # large μ and ε stay finite and consistent
    assert A.gaussian_delta(100.0, 5000.0) == pytest.approx(0.5, abs=0.01)  # ε = μ²/2 is the median loss
    # δ far below the float range stays finite in log space: log Φ(−50) − log(1 − ratio)
    ld = A.gaussian_log_delta(100.0, 10000.0)
    assert -1260 < ld < -1250 and A.gaussian_delta(100.0, 10000.0) == 0.0
    eps = A.gaussian_epsilon(200.0, delta=1e-10)
    assert 2e4 < eps < 2.2e4 and A.gaussian_delta(200.0, eps) <= 1e-10


def test_vectorized_shapes_and_speed():
    rng = np.random.default_rng(0)
    mu = rng.uniform(0, 5, size=(100_000,))
    t = time.perf_counter()
    eps = A.gaussian_epsilon(mu, delta=1e-5)
    elapsed = time.perf_counter() - t
    assert eps.shape == mu.shape and elapsed < 2.0  # ~0.2 s; generous for a shared machine
    assert np.all(A.gaussian_delta(mu, eps) <= 1e-5)
    grid = A.gaussian_delta(mu[:6].reshape(2, 3), np.array([0.5, 1.0, 2.0]))
    assert grid.shape == (2, 3)
    assert isinstance(A.gaussian_epsilon(1.0, delta=1e-5), float)
    assert isinstance(A.gaussian_delta(1.0, 1.0), float)


def test_gdp_mu_for_budget_is_largest():
    for eps, dlt in [(0.1, 1e-6), (1.0, 1e-5), (8.0, 1e-9), (50.0, 1e-5)]:
        mu = A.gdp_mu_for_budget(epsilon=eps, delta=dlt)
        assert A.gaussian_delta(mu, eps) <= dlt
        assert A.gaussian_delta(mu * (1 + 1e-9), eps) > dlt
