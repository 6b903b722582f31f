"""Label-free shrinkage criteria against the error-optimal factor: the measurement behind
"Where the criterion errs" in docs/results/tuning_notes.md ("The private update's shrinkage").

Per seed (the update captured as in ``scripts/guard_path_grid.py``: guard on the single count,
no early-checkpoint test, the whole update kept, noise drawn from the seed): the test error of
``W_start + s Delta`` over ``s`` in 0 ... 2 (``s > 1`` extrapolates the update), and the factor
each criterion picks from the public rows' logits ``A = X W_start``, ``U = X Delta`` and the noise
energy ``n = C nu^2 sum ||x||^2`` (``e = ||U||^2``, ``q = e - n``, ``a = ||A||^2``, ``c = <A, U>``):

- ``rule``: the default, :func:`mixdp_core.methods.adamix.engine.update_shrinkage`,
  ``1 - n / e`` (squared logit error against the noise-free update ``A + U_S``);
- ``centered``: the same on logits centred per row (the softmax ignores a row's common shift:
  ``C - 1`` noise dimensions per row);
- ``cosine``: the ``s`` that maximizes the expected cosine between ``A + s U`` and ``A + U_S``,
  ``s = (q a - c^2) / (e a + e c - c^2 - c q)`` (scale-free, as the argmax is; equals the rule
  where ``c = 0``).

Usage: ``python scripts/shrinkage_criteria.py REGIME EPSILON SEEDS`` (one JSON line per seed),
``python scripts/shrinkage_criteria.py --summary FILE...`` (the mean test error per criterion).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core

GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0)


def criteria(X_public, W_start, delta, nu: float) -> dict[str, float]:
    """The factors of the module docstring's criteria (``nan`` where one is undefined)."""
    import numpy as np

    from mixdp_core.methods.adamix.engine import update_shrinkage

    X = np.asarray(X_public, dtype=np.float64)
    A, U = X @ W_start, X @ delta
    out = {"rule": update_shrinkage(X, delta, nu)}
    for name, dof, center in (("centered", delta.shape[1] - 1, True), ("cosine", delta.shape[1], False)):
        Ai, Ui = (A - A.mean(1, keepdims=True), U - U.mean(1, keepdims=True)) if center else (A, U)
        n = dof * nu ** 2 * float(np.sum(X * X))
        e, a, c = float(np.sum(Ui * Ui)), float(np.sum(Ai * Ai)), float(np.sum(Ai * Ui))
        if name == "centered":
            out[name] = max(0.0, 1.0 - n / e) if e > 0 else float("nan")
        else:
            q = e - n
            den = e * a + e * c - c * c - c * q
            out[name] = max(0.0, (q * a - c * c) / den) if den > 0 else float("nan")
    return out


def main() -> None:
    import numpy as np

    from guard_path_grid import captured_updates

    reg, eps, seeds = sys.argv[1], float(sys.argv[2]), [int(s) for s in sys.argv[3].split(",")]
    for seed, sp, op, m, P, D, nu in captured_updates(reg, eps, seeds):
        W0 = m.W_start_.astype(np.float64)

        def error(s: float) -> float:
            m.W_ = (W0 + s * D).astype(np.float32)
            return 100 * float(np.mean(m.predict(sp.X_test) != sp.y_test))

        grid = {s: error(s) for s in GRID}
        crit = criteria(P.X_public, W0, D, nu)
        print(json.dumps({"regime": reg, "epsilon": eps, "seed": seed,
                          "only_public": 100 * float(np.mean(op.predict(sp.X_test) != sp.y_test)),
                          "grid": grid, "best_s": min(grid, key=grid.get),
                          "criteria": {k: {"s": v, "error": error(v) if v == v else None} for k, v in crit.items()}}),
              flush=True)


def summary(paths: list[str]) -> None:
    """Per (regime, epsilon): mean test error % at s = 0, 1, the grid's best, and each criterion's s."""
    from collections import defaultdict

    import numpy as np

    cells = defaultdict(list)
    for p in paths:
        for text in open(p):
            line = json.loads(text)
            cells[(line["regime"], line["epsilon"])].append(line)
    names = list(next(iter(cells.values()))[0]["criteria"])
    print("| regime, ε | s = 0 | s = 1 | best on the grid (its s) | " + " | ".join(names) + " |")
    print("|---" * (4 + len(names)) + "|")
    for (reg, eps), lines in sorted(cells.items()):
        def mean(f):
            return float(np.mean([f(x) for x in lines]))
        best = mean(lambda x: min(x["grid"].values()))
        best_s = ", ".join(f"{x['best_s']:g}" for x in lines)
        cols = [f"{mean(lambda x, k=k: x['criteria'][k]['error']):.1f} (s {mean(lambda x, k=k: x['criteria'][k]['s']):.2f})"
                for k in names]
        print(f"| `{reg}` {eps:g} | {mean(lambda x: x['grid']['0.0']):.1f} | {mean(lambda x: x['grid']['1.0']):.1f} | "
              f"{best:.1f} ({best_s}) | " + " | ".join(cols) + f" |  <!-- {len(lines)} seeds -->")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--summary"]:
        summary(sys.argv[2:])
    else:
        main()
