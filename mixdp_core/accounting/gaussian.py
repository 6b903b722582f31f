r"""Exact (ε, δ) of the Gaussian mechanism: μ-GDP ↔ (ε, δ(ε)) in closed form.

A mechanism is μ-GDP (Dong, Roth & Su 2019, "Gaussian Differential Privacy", Def. 2.6)
when distinguishing neighbouring datasets is no easier than distinguishing N(0, 1) from
N(μ, 1). The Gaussian mechanism with L2 sensitivity Δ and noise N(0, s²) is exactly
(Δ/s)-GDP, and the adaptive composition of μ_i-GDP mechanisms is sqrt(Σ μ_i²)-GDP
(Dong, Roth & Su 2019, Cor. 3.3; AdaMix App. B, Lemma 8). Full-batch NoisyGD run for T
steps at noise multiplier σ is therefore μ-GDP with μ = √T / σ (AdaMix Prop. 2 / 9, where
the paper's "ρ := T²/(2σ²)" is a typo for ρ = T/(2σ²), μ = √(2ρ)).

μ-GDP is equivalent to (ε, δ(ε))-DP for every ε at once, with (Balle & Wang 2018,
"Improving the Gaussian mechanism...", Thm. 8; Dong, Roth & Su 2019, Cor. 2.13)

.. math::

    δ(ε; μ) = Φ(μ/2 − ε/μ) − e^{ε} Φ(−μ/2 − ε/μ),

which is *exact* (tight): no smaller δ holds at that ε. This module evaluates it in log
space, ``log δ = a + log(1 − e^{b − a})`` with ``a = log Φ(μ/2 − ε/μ)`` and
``b = ε + log Φ(−μ/2 − ε/μ)`` (:func:`scipy.special.log_ndtr`), so it stays accurate for
δ down to ~1e-300 and for large μ, ε.

The inverse ε(δ; μ) is found by Newton's method on ``log δ(ε)``, which is concave in ε
(the Gaussian privacy-loss density is log-concave, so by Prékopa's theorem its privacy
profile is log-concave). Started to the right of the root — at the zCDP upper bound
μ²/2 + μ√(2 log 1/δ) — Newton on a concave decreasing function never crosses the root:
every iterate satisfies δ(ε_k) ≤ δ, so the returned ε never under-states the privacy
loss, and ``gaussian_delta(mu, gaussian_epsilon(mu, delta=d)) <= d`` holds in floating
point. Convergence is quadratic; a full vector of 10⁵ values takes a few milliseconds.

These closed forms agree with autodp's analytic Gaussian (``autodp.dp_bank
.get_eps_ana_gaussian``, ``mechanism_zoo.ExactGaussianMechanism``) and with
``dp_accounting.get_epsilon_gaussian``; the tests check both.
"""

from __future__ import annotations

import math
from typing import Union

import numpy as np
from scipy import special

from . import _validate as V
from ..errors import ConfigError

ArrayLike = Union[float, np.ndarray]

_MAX_NEWTON = 100


def _scalar_or_array(x: np.ndarray, scalar: bool) -> ArrayLike:
    return float(x) if scalar else x


