"""Thin, lazily imported wrappers around the numerical accountants of Opacus and dp-accounting.

This is the only place in MixDP Explorer that touches ``opacus.accountants`` or
``dp_accounting`` (autodp is used by the tests and the benchmark to confirm the closed
forms of :mod:`.gaussian`). Imports happen on first use, so ``import mixdp_core.accounting``
stays cheap (Opacus pulls in torch).

* RDP of the Poisson-subsampled Gaussian: Opacus ``compute_rdp`` (Mironov, Talwar & Zhang
  2019, "Rényi DP of the Sampled Gaussian Mechanism"), cached per (q, σ, α); loaded
  without importing torch (see :func:`_load_opacus_rdp`).
* PRV: Opacus ``PRVAccountant`` (Gopi, Lee & Wutschitz 2021, "Numerical composition of
  differential privacy"); ``get_epsilon`` returns the *upper* end of its error interval.
* PLD: dp-accounting's privacy loss distributions (Koskela et al. 2020; Doroshenko et al.
  2022, "Connect the dots") with its default pessimistic discretisation, i.e. an upper bound,
  composed as its ``PLDAccountant`` composes the run's ``DpEvent``. One step's PLD is built
  from the library's privacy loss, bounds and PMF constructor with the grid's hockey-stick
  divergences vectorized (:func:`_gaussian_pld`; 2-3x faster, the same PMF and ε to the
  bit, tested against the library's own construction), and self-composed as the library
  does with its Chernoff truncation bounds computed without SciPy's ``logsumexp`` dispatch
  (:func:`_self_compose`; the same PMF to the bit, 1.3x faster at the reported interval
  1e-4 and 1.7-2x at the calibration search's 1e-3: ``benchmarks/accounting.py``).

All use the add/remove-one-sample neighbouring relation.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import math
import sys
import threading
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from .conversions import RDP_ORDERS
from .errors import AccountingError

#: ``(noise_multiplier, sample_rate, steps)``: one homogeneous block of a DP-SGD run.
Block = tuple[float, float, int]


def _load_opacus_rdp():
    """Opacus' ``opacus/accountants/analysis/rdp.py`` (pure numpy/scipy).

    ``import opacus`` imports torch (5–10 s). The RDP analysis file itself needs only numpy
    and scipy, so it is loaded directly from the installed Opacus package when possible;
    if that fails (layout changed), the regular import is used.
    """
    name = "opacus.accountants.analysis.rdp"
    if name in sys.modules:
        return sys.modules[name]
    try:
        spec = importlib.util.find_spec("opacus")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("opacus not found")
        path = Path(list(spec.submodule_search_locations)[0]) / "accountants" / "analysis" / "rdp.py"
        fspec = importlib.util.spec_from_file_location("mixdp_core.accounting._opacus_rdp", path)
        if fspec is None or fspec.loader is None:
            raise ImportError(str(path))
        mod = importlib.util.module_from_spec(fspec)
        fspec.loader.exec_module(mod)
        return mod
    except Exception:  # pragma: no cover - fall back to the normal (slow) import
        return importlib.import_module(name)


@functools.lru_cache(maxsize=1)
def _opacus_rdp():
    return _load_opacus_rdp()


_RDP_CACHE: "OrderedDict[tuple[float, float], dict[float, float]]" = OrderedDict()
_RDP_CACHE_SIZE = 2048
_RDP_LOCK = threading.Lock()


def subsampled_gaussian_rdp(
    sample_rate: float, noise_multiplier: float, orders: Optional[Sequence[float]] = None
) -> np.ndarray:
    """RDP ``τ(α)`` of one Poisson-subsampled Gaussian step (Opacus ``compute_rdp``).

    Values are cached per (q, σ, α): Opacus' series for fractional α is slow (milliseconds to
    seconds per order when q or σ is large), so callers ask only for the orders they need
    (see :func:`~.conversions.lazy_rdp_epsilon`).

    Args:
        sample_rate: q in (0, 1]; for q = 1 this is the Gaussian's α/(2σ²).
        noise_multiplier: σ > 0.
        orders: RDP orders (default :data:`~.conversions.RDP_ORDERS`).
    """
    orders = RDP_ORDERS if orders is None else tuple(float(a) for a in orders)
    if sample_rate == 1.0:
        return np.asarray(orders, dtype=np.float64) / (2.0 * noise_multiplier**2)
    key = (float(sample_rate), float(noise_multiplier))
    with _RDP_LOCK:  # the app runs jobs in threads
        known = _RDP_CACHE.get(key)
        if known is None:
            known = _RDP_CACHE[key] = {}
            if len(_RDP_CACHE) > _RDP_CACHE_SIZE:
                _RDP_CACHE.popitem(last=False)
        else:
            _RDP_CACHE.move_to_end(key)
        missing = sorted({a for a in orders if a not in known})
    if missing:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            vals = _opacus_rdp().compute_rdp(q=key[0], noise_multiplier=key[1], steps=1, orders=missing)
        with _RDP_LOCK:
            known.update(zip(missing, (float(v) for v in np.atleast_1d(vals))))
    return np.asarray([known[a] for a in orders], dtype=np.float64)


def _key(blocks: Sequence[Block]) -> tuple:
    return tuple((float(s), float(q), int(t)) for s, q, t in blocks)


#: The PRV estimate's error: at most this (absolute), and at most this share of the estimate
#: (refined, down to PRV_MIN_ERROR). A fixed 0.01 made the reported upper end twice the true ε at
#: ε = 0.01, and calibration asked for 5x the noise PLD needs there, then refused at ε = 0.005.
PRV_ERROR, PRV_RELATIVE_ERROR, PRV_MIN_ERROR = 0.01, 0.01, 1e-5


def prv_epsilon(blocks: Sequence[Block], *, delta: float, eps_error: float | None = None) -> float:
    """ε at δ from Opacus' PRV accountant: the upper end of its ±``eps_error`` interval (an upper
    bound). ``eps_error=None``: :data:`PRV_ERROR`, refined (at most three times) until it is at
    most :data:`PRV_RELATIVE_ERROR` of the estimate or :data:`PRV_MIN_ERROR`."""
    key, d = _key(blocks), float(delta)
    if eps_error is not None:
        return _prv_epsilon(key, d, float(eps_error))
    err = PRV_ERROR
    e = _prv_epsilon(key, d, err)
    for _ in range(3):
        if e == 0.0:
            # the interval's upper end is at or below 0 and ε >= 0: exact, and a finer estimate
            # (down to PRV_MIN_ERROR) cost 39 s for the same 0
            break
        want = max(PRV_RELATIVE_ERROR * e, PRV_MIN_ERROR)
        if want >= err:
            break
        err = want
        before, e = e, _prv_epsilon(key, d, err)
        # settled: another, finer and slower, step would move it by less than the error asked
        # (a review timed the third step at 17 s for a 0.4 % change)
        if abs(before - e) <= PRV_RELATIVE_ERROR * e:
            break
    return e


@functools.lru_cache(maxsize=1024)
def _prv_epsilon(blocks: tuple, delta: float, eps_error: float) -> float:
    from opacus.accountants import PRVAccountant

    acc = PRVAccountant()
    acc.history = [(float(s), float(q), int(t)) for s, q, t in blocks]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Opacus's PRV estimate goes below 0 at large δ; ε >= 0 by definition
            return max(0.0, float(acc.get_epsilon(delta=delta, eps_error=eps_error)))
    except (ValueError, RuntimeError, FloatingPointError, MemoryError) as exc:
        # MemoryError: at a tiny σ (ε near the top of its range) the PRV grid asked for 84 GiB
        # (std::bad_alloc, a traceback); a one-line error instead
        raise AccountingError(
            f"accountant 'prv' (Opacus) failed for {list(blocks)} at delta={delta}: "
            f"{type(exc).__name__ if isinstance(exc, MemoryError) else exc}; use accountant='rdp' or 'pld'"
        ) from None


def _pld_event(blocks: Sequence[Block]):
    """The run's composition as a dp-accounting ``DpEvent`` (what its ``PLDAccountant``
    composes; the tests' independent check of :func:`_pld`)."""
    import dp_accounting

    events = []
    for s, q, t in blocks:
        ev = dp_accounting.GaussianDpEvent(float(s))
        if q < 1.0:
            ev = dp_accounting.PoissonSampledDpEvent(float(q), ev)
        events.append(dp_accounting.SelfComposedDpEvent(ev, int(t)))
    return events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events)


