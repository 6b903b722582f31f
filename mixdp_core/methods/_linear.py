"""Linear softmax head on L2-normalized features: the math shared by every AdaMix-family method.

Conventions (AdaMix paper, Sec. 3, "Notation"):

* features are L2-normalized per row before use (Sec. 3.2, "Model"), so ``||x_i|| = 1``
  (an all-zero row stays zero);
* the model is ``logits = x @ W`` with ``W`` of shape ``(D, C)`` and no bias (the paper's
  ``W = beta [enc(c_1), ..., enc(c_C)]`` text initialization has none either);
* losses are *sums* over samples, ``L(W) = sum_i l_i(W)`` with ``l_i`` the cross-entropy, so
  gradients are sums too; ``G = X^T (P - Y)`` where ``P`` are the softmax probabilities and
  ``Y`` the one-hot labels;
* the per-sample gradient ``g_i = x_i (p_i - y_i)^T`` is a rank-one ``(D, C)`` matrix, hence
  ``||g_i||_F = ||x_i|| * ||p_i - y_i||`` (closed form, no per-sample tensors), and its
  projection on an orthonormal basis ``U`` (``D x k``) is ``(U^T x_i)(p_i - y_i)^T`` with norm
  ``||U^T x_i|| * ||p_i - y_i||``. Since ``||p_i - y_i|| <= sqrt(2)``, ``||g_i|| <= sqrt(2)``.

Matrix layout: ``X^T @ R`` with ``X`` C-contiguous ``(N, D)`` is computed as ``(R^T @ X)^T``,
which BLAS runs as a row-major GEMM over ``X`` (``benchmarks/train.py`` measures both).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: Rows with a norm below this are left as they are (all-zero features stay zero).
_NORM_EPS = 1e-12


def l2_normalize(X: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalization to float32 (C-contiguous); zero rows stay zero."""
    X = np.ascontiguousarray(X, dtype=np.float32)
    n = np.sqrt(np.einsum("ij,ij->i", X, X, dtype=np.float64)).astype(np.float32)
    n[n < _NORM_EPS] = 1.0
    return X / n[:, None]


def into(out: np.ndarray | None, values: np.ndarray) -> np.ndarray:
    """``values`` copied into the caller's reused buffer ``out`` (and ``out`` returned), or
    ``values`` itself when no buffer was given (the ``ratio_out`` / ``loss_out`` arguments of
    the release kernels)."""
    if out is None:
        return values
    out[...] = values
    return out


def row_norms(X: np.ndarray) -> np.ndarray:
    """``(N,)`` float64 Euclidean norms of the rows of ``X``."""
    return np.sqrt(np.einsum("ij,ij->i", X, X, dtype=np.float64))


