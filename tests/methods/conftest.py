"""Small shared fixtures: scikit-learn digits (64-d) split into public / private / test."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from mixdp_core.data.splits import SplitSpec, make_split
from mixdp_core.features.featureset import FeatureSet


def digits_featureset(with_text: bool = False, n_train: int = 1257) -> FeatureSet:
    """Digits pixels as features; optional synthetic "text" embeddings = class means."""
    d = load_digits()
    X = d.data.astype(np.float32)
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(y))
    X, y = X[perm], y[perm]
    Xtr, ytr, Xte, yte = X[:n_train], y[:n_train], X[1257:], y[1257:]
    text = None
    if with_text:
        text = np.stack([Xtr[ytr == c].mean(0) for c in range(10)]).astype(np.float32)
        text /= np.linalg.norm(text, axis=1, keepdims=True)
    return FeatureSet(Xtr, ytr, Xte, yte, [str(c) for c in range(10)], text_embeddings=text)


@pytest.fixture(scope="session")
def digits_split():
    return make_split(digits_featureset(with_text=True), SplitSpec(public_per_class=5, seed=0))


@pytest.fixture(scope="session")
def small_split():
    """A few hundred training rows: fast private runs."""
    return make_split(digits_featureset(with_text=True, n_train=400), SplitSpec(public_per_class=3, seed=1))


def tight_cv_wrong_rows(X, y, n_classes: int, *, max_iter: int, tol: float) -> dict:
    """Independent ridge cross-validation: the library's stratified folds (the same seeded
    assignment as ``cross_validate_l2``, seed 0, 5 folds), every (fold, ridge of ``L2_GRID``)
    fitted from zero by L-BFGS in feature space to ``tol``; returns ``{l2: misclassified
    validation rows summed over the folds}``."""
    from mixdp_core.methods._linear import L2_GRID, error_rate, fit_logistic

    rng = np.random.default_rng([0, 0xC5])
    fold_of = np.empty(len(y), dtype=np.int64)
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        fold_of[idx] = np.arange(len(idx)) % 5
    out = {}
    for l2 in L2_GRID:
        wrong = 0.0
        for f in range(5):
            tr, va = fold_of != f, fold_of == f
            W = fit_logistic(X[tr], y[tr], n_classes, l2=l2, max_iter=max_iter, tol=tol)
            wrong += error_rate(X[va], y[va], W) * va.sum()
        out[l2] = wrong
    return out
