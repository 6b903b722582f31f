r"""Conversions between privacy notions: zCDP, pure DP, RDP → (ε, δ).

Formulas and sources
--------------------
* **ρ-zCDP → (ε, δ), tight** (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for
  Differential Privacy", Prop. 12 / Cor. 13): an (α, τ)-RDP mechanism is (ε, δ)-DP with

  .. math:: δ = \frac{e^{(α-1)(τ-ε)}}{α-1}\Big(1-\frac1α\Big)^{α},

  equivalently ε = τ + log(1 − 1/α) − (log δ + log α)/(α − 1). For ρ-zCDP, τ = αρ for all
  α > 1 and we minimise over α (dense log grid, then a bounded Brent refinement; *any* α
  gives a valid bound, so numerical error only ever loosens it). This is the conversion
  Opacus and TF-Privacy use for RDP (Balle et al. 2020, Thm. 21, is the same bound).
* **ρ-zCDP → (ε, δ), simple** (Bun & Steinke 2016, Prop. 1.3): ε = ρ + 2√(ρ log(1/δ)).
  Shown for reference only; the tight one is never larger.
* **Pure ε-DP → zCDP.** Any ε-DP mechanism is ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4);
  this is the "naïve" ρ = ε²/2 that the DP-prototypes paper (Wahdany et al., Sec. 5
  "Comparing results over different notions of DP") inverts to compare methods. The
  exponential mechanism is moreover ε-*bounded-range* (Durfee & Rogers 2019) and therefore
  ε²/8-zCDP (Cesar & Rogers 2021, Lemma 3.2; DP-prototypes App. A.3, Lemma 3). ε²/8 holds
  only for bounded-range mechanisms, not for arbitrary ε-DP ones (see :func:`pure_to_zcdp`).
* **Pure ε₀-DP → (ε, δ), tight**: every ε₀-DP mechanism is dominated by randomized
  response (Kairouz, Oh & Viswanath 2015, Thm. 2.1), whose privacy profile is
  δ(ε) = (e^{ε₀} − e^{ε})₊ / (1 + e^{ε₀}).
* **RDP curve → (ε, δ)**: the CKS bound above, minimised over the given orders.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from . import _validate as V
from ..errors import ConfigError

#: Orders searched by the RDP accountant: Opacus' ``RDPAccountant.DEFAULT_ALPHAS`` (so its
#: published values are reproduced), plus TF-Privacy's 1.25/1.5/1.75 and larger orders for
#: tiny-ε regimes. Adding orders can only lower (tighten) the reported ε.
RDP_ORDERS: tuple[float, ...] = tuple(
    sorted(
        set(
            [1 + x / 10.0 for x in range(1, 100)]
            + [float(a) for a in range(12, 64)]
            + [1.01, 1.02, 1.05, 1.25, 1.5, 1.75, 80.0, 96.0, 128.0, 192.0, 256.0, 512.0, 1024.0]
        )
    )
)

#: Integer orders of :data:`RDP_ORDERS` (cheap for Opacus' subsampled-Gaussian RDP).
INT_ORDERS: tuple[float, ...] = tuple(a for a in RDP_ORDERS if float(a).is_integer())
#: Fractional orders of :data:`RDP_ORDERS` (Opacus evaluates them by a slowly converging series).
FRAC_ORDERS: tuple[float, ...] = tuple(a for a in RDP_ORDERS if not float(a).is_integer())

# log(α − 1) grid for continuous optimisation over α in zCDP conversions.
_LOG_AM1_GRID = np.linspace(np.log(1e-6), np.log(1e7), 1200)


def _zcdp_eps_at(log_am1: np.ndarray, rho: float, log_delta: float) -> np.ndarray:
    """CKS ε(α) for ρ-zCDP at ``α = 1 + exp(log_am1)``."""
    am1 = np.exp(log_am1)
    alpha = 1.0 + am1
    # log(1 - 1/α) = log(α-1) - log(α)
    return alpha * rho + (log_am1 - np.log(alpha)) - (log_delta + np.log(alpha)) / am1


def _zcdp_logdelta_at(log_am1: np.ndarray, rho: float, eps: float) -> np.ndarray:
    """CKS log δ(α) for ρ-zCDP at ``α = 1 + exp(log_am1)``."""
    am1 = np.exp(log_am1)
    alpha = 1.0 + am1
    return am1 * (alpha * rho - eps) - log_am1 + alpha * (log_am1 - np.log(alpha))


def _minimise_on_grid(fun, grid: np.ndarray) -> float:
    """Minimum of ``fun`` over ``grid`` refined by bounded Brent around the best point."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        vals = fun(grid)
    vals = np.where(np.isnan(vals), np.inf, vals)
    i = int(np.argmin(vals))
    best = float(vals[i])
    lo = grid[max(i - 1, 0)]
    hi = grid[min(i + 1, len(grid) - 1)]
    if hi > lo:
        from scipy import optimize  # lazy: importing scipy.optimize costs ~0.5 s

        res = optimize.minimize_scalar(
            lambda t: float(fun(np.asarray(t))), bounds=(lo, hi), method="bounded",
            options={"xatol": 1e-10},
        )
        if res.success and np.isfinite(res.fun):
            best = min(best, float(res.fun))
    return best


