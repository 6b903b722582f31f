"""The error along the shrinkage path, and what the guard's count sees of it: the diagnostic
behind ``guard_candidates="shrinkage_path"`` and ``GUARD_PATH_FACTORS``
(docs/results/tuning_notes.md, "The guard's path").

Per seed: AdaMix with its defaults except that the early-checkpoint test is off and the
released model is the unshrunk private update (noise drawn from the seed,
``noise="reproducible"``: a research run, never released), so that ``Delta = W - W_start`` is
captured; then, for ``s`` in ``{0, t s_rule}`` (``s_rule`` the squared-logit rule's factor,
``t`` in 1/8 ... 2) and 1: the test error and balanced accuracy of ``W_start + s Delta``, and the
paired count the guard would release for it without its noise (private rows, each row's own
pull removed, unweighted). One JSON line per seed.

Usage: ``python scripts/guard_path_grid.py REGIME EPSILON SEEDS`` with REGIME a name of
``scripts/center_and_start.py``'s ``regime_splits`` (``NAME@irR`` sets the imbalance ratio), e.g.
``python scripts/guard_path_grid.py fine_grained_100@ir6 8 0,1``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core

FACTORS = (0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


def main() -> None:
    import numpy as np
    from threadpoolctl import threadpool_limits

    from center_and_start import regime_splits
    from mixdp_core.methods import make_method
    from mixdp_core.methods.adamix.engine import released_noise_std, update_shrinkage

    reg, eps, seeds = sys.argv[1], float(sys.argv[2]), [int(s) for s in sys.argv[3].split(",")]
    for seed, sp in regime_splits(reg, seeds):
        with threadpool_limits(1):
            op = make_method("only_public").fit(sp)
            m = make_method("adamix", target_epsilon=eps, seed=seed, noise="reproducible", early_checkpoint=False,
                            guard_candidates="single")
            cap = {}

            def capture(problem, delta_W, history, n_hat, public_pull, start_loo, _m=m):
                cap.update(problem=problem, delta=delta_W,
                           nu=released_noise_std(history, float(n_hat), _m.config.noise_multiplier))
                return 1.0  # release the whole update: Delta is what the grid scales

            m._shrinkage_factor = capture
            m.fit(sp)
        P, D = cap["problem"], cap["delta"].astype(np.float64)
        W0 = m.W_start_.astype(np.float64)
        s_rule = update_shrinkage(P.X_public, D, cap["nu"])
        pull = m._guard_pull_shift
        Xp, yp = P.X_private.astype(np.float64), P.y_private
        Z0, dZ = Xp @ W0, Xp @ D - (0.0 if pull is None else pull)
        start_right = (Z0.argmax(1) == yp).astype(float)
        yt = sp.y_test
        rows = []
        for s in sorted({0.0, 1.0, *(min(1.0, t * s_rule) for t in FACTORS)}):
            m.W_ = (W0 + s * D).astype(np.float32)
            pred = m.predict(sp.X_test)
            rows.append({"s": s, "error": 100 * float(np.mean(pred != yt)),
                         "balanced_accuracy": 100 * float(np.mean([np.mean(pred[yt == c] == c) for c in np.unique(yt)])),
                         "count": float(np.sum(((Z0 + s * dZ).argmax(1) == yp) - start_right))})
        print(json.dumps({"regime": reg, "epsilon": eps, "seed": seed, "only_public": 100 * float(np.mean(op.predict(sp.X_test) != yt)),
                          "s_rule": s_rule, "private_rows": int(len(yp)), "path": rows}), flush=True)


if __name__ == "__main__":
    main()
