"""zCDP, pure-DP and RDP conversions; events, reports and input checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import mixdp_core.accounting as A
from mixdp_core.errors import ConfigError

FAST = settings(max_examples=60, deadline=None, database=None)
rhos = st.floats(min_value=1e-6, max_value=100.0)
deltas = st.floats(min_value=1e-14, max_value=0.5)


@FAST
@given(r1=rhos, r2=rhos, dlt=deltas)
def test_zcdp_conversions_monotone(r1, r2, dlt):
    lo, hi = sorted((r1, r2))
    for method in ("tight", "simple"):
        assert A.zcdp_to_epsilon(lo, delta=dlt, method=method) <= A.zcdp_to_epsilon(hi, delta=dlt, method=method) + 1e-9
    assert A.zcdp_to_epsilon(lo, delta=dlt) <= A.zcdp_to_epsilon(lo, delta=dlt, method="simple")


@FAST
@given(rho=rhos, d1=deltas, d2=deltas)
def test_zcdp_epsilon_decreasing_in_delta_and_inverse(rho, d1, d2):
    lo, hi = sorted((d1, d2))
    assert A.zcdp_to_epsilon(rho, delta=hi) <= A.zcdp_to_epsilon(rho, delta=lo) + 1e-9
    eps = A.zcdp_to_epsilon(rho, delta=lo)
    assert A.zcdp_to_delta(rho, epsilon=eps) <= lo * (1 + 1e-6)


def test_zcdp_simple_formula():
    assert A.zcdp_to_epsilon(0.5, delta=1e-5, method="simple") == pytest.approx(0.5 + 2 * math.sqrt(0.5 * math.log(1e5)))
    with pytest.raises(ConfigError, match="method"):
        A.zcdp_to_epsilon(0.5, delta=1e-5, method="loose")


def test_pure_to_zcdp_conventions_and_exponential_mechanism():
    assert A.pure_to_zcdp(2.0) == 2.0  # ε²/2: Bun & Steinke Prop. 1.4; DP-prototypes' comparison
    assert A.pure_to_zcdp(2.0, convention="tight") == 0.5  # ε²/8: bounded range (Cesar & Rogers)
    with pytest.raises(ConfigError, match="convention"):
        A.pure_to_zcdp(1.0, convention="other")
    assert A.zcdp_rho(A.PureDP(2.0)) == 2.0
    em = A.ExponentialMechanism(2.0, monotone=True, count=3)
    assert A.zcdp_rho(em) == pytest.approx(3 * 4 / 8)
    assert A.pure_epsilon(em) == 6.0
    assert em.utility_scale == 2.0 and A.ExponentialMechanism(2.0).utility_scale == 1.0
    # EM's (ε, δ): never above its pure ε, nor above its zCDP conversion
    e = A.epsilon(em, delta=1e-5)
    assert e <= 6.0 and e <= A.zcdp_to_epsilon(1.5, delta=1e-5) + 1e-12


@FAST
@given(e0=st.floats(0.01, 30.0), dlt=deltas)
@example(e0=19.0, dlt=5.960464477539063e-08)  # rounding once returned ε a few ulps too small
def test_pure_dp_profile_inverse(e0, dlt):
    eps = A.pure_dp_epsilon(e0, delta=dlt)
    assert 0 <= eps <= e0
    assert A.pure_dp_delta(e0, epsilon=eps) <= dlt * (1 + 1e-9) + 1e-15
    assert A.epsilon(A.PureDP(e0), delta=dlt) <= e0


def test_rdp_route_for_composition_with_dpsgd():
    dpsgd = A.PoissonSubsampledGaussian(1.0, 0.01, 100)
    comp = A.Composition([dpsgd, A.ExponentialMechanism(0.5)])
    assert A.zcdp_rho(comp) is None and A.gdp_mu(comp) is None
    rep = A.privacy_report(comp, delta=1e-5)
    assert rep.accountant == "rdp" and rep.epsilon > A.epsilon(dpsgd, delta=1e-5)
    d = A.delta(comp, epsilon=rep.epsilon)
    assert d <= 1e-5 * (1 + 1e-6)


def test_composition_flattening_and_additivity():
    g = [A.GaussianMechanism(2.0), A.GaussianMechanism(3.0, sensitivity=2.0)]
    comp = A.Composition(g)  # a list is accepted
    assert isinstance(comp.events, tuple)
    nested = A.Composition((A.Composition(g[:1]), g[1]))
    assert nested.events == comp.events
    assert A.gdp_mu(comp) == pytest.approx(math.sqrt(1 / 4 + 4 / 9))
    mixed = A.Composition([A.ZCDP(0.1), A.PureDP(0.5), A.ComposedGaussian(10.0, 20)])
    assert A.zcdp_rho(mixed) == pytest.approx(0.1 + 0.125 + 20 / 200)
    assert A.epsilon(mixed, delta=1e-6) <= A.zcdp_to_epsilon(A.zcdp_rho(mixed), delta=1e-6) + 1e-12
    with pytest.raises(ConfigError, match="events"):
        A.Composition([])
    with pytest.raises(ConfigError, match="events"):
        A.Composition([1.0])


def test_privacy_report_fields():
    rep = A.privacy_report(A.ComposedGaussian(10.0, 100), delta=1e-5)
    assert rep.accountant == "gdp" and rep.mu == pytest.approx(1.0) and rep.rho == pytest.approx(0.5)
    assert rep.pure_epsilon is None and rep.delta == 1e-5
    d = rep.to_dict()
    assert set(d) == {"epsilon", "delta", "mu", "rho", "pure_epsilon", "mechanism", "accountant", "event"}
    assert d["event"] == {"type": "ComposedGaussian", "noise_multiplier": 10.0, "steps": 100}
    assert d["epsilon"] == pytest.approx(A.gaussian_epsilon(1.0, delta=1e-5))
    assert "ComposedGaussian" in d["mechanism"]


@pytest.mark.parametrize(
    "make, field, text",
    [
        (lambda: A.GaussianMechanism(0.0), "noise_multiplier", "must be > 0"),
        (lambda: A.GaussianMechanism(-1.0), "noise_multiplier", "got -1.0"),
        (lambda: A.GaussianMechanism(1.0, sensitivity=0), "sensitivity", "must be > 0"),
        (lambda: A.ComposedGaussian(1.0, 0), "steps", "integer >= 1"),
        (lambda: A.ComposedGaussian(1.0, 2.5), "steps", "integer >= 1"),
        (lambda: A.PoissonSubsampledGaussian(1.0, 0.0, 10), "sample_rate", "(0, 1]"),
        (lambda: A.PoissonSubsampledGaussian(1.0, 1.5, 10), "sample_rate", "(0, 1]"),
        (lambda: A.ExponentialMechanism(-1), "epsilon", "must be > 0"),
        (lambda: A.ExponentialMechanism(1.0, count=0), "count", "integer >= 1"),
        (lambda: A.PureDP(0.0), "epsilon", "must be > 0"),
        (lambda: A.ZCDP(-0.1), "rho", "must be > 0"),
        (lambda: A.epsilon(A.PureDP(1.0), delta=0.0), "delta", "(0, 1)"),
        (lambda: A.epsilon(A.PureDP(1.0), delta=1.0), "delta", "(0, 1)"),
        (lambda: A.delta(A.PureDP(1.0), epsilon=-1), "epsilon", ">= 0"),
        (lambda: A.calibrate_steps(noise_multiplier=1.0, target_epsilon=-1, target_delta=1e-5), "target_epsilon", "> 0"),
        (lambda: A.calibrate_steps(noise_multiplier=0, target_epsilon=1, target_delta=1e-5), "noise_multiplier", "> 0"),
        (lambda: A.calibrate_noise(steps=0, target_epsilon=1, target_delta=1e-5), "steps", ">= 1"),
        (lambda: A.calibrate_noise(steps=1, target_epsilon=1, target_delta=2), "target_delta", "(0, 1)"),
        (lambda: A.calibrate_dpsgd_noise(sample_rate=0, steps=1, target_epsilon=1, target_delta=1e-5), "sample_rate", "(0, 1]"),
        (lambda: A.pdp_epsilon(np.array([1.0, -1.0]), noise_multiplier=1.0, delta=1e-5), "sum_sq_ratios", ">= 0"),
        (lambda: A.epsilon(A.PoissonSubsampledGaussian(1.0, 0.1, 5), delta=1e-5, accountant="zcdp"), "accountant", "zcdp"),
        (lambda: A.epsilon(A.ZCDP(1.0), delta=1e-5, accountant="prv"), "accountant", "prv"),
        (lambda: A.epsilon(A.ZCDP(1.0), delta=1e-5, accountant="magic"), "accountant", "one of"),
        (lambda: A.epsilon("not an event", delta=1e-5), "event", "accounting event"),
    ],
)
def test_input_checks_name_field_and_range(make, field, text):
    with pytest.raises(ConfigError) as info:
        make()
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert text in str(info.value)


def test_keyword_only_privacy_arguments():
    ev = A.ComposedGaussian(1.0, 1)
    with pytest.raises(TypeError):
        A.epsilon(ev, 1e-5)  # type: ignore[misc]
    with pytest.raises(TypeError):
        A.calibrate_steps(1.0, 1.0, 1e-5)  # type: ignore[misc]
    with pytest.raises(TypeError):
        A.gaussian_epsilon(1.0, 1e-5)  # type: ignore[misc]


def test_events_are_frozen_and_normalised():
    ev = A.ComposedGaussian(np.float32(2.0), np.int64(3))
    assert type(ev.noise_multiplier) is float and type(ev.steps) is int
    with pytest.raises(Exception):
        ev.steps = 4  # type: ignore[misc]
    assert A.ComposedGaussian(1.0, 3.0).steps == 3


def test_docstring_examples():
    import doctest

    from mixdp_core.accounting import accountant, calibration, gaussian

    for mod in (gaussian, calibration, accountant):
        res = doctest.testmod(mod, extraglobs={"ComposedGaussian": A.ComposedGaussian})
        assert res.failed == 0 and res.attempted > 0, mod.__name__
