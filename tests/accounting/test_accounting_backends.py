"""The PLD backend (:mod:`mixdp_core.accounting.backends`) against dp-accounting's own
construction: the vectorized hockey-stick divergences must give the library's PMF and ε
exactly (same formulas), so that "tightest sound accountant" stays the library's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixdp_core.accounting import backends as B


def _library(blocks, interval):
    from dp_accounting.pld import PLDAccountant

    acc = PLDAccountant(value_discretization_interval=interval)
    acc.compose(B._pld_event(blocks))
    return acc


@pytest.mark.parametrize("sigma,q", [(1.0, 0.05), (0.7, 0.5), (3.0, 1.0), (0.55, 0.999), (4.0, 0.001)])
def test_one_step_pld_is_the_library_pmf(sigma, q):
    from dp_accounting.pld import privacy_loss_distribution as P

    lib = P.from_gaussian_mechanism(sigma, sensitivity=1.0, sampling_prob=q, value_discretization_interval=1e-3)
    B._gaussian_pld.cache_clear()
    ours = B._gaussian_pld(sigma, q, 1e-3)
    for a, b in ((lib._pmf_remove, ours._pmf_remove), (lib._pmf_add, ours._pmf_add)):
        assert type(a) is type(b) and a._infinity_mass == b._infinity_mass
        if hasattr(a, "_loss_probs"):  # sparse: few losses (a large sigma at a small q)
            assert a._loss_probs == b._loss_probs
        else:
            assert a._lower_loss == b._lower_loss
            np.testing.assert_array_equal(a._probs, b._probs)


@pytest.mark.parametrize("sigma,q,t,interval", [(1.0, 0.05, 100, 1e-4), (1.1, 0.004, 600, 1e-3), (0.8, 0.1, 1, 1e-3),
                                                  (4.0, 0.001, 2, 1e-3), (4.0, 0.001, 40, 1e-3), (3.0, 1.0, 7, 1e-3),
                                                  (20.0, 0.9, 2, 1e-2)])
def test_self_composition_is_the_library_pmf(sigma, q, t, interval):
    """Dense and sparse PMFs (a sparse one small enough to stay sparse, and one that turns
    dense), one and many compositions: the same arrays, offsets and infinity masses."""
    pld = B._gaussian_pld(sigma, q, interval)
    lib, ours = pld.self_compose(t), B._self_compose(pld, t)
    assert lib._symmetric == ours._symmetric
    for a, b in ((lib._pmf_remove, ours._pmf_remove), (lib._pmf_add, ours._pmf_add)):
        assert type(a) is type(b) and a._infinity_mass == b._infinity_mass
        if hasattr(a, "_loss_probs"):
            assert a._loss_probs == b._loss_probs
        else:
            assert a._lower_loss == b._lower_loss
            np.testing.assert_array_equal(a._probs, b._probs)


@settings(max_examples=30, deadline=None)
@given(probs=st.lists(st.one_of(st.just(0.0), st.floats(1e-300, 1.0)), min_size=1, max_size=300),
       k=st.integers(1, 20), sign=st.sampled_from([-1, 1]))
def test_log_mgf_is_scipys_logsumexp(probs, k, sign):
    """The Chernoff bounds' log-MGF equals SciPy's ``logsumexp(arange(n) * order, b=probs)``
    bit for bit (zero weights, ties, underflow included), so the truncation is the library's."""
    from scipy import special

    b = np.asarray(probs, dtype=np.float64)
    order = sign * k / len(b)
    with np.errstate(divide="ignore"):
        want = float(special.logsumexp(np.arange(len(b)) * order, b=b))
    got = B._log_mgf(b, order)
    assert got == want or (math.isnan(got) and math.isnan(want))


@settings(max_examples=8, deadline=None)
@given(sigma=st.floats(0.5, 8.0), q=st.floats(0.002, 1.0), t=st.integers(1, 400), delta=st.sampled_from([1e-5, 1e-6]))
def test_composed_epsilon_and_delta_equal_the_library_accountant(sigma, q, t, delta):
    blocks = [(sigma, q, t), (20.0, 1.0, 3)]  # a DP-SGD run and three full-batch releases
    lib = _library(blocks, 1e-3)
    ours = B._pld(blocks, 1e-3)
    assert ours.get_epsilon_for_delta(delta) == lib.get_epsilon(delta)
    assert ours.get_delta_for_epsilon(1.0) == lib.get_delta(1.0)