#: dp-accounting's default PLD discretisation (the reported value).
PLD_INTERVAL = 1e-4
#: Coarser (still pessimistic, so still an upper bound) discretisation used inside
#: calibration searches: ~10x faster; ε larger by ~1e-4 relative at ε of a few, but by up to
#: ~60 % at ε = 0.1 over thousands of steps (calibration then refines on :data:`PLD_INTERVAL`).
PLD_SEARCH_INTERVAL = 1e-3


def _log_a_exp_b_plus_c(a: float, b: np.ndarray, c: float) -> np.ndarray:
    """``log(a exp(b) + c)`` for ``a > 0 > c`` and ``a exp(b) + c > 0``, elementwise: dp-accounting's
    ``common.log_a_times_exp_b_plus_c`` (its ``b == 0`` case and its ``_log_sub`` otherwise)."""
    d = b + np.log(a)
    out = d + np.log1p(-np.exp(np.log(-c) - d))
    return np.where(b == 0, np.log(a + c), out)


def _gaussian_hockey_stick(loss, sigma: float, eps: np.ndarray) -> np.ndarray:
    """``loss.get_delta_for_epsilon(eps)`` of a dp-accounting ``GaussianPrivacyLoss`` (sensitivity
    1, add or remove, sampling probability ``q``) with the inverse privacy loss computed for
    the whole grid at once. The library computes it one point at a time in Python (~10 µs a
    point, and a DP-SGD step's PLD at interval 1e-4 has 70,000-150,000 points: three quarters
    of an accounting's time, measured); the formulas are the library's own
    (``AdditiveNoisePrivacyLoss.get_delta_for_epsilon``, ``_inverse_privacy_loss_add`` /
    ``_remove``, ``GaussianPrivacyLoss._inverse_privacy_loss_without_subsampling_remove``)."""
    from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType

    q, var = float(loss.sampling_prob), float(sigma) ** 2
    eps = np.asarray(eps, dtype=np.float64)
    deltas = np.zeros_like(eps)
    remove = loss.adjacency_type == AdjacencyType.REMOVE
    if q == 1.0:
        idx = np.ones(eps.shape, dtype=bool)
    elif remove:
        idx = eps > math.log1p(-q)
        deltas[~idx] = -np.expm1(eps[~idx])
    else:  # ADD: the divergence is 0 from -log(1 - q) on
        idx = eps < -math.log1p(-q)
    e = eps[idx]
    if q == 1.0:
        loss0 = e  # no subsampling: the loss is the Gaussian's own
    else:
        edge = math.log(1.0 - q) if remove else -math.log(1.0 - q)
        close = np.abs(e - edge) <= 1e-9 * np.maximum(np.abs(e), abs(edge))  # math.isclose, as the library
        with np.errstate(divide="ignore", invalid="ignore"):
            loss0 = (_log_a_exp_b_plus_c(1.0 / q, e, 1.0 - 1.0 / q) if remove
                     else -_log_a_exp_b_plus_c(1.0 / q, -e, 1.0 - 1.0 / q))
        loss0 = np.where(close, -np.inf if remove else np.inf, loss0)
    x = -0.5 - loss0 * var  # the Gaussian's inverse loss for REMOVE (sensitivity 1)
    if not remove:
        x = 1.0 + x
    deltas[idx] = loss.mu_upper_cdf(x) - np.exp(e + loss.mu_lower_log_cdf(x))
    return np.clip(deltas, 0.0, 1.0)