def zcdp_to_epsilon(rho: float, *, delta: float, method: Literal["tight", "simple"] = "tight") -> float:
    """ε at δ of a ρ-zCDP mechanism.

    Args:
        rho: ρ ≥ 0.
        delta: δ in (0, 1).
        method: ``"tight"`` (Canonne–Kamath–Steinke 2020, Cor. 13, optimised over α) or
            ``"simple"`` (Bun–Steinke 2016, ε = ρ + 2√(ρ log 1/δ)).

    Returns:
        ε ≥ 0. ``"tight"`` is never larger than ``"simple"``.
    """
    r = V.nonnegative("rho", rho)
    d = V.open_unit("delta", delta)
    if method not in ("tight", "simple"):
        raise ConfigError("method", f"must be 'tight' or 'simple', got {method!r}")
    if r == 0.0:
        return 0.0
    simple = r + 2.0 * math.sqrt(r * math.log(1.0 / d))
    if method == "simple":
        return simple
    ld = math.log(d)
    tight = _minimise_on_grid(lambda t: _zcdp_eps_at(t, r, ld), _LOG_AM1_GRID)
    return max(0.0, min(tight, simple))


def zcdp_to_delta(rho: float, *, epsilon: float) -> float:
    """δ at ε of a ρ-zCDP mechanism (Canonne–Kamath–Steinke 2020, Cor. 13), in [0, 1]."""
    r = V.nonnegative("rho", rho)
    e = V.nonnegative("epsilon", epsilon)
    if r == 0.0:
        return 0.0
    best = _minimise_on_grid(lambda t: _zcdp_logdelta_at(t, r, e), _LOG_AM1_GRID)
    return float(min(1.0, math.exp(min(best, 0.0))))


def pure_to_zcdp(epsilon: float, *, convention: Literal["paper", "tight"] = "paper") -> float:
    """ρ of a pure ε-DP mechanism.

    Args:
        epsilon: ε > 0.
        convention: ``"paper"``: ρ = ε²/2, valid for *every* ε-DP mechanism (Bun & Steinke
            2016, Prop. 1.4) and the conversion the DP-prototypes paper uses to put pure-DP
            and zCDP methods on one axis. ``"tight"``: ρ = ε²/8, valid only for ε-bounded-range
            mechanisms such as the exponential mechanism (Cesar & Rogers 2021, Lemma 3.2;
            DP-prototypes App. A.3, Lemma 3). Do not use ``"tight"`` for e.g. Laplace noise.

    Returns:
        ρ > 0.
    """
    e = V.positive("epsilon", epsilon)
    if convention == "paper":
        return e * e / 2.0
    if convention == "tight":
        return e * e / 8.0
    raise ConfigError("convention", f"must be 'paper' or 'tight', got {convention!r}")


