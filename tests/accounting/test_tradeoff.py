import math

import numpy as np
import pytest
from scipy.stats import norm

from mixdp_core import accounting
from mixdp_core.accounting.tradeoff import approx_dp_max_tpr, gdp_max_tpr, max_tpr, tradeoff_sentence


def test_gdp_curve_matches_independent_normal_formula():
    fpr = np.array([1e-3, 1e-2, 0.1, 0.5])
    for mu in (0.0, 0.5, 1.0, 3.0):
        # Dong et al. G_mu(alpha) = Phi(Phi^-1(1-alpha) - mu) is the type-II error: TPR = 1 - G_mu
        expected = 1 - norm.cdf(norm.ppf(1 - fpr) - mu)
        np.testing.assert_allclose(gdp_max_tpr(mu, fpr), expected, rtol=1e-10)
    np.testing.assert_allclose(gdp_max_tpr(0.0, fpr), fpr, rtol=1e-12)  # mu = 0: no better than guessing


def test_approx_dp_curve_values_and_symmetry():
    eps, delta = 1.0, 1e-5
    fpr = np.array([0.0, 0.01, 0.3, 0.9, 1.0])
    got = approx_dp_max_tpr(eps, delta, fpr)
    by_hand = [min(math.e * a + delta, 1 - math.exp(-1) * (1 - delta - a), 1.0) for a in fpr]
    np.testing.assert_allclose(got, by_hand, rtol=1e-12)
    assert got[0] == pytest.approx(delta) and got[-1] == pytest.approx(1.0)
    # eps = 0, delta = 0: the identity line
    np.testing.assert_allclose(approx_dp_max_tpr(0.0, 0.0, fpr), fpr, atol=1e-15)


def test_gdp_is_inside_its_own_epsilon_delta_curve():
    """mu-GDP implies (eps(delta), delta)-DP for every delta: the GDP curve lies below each."""
    mu = 1.2
    fpr = np.logspace(-5, 0, 60)
    for delta in (1e-6, 1e-4, 1e-2):
        eps = float(accounting.gaussian_epsilon(mu, delta=delta))
        assert np.all(gdp_max_tpr(mu, fpr) <= approx_dp_max_tpr(eps, delta, fpr) + 1e-9)


def test_max_tpr_uses_mu_when_present_and_sentence():
    rep = accounting.privacy_report(accounting.ComposedGaussian(noise_multiplier=20.0, steps=100), delta=1e-5)
    assert rep.mu is not None
    np.testing.assert_allclose(max_tpr(rep, 0.01), gdp_max_tpr(rep.mu, 0.01))
    assert float(max_tpr(None, 0.01)) == 1.0
    s = tradeoff_sentence(rep, 0.01)
    assert "1 % false positives" in s and f"{100 * float(gdp_max_tpr(rep.mu, 0.01)):.1f} %" in s