@functools.lru_cache(maxsize=32)  # one step's PLD at interval 1e-4: up to a few MB
def _gaussian_pld(sigma: float, q: float, interval: float):
    """dp-accounting's ``privacy_loss_distribution.from_gaussian_mechanism(sigma, sensitivity=1,
    sampling_prob=q, value_discretization_interval=interval)`` (its defaults: pessimistic
    connect-the-dots discretisation, add/remove, log-mass truncation -50), built from the
    library's own privacy loss, connect-the-dots bounds and PMF, with the grid's hockey-stick
    divergences computed at once (:func:`_gaussian_hockey_stick`). The tests compare the PMF
    and the ε with the library's construction. Cached: a calibration search and the
    per-instance profiles reuse one step's PLD."""
    from dp_accounting.pld import pld_pmf, privacy_loss_distribution as P
    from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss

    def pmf(adjacency):
        loss = GaussianPrivacyLoss(sigma, sensitivity=1.0, pessimistic_estimate=True, log_mass_truncation_bound=-50,
                                   sampling_prob=q, adjacency_type=adjacency)
        bounds = loss.connect_dots_bounds()
        lo = math.floor(bounds.epsilon_lower / interval)
        hi = math.ceil(bounds.epsilon_upper / interval)
        deltas = _gaussian_hockey_stick(loss, sigma, np.arange(lo, hi + 1) * interval)
        return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(interval, lo, hi, deltas)

    remove = pmf(AdjacencyType.REMOVE)
    return P.PrivacyLossDistribution(remove) if q == 1.0 else P.PrivacyLossDistribution(remove, pmf(AdjacencyType.ADD))


