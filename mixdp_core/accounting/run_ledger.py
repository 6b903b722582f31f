"""The run ledger: every private release of one run, recorded where it happens.

A private method declares its *plan* before it reads private data (the composed event its
calibration promised, or only the ``(ε, δ)`` budget when later releases are chosen from an
earlier one's output), then calls :meth:`RunLedger.release` at each release, with the
release's own event (mechanism, sensitivity in the event's units, noise, add/remove-one
neighbours as every event states). The run's ``privacy_`` is :meth:`RunLedger.report`: the
composition of what was *recorded*, never a hand count. :meth:`RunLedger.check` (the runner
calls it after every fit) fails the run loudly when what ran exceeds the plan.

Composition of the records (:meth:`RunLedger.event`), all exact rewritings:

* identical Gaussian releases merge into one :class:`~.events.ComposedGaussian`
  (``GaussianMechanism(σ, Δ) × n`` is μ-GDP with μ = Δ√n/σ, i.e. ``ComposedGaussian(σ/Δ, n)``);
* DP-SGD steps of equal ``(σ, q)`` merge into one :class:`~.events.PoissonSubsampledGaussian`;
* exponential mechanisms of equal ``(ε, monotone)`` add their ``count``; zCDP ρ's add up;
* anything else (pure DP, selections, nested compositions) is kept as released;
* a release marked ``chooses_next`` (its output sets the mechanisms that follow, e.g. the
  noisy count that fixes DP-SGD's q and T) becomes the ``first`` of an
  :class:`~.events.AdaptiveComposition` whose ``then`` is everything released after it;
* releases on *disjoint* parts of the private data (``branch``: every row lies in exactly one
  part, chosen by a data-independent coin) compose in parallel: for a neighbour the output is
  a mixture over the branch that holds the row, and by joint convexity of the hockey-stick
  divergence a mixture of μ_b-GDP branches is max_b μ_b-GDP. The run's event is then the
  branch with the largest μ (branches must be μ-GDP: Gaussian family).

The order of the other releases does not matter to any accountant used here (composition
bounds are symmetric), so merging across the run loses nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import AccountingError
from .accountant import PrivacyReport, epsilon, privacy_report
from .events import (
    ZCDP,
    AdaptiveComposition,
    ComposedGaussian,
    Composition,
    ExponentialMechanism,
    GaussianMechanism,
    PoissonSubsampledGaussian,
    check_event,
    event_to_dict,
)

#: Relative slack of :meth:`RunLedger.check` (floating-point noise of the accountants only).
PLAN_RTOL = 1e-9


class PlanExceededError(AccountingError):
    """A run released more than its declared plan allows (a bug in the method, never the
    user's input): the run must fail and its result must not be reported."""


@dataclass(frozen=True)
class Release:
    """``count`` consecutive releases of ``event`` (``what``: a short label, e.g. "gradient step")."""

    what: str
    event: Any
    count: int = 1
    chooses_next: bool = False
    branch: str = "main"


class RunLedger:
    """Releases of one run, in order (see the module docstring).

    Args:
        budget_epsilon, delta: the run's target (ε, δ); the ledger's ε at ``delta`` must not
            exceed ``budget_epsilon`` nor the plan's ε.
        plan: the composed event the calibration promised, or ``None`` when only the budget
            is known in advance (adaptively chosen mechanisms).
        accountant: accountant name for :meth:`report` (``None``: the tightest sound one).
    """

    def __init__(self, *, budget_epsilon: float, delta: float, plan: Any = None,
                 accountant: Optional[str] = None):
        if plan is not None:
            check_event(plan, "plan")
        self.budget_epsilon = float(budget_epsilon)
        self.delta = float(delta)
        self.plan = plan
        self.accountant = accountant
        self.releases: list[Release] = []

    # ------------------------------------------------------------------ recording
    def release(self, event: Any, *, what: str, count: int = 1, chooses_next: bool = False,
                branch: str = "main") -> None:
        """Record ``count`` releases of ``event`` that just happened (merged with the last
        record when it is the same release). ``branch``: the disjoint part of the private rows
        it reads (default: all of them; see the module docstring)."""
        check_event(event)
        if count < 1:
            raise AccountingError(f"ledger: count must be >= 1, got {count}")
        last = self.releases[-1] if self.releases else None
        if last is not None and not chooses_next and not last.chooses_next and last.what == what \
                and last.event == event and last.branch == branch:
            self.releases[-1] = Release(what, event, last.count + int(count), False, branch)
        else:
            self.releases.append(Release(what, event, int(count), bool(chooses_next), branch))

    def extend(self, other: "RunLedger", *, branch: Optional[str] = None) -> None:
        """Record every release of ``other`` (a sub-run on this run's data), optionally on ``branch``."""
        for r in other.releases:
            self.releases.append(Release(r.what, r.event, r.count, r.chooses_next, branch or r.branch))

    def __len__(self) -> int:
        """Number of individual releases recorded."""
        return sum(r.count for r in self.releases)

    # ------------------------------------------------------------------ composition
    def event(self) -> Any:
        """The composed event of everything recorded (``None`` when nothing was released)."""
        branches: dict[str, list[Release]] = {}
        for r in self.releases:
            branches.setdefault(r.branch, []).append(r)
        events = [_compose_branch(rel) for rel in branches.values()]
        if len(events) <= 1:
            return events[0] if events else None
        mus = [e._mu() for e in events]
        if any(m is None for m in mus):
            raise AccountingError("ledger: releases on disjoint parts compose in parallel only for "
                                  "Gaussian-family (μ-GDP) events, got "
                                  + "; ".join(e.describe() for e in events))
        return events[max(range(len(events)), key=lambda i: mus[i])]

    def epsilon(self) -> float:
        """ε at the run's δ of :meth:`event` (0 when nothing was released)."""
        ev = self.event()
        return 0.0 if ev is None else float(epsilon(ev, delta=self.delta, accountant=self.accountant))

    def report(self) -> Optional[PrivacyReport]:
        """:class:`PrivacyReport` of the releases as executed (``None`` if none happened)."""
        ev = self.event()
        return None if ev is None else privacy_report(ev, delta=self.delta, accountant=self.accountant)

    def check(self) -> float:
        """Raise :class:`PlanExceededError` unless the releases fit the plan and the budget;
        return the ledger's ε."""
        spent = self.epsilon()
        limit = self.budget_epsilon
        if self.plan is not None:
            limit = min(limit, float(epsilon(self.plan, delta=self.delta, accountant=self.accountant)))
        if spent > limit * (1.0 + PLAN_RTOL) + 1e-12:
            raise PlanExceededError(
                f"the run released ε = {spent:.6g} at δ = {self.delta:g} ({self.event().describe()}), more than "
                f"its plan allows (ε = {limit:.6g}); its result is not reported")
        return spent

    def to_dicts(self) -> list[dict]:
        """The records as JSON-ready dicts (``what``, ``count``, ``event``, ``chooses_next``)."""
        return [{"what": r.what, "count": r.count, "event": event_to_dict(r.event),
                 "chooses_next": r.chooses_next} for r in self.releases]


def _compose_branch(rel: list[Release]) -> Any:
    """Composition of one branch's releases (a ``chooses_next`` release splits it)."""
    cut = next((i for i, r in enumerate(rel) if r.chooses_next), None)
    if cut is None:
        return _compose(rel)
    first = _compose(rel[cut:cut + 1])
    rest = rel[:cut] + rel[cut + 1:]
    return first if not rest else AdaptiveComposition(first=first, then=_compose(rest))


def _compose(records: list[Release]) -> Any:
    """Merge ``records`` into the fewest equivalent events (see the module docstring)."""
    gauss: dict[float, int] = {}  # effective σ (σ/Δ) -> steps
    sgd: dict[tuple[float, float], int] = {}
    em: dict[tuple[float, bool], int] = {}
    rho = 0.0
    other: list = []
    for r in records:
        e, n = r.event, r.count
        if isinstance(e, GaussianMechanism):
            key = e.noise_multiplier / e.sensitivity
            gauss[key] = gauss.get(key, 0) + n
        elif isinstance(e, ComposedGaussian):
            gauss[e.noise_multiplier] = gauss.get(e.noise_multiplier, 0) + n * e.steps
        elif isinstance(e, PoissonSubsampledGaussian):
            if e.sample_rate == 1.0:  # full batch: exactly ComposedGaussian
                gauss[e.noise_multiplier] = gauss.get(e.noise_multiplier, 0) + n * e.steps
            else:
                k = (e.noise_multiplier, e.sample_rate)
                sgd[k] = sgd.get(k, 0) + n * e.steps
        elif isinstance(e, ExponentialMechanism):
            k = (e.epsilon, e.monotone)
            em[k] = em.get(k, 0) + n * e.count
        elif isinstance(e, ZCDP):
            rho = math.fsum([rho, n * e.rho])
        else:
            other.extend([e] * n)
    parts: list = []
    for s, t in gauss.items():
        parts.append(GaussianMechanism(noise_multiplier=s) if t == 1 else ComposedGaussian(noise_multiplier=s, steps=t))
    parts += [PoissonSubsampledGaussian(noise_multiplier=s, sample_rate=q, steps=t) for (s, q), t in sgd.items()]
    parts += [ExponentialMechanism(epsilon=e, monotone=m, count=c) for (e, m), c in em.items()]
    if rho > 0:
        parts.append(ZCDP(rho=rho))
    parts += other
    return parts[0] if len(parts) == 1 else Composition(events=tuple(parts))
