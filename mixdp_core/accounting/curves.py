"""Privacy curves: ε spent after each step of a run (the "ε spent so far" chart).

* Full batch (:func:`privacy_curve`): after t steps NoisyGD is (√t/σ)-GDP, so
  ε_t = ``gaussian_epsilon(√t/σ, δ)`` — exact, vectorized, and ε_T equals
  ``epsilon(ComposedGaussian(σ, T), delta=δ)``.
* DP-SGD (:func:`dpsgd_privacy_curve`): with RDP the per-step RDP curve is computed once and
  scaled by t, so every step is exact for the accountant at negligible cost. PRV and PLD cost
  ~0.3 s per evaluation (PRV up to tens of seconds at small ε over many steps, where its error is
  refined to 1 % of ε: :func:`.backends.prv_epsilon`), so they are evaluated at ``points`` step
  counts t_1 < … < t_k = T and
  each step t reports the value at the next evaluated count ≥ t: an upper bound, because ε is
  non-decreasing in t.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from . import _validate as V
from .accountant import dpsgd_accountant, epsilon
from .events import PoissonSubsampledGaussian
from .gaussian import gaussian_epsilon

#: Default number of evaluated step counts for PRV/PLD curves.
DEFAULT_POINTS = 20


def privacy_curve_points(*, noise_multiplier: float, steps: int, delta: float,
                         points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """ε of full-batch NoisyGD at ≤ ``points`` step counts (memory independent of T).

    Returns:
        ``(t, eps)``: increasing step counts ending at T, and the exact ε after each
        (μ_t = √t/σ). Use it instead of :func:`privacy_curve` when T may be large.
    """
    s = V.positive("noise_multiplier", noise_multiplier)
    T = V.count("steps", steps)
    d = V.open_unit("delta", delta)
    k = V.count("points", points)
    knots = np.unique(np.round(np.linspace(0, T, min(k, T) + 1)[1:]).astype(np.int64))
    knots = knots[knots >= 1]
    mu = np.sqrt(knots.astype(np.float64)) / s
    return knots, np.maximum.accumulate(np.asarray(gaussian_epsilon(mu, delta=d), dtype=np.float64))


def dpsgd_epsilon(*, noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                  accountant: str = "pld", also: object = None, fast: bool = False) -> float:
    """ε after ``steps`` DP-SGD steps, after the pure release ``also`` (the noisy count that chose
    q and T; basic adaptive composition, :class:`~.events.AdaptiveComposition`) if given.

    ``fast=True`` with PLD uses the coarser pessimistic discretisation (still an upper
    bound, ~10x faster) — for progress curves; the reported ε uses the default one.
    """
    from .backends import PLD_SEARCH_INTERVAL, pld_epsilon
    from .events import AdaptiveComposition, _blocks

    ev = PoissonSubsampledGaussian(noise_multiplier, sample_rate, steps)
    first = 0.0 if also is None else AdaptiveComposition(also, ev).first_epsilon  # (validates `also`)
    if accountant == "pld" and fast:
        return first + pld_epsilon(_blocks(ev), delta=delta, interval=PLD_SEARCH_INTERVAL)
    if sample_rate == 1.0:
        # full batch: the exact GDP closed form for every accountant, as calibration uses (RDP's
        # bound there read 1.09 at a run calibrated, and reported, at 1.00)
        accountant = None
    return first + float(epsilon(ev, delta=delta, accountant=accountant))


def privacy_curve(*, noise_multiplier: float, steps: int, delta: float) -> np.ndarray:
    """ε after each step t = 1..T of full-batch NoisyGD (exact μ-GDP, μ_t = √t/σ).

    Args:
        noise_multiplier: σ > 0.
        steps: T ≥ 1.
        delta: δ in (0, 1).

    Returns:
        Array of shape ``(T,)``, non-decreasing; entry ``t-1`` is ε after step t.
    """
    s = V.positive("noise_multiplier", noise_multiplier)
    T = V.count("steps", steps)
    d = V.open_unit("delta", delta)
    mu = np.sqrt(np.arange(1, T + 1, dtype=np.float64)) / s
    return np.maximum.accumulate(np.asarray(gaussian_epsilon(mu, delta=d), dtype=np.float64))


def dpsgd_privacy_curve(
    *,
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    accountant: str = "rdp",
    points: Optional[int] = None,
) -> np.ndarray:
    """ε after each step t = 1..T of DP-SGD (Poisson rate q).

    Args:
        noise_multiplier: σ > 0.
        sample_rate: q in (0, 1]; q = 1 uses the exact full-batch curve.
        steps: T ≥ 1.
        delta: δ in (0, 1).
        accountant: ``"rdp"``, ``"prv"`` or ``"pld"`` (as in
            :func:`~.calibration.calibrate_dpsgd_noise`).
        points: number of step counts at which the accountant is evaluated (evenly spaced,
            always including T); ``None`` means every step for ``"rdp"`` and
            :data:`DEFAULT_POINTS` for ``"prv"``/``"pld"``. Steps between evaluated counts
            report the next evaluated value (an upper bound).

    Returns:
        Array of shape ``(T,)``, non-decreasing, whose last entry equals
        ``epsilon(PoissonSubsampledGaussian(σ, q, T), delta=δ, accountant=accountant)``.
    """
    s = V.positive("noise_multiplier", noise_multiplier)
    q = V.rate("sample_rate", sample_rate)
    T = V.count("steps", steps)
    d = V.open_unit("delta", delta)
    acc = dpsgd_accountant(accountant)
    if points is not None:
        points = V.count("points", points)
    if q == 1.0:
        return privacy_curve(noise_multiplier=s, steps=T, delta=d)
    if points is None:
        points = acc.dpsgd_curve_points(T, DEFAULT_POINTS)
    knots = np.unique(np.round(np.linspace(0, T, min(points, T) + 1)[1:]).astype(np.int64))
    knots = knots[knots >= 1]
    if knots[-1] != T:
        knots = np.append(knots, T)
    vals = acc.dpsgd_curve(noise_multiplier=s, sample_rate=q, knots=knots, delta=d)
    vals = np.maximum.accumulate(vals)
    idx = np.searchsorted(knots, np.arange(1, T + 1), side="left")
    return vals[idx]