def _log_mgf(b: np.ndarray, order: float) -> float:
    """``scipy.special.logsumexp(arange(len(b)) * order, b=b)`` for a PMF ``b >= 0`` with the
    same arithmetic as SciPy's (zero weights dropped, the largest term split off, ``log1p``),
    without its array-API dispatch (~0.1 ms of overhead a call; a self-composition makes 40)."""
    a = np.arange(b.size) * order
    a[b == 0] = -np.inf
    a_max = a.max()
    top = a == a_max
    m = float(np.sum(b * top))
    a[top] = -np.inf
    out = -math.inf
    if m > 0:  # else every weight is zero: the direct sum below gives log(0)
        with np.errstate(invalid="ignore"):
            s = float(np.sum(b * np.exp(a - a_max)))
        # NumPy's log1p / log on 1-element arrays, as SciPy: libm's may differ in the last bit
        out = float((np.log1p(np.array([s if s == 0 else s / m])) + np.log(np.array([m])) + a_max)[0])
    if not math.isfinite(out):  # as SciPy: the direct sum decides the infinite cases
        with np.errstate(divide="ignore", over="ignore"):
            out = float(np.log(np.sum(b * np.exp(np.arange(b.size) * order))))
    return out


def _self_convolve_bounds(probs: np.ndarray, num_times: int, tail_mass_truncation: float) -> tuple[int, int]:
    """dp-accounting's ``common.compute_self_convolve_bounds`` (Chernoff bounds at its 40
    orders ±1..20 / len) with :func:`_log_mgf` for its per-order ``logsumexp``."""
    upper, lower = (len(probs) - 1) * num_times, 0
    if tail_mass_truncation == 0:
        return lower, upper
    orders = np.concatenate((np.arange(-20, 0), np.arange(1, 21))) / len(probs)
    for order in orders:
        bound = (num_times * _log_mgf(probs, float(order)) + math.log(2 / tail_mass_truncation)) / order
        if not math.isfinite(bound):
            continue
        if order > 0:
            upper = min(upper, math.ceil(bound))
        if order < 0:
            lower = max(lower, math.floor(bound))
    return lower, upper


def _self_compose(pld, num_times: int, tail_mass_truncation: float = 1e-15):
    """``pld.self_compose(num_times)`` of a dp-accounting ``PrivacyLossDistribution``: the
    library's ``DensePLDPmf.self_compose`` / ``common.self_convolve`` (FFT power, Chernoff
    truncation, infinity mass) with the truncation bounds of :func:`_self_convolve_bounds`.
    SciPy's ``logsumexp`` dispatch was a fifth of a self-composition at interval 1e-4 and
    about half at the calibration search's 1e-3, and self-compositions run in every DP-SGD
    calibration and per-instance profile. Sparse PMFs small enough to stay sparse are composed
    by the library. The tests compare the PMFs with the library's."""
    from dp_accounting.pld import pld_pmf, privacy_loss_distribution as P
    from scipy import fft

    def pmf(x):
        if isinstance(x, pld_pmf.SparsePLDPmf):
            if num_times == 1 or x.size ** num_times <= pld_pmf._MAX_PMF_SPARSE_SIZE:
                return x.self_compose(num_times, tail_mass_truncation)
            x = x.to_dense_pmf()
        probs = x._probs
        lo, hi = _self_convolve_bounds(probs, num_times, tail_mass_truncation)
        n_out = hi - lo + 1
        n_fft = fft.next_fast_len(max(n_out, len(probs)))
        out = np.roll(np.real(fft.ifft(fft.fft(probs, n_fft) ** num_times)), -lo)[:n_out]
        inf_prob = tail_mass_truncation - math.expm1(num_times * math.log1p(-x._infinity_mass))
        return pld_pmf.DensePLDPmf(x._discretization, x._lower_loss * num_times + lo, np.array(out), inf_prob,
                                   x._pessimistic_estimate)

    remove = pmf(pld._pmf_remove)
    return P.PrivacyLossDistribution(remove) if pld._symmetric else P.PrivacyLossDistribution(remove, pmf(pld._pmf_add))


