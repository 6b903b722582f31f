"""How far a property is out of reach: the lowest *test* error that any of 80 AdaMix variants
reaches on one split of a regime at each ε (an oracle that looks at the test labels: an upper
bound on what choosing among these variants could give, never a method, never used to set a
default). docs/results/regimes.md, "(c) on scarce_50_d256_ir10".

Variants: the smooth schedule with init_scale in {release_capped (the default), none} x noise
margin z x {1/2, 1, 2} x Thm.-3 lambda x {1/4, 1, 4} x public guard on/off x released update
{the default's, the unshrunk average} (72), and the paper's constant schedule at each of its
learning rates with weight decay 0 and 0.01, unscaled start, no guard (8; the plain schedule of
the issue's table among them). Every variant of a (split, ε) draws the same noise stream
(``noise="reproducible"``, research only), so the minimum is not a minimum over noise draws.
One JSON line per ε: the default's error, the best and the five best.

Usage: ``python scripts/oracle_headroom.py REGIME EPSILONS SEED``.
"""
from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from center_and_start import regime_splits  # noqa: E402  (the same regimes and splits)
from mixdp_core.methods import make_method  # noqa: E402
from mixdp_core.methods.adamix.configs import NOISE_MARGIN_Z, PAPER_LEARNING_RATES  # noqa: E402

DEFAULT = "smooth init=release_capped z*1 lam*1 guard=True update=default"


def candidates() -> list[tuple[str, dict, float, float]]:
    """(label, config keywords, noise-margin multiplier, lambda multiplier) of the 80 variants."""
    out = []
    for init, z, lam, guard, upd in itertools.product(("release_capped", "none"), (0.5, 1, 2), (0.25, 1, 4),
                                                      (True, False), ("default", "none")):
        kw = dict(init_scale=init, public_guard=guard)
        if upd != "default":
            kw["update_shrinkage"] = upd
        out.append((f"smooth init={init} z*{z} lam*{lam} guard={guard} update={upd}", kw, z, lam))
    for lr in PAPER_LEARNING_RATES:
        for wd in (0.0, 0.01):
            out.append((f"constant lr={lr} wd={wd} init=none", dict(schedule="constant", learning_rate=lr,
                                                                   weight_decay=wd, init_scale="none",
                                                                   public_guard=False), 1.0, 1.0))
    return out


def main() -> None:
    reg, eps_s, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    (_, sp), = list(regime_splits(reg, [seed]))
    for e in [float(x) for x in eps_s.split(",")]:
        res, t = [], time.time()
        for label, kw, z, lam in candidates():
            m = make_method("adamix", target_epsilon=e, seed=seed, noise="reproducible", **kw)
            m._margin_z, m._lambda_mult = z * NOISE_MARGIN_Z, lam
            with threadpool_limits(1):
                m.fit(sp)
            res.append((100.0 * float(np.mean(m.predict(sp.X_test) != sp.y_test)), label))
        res.sort()
        default = next(r for r, label in res if label == DEFAULT)
        print(json.dumps({"regime": reg, "seed": seed, "eps": e, "default": default, "best": res[0],
                          "top5": res[:5], "n": len(res), "seconds": time.time() - t}), flush=True)


if __name__ == "__main__":
    main()
