"""How often the AdaMix default releases a bad model on one split: refit REGIME's split SEED at
EPS with fresh secure noise DRAWS times (as a table's run draws it) and print one JSON line per
draw: test error %, the class histogram pilot's decision, whether the guard released the private
model, the early checkpoint, and the released update's combination weights.

Usage: ``python scripts/regime_tail_draws.py drawn_91 8 2 40 > docs/results/drawn_91_tail.jsonl``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import numpy as np
    from threadpoolctl import threadpool_limits

    from center_and_start import regime_splits
    from mixdp_core.methods import make_method

    reg, eps, seed, draws = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    (_, sp), = list(regime_splits(reg, [seed]))
    with threadpool_limits(1):
        for k in range(draws):
            m = make_method("adamix", target_epsilon=eps, seed=seed).fit(sp)  # secure noise: a fresh draw
            test = m.histogram_test_ or {}
            uv = getattr(m, "update_combination_", None)
            print(json.dumps({"regime": reg, "epsilon": eps, "seed": seed, "draw": k,
                              "error": float(100 * np.mean(m.predict(sp.X_test) != sp.y_test)),
                              "pilot_imbalanced": test.get("imbalanced"), "guard_released": m.guard_kept_private_,
                              "checkpoint_kept_early": getattr(m, "checkpoint_kept_early_", None),
                              "update_combination": None if uv is None else [float(uv[0]), float(uv[1])]}),
                  flush=True)


if __name__ == "__main__":
    main()
