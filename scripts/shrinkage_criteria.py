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

Two more use the run's last iterate ``w_T`` beside its released t-weighted average (both are
post-processing of the same noisy gradients; ``L = w_T - W_start``, noise std ``nu_L`` per
coordinate, correlated with the average's: :func:`mixdp_core.methods.adamix.engine.iterate_noise_covariance`):

- ``last``: the rule applied to ``L`` instead of ``Delta``;
- ``two_iterate``: the model ``W_start + u Delta + v L`` whose expected squared logit error on
  the public rows against the noise-free last iterate ``A + X L_S`` is least, estimated without
  bias (Stein): with ``G`` the observed 2 x 2 Gram matrix of ``X Delta, X L`` and ``N`` its
  noise part (``C sum ||x||^2`` times the per-coordinate noise covariance of the two), ``(u, v) =
  e_2 - G^{-1} N e_2``. It reduces to ``last`` where ``u`` is held at 0. Why the last iterate's
  noise-free value as the target: on several cells the error keeps falling past the whole
  averaged update (s > 1), where the average lags behind the iterate it averages. Computed by
  the library's :func:`mixdp_core.methods.adamix.engine.two_iterate_combination` (``nan`` where
  it returns ``None``), the release of ``update_shrinkage="two_iterate_when_balanced"``.

And one per class:

- ``per_class``: the rule on each class's column of the update alone, ``s_c = max(0, 1 - nu^2
  sum ||x||^2 / sum_x (x Delta_c)^2)``. The squared logit error is a sum over the classes'
  columns, so each column has its own minimizer; the noise is the same in every column while
  the private signal is not (under imbalance a minority class's column carries few rows'
  gradients), and one s for all columns lets the majority classes' signal buy the minority
  columns' noise.

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


def criteria(X_public, W_start, delta, nu: float, last=None, cov=None) -> dict[str, tuple]:
    """The coefficients ``(on Delta, on L)`` of each criterion of the module docstring (``nan``
    where one is undefined; ``per_class``'s is a vector, one factor per class column);
    ``last``/``cov``: ``L`` and the 2 x 2 per-coordinate noise covariance of (average, last
    iterate), for the last two."""
    import numpy as np

    from mixdp_core.methods.adamix.engine import two_iterate_combination, update_shrinkage

    X = np.asarray(X_public, dtype=np.float64)
    A, U = X @ W_start, X @ delta
    C, energy_x = delta.shape[1], float(np.sum(X * X))
    out = {"rule": (update_shrinkage(X, delta, nu), 0.0)}
    # centred: the rule on logits centred per row, C - 1 noise dimensions per row
    Uc = U - U.mean(1, keepdims=True)
    e_c = float(np.sum(Uc * Uc))
    out["centered"] = (max(0.0, 1.0 - (C - 1) * nu ** 2 * energy_x / e_c) if e_c > 0 else float("nan"), 0.0)
    # cosine: the closed form of the module docstring
    n = C * nu ** 2 * energy_x
    e, a, c = float(np.sum(U * U)), float(np.sum(A * A)), float(np.sum(A * U))
    q = e - n
    den = e * a + e * c - c * c - c * q
    out["cosine"] = (max(0.0, (q * a - c * c) / den) if den > 0 else float("nan"), 0.0)
    col = np.sum(U * U, axis=0)  # each class's column: its own squared-logit rule
    per = np.where(col > 0, np.maximum(0.0, 1.0 - nu ** 2 * energy_x / np.maximum(col, 1e-300)), 1.0)
    out["per_class"] = (per, 0.0)
    if last is not None and cov is not None:
        out["last"] = (0.0, update_shrinkage(X, last, float(np.sqrt(cov[1, 1]))))
        # the library's: update_shrinkage="two_iterate_when_balanced" (None where undefined)
        out["two_iterate"] = two_iterate_combination(X, delta, last, cov) or (float("nan"), float("nan"))
    return out


def main() -> None:
    import numpy as np

    from guard_path_grid import captured_updates
    from mixdp_core.methods.adamix.engine import iterate_noise_covariance

    reg, eps, seeds = sys.argv[1], float(sys.argv[2]), [int(s) for s in sys.argv[3].split(",")]
    for seed, sp, op, m, P, D, nu in captured_updates(reg, eps, seeds):
        W0 = m.W_start_.astype(np.float64)
        L = None if m._last_iterate is None else m._last_iterate.astype(np.float64) - W0
        cov = None if L is None else iterate_noise_covariance(m._captured["history"], m._captured["n_hat"],
                                                              m.config.noise_multiplier)

        def error(a, b: float = 0.0) -> float | None:
            if not (np.all(np.asarray(a) == np.asarray(a)) and b == b):
                return None
            m.W_ = (W0 + a * D + (0.0 if L is None else b * L)).astype(np.float32)
            return 100 * float(np.mean(m.predict(sp.X_test) != sp.y_test))

        grid = {s: error(s) for s in GRID}
        crit = criteria(P.X_public, W0, D, nu, L, cov)
        print(json.dumps({"regime": reg, "epsilon": eps, "seed": seed,
                          "only_public": 100 * float(np.mean(op.predict(sp.X_test) != sp.y_test)),
                          "grid": grid, "best_s": min(grid, key=grid.get),
                          "criteria": {k: {"s": float(np.mean(ab[0])), "s_last": ab[1], "error": error(*ab),
                                           **({"s_min": float(np.min(ab[0]))} if np.ndim(ab[0]) else {})}
                                       for k, ab in crit.items()}}),
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
        def col(k: str) -> str:
            if any(x["criteria"].get(k, {}).get("error") is None for x in lines):
                return "—"
            coef = f"s {mean(lambda x: x['criteria'][k]['s']):.2f}"
            if k in ("last", "two_iterate"):
                coef = (f"{mean(lambda x: x['criteria'][k]['s']):.2f}, {mean(lambda x: x['criteria'][k]['s_last']):.2f}"
                        if k == "two_iterate" else f"s {mean(lambda x: x['criteria'][k]['s_last']):.2f}")
            return f"{mean(lambda x: x['criteria'][k]['error']):.1f} ({coef})"

        cols = [col(k) for k in names]
        print(f"| `{reg}` {eps:g} | {mean(lambda x: x['grid']['0.0']):.1f} | {mean(lambda x: x['grid']['1.0']):.1f} | "
              f"{best:.1f} ({best_s}) | " + " | ".join(cols) + f" |  <!-- {len(lines)} seeds -->")
    # against the rule (the default), cell by cell: mean over the cell's seeds of the paired difference
    print("\nagainst the rule (test error points, cells' means of paired differences):")
    for k in names[1:]:
        diffs = []
        for (reg, eps), lines in sorted(cells.items()):
            d = [x["criteria"][k]["error"] - x["criteria"]["rule"]["error"] for x in lines
                 if x["criteria"].get(k, {}).get("error") is not None]
            if d:
                diffs.append((float(np.mean(d)), f"{reg} {eps:g}"))
        if diffs:
            v = np.array([d for d, _ in diffs])
            worst = max(diffs)
            print(f"- {k}: mean {v.mean():+.2f} over {len(v)} cells; better in {int((v < 0).sum())}, equal in "
                  f"{int((v == 0).sum())}, worse in {int((v > 0).sum())} (by more than 0.5 in {int((v > 0.5).sum())}); "
                  f"best {min(diffs)[0]:+.1f} ({min(diffs)[1]}), worst {worst[0]:+.1f} ({worst[1]})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--summary"]:
        summary(sys.argv[2:])
    else:
        main()
