"""The error along the shrinkage path, and what the guard's count sees of it: the diagnostic
behind ``guard_candidates="shrinkage_path"`` and ``GUARD_PATH_FACTORS``
(docs/results/tuning_notes.md, "The guard's path").

Per seed: AdaMix with its defaults except that the early-checkpoint test is off and the
released model is the unshrunk private update (noise drawn from the seed,
``noise="reproducible"``: a research run, never released), so that ``Delta = W - W_start`` is
captured; then, for ``s`` in ``{0, t s_rule}`` (``s_rule`` the squared-logit rule's factor,
``t`` in 1/8 ... 2) and 1: the test error and balanced accuracy of ``W_start + s Delta``, and the
paired count the guard would release for it without its noise (private rows, each row's own
pull removed): unweighted (``count``, what the guard sums) and with class weights
``(min n / n_c)^p``, p = 1/2 and 1 (``count_sqrt_w``, ``count_w``). One JSON line per seed,
with the noise std of the guard's count (``sigma_g``).

``--simulate FILE...``: from such lines, the expected test error of the guard as shipped
(``guard_candidates="single"`` and ``"shrinkage_path"``: the path's K candidates, noise
``sigma_g sqrt(K)`` each, argmax, Šidák bar) and of the path asking the weighted counts, over
20,000 simulated noise draws per line (tuning_notes.md, "The guard's path": class weights);
and, "gated", with the path's resolution test (``sigma_g sqrt(K) <= guard_resolution x`` the
private rows, else the single count) for the shipped path and two wider ones, down to s/4 and
s/8 (tuning_notes.md, "The average lags").

Usage: ``python scripts/guard_path_grid.py REGIME EPSILON SEEDS`` with REGIME a name of
``scripts/center_and_start.py``'s ``regime_splits`` (``NAME@irR`` sets the imbalance ratio), e.g.
``python scripts/guard_path_grid.py fine_grained_100@ir6 8 0,1 > grid.jsonl``, then
``python scripts/guard_path_grid.py --simulate grid.jsonl``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core

FACTORS = (0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


def captured_updates(reg: str, eps: float, seeds: list[int]):
    """Per seed of REGIME: ``(seed, split, only_public, adamix, problem, Delta, nu)``, AdaMix fitted
    with its defaults except that the early-checkpoint test is off, the guard asks the single
    count, the shrinkage is the one-factor rule's (``update_shrinkage="public_logits"``) and the released model is the unshrunk private update (``Delta = W - W_start``, float64;
    ``nu`` the released average's noise std per coordinate, :func:`.engine.released_noise_std`);
    noise drawn from the seed (a research run, never released)."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    from center_and_start import regime_splits
    from mixdp_core.methods import make_method
    from mixdp_core.methods.adamix.engine import released_noise_std

    for seed, sp in regime_splits(reg, seeds):
        with threadpool_limits(1):
            op = make_method("only_public").fit(sp)
            # update_shrinkage="public_logits": the one-factor rule's path, whose factor is captured
            # below (the two-iterate default would not ask it on balanced classes)
            m = make_method("adamix", target_epsilon=eps, seed=seed, noise="reproducible", early_checkpoint=False,
                            guard_candidates="single", update_shrinkage="public_logits")
            cap = {}

            def capture(problem, delta_W, history, n_hat, public_pull, start_loo, _m=m):
                cap.update(problem=problem, delta=delta_W, history=list(history), n_hat=float(n_hat),
                           nu=released_noise_std(history, float(n_hat), _m.config.noise_multiplier))
                return 1.0  # release the whole update: Delta is what the grid scales

            m._shrinkage_factor = capture
            m.fit(sp)
        m._captured = cap  # the update's step records and n_hat (scripts/shrinkage_criteria.py)
        yield seed, sp, op, m, cap["problem"], cap["delta"].astype(np.float64), cap["nu"]


