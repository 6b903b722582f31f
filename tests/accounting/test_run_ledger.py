"""The run ledger (mixdp_core/accounting/run_ledger.py): composition of recorded releases,
checked against independent closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from mixdp_core import accounting as A
from mixdp_core.accounting import PlanExceededError, RunLedger
from mixdp_core.accounting.events import PrivateSelection

DELTA = 1e-5


def _gdp_epsilon(mu: float, delta: float) -> float:
    """ε of μ-GDP at δ, solved here from Dong, Roth & Su's δ(ε) (independent of the package)."""
    f = lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - delta
    return brentq(f, 0.0, 100.0, xtol=1e-13)


def test_identical_gaussian_releases_compose_to_gdp():
    led = RunLedger(budget_epsilon=10.0, delta=DELTA)
    led.release(A.GaussianMechanism(noise_multiplier=8.0), what="count")
    for _ in range(40):
        led.release(A.GaussianMechanism(noise_multiplier=8.0), what="step")
    led.release(A.GaussianMechanism(noise_multiplier=4.0, sensitivity=0.5), what="guard")  # σ/Δ = 8: the same
    assert len(led) == 42 and len(led.releases) == 3
    assert led.event() == A.ComposedGaussian(noise_multiplier=8.0, steps=42)
    assert led.epsilon() == pytest.approx(_gdp_epsilon(math.sqrt(42) / 8.0, DELTA), rel=1e-8)


def test_mixed_noise_levels_add_mu_squared():
    led = RunLedger(budget_epsilon=10.0, delta=DELTA)
    for s in (3.0, 5.0, 5.0, 7.0):
        led.release(A.GaussianMechanism(noise_multiplier=s), what=f"s{s}")
    mu = math.sqrt(1 / 9 + 2 / 25 + 1 / 49)
    assert led.epsilon() == pytest.approx(_gdp_epsilon(mu, DELTA), rel=1e-8)


def test_dpsgd_steps_merge_and_the_count_comes_first_adaptively():
    led = RunLedger(budget_epsilon=10.0, delta=DELTA, accountant="rdp")
    led.release(A.PureDP(epsilon=0.02), what="count", chooses_next=True)
    led.release(A.PoissonSubsampledGaussian(1.1, 0.01, 1), what="step", count=300)
    led.release(A.PoissonSubsampledGaussian(1.1, 0.01, 1), what="step", count=200)
    ev = led.event()
    assert isinstance(ev, A.AdaptiveComposition)
    assert ev.then == A.PoissonSubsampledGaussian(1.1, 0.01, 500)
    steps_eps = A.epsilon(A.PoissonSubsampledGaussian(1.1, 0.01, 500), delta=DELTA, accountant="rdp")
    assert led.epsilon() == pytest.approx(0.02 + steps_eps, rel=1e-12)


def test_disjoint_branches_compose_in_parallel():
    led = RunLedger(budget_epsilon=10.0, delta=DELTA)
    led.release(A.GaussianMechanism(noise_multiplier=5.0), what="train", count=16, branch="a")
    led.release(A.GaussianMechanism(noise_multiplier=2.0), what="hold", count=2, branch="b")  # μ = √2/2 < 4/5
    assert led.event() == A.ComposedGaussian(noise_multiplier=5.0, steps=16)
    led.release(A.GaussianMechanism(noise_multiplier=1.0), what="hold", branch="b")  # now μ_b = √3 > 0.8
    assert led.epsilon() == pytest.approx(_gdp_epsilon(math.sqrt(2 / 4 + 1), DELTA), rel=1e-8)
    led.release(A.PureDP(epsilon=0.1), what="pure", branch="c")
    with pytest.raises(A.AccountingError, match="parallel"):
        led.event()


def test_check_refuses_more_than_the_plan():
    plan = A.ComposedGaussian(noise_multiplier=10.0, steps=50)
    led = RunLedger(budget_epsilon=100.0, delta=DELTA, plan=plan)
    led.release(A.GaussianMechanism(noise_multiplier=10.0), what="step", count=50)
    assert led.check() == pytest.approx(A.epsilon(plan, delta=DELTA), rel=1e-12)
    led.release(A.GaussianMechanism(noise_multiplier=10.0), what="extra")
    with pytest.raises(PlanExceededError, match="more than its plan"):
        led.check()
    # the budget binds too, with no plan
    led2 = RunLedger(budget_epsilon=1.0, delta=DELTA)
    led2.release(A.GaussianMechanism(noise_multiplier=1.0), what="x")
    with pytest.raises(PlanExceededError):
        led2.check()


def test_empty_ledger_reports_nothing():
    led = RunLedger(budget_epsilon=1.0, delta=DELTA)
    assert led.event() is None and led.report() is None and led.epsilon() == 0.0 and led.check() == 0.0


def test_private_selection_matches_the_gaussian_closed_form():
    """Papernot & Steinke Thm. 2 for a μ-GDP base: the inner minimum is
    (1 + η)(μ√(2 log 1/γ) − μ²/2) when lh* = √(2 log(1/γ))/μ ≥ 1 (the selection module's
    docstring); ε then follows from RDP → (ε, δ) over the package's orders."""
    mu, eta, gamma = 0.4, 1.0, 0.1
    sigma, T = 10.0, 16  # √16/10 = 0.4
    ev = PrivateSelection(base=A.ComposedGaussian(noise_multiplier=sigma, steps=T), eta=eta, gamma=gamma)
    orders = np.asarray(A.RDP_ORDERS, dtype=float)
    inner = (1 + eta) * (mu * math.sqrt(2 * math.log(1 / gamma)) - mu * mu / 2)
    ek = eta * (1 - gamma) / (gamma * (1 - gamma**eta))
    rdp = orders * mu * mu / 2 + inner + math.log(ek) / (orders - 1)
    np.testing.assert_allclose(ev._rdp(orders), rdp, rtol=1e-7)
    assert A.epsilon(ev, delta=DELTA) == pytest.approx(A.selection_epsilon(mu, delta=DELTA, eta=eta, gamma=gamma),
                                                       rel=1e-9)
    assert A.event_from_dict(A.event_to_dict(ev)) == ev
