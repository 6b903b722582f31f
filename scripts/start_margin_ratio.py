"""How far the start rule's margin (the public fit's own rows) overstates unseen rows' margins,
from public rows alone (tuning_notes.md, "The guard under imbalance and the start's margin").

Per split: the median margin of the public fit on its own rows (what ``init_scale`` sizes the
start against), the median |approximate leave-one-out margin| of the same rows
(``_linear.loo_margin_scale``; public rows only, no privacy cost), their ratio, and, as a
diagnostic that reads the test rows, the median |test margin| over the fit's own. On the real
features measured the leave-one-out ratio tracked the test ratio within a factor 1.5 (not under
a domain shift, where the public rows' held-out margins overstate the private domain's); the
start rule's effective margin on unseen rows is NOISE_MARGIN_Z times that ratio.

Usage: ``python scripts/start_margin_ratio.py REGIME SEEDS`` with REGIME a name of
``scripts/center_and_start.py``'s ``regime_features`` (a family regime, ``cifar10_2_60``,
``many38_2_60``, ...), e.g. ``python scripts/start_margin_ratio.py fine_grained_100 0,1``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core


def main() -> None:
    import numpy as np
    from threadpoolctl import threadpool_limits

    from center_and_start import regime_splits
    from mixdp_core.methods._linear import fit_public, logit_margins, loo_margin_scale, public_ridge
    from mixdp_core.methods.adamix.configs import NOISE_MARGIN_Z
    from mixdp_core.methods.adamix.references import feature_map_for, unit_rows

    reg, seeds = sys.argv[1], [int(s) for s in sys.argv[2].split(",")]
    for seed, sp in regime_splits(reg, seeds):
        with threadpool_limits(1):
            d = unit_rows(sp, feature_map_for("auto", sp, public_start=True))  # AdaMix's centred rows
            C, y = sp.n_classes, sp.y_public
            l2 = public_ridge(d.public, y, C, "loo")
            W = fit_public(d.public, y, C, l2=l2)
            own = float(np.median(logit_margins(d.public @ W, y)))
            loo = loo_margin_scale(d.public, y, C, l2)
            test = float(np.median(np.abs(logit_margins(d.test @ W, sp.y_test))))
        loo_s = "n/a (1 shot)" if loo is None else f"{loo:.3f} (ratio {loo / own:.3f}, effective z {NOISE_MARGIN_Z * loo / own:.2f})"
        print(f"{reg} seed {seed}: own rows {own:.3f} | leave-one-out {loo_s} | test rows (diagnostic) "
              f"{test:.3f} (ratio {test / own:.3f})", flush=True)


if __name__ == "__main__":
    main()
