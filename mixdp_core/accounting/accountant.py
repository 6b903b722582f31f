"""ε(δ), δ(ε) and privacy reports for accounting events.

Which accountant is used (``accountant=None``, the default):

==========================================  ===============================================
event                                       accountant
==========================================  ===============================================
Gaussian, ComposedGaussian, DP-SGD q = 1,   ``"gdp"``: exact μ-GDP closed form
and compositions of these                   (:mod:`.gaussian`; Balle & Wang 2018)
ZCDP, PureDP, ExponentialMechanism, and     best (smallest ε) of ``"zcdp"`` (tight CKS
compositions mixing them with Gaussians     conversion), ``"rdp"`` and, for pure-only
                                            events, ``"pure"`` (randomized-response profile)
DP-SGD with q < 1, or any composition       ``"rdp"`` (Opacus' subsampled-Gaussian RDP +
containing it                               CKS conversion)
==========================================  ===============================================

Every accountant returns an *upper bound* on the true ε (the exact ones return it up to
~1e-12 relative, rounded up). ``accountant`` may force one of ``"gdp"``, ``"zcdp"``,
``"rdp"``, ``"pure"``, ``"prv"`` (Opacus PRV, ε only) or ``"pld"`` (dp-accounting PLD) for
side-by-side comparison; an accountant that cannot handle the event raises
:class:`~mixdp_core.errors.ConfigError` naming ``accountant``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

import numpy as np

from . import _validate as V
from . import backends
from .conversions import (
    lazy_rdp_delta,
    lazy_rdp_epsilon,
    pure_dp_delta,
    pure_dp_epsilon,
    zcdp_to_delta,
    zcdp_to_epsilon,
)
from .events import (
    AdaptiveComposition,
    Composition,
    ExponentialMechanism,
    PoissonSubsampledGaussian,
    PureDP,
    _blocks,
    _mu,
    _pure,
    _rdp,
    _rho,
    check_event,
    event_to_dict,
    split_adaptive,
)
from .gaussian import gaussian_delta, gaussian_epsilon
from ..errors import ConfigError
from ..registry import Registry

class Accountant:
    """One way of turning an event into (ε, δ); registered by name in :data:`ACCOUNTANT_REGISTRY`.

    Subclasses set ``name`` and ``auto`` and implement :meth:`unsupported`,
    :meth:`epsilon` and :meth:`delta` (like dp-accounting's ``PrivacyAccountant`` classes,
    one per method, instead of ``if name == ...`` chains).

    Class attributes:
        name: the key of ``accountant=``.
        auto: used when ``accountant=None`` (the smallest ε among the applicable ``auto``
            accountants is reported).
        exclusive: when applicable with ``accountant=None``, it is exact and used alone.
    """

    name: ClassVar[str] = ""
    auto: ClassVar[bool] = False
    exclusive: ClassVar[bool] = False
    #: usable for DP-SGD (Poisson-subsampled Gaussian) calibration and ε(t) curves.
    dpsgd: ClassVar[bool] = False

    #: Whether DP-SGD calibration searches σ with :meth:`dpsgd_search_epsilon` from the RDP
    #: answer (PRV, PLD: tighter than RDP) or takes the RDP answer as it is (RDP itself).
    #: The search lives in :mod:`.calibration` alone (calibration imports the accountants,
    #: never the other way round).
    dpsgd_search: ClassVar[bool] = True

    def dpsgd_search_epsilon(self, noise_multiplier: float, *, sample_rate: float, steps: int,
                             delta: float) -> float:
        """ε at ``delta`` of DP-SGD with σ = ``noise_multiplier`` as the calibration search reads
        it: an upper bound of the reported ε (default: the reported ε itself)."""
        return epsilon(PoissonSubsampledGaussian(noise_multiplier, sample_rate, steps), delta=delta,
                       accountant=self.name)

    def dpsgd_curve_points(self, steps: int, default: int) -> int:
        """How many step counts a DP-SGD ε(t) curve evaluates (the rest are filled upwards)."""
        return min(steps, default)

    def dpsgd_curve(self, *, noise_multiplier: float, sample_rate: float, knots: np.ndarray,
                    delta: float) -> np.ndarray:
        """ε after each number of steps in ``knots`` (DP-SGD)."""
        return np.array([epsilon(PoissonSubsampledGaussian(noise_multiplier, sample_rate, int(t)), delta=delta,
                                 accountant=self.name) for t in knots])

    def unsupported(self, event: Any) -> Optional[str]:
        """Why this accountant cannot account ``event``, or ``None`` if it can."""
        return None

    def epsilon(self, event: Any, delta: float) -> float:
        """ε at ``delta`` (an upper bound)."""
        raise NotImplementedError

    def delta(self, event: Any, epsilon: float) -> float:
        """δ at ``epsilon`` (an upper bound)."""
        raise NotImplementedError


#: Accountant name -> instance, in the order of precedence among equal ε.
ACCOUNTANT_REGISTRY: Registry[Accountant] = Registry("accountant")


def _register(cls: type[Accountant]) -> type[Accountant]:
    ACCOUNTANT_REGISTRY.add(cls.name, cls())
    return cls


@_register
class GDPAccountant(Accountant):
    """Exact μ-GDP closed form (Balle & Wang 2018) for Gaussian-family events."""

    name, auto, exclusive = "gdp", True, True

    def unsupported(self, event: Any) -> Optional[str]:
        return None if _mu(event) is not None else "exact μ-GDP needs Gaussian mechanisms with full batches"

    def epsilon(self, event: Any, delta: float) -> float:
        return float(gaussian_epsilon(_mu(event), delta=delta))

    def delta(self, event: Any, epsilon: float) -> float:
        return float(gaussian_delta(_mu(event), epsilon))


@_register
class ZCDPAccountant(Accountant):
    """ρ-zCDP with the tight conversion of Canonne, Kamath & Steinke 2020."""

    name, auto = "zcdp", True

    def unsupported(self, event: Any) -> Optional[str]:
        return None if _rho(event) is not None else (
            "Poisson-subsampled Gaussian is not ρ-zCDP; use 'rdp', 'prv' or 'pld'")

    def epsilon(self, event: Any, delta: float) -> float:
        return zcdp_to_epsilon(_rho(event), delta=delta)

    def delta(self, event: Any, epsilon: float) -> float:
        return zcdp_to_delta(_rho(event), epsilon=epsilon)


@_register
class RDPAccountant(Accountant):
    """Rényi DP (Opacus' subsampled-Gaussian RDP) with the CKS conversion; every event."""

    name, auto, dpsgd = "rdp", True, True

    def epsilon(self, event: Any, delta: float) -> float:
        return float(lazy_rdp_epsilon(lambda o: _rdp(event, np.asarray(o)), delta=delta)[0][0])

    dpsgd_search = False  # the RDP answer is this accountant's own

    def dpsgd_curve_points(self, steps: int, default: int) -> int:
        return steps  # every step: the RDP curve of all counts costs one evaluation

    def dpsgd_curve(self, *, noise_multiplier: float, sample_rate: float, knots: np.ndarray,
                    delta: float) -> np.ndarray:
        vals, _ = lazy_rdp_epsilon(lambda o: backends.subsampled_gaussian_rdp(sample_rate, noise_multiplier, o),
                                   delta=delta, scales=knots)
        return vals

    def delta(self, event: Any, epsilon: float) -> float:
        return lazy_rdp_delta(lambda o: _rdp(event, np.asarray(o)), epsilon=epsilon)


@_register
class PureAccountant(Accountant):
    """The randomized-response profile of a pure ε-DP guarantee."""

    name, auto = "pure", True

    def unsupported(self, event: Any) -> Optional[str]:
        return None if _pure(event) is not None else "only PureDP and ExponentialMechanism have a pure ε"

    def epsilon(self, event: Any, delta: float) -> float:
        return pure_dp_epsilon(_pure(event), delta=delta)

    def delta(self, event: Any, epsilon: float) -> float:
        return pure_dp_delta(_pure(event), epsilon=epsilon)


#: The smallest δ the numerical accountants (PLD, PRV) resolve. Their truncated tail mass is
#: 1e-15, so near and below it the answer is ∞ or a failure: at δ = 1e-15 the PLD calibration
#: asked σ ≈ 1,200 where RDP needs 4 (q = 0.088, 23 steps, ε = 1), and PRV failed. Measured
#: down to 1e-14, where both still agree with RDP within 4 %.
NUMERICAL_MIN_DELTA = 1e-14


class _BlockAccountant(Accountant):
    dpsgd = True

    def _check_delta(self, delta: float) -> None:
        if delta < NUMERICAL_MIN_DELTA:
            raise ConfigError("target_delta", f"the '{self.name}' accountant resolves δ >= {NUMERICAL_MIN_DELTA:g} "
                                              f"(its truncated tail mass is 1e-15), got {delta:g}; use "
                                              "accountant='rdp' for a smaller δ")

    def unsupported(self, event: Any) -> Optional[str]:
        return None if _blocks(event) is not None else "only Gaussian and subsampled-Gaussian steps are supported"


@_register
class PRVAccountant(_BlockAccountant):
    """Opacus' PRV accountant (ε at a given δ only)."""

    name = "prv"

    def epsilon(self, event: Any, delta: float) -> float:
        self._check_delta(delta)
        return backends.prv_epsilon(_blocks(event), delta=delta)

    def delta(self, event: Any, epsilon: float) -> float:
        raise ConfigError("accountant", "'prv' gives ε at a given δ only; use 'rdp' or 'pld' for δ(ε)")


@_register
class PLDAccountant(_BlockAccountant):
    """dp-accounting's privacy-loss-distribution accountant."""

    name = "pld"

    def dpsgd_search_epsilon(self, noise_multiplier: float, *, sample_rate: float, steps: int,
                             delta: float) -> float:
        """On a coarser pessimistic PLD grid: an upper bound of ε for any grid width, so the
        search's answer also meets the budget under the reported, finer one (~10× faster)."""
        self._check_delta(delta)
        return backends.pld_epsilon([(noise_multiplier, sample_rate, steps)], delta=delta,
                                    interval=backends.PLD_SEARCH_INTERVAL)

    def epsilon(self, event: Any, delta: float) -> float:
        self._check_delta(delta)
        return backends.pld_epsilon(_blocks(event), delta=delta)

    def delta(self, event: Any, epsilon: float) -> float:
        return backends.pld_delta(_blocks(event), epsilon=epsilon)


#: Accountant names accepted by ``accountant=``.
ACCOUNTANTS: tuple[str, ...] = tuple(ACCOUNTANT_REGISTRY.keys())
#: Accountants of DP-SGD calibration and curves.
DPSGD_ACCOUNTANTS: tuple[str, ...] = tuple(n for n, a in ACCOUNTANT_REGISTRY.items() if a.dpsgd)


def dpsgd_accountant(name: str) -> Accountant:
    """The registered DP-SGD accountant ``name``.

    Raises:
        ConfigError: field ``accountant``, listing :data:`DPSGD_ACCOUNTANTS`.
    """
    if name not in DPSGD_ACCOUNTANTS:
        raise ConfigError("accountant", f"must be one of {', '.join(DPSGD_ACCOUNTANTS)}, got {name!r}")
    return ACCOUNTANT_REGISTRY.get(name)


def gdp_mu(event: Any) -> Optional[float]:
    """μ of μ-GDP: sensitivity/σ for one Gaussian, √T/σ for T full-batch steps, the root of
    the sum of squares for a composition of these; ``None`` for anything else (DP-SGD with
    q < 1 is not μ-GDP for a useful μ; pure/zCDP events are not GDP)."""
    check_event(event)
    return _mu(event)


def zcdp_rho(event: Any) -> Optional[float]:
    """ρ of ρ-zCDP, or ``None`` (DP-SGD with q < 1).

    Gaussian family: ρ = μ²/2 (= T/(2σ²) for full-batch NoisyGD). ZCDP: ρ. PureDP: ε²/2
    (Bun & Steinke 2016, Prop. 1.4 — the DP-prototypes paper's convention). Exponential
    mechanism: count·ε²/8 (bounded range; Cesar & Rogers 2021). Compositions: the sum.
    See :func:`~.conversions.pure_to_zcdp` for the two pure-DP conventions.
    """
    check_event(event)
    return _rho(event)


def pure_epsilon(event: Any) -> Optional[float]:
    """ε of a pure (δ = 0) guarantee: PureDP, ExponentialMechanism (count·ε), or sums of
    these; ``None`` otherwise."""
    check_event(event)
    return _pure(event)


def _check_accountant(accountant: Optional[str]) -> None:
    if accountant is not None and accountant not in ACCOUNTANT_REGISTRY:
        raise ConfigError("accountant", f"must be one of {', '.join(ACCOUNTANTS)} (or None), got {accountant!r}")


def _candidates(event: Any, accountant: Optional[str]) -> list[Accountant]:
    """Accountants to evaluate (the smallest ε among them is reported)."""
    _check_accountant(accountant)
    if accountant is None:
        usable = [a for _, a in ACCOUNTANT_REGISTRY.items() if a.auto and a.unsupported(event) is None]
        exact = [a for a in usable if a.exclusive]
        return exact[:1] or usable
    acc = ACCOUNTANT_REGISTRY.get(accountant)
    why = acc.unsupported(event)
    if why is not None:
        raise ConfigError("accountant", f"{accountant!r} cannot account {event.describe()}: {why}")
    return [acc]


def _best(fn: Callable[[Accountant], float], accs: list[Accountant]) -> tuple[float, str]:
    vals = [(fn(a), a.name) for a in accs]
    return min(vals, key=lambda v: v[0])


def epsilon_and_accountant(event: Any, *, delta: float, accountant: Optional[str] = None) -> tuple[float, str]:
    """Like :func:`epsilon` but also returns the name of the accountant that produced ε."""
    check_event(event)
    d = V.open_unit("delta", delta)
    if isinstance(event, AdaptiveComposition):  # basic adaptive composition (see the class)
        e2, used = epsilon_and_accountant(event.then, delta=d, accountant=accountant)
        return event.first_epsilon + e2, used
    if isinstance(event, Composition) and any(isinstance(e, AdaptiveComposition) for e in event.events):
        # an adaptive part inside a composition (no fixed RDP curve: it raised TypeError): its pure
        # first part adds basically, the rest composes, as the data-set ledger does
        pure, rest = split_adaptive([event])
        if not rest:
            return math.fsum(pure), "pure"
        e2, used = epsilon_and_accountant(rest[0] if len(rest) == 1 else Composition(tuple(rest)), delta=d,
                                          accountant=accountant)
        return math.fsum(pure) + e2, f"basic(adaptive)+{used}"
    best = _best(lambda a: a.epsilon(event, d), _candidates(event, accountant))
    split = _pure_split(event) if accountant is None else None
    if split is not None:  # a second sound bound; report the smaller (tightest sound)
        pure_eps, rest = split
        e_rest, used = epsilon_and_accountant(rest, delta=d)
        if pure_eps + e_rest < best[0]:
            return pure_eps + e_rest, f"basic(pure)+{used}"
    return best


def _pure_split(event: Any) -> Optional[tuple[float, Any]]:
    """``(Σ pure ε, the rest)`` of a composition that mixes pure parts (δ = 0: PureDP, the
    exponential mechanism) with others, or ``None``. Basic composition of the pure parts with
    the rest's (ε, δ) is sound (Dwork, Rothblum & Vadhan 2010) and can be tighter than one RDP
    curve of the whole: PureDP(0.5) + a Gaussian at σ = 3 is 1.948 this way, 2.058 by RDP."""
    if not isinstance(event, Composition):
        return None
    pure, rest = [], []
    for e in event.events:
        p = _pure(e) if isinstance(e, (PureDP, ExponentialMechanism)) else None
        (pure if p is not None else rest).append(p if p is not None else e)
    if not pure or not rest:
        return None
    return math.fsum(pure), (rest[0] if len(rest) == 1 else Composition(tuple(rest)))


def epsilon(event: Any, *, delta: float, accountant: Optional[str] = None) -> float:
    """Smallest ε (upper bound on the true one) such that ``event`` is (ε, δ)-DP.

    Args:
        event: an accounting event (:class:`~.events.ComposedGaussian`, ...).
        delta: δ in (0, 1).
        accountant: ``None`` (best exact/valid method, see the module docstring) or one of
            :data:`ACCOUNTANTS`.

    Returns:
        ε ≥ 0.

    Raises:
        ConfigError: ``delta`` out of range, or an accountant that cannot handle the event.
        AccountingError: a numerical accountant (PRV/PLD) failed.

    Example:
        >>> round(epsilon(ComposedGaussian(noise_multiplier=10.0, steps=100), delta=1e-5), 4)
        4.3772
    """
    return epsilon_and_accountant(event, delta=delta, accountant=accountant)[0]


def delta(event: Any, *, epsilon: float, accountant: Optional[str] = None) -> float:
    """Smallest δ (upper bound) such that ``event`` is (ε, δ)-DP.

    Args:
        event: an accounting event.
        epsilon: ε ≥ 0.
        accountant: as for :func:`epsilon`, except that ``"prv"`` is not available.

    Returns:
        δ in [0, 1].
    """
    check_event(event)
    e = V.nonnegative("epsilon", epsilon)
    if isinstance(event, AdaptiveComposition):
        rest = e - event.first_epsilon
        return 1.0 if rest < 0 else delta(event.then, epsilon=rest, accountant=accountant)
    if isinstance(event, Composition) and any(isinstance(x, AdaptiveComposition) for x in event.events):
        pure, parts = split_adaptive([event])  # as epsilon_and_accountant: the adaptive parts' pure ε first
        rest = e - math.fsum(pure)
        if rest < 0:
            return 1.0
        return 0.0 if not parts else delta(parts[0] if len(parts) == 1 else Composition(tuple(parts)), epsilon=rest,
                                           accountant=accountant)
    return _best(lambda a: a.delta(event, e), _candidates(event, accountant))[0]


@dataclass(frozen=True)
class PrivacyReport:
    """The privacy guarantee of a run, in every notion that applies.

    Attributes:
        epsilon: ε at ``delta`` (upper bound; exact for the Gaussian family).
        delta: δ the ε refers to.
        mu: μ of μ-GDP (Gaussian family only), else ``None``.
        rho: ρ of ρ-zCDP (``None`` for DP-SGD with q < 1); pure DP uses ε²/2 and the
            exponential mechanism ε²/8 (see :func:`zcdp_rho`).
        pure_epsilon: ε of a pure-DP guarantee (PureDP / exponential mechanism), else ``None``.
        mechanism: human-readable description of the event.
        accountant: which accountant produced ``epsilon`` (one of :data:`ACCOUNTANTS`).
        event: the event the report was computed from, as :func:`~.events.event_to_dict`
            gives it (JSON-ready; :func:`~.events.event_from_dict` rebuilds it), or ``None``
            for a report not derived from one event (e.g. private selection, whose ε comes
            from an RDP bound of the whole procedure) and reports made before events were
            recorded. Lets a data set's ledger (:mod:`mixdp_core.runs.ledger`) compose runs
            tightly. It says no more than ``mechanism`` does (the same parameters).
    """

    epsilon: float
    delta: float
    mu: Optional[float]
    rho: Optional[float]
    pure_epsilon: Optional[float]
    mechanism: str
    accountant: str
    # last, with a default: reports built field by field elsewhere stay valid; not hashed
    # (a dict is not hashable; the other fields identify the report)
    event: Optional[dict] = dataclasses.field(default=None, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def privacy_report(event: Any, *, delta: float, accountant: Optional[str] = None) -> PrivacyReport:
    """Build the :class:`PrivacyReport` of ``event`` at ``delta`` (see :func:`epsilon`)."""
    eps, used = epsilon_and_accountant(event, delta=delta, accountant=accountant)
    return PrivacyReport(
        epsilon=float(eps),
        delta=float(delta),
        mu=_mu(event),
        rho=_rho(event),
        pure_epsilon=_pure(event),
        mechanism=event.describe(),
        accountant=used,
        event=event_to_dict(event),
    )
