"""How strong is the public labels' evidence when the check rejects, and does its strength tell
right rejections from wrong ones? A research diagnostic for docs/results/class_balance.md
("A steep tail", "What it does not fix"); it reads test labels and chooses nothing.

For every run of the default (``update_shrinkage="checked_when_imbalanced"``) whose check runs,
the per-row difference of the public rows' log-likelihood between the squared-logit rule's
model ``W_start + s_rule Δ`` and the start, each at its own best scale (the two sides of the
check, ``engine.profile_log_likelihood``), and its paired z-score ``mean / (sd / sqrt(n))``;
then, on the same noise draws (``noise="reproducible"``), the balanced test error of the
default and of the unchecked rule (``update_shrinkage="public_logits"``). One JSON line per
(set, seed, ε) with every call of the check (the final average's and the early checkpoint's).

Usage::

    python scripts/check_evidence_diagnostic.py drawn_6,ten_class_ir10 OUT.jsonl
    python scripts/check_evidence_diagnostic.py cifar10@100,digits_pixels@30 OUT.jsonl --cifar10 CIFAR10_DIR

Family regimes by name (``REGIME@irR`` to set the imbalance); real sets as ``FEATURES@R``
(``scripts/steep_tail_shrinkage.py``'s features and splits: 5 public rows per class,
imbalance R). Seeds 0-3, ε 1, 3, 8. ``--start-debias``: the same with the start's leave-one-out
logits debiased (a research hook), to see whether the bias the wrong rejections point to is
that one.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def rows_ll(Z0: np.ndarray, y: np.ndarray, a: float) -> np.ndarray:
    Z = a * Z0
    m = Z.max(1, keepdims=True)
    return Z[np.arange(len(y)), y] - m[:, 0] - np.log(np.exp(Z - m).sum(1))


def best_rows(Z0: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-row log-likelihoods at the scale ``a >= 0`` that maximizes their mean (a log grid,
    refined once: a diagnostic, not the library's solver)."""
    sd = float(Z0.std()) or 1.0
    grid = np.concatenate([[0.0], np.geomspace(1e-3 / sd, 1e3 / sd, 400)])
    i = int(np.argmax([rows_ll(Z0, y, a).mean() for a in grid]))
    fine = np.linspace(grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)], 200)
    return rows_ll(Z0, y, fine[int(np.argmax([rows_ll(Z0, y, a).mean() for a in fine]))])


def splits(name: str, cifar10: str | None):
    if "@" not in name or "@ir" in name:
        from center_and_start import regime_splits

        yield from regime_splits(name, range(4))
        return
    from steep_tail_shrinkage import features, prototype_split

    fname, ir = name.split("@")
    fs = features(fname, cifar10 or "-")
    for seed in range(4):
        yield seed, prototype_split(fs, seed, float(ir))


def main(argv: list[str]) -> None:
    from threadpoolctl import threadpool_limits

    from mixdp_core.evaluation.metrics import balanced_accuracy
    from mixdp_core.methods import make_method
    from mixdp_core.methods.adamix import private as P
    from mixdp_core.methods.adamix.engine import _centred_logits

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets")
    ap.add_argument("out")
    ap.add_argument("--cifar10", help="CIFAR10_DIR (an image folder) for cifar10@R")
    ap.add_argument("--start-debias", action="store_true",
                    help="the default with the research hook _start_loo_debias (the held-out row's own-class "
                         "logit deviation scaled by k/(k-1)); rows then say start_debias: true")
    a = ap.parse_args(argv)
    calls: list[dict] = []
    factor = P.NoisyGDMethod._shrinkage_factor

    def recorded(self, problem, delta_W, history, n_hat, public_pull, start_loo):
        out = factor(self, problem, delta_W, history, n_hat, public_pull, start_loo)
        if out[2] is not None:  # the check ran: the same inputs as its two profile likelihoods
            A, scored = start_loo
            U = problem.X_public[scored].astype(np.float64) @ delta_W.astype(np.float64) - public_pull[scored]
            A, U, y = _centred_logits(A, U, problem.y_public[scored])
            s_rule = out[3] if out[2] else out[0]
            d = best_rows(A + s_rule * U, y) - best_rows(A, y)
            calls.append({"rejected": bool(out[2]), "z": float(d.mean() / (d.std(ddof=1) / math.sqrt(d.size))),
                          "n": int(d.size), "mean_difference": float(d.mean())})
        return out

    P.NoisyGDMethod._shrinkage_factor = recorded
    with open(a.out, "a") as out, threadpool_limits(1):
        for name in a.sets.split(","):
            for seed, sp in splits(name, a.cifar10):
                for eps in (1.0, 3.0, 8.0):
                    calls.clear()
                    kw = dict(target_epsilon=eps, seed=seed, noise="reproducible")
                    d = make_method("adamix", **kw)
                    d._start_loo_debias = a.start_debias
                    d.fit(sp)
                    if not calls:
                        continue
                    checks = list(calls)
                    s = make_method("adamix", update_shrinkage="public_logits", **kw).fit(sp)
                    err = lambda m: 100 * (1 - balanced_accuracy(sp.y_test, m.predict(sp.X_test)))
                    rec = {"set": name, "seed": seed, "epsilon": eps, "default_error": err(d), "rule_error": err(s),
                           "released_rejected": d.update_check_rejected_, "checks": checks,
                           **({"start_debias": True} if a.start_debias else {})}
                    print(json.dumps(rec), flush=True)
                    out.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