def pure_dp_delta(epsilon0: float, *, epsilon: float) -> float:
    """Tight δ(ε) of an ε₀-DP mechanism: (e^{ε₀} − e^{ε})₊/(1 + e^{ε₀}) (Kairouz et al. 2015)."""
    e0 = V.positive("epsilon", epsilon0)
    e = V.nonnegative("epsilon", epsilon)
    if e >= e0:
        return 0.0
    # (e^{e0} - e^{e}) / (1 + e^{e0}) = (1 - e^{e - e0}) / (1 + e^{-e0})
    return float(-math.expm1(e - e0) / (1.0 + math.exp(-e0)))


def pure_dp_epsilon(epsilon0: float, *, delta: float) -> float:
    """Smallest ε with an ε₀-DP mechanism (ε, δ)-DP: log(e^{ε₀} − δ(1 + e^{ε₀}))₊ (tight)."""
    e0 = V.positive("epsilon", epsilon0)
    d = V.open_unit("delta", delta)
    # e^ε = e^{ε0}(1 - δ(1 + e^{-ε0}))
    inner = 1.0 - d * (1.0 + math.exp(-e0))
    if inner <= 0.0:
        return 0.0
    eps = max(0.0, e0 + math.log1p(-d * (1.0 + math.exp(-e0))))
    # Rounding in e0 + log(inner) can land a few ulps low; never report an ε whose δ exceeds δ.
    while eps < e0 and pure_dp_delta(e0, epsilon=eps) > d:
        eps = float(np.nextafter(eps, math.inf))
    return eps


def rdp_eps_per_order(orders: np.ndarray, rdp: np.ndarray, *, delta: float) -> np.ndarray:
    """CKS ε(α) for each order (``inf`` where undefined); :func:`rdp_to_epsilon` is its min."""
    a = np.asarray(orders, dtype=np.float64)
    t = np.asarray(rdp, dtype=np.float64)
    ld = math.log(V.open_unit("delta", delta))
    with np.errstate(invalid="ignore", divide="ignore"):
        eps = t + np.log((a - 1.0) / a) - (ld + np.log(a)) / (a - 1.0)
    return np.where(np.isnan(eps), np.inf, eps)


def rdp_to_epsilon(orders: np.ndarray, rdp: np.ndarray, *, delta: float) -> float:
    """ε at δ from an RDP curve (CKS 2020 Prop. 12 = Balle et al. 2020 Thm. 21).

    Args:
        orders: orders α > 1.
        rdp: RDP values τ(α) ≥ 0, same length.
        delta: δ in (0, 1).

    Returns:
        min over α of ``τ + log((α−1)/α) − (log δ + log α)/(α−1)``, clipped at 0 (``inf`` if
        every order is infinite).
    """
    return float(max(0.0, rdp_eps_per_order(orders, rdp, delta=delta).min()))


def rdp_to_epsilon_many(orders: np.ndarray, rdp: np.ndarray, *, delta: float) -> np.ndarray:
    """Vectorized :func:`rdp_to_epsilon` for a ``(K, n_orders)`` stack of RDP curves."""
    a = np.asarray(orders, dtype=np.float64)[None, :]
    t = np.asarray(rdp, dtype=np.float64)
    ld = math.log(V.open_unit("delta", delta))
    with np.errstate(invalid="ignore", divide="ignore"):
        eps = t + np.log((a - 1.0) / a) - (ld + np.log(a)) / (a - 1.0)
    eps = np.where(np.isnan(eps), np.inf, eps)
    return np.maximum(0.0, eps.min(axis=1))


