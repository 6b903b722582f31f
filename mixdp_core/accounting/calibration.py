r"""Calibration: the number of steps or the noise that exactly meets an (ε, δ) budget.

Full-batch NoisyGD (AdaMix Alg. 1–3; Prop. 2 / App. B) with T steps at noise multiplier σ
is μ-GDP with μ = √T/σ, so it meets (ε, δ) iff √T/σ ≤ μ*(ε, δ), the largest μ whose exact
privacy profile δ(ε; μ) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ) stays ≤ δ
(:func:`~.gaussian.gdp_mu_for_budget`). Hence, in closed form,

* :func:`calibrate_steps`: T = ⌊(μ* σ)²⌋,
* :func:`calibrate_noise`: σ = √T / μ*,

each then *verified* with :func:`~.accountant.epsilon` (and nudged by a step / a few ulps if
rounding put it on the wrong side), so ``epsilon(ComposedGaussian(σ, T), delta=δ) <= ε``
always holds and T + 1 would not fit. This takes well under a millisecond, where autodp's
generic ``eps_delta_calibrator`` needs a numerical search over its own ε(σ) evaluations; the
tests confirm the closed form against autodp's analytic Gaussian calibrator (Balle & Wang
2018, as AdaMix does).

DP-SGD (:func:`calibrate_dpsgd_noise`): ε(σ) is decreasing in σ for every accountant, so the
smallest σ meeting the budget is found by a bracketing root search (Illinois/regula falsi in
log σ) that keeps an upper end σ_hi with ε(σ_hi) ≤ target at all times and returns it — it
never overshoots by construction. With q = 1 the run is full-batch NoisyGD and is calibrated
exactly whatever ``accountant`` says.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from . import _validate as V
import numpy as np

from .accountant import DPSGD_ACCOUNTANTS, dpsgd_accountant, epsilon  # noqa: F401  (re-exported)
from .backends import PLD_SEARCH_INTERVAL, pld_epsilon, subsampled_gaussian_rdp  # noqa: F401
from .conversions import RDP_ORDERS, lazy_rdp_epsilon, rdp_to_epsilon
from .errors import BudgetError
from .events import ComposedGaussian, PoissonSubsampledGaussian
from .gaussian import gaussian_epsilon, gdp_mu_for_budget
from ..config import check_delta, check_epsilon
from ..errors import ConfigError

from .limits import DEFAULT_STEP_LIMIT, MAX_STEPS, check_steps, step_limit  # noqa: F401  (re-exported)


def noisy_count_event(*, target_epsilon: float, target_delta: float, share: float):
    """The pure-DP release of a private count that DP-SGD methods use to set q and T.

    A two-sided geometric count (:func:`~mixdp_core.randomness.geometric_count`; L1
    sensitivity 1 under add/remove-one) at ε_c = ``share`` · ε: pure ε_c-DP. The steps are
    then calibrated to (ε − ε_c, δ) whatever the count came out as, and the run is
    ``AdaptiveComposition(count, steps)`` — basic composition, which holds for a mechanism
    chosen from an earlier output (:class:`~.events.AdaptiveComposition`). ``target_delta`` is
    checked, not spent (the count has δ = 0).
    """
    from .events import PureDP

    e, _ = _budget(target_epsilon, target_delta)
    if not (0.0 < float(share) < 1.0):
        raise ConfigError("count_budget_share", f"must lie in (0, 1), got {share!r}")
    return PureDP(epsilon=float(share) * e)


def _fmt_steps(x: float) -> str:
    return f"more than {MAX_STEPS:,}" if not math.isfinite(x) or x > MAX_STEPS else f"{int(x):,}"


_SIGMA_MAX = 1e7
_SIGMA_MIN = 1e-3


def _budget(target_epsilon: float, target_delta: float) -> tuple[float, float]:
    """ε and δ checked against their one declaration (:data:`mixdp_core.config.EPSILON`, ``DELTA``)."""
    return check_epsilon(target_epsilon, field="target_epsilon"), check_delta(target_delta, field="target_delta")


def calibrate_steps(*, noise_multiplier: float, target_epsilon: float, target_delta: float,
                    max_steps: Optional[int] = None) -> int:
    """Largest T such that full-batch NoisyGD with noise multiplier σ is (ε, δ)-DP.

    T = ⌊(μ*(ε, δ) · σ)²⌋ (exact μ-GDP; AdaMix Prop. 2), checked with :func:`epsilon`.

    Args:
        noise_multiplier: σ > 0.
        target_epsilon: ε > 0.
        target_delta: δ in (0, 1).
        max_steps: the step ceiling (default :func:`step_limit`, i.e. ``$MIXDP_MAX_STEPS``
            or 100,000).

    Returns:
        T ≥ 1 (at most the ceiling), with ``epsilon(ComposedGaussian(σ, T), delta=δ)
        <= ε`` and (below the ceiling) ``epsilon(ComposedGaussian(σ, T + 1), delta=δ) > ε``.

    Raises:
        BudgetError: not even one step fits (field ``"epsilon"``; the message gives the
            smallest ε, and the smallest σ, that would allow one step), or the budget
            implies more steps than the ceiling (field ``"epsilon"``; the message gives the
            limit and the largest σ that fits it).
        ConfigError: an argument is out of range.

    Example:
        >>> calibrate_steps(noise_multiplier=10.0, target_epsilon=1.0, target_delta=1e-5)
        7
    """
    s = V.positive("noise_multiplier", noise_multiplier)
    e, d = _budget(target_epsilon, target_delta)
    mu_star = gdp_mu_for_budget(epsilon=e, delta=d)
    x = (mu_star * s) * (mu_star * s)  # not ** 2: a float power raises OverflowError (σ ≈ 1e154), a product gives inf
    lim = step_limit() if max_steps is None else V.count("max_steps", max_steps)
    if not math.isfinite(x) or x >= lim + 1:
        # Refused before anything runs: name the limit and the σ / ε that fit it.
        s_fit = calibrate_noise(steps=lim, target_epsilon=e, target_delta=d)
        raise BudgetError(
            "epsilon",
            f"target_epsilon={e:g} at noise_multiplier={s:g} (delta={d:g}) implies "
            f"{_fmt_steps(x)} "
            f"full-batch steps, above the limit of {lim:,} steps (MIXDP_MAX_STEPS); "
            f"use noise_multiplier <= {s_fit:.6g} (fits {lim:,} steps) or a smaller epsilon",
        )
    T = int(math.floor(x))

    def fits(t: int) -> bool:
        return t >= 1 and epsilon(ComposedGaussian(s, t), delta=d) <= e

    while T >= 1 and not fits(T):
        T -= 1
    while 1 <= T < lim and fits(T + 1):
        T += 1
    if T < 1:
        eps1 = float(gaussian_epsilon(1.0 / s, delta=d))
        s1 = calibrate_noise(steps=1, target_epsilon=e, target_delta=d)
        if not math.isfinite(eps1) or eps1 > 1e3:  # no ε is worth suggesting: name the noise
            raise BudgetError(
                "noise_multiplier",
                f"noise_multiplier={s:g} is too small: one full-batch step would spend more than epsilon=1000 "
                f"at delta={d:g}; target_epsilon={e:g} needs noise_multiplier >= {s1:.4g}",
            )
        raise BudgetError(
            "epsilon",
            f"target_epsilon={e:g} is too small for noise_multiplier={s:g} at delta={d:g}: a single "
            f"full-batch step already spends epsilon={eps1:.4g}; raise target_epsilon to >= {eps1:.4g} "
            f"or noise_multiplier to >= {s1:.4g}",
        )
    return T


def calibrate_noise(*, steps: int, target_epsilon: float, target_delta: float) -> float:
    """Smallest σ such that ``steps`` full-batch NoisyGD steps are (ε, δ)-DP.

    σ = √T / μ*(ε, δ) (exact μ-GDP), nudged up by a few ulps if needed so that
    ``epsilon(ComposedGaussian(σ, T), delta=δ) <= ε``.

    Example:
        >>> round(calibrate_noise(steps=1, target_epsilon=0.1, target_delta=1e-6), 4)  # autodp
        36.3047
    """
    T = V.count("steps", steps)
    e, d = _budget(target_epsilon, target_delta)
    s = math.sqrt(T) / gdp_mu_for_budget(epsilon=e, delta=d)
    bump = 1e-15
    for _ in range(200):
        if epsilon(ComposedGaussian(s, T), delta=d) <= e:
            return s
        s *= 1.0 + bump
        bump *= 2.0
    raise AssertionError("calibrate_noise failed to verify")  # pragma: no cover


def _smallest_sigma(
    f: Callable[[float], float], target: float, start: float, rtol: float, factor: float = 2.0
) -> float:
    """Smallest σ with ``f(σ) <= target`` for decreasing ``f`` (returns a verified σ_hi).

    Brackets the root by stepping from ``start`` by ``factor``, then runs Illinois regula
    falsi in log σ until the bracket is below ``rtol`` (relative). Every returned value was
    evaluated and satisfied ``f(σ) <= target``.
    """
    hi = min(start, _SIGMA_MAX)
    f_hi = f(hi)
    while f_hi > target:
        if hi >= _SIGMA_MAX:
            raise BudgetError(
                "epsilon", f"target_epsilon={target:g} would need noise_multiplier > {_SIGMA_MAX:g}"
            )
        hi = min(hi * factor, _SIGMA_MAX)
        f_hi = f(hi)
    lo = hi / factor
    f_lo = f(lo)
    while f_lo <= target:
        hi, f_hi = lo, f_lo
        if hi <= _SIGMA_MIN:
            return hi
        lo = hi / factor
        f_lo = f(lo)

    # h(x) = log f(e^x) - log target on the bracket: h(log lo) > 0 (over budget),
    # h(log hi) <= 0 (within budget). Only a within-budget point is ever returned.
    lt = math.log(target)

    def h(val: float) -> float:
        return (math.log(val) if val > 0 else -math.inf) - lt if math.isfinite(val) else math.inf

    xs = _safe_side_root(lambda x: h(f(math.exp(x))), math.log(hi), h(f_hi), math.log(lo), h(f_lo), rtol=rtol)
    return math.exp(xs)


def _safe_side_root(h: Callable[[float], float], xs: float, hs: float, xu: float, hu: float, *,
                    rtol: float) -> float:
    """The one safe-side solver: the bracket end ``xs`` with ``h(xs) <= 0`` closest to the root.

    Illinois regula falsi on a bracket whose *safe* end ``xs`` has ``h(xs) = hs <= 0``
    (within budget) and whose other end ``xu`` has ``h(xu) = hu > 0`` (over budget); works
    whichever end is the larger. Stops when the bracket is below ``rtol`` or the safe end is
    within 1e-10 of the root. Returns the safe end, so the result never overshoots: every
    returned point was evaluated and satisfied ``h <= 0``.
    """
    side = 0
    for _ in range(200):
        lo, hi = min(xs, xu), max(xs, xu)
        w = hi - lo
        if w <= rtol or hs >= -1e-10:  # bracket tiny, or within 1e-10 of the target
            break
        if math.isfinite(hu) and math.isfinite(hs) and hu != hs:
            xm = xs - hs * (xs - xu) / (hs - hu)
            if not (lo < xm < hi):
                xm = 0.5 * (xu + xs)
        else:
            xm = 0.5 * (xu + xs)
        # keep the iterate away from the ends so the bracket always shrinks
        xm = min(max(xm, lo + 1e-3 * w), hi - 1e-3 * w)
        hm = h(xm)
        if hm <= 0:
            xs, hs = xm, hm
            if side == 1:
                hu /= 2.0
            side = 1
        else:
            xu, hu = xm, hm
            if side == -1:
                hs /= 2.0
            side = -1
    return xs


def largest_param(
    make_epsilon: Callable[[float], float],
    *,
    target_epsilon: float,
    lo: float,
    hi: float,
    rtol: float = 1e-12,
) -> float:
    """Largest ``x`` in ``[lo, hi]`` with ``make_epsilon(x) <= target_epsilon`` (safe side).

    ``make_epsilon`` must be non-decreasing in ``x`` (e.g. ρ -> ε of a zCDP mechanism at δ,
    or ε_EM -> (ε, δ) of the exponential mechanism). Solved in log x with
    :func:`_safe_side_root` (the solver every calibration here uses): the returned ``x``
    always satisfies the budget.

    Raises:
        BudgetError: even ``lo`` exceeds the target (field ``"epsilon"``).
    """
    e = V.epsilon("target_epsilon", target_epsilon)
    if make_epsilon(lo) > e:
        raise BudgetError("epsilon", f"target_epsilon={e} is too small to calibrate (ε({lo}) exceeds it)")
    if make_epsilon(hi) <= e:
        return hi
    lt = math.log(e)

    def h(x: float) -> float:
        val = make_epsilon(math.exp(x))
        return (math.log(val) if val > 0 else -math.inf) - lt if math.isfinite(val) else math.inf

    xs = _safe_side_root(h, math.log(lo), h(math.log(lo)), math.log(hi), h(math.log(hi)), rtol=rtol)
    x = math.exp(xs)
    # exp(log(x)) may round a hair above the evaluated point: step down until verified
    while make_epsilon(x) > e and x > lo:
        x = max(lo, x * (1.0 - 1e-15))
    return x


def calibrate_em_epsilon(*, target_epsilon: float, target_delta: float, monotone: bool,
                         calibration: str) -> float:
    """ε_EM of one exponential-mechanism run that meets an (ε, δ) target.

    Args:
        target_epsilon: ε > 0.
        target_delta: δ in (0, 1).
        monotone: whether the utility is monotone (sets the sampling scale, not the guarantee).
        calibration: ``"pure"`` (the largest ε_EM whose (ε, δ) from the accounting module is
            within target) or ``"zcdp"`` (the largest ρ whose (ε, δ) is within target, then
            ε_EM = sqrt(8 ρ), the bounded-range conversion).

    Raises:
        BudgetError: the target cannot be met; ConfigError: ``calibration`` unknown.
    """
    from .conversions import zcdp_to_epsilon
    from .events import ExponentialMechanism

    e, d = _budget(target_epsilon, target_delta)
    if calibration == "pure":
        return largest_param(
            lambda x: epsilon(ExponentialMechanism(epsilon=x, monotone=monotone), delta=d),
            target_epsilon=e, lo=1e-8, hi=1e4,
        )
    if calibration == "zcdp":
        rho = largest_param(lambda r: zcdp_to_epsilon(r, delta=d), target_epsilon=e, lo=1e-12, hi=1e6)
        eps_em = math.sqrt(8.0 * rho)
        # sqrt then square can land one ulp above ρ: step down until the event as reported
        # (ExponentialMechanism's ρ = ε_EM²/8) is within the target, never above it
        while epsilon(ExponentialMechanism(epsilon=eps_em, monotone=monotone), delta=d) > e:
            eps_em = math.nextafter(eps_em, 0.0)
        return eps_em
    raise ConfigError("calibration", f"must be 'pure' or 'zcdp', got {calibration!r}")


def calibrate_dpsgd_noise(
    *,
    sample_rate: float,
    steps: int,
    target_epsilon: float,
    target_delta: float,
    accountant: str = "rdp",
    also: object = None,
    step_field: Optional[str] = None,
) -> float:
    """Smallest σ such that DP-SGD (Poisson rate q, T steps) is (ε, δ)-DP.

    Args:
        sample_rate: q in (0, 1]; q = 1 is full-batch NoisyGD (calibrated exactly).
        steps: T ≥ 1.
        target_epsilon: ε > 0.
        target_delta: δ in (0, 1).
        accountant: ``"rdp"`` (Opacus RDP, default), ``"prv"`` (Opacus PRV, tighter, ~0.3 s
            per evaluation) or ``"pld"`` (dp-accounting PLD, tightest: the DP-SGD methods
            use it). The PLD search runs on a coarser pessimistic discretisation (an upper
            bound, so its answer also meets the budget under the reported default one).
        also: a pure-DP event released before the steps that chose q and T (the noisy
            count); σ is calibrated so that the steps alone meet (ε − ε_also, δ), i.e. for
            ``AdaptiveComposition(also, PoissonSubsampledGaussian(σ, q, T))``.
        step_field: if given, T is checked against the step ceiling (:func:`check_steps`)
            and a refusal names this field.

    Returns:
        σ with ``epsilon(PoissonSubsampledGaussian(σ, q, T), delta=δ, accountant=...) <= ε``
        (relative tolerance 1e-9 for RDP; for PRV/PLD 1e-3 on the search's grid, refined to
        1e-4 on the reported accountant where that grid left more than 1e-3 of the budget).

    Raises:
        BudgetError: the budget needs σ > 1e7.
        ConfigError: an argument is out of range.

    Example:
        >>> s = calibrate_dpsgd_noise(sample_rate=0.04, steps=2250, target_epsilon=8.0,
        ...                           target_delta=1e-5)   # Opacus' test: 1.4253 (tol 0.01)
        >>> 1.40 < s <= 1.4254
        True
    """
    q = V.rate("sample_rate", sample_rate)
    T = V.count("steps", steps)
    e, d = _budget(target_epsilon, target_delta)
    acc = dpsgd_accountant(accountant)
    if step_field is not None:
        check_steps(T, field=step_field, hint=f"lower {step_field} or raise the expected batch size")
    if also is not None:
        return _calibrate_composed(q, T, e, d, accountant, also)
    exact = calibrate_noise(steps=T, target_epsilon=e, target_delta=d)
    if q == 1.0:
        return exact
    sigma_rdp = _calibrate_rdp(q, T, e, d, start=exact)
    # RDP: that answer; PRV / PLD (tighter): the safe-side search from it.
    sig = sigma_rdp
    if acc.dpsgd_search:
        sig = _smallest_sigma(lambda s: acc.dpsgd_search_epsilon(s, sample_rate=q, steps=T, delta=d), e, sigma_rdp,
                              rtol=1e-3, factor=1.25)
        # the search's coarse grid overstates ε by much more than its nominal 1e-4 at small ε over
        # many steps (ε 0.100 coarse, 0.063 reported: σ 53 % above the smallest that fits): where the
        # reported ε leaves more than 1e-3 of the budget, refine on the reported accountant
        fine = lambda s: epsilon(PoissonSubsampledGaussian(s, q, T), delta=d, accountant=accountant)  # noqa: E731
        if fine(sig) < e * (1.0 - 1e-3):
            sig = _smallest_sigma(fine, e, sig, rtol=1e-4, factor=1.25)
    # Final guard (the searches only return verified values; this re-checks the public path).
    for _ in range(100):
        if epsilon(PoissonSubsampledGaussian(sig, q, T), delta=d, accountant=accountant) <= e:
            return sig
        sig *= 1.0 + 1e-6
    raise AssertionError("calibrate_dpsgd_noise failed to verify")  # pragma: no cover


def _calibrate_composed(q: float, T: int, e: float, d: float, accountant: str, also: object) -> float:
    """Smallest σ with ε(AdaptiveComposition(also, PSG(σ, q, T))) <= e: the steps alone are
    calibrated to (e − ε_also, d), which holds whatever ``also`` released (verified)."""
    from .events import AdaptiveComposition, _pure, check_event

    check_event(also, "also")
    eps_also = _pure(also)
    if eps_also is None:
        raise ConfigError("also", f"must be a pure-DP event (it chooses q and T adaptively), got {also.describe()}")
    if eps_also >= e:
        raise BudgetError("epsilon", f"target_epsilon={e:g} is used up by {also.describe()} alone "
                                     f"(epsilon={eps_also:.4g}); raise epsilon")
    try:
        sig = calibrate_dpsgd_noise(sample_rate=q, steps=T, target_epsilon=e - eps_also, target_delta=d,
                                    accountant=accountant)
    except BudgetError as err:  # it named the steps' share (0.00098), not the ε the user asked for
        raise BudgetError("epsilon", f"target_epsilon={e:g}: after {also.describe()} (epsilon={eps_also:.4g}) the "
                                     f"{T} steps at q = {q:.3g} keep epsilon={e - eps_also:.4g}, too little ({err.message}); "
                                     "raise epsilon or lower the steps") from None
    # checked as the methods report it: full batch (q = 1) by the exact GDP closed form, which
    # is also what the search above calibrated it with, whatever the accountant
    report_accountant = accountant if q < 1.0 else None
    for _ in range(100):
        if epsilon(AdaptiveComposition(also, PoissonSubsampledGaussian(sig, q, T)), delta=d,
                   accountant=report_accountant) <= e:
            return sig
        sig *= 1.0 + 1e-6
    raise AssertionError("calibrate_dpsgd_noise failed to verify")  # pragma: no cover


def _calibrate_rdp(q: float, T: int, e: float, d: float, *, start: float) -> float:
    """Smallest σ whose RDP ε (as :func:`epsilon` reports it) is ≤ e.

    Opacus' RDP costs up to milliseconds per fractional order, so the search runs on a
    window of the ~13 orders around the optimal one (ε on a subset is ≥ ε on all orders, so
    the subset's answer is within budget), then re-checks with the accountant itself: if the
    optimal order at the answer lies inside the window, the answer is also the smallest σ for
    all orders; otherwise the window moves and the search repeats.
    """
    orders = np.asarray(RDP_ORDERS, dtype=np.float64)
    n = len(orders)

    def reported(sig: float) -> tuple[float, float]:
        eps, alpha = lazy_rdp_epsilon(lambda o: T * subsampled_gaussian_rdp(q, sig, o), delta=d)
        return float(eps[0]), float(alpha[0])

    sig = start
    _, a = reported(sig)
    best_ok = None
    half = 6
    # The window widens each round the optimum lies at its edge: from the full-batch σ the best
    # order is ~192 and the answer's ~1.3-9; a fixed 13-order window moved ~6 orders a round and
    # 8 rounds stopped far off, returning a σ that spent ε = 1.48 of a target of 8.
    for _ in range(int(np.ceil(np.log2(max(n, 2)))) + 8):
        i = int(np.searchsorted(orders, a))
        w = tuple(float(x) for x in orders[max(0, i - half): min(n, i + half + 1)])
        wa = np.asarray(w)

        def f(s: float, w=w, wa=wa) -> float:
            return rdp_to_epsilon(wa, T * subsampled_gaussian_rdp(q, s, w), delta=d)

        sig = _smallest_sigma(f, e, sig, rtol=1e-9)
        eps_r, a_new = reported(sig)
        if eps_r <= e:
            best_ok = sig if best_ok is None else min(best_ok, sig)
            if eps_r >= e * (1.0 - 1e-8) or w[0] < a_new < w[-1] or a_new in (orders[0], orders[-1]):
                return best_ok
        a = a_new
        half = min(2 * half, n)
    if best_ok is not None:
        return best_ok
    return _smallest_sigma(lambda s: reported(s)[0], e, sig, rtol=1e-9)  # pragma: no cover
