"""The balanced prior correction against none, on common noise draws (a research measurement:
noise from the seed, never a release).

``python scripts/prior_correction_validation.py REGIMES EPSILONS SEEDS OUT.jsonl [--workers N]``

One AdaMix fit per (regime, seed, ε) with ``prior_correction="none"`` and
``noise="reproducible"``; the corrected model is the same fit post-processed by the library's
own gate and correction (``_corrects_prior`` / ``_correct_prior`` under
``prior_correction="public_when_imbalanced"``), exactly what a run with that option releases on
the same draws (tests/methods/test_prior_correction.py checks the equality). Appends one JSON line
per cell: test error, balanced and minority-class accuracy of both, whether the gate applied,
the guard's decision. ``--summary OUT.jsonl`` prints the per-regime means and the plan's
decision quantities (docs/results/prior_correction_plan.json); ``--properties OUT.jsonl`` the
plan's (a) and (b) against Only-Public, before and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _scores(m, sp) -> dict:
    import numpy as np

    from mixdp_core.evaluation import minority_accuracy

    pred = m.predict(sp.X_test)
    y = np.asarray(sp.y_test)
    rec = [float(np.mean(pred[y == c] == c)) for c in range(sp.n_classes) if np.any(y == c)]
    mi = minority_accuracy(y, pred, sp.minority_classes)
    return {"error": float(np.mean(pred != y)), "balanced_accuracy": float(np.mean(rec)),
            "minority_accuracy": None if mi is None else float(mi)}


def cell(regime: str, seed: int, eps: float) -> dict:
    from threadpoolctl import threadpool_limits

    from center_and_start import regime_splits
    from mixdp_core.methods import make_method

    (_, sp), = list(regime_splits(regime, [seed]))
    with threadpool_limits(1):
        m = make_method("adamix", target_epsilon=eps, seed=seed, noise="reproducible", prior_correction="none").fit(sp)
        old = _scores(m, sp)
        m.config = dataclasses.replace(m.config, prior_correction="public_when_imbalanced")
        applies = m._corrects_prior()
        if applies:
            m._correct_prior(sp, None)
        new = _scores(m, sp) if applies and m.prior_corrected_ else dict(old)
    test = getattr(m, "histogram_test_", None)
    return {"regime": regime, "seed": seed, "epsilon": eps, "old": old, "new": new,
            "applied": bool(applies and m.prior_corrected_), "pilot_imbalanced": None if test is None else test["imbalanced"],
            "guard_kept_private": m.guard_kept_private_}


def _by_regime(path: str) -> dict[str, list[dict]]:
    """The JSON lines of ``path``, grouped by regime in file order."""
    by: dict[str, list[dict]] = defaultdict(list)
    for line in Path(path).read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            by[r["regime"]].append(r)
    return by


def summary(path: str) -> None:
    import numpy as np

    by = _by_regime(path)
    print("| regime | cells | gate applied | Δ test error | Δ minority acc. | Δ balanced acc. | error old → new by ε |")
    print("|---|---|---|---|---|---|---|")
    all_e, all_m = [], []
    worst = -np.inf
    for reg, rs in by.items():
        de = [100 * (r["new"]["error"] - r["old"]["error"]) for r in rs]
        dm = [100 * (r["new"]["minority_accuracy"] - r["old"]["minority_accuracy"]) for r in rs
              if r["old"]["minority_accuracy"] is not None]
        db = [100 * (r["new"]["balanced_accuracy"] - r["old"]["balanced_accuracy"]) for r in rs]
        all_e += de
        all_m += dm
        worst = max(worst, float(np.mean(de)))
        eps = sorted({r["epsilon"] for r in rs})
        cols = []
        for e in eps:
            o = np.mean([100 * r["old"]["error"] for r in rs if r["epsilon"] == e])
            n = np.mean([100 * r["new"]["error"] for r in rs if r["epsilon"] == e])
            cols.append(f"{o:.1f} → {n:.1f}")
        print(f"| `{reg}` | {len(rs)} | {sum(r['applied'] for r in rs)} | {np.mean(de):+.2f} | "
              f"{np.mean(dm) if dm else float('nan'):+.2f} | {np.mean(db):+.2f} | {' / '.join(cols)} |")
    print(f"\nall {len(all_e)} cells: Δ test error {np.mean(all_e):+.3f} points, worst regime {worst:+.2f}; "
          f"Δ minority accuracy {np.mean(all_m):+.3f} points ({len(all_m)} cells)")


def properties(path: str) -> None:
    """The plan's "(a) and (b) on the corrected means against Only-Public": per regime, the
    largest excess of AdaMix's mean error over Only-Public's (a: within +1 point), and the largest
    rise of the mean error from a smaller ε to a larger one over every pair (b: within +1 point),
    before and after the correction (Only-Public refitted on each split: it has no noise)."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    from center_and_start import regime_splits
    from mixdp_core.methods import make_method

    by = _by_regime(path)
    print("| regime | Only-Public | (a) worst excess old → new | (b) worst rise old → new |")
    print("|---|---|---|---|")
    for reg, rs in by.items():
        seeds = sorted({r["seed"] for r in rs})
        with threadpool_limits(1):
            op = float(np.mean([np.mean(make_method("only_public").fit(sp).predict(sp.X_test) != sp.y_test)
                                for _, sp in regime_splits(reg, seeds)]))
        eps = sorted({r["epsilon"] for r in rs})
        cols = []
        for which in ("old", "new"):
            m = [float(np.mean([r[which]["error"] for r in rs if r["epsilon"] == e])) for e in eps]
            a = max(100 * (x - op) for x in m)
            b = max(100 * (m[j] - m[i]) for i in range(len(m)) for j in range(i + 1, len(m)))
            cols.append((a, b))
        mark = lambda v: ("✓" if v <= 1.0 else "✗") + f" {v:+.1f}"  # noqa: E731
        print(f"| `{reg}` | {100 * op:.1f} | {mark(cols[0][0])} → {mark(cols[1][0])} | "
              f"{mark(cols[0][1])} → {mark(cols[1][1])} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("regimes", nargs="?")
    ap.add_argument("epsilons", nargs="?")
    ap.add_argument("seeds", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--summary")
    ap.add_argument("--properties")
    a = ap.parse_args()
    if a.summary:
        summary(a.summary)
        return
    if a.properties:
        properties(a.properties)
        return
    jobs = [(r, int(s), float(e)) for r in a.regimes.split(",") for s in a.seeds.split(",")
            for e in a.epsilons.split(",")]
    with ProcessPoolExecutor(a.workers) as ex, open(a.out, "a") as f:
        futs = {ex.submit(cell, *j): j for j in jobs}
        for fu in as_completed(futs):
            r = fu.result()
            f.write(json.dumps(r) + "\n")
            f.flush()
            print(f"# {r['regime']} s{r['seed']} eps={r['epsilon']} {100 * r['old']['error']:.1f} → "
                  f"{100 * r['new']['error']:.1f} applied={r['applied']}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
