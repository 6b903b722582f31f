"""The staged class histogram's pilot test under its two nulls (``histogram_test``), measured as
``docs/results/histogram_test_plan.json`` pre-registered.

Step 1 (``--rates``): per data set, seed and ε, the probability that the pilot finds the private
classes imbalanced under each null, from ``--draws`` simulated pilot draws at the run's σ and m₁ on
the split's private class counts (nothing trained).

Step 2 (``--paired``): with common draws (``noise="reproducible"``) each (data set, seed, ε) cell's
two decisions are computed exactly as the fit computes them; only cells whose decision differs are
trained, with both nulls (elsewhere the released models are the same: ``--check-equal N`` trains N
agreeing cells with both to show it). One JSON line per cell to ``--jsonl``.

Usage::

    python scripts/histogram_test_validation.py --rates --regimes digits,digits_ir10 --seeds 0,1,2,3
    python scripts/histogram_test_validation.py --paired --regimes digits --seeds 0,1,2,3,4,5,6,7 \\
        --jsonl docs/results/histogram_test_paired.jsonl --workers 2
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NULLS = ("equal_counts", "sampled_classes")


def pilot_plan(eps: float, C: int, seed: int):
    """``(method, sigma, m1)`` of a default AdaMix run at ε with C classes (public inputs only)."""
    from mixdp_core.methods import make_method
    from mixdp_core.methods.adamix import HISTOGRAM_PILOT_SHARE

    m = make_method("adamix", target_epsilon=eps, seed=seed, noise="reproducible")
    T = m._calibrated_steps()
    mm = m._histogram_releases(T, C)
    return m, float(m.config.noise_multiplier), max(1, math.ceil(mm * HISTOGRAM_PILOT_SHARE)), mm


def decide(h1, C: int, sigma: float, m1: int, null: str) -> bool:
    """The pilot's decision (imbalanced?) on the released pilot ``h1`` under ``null``: the fit's
    own function (:func:`mixdp_core.methods.adamix.private.histogram_pilot_test`)."""
    from mixdp_core.methods.adamix.private import histogram_pilot_test

    return histogram_pilot_test(h1, sigma, m1, null)["imbalanced"]


def rates(regimes, seeds, eps_list, draws: int) -> list[dict]:
    import numpy as np

    from center_and_start import regime_splits

    out = []
    for reg in regimes:
        for seed, sp in regime_splits(reg, seeds):
            C = int(sp.n_classes)
            counts = np.bincount(sp.y_private, minlength=C).astype(float)
            for eps in eps_list:
                _, sigma, m1, mm = pilot_plan(eps, C, seed)
                if mm < 2:
                    continue  # not staged
                g = np.random.default_rng([seed, int(eps * 1000), 0x4157])
                H = np.rint(counts + sigma / math.sqrt(m1) * g.standard_normal((draws, C)))
                row = {"regime": reg, "seed": seed, "epsilon": eps, "classes": C,
                       "private_rows": int(counts.sum()), "min_count": int(counts.min()),
                       "max_count": int(counts.max()), "sigma": sigma, "m1": m1, "m": mm}
                for null in NULLS:
                    row[f"flag_{null}"] = float(np.mean([decide(h, C, sigma, m1, null) for h in H]))
                out.append(row)
                print(json.dumps(row), file=sys.stderr)
    return out


def _fit(reg: str, seed: int, eps: float, null: str) -> dict:
    import numpy as np
    from sklearn.metrics import balanced_accuracy_score
    from threadpoolctl import threadpool_limits

    from center_and_start import regime_splits
    from mixdp_core.evaluation import minority_accuracy
    from mixdp_core.methods import make_method

    (_, sp), = list(regime_splits(reg, [seed]))
    t = time.time()
    with threadpool_limits(1):
        m = make_method("adamix", target_epsilon=eps, seed=seed, noise="reproducible", histogram_test=null).fit(sp)
    pred = m.predict(sp.X_test)
    mi = minority_accuracy(sp.y_test, pred, sp.minority_classes)
    return {"null": null, "error": float(100 * np.mean(pred != sp.y_test)),
            "balanced_accuracy": float(100 * balanced_accuracy_score(sp.y_test, pred)),
            "minority_accuracy": None if mi is None else float(100 * mi),
            "imbalanced": None if m.histogram_test_ is None else bool(m.histogram_test_["imbalanced"]),
            "weights_sha": __import__("hashlib").sha256(np.ascontiguousarray(m.W_).tobytes()).hexdigest()[:16],
            "seconds": time.time() - t}


def paired(regimes, seeds, eps_list, jsonl: str, workers: int, check_equal: int) -> None:
    import numpy as np

    from center_and_start import regime_splits

    cells = []
    for reg in regimes:
        for seed, sp in regime_splits(reg, seeds):
            C = int(sp.n_classes)
            for eps in eps_list:
                m, sigma, m1, mm = pilot_plan(eps, C, seed)
                if mm < 2:
                    cells.append((reg, seed, eps, None, None))
                    continue
                h1 = m._noisy_histogram(sp.y_private, C, sigma / math.sqrt(m1))  # the fit's pilot draw
                cells.append((reg, seed, eps, decide(h1, C, sigma, m1, "equal_counts"),
                              decide(h1, C, sigma, m1, "sampled_classes")))
    changed = [c for c in cells if c[3] is not None and c[3] != c[4]]
    same = []  # up to check_equal agreeing cells of every data set, trained with both nulls
    for reg in regimes:
        same += [c for c in cells if c[0] == reg and c[3] is not None and c[3] == c[4]][:check_equal]
    checked = {c[:3] for c in same}
    print(f"{len(cells)} cells, {len(changed)} with a changed decision; training those "
          f"(and {len(same)} agreeing cells as a check)", file=sys.stderr)
    with open(jsonl, "a") as fh:
        for c in cells:
            if (c[3] is None or c[3] == c[4]) and c[:3] not in checked:  # a checked cell gets its trained row
                fh.write(json.dumps({"regime": c[0], "seed": c[1], "epsilon": c[2], "staged": c[3] is not None,
                                     "flag_equal_counts": c[3], "flag_sampled_classes": c[4],
                                     "trained": False, "difference": 0.0}) + "\n")
    _changed_diffs = []
    with ProcessPoolExecutor(workers) as ex:
        futs = {(c[0], c[1], c[2]): {n: ex.submit(_fit, c[0], c[1], c[2], n) for n in NULLS}
                for c in changed + same}
        for c in changed + same:
            res = {n: f.result() for n, f in futs[(c[0], c[1], c[2])].items()}
            row = {"regime": c[0], "seed": c[1], "epsilon": c[2], "staged": True,
                   "flag_equal_counts": c[3], "flag_sampled_classes": c[4], "trained": True,
                   "check_only": c[3] == c[4], **{n: res[n] for n in NULLS},
                   "difference": res["sampled_classes"]["error"] - res["equal_counts"]["error"]}
            for n in NULLS:  # the fit made the decision step 2 predicted
                want = c[3] if n == "equal_counts" else c[4]
                assert res[n]["imbalanced"] == want, (c, n, res[n]["imbalanced"])
            if not row["check_only"]:
                _changed_diffs.append(row["difference"])
            elif res["sampled_classes"]["weights_sha"] != res["equal_counts"]["weights_sha"]:
                raise AssertionError(f"agreeing cell {c[:3]} released different models")
            print(json.dumps(row), file=sys.stderr)
            with open(jsonl, "a") as fh:
                fh.write(json.dumps(row) + "\n")
    diffs = [float(r) for r in _changed_diffs]
    print(f"paired difference new - old: mean {np.mean(diffs) if diffs else 0.0:+.2f} points over the "
          f"{len(diffs)} changed cells, {sum(diffs) / max(len(cells), 1):+.3f} over all {len(cells)}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--regimes", required=True)
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--epsilons", default="0.5,1,3,8")
    ap.add_argument("--rates", action="store_true")
    ap.add_argument("--paired", action="store_true")
    ap.add_argument("--draws", type=int, default=4000)
    ap.add_argument("--jsonl", default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--check-equal", type=int, default=0)
    a = ap.parse_args()
    regs = a.regimes.split(",")
    seeds = [int(s) for s in a.seeds.split(",")]
    eps = [float(e) for e in a.epsilons.split(",")]
    if a.rates:
        rows = rates(regs, seeds, eps, a.draws)
        if a.jsonl:
            with open(a.jsonl, "a") as fh:
                for r in rows:
                    fh.write(json.dumps(r) + "\n")
    if a.paired:
        paired(regs, seeds, eps, a.jsonl or "/dev/stdout", a.workers, a.check_equal)


if __name__ == "__main__":
    main()
