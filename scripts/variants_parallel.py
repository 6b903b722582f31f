"""Variants of ``scripts/center_and_start.py`` over several regimes, in parallel processes
(``center_and_start.py``'s own command runs the same jobs and table in one process).

One job per (regime, seed, variant, ε), each on one BLAS thread in a process pool; the
regimes' features are built once in the parent (the feature cache is not written
concurrently). Prints one line per job to stderr, then per regime the mean test error,
balanced accuracy and guard-release count per variant and ε, and appends every job's result
to a JSON-lines file as it finishes (``--jsonl``). Used for the guard measurements of docs/results/regimes.md on a
many-core machine.

``MIXDP_VARIANTS_NOISE=reproducible`` in the environment runs every private variant on noise
drawn from its seed (common random numbers across variants, for paired comparisons in research;
such runs must never be released).

Usage::

    python scripts/variants_parallel.py --regimes ten_class_ir10,many_class_100_d256 \\
        --epsilons 0.5,1,3,8 --seeds 0,1,2,3 --variants op,def,H10 --workers 14 --jsonl out.jsonl
    python scripts/variants_parallel.py --paired SH,def --balanced drawn_82,drawn_83 out.jsonl

(``--paired BASE,NEW``: the paired differences per cell of two variants already in the files,
and their summary per group; ``--balanced``: the regimes of the first group.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _job(regime: str, seed: int, lab: str, eps: float | None) -> dict:
    import numpy as np
    from sklearn.metrics import balanced_accuracy_score
    from threadpoolctl import threadpool_limits

    from center_and_start import VARIANTS, regime_splits
    from mixdp_core.evaluation import minority_accuracy
    from mixdp_core.methods import make_method

    meth, kw = VARIANTS[lab]
    (_, sp), = list(regime_splits(regime, [seed]))
    args = dict(kw)
    if eps is not None:
        args.update(target_epsilon=eps, seed=seed)
        if os.environ.get("MIXDP_VARIANTS_NOISE") == "reproducible":
            # common random numbers: every variant of a (regime, seed, eps) cell draws the same
            # noise stream, so paired differences carry the variants' effect, not the draws'
            args.setdefault("noise", "reproducible")
    # keys starting with "_" are the methods' tuning attributes (e.g. "_margin_z", the noise
    # margin of the start's scale), set on the instance, as scripts/selection_headroom.py does
    attrs = {k: args.pop(k) for k in list(args) if k.startswith("_")}
    t = time.time()
    with threadpool_limits(1):
        m = make_method(meth, **args)
        for k, v in attrs.items():
            setattr(m, k, v)
        m = m.fit(sp)
    pred = m.predict(sp.X_test)
    g = getattr(m, "guard_kept_private_", None)
    alpha = getattr(m, "init_scale_", None)
    return {"regime": regime, "seed": seed, "variant": lab, "epsilon": eps,
            "error": float(100 * np.mean(pred != sp.y_test)),
            "balanced_accuracy": float(100 * balanced_accuracy_score(sp.y_test, pred)),
            "minority_accuracy": None if (mi := minority_accuracy(sp.y_test, pred, sp.minority_classes)) is None
            else float(100 * mi),
            "guard_kept_private": None if g is None else bool(g),
            "checkpoint_kept_early": None if (ck := getattr(m, "checkpoint_kept_early_", None)) is None else bool(ck),
            "update_shrinkage": None if (sh := getattr(m, "update_shrinkage_", None)) is None else float(sh),
            "update_combination": None if (uv := getattr(m, "update_combination_", None)) is None
            else [float(uv[0]), float(uv[1])],
            "init_scale": None if alpha is None else float(alpha), "seconds": time.time() - t}


#: Methods without ε: run once per seed (their rows carry ``epsilon: None``).
NON_PRIVATE = ("only_public", "paragon")


def run(regimes, eps, seeds, variants, *, workers: int = 1, jsonl: str | None = None) -> list[dict]:
    """Every (regime, seed, variant, ε) job (Only-Public variants once per seed), on ``workers``
    processes (``1``: in this process); one stderr line per finished job, each result appended
    to ``jsonl`` as it finishes."""
    from center_and_start import VARIANTS, regime_splits

    for r in regimes:  # features built once, here (the cache is not written concurrently)
        list(regime_splits(r, seeds[:1]))
    jobs = [(r, s, v, e) for r in regimes for s in seeds for v in variants
            for e in (eps if VARIANTS[v][0] not in NON_PRIVATE else [None])]
    out = []

    def done(r: dict) -> None:
        out.append(r)
        if jsonl:
            with open(jsonl, "a") as fh:
                fh.write(json.dumps(r) + "\n")
        print(f"# {r['regime']} s{r['seed']} {r['variant']} eps={r['epsilon']} err={r['error']:.1f} "
              f"guard={r['guard_kept_private']} alpha={r['init_scale']} {r['seconds']:.0f}s",
              file=sys.stderr, flush=True)

    if workers == 1:
        for j in jobs:
            done(_job(*j))
    else:
        with ProcessPoolExecutor(workers) as ex:
            for f in as_completed([ex.submit(_job, *j) for j in jobs]):
                done(f.result())
    return out


def print_tables(out: list[dict], regimes, eps, seeds, variants) -> None:
    """Per regime: mean test error (balanced accuracy; minority-class accuracy) % per variant and ε over the seeds, and how
    often the public-start guard released the private model."""
    from center_and_start import VARIANTS

    by = defaultdict(list)
    for r in out:
        by[(r["regime"], r["variant"], r["epsilon"])].append(r)
    for reg in regimes:
        print(f"\n{reg} seeds {seeds}: error % (balanced acc %) [guard released private / runs]")
        for v in variants:
            row = []
            for e in (eps if VARIANTS[v][0] not in NON_PRIVATE else [None]):
                rs = by[(reg, v, e)]
                g = [x["guard_kept_private"] for x in rs if x["guard_kept_private"] is not None]
                mi = [x["minority_accuracy"] for x in rs if x.get("minority_accuracy") is not None]
                row.append(f"eps={e}: {sum(x['error'] for x in rs) / len(rs):.1f} "
                           f"({sum(x['balanced_accuracy'] for x in rs) / len(rs):.1f}"
                           + (f"; min {sum(mi) / len(mi):.1f}" if mi else "") + ")"
                           + (f" [{sum(g)}/{len(g)}]" if g else ""))
            print(f"  {v:6s} " + " | ".join(row), flush=True)


def paired(base: str, new: str, paths: list[str], balanced: set[str] | None = None) -> None:
    """Per (regime, ε) cell with every seed of both variants in the JSON-lines ``paths``: the mean
    test error % of ``base`` and ``new`` over the seeds and their difference (common noise draws:
    the paired effect), then per group of regimes (``balanced`` and the rest, "imbalanced"; else
    "all") the mean difference and how many cells were better, equal, worse, and worse by more
    than 0.5 points."""
    import numpy as np

    rows = {}
    for path in paths:
        with open(path) as fh:
            for line in fh:
                r = json.loads(line)
                rows[(r["regime"], r["epsilon"], r["seed"], r["variant"])] = r
    cells = defaultdict(list)
    for (reg, e, s, v), r in rows.items():
        if v == new and (reg, e, s, base) in rows:
            cells[(reg, e)].append((rows[(reg, e, s, base)]["error"], r["error"]))
    n_seeds = max((len(v) for v in cells.values()), default=0)
    diffs = defaultdict(list)
    for (reg, e) in sorted(cells, key=lambda k: (k[0].split("_")[0], int(k[0].split("_")[-1])
                                                  if k[0].split("_")[-1].isdigit() else 0, k)):
        a = np.array(cells[(reg, e)])
        if len(a) < n_seeds:
            continue  # an unfinished cell
        d = float(np.mean(a[:, 1] - a[:, 0]))
        g = "all" if balanced is None else "balanced" if reg in balanced else "imbalanced"
        diffs[g].append(d)
        print(f"{reg:24s} eps={e:<4} {base} {a[:, 0].mean():6.2f}  {new} {a[:, 1].mean():6.2f}  diff {d:+.2f}  [{g}]")
    for g, d in diffs.items():
        d = np.array(d)
        print(f"{g}: {len(d)} cells, mean {d.mean():+.3f}; better {(d < 0).sum()}, equal {(d == 0).sum()}, "
              f"worse {(d > 0).sum()}, by more than 0.5 {(d > 0.5).sum()}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regimes", help="comma-separated regime names (a run)")
    ap.add_argument("--epsilons", default="0.5,1,3,8")
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--variants", help="comma-separated variant labels of center_and_start.VARIANTS (a run)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--jsonl", help="append each job's result to this JSON-lines file")
    ap.add_argument("--paired", metavar="BASE,NEW",
                    help="no run: the paired differences of two variants already in FILES")
    ap.add_argument("--balanced", metavar="R1,R2,...",
                    help="with --paired: the regimes of the group 'balanced' (the rest: 'imbalanced')")
    ap.add_argument("files", nargs="*", help="with --paired: the JSON-lines files")
    a = ap.parse_args(argv)
    if a.paired:
        base, _, new = a.paired.partition(",")
        if not new or not a.files:
            ap.error("--paired takes BASE,NEW and at least one JSON-lines file")
        paired(base, new, a.files, set(a.balanced.split(",")) if a.balanced else None)
        return
    if not a.regimes or not a.variants:
        ap.error("a run needs --regimes and --variants (or --paired BASE,NEW FILES)")
    regimes, variants = a.regimes.split(","), a.variants.split(",")
    eps = [float(e) for e in a.epsilons.split(",")]
    seeds = [int(s) for s in a.seeds.split(",")]
    print_tables(run(regimes, eps, seeds, variants, workers=a.workers, jsonl=a.jsonl), regimes, eps, seeds, variants)


if __name__ == "__main__":
    main()