def rdp_to_delta(orders: np.ndarray, rdp: np.ndarray, *, epsilon: float) -> float:
    """δ at ε from an RDP curve (CKS 2020 Prop. 12), minimised over the orders, in [0, 1]."""
    a = np.asarray(orders, dtype=np.float64)
    t = np.asarray(rdp, dtype=np.float64)
    e = V.nonnegative("epsilon", epsilon)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        logd = (a - 1.0) * (t - e) - np.log(a - 1.0) + a * np.log1p(-1.0 / a)
    logd = np.where(np.isnan(logd), np.inf, logd)
    return float(min(1.0, math.exp(min(float(logd.min()), 0.0))))


def lazy_rdp_epsilon(rdp_fn, *, delta: float, scales=None) -> tuple[np.ndarray, np.ndarray]:
    """CKS ε from RDP curves ``scale_k · rdp_fn(α)``, minimised over :data:`RDP_ORDERS`.

    Fractional orders are costly for the subsampled Gaussian, so ``rdp_fn`` is first
    evaluated at :data:`INT_ORDERS` only, and at the fractional orders lying strictly
    between the integer neighbours of each row's best integer order. Every evaluated order
    gives a valid bound, so the result is always a valid ε; it equals the minimum over all of
    :data:`RDP_ORDERS` whenever ε(α) is unimodal along the grid (the tests check it does).

    Args:
        rdp_fn: maps a tuple of orders to the RDP values at those orders.
        delta: δ in (0, 1).
        scales: optional ``(K,)`` multipliers (e.g. step counts t) applied to the curve.

    Returns:
        ``(eps, alpha)``: arrays of shape ``(K,)`` (``(1,)`` without ``scales``) with ε ≥ 0
        and the order that achieved it.
    """
    sc = np.ones(1) if scales is None else np.atleast_1d(np.asarray(scales, dtype=np.float64))
    ints = np.asarray(INT_ORDERS, dtype=np.float64)
    per = rdp_eps_per_order(ints, sc[:, None] * np.asarray(rdp_fn(INT_ORDERS))[None, :], delta=delta)
    i = np.argmin(per, axis=1)
    eps = per[np.arange(len(sc)), i]
    alpha = ints[i]
    lo = np.where(i > 0, ints[np.maximum(i - 1, 0)], 1.0)
    hi = np.where(i + 1 < len(ints), ints[np.minimum(i + 1, len(ints) - 1)], np.inf)
    frac = np.asarray(FRAC_ORDERS, dtype=np.float64)
    cols = ((frac[None, :] > lo[:, None]) & (frac[None, :] < hi[:, None])).any(axis=0)
    if cols.any():
        fw = frac[cols]
        per_f = rdp_eps_per_order(fw, sc[:, None] * np.asarray(rdp_fn(tuple(fw)))[None, :], delta=delta)
        j = np.argmin(per_f, axis=1)
        ef = per_f[np.arange(len(sc)), j]
        better = ef < eps
        eps = np.where(better, ef, eps)
        alpha = np.where(better, fw[j], alpha)
    return np.maximum(eps, 0.0), alpha


def lazy_rdp_delta(rdp_fn, *, epsilon: float) -> float:
    """CKS δ at ε from an RDP curve, with the same lazy order search as :func:`lazy_rdp_epsilon`."""
    e = V.nonnegative("epsilon", epsilon)
    ints = np.asarray(INT_ORDERS, dtype=np.float64)

    def logd(a: np.ndarray, t: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            v = (a - 1.0) * (t - e) - np.log(a - 1.0) + a * np.log1p(-1.0 / a)
        return np.where(np.isnan(v), np.inf, v)

    li = logd(ints, np.asarray(rdp_fn(INT_ORDERS)))
    i = int(np.argmin(li))
    best = float(li[i])
    lo = ints[i - 1] if i > 0 else 1.0
    hi = ints[i + 1] if i + 1 < len(ints) else np.inf
    fw = tuple(a for a in FRAC_ORDERS if lo < a < hi)
    if fw:
        best = min(best, float(logd(np.asarray(fw), np.asarray(rdp_fn(fw))).min()))
    return float(min(1.0, math.exp(min(best, 0.0))))