def softmax_residual(logits: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Residual ``E = softmax(logits) - onehot(y)`` and per-sample cross-entropy.

    Args:
        logits: ``(N, C)`` scores.
        y: ``(N,)`` int labels.

    Returns:
        ``(E, loss)``: ``E`` of shape ``(N, C)`` (same dtype as ``logits``) and ``(N,)``
        float64 losses ``-log p_{i, y_i}`` (nats).
    """
    z = logits - logits.max(axis=1, keepdims=True)
    ez = np.exp(z)
    s = ez.sum(axis=1, keepdims=True)
    P = ez / s
    idx = np.arange(len(y))
    loss = np.log(s[:, 0].astype(np.float64)) - z[idx, y].astype(np.float64)
    P[idx, y] -= 1.0
    return P, loss


def xt_dot(X: np.ndarray, R: np.ndarray) -> np.ndarray:
    """``X^T @ R`` computed as ``(R^T @ X)^T`` (row-major friendly layout), shape ``(D, C)``."""
    return (R.T @ X).T


def grad_sum(X: np.ndarray, y: np.ndarray, W: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Summed cross-entropy gradient of the linear head.

    Returns:
        ``(G, E, loss)``: ``G = X^T (P - Y)`` of shape ``(D, C)``, the residual ``E`` and the
        per-sample losses.
    """
    E, loss = softmax_residual(X @ W, y)
    return xt_dot(X, E), E, loss


def per_sample_grad_norms(X: np.ndarray, E: np.ndarray) -> np.ndarray:
    """Closed-form ``||g_i||_F = ||x_i|| * ||p_i - y_i||`` (``(N,)`` float64)."""
    return row_norms(X) * row_norms(E)


def fit_logistic(
    X: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    *,
    l2: float,
    init: np.ndarray | None = None,
    center: np.ndarray | None = None,
    max_iter: int = 500,
    tol: float = 1e-7,
) -> np.ndarray:
    """Non-private multinomial logistic regression (L-BFGS) on already-normalized features.

    Minimizes ``mean_i CE(x_i W, y_i) + (l2 / 2) * ||W - center||_F^2`` (mean, not sum, so
    ``l2`` does not depend on the number of samples).

    Args:
        X: ``(N, D)`` features (normalized by the caller).
        y: ``(N,)`` labels in ``[0, n_classes)``.
        n_classes: C.
        l2: ridge coefficient ``>= 0`` on the mean loss.
        init: starting ``W`` (default zeros).
        center: ridge centre (default zeros).
        max_iter, tol: L-BFGS stopping rule.

    Returns:
        ``W`` of shape ``(D, C)``, float32.
    """
    from scipy.optimize import minimize  # lazy: ~0.4 s of CPU at import (benchmarks/startup.py)

    N, D = X.shape
    C = int(n_classes)
    X64 = np.asarray(X, dtype=np.float64)
    c = np.zeros((D, C)) if center is None else np.asarray(center, dtype=np.float64)
    w0 = np.zeros(D * C) if init is None else np.asarray(init, dtype=np.float64).ravel()

    def f(w: np.ndarray) -> tuple[float, np.ndarray]:
        W = w.reshape(D, C)
        E, loss = softmax_residual(X64 @ W, y)
        diff = W - c
        val = loss.mean() + 0.5 * l2 * float(np.sum(diff * diff))
        g = X64.T @ E / N + l2 * diff
        return val, g.ravel()

    res = minimize(f, w0, jac=True, method="L-BFGS-B", options={"maxiter": max_iter, "gtol": tol})
    return res.x.reshape(D, C).astype(np.float32)


#: Ridge (mean-loss scale) of the public solution shared by ``only_public`` and the public
#: initialization of ``adamix`` / ``ngd`` (see :func:`fit_public` for the argument).
PUBLIC_L2 = 1e-2


def fit_public(X: np.ndarray, y: np.ndarray, n_classes: int, *, l2: float | None = None, max_iter: int = 1000) -> np.ndarray:
    """The public solution ``w_ref``: logistic regression on the public rows, to convergence.

    One function for the ``only_public`` reference and the public start of the AdaMix family,
    so the start of the private phase *is* the Only-Public model.

    Ridge (``l2=None`` -> :data:`PUBLIC_L2`): AdaMix trains the public model "until
    convergence" (Sec. 4) with a weak decay (App. A.6). A fixed weak ridge rather than a
    cross-validated one: with 1-2 shots per class, k-fold CV leaves 0-1 sample of a class in
    training and its choice is noise. With L2-normalized rows, k-shot public data of a few
    hundred rows in D >= 64 dims are (almost) linearly separable, and as ``l2 -> 0`` the
    regularized logistic solution's *direction* converges to the max-margin one (Rosset, Zhu
    & Hastie 2004) while its norm grows like ``log(1/l2)``: predictions stop depending on
    ``l2`` once it is small. ``1e-4`` is in that regime for every public set we tried
    (training error 0), yet keeps ``||w_ref||`` moderate (~ log(1e4) per margin unit), so
    the public per-sample gradients are small but not ~0 and the adaptive clip stays
    informative. Reads public data only.
    """
    return fit_logistic(X, y, n_classes, l2=PUBLIC_L2 if l2 is None else float(l2), max_iter=max_iter)


#: Ridge grid (mean-loss scale) searched by :func:`select_l2_cv`.
L2_GRID = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5)


