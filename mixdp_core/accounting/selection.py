r"""Private hyper-parameter selection with a random number of repetitions (accounting side).

Papernot & Steinke, "Hyperparameter Tuning with Renyi Differential Privacy" (ICLR 2022),
Thm. 2: let ``Q`` be a randomized algorithm (here: draw a hyper-parameter candidate, train
privately, release a noisy validation score) that is ``(lambda, eps(lambda))``-RDP for every
order. Draw ``K`` from the truncated negative binomial ``TNB(eta, gamma)``
(``eta > -1``, ``0 < gamma < 1``), run ``Q`` ``K`` times independently and output the run
with the best score. Then the whole procedure is ``(lambda, eps'(lambda))``-RDP with

    eps'(lambda) = eps(lambda) + (1 + eta) (1 - 1/lh) eps(lh) + (1 + eta) log(1/gamma) / lh
                   + log(E[K]) / (lambda - 1)

for every ``lh >= 1`` (we minimize over ``lh``). ``TNB(eta, gamma)``:
``P(K = k) ∝ (1 - gamma)^k binom(k + eta - 1, k)`` for ``k >= 1``; ``eta = 1`` is the
geometric distribution ``P(K = k) = gamma (1 - gamma)^(k-1)`` (Liu & Talwar 2019's random
stopping), ``eta = 0`` the logarithmic distribution. ``E[K] = eta (1 - gamma) /
(gamma (1 - gamma^eta))`` (``eta != 0``) and ``(1/gamma - 1) / log(1/gamma)`` (``eta = 0``).

For a Gaussian base (``Q`` is ``mu``-GDP: ``eps(lambda) = lambda mu^2 / 2``) the inner
minimum has a closed form, used by the tests as an independent check:
``lh* = sqrt(2 log(1/gamma)) / mu`` and, when ``lh* >= 1``,
``(1 + eta) (mu sqrt(2 log(1/gamma)) - mu^2 / 2)``.

Neighbouring relation: add/remove one private sample (that of ``Q``). Every repetition
must use fresh randomness and the *same* privacy parameters; the number ``K`` must not be
revealed beyond the selected output (the theorem covers releasing the best run only).

This is the only place the per-repetition budget is calibrated:
:func:`calibrate_selection_mu` returns the largest per-repetition ``mu`` whose selection
procedure meets ``(epsilon, delta)``.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from scipy.special import gammaln, gammasgn

from . import _validate as V
from .conversions import RDP_ORDERS, rdp_to_epsilon
from ..errors import ConfigError
from .errors import BudgetError
from .limits import check_steps

#: Largest order searched for the inner ``lh`` (numerical minimization).
_LH_MAX = 1e4


def _check(eta: float, gamma: float) -> tuple[float, float]:
    eta = float(eta)
    gamma = float(gamma)
    # ConfigError (a ValueError) naming the field: the ledger flags a damaged record's event by
    # ConfigError, and a bare ValueError crashed `mixdp budget` instead
    if not eta > -1 or not math.isfinite(eta):
        raise ConfigError("eta", f"must be > -1, got {eta!r}")
    if not 0 < gamma < 1:
        raise ConfigError("gamma", f"must lie in (0, 1), got {gamma!r}")
    return eta, gamma


def tnb_expected_count(eta: float, gamma: float) -> float:
    """``E[K]`` of the truncated negative binomial ``TNB(eta, gamma)``."""
    eta, gamma = _check(eta, gamma)
    if eta == 0:
        return (1.0 / gamma - 1.0) / math.log(1.0 / gamma)
    return eta * (1.0 - gamma) / (gamma * (1.0 - gamma**eta))


def tnb_pmf(k: np.ndarray, eta: float, gamma: float) -> np.ndarray:
    """``P(K = k)`` for integer ``k >= 1`` (0 elsewhere)."""
    eta, gamma = _check(eta, gamma)
    k = np.asarray(k, dtype=np.float64)
    out = np.zeros_like(k)
    ok = k >= 1
    kk = k[ok]
    if eta == 0:
        out[ok] = (1.0 - gamma) ** kk / (kk * math.log(1.0 / gamma))
    else:
        # binom(k + eta - 1, k) (1 - gamma)^k gamma^eta / (1 - gamma^eta); gammaln is log|Γ|:
        # for eta in (-1, 0) Γ(eta) < 0 and 1 - gamma^eta < 0, and the two signs cancel
        logc = gammaln(kk + eta) - gammaln(kk + 1.0) - gammaln(eta)
        sign = gammasgn(kk + eta) * gammasgn(eta) * math.copysign(1.0, 1.0 - gamma**eta)
        out[ok] = sign * np.exp(logc + kk * math.log1p(-gamma) + eta * math.log(gamma)) / abs(1.0 - gamma**eta)
    return out


def sample_tnb(rng: np.random.Generator, eta: float, gamma: float) -> int:
    """One draw of ``K ~ TNB(eta, gamma)`` by inverse CDF (exact up to float rounding)."""
    eta, gamma = _check(eta, gamma)
    if eta == 1:
        return int(rng.geometric(gamma))
    u = rng.random()
    k, cdf, block = 1, 0.0, 1024
    while True:
        ks = np.arange(k, k + block)
        p = tnb_pmf(ks, eta, gamma)
        c = cdf + np.cumsum(p)
        hit = np.flatnonzero(c >= u)
        if hit.size:
            return int(ks[hit[0]])
        cdf = float(c[-1])
        k += block
        if k > 10**7:  # pragma: no cover - tail mass below float resolution
            return int(k)


def selection_rdp(base_rdp: Callable[[float], float], orders: np.ndarray, *, eta: float, gamma: float) -> np.ndarray:
    """``eps'(lambda)`` of Papernot & Steinke Thm. 2 at each order ``lambda > 1``.

    Args:
        base_rdp: ``lambda -> eps(lambda)`` of one repetition ``Q``.
        orders: orders ``> 1``.
        eta, gamma: the ``TNB`` parameters.
    """
    from scipy.optimize import minimize_scalar

    eta, gamma = _check(eta, gamma)
    L = math.log(1.0 / gamma)
    log_ek = math.log(tnb_expected_count(eta, gamma))

    def inner(lh: float) -> float:
        return (1.0 + eta) * ((1.0 - 1.0 / lh) * base_rdp(lh) + L / lh)

    # the bound holds for every lh >= 1: take the best of a grid and a bounded search
    grid = np.concatenate([[1.0], np.geomspace(1.0 + 1e-6, _LH_MAX, 400)])
    try:  # vectorized when base_rdp accepts arrays (the Gaussian one does)
        base = np.asarray(base_rdp(grid), dtype=np.float64)
        if base.shape != grid.shape:
            raise TypeError
    except (TypeError, ValueError):
        base = np.array([base_rdp(x) for x in grid])
    vals = (1.0 + eta) * ((1.0 - 1.0 / grid) * base + L / grid)
    j = int(np.argmin(vals))
    lo, hi = grid[max(j - 1, 0)], grid[min(j + 1, len(grid) - 1)]
    best = float(vals[j])
    if hi > lo:
        r = minimize_scalar(inner, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
        best = min(best, float(r.fun))
    a = np.asarray(orders, dtype=np.float64)
    return np.array([base_rdp(x) for x in a]) + best + log_ek / (a - 1.0)


def selection_epsilon(mu: float, *, delta: float, eta: float, gamma: float) -> float:
    """(epsilon, delta) of the selection procedure whose repetitions are each ``mu``-GDP.

    ``mu``-GDP (a composition of Gaussian mechanisms, e.g. NoisyGD with its noisy count
    and a noisy validation count) is ``(lambda, lambda mu^2 / 2)``-RDP for every order;
    the selection's RDP curve (Thm. 2) is converted with :func:`rdp_to_epsilon`.
    """
    mu = V.positive("mu", mu)
    rdp = selection_rdp(lambda a: a * mu * mu / 2.0, RDP_ORDERS, eta=eta, gamma=gamma)
    return rdp_to_epsilon(RDP_ORDERS, rdp, delta=delta)


def calibrate_selection_mu(*, target_epsilon: float, target_delta: float, eta: float, gamma: float) -> float:
    """Largest per-repetition ``mu`` (GDP) such that the selection is
    ``(target_epsilon, target_delta)``-DP; never overshoots (bisection, lower end kept).

    Raises:
        BudgetError: even a vanishing ``mu`` exceeds the budget (the ``log E[K]`` and
            ``log(1/gamma)`` terms alone cost more than ``target_epsilon``).
    """
    e = V.positive("target_epsilon", target_epsilon)
    d = V.open_unit("target_delta", target_delta)
    lo, hi = 1e-6, 1.0
    if selection_epsilon(lo, delta=d, eta=eta, gamma=gamma) > e:
        raise BudgetError(
            "target_epsilon",
            f"private selection with TNB(eta={eta}, gamma={gamma}) cannot meet epsilon={e} at delta={d}: "
            f"the random-stopping overhead alone exceeds it; raise gamma or epsilon",
        )
    while selection_epsilon(hi, delta=d, eta=eta, gamma=gamma) <= e:
        lo, hi = hi, 2 * hi
        if hi > 1e4:  # pragma: no cover
            break
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if selection_epsilon(mid, delta=d, eta=eta, gamma=gamma) <= e:
            lo = mid
        else:
            hi = mid
    return lo


def selection_steps(*, noise_multiplier: float, target_epsilon: float, target_delta: float,
                    eta: float, gamma: float, extra_releases: int = 1) -> int:
    """Noisy-GD steps per repetition: the largest ``T`` with
    ``sqrt(T + extra_releases) / sigma <= calibrate_selection_mu(...)``; ``extra_releases``
    Gaussian releases of the same noise multiplier per repetition (the noisy count) are
    charged as steps. The noisy validation score is released in parallel (disjoint rows),
    see :mod:`mixdp_core.methods.adamix.private`.

    Raises:
        BudgetError: not even one step fits.
    """
    sigma = V.positive("noise_multiplier", noise_multiplier)
    mu = calibrate_selection_mu(target_epsilon=target_epsilon, target_delta=target_delta, eta=eta, gamma=gamma)
    T = int(math.floor((mu * sigma) ** 2 * (1 - 1e-12))) - int(extra_releases)
    if T < 1:
        raise BudgetError(
            "target_epsilon",
            f"private selection leaves mu={mu:.4g} per repetition: no NoisyGD step fits at sigma={sigma}; "
            f"lower noise_multiplier or raise epsilon",
        )
    return T


def selection_plan(*, noise_multiplier: float, target_epsilon: float, target_delta: float,
                   eta: float, gamma: float, extra_releases: int = 1) -> tuple[int, float]:
    """``(T, sigma)`` per repetition: :func:`selection_steps` at ``noise_multiplier`` if at
    least one NoisyGD step fits, else one step at the largest noise multiplier that fits
    (``sigma = sqrt(1 + extra_releases) / mu``, rounded up). ``sqrt(T + extra) / sigma <= mu``.
    """
    sigma = V.positive("noise_multiplier", noise_multiplier)
    mu = calibrate_selection_mu(target_epsilon=target_epsilon, target_delta=target_delta, eta=eta, gamma=gamma)
    T = int(math.floor((mu * sigma) ** 2 * (1 - 1e-12))) - int(extra_releases)
    if T >= 1:
        # the step ceiling, as for a single run: each of the ~1/γ repetitions runs T steps
        # (ε = 1000 at σ = 100 gave 16 million per repetition, past every bound)
        check_steps(T, field="target_epsilon", hint="lower target_epsilon or noise_multiplier")
        return T, sigma
    return 1, math.sqrt(1 + int(extra_releases)) / mu * (1 + 1e-9)