def _log_delta_parts(mu: np.ndarray, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(log δ(ε; μ), b)`` for finite ``mu > 0``, finite ``eps``; ``b = ε + log Φ(−μ/2 − ε/μ)``."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = eps / mu
        a = special.log_ndtr(mu / 2.0 - r)
        b = eps + special.log_ndtr(-mu / 2.0 - r)
        d = b - a
        out = a + np.log(-np.expm1(np.minimum(d, 0.0)))
    out = np.where(d >= 0.0, -np.inf, out)
    return out, b


def _log_delta_pos(mu: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """``log δ(ε; μ)`` for finite ``mu > 0`` and finite ``eps`` (broadcast arrays)."""
    return _log_delta_parts(mu, eps)[0]


def _within(logd: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """``δ ≤ target`` tested the way :func:`gaussian_delta` reports δ (``exp`` of the log)."""
    return np.exp(logd) <= delta


def gaussian_log_delta(mu: ArrayLike, epsilon: ArrayLike) -> ArrayLike:
    """Natural log of :func:`gaussian_delta` (``-inf`` where δ = 0). Vectorized."""
    scalar = np.ndim(mu) == 0 and np.ndim(epsilon) == 0
    m = np.asarray(mu, dtype=np.float64)
    e = np.asarray(epsilon, dtype=np.float64)
    if np.any(np.isnan(m)) or np.any(m < 0):
        raise ConfigError("mu", f"must be >= 0, got {mu!r}")
    if np.any(np.isnan(e)):
        raise ConfigError("epsilon", f"must be a number, got {epsilon!r}")
    m, e = np.broadcast_arrays(m, e)
    out = np.empty(m.shape, dtype=np.float64)
    pos = (m > 0) & np.isfinite(m) & np.isfinite(e)
    out[pos] = _log_delta_pos(m[pos], e[pos])
    # μ = 0: identical distributions, δ(ε) = (1 − e^ε)_+.
    zero = m == 0
    with np.errstate(divide="ignore"):
        out[zero] = np.log(np.maximum(-np.expm1(np.minimum(e[zero], 0.0)), 0.0))
    # μ = ∞: perfectly distinguishable, δ = 1 at every finite ε.
    out[np.isinf(m) & np.isfinite(e)] = 0.0
    out[e == np.inf] = -np.inf  # δ(+∞) = 0
    out[(e == -np.inf) & (m > 0)] = 0.0
    out[(e == -np.inf) & zero] = 0.0
    return _scalar_or_array(out, scalar)


def gaussian_delta(mu: ArrayLike, epsilon: ArrayLike) -> ArrayLike:
    r"""δ(ε) of a μ-GDP mechanism (exact; Balle & Wang 2018, Thm. 8).

    .. math:: δ(ε; μ) = Φ(μ/2 − ε/μ) − e^{ε} Φ(−μ/2 − ε/μ)

    Args:
        mu: μ ≥ 0 (``inf`` allowed), scalar or array.
        epsilon: ε (any real; the formula is the hockey-stick divergence, also for ε < 0),
            scalar or array, broadcast against ``mu``.

    Returns:
        δ in [0, 1]; a float for scalar inputs, else an array of the broadcast shape.

    Example:
        >>> round(gaussian_delta(1.0, 1.0), 8)   # dp-accounting's PLD tests: 0.12693674
        0.12693674
    """
    scalar = np.ndim(mu) == 0 and np.ndim(epsilon) == 0
    out = np.exp(np.asarray(gaussian_log_delta(mu, epsilon)))
    return _scalar_or_array(np.clip(out, 0.0, 1.0), scalar)


def _eps_newton(mu: np.ndarray, dl: np.ndarray) -> np.ndarray:
    """ε(δ; μ) for finite ``mu > 0`` and δ ``dl`` with δ(0; μ) > δ (so the root is > 0)."""
    ell = np.log(dl)
    # Right-of-root start: μ²/2-zCDP with the simple conversion is a valid upper bound.
    with np.errstate(over="ignore"):  # μ past ~1e154 overflows to inf: a start still right of the root
        x = mu * mu / 2.0 + mu * np.sqrt(-2.0 * ell)
    L, b = _log_delta_parts(mu, x)
    for _ in range(200):  # make sure we start on the safe side despite rounding
        bad = ~_within(L, dl)
        if not bad.any():
            break
        x = np.where(bad, 2.0 * x + 1.0, x)
        L, b = _log_delta_parts(mu, x)
    active = np.ones(mu.shape, dtype=bool)
    lo_fallback = np.full(mu.shape, np.nan)
    for _ in range(_MAX_NEWTON):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        m, xi, Li, bi, li, di = mu[idx], x[idx], L[idx], b[idx], ell[idx], dl[idx]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            slope = -np.exp(bi - Li)  # d log δ / dε = −e^ε Φ(−μ/2 − ε/μ) / δ (φ terms cancel)
            step = (Li - li) / slope  # >= 0: moves left, towards the root
        step = np.where(np.isfinite(step) & (step > 0), step, 0.0)
        xn = np.maximum(xi - step, 0.0)
        Ln, bn = _log_delta_parts(m, xn)
        ok = _within(Ln, di)
        x[idx] = np.where(ok, xn, xi)
        L[idx] = np.where(ok, Ln, Li)
        b[idx] = np.where(ok, bn, bi)
        # Stop once the Newton step is below 1e-12 relative: the remaining error is then far
        # below rounding, and a rejected tiny step only means x is already as tight as the
        # floating-point evaluation of δ allows.
        tiny = step <= 1e-12 * xi + 1e-300
        big_reject = (~ok) & (~tiny)
        if big_reject.any():
            # Newton landed on the root up to rounding (δ(xn) exceeds δ by ~1 ulp): step
            # back right by 1e-12 relative; if even that fails, bisect [xn, x] below.
            j = np.flatnonzero(big_reject)
            xr = xn[j] * (1.0 + 1e-12) + 1e-300
            okr = _within(_log_delta_parts(m[j], xr)[0], di[j])
            x[idx[j[okr]]] = xr[okr]
            lo_fallback[idx[j[~okr]]] = xn[j[~okr]]
        active[idx[~ok | tiny]] = False
    need = np.flatnonzero(~np.isnan(lo_fallback))
    if need.size:
        lo, hi = lo_fallback[need], x[need]
        m, di = mu[need], dl[need]
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if np.all((mid <= lo) | (mid >= hi)):
                break
            safe = _within(_log_delta_pos(m, mid), di)
            hi = np.where(safe, mid, hi)
            lo = np.where(safe, lo, mid)
        x[need] = hi
    return x


def gaussian_epsilon(mu: ArrayLike, *, delta: ArrayLike) -> ArrayLike:
    """Smallest ε with δ(ε; μ) ≤ δ for a μ-GDP mechanism (exact, vectorized).

    Inverse of :func:`gaussian_delta` in ε (see the module docstring for the method). The
    result is never below the true ε (Newton from the right, stopped once the step is below
    1e-12 relative, so it may exceed the true ε by about that much), and is 0 when δ(0; μ) = 2Φ(μ/2) − 1 ≤ δ already.

    Args:
        mu: μ ≥ 0 (``inf`` gives ``inf``), scalar or array.
        delta: δ in (0, 1), scalar or array, broadcast against ``mu``.

    Returns:
        ε ≥ 0; a float for scalar inputs, else an array.

    Example:
        >>> round(gaussian_epsilon(1 / 36.304688756269286, delta=1e-6), 6)  # autodp tutorial
        0.1
    """
    scalar = np.ndim(mu) == 0 and np.ndim(delta) == 0
    m = np.asarray(mu, dtype=np.float64)
    d = np.asarray(delta, dtype=np.float64)
    if np.any(np.isnan(m)) or np.any(m < 0):
        raise ConfigError("mu", f"must be >= 0, got {mu!r}")
    if not np.all((d > 0) & (d < 1)):
        raise ConfigError("delta", f"must lie in the open interval (0, 1), got {delta!r}")
    m, d = np.broadcast_arrays(m, d)
    out = np.zeros(m.shape, dtype=np.float64)
    out[np.isinf(m)] = np.inf
    fin = (m > 0) & np.isfinite(m)
    if fin.any():
        mf, df = m[fin], d[fin]
        at0 = _log_delta_pos(mf, np.zeros_like(mf))
        pos = ~_within(at0, df)
        res = np.zeros_like(mf)
        if pos.any():
            res[pos] = _eps_newton(mf[pos], df[pos])
        out[fin] = res
    return _scalar_or_array(out, scalar)


def gdp_mu_for_budget(*, epsilon: float, delta: float) -> float:
    """Largest μ such that μ-GDP implies (ε, δ)-DP, i.e. δ(ε; μ) ≤ δ (exact).

    δ(ε; μ) increases in μ (∂δ/∂μ = φ(μ/2 − ε/μ) > 0), so the root of
    ``log δ(ε; μ) = log δ`` is found by a bracketing search in log μ (to adjacent floats, on
    the safe side), then μ is nudged down by ulps if ``exp`` rounded it onto the wrong side.
    Calibration builds on this: full-batch NoisyGD meets (ε, δ) iff √T/σ ≤ μ*.

    Args:
        epsilon: ε > 0.
        delta: δ in (0, 1).

    Returns:
        μ* > 0 with ``gaussian_delta(μ*, ε) <= δ``.
    """
    eps = V.positive("epsilon", epsilon)
    dl = V.open_unit("delta", delta)
    ell = math.log(dl)

    def logd(mu: float) -> float:
        return float(_log_delta_pos(np.float64(mu), np.float64(eps)))

    def f(logmu: float) -> float:
        return logd(math.exp(logmu)) - ell

    # Lower bound from the simple zCDP conversion: μ²/2 + μ√(2 log 1/δ) = ε.
    L = -ell
    mu_lo = math.sqrt(2 * L + 2 * eps) - math.sqrt(2 * L)
    lo = math.log(mu_lo)
    while f(lo) > 0:  # rounding only
        lo -= 0.1
    hi = lo + math.log(2.0)
    while f(hi) <= 0:
        lo, hi = hi, hi + math.log(2.0)
    # Bracketing root search to adjacent floats, keeping f(lo) <= 0 < f(hi): ``lo`` ends on the
    # safe side by construction, within an ulp of the root. Regula falsi with the Illinois
    # modification (superlinear: ~10 evaluations), and a bisection step whenever two steps did
    # not halve the bracket (so never slower than bisection's ~55). Why not
    # scipy.optimize.brentq (used before, same root to a few ulps): importing scipy.optimize
    # costs ~0.5 s in every fresh process that calibrates (the app's run workers, sweep
    # workers, each CLI run), more than all of its calls here.
    flo, fhi = f(lo), f(hi)
    side, width_before, width = 0, hi - lo, hi - lo  # the bracket's width two steps ago and one
    for _ in range(400):
        if not lo < 0.5 * (lo + hi) < hi:
            break
        mid = hi - fhi * (hi - lo) / (fhi - flo) if fhi != flo else 0.5 * (lo + hi)
        if not lo < mid < hi or hi - lo > 0.5 * width_before:
            mid = 0.5 * (lo + hi)
        fm = f(mid)
        if fm <= 0:
            lo, flo = mid, fm
            if side == -1:
                fhi *= 0.5
            side = -1
        else:
            hi, fhi = mid, fm
            if side == 1:
                flo *= 0.5
            side = 1
        width_before, width = width, hi - lo
    mu = math.exp(lo)
    while math.exp(logd(mu)) > dl:  # same test as gaussian_delta(mu, eps) <= delta
        mu = float(np.nextafter(mu, 0.0))
    return mu
