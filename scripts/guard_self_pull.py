"""What the public-start guard would count if each private row's own pull on its prediction were
removed: a diagnostic of the guard's in-sample optimism (docs/results/tuning_notes.md, "The
guard's in-sample optimism").

Per split: AdaMix with the guard off (noise drawn from the seed, ``noise="reproducible"``: a
research run, never released) and Only-Public; on the private rows, the paired count the guard
releases (private model right minus public start right, without its noise), the same count where
the private model is counted right only if its margin exceeds the largest change its own row can
have made to it, and the gain on the test set.

The pull bound (public quantities of the run only):
:func:`mixdp_core.methods.adamix.engine.self_pull_bound`. A row right with a larger margin is
right under the leave-one-out model of the linearized dynamics. The library's research hook
``_guard_self_pull`` (variants ``SP1`` / ``SP05`` / ``SP025`` of ``scripts/center_and_start.py``)
releases this count, with a fraction of the bound, as the guard. The last column counts on the
first-order leave-one-out logits the run tracks (each row's own clipped gradients' pull removed;
what the default guard, ``guard_count="leave_one_out"``, releases).

Usage: ``python scripts/guard_self_pull.py REGIME EPSILON SEEDS`` with REGIME a name of
``scripts/center_and_start.py``'s ``regime_features``, e.g.
``python scripts/guard_self_pull.py drawn_2 3 0,1,2,3``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core


def main() -> None:
    import numpy as np

    from center_and_start import guard_off_fits
    from mixdp_core.methods._linear import logit_margins
    from mixdp_core.methods.adamix.engine import self_pull_bound

    for reg, eps, seed, sp, op, m in guard_off_fits(sys.argv[1:4], _track_self_pull=True):
        pull = self_pull_bound(m.history_, float(m.n_hat_))
        y = sp.y_private
        logits = np.asarray(m.decision_function(sp.X_private), dtype=np.float64)
        margin = logit_margins(logits, y)
        xn = np.linalg.norm(m.feature_map_(sp.X_private), axis=1)  # the run's own coordinates
        start = op.predict(sp.X_private) == y
        plain = float(np.sum((margin > 0).astype(float) - start))
        robust = float(np.sum((margin > pull * xn).astype(float) - start))
        # first-order leave-one-out: the logits without each row's own tracked pull
        loo = float(np.sum(((logits - m._guard_pull_shift).argmax(1) == y).astype(float) - start))
        test = np.mean(m.predict(sp.X_test) == sp.y_test) - np.mean(op.predict(sp.X_test) == sp.y_test)
        print(f"{reg} seed {seed} eps {eps:g}: guard's count {plain:+.0f} rows, without each row's own pull "
              f"{robust:+.0f}, first-order leave-one-out {loo:+.0f} (noise std {m.noise_multiplier_:g}; pull bound {pull:.3g} per unit norm, median "
              f"margin {np.median(margin):.3g}) | test {100 * test:+.1f} pts", flush=True)


if __name__ == "__main__":
    main()