def _pld(blocks: Sequence[Block], interval: float = PLD_INTERVAL):
    """The PLD of the composition ``blocks`` as dp-accounting's ``PLDAccountant`` composes
    ``_pld_event(blocks)``: from the identity, each block's PLD in order; a Poisson-subsampled
    block self-composed ``t`` times, a full-batch block (``q = 1``) as one Gaussian of std
    ``sigma / sqrt(t)``; blocks with ``q = 0`` or ``t = 0`` skipped; ``None`` if a block has
    no noise (not DP: ε is infinite)."""
    from dp_accounting.pld import privacy_loss_distribution as P

    pld = P.identity(interval)
    for s, q, t in blocks:
        s, q, t = float(s), float(q), int(t)
        if q == 0.0 or t == 0:
            continue
        if s <= 0.0:
            return None
        step = _gaussian_pld(s / math.sqrt(t), 1.0, interval) if q >= 1.0 else \
            _self_compose(_gaussian_pld(s, q, interval), t)
        pld = pld.compose(step)
    return pld


def pld_epsilon(blocks: Sequence[Block], *, delta: float, interval: float = PLD_INTERVAL) -> float:
    """ε at δ from dp-accounting's PLD accountant (pessimistic discretisation of width
    ``interval``: an upper bound for any width; coarser is faster and looser)."""
    return _pld_epsilon(_key(blocks), float(delta), float(interval))


@functools.lru_cache(maxsize=8)
def _pld_cached(blocks: tuple, interval: float):
    """:func:`_pld` of a hashable composition, kept for the next query: a privacy profile
    δ(ε_k) asks the same composition at tens of ε (the audit's claimed curve: 49 points, each
    of which rebuilt the PLD). Eight compositions at most (a PMF is up to a few MB)."""
    return _pld(blocks, interval)


@functools.lru_cache(maxsize=1024)
def _pld_epsilon(blocks: tuple, delta: float, interval: float = PLD_INTERVAL) -> float:
    try:
        pld = _pld_cached(blocks, interval)
        return math.inf if pld is None else float(pld.get_epsilon_for_delta(delta))
    except (ValueError, RuntimeError, FloatingPointError, OverflowError, MemoryError) as exc:
        raise AccountingError(
            f"accountant 'pld' (dp-accounting) failed for {list(blocks)}: "
            f"{type(exc).__name__ if isinstance(exc, MemoryError) else exc}; use accountant='rdp'"
        ) from None


def pld_epsilons(profiles: Sequence[Sequence[Block]], *, delta: float, interval: float = PLD_SEARCH_INTERVAL
                 ) -> np.ndarray:
    """ε at δ of many DP-SGD compositions built from shared blocks (per-instance accounting).

    Same analysis as :func:`pld_epsilon` (dp-accounting's Poisson-subsampled Gaussian PLD,
    add/remove, pessimistic discretisation of width ``interval``: an upper bound), with every
    self-composed block built once and reused across profiles. An empty profile has ε = 0.
    """
    base: dict = {}
    composed: dict = {}

    def block(s: float, q: float, t: int):
        key = (float(s), float(q), int(t))
        if key not in composed:
            if key[:2] not in base:
                base[key[:2]] = _gaussian_pld(float(s), float(q), float(interval))
            composed[key] = _self_compose(base[key[:2]], int(t)) if t > 1 else base[key[:2]]
        return composed[key]

    out = np.zeros(len(profiles))
    try:
        for i, blocks in enumerate(profiles):
            pld = None
            for b in blocks:
                x = block(*b)
                pld = x if pld is None else pld.compose(x)
            out[i] = 0.0 if pld is None else max(0.0, float(pld.get_epsilon_for_delta(float(delta))))
    except (ValueError, RuntimeError, FloatingPointError, OverflowError, MemoryError) as exc:
        raise AccountingError(f"accountant 'pld' (dp-accounting) failed on per-instance profiles: "
                              f"{type(exc).__name__ if isinstance(exc, MemoryError) else exc}") from None
    return out


def pld_delta(blocks: Sequence[Block], *, epsilon: float) -> float:
    """δ at ε from dp-accounting's PLD accountant (pessimistic discretisation)."""
    try:
        pld = _pld_cached(_key(blocks), PLD_INTERVAL)
        return 1.0 if pld is None else float(min(1.0, pld.get_delta_for_epsilon(epsilon)))
    except (ValueError, RuntimeError, FloatingPointError, OverflowError) as exc:
        raise AccountingError(
            f"accountant 'pld' (dp-accounting) failed for {list(blocks)}: {exc}; use accountant='rdp'"
        ) from exc
