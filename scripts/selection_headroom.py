"""How much a private selection over AdaMix's candidates could win, and what it costs: the
tables of docs/results/class_balance.md ("Private selection").

For each split seed and ε, on one regime of the family (or digits with imbalance 10), prints
the test error (%) of

* ``default``: AdaMix with every default, the whole budget;
* ``oracle``: the best of the 9 candidates of ``HONEST_GRID`` (noise margin z × {½, 1, 2},
  Thm.-3 λ × {¼, 1, 4}), each run with the whole budget, chosen by *test* error: an upper bound
  on what any selection among them can reach, not a method;
* ``tuned``: ``honest_tuning=True``, the accounted private selection (Papernot & Steinke 2022)
  whose reported ε covers the whole selection.

A selection can win only where ``oracle`` beats ``default`` by more than the selection's cost
(``tuned`` − ``default`` when the default is drawn: fewer steps per repetition, 80 % of the rows).

Usage: ``python scripts/selection_headroom.py REGIME EPSILONS SEEDS``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core

from center_and_start import regime_splits  # noqa: E402  (the same regimes and splits)
from mixdp_core.methods import make_method  # noqa: E402
from mixdp_core.methods.adamix.configs import HONEST_GRID, NOISE_MARGIN_Z  # noqa: E402


def main() -> None:
    name, eps_s, seeds_s = sys.argv[1:4]
    eps = [float(e) for e in eps_s.split(",")]
    seeds = [int(s) for s in seeds_s.split(",")]
    rows = {k: {e: [] for e in eps} for k in ("default", "oracle", "tuned")}
    for seed, sp in regime_splits(name, seeds):

        def err(m):
            return 100.0 * float(np.mean(m.predict(sp.X_test) != sp.y_test))

        for e in eps:
            cand = []
            for z_mult, lam_mult in HONEST_GRID:
                m = make_method("adamix", target_epsilon=e, seed=seed)
                m._margin_z, m._lambda_mult = z_mult * NOISE_MARGIN_Z, lam_mult
                cand.append(err(m.fit(sp)))
            rows["default"][e].append(cand[0])  # HONEST_GRID[0] is the default (1, 1)
            rows["oracle"][e].append(min(cand))
            rows["tuned"][e].append(err(make_method("adamix", target_epsilon=e, seed=seed, honest_tuning=True).fit(sp)))
            print(f"# {name} s{seed} eps={e} default={cand[0]:.1f} oracle={min(cand):.1f} "
                  f"tuned={rows['tuned'][e][-1]:.1f}", file=sys.stderr, flush=True)
    print(f"{name} seeds {seeds}: test error %, mean over seeds")
    for k, r in rows.items():
        print(f"  {k:8s} " + " | ".join(f"eps={e:g}: {np.mean(v):.1f}" for e, v in r.items()))


if __name__ == "__main__":
    main()
