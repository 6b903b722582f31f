"""""Which method at my ε?": one line per (setting, ε) from stored runs.

A *setting* is everything but the method and the seed that changes the answer: dataset,
encoder, public samples per class, imbalance ratio and δ. Within a setting, for every ε with
completed private runs, the line names the private method with the lowest mean test error
over seeds and says how far that can be trusted (:attr:`Recommendation.verdict`):

* ``"only"`` — a single private method was run: nothing to compare;
* ``"one_seed"`` — the leader or the runner-up has a single seed: the spread across seeds is
  unknown, so the line claims nothing beyond "lowest error at this seed" (a winner cannot
  be told from seed noise);
* ``"tie"`` — equal mean errors (within 10⁻⁹);
* ``"within_noise"`` / ``"beyond_noise"`` — with ≥ 2 seeds on both sides, whether the lead
  over the runner-up exceeds seed noise. When both methods were run on the same ≥ 2 seeds
  (same seed ⇒ same split, so errors are paired), the test is on the per-seed differences
  ``d_s = err_runner-up(s) − err_best(s)``: the lead is within seed noise when
  ``mean(d) ≤ t · sd(d) / √n``, ``t`` the two-sided 95 % quantile of Student's t with
  ``n − 1`` degrees of freedom (12.7 at 2 seeds, 2.8 at 5, 2.0 near 60: a fixed 2 declared a
  winner between two equal methods in 28 % of comparisons at 2 seeds, 11 % at 5). Otherwise
  (different seed sets) the unpaired version: ``mean_r − mean_b ≤ t · √(sem_b² + sem_r²)``
  with the smaller side's ``n − 1`` degrees of freedom (conservative). A zero spread over
  fewer than 3 seeds (two seeds one test sample apart each time) is no evidence: within noise.

**Using no private method is an answer.** Only-Public (``only_public``, ε = 0: it never reads
a private row) fits every budget, so where it was run on the setting it competes at every ε
as one more candidate, under the same rules: when it has the lowest error the line says to
use no private method at that ε (beyond seed noise) or that no private method is shown to
help (within noise, or one seed). Under imbalance (ratio > 1) the line also gives each
candidate's minority-class accuracy, since a lower overall error can hide a worse tail.

It also gives the AdaMix paper's Performance Boost
(:func:`mixdp_core.evaluation.metrics.performance_boost`) against the non-private Paragon and
Only-Public references of the same setting, where both were run.

Input runs are anything with ``method``, ``target_epsilon`` and ``metrics`` (``test_error``,
``epsilon``, ``private``, ``dataset``, ``encoder``, ``public_per_class``, ``imbalance_ratio``,
``delta``/``target_delta``) and optionally ``seed`` — e.g. :class:`~mixdp_core.runs.store.RunRecord`
— and only runs whose ``metrics`` have a ``test_error`` (finished runs) count. The ε of a run is
its *target* ε; the ε actually spent (from the accounting module, ``metrics["epsilon"]``) is
reported as the largest over the runs of the group so the UI never shows an ε it did not compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

import numpy as np

from .metrics import format_boost, performance_boost

#: Non-private references of the Performance Boost.
PARAGON, ONLY_PUBLIC = "paragon", "only_public"
#: The two-sided level of the seed-noise test (see the module docstring).
NOISE_LEVEL = 0.95


def noise_quantile(n: int) -> float:
    """The two-sided :data:`NOISE_LEVEL` quantile of Student's t with ``n − 1`` degrees of
    freedom (``n`` seeds behind the standard error)."""
    from scipy.stats import t

    return float(t.ppf(0.5 + NOISE_LEVEL / 2, max(int(n) - 1, 1)))
#: Mean errors closer than this are a tie (floating-point equality of fractions in [0, 1]).
TIE_TOL = 1e-9
VERDICTS = ("only", "one_seed", "tie", "within_noise", "beyond_noise")


@dataclass(frozen=True)
class MethodStat:
    """Test error of one method at one ε over ``n`` seeds.

    Attributes:
        method: method name.
        mean, std: mean and sample standard deviation (``ddof=1``; 0 with one seed) of the
            test error (fraction in [0, 1]).
        n: number of runs (seeds).
        epsilon_spent_max: largest ε the accounting module reported over these runs.
        by_seed: ``{seed: test error}`` of the runs with a known seed (mean over duplicates).
    """

    method: str
    mean: float
    std: float
    n: int
    epsilon_spent_max: Optional[float] = None
    by_seed: Mapping[int, float] = field(default_factory=dict)
    #: mean minority-class accuracy over the runs that have one (imbalanced splits), else None
    minority: Optional[float] = None
    #: the smallest test-set size of these runs (the resolution of a test error), else None
    n_test: Optional[int] = None

    @property
    def sem(self) -> float:
        """Standard error of the mean (0 with one seed)."""
        return self.std / math.sqrt(self.n) if self.n > 1 else 0.0


@dataclass(frozen=True)
class Comparison:
    """Lead of the best method over the runner-up (test-error points, fractions).

    Attributes:
        diff: mean difference ``err_runner_up − err_best`` (≥ 0).
        se: its standard error (paired: ``sd(d)/√n``; unpaired: ``√(sem_b² + sem_r²)``).
        paired: whether the per-seed differences of common seeds were used.
        n: seeds behind ``se`` (common seeds when paired, else the smaller count).
    """

    diff: float
    se: float
    paired: bool
    n: int
    #: the seeds' differences (or errors) had no spread at all: ``se`` is then the test sets'
    #: resolution (one test sample), not a measured spread
    zero_spread: bool = False


def compare_stats(best: MethodStat, runner: MethodStat) -> Comparison | None:
    """Difference between two methods with its standard error, or ``None`` when either side
    has a single seed (the spread across seeds is then unknown)."""
    common = sorted(set(best.by_seed) & set(runner.by_seed))
    tests = [t for t in (best.n_test, runner.n_test) if t]
    if len(common) >= 2 and len(common) == best.n == runner.n:
        d = np.asarray([runner.by_seed[s] - best.by_seed[s] for s in common], dtype=float)
        diff, se, paired, n = float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size)), True, int(d.size)
    elif best.n < 2 or runner.n < 2:
        return None
    else:
        diff, se, paired = runner.mean - best.mean, math.sqrt(best.sem ** 2 + runner.sem ** 2), False
        n = min(best.n, runner.n)
    # a test error moves in steps of one test sample: no spread below that is resolved (a runner-up
    # one sample worse on each of 3 seeds read as "beyond seed noise", 0.0 ± 0.0 points)
    floor = 1.0 / (min(tests) * math.sqrt(n)) if tests else 0.0
    zero = se <= TIE_TOL
    return Comparison(diff=diff, se=max(se, floor), paired=paired, n=n, zero_spread=zero)


def verdict_of(best: MethodStat, runner: Optional[MethodStat], comparison: Optional[Comparison]) -> str:
    """One of :data:`VERDICTS` (see the module docstring for the rule)."""
    if runner is None:
        return "only"
    # the raw spread, not the floored se: the test-resolution floor made a tie impossible wherever
    # n_test was known ("leads by the same 0.0 points on both seeds")
    if abs(runner.mean - best.mean) <= TIE_TOL and (comparison is None or comparison.zero_spread):
        return "tie"
    if comparison is None:
        return "one_seed"
    if comparison.zero_spread and comparison.n < 3:  # identical differences over 2 seeds: no evidence
        return "within_noise"
    return "within_noise" if comparison.diff <= noise_quantile(comparison.n) * comparison.se else "beyond_noise"


@dataclass(frozen=True)
class Recommendation:
    """What can be said about the private methods at one ε of one setting.

    Attributes:
        setting: ``{"dataset", "encoder", "public_per_class", "imbalance_ratio", "delta"}``.
        epsilon: the target ε of the runs.
        best: statistics of the candidate with the lowest mean test error (ties: by name);
            Only-Public is a candidate at every ε where it was run (see the module docstring).
        runner_up: statistics of the second one, or ``None`` if only one was run.
        verdict: one of :data:`VERDICTS`.
        comparison: the lead over the runner-up with its standard error (``None`` when
            there is no runner-up or a single seed on either side).
        boost: Performance Boost of the private method with the lowest mean test error vs
            Paragon/Only-Public, or ``None``.
        boost_method: that method (the sentence names it: it need not be the one discussed).
        references: mean test errors of ``paragon``/``only_public`` in this setting, if run.
        others: statistics of every private method at this ε, best first.
    """

    setting: dict[str, Any]
    epsilon: float
    best: MethodStat
    runner_up: Optional[MethodStat] = None
    verdict: str = "only"
    comparison: Optional[Comparison] = None
    boost: Optional[float] = None
    boost_method: Optional[str] = None
    references: dict[str, float] = field(default_factory=dict)
    others: tuple[MethodStat, ...] = ()

    @property
    def within_noise(self) -> Optional[bool]:
        """``True``/``False`` whether the lead is within seed noise; ``None`` if it cannot be
        told (single method or single seed). A tie counts as within noise."""
        return {"within_noise": True, "tie": True, "beyond_noise": False}.get(self.verdict)

    @property
    def best_private(self) -> Optional[MethodStat]:
        """The private method with the lowest mean error (``None`` if none was run)."""
        return next((s for s in self.others if s.method != ONLY_PUBLIC), None)

    def _no_private_sentence(self, nm: Any, err: Any) -> str:
        bp = self.best_private
        b = next(s for s in self.others if s.method == ONLY_PUBLIC)
        comp = compare_stats(b, bp) if bp is not None else None
        v = verdict_of(b, bp, comp)
        if v == "beyond_noise":
            return (f"**use no private method**: Only-Public ({err(b)}; reads no private data, ε = 0) beats the best "
                    f"private method, {nm(bp.method)} ({err(bp)}), by more than seed noise "
                    f"({100 * comp.diff:.1f} ± {100 * comp.se:.1f} points)")
        if v == "tie" and comp is None:
            return (f"Only-Public ({err(b)}; ε = 0) and the best private method, {nm(bp.method)} ({err(bp)}), are "
                    f"equal at this seed: run ≥ 2 seeds to tell whether the private data help at this ε")
        if v == "tie":
            return (f"Only-Public ({err(b)}; ε = 0) and the best private method, {nm(bp.method)} ({err(bp)}), tie: "
                    f"no method is better here, so the private data buy nothing at this ε")
        if v == "within_noise":
            return (f"Only-Public ({err(b)}; ε = 0) and the best private method, {nm(bp.method)} ({err(bp)}), are "
                    f"within seed noise: no private method is shown to help — run more seeds, or use none")
        return (f"lowest error at this seed: Only-Public ({err(b)}; reads no private data), then {nm(bp.method)} "
                f"({err(bp)}). With one seed the spread across seeds is unknown: this is no evidence either way — "
                f"run ≥ 2 seeds")

    def minority_line(self, names: Mapping[str, str] | None = None) -> str:
        """Minority-class accuracy of the candidates, under imbalance ("" when balanced)."""
        names = names or {}
        ir = self.setting.get("imbalance_ratio")
        if ir is None or float(ir) <= 1.0:
            return ""
        parts = [f"{names.get(s.method, s.method)} {100 * s.minority:.1f} %" for s in self.others
                 if s.minority is not None][:4]
        return ("Minority-class accuracy: " + ", ".join(parts)) if parts else ""

    def sentence(self, names: Mapping[str, str] | None = None) -> str:
        """The one line shown for this ε (Markdown), worded after :attr:`verdict`: a winner
        is named only when its lead is beyond seed noise."""
        names = names or {}

        def nm(m: str) -> str:
            return names.get(m, m)

        def err(st: MethodStat) -> str:
            spread = f" ± {100 * st.std:.1f}" if st.n > 1 else ""
            mean = "<0.1" if 0 < 100 * st.mean < 0.05 else f"{100 * st.mean:.1f}"  # never 0.0 for a nonzero error
            return f"{mean}{spread} % test error, {st.n} seed{'s' if st.n != 1 else ''}"

        b, r, c = self.best, self.runner_up, self.comparison
        head = f"At ε = {self.epsilon:g}: "
        if r is not None and (b.method == ONLY_PUBLIC or (self.verdict == "tie" and r.method == ONLY_PUBLIC)):
            # Only-Public leads or ties: the answer is about whether to use private data at all
            s = head + self._no_private_sentence(nm, err)
        elif self.verdict == "only":
            s = head + f"only **{nm(b.method)}** was run ({err(b)}); nothing to compare it with"
        elif self.verdict == "one_seed":
            s = (head + f"lowest error at this seed: **{nm(b.method)}** ({err(b)}), next {nm(r.method)} "
                 f"({err(r)}). With one seed the spread across seeds is unknown: this is no evidence that "
                 f"one method is better — run ≥ 2 seeds")
        elif self.verdict == "tie" and c is None:
            s = (head + f"**{nm(b.method)}** and **{nm(r.method)}** are equal at this seed ({err(b)}; {err(r)}): "
                 f"run ≥ 2 seeds to tell them apart")
        elif self.verdict == "tie":
            s = (head + f"**{nm(b.method)}** and **{nm(r.method)}** tie ({err(b)}; {err(r)}): "
                 f"no method is better here")
        else:
            how = (f"paired difference over {c.n} common seeds {100 * c.diff:.1f} ± {100 * c.se:.1f} points"
                   if c.paired else f"difference {100 * c.diff:.1f} ± {100 * c.se:.1f} points")
            if self.verdict == "within_noise" and c.zero_spread and c.n < 3:
                s = (head + f"**{nm(b.method)}** ({err(b)}) leads {nm(r.method)} ({err(r)}) by the same "
                     f"{100 * c.diff:.1f} points on both seeds: two seeds cannot tell that from chance — run ≥ 3 "
                     f"seeds before choosing")
            elif self.verdict == "within_noise":
                s = (head + f"**{nm(b.method)}** ({err(b)}) and {nm(r.method)} ({err(r)}) are within seed "
                     f"noise ({how}, not above {noise_quantile(c.n):.3g} standard errors, Student's t at "
                     f"{c.n} seeds): no clear winner — run more seeds before choosing")
            else:
                s = (head + f"**{nm(b.method)}** has the lowest test error ({err(b)}), ahead of {nm(r.method)} "
                     f"({err(r)}) by more than seed noise ({how}, above {noise_quantile(c.n):.3g} standard errors, "
                     f"Student's t at {c.n} seeds)")
        if self.minority_line(names):
            s += ". " + self.minority_line(names)
        # owner-only: every PB divides by the way to the Paragon, whose error reads the private rows
        whose = (f" of {nm(self.boost_method)} (the private method with the lowest error here; owner's view, not "
                 "private)" if self.boost_method else " (owner's view, not private)")
        if self.boost is not None and self.boost < 0:  # −∞ too: the ratio has no meaning there
            s += (f". Performance boost{whose} {format_boost(self.boost)}: the AdaMix paper's PB measures the way "
                  "from Only-Public to the Paragon, and here the Paragon is not the lowest error")
        elif self.boost is not None and math.isfinite(self.boost):
            s += (f". Performance boost{whose} {format_boost(self.boost)} (AdaMix paper's PB: 1× = no better than "
                  f"Only-Public, higher is better)")
        elif self.boost is not None and self.boost > 0:
            s += f". Performance boost{whose} ∞ (reaches the Paragon)"
        elif PARAGON in self.references and ONLY_PUBLIC in self.references:
            # both were run: the ratio is 0/0 (it said "run both" although both were run)
            s += (". Performance boost undefined: the Paragon, Only-Public and the private method have the same "
                  "error (nothing between them to measure)")
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


def _stat(method: str, ms: list[tuple[Optional[int], Mapping[str, Any]]]) -> MethodStat:
    errs = np.asarray([float(x["test_error"]) for _, x in ms], dtype=float)
    spent = [float(x["epsilon"]) for _, x in ms if x.get("epsilon") is not None]
    seeds: dict[int, list[float]] = {}
    for seed, x in ms:
        if seed is not None:
            seeds.setdefault(int(seed), []).append(float(x["test_error"]))
    mins = [float(x["minority_accuracy"]) for _, x in ms if x.get("minority_accuracy") is not None]
    tests = [int(x["n_test"]) for _, x in ms if isinstance(x.get("n_test"), (int, float)) and x["n_test"] > 0]
    return MethodStat(method=method, mean=float(errs.mean()), std=float(errs.std(ddof=1)) if errs.size > 1 else 0.0,
                      n=int(errs.size), epsilon_spent_max=max(spent) if spent else None,
                      by_seed={s: float(np.mean(v)) for s, v in seeds.items()},
                      minority=float(np.mean(mins)) if mins else None, n_test=min(tests) if tests else None)


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
            private.setdefault(key, {}).setdefault(eps, {}).setdefault(r.method, []).append(
                (getattr(r, "seed", None), m))
        elif r.method in (PARAGON, ONLY_PUBLIC):
            refs.setdefault(key, {}).setdefault(r.method, []).append((getattr(r, "seed", None), m))
    out: list[Recommendation] = []
    for key in sorted(private, key=lambda k: tuple("" if v is None else str(v) for v in k)):
        ref_err = {m: float(np.mean([float(x["test_error"]) for _, x in ms])) for m, ms in refs.get(key, {}).items()}
        public_stat = _stat(ONLY_PUBLIC, refs[key][ONLY_PUBLIC]) if ONLY_PUBLIC in refs.get(key, {}) else None
        setting = dict(zip(("dataset", "encoder", "public_per_class", "imbalance_ratio", "delta"), key))
        for eps in sorted(private[key]):
            stats = [_stat(meth, ms) for meth, ms in private[key][eps].items()]
            # Only-Public (ε = 0) fits every budget: one more candidate at every ε
            stats = sorted(stats + ([public_stat] if public_stat is not None else []), key=lambda s: (s.mean, s.method))
            best = stats[0]
            runner = stats[1] if len(stats) > 1 else None
            comp = compare_stats(best, runner) if runner is not None else None
            boost = None
            best_private = next(s for s in stats if s.method != ONLY_PUBLIC)
            if PARAGON in ref_err and ONLY_PUBLIC in ref_err:
                pb = performance_boost(best_private.mean, err_public=ref_err[ONLY_PUBLIC], err_paragon=ref_err[PARAGON])
                boost = None if math.isnan(pb) else float(pb)
            out.append(Recommendation(setting=setting, epsilon=eps, best=best, runner_up=runner,
                                      verdict=verdict_of(best, runner, comp), comparison=comp, boost=boost,
                                      boost_method=best_private.method if boost is not None else None,
                                      references=ref_err, others=tuple(stats)))
    return out