def test_reported_epsilon_is_the_library_value_at_the_default_interval():
    blocks = ((2.0, 0.02, 300),)
    assert B.pld_epsilon(blocks, delta=1e-5) == _library(blocks, B.PLD_INTERVAL).get_epsilon(1e-5)
    assert B.pld_delta(blocks, epsilon=1.0) == _library(blocks, B.PLD_INTERVAL).get_delta(1.0)


def test_no_noise_is_not_private_and_empty_blocks_are_skipped():
    assert B.pld_epsilon(((0.0, 0.1, 5),), delta=1e-5) == math.inf
    assert B.pld_delta(((0.0, 0.1, 5),), epsilon=1.0) == 1.0
    one = B.pld_epsilon(((1.0, 0.1, 50),), delta=1e-5)
    assert B.pld_epsilon(((1.0, 0.1, 50), (2.0, 0.0, 9), (2.0, 0.3, 0)), delta=1e-5) == one


def test_a_composition_with_pure_parts_reports_the_tightest_sound_bound():
    """Σ pure ε + the rest's exact ε (basic composition, sound) beat one RDP curve of the
    whole; the default reports the smaller of the two, and says which."""
    import mixdp_core.accounting as A

    g = A.GaussianMechanism(noise_multiplier=3.0)
    ev = A.Composition([A.PureDP(0.5), g])
    eps, used = A.epsilon_and_accountant(ev, delta=1e-5)
    basic = 0.5 + A.epsilon(g, delta=1e-5)
    assert eps == pytest.approx(basic, rel=1e-12) and used.startswith("basic(pure)+")
    assert eps < A.epsilon(ev, delta=1e-5, accountant="rdp")
    # where RDP of the whole is tighter (many pure parts' ε² add up in zCDP), RDP stays
    many = A.Composition([A.PureDP(0.05)] * 40 + [g])
    assert A.epsilon(many, delta=1e-5) <= 40 * 0.05 + A.epsilon(g, delta=1e-5)


def test_an_accountant_out_of_memory_is_a_one_line_accounting_error(monkeypatch):
    """At a tiny σ the PRV grid asked for 84 GiB: std::bad_alloc came out as a MemoryError
    traceback; it is an AccountingError naming the accountant and the way out."""
    from opacus.accountants import PRVAccountant

    from mixdp_core.accounting import backends
    from mixdp_core.errors import AccountingError

    def oom(self, **kw):
        raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(PRVAccountant, "get_epsilon", oom)
    backends._prv_epsilon.cache_clear()
    with pytest.raises(AccountingError, match="accountant 'prv' .* MemoryError; use accountant='rdp' or 'pld'"):
        backends._prv_epsilon(((0.065, 0.01, 100),), 1e-5, 0.01)
    backends._prv_epsilon.cache_clear()


def test_a_privacy_profile_builds_its_pld_once(monkeypatch):
    """δ(ε) at many ε of one composition (an audit's claimed curve asks 49) composed the PLD
    again at every ε: 26 s of a 29 s audit. It is built once and every δ is the library's."""
    blocks = ((1.1, 0.05, 40),)
    calls = []
    real = B._pld
    monkeypatch.setattr(B, "_pld", lambda b, i=B.PLD_INTERVAL: calls.append(b) or real(b, i))
    B._pld_cached.cache_clear()
    eps = [0.0, 0.5, 1.0, 2.0, 4.0]
    ours = [B.pld_delta(blocks, epsilon=e) for e in eps]
    assert len(calls) == 1
    lib = _library(blocks, B.PLD_INTERVAL)
    np.testing.assert_allclose(ours, [min(1.0, lib.get_delta(e)) for e in eps], rtol=1e-9, atol=0)
    B._pld_cached.cache_clear()


def test_prv_does_not_refine_an_epsilon_already_at_zero(monkeypatch):
    """Opacus' PRV upper end below 0 (large δ) is reported as ε = 0, which is exact; refining
    its error down to PRV_MIN_ERROR took 39 s for the same 0. One estimate is made."""
    calls = []
    real = B._prv_epsilon.__wrapped__
    monkeypatch.setattr(B, "_prv_epsilon", lambda *a: calls.append(a) or real(*a))
    assert B.prv_epsilon(((1.5, 0.05, 200),), delta=0.5) == 0.0
    assert len(calls) == 1
