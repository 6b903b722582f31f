"""Ridge selection of the non-private reference methods (paragon, only-public)."""

import dataclasses

import numpy as np
import pytest

from mixdp_core.methods import make_method
from mixdp_core.methods._linear import L2_GRID, error_rate, fit_logistic, l2_normalize, select_l2_cv

from .conftest import tight_cv_wrong_rows


def test_cv_ties_go_to_the_strongest_ridge():
    # identical rows: every l2 predicts the same class everywhere -> equal CV errors
    X = np.ones((40, 5)) / np.sqrt(5)
    y = np.repeat(np.arange(4), 10)
    assert select_l2_cv(X, y, 4) == max(L2_GRID)
    # a class with a single sample: no 2-fold CV possible -> middle of the grid
    assert select_l2_cv(X[:31], y[:31], 4) == L2_GRID[len(L2_GRID) // 2]


def test_cv_selected_l2_beats_fixed_guess_on_digits(digits_split):
    X = l2_normalize(np.vstack([digits_split.X_public, digits_split.X_private]))
    y = np.concatenate([digits_split.y_public, digits_split.y_private])
    Xt = l2_normalize(digits_split.X_test)
    l2 = select_l2_cv(X, y, 10)
    assert l2 < 1.0 / len(y)  # 64 informative pixels: weak ridge wins (measured 1e-5)
    cv_err = error_rate(Xt, digits_split.y_test, fit_logistic(X, y, 10, l2=l2))
    fixed_err = error_rate(Xt, digits_split.y_test, fit_logistic(X, y, 10, l2=1.0 / len(y)))
    assert cv_err <= fixed_err


@pytest.mark.parametrize("name", ["paragon", "only_public"])
def test_reference_l2_never_reads_test_data(name, digits_split):
    a = make_method(name).fit(digits_split)
    rng = np.random.default_rng(1)
    shuffled = dataclasses.replace(digits_split, X_test=rng.normal(size=digits_split.X_test.shape).astype(np.float32))
    b = make_method(name).fit(shuffled)
    assert a.l2_ == b.l2_ and np.array_equal(a.W_, b.W_)
    assert a.l2_ in L2_GRID
    assert make_method(name, l2=0.5).fit(digits_split).l2_ == 0.5


def test_only_public_l2_ignores_private_rows(digits_split):
    a = make_method("only_public").fit(digits_split)
    gone = dataclasses.replace(digits_split, X_private=digits_split.X_private[:10] * 0 + 1, y_private=digits_split.y_private[:10])
    b = make_method("only_public").fit(gone)
    assert a.l2_ == b.l2_ and np.array_equal(a.W_, b.W_)


def _many_class_rows(n: int, d: int, c: int, seed: int = 0):
    """Unit rows with a common mean, class means and a power-law spectrum (ill-conditioned,
    as CNN embeddings are; the generator of benchmarks/references.py at a small size)."""
    rng = np.random.default_rng(seed)
    scale = (1.0 + np.arange(d)) ** -0.8
    common = np.abs(rng.normal(size=d)) * 3.0 / np.sqrt(d)
    means = rng.normal(size=(c, d)) * scale * 1.5
    y = np.arange(n) % c
    X = common + means[y] + rng.normal(size=(n, d)) * scale
    return l2_normalize(X), y


def _objective(X, y, W, l2):
    from mixdp_core.methods._linear import softmax_residual

    _, loss = softmax_residual(np.asarray(X, np.float64) @ np.asarray(W, np.float64), y)
    return float(loss.mean() + 0.5 * l2 * np.sum(np.asarray(W, np.float64) ** 2))


@pytest.mark.parametrize("l2", [1e-2, 1e-4, 1e-5])
def test_spectral_fit_reaches_the_tight_optimum_with_many_classes(l2):
    # Independent computation: scipy's L-BFGS-B in feature space, float64, far below the
    # default stopping rule. The fast solver (float32 phase + float64 polish) must reach the
    # same mean-loss + ridge objective to 1e-6 (absolute), from zero and from a warm start.
    from mixdp_core.methods._linear import fit_logistic_spectral, spectral_rows

    X, y = _many_class_rows(300, 40, 30)
    W_ref = fit_logistic(X, y, 30, l2=l2, max_iter=20000, tol=1e-11)
    ref = _objective(X, y, W_ref, l2)
    sp = spectral_rows(X)
    for init in (None, sp.V.T @ fit_logistic(X, y, 30, l2=10 * l2, max_iter=50)):
        W = sp.V @ fit_logistic_spectral(sp.Z, y, 30, sp.s, l2=l2, init=init)
        assert abs(_objective(X, y, W, l2) - ref) < 1e-6
    np.testing.assert_allclose(W, W_ref, atol=2e-2 * max(1.0, np.abs(W_ref).max()))


def test_cross_validation_errors_match_tight_fold_fits_with_many_classes():
    # Independent computation: the same stratified folds, every (fold, ridge) fitted from zero
    # by L-BFGS in feature space to a tight tolerance. The CV's loose float32 fold fits must
    # give the same error per ridge (to one validation row) and select the same ridge.
    from mixdp_core.methods._linear import cross_validate_l2

    X, y = _many_class_rows(600, 48, 30, seed=1)
    want = tight_cv_wrong_rows(X, y, 30, max_iter=20000, tol=1e-10)
    res = cross_validate_l2(X, y, 30)
    got = {l2: e * len(y) for l2, e in zip(res.path, res.errors)}
    assert all(abs(got[l2] - want[l2]) <= 1 for l2 in L2_GRID), (got, want)
    best = min(want.values())
    assert res.l2 == max(l2 for l2, e in want.items() if e <= best) == select_l2_cv(X, y, 30), (got, want)
    assert len(set(want.values())) > 2  # the grid is not a tie: the check can fail


def test_paragon_final_fit_reaches_the_tight_optimum(digits_split):
    # The final fit starts from the CV's mean fold solution: it must still reach the optimum.
    p = make_method("paragon").fit(digits_split)
    X = p.feature_map_(np.vstack([digits_split.X_public, digits_split.X_private]))  # its input map
    y = np.concatenate([digits_split.y_public, digits_split.y_private])
    W_ref = fit_logistic(X, y, 10, l2=p.l2_, max_iter=20000, tol=1e-11)
    assert abs(_objective(X, y, p.W_, p.l2_) - _objective(X, y, W_ref, p.l2_)) < 1e-6
