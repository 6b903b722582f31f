"""What the public-start guard sees against what the test set says: per split, the private
phase's paired gain over the public start (AdaMix, guard off, noise drawn from the seed) as the
guard counts it on the private rows without its noise, the same gain averaged per class (what a
balanced test set measures, but on the training rows), and the gain on the test set
(docs/results/regimes.md, the scarce lesson's bullet).

Usage: ``python scripts/guard_bias.py REGIME EPSILON SEEDS`` with REGIME a name of
``scripts/center_and_start.py``'s ``regime_features``, e.g.
``python scripts/guard_bias.py scarce_20_ir10 1 0,1,2,3,4,5,6,7``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core


def main() -> None:
    import numpy as np

    from center_and_start import guard_off_fits

    for reg, eps, seed, sp, op, m in guard_off_fits(sys.argv[1:4]):
        y = sp.y_private
        d = (m.predict(sp.X_private) == y).astype(float) - (op.predict(sp.X_private) == y)
        per_class = [d[y == c].mean() for c in range(sp.n_classes) if np.any(y == c)]
        test = np.mean(m.predict(sp.X_test) == sp.y_test) - np.mean(op.predict(sp.X_test) == sp.y_test)
        print(f"{reg} seed {seed} eps {eps:g}: guard's count {d.sum():+.0f} rows (noise std "
              f"{m.config.noise_multiplier:g}) | per-class mean on the private rows {100 * np.mean(per_class):+.1f} pts "
              f"| test {100 * test:+.1f} pts", flush=True)


if __name__ == "__main__":
    main()
