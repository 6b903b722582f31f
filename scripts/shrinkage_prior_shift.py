"""Does the private update carry a per-class logit shift (the private rows' class prior) that the
shrinkage rule counts as signal? The check behind tuning_notes.md, "The average lags" (its last
paragraph).

Per seed (the update captured as in ``scripts/guard_path_grid.py``): the update's mean logit per
class over the public rows (balanced: k shots per class), centred over the classes, ``b``; its
share of the update's logit energy on those rows (``shift_frac``); and the test error of
``W_start + s Delta`` with and without ``s b`` subtracted from every row's logits, at the rule's
``s`` and over a grid of ``s``. Post-processing of the release and public rows only.

Usage: ``python scripts/shrinkage_prior_shift.py REGIME EPSILON SEEDS`` (one JSON line per seed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core

GRID = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


def main() -> None:
    import numpy as np

    from guard_path_grid import captured_updates
    from mixdp_core.methods.adamix.engine import update_shrinkage

    reg, eps, seeds = sys.argv[1], float(sys.argv[2]), [int(s) for s in sys.argv[3].split(",")]
    for seed, sp, op, m, P, D, nu in captured_updates(reg, eps, seeds):
        W0 = m.W_start_.astype(np.float64)
        X = P.X_public.astype(np.float64)
        U = X @ D
        b = U.mean(0)
        b = b - b.mean()  # the softmax ignores a shift common to every class
        s_rule = update_shrinkage(X, D, nu)

        def error(s: float, adjust: bool) -> float:
            m.W_ = (W0 + s * D).astype(np.float32)
            Z = m.decision_function(sp.X_test) - (s * b if adjust else 0.0)
            return 100 * float(np.mean(Z.argmax(1) != sp.y_test))

        print(json.dumps({"regime": reg, "epsilon": eps, "seed": seed, "s_rule": s_rule,
                          "shift_frac": float(X.shape[0] * np.sum(b * b) / np.sum(U * U)),
                          "rule": error(s_rule, False), "rule_shift_removed": error(s_rule, True),
                          "grid": {s: error(s, False) for s in GRID},
                          "grid_shift_removed": {s: error(s, True) for s in GRID}}), flush=True)


if __name__ == "__main__":
    main()
