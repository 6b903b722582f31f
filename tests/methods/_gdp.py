"""Independent (test-only) Gaussian-DP arithmetic, written from the formulas in the AdaMix
paper (Prop. 2 / Lemma 6 of the appendix) with scipy only, to check the accounting module's
numbers for the runs the methods execute."""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.stats import norm


def gdp_delta(mu: float, eps: float) -> float:
    """delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu) (Dong et al.; Balle & Wang)."""
    return norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu)


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest eps >= 0 with delta(eps) <= delta for a mu-GDP mechanism."""
    if gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(mu, hi) > delta:
        hi *= 2
    return brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-12)


def noisygd_epsilon(noise_multiplier: float, steps: int, delta: float) -> float:
    """eps of T full-batch Gaussian steps with noise multiplier sigma: mu = sqrt(T)/sigma."""
    return gdp_epsilon(math.sqrt(steps) / noise_multiplier, delta)


def max_steps(noise_multiplier: float, target_epsilon: float, delta: float) -> int:
    """Largest T with noisygd_epsilon(sigma, T, delta) <= target_epsilon."""
    lo, hi = 0, 1
    while noisygd_epsilon(noise_multiplier, hi, delta) <= target_epsilon:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if noisygd_epsilon(noise_multiplier, mid, delta) <= target_epsilon:
            lo = mid
        else:
            hi = mid
    return lo
