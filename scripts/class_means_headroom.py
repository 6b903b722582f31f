"""Why (c) is out of reach on a scarce regime: DP class means in a public subspace (a
diagnostic, never a method, never used to choose anything). docs/results/regimes.md, "(c) on
scarce_50_d256_ir10".

Rows are L2-normalized, centred on the public mean and projected on the top-r right singular
vectors of the public rows; each projected private row is clipped to c (the 90th percentile of
the public rows' projected norms: a public quantity). One Gaussian release of the per-class sums
and counts, jointly: add/remove of one row moves one class sum by <= c and one count by 1, so the
vector (sums, c * counts) has L2 sensitivity sqrt(2) c; noise N(0, (sqrt(2) c / mu)^2) on the
sums and N(0, (sqrt(2) / mu)^2) on the counts with mu the exact GDP mu of (epsilon, 1e-5). Class
means are shrunk toward the public class means (prior weight k public rows) and classify by
nearest mean, plain or after whitening with the public within-class covariance (shrunk halfway
to its trace). The printed error is the lowest *test* error over k in {1, 4} and the two rules
(an oracle over this family: optimistic by construction). epsilon = inf is the same estimator
without noise: how much of the class signal the subspace keeps at all. The noise here comes
from numpy's generator (a diagnostic on synthetic data; the product's releases use secure noise).

Usage: ``python scripts/class_means_headroom.py REGIME SEEDS`` (e.g. ``scarce_50_d256_ir10 0,1,2,3``).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from center_and_start import regime_splits  # noqa: E402  (the same regimes and splits)
from mixdp_core.accounting.gaussian import gdp_mu_for_budget  # noqa: E402

DELTA = 1e-5


def _errors(sp, r: int, eps: float, rng: np.random.Generator) -> float:
    def unit(a):
        return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)

    Xp, X, Xt = unit(sp.X_public), unit(sp.X_private), unit(sp.X_test)
    yp, y, yt = sp.y_public, sp.y_private, sp.y_test
    C = int(max(yp.max(), y.max(), yt.max())) + 1
    m0 = Xp.mean(0)
    V = np.linalg.svd(Xp - m0, full_matrices=False)[2][:r].T
    Zp, Z, Zt = (Xp - m0) @ V, (X - m0) @ V, (Xt - m0) @ V
    c = float(np.quantile(np.linalg.norm(Zp, axis=1), 0.9))
    Z = Z * np.minimum(1.0, c / np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1e-12))
    S, n = np.zeros((C, r)), np.zeros(C)
    np.add.at(S, y, Z)
    np.add.at(n, y, 1.0)
    if np.isfinite(eps):
        mu = gdp_mu_for_budget(epsilon=eps, delta=DELTA)
        S = S + rng.normal(0.0, np.sqrt(2) * c / mu, S.shape)
        n = n + rng.normal(0.0, np.sqrt(2) / mu, C)
    Sp, npub = np.zeros((C, r)), np.zeros(C)
    np.add.at(Sp, yp, Zp)
    np.add.at(npub, yp, 1.0)
    Mp = Sp / np.maximum(npub, 1.0)[:, None]
    R = Zp - Mp[yp]
    Sw = R.T @ R / max(len(yp) - C, 1)
    Sw = 0.5 * Sw + 0.5 * np.trace(Sw) / r * np.eye(r)
    if not np.trace(Sw) > 0:  # one public row per class: no within-class spread to whiten by
        Sw = np.eye(r)
    best = 100.0
    for k in (1.0, 4.0):
        M = (S + k * Mp) / (np.maximum(n, 0.0) + k)[:, None]
        W = np.linalg.solve(Sw, M.T)
        lda = np.argmax(Zt @ W - 0.5 * np.sum(M.T * W, 0), 1)
        near = np.argmin((Zt ** 2).sum(1)[:, None] - 2 * Zt @ M.T + (M ** 2).sum(1)[None], 1)
        best = min(best, 100.0 * np.mean(lda != yt), 100.0 * np.mean(near != yt))
    return best


def main() -> None:
    reg, seeds = sys.argv[1], [int(s) for s in sys.argv[2].split(",")]
    out: dict[str, dict[str, list[float]]] = {}
    for seed, sp in regime_splits(reg, seeds):
        rmax = min(len(sp.y_public) - 1, sp.X_public.shape[1])
        for r in sorted({x for x in (16, 32, 64, 128) if x < rmax} | {rmax}):
            for eps in (3.0, 8.0, float("inf")):
                err = _errors(sp, r, eps, np.random.default_rng(1000 + seed))
                out.setdefault(f"r={r}", {}).setdefault(f"eps={eps:g}", []).append(round(err, 1))
    print(json.dumps({"regime": reg, "seeds": seeds, "test_error_pct_by_seed": out,
                      "mean": {r: {e: round(float(np.mean(v)), 1) for e, v in d.items()} for r, d in out.items()}}))


if __name__ == "__main__":
    main()
