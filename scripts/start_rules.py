"""Where two start rules of AdaMix differ: the public start's scale ``init_scale_`` under two
``init_scale`` choices, per regime, seed and ε, without training (the start is set before the
first step; ``on_step`` stops the run there). Cells whose ratio is 1 give the same run under
common noise draws, so only the others need training to compare the rules
(docs/results/tuning_notes.md, "The cap past the burn-in").

Usage: ``python scripts/start_rules.py REGIMES SEEDS [RULE_A RULE_B]`` with REGIMES
comma-separated names of ``scripts/center_and_start.py``'s ``regime_features``, e.g.
``python scripts/start_rules.py fine_grained_100,scarce_50_d256_ir10 0,1,2,3 class_scaled release_capped``.
Prints one line per regime and seed: ``ε:ratio`` (RULE_B's scale over RULE_A's) at ε 0.5, 1, 3, 8.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core


def main() -> None:
    from threadpoolctl import threadpool_limits

    from center_and_start import regime_splits
    from mixdp_core.methods import make_method

    regimes, seeds_s = sys.argv[1].split(","), sys.argv[2]
    rule_a, rule_b = (sys.argv[3:5] if len(sys.argv) >= 5 else ("class_scaled", "release_capped"))
    for reg in regimes:
        for seed, sp in regime_splits(reg, [int(s) for s in seeds_s.split(",")]):
            cells = []
            for eps in (0.5, 1.0, 3.0, 8.0):
                scale = {}
                for rule in (rule_a, rule_b):
                    m = make_method("adamix", target_epsilon=eps, seed=seed, init_scale=rule, noise="reproducible")
                    with threadpool_limits(1):
                        m.fit(sp, on_step=lambda r: True)
                    scale[rule] = m.init_scale_
                cells.append(f"{eps:g}:{scale[rule_b] / scale[rule_a]:.3f}")
            print(reg, seed, " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
