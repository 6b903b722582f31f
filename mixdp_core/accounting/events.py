r"""Mechanism descriptions ("events"), in the spirit of dp-accounting's ``DpEvent``.

Each event is a small frozen dataclass validated on construction (a
:class:`~mixdp_core.errors.ConfigError` names the offending field and its range). Events
carry no behaviour the user calls directly; pass them to :func:`~.epsilon`,
:func:`~.delta`, :func:`~.privacy_report`, :func:`~.gdp_mu`, :func:`~.zcdp_rho`.

Neighbouring relation: **add/remove one sample** throughout (datasets D and D ∪ {z}).

Scale convention for the Gaussian family: a step releases ``f(D) + N(0, (σC)² I)`` where
``C`` is a reference scale (the clip norm τ) and ``σ`` the *noise multiplier*; the query's
L2 sensitivity is ``sensitivity · C``. The mechanism is then μ-GDP with
μ = sensitivity/σ and ρ-zCDP with ρ = μ²/2. A sum of per-sample gradients clipped to norm
C has sensitivity 1 under add/remove-one (0 ↦ one clipped gradient).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np

from . import _validate as V
from ..errors import ConfigError


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


class _Event:
    """Base of every event: the summaries the accountants read (``None`` = not expressible).

    Each event class answers for itself (no ``isinstance`` dispatch): μ of μ-GDP, ρ of
    zCDP, pure ε, the RDP curve and the ``(σ_eff, q, steps)`` blocks of PRV / PLD.
    Defaults: the Gaussian family derives ρ = μ²/2 and RDP α·μ²/2 from μ.
    """

    def _mu(self) -> Optional[float]:
        """μ of μ-GDP (exact) or None."""
        return None

    def _rho(self) -> Optional[float]:
        """ρ of ρ-zCDP or None (pure DP: ε²/2; exponential mechanism: ε²/8 per run)."""
        mu = self._mu()
        return None if mu is None else mu * mu / 2.0

    def _pure(self) -> Optional[float]:
        """Pure ε (δ = 0) or None."""
        return None

    def _rdp(self, orders: np.ndarray) -> np.ndarray:
        """RDP curve τ(α) at ``orders`` (every event has one)."""
        mu = self._mu()
        if mu is None:  # pragma: no cover - every leaf without μ overrides this
            raise TypeError(f"no RDP curve for {type(self).__name__}")
        return orders * (mu * mu / 2.0)

    def _blocks(self) -> Optional[list]:
        """``[(σ_eff, q, steps), ...]`` for the PRV / PLD accountants, or None."""
        return None


@dataclass(frozen=True)
class GaussianMechanism(_Event):
    """One Gaussian mechanism: release ``f(D) + N(0, (σC)²I)``.

    Sensitivity: ``sensitivity · C`` in L2 under add/remove-one (``C`` the reference scale,
    e.g. the clip norm). Privacy: exactly μ-GDP with μ = sensitivity/σ (Balle & Wang 2018;
    Dong, Roth & Su 2019), ρ = μ²/2 zCDP (Bun & Steinke 2016, Prop. 1.6).

    Args:
        noise_multiplier: σ > 0, noise standard deviation in units of ``C``.
        sensitivity: L2 sensitivity in units of ``C`` (> 0, default 1).
    """

    noise_multiplier: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        _set(self, "noise_multiplier", V.positive("noise_multiplier", self.noise_multiplier))
        _set(self, "sensitivity", V.positive("sensitivity", self.sensitivity))

    def describe(self) -> str:
        s = f"Gaussian(σ={self.noise_multiplier:g}"
        return s + (f", Δ={self.sensitivity:g})" if self.sensitivity != 1.0 else ")")

    def _mu(self) -> Optional[float]:
        return self.sensitivity / self.noise_multiplier

    def _blocks(self) -> Optional[list]:
        return [(self.noise_multiplier / self.sensitivity, 1.0, 1)]


@dataclass(frozen=True)
class ComposedGaussian(_Event):
    """Full-batch NoisyGD: ``steps`` adaptive Gaussian steps, each of sensitivity 1.

    Step t releases ``Σ_i clip(g_i, C) + N(0, (σC)²I)``; under add/remove-one each step has
    L2 sensitivity C, so the run is μ-GDP with μ = √T/σ (AdaMix Prop. 2 / App. B, Lemma 8 —
    the paper's ρ := T²/(2σ²) is a typo for ρ = T/(2σ²)), i.e. ρ = T/(2σ²) zCDP.

    Args:
        noise_multiplier: σ > 0.
        steps: T ≥ 1.
    """

    noise_multiplier: float
    steps: int

    def __post_init__(self) -> None:
        _set(self, "noise_multiplier", V.positive("noise_multiplier", self.noise_multiplier))
        _set(self, "steps", V.count("steps", self.steps))

    def describe(self) -> str:
        return f"ComposedGaussian(σ={self.noise_multiplier:g}, T={self.steps})"

    def _mu(self) -> Optional[float]:
        return math.sqrt(self.steps) / self.noise_multiplier

    def _blocks(self) -> Optional[list]:
        return [(self.noise_multiplier, 1.0, self.steps)]


@dataclass(frozen=True)
class PoissonSubsampledGaussian(_Event):
    """DP-SGD: ``steps`` Gaussian steps on Poisson-subsampled batches (rate q).

    Each step includes every sample independently with probability q, sums clipped
    per-sample gradients (sensitivity C under add/remove-one) and adds N(0, (σC)²I).
    Accounted with RDP (Mironov, Talwar & Zhang 2019) by default, or PRV / PLD. With
    q = 1 it is exactly :class:`ComposedGaussian` and is accounted in closed form.

    Args:
        noise_multiplier: σ > 0.
        sample_rate: q in (0, 1].
        steps: T ≥ 1.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int

    def __post_init__(self) -> None:
        _set(self, "noise_multiplier", V.positive("noise_multiplier", self.noise_multiplier))
        _set(self, "sample_rate", V.rate("sample_rate", self.sample_rate))
        _set(self, "steps", V.count("steps", self.steps))

    def describe(self) -> str:
        return (
            f"PoissonSubsampledGaussian(σ={self.noise_multiplier:g}, q={self.sample_rate:g}, "
            f"T={self.steps})"
        )

    def _mu(self) -> Optional[float]:  # full batch (q = 1) is ComposedGaussian: exact μ-GDP
        return math.sqrt(self.steps) / self.noise_multiplier if self.sample_rate == 1.0 else None

    def _rdp(self, orders: np.ndarray) -> np.ndarray:
        if self.sample_rate < 1.0:
            from .backends import subsampled_gaussian_rdp

            return self.steps * subsampled_gaussian_rdp(self.sample_rate, self.noise_multiplier, orders)
        return super()._rdp(orders)

    def _blocks(self) -> Optional[list]:
        return [(self.noise_multiplier, self.sample_rate, self.steps)]


@dataclass(frozen=True)
class ExponentialMechanism(_Event):
    r"""The exponential mechanism with a pure ε-DP guarantee, run ``count`` times in sequence.

    Sampling must use ``Pr[x] ∝ exp(utility_scale · u(D, x) / Δu)`` where
    :attr:`utility_scale` is ε/2 for a general utility and ε for a utility that is monotone
    in the dataset (McSherry & Talwar 2007; DP-prototypes App. A.3, Lemmas 1–2). Either way
    each run is ε-DP and ε-bounded-range, hence ε²/8-zCDP (Cesar & Rogers 2021, Lemma 3.2) —
    the conversion :func:`~.zcdp_rho` uses. Sensitivity: Δu of the utility under add/remove-one.

    ``count`` counts *sequential* compositions over the same data. Runs on **disjoint** data
    (e.g. one selection per class, each sample having one label) compose in parallel and
    count once: use ``count=1`` for them.

    Args:
        epsilon: ε > 0 of one run.
        monotone: whether the utility is monotone in the dataset (sets :attr:`utility_scale`).
        count: number of sequential runs (≥ 1).
    """

    epsilon: float
    monotone: bool = False
    count: int = 1

    def __post_init__(self) -> None:
        _set(self, "epsilon", V.positive("epsilon", self.epsilon))
        if not isinstance(self.monotone, (bool, np.bool_)):
            raise ConfigError("monotone", f"must be True or False, got {self.monotone!r}")
        _set(self, "monotone", bool(self.monotone))
        _set(self, "count", V.count("count", self.count))

    @property
    def utility_scale(self) -> float:
        """λ in ``Pr[x] ∝ exp(λ u / Δu)`` that makes one run ε-DP (ε/2, or ε if monotone)."""
        return self.epsilon if self.monotone else self.epsilon / 2.0

    def describe(self) -> str:
        m = ", monotone" if self.monotone else ""
        c = f" ×{self.count}" if self.count != 1 else ""
        return f"ExponentialMechanism(ε={self.epsilon:g}{m}){c}"

    def _rho(self) -> Optional[float]:
        return self.count * self.epsilon**2 / 8.0

    def _pure(self) -> Optional[float]:
        return self.count * self.epsilon

    def _rdp(self, orders: np.ndarray) -> np.ndarray:
        return self.count * np.minimum(self.epsilon, orders * self.epsilon**2 / 8.0)


@dataclass(frozen=True)
class ZCDP(_Event):
    """A mechanism known only to be ρ-zCDP (Bun & Steinke 2016), e.g. CoinPress means.

    Sensitivity and neighbouring relation are those of the mechanism's own analysis; ρ must
    be stated for add/remove-one neighbours (a Gaussian with L2 sensitivity Δ and noise std s
    is Δ²/(2s²)-zCDP). (ε, δ) uses the tight conversion of Canonne, Kamath & Steinke 2020.

    Args:
        rho: ρ > 0.
    """

    rho: float

    def __post_init__(self) -> None:
        _set(self, "rho", V.positive("rho", self.rho))

    def describe(self) -> str:
        return f"zCDP(ρ={self.rho:g})"

    def _rho(self) -> Optional[float]:
        return self.rho

    def _rdp(self, orders: np.ndarray) -> np.ndarray:
        return orders * self.rho


@dataclass(frozen=True)
class PureDP(_Event):
    """A mechanism known only to be pure ε-DP (e.g. Laplace noise at scale Δ₁/ε).

    Sensitivity: the L1 (or utility) sensitivity Δ of the mechanism's own analysis, under
    add/remove-one neighbours. Its ρ is ε²/2 (Bun & Steinke 2016, Prop. 1.4) and its tight
    (ε', δ) profile that of randomized response (Kairouz, Oh & Viswanath 2015).

    Args:
        epsilon: ε > 0.
    """

    epsilon: float

    def __post_init__(self) -> None:
        _set(self, "epsilon", V.positive("epsilon", self.epsilon))

    def describe(self) -> str:
        return f"PureDP(ε={self.epsilon:g})"

    def _rho(self) -> Optional[float]:
        return self.epsilon**2 / 2.0

    def _pure(self) -> Optional[float]:
        return self.epsilon

    def _rdp(self, orders: np.ndarray) -> np.ndarray:
        return np.minimum(self.epsilon, orders * self.epsilon**2 / 2.0)


Event = Union[
    GaussianMechanism,
    ComposedGaussian,
    PoissonSubsampledGaussian,
    ExponentialMechanism,
    ZCDP,
    PureDP,
    "Composition",
    "AdaptiveComposition",
    "PrivateSelection",
]

_LEAVES = (GaussianMechanism, ComposedGaussian, PoissonSubsampledGaussian, ExponentialMechanism, ZCDP, PureDP)


@dataclass(frozen=True)
class Composition(_Event):
    """Sequential (adaptive) composition of events on the same data (add/remove-one).

    Accounted in closed form when every part is Gaussian-family (μ² add up: Dong, Roth &
    Su 2019, Cor. 3.3), zCDP-additively when every part has a ρ (Bun & Steinke 2016,
    Lemma 2.3), otherwise through RDP (orders add up; Mironov 2017, Prop. 1). Nested
    compositions are flattened; a list is accepted and stored as a tuple.

    Args:
        events: one or more events.
    """

    events: tuple

    def __post_init__(self) -> None:
        evs = self.events
        if isinstance(evs, _Event):
            evs = (evs,)
        try:
            evs = tuple(evs)
        except TypeError:
            raise ConfigError("events", f"must be a sequence of events, got {type(self.events).__name__}") from None
        if not evs:
            raise ConfigError("events", "must contain at least one event, got none")
        flat: list = []
        for e in evs:
            if isinstance(e, Composition):
                flat.extend(e.events)
            elif isinstance(e, _Event):
                flat.append(e)
            else:
                raise ConfigError("events", f"every item must be an accounting event, got {type(e).__name__}")
        _set(self, "events", tuple(flat))

    def describe(self) -> str:
        parts = [e.describe() for e in self.events]
        if len(parts) > 4:
            parts = parts[:3] + [f"… ({len(parts)} events)"]
        return "Composition[" + ", ".join(parts) + "]"

    def _mu(self) -> Optional[float]:
        mus = [x._mu() for x in self.events]
        if any(m is None for m in mus):
            return None
        return math.sqrt(math.fsum(m * m for m in mus))

    def _rho(self) -> Optional[float]:
        rs = [x._rho() for x in self.events]
        return None if any(r is None for r in rs) else math.fsum(rs)

    def _pure(self) -> Optional[float]:
        ps = [x._pure() for x in self.events]
        return None if any(p is None for p in ps) else math.fsum(ps)

    def _rdp(self, orders: np.ndarray) -> np.ndarray:
        return np.sum([x._rdp(orders) for x in self.events], axis=0)

    def _blocks(self) -> Optional[list]:
        out: list = []
        for x in self.events:
            b = x._blocks()
            if b is None:
                return None
            out.extend(b)
        return out



@dataclass(frozen=True)
class AdaptiveComposition(_Event):
    r"""A pure-DP release ``first`` whose output chooses the mechanism ``then`` (same data).

    DP-SGD releases a noisy private count and sets its sampling rate q and step count T from
    it; σ is then calibrated so that the steps are (ε − ε₁, δ)-DP *whatever the count turned
    out to be*. Adaptive (basic) composition (Dwork, Rothblum & Vadhan 2010, Thm. III.1;
    Dwork & Roth 2014, Thm. 3.16, which holds for adaptively chosen mechanisms): if ``first``
    is ε₁-DP and ``then`` is (ε₂, δ)-DP for every output of ``first``, the pair is
    (ε₁ + ε₂, δ)-DP. A PLD or RDP composition of the two would need ``then``'s whole privacy
    curve fixed in advance, which a data-dependent (q, T) does not give; so the accountants
    compose ``then`` alone and ε₁ is added. Neighbouring relation: add/remove one sample.

    Args:
        first: an event with a pure ε (:class:`PureDP`), released first.
        then: the event chosen from ``first``'s output (accounted with the requested accountant).
    """

    first: _Event
    then: _Event

    def __post_init__(self) -> None:
        for name in ("first", "then"):
            if not isinstance(getattr(self, name), _Event):
                raise ConfigError(name, f"must be an accounting event, got {type(getattr(self, name)).__name__}")
        if self.first._pure() is None:
            raise ConfigError("first", f"must be a pure-DP event (e.g. PureDP), got {self.first.describe()}")

    @property
    def first_epsilon(self) -> float:
        """ε₁ of the pure release."""
        return float(self.first._pure())

    def describe(self) -> str:
        return f"Adaptive[{self.first.describe()} then {self.then.describe()}]"

    def _pure(self) -> Optional[float]:
        p = self.then._pure()
        return None if p is None else self.first_epsilon + p

    def _rdp(self, orders: np.ndarray) -> np.ndarray:
        raise TypeError("AdaptiveComposition has no fixed RDP curve (its second mechanism is chosen from the "
                        "first's output); account it with accounting.epsilon, which composes it basically")


def split_adaptive(events: Sequence[Any]) -> tuple[list[float], list[Any]]:
    """``(pure ε of every AdaptiveComposition's first part, every other leaf)`` of ``events``,
    nested Compositions flattened: basic adaptive composition adds the pure parts to the
    accounting of the rest (how :func:`~.accountant.epsilon`, :func:`~.accountant.delta` and the
    data-set ledger compose adaptive parts)."""
    pure: list[float] = []
    rest: list[Any] = []

    def walk(ev: Any) -> None:
        if isinstance(ev, AdaptiveComposition):
            pure.append(ev.first_epsilon)
            walk(ev.then)
        elif isinstance(ev, Composition):
            for e in ev.events:
                walk(e)
        else:
            rest.append(ev)

    for ev in events:
        walk(ev)
    return pure, rest


@dataclass(frozen=True)
class PrivateSelection(_Event):
    r"""Private selection with random stopping (Papernot & Steinke 2022, Thm. 2).

    ``K ~ TNB(eta, gamma)`` independent repetitions of ``base`` (each trains privately and
    releases a noisy score), only the best one released and ``K`` hidden. The whole
    procedure is ``(λ, ε'(λ))``-RDP with ``ε'`` from :func:`~.selection.selection_rdp`
    applied to ``base``'s RDP curve. Sensitivity and neighbouring relation: those of
    ``base`` (add/remove one sample); every repetition uses fresh randomness.

    Args:
        base: one repetition's event (e.g. :class:`ComposedGaussian` of the count, the
            gradient steps and the noisy score).
        eta: η > -1 of the truncated negative binomial.
        gamma: γ in (0, 1).
    """

    base: _Event
    eta: float
    gamma: float

    def __post_init__(self) -> None:
        if not isinstance(self.base, _Event):
            raise ConfigError("base", f"must be an accounting event, got {type(self.base).__name__}")
        from .selection import _check

        eta, gamma = _check(self.eta, self.gamma)
        _set(self, "eta", float(eta))
        _set(self, "gamma", float(gamma))

    def describe(self) -> str:
        return f"PrivateSelection[TNB(η={self.eta:g}, γ={self.gamma:g}) of {self.base.describe()}]"

    def _rho(self) -> Optional[float]:  # not zCDP in closed form: its RDP curve is not linear
        return None

    def _rdp(self, orders: np.ndarray) -> np.ndarray:
        from .selection import selection_rdp

        base = self.base

        def base_rdp(a):
            return base._rdp(np.atleast_1d(np.asarray(a, dtype=np.float64))).reshape(np.shape(a))

        return selection_rdp(base_rdp, np.asarray(orders, dtype=np.float64), eta=self.eta, gamma=self.gamma)


# --------------------------------------------------------------------------- internals
# The accountant reads the per-event summaries through these (each event class answers for
# itself; see :class:`_Event`). None = "not expressible in that notion".


def _mu(e: _Event) -> Optional[float]:
    return e._mu()


def _rho(e: _Event) -> Optional[float]:
    return e._rho()


def _pure(e: _Event) -> Optional[float]:
    return e._pure()


def _rdp(e: _Event, orders: np.ndarray) -> np.ndarray:
    return e._rdp(orders)


def _blocks(e: _Event) -> Optional[list]:
    return e._blocks()


def check_event(e: object, field: str = "event") -> None:
    """Raise ConfigError unless ``e`` is an accounting event."""
    if not isinstance(e, _Event):
        raise ConfigError(field, f"must be an accounting event (e.g. ComposedGaussian), got {type(e).__name__}")


# --------------------------------------------------------------------------- serialization
# Events go into run records (``metrics["privacy"]["event"]``) so that a data set's ledger can
# compose the runs it was used in (:mod:`mixdp_core.runs.ledger`). The format is plain JSON:
# ``{"type": <class name>, <field>: <value>, ...}``, nested events as nested objects. Floats
# survive a JSON round trip exactly (``json`` writes ``repr``), so
# ``event_from_dict(json.loads(json.dumps(event_to_dict(e)))) == e``.

#: Class name -> (class, leaf field names in constructor order).
_SERIAL: dict[str, tuple[type, tuple[str, ...]]] = {
    "GaussianMechanism": (GaussianMechanism, ("noise_multiplier", "sensitivity")),
    "ComposedGaussian": (ComposedGaussian, ("noise_multiplier", "steps")),
    "PoissonSubsampledGaussian": (PoissonSubsampledGaussian, ("noise_multiplier", "sample_rate", "steps")),
    "ExponentialMechanism": (ExponentialMechanism, ("epsilon", "monotone", "count")),
    "ZCDP": (ZCDP, ("rho",)),
    "PureDP": (PureDP, ("epsilon",)),
    "Composition": (Composition, ("events",)),
    "AdaptiveComposition": (AdaptiveComposition, ("first", "then")),
    "PrivateSelection": (PrivateSelection, ("base", "eta", "gamma")),
}
#: Required fields per type (the others have defaults).
_REQUIRED: dict[str, tuple[str, ...]] = {
    "GaussianMechanism": ("noise_multiplier",), "ComposedGaussian": ("noise_multiplier", "steps"),
    "PoissonSubsampledGaussian": ("noise_multiplier", "sample_rate", "steps"), "ExponentialMechanism": ("epsilon",),
    "ZCDP": ("rho",), "PureDP": ("epsilon",), "Composition": ("events",), "AdaptiveComposition": ("first", "then"),
    "PrivateSelection": ("base", "eta", "gamma"),
}
#: Deepest nesting :func:`event_from_dict` accepts (a stored event is 2–3 levels deep; the
#: limit turns a hostile or corrupt record into a ConfigError instead of a RecursionError).
MAX_EVENT_DEPTH = 32
#: Most leaf events one dict may describe (a ledger composes at most a few thousand runs).
MAX_EVENT_LEAVES = 100_000


def event_to_dict(ev: object) -> dict:
    """A JSON-ready dict describing the event ``ev``; inverse of :func:`event_from_dict`.

    Format: ``{"type": <class name>, <field>: <value>, ...}`` with every field (defaults
    included, so a later change of a default cannot change what a stored event meant);
    :class:`Composition` stores ``"events": [<dict>, ...]`` and
    :class:`AdaptiveComposition` ``"first"`` / ``"then"`` as nested dicts.

    Raises:
        ConfigError: ``event``: not an accounting event.
    """
    check_event(ev)
    name = type(ev).__name__
    if name not in _SERIAL or _SERIAL[name][0] is not type(ev):
        raise ConfigError("event", f"{name} has no serialized form; allowed types: {', '.join(_SERIAL)}")
    out: dict = {"type": name}
    for f in _SERIAL[name][1]:
        v = getattr(ev, f)
        if f == "events":
            out[f] = [event_to_dict(e) for e in v]
        elif f in ("first", "then", "base"):
            out[f] = event_to_dict(v)
        else:
            out[f] = v
    return out


def event_from_dict(d: object, *, field: str = "event") -> _Event:
    """The event described by ``d`` (from :func:`event_to_dict`, possibly through JSON).

    Every field is validated by the event's constructor (ranges as documented on each class).

    Args:
        d: the dict.
        field: name used in error messages for ``d`` itself (nested parts are named
            ``<field>.events[i]``, ``<field>.first`` ...).

    Raises:
        ConfigError: one line naming the offending field: not a dict, unknown or missing
            ``type``, unknown or missing field, out-of-range value, nesting deeper than
            :data:`MAX_EVENT_DEPTH`, more than :data:`MAX_EVENT_LEAVES` leaves.
    """
    leaves = [0]
    return _from_dict(d, field, 0, leaves)


def _from_dict(d: object, path: str, depth: int, leaves: list) -> _Event:
    from collections.abc import Mapping

    if depth > MAX_EVENT_DEPTH:
        raise ConfigError(path, f"events nested deeper than {MAX_EVENT_DEPTH} levels")
    if not isinstance(d, Mapping):
        raise ConfigError(path, f"must be a dict with a 'type' key, got {type(d).__name__}")
    name = d.get("type")
    if not isinstance(name, str) or name not in _SERIAL:
        raise ConfigError(f"{path}.type", f"must be one of {', '.join(_SERIAL)}, got {name!r}")
    cls, fields = _SERIAL[name]
    extra = sorted(str(k) for k in d if k != "type" and k not in fields)
    if extra:
        raise ConfigError(f"{path}.{extra[0]}", f"not a field of {name}; allowed: {', '.join(fields)}")
    missing = [f for f in _REQUIRED[name] if f not in d]
    if missing:
        raise ConfigError(f"{path}.{missing[0]}", f"missing (required by {name})")
    kw: dict = {}
    for f in fields:
        if f not in d:
            continue
        v = d[f]
        if f == "events":
            if not isinstance(v, (list, tuple)) or not v:
                raise ConfigError(f"{path}.events", f"must be a non-empty list of event dicts, got {type(v).__name__}")
            kw[f] = tuple(_from_dict(e, f"{path}.events[{i}]", depth + 1, leaves) for i, e in enumerate(v))
        elif f in ("first", "then", "base"):
            kw[f] = _from_dict(v, f"{path}.{f}", depth + 1, leaves)
        else:
            kw[f] = v
    if name not in ("Composition", "AdaptiveComposition", "PrivateSelection"):
        leaves[0] += 1
        if leaves[0] > MAX_EVENT_LEAVES:
            raise ConfigError(path, f"more than {MAX_EVENT_LEAVES:,} events in one description")
    try:
        return cls(**kw)
    except ConfigError as e:  # name the field by its path in the dict
        raise ConfigError(f"{path}.{e.field}", e.message) from None
