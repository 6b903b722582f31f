"""Private selection accounting (Papernot & Steinke 2022, Thm. 2) against independent math."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mixdp_core import accounting
from mixdp_core.accounting import selection as S


@pytest.mark.parametrize("eta,gamma", [(1.0, 0.1), (0.0, 0.2), (0.5, 0.05), (2.0, 0.3), (-0.5, 0.1), (-0.9, 0.3)])
def test_tnb_pmf_sums_to_one_and_mean_matches_closed_form(eta, gamma):
    """η in (−1, 0) too (Papernot & Steinke allow it): Γ(η) < 0 there, and every probability
    was negative until the signs were kept."""
    k = np.arange(1, 20000)
    p = S.tnb_pmf(k, eta, gamma)
    assert np.all(p >= 0)
    assert p.sum() == pytest.approx(1.0, abs=1e-9)
    assert (k * p).sum() == pytest.approx(S.tnb_expected_count(eta, gamma), rel=1e-7)


def test_geometric_case_is_liu_talwar():
    k = np.arange(1, 50)
    np.testing.assert_allclose(S.tnb_pmf(k, 1.0, 0.2), 0.2 * 0.8 ** (k - 1), rtol=1e-12)
    assert S.tnb_expected_count(1.0, 0.2) == pytest.approx(5.0)


@pytest.mark.parametrize("eta,gamma", [(1.0, 0.1), (0.5, 0.25), (-0.5, 0.25)])
def test_sampler_monte_carlo_mean(eta, gamma):
    rng = np.random.default_rng(0)
    draws = np.array([S.sample_tnb(rng, eta, gamma) for _ in range(1500)])
    m = S.tnb_expected_count(eta, gamma)
    se = draws.std() / math.sqrt(len(draws))
    assert draws.min() >= 1
    assert abs(draws.mean() - m) < 4 * se


@pytest.mark.parametrize("mu,eta,gamma", [(0.3, 1.0, 0.1), (0.1, 0.0, 0.2), (0.05, 1.0, 0.05)])
def test_gaussian_selection_rdp_matches_closed_form(mu, eta, gamma):
    # inner min over lh of (1+eta)((lh-1) mu^2/2 + L/lh) at lh* = sqrt(2L)/mu (>= 1 here)
    L = math.log(1 / gamma)
    assert math.sqrt(2 * L) / mu >= 1
    orders = np.array([1.5, 2.0, 8.0, 32.0])
    got = S.selection_rdp(lambda a: a * mu * mu / 2, orders, eta=eta, gamma=gamma)
    want = orders * mu**2 / 2 + (1 + eta) * (mu * math.sqrt(2 * L) - mu**2 / 2) + math.log(
        S.tnb_expected_count(eta, gamma)) / (orders - 1)
    np.testing.assert_allclose(got, want, rtol=1e-7)


def test_calibration_meets_budget_and_is_tight():
    mu = accounting.calibrate_selection_mu(target_epsilon=3.0, target_delta=1e-5, eta=1.0, gamma=0.1)
    assert accounting.selection_epsilon(mu, delta=1e-5, eta=1.0, gamma=0.1) <= 3.0
    assert accounting.selection_epsilon(mu * 1.001, delta=1e-5, eta=1.0, gamma=0.1) > 3.0
    # selection costs more than a single run at the same mu (which is (eps, delta) by GDP)
    single = accounting.epsilon(accounting.ComposedGaussian(noise_multiplier=1 / mu, steps=1), delta=1e-5)
    assert single < 3.0
    T = accounting.selection_steps(noise_multiplier=20.0, target_epsilon=3.0, target_delta=1e-5, eta=1.0, gamma=0.1)
    assert math.sqrt(T + 1) / 20.0 <= mu < math.sqrt(T + 2) / 20.0


def test_impossible_budget_raises():
    with pytest.raises(accounting.BudgetError):
        accounting.calibrate_selection_mu(target_epsilon=1e-4, target_delta=1e-5, eta=1.0, gamma=0.01)


def test_a_bad_selection_parameter_is_a_config_error_naming_it():
    """A damaged honest-tuning record's event raised a bare ValueError, which the ledger's
    damaged-record handling (ConfigError) did not catch: `mixdp budget` crashed."""
    from mixdp_core.accounting import event_from_dict
    from mixdp_core.errors import ConfigError

    base = {"type": "ComposedGaussian", "noise_multiplier": 1, "steps": 1}
    with pytest.raises(ConfigError, match="gamma: must lie in"):
        event_from_dict({"type": "PrivateSelection", "base": base, "eta": 1, "gamma": 2})
    with pytest.raises(ConfigError, match="eta: must be > -1"):
        event_from_dict({"type": "PrivateSelection", "base": base, "eta": -3, "gamma": 0.5})


def test_a_composition_holding_an_adaptive_part_is_accounted():
    """It raised TypeError ("no fixed RDP curve"): its pure first part adds basically, the rest
    composes, as the data-set ledger does."""
    import mixdp_core.accounting as A
    from mixdp_core.accounting.events import AdaptiveComposition, PureDP

    psg, g = A.PoissonSubsampledGaussian(1, 0.01, 100), A.ComposedGaussian(10, 10)
    c = A.Composition([AdaptiveComposition(PureDP(0.1), psg), g])
    assert A.epsilon(c, delta=1e-5) == pytest.approx(0.1 + A.epsilon(A.Composition([psg, g]), delta=1e-5))
    assert A.delta(c, epsilon=2.0) == pytest.approx(A.delta(A.Composition([psg, g]), epsilon=1.9))