class SpectralRows(NamedTuple):
    """Rows of ``X`` in the eigenbasis of their second-moment matrix (see :func:`spectral_rows`).

    Attributes:
        Z: ``(N, r)`` float64 coordinates ``X V``.
        V: ``(D, r)`` orthonormal eigenvectors of ``X^T X`` with non-zero eigenvalue.
        s: ``(r,)`` eigenvalues of ``X^T X / N`` (second moment per direction, decreasing).
    """

    Z: np.ndarray
    V: np.ndarray
    s: np.ndarray


def spectral_rows(X: np.ndarray, rel_tol: float = 1e-10) -> SpectralRows:
    """Eigenbasis of ``X^T X`` restricted to the row span of ``X`` (``r = rank X``).

    Why: a ridge-regularized linear head centred at 0 and started at 0 has its solution (and
    every L-BFGS iterate) in the row span of the rows it trains on (representer theorem), and
    every cross-validation fold trains on a subset of these rows. Optimizing in these ``r <=
    min(N, D)`` coordinates is exact, and the coordinates let :func:`fit_logistic_spectral`
    precondition each direction by its curvature at no cost per iteration. Cost: one Gram
    matrix and one symmetric eigendecomposition (``min(N, D)`` square) and one product ``X V``.
    """
    X64 = np.asarray(X, dtype=np.float64)
    N, D = X64.shape
    if N >= D:
        lam, V = np.linalg.eigh(X64.T @ X64)
    else:  # X X^T = U L U^T  =>  the eigenvectors of X^T X are X^T U L^-1/2
        lam, U = np.linalg.eigh(X64 @ X64.T)
        pos = lam > 0
        V = np.zeros((D, len(lam)))
        V[:, pos] = (X64.T @ U[:, pos]) / np.sqrt(lam[pos])
    keep = lam > max(float(lam.max(initial=0.0)), 1e-300) * rel_tol
    lam, V = lam[keep][::-1], np.ascontiguousarray(V[:, keep][:, ::-1])
    return SpectralRows(Z=X64 @ V, V=V, s=lam / max(N, 1))


def fit_logistic_spectral(
    Z: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    s: np.ndarray,
    *,
    l2: float,
    init: np.ndarray | None = None,
    max_iter: int = 500,
    tol: float = 1e-7,
) -> np.ndarray:
    """:func:`fit_logistic` (centre 0) in spectral coordinates, diagonally preconditioned.

    Minimizes ``mean_i CE(z_i B, y_i) + (l2 / 2) ||B||_F^2`` over ``B`` (``r x C``) with rows
    ``z_i = V^T x_i``; ``W = V B`` is the solution of :func:`fit_logistic` on ``X`` (same
    objective, since ``V`` is orthonormal and the solution lies in its span). L-BFGS runs on
    ``U = B / d`` with ``d_j = (s_j / C + l2)^(-1/2)``: the Hessian of the mean cross-entropy
    is ``E[(diag p - p p^T) (x) x x^T]``, whose class factor has eigenvalues ``1/C`` at the
    uniform start, so ``s_j / C + l2`` is the curvature along direction ``j`` there and the
    rescaled problem is (near the start) isotropic. Ill-conditioned features (CNN embeddings
    have a fast-decaying spectrum) then need far fewer iterations; the minimizer is unchanged.

    Args:
        Z: ``(N, r)`` spectral coordinates of the training rows (:func:`spectral_rows` of a
            superset of them).
        y: ``(N,)`` labels.
        n_classes: C.
        s: ``(r,)`` second moments per direction (:attr:`SpectralRows.s`).
        l2: ridge ``>= 0`` on the mean loss.
        init: starting ``B`` (``r x C``), default zeros.
        max_iter, tol: L-BFGS stopping rule (``tol`` on the preconditioned gradient).

    Returns:
        ``B`` of shape ``(r, C)``, float64 (``W = V @ B``).
    """
    from scipy.optimize import minimize  # lazy: ~0.4 s of CPU at import (benchmarks/startup.py)

    N, r = Z.shape
    C = int(n_classes)
    if r == 0:  # all rows zero: the ridge alone, minimized at 0
        return np.zeros((0, C))
    d = 1.0 / np.sqrt(np.asarray(s, dtype=np.float64) / C + float(l2) + 1e-12)[:, None]
    u0 = np.zeros(r * C) if init is None else (np.asarray(init, dtype=np.float64) / d).ravel()

    def f(u: np.ndarray) -> tuple[float, np.ndarray]:
        B = d * u.reshape(r, C)
        E, loss = softmax_residual(Z @ B, y)
        val = loss.mean() + 0.5 * l2 * float(np.sum(B * B))
        g = d * (Z.T @ E / N + l2 * B)
        return val, g.ravel()

    res = minimize(f, u0, jac=True, method="L-BFGS-B", options={"maxiter": max_iter, "gtol": tol})
    return d * res.x.reshape(r, C)