def main() -> None:
    import numpy as np

    from mixdp_core.methods.adamix.engine import update_shrinkage
    from mixdp_core.methods.adamix.private import _paired_count  # what the guard counts

    reg, eps, seeds = sys.argv[1], float(sys.argv[2]), [int(s) for s in sys.argv[3].split(",")]
    for seed, sp, op, m, P, D, nu in captured_updates(reg, eps, seeds):
        W0 = m.W_start_.astype(np.float64)
        s_rule = update_shrinkage(P.X_public, D, nu)
        pull = m._guard_pull_shift
        Xp, yp = P.X_private.astype(np.float64), P.y_private
        Z0, dZ = Xp @ W0, Xp @ D - (0.0 if pull is None else pull)
        start_right = (Z0.argmax(1) == yp).astype(float)
        counts = np.bincount(yp, minlength=P.n_classes).astype(float)
        w = counts[counts > 0].min() / np.maximum(counts, 1.0)  # class weights <= 1: sensitivity 1
        yt = sp.y_test
        rows = []
        for s in sorted({0.0, 1.0, *(min(1.0, t * s_rule) for t in FACTORS)}):
            m.W_ = (W0 + s * D).astype(np.float32)
            pred = m.predict(sp.X_test)
            rows.append({"s": s, "error": 100 * float(np.mean(pred != yt)),
                         "balanced_accuracy": 100 * float(np.mean([np.mean(pred[yt == c] == c) for c in np.unique(yt)])),
                         **{k: _paired_count(Z0 + s * dZ, yp, start_right, weights=wk)
                            for k, wk in (("count", None), ("count_sqrt_w", np.sqrt(w)), ("count_w", w))}})
        sigma_g = m.config.noise_multiplier / np.sqrt(m.history_[-1].extra.get("guard_releases", 1.0))
        print(json.dumps({"regime": reg, "epsilon": eps, "seed": seed, "only_public": 100 * float(np.mean(op.predict(sp.X_test) != yt)),
                          "s_rule": s_rule, "private_rows": int(len(yp)), "sigma_g": float(sigma_g), "path": rows}), flush=True)


def simulate(paths: list[str], draws: int = 20000) -> None:
    """Print, per (regime, epsilon), the mean over the lines' seeds of the expected test error of
    the guard's variants (module docstring)."""
    from collections import defaultdict

    import numpy as np
    from scipy.stats import norm

    from mixdp_core.methods.adamix.configs import GUARD_PATH_FACTORS, GUARD_Z, AdaMixConfig

    resolution = AdaMixConfig().guard_resolution  # the default r of the path's resolution test

    def expected(line: dict, key: str, factors: tuple[float, ...], gated: bool = False) -> float:
        rng = np.random.default_rng(0)
        if gated and line["sigma_g"] * np.sqrt(len(factors)) > resolution * line["private_rows"]:
            factors = (1.0,)  # the path's resolution test (private rows for n̂_lo: slightly optimistic)
        near = {}
        for t in factors:  # the grid's nearest s to each capped candidate t s_rule
            c = min(line["path"], key=lambda r: abs(r["s"] - min(1.0, t * line["s_rule"])))
            near[c["s"]] = c
        cand = list(near.values())
        k = len(cand)
        sd = line["sigma_g"] * np.sqrt(k)
        noisy = np.array([c[key] for c in cand])[None] + rng.normal(0.0, sd, (draws, k))
        j = noisy.argmax(1)
        keep = noisy[np.arange(draws), j] > norm.ppf(norm.cdf(GUARD_Z) ** (1 / k)) * sd
        start = min(line["path"], key=lambda r: r["s"])["error"]
        return float(np.where(keep, np.array([c["error"] for c in cand])[j], start).mean())

    variants = {"single": ("count", (1.0,)), "path": ("count", GUARD_PATH_FACTORS),
                "path, gated": ("count", GUARD_PATH_FACTORS, True),
                "path s/4 … 2s, gated": ("count", (0.25, 0.5, 1.0, 2.0), True),
                "path s/8 … 2s, gated": ("count", (0.125, 0.25, 0.5, 1.0, 2.0), True),
                "path, sqrt weights": ("count_sqrt_w", GUARD_PATH_FACTORS), "path, weights": ("count_w", GUARD_PATH_FACTORS)}
    cells = defaultdict(list)
    for p in paths:
        for text in open(p):
            line = json.loads(text)
            cells[(line["regime"], line["epsilon"])].append({v: expected(line, *a) for v, a in variants.items()})
    print("regime, epsilon: " + " / ".join(variants) + " (expected test error %, mean over seeds)")
    for (reg, eps), rows in sorted(cells.items()):
        print(f"{reg} {eps:g}: " + " / ".join(f"{np.mean([r[v] for r in rows]):.1f}" for v in variants)
              + f" ({len(rows)} seeds)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--simulate"]:
        simulate(sys.argv[2:])
    else:
        main()
