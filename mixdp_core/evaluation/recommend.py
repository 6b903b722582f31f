""""Which method at my ε?": one recommendation per (setting, ε) from stored runs.

A *setting* is everything but the method and the seed that changes the answer: dataset,
encoder, public samples per class, imbalance ratio and δ. Within a setting, for every ε with
completed private runs, the recommendation names the private method with the lowest mean
test error over seeds, its spread (standard deviation over seeds), whether its lead over the
runner-up is within seed noise (difference of the means below two standard errors of that
difference; undecidable with a single seed on either side), and the AdaMix paper's
Performance Boost (:func:`mixdp_core.evaluation.metrics.performance_boost`) against the
non-private Paragon and Only-Public references of the same setting, where both were run.

Input runs are anything with ``method``, ``target_epsilon`` and ``metrics`` (``test_error``,
``epsilon``, ``private``, ``dataset``, ``encoder``, ``public_per_class``, ``imbalance_ratio``,
``delta``/``target_delta``) — e.g. :class:`~mixdp_core.runs.store.RunRecord` — and only runs
whose ``metrics`` have a ``test_error`` (finished runs) count. The ε of a run is its *target*
ε; the ε actually spent (from the accounting module, ``metrics["epsilon"]``) is reported as
the largest over the runs of the group so the UI never shows an ε it did not compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

import numpy as np

from .metrics import performance_boost

#: Non-private references of the Performance Boost.
PARAGON, ONLY_PUBLIC = "paragon", "only_public"


@dataclass(frozen=True)
class MethodStat:
    """Mean/std of the test error of one method at one ε over ``n`` seeds."""

    method: str
    mean: float
    std: float
    n: int
    epsilon_spent_max: Optional[float] = None

    @property
    def sem(self) -> float:
        """Standard error of the mean (0 with one seed)."""
        return self.std / math.sqrt(self.n) if self.n > 1 else 0.0


@dataclass(frozen=True)
class Recommendation:
    """The best private method at one ε of one setting.

    Attributes:
        setting: ``{"dataset", "encoder", "public_per_class", "imbalance_ratio", "delta"}``.
        epsilon: the target ε of the runs.
        best: statistics of the recommended method.
        runner_up: statistics of the second-best method, or ``None`` if only one was run.
        within_noise: ``True`` if the lead over the runner-up is within seed noise, ``False``
            if it is not, ``None`` if it cannot be told (a single method, or one seed).
        boost: Performance Boost of the best method vs Paragon/Only-Public, or ``None``.
        references: mean test errors of ``paragon``/``only_public`` in this setting, if run.
        others: statistics of every private method at this ε, best first.
    """

    setting: dict[str, Any]
    epsilon: float
    best: MethodStat
    runner_up: Optional[MethodStat] = None
    within_noise: Optional[bool] = None
    boost: Optional[float] = None
    references: dict[str, float] = field(default_factory=dict)
    others: tuple[MethodStat, ...] = ()

    def sentence(self, names: Mapping[str, str] | None = None) -> str:
        """One line: ``At ε = 3: AdaMix (8.2 % ± 0.4 % over 3 seeds) ...``."""
        names = names or {}

        def nm(m: str) -> str:
            return names.get(m, m)

        b = self.best
        spread = f" ± {100 * b.std:.1f} %" if b.n > 1 else ""
        s = (f"At ε = {self.epsilon:g}: **{nm(b.method)}** ({100 * b.mean:.1f} %{spread} test error, "
             f"{b.n} seed{'s' if b.n != 1 else ''})")
        r = self.runner_up
        if r is None:
            s += "; the only private method run at this ε"
        else:
            s += f"; next {nm(r.method)} {100 * r.mean:.1f} %"
            if self.within_noise is True:
                s += " — **within seed noise**: run more seeds before choosing"
            elif self.within_noise is False:
                s += " — lead beyond seed noise (> 2 standard errors)"
            else:
                s += " — one seed: cannot tell whether the lead is beyond seed noise"
        if self.boost is not None and math.isfinite(self.boost):
            s += f". Performance boost {self.boost:.2f}× (AdaMix paper's PB vs Only-Public → Paragon)"
        elif self.boost is not None:
            s += ". Performance boost ∞ (reaches the Paragon)"
        elif PARAGON in self.references or ONLY_PUBLIC in self.references:
            s += ". Run both Paragon and Only-Public on this setting for the performance boost"
        return s + "."


def _setting(r: Any) -> tuple:
    m = r.metrics or {}
    cfg = getattr(r, "config", None) or {}
    delta = m.get("target_delta", cfg.get("target_delta", m.get("delta")))
    return (
        m.get("dataset", getattr(r, "dataset", None)),
        m.get("encoder", getattr(r, "encoder", None)),
        m.get("public_per_class", cfg.get("public_per_class")),
        m.get("imbalance_ratio", cfg.get("imbalance_ratio")),
        None if delta is None else float(delta),
    )


def _stat(method: str, ms: list[Mapping[str, Any]]) -> MethodStat:
    errs = np.asarray([float(x["test_error"]) for x in ms], dtype=float)
    spent = [float(x["epsilon"]) for x in ms if x.get("epsilon") is not None]
    return MethodStat(method=method, mean=float(errs.mean()), std=float(errs.std(ddof=1)) if errs.size > 1 else 0.0,
                      n=int(errs.size), epsilon_spent_max=max(spent) if spent else None)


def recommend(runs: Iterable[Any]) -> list[Recommendation]:
    """One :class:`Recommendation` per (setting, ε) with at least one finished private run,
    sorted by setting then ε."""
    private: dict[tuple, dict[float, dict[str, list]]] = {}
    refs: dict[tuple, dict[str, list]] = {}
    for r in runs:
        m = getattr(r, "metrics", None) or {}
        if m.get("test_error") is None:
            continue
        key = _setting(r)
        is_private = m.get("private", m.get("epsilon") is not None) and m.get("epsilon") is not None
        if is_private:
            eps = float(getattr(r, "target_epsilon", m.get("target_epsilon")))
            private.setdefault(key, {}).setdefault(eps, {}).setdefault(r.method, []).append(m)
        elif r.method in (PARAGON, ONLY_PUBLIC):
            refs.setdefault(key, {}).setdefault(r.method, []).append(m)
    out: list[Recommendation] = []
    for key in sorted(private, key=lambda k: tuple("" if v is None else str(v) for v in k)):
        ref_err = {m: float(np.mean([float(x["test_error"]) for x in ms])) for m, ms in refs.get(key, {}).items()}
        setting = dict(zip(("dataset", "encoder", "public_per_class", "imbalance_ratio", "delta"), key))
        for eps in sorted(private[key]):
            stats = sorted((_stat(meth, ms) for meth, ms in private[key][eps].items()), key=lambda s: (s.mean, s.method))
            best = stats[0]
            runner = stats[1] if len(stats) > 1 else None
            within: Optional[bool] = None
            if runner is not None and best.n > 1 and runner.n > 1:
                se = math.sqrt(best.sem ** 2 + runner.sem ** 2)
                within = bool(runner.mean - best.mean <= 2.0 * se)
            boost = None
            if PARAGON in ref_err and ONLY_PUBLIC in ref_err:
                pb = performance_boost(best.mean, err_public=ref_err[ONLY_PUBLIC], err_paragon=ref_err[PARAGON])
                boost = None if math.isnan(pb) else float(pb)
            out.append(Recommendation(setting=setting, epsilon=eps, best=best, runner_up=runner,
                                      within_noise=within, boost=boost, references=ref_err, others=tuple(stats)))
    return out