def select_l2_cv(
    X: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    *,
    grid: tuple[float, ...] = L2_GRID,
    folds: int = 5,
    seed: int = 0,
    max_iter: int = 200,
    tol: float = 1e-5,
    basis: SpectralRows | None = None,
) -> float:
    """Pick the ridge coefficient by stratified k-fold cross-validation on ``(X, y)``.

    For the *non-private* reference methods only: the rows used must be ones the method may
    read anyway (public + private for the paragon, public only for only-public), so the choice
    costs no privacy and never looks at test data. ``k = min(folds, smallest class count)``;
    with fewer than 2 samples in some class the middle of the grid is returned. Ties go to
    the larger ``l2`` (simpler model).

    Solver: every fold is fitted in the spectral coordinates of ``X``
    (:func:`spectral_rows`, computed once from the same rows, or passed as ``basis``), with
    the curvature preconditioning of :func:`fit_logistic_spectral`; the first fold is
    warm-started along the ridge path from strong to weak, every later fold from the previous
    fold's solution at the same ridge. The eigenbasis only reparametrizes each fold's problem
    (its minimizer does not depend on it; it reads the validation fold's features, never its
    labels, and only shapes the optimizer's path). ``benchmarks/references.py`` times it against
    the former direct L-BFGS in feature space: the same ridge selected, about twice as fast
    (docs/results/tuning_notes.md, select_l2_cv solver).

    Returns:
        The ``l2`` of ``grid`` with the lowest mean validation error.
    """
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
    sp = basis if basis is not None else spectral_rows(X)
    path = sorted(grid, reverse=True)
    wrong = np.zeros(len(path))
    prev: list = [None] * len(path)
    for f in range(k):
        tr, va = fold_of != f, fold_of == f
        Ztr, ytr, Zva = sp.Z[tr], y[tr], sp.Z[va]
        B = None
        for j, l2 in enumerate(path):
            # Warm start: the first fold walks the ridge path (strong -> weak); later folds
            # start from the previous fold's solution at the same ridge (their training rows
            # overlap by (k-2)/(k-1)). Only the ranking of the grid matters: a looser stop
            # than the final fit's.
            init = prev[j] if prev[j] is not None else B
            B = fit_logistic_spectral(Ztr, ytr, n_classes, sp.s, l2=l2, init=init, max_iter=max_iter, tol=tol)
            prev[j] = B
            wrong[j] += float(np.sum((Zva @ B).argmax(axis=1) != y[va]))
    errs = [(wrong[j] / len(y), l2) for j, l2 in enumerate(path)]
    best = min(e for e, _ in errs)
    return float(next(l2 for e, l2 in errs if e <= best + 1e-12))


def error_rate(X: np.ndarray, y: np.ndarray, W: np.ndarray) -> float:
    """Fraction of rows of normalized ``X`` misclassified by ``W``."""
    return float(np.mean((X @ W).argmax(axis=1) != y))
