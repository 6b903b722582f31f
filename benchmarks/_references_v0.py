"""The cross-validated ridge selection of the non-private references *before* its speed-up
(direct L-BFGS in feature space, warm-started along the ridge path), kept verbatim
so ``benchmarks/references.py`` can time the current :func:`select_l2_cv` side by side."""

from __future__ import annotations

import numpy as np

from mixdp_core.methods._linear import L2_GRID, error_rate, fit_logistic


def select_l2_cv_v0(X, y, n_classes, *, grid=L2_GRID, folds=5, seed=0, max_iter=100, return_errors=False):
    """Former ``select_l2_cv`` (same folds, grid and tie rule as the current one)."""
    y = np.asarray(y)
    counts = np.bincount(y, minlength=n_classes)
    k = int(min(folds, counts[counts > 0].min()))
    if k < 2:
        return float(grid[len(grid) // 2])
    rng = np.random.default_rng([seed, 0xC5])
    fold_of = np.empty(len(y), dtype=np.int64)
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        fold_of[idx] = np.arange(len(idx)) % k
    path = sorted(grid, reverse=True)
    wrong = np.zeros(len(path))
    for f in range(k):
        tr, va = fold_of != f, fold_of == f
        W = None
        for j, l2 in enumerate(path):
            W = fit_logistic(X[tr], y[tr], n_classes, l2=l2, init=W, max_iter=max_iter, tol=1e-5)
            wrong[j] += error_rate(X[va], y[va], W) * va.sum()
    errs = [(wrong[j] / len(y), l2) for j, l2 in enumerate(path)]
    best = min(e for e, _ in errs)
    choice = float(next(l2 for e, l2 in errs if e <= best + 1e-12))
    return (choice, errs) if return_errors else choice
