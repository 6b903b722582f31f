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
from typing import Optional, Union

import numpy as np

from . import _validate as V
from ..errors import ConfigError


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class GaussianMechanism:
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


@dataclass(frozen=True)
class ComposedGaussian:
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


@dataclass(frozen=True)
class PoissonSubsampledGaussian:
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


@dataclass(frozen=True)
class ExponentialMechanism:
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


@dataclass(frozen=True)
class ZCDP:
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


@dataclass(frozen=True)
class PureDP:
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


Event = Union[
    GaussianMechanism,
    ComposedGaussian,
    PoissonSubsampledGaussian,
    ExponentialMechanism,
    ZCDP,
    PureDP,
    "Composition",
]

_LEAVES = (GaussianMechanism, ComposedGaussian, PoissonSubsampledGaussian, ExponentialMechanism, ZCDP, PureDP)


@dataclass(frozen=True)
class Composition:
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
        if isinstance(evs, _LEAVES + (Composition,)):
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
            elif isinstance(e, _LEAVES):
                flat.append(e)
            else:
                raise ConfigError("events", f"every item must be an accounting event, got {type(e).__name__}")
        _set(self, "events", tuple(flat))

    def describe(self) -> str:
        parts = [e.describe() for e in self.events]
        if len(parts) > 4:
            parts = parts[:3] + [f"… ({len(parts)} events)"]
        return "Composition[" + ", ".join(parts) + "]"


# --------------------------------------------------------------------------- internals
# Per-event summaries used by the accountant. None = "not expressible in that notion".


def _is_gaussian_family(e: object) -> bool:
    return isinstance(e, (GaussianMechanism, ComposedGaussian)) or (
        isinstance(e, PoissonSubsampledGaussian) and e.sample_rate == 1.0
    )


def _leaves(e: object) -> tuple:
    return e.events if isinstance(e, Composition) else (e,)


def _mu(e: object) -> Optional[float]:
    """μ of μ-GDP (exact) or None."""
    if isinstance(e, Composition):
        mus = [_mu(x) for x in e.events]
        if any(m is None for m in mus):
            return None
        return math.sqrt(math.fsum(m * m for m in mus))
    if isinstance(e, GaussianMechanism):
        return e.sensitivity / e.noise_multiplier
    if isinstance(e, (ComposedGaussian, PoissonSubsampledGaussian)) and _is_gaussian_family(e):
        return math.sqrt(e.steps) / e.noise_multiplier
    return None


def _rho(e: object) -> Optional[float]:
    """ρ of ρ-zCDP or None (pure DP: ε²/2; exponential mechanism: ε²/8 per run)."""
    if isinstance(e, Composition):
        rs = [_rho(x) for x in e.events]
        return None if any(r is None for r in rs) else math.fsum(rs)
    mu = _mu(e)
    if mu is not None:
        return mu * mu / 2.0
    if isinstance(e, ZCDP):
        return e.rho
    if isinstance(e, PureDP):
        return e.epsilon**2 / 2.0
    if isinstance(e, ExponentialMechanism):
        return e.count * e.epsilon**2 / 8.0
    return None


def _pure(e: object) -> Optional[float]:
    """Pure ε (δ = 0) or None."""
    if isinstance(e, Composition):
        ps = [_pure(x) for x in e.events]
        return None if any(p is None for p in ps) else math.fsum(ps)
    if isinstance(e, PureDP):
        return e.epsilon
    if isinstance(e, ExponentialMechanism):
        return e.count * e.epsilon
    return None


def _rdp(e: object, orders: np.ndarray) -> np.ndarray:
    """RDP curve τ(α) at ``orders`` (always available)."""
    if isinstance(e, Composition):
        return np.sum([_rdp(x, orders) for x in e.events], axis=0)
    if isinstance(e, PoissonSubsampledGaussian) and e.sample_rate < 1.0:
        from .backends import subsampled_gaussian_rdp

        return e.steps * subsampled_gaussian_rdp(e.sample_rate, e.noise_multiplier, orders)
    mu = _mu(e)
    if mu is not None:
        return orders * (mu * mu / 2.0)
    if isinstance(e, ZCDP):
        return orders * e.rho
    if isinstance(e, PureDP):
        return np.minimum(e.epsilon, orders * e.epsilon**2 / 2.0)
    if isinstance(e, ExponentialMechanism):
        return e.count * np.minimum(e.epsilon, orders * e.epsilon**2 / 8.0)
    raise TypeError(f"not an accounting event: {type(e).__name__}")  # pragma: no cover


def _blocks(e: object) -> Optional[list]:
    """``[(σ_eff, q, steps), ...]`` for PRV/PLD accountants, or None if not representable."""
    out = []
    for x in _leaves(e):
        if isinstance(x, GaussianMechanism):
            out.append((x.noise_multiplier / x.sensitivity, 1.0, 1))
        elif isinstance(x, ComposedGaussian):
            out.append((x.noise_multiplier, 1.0, x.steps))
        elif isinstance(x, PoissonSubsampledGaussian):
            out.append((x.noise_multiplier, x.sample_rate, x.steps))
        else:
            return None
    return out


def check_event(e: object, field: str = "event") -> None:
    """Raise ConfigError unless ``e`` is an accounting event."""
    if not isinstance(e, _LEAVES + (Composition,)):
        raise ConfigError(field, f"must be an accounting event (e.g. ComposedGaussian), got {type(e).__name__}")
