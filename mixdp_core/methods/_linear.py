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

import hashlib
import threading
from typing import NamedTuple

import numpy as np

from ..errors import ConfigError

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


#: Ridge of the public solution when :func:`select_l2_loo` cannot score any ridge (one public row
#: per class, or a public set beyond its size bounds). Chosen on 1-shot *development* settings
#: (the development regimes of the family and digits / pixels, with 1 public row per class:
#: mean test error 65.36 / 65.25 / 65.13 / 65.15 % at 1e-2 / 1e-3 / 1e-4 / 1e-5) and reported on
#: 1-shot validation settings never used for a choice (docs/results/only_public_ridge.md, "One
#: public row per class"; ``scripts/only_public_oneshot.py``). With centred rows the 1-shot
#: error moves by at most 0.6 points over that range: the weak end, where separable rows'
#: predictions stop depending on the ridge (:func:`fit_public`).
ONE_SHOT_L2 = 1e-4

_RIDGE_CACHE: dict[tuple, float] = {}
_RIDGE_CACHE_LOCK = threading.Lock()


def public_ridge(X: np.ndarray, y: np.ndarray, n_classes: int, rule: str = "loo") -> float:
    """The ridge of the public solution (:func:`fit_public`) under ``rule``.

    ``"loo"``: :func:`select_l2_loo` on the public rows, falling back to :data:`ONE_SHOT_L2`;
    ``"fixed"``: :data:`PUBLIC_L2`. One function for ``only_public`` and the public start of
    the AdaMix family, so both fit the same model. Reads the public rows only (no privacy
    cost). The selection is remembered per public set (a digest of ``X``, ``y``): a sweep
    fits one split at several ε, and the ~10 CPU seconds of 200 rows x 100 classes are paid once.
    """
    if rule == "fixed":
        return PUBLIC_L2
    if rule != "loo":
        raise ConfigError("l2_rule", f"must be 'loo' or 'fixed', got {rule!r}")
    X = np.ascontiguousarray(X)
    y = np.ascontiguousarray(y)
    key = (int(n_classes), X.shape, str(X.dtype), hashlib.sha1(X.view(np.uint8)).hexdigest(),
           hashlib.sha1(y.astype(np.int64).view(np.uint8)).hexdigest())
    with _RIDGE_CACHE_LOCK:
        hit = _RIDGE_CACHE.get(key)
    if hit is not None:
        return hit
    l2 = select_l2_loo(X, y, n_classes, fallback=ONE_SHOT_L2)
    with _RIDGE_CACHE_LOCK:
        if len(_RIDGE_CACHE) >= 64:
            _RIDGE_CACHE.clear()
        _RIDGE_CACHE[key] = l2
    return l2


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


#: Relative-reduction stops (L-BFGS-B's ``factr`` test, ``f_k - f_{k+1} <= ftol * max(|f|, 1)``)
#: of the float32 phase of :func:`fit_logistic_spectral` (float32 products make the objective
#: noisy at about 1e-8 relative, so that phase stops there and a float64 phase polishes) and of
#: the fold fits of :func:`cross_validate_l2` (only their validation predictions are used; the
#: per-ridge fold errors against tight solves: docs/results/tuning_notes.md, select_l2_cv solver).
F32_FTOL = 1e-8
CV_FTOL = 1e-7


def _spectral_objective(Zc: np.ndarray, y: np.ndarray, C: int, d: np.ndarray, l2: float):
    """``u -> (F, grad F)`` of the mean cross-entropy + ridge at ``B = d * U`` (``U = u``
    reshaped ``r x C``). ``Zc`` is ``Z`` in the dtype of the two products ``Zc @ B`` and
    ``Zc^T E`` (float32 for the fast phase, float64 for the polish); the loss, the ridge and
    the gradient's scaling are accumulated in float64."""
    N, r = Zc.shape
    l2 = float(l2)

    def fg(u: np.ndarray) -> tuple[float, np.ndarray]:
        B = d * u.reshape(r, C)
        E, loss = softmax_residual(Zc @ B.astype(Zc.dtype, copy=False), y)
        val = float(loss.mean()) + 0.5 * l2 * float(np.sum(B * B))
        return val, (d * (xt_dot(Zc, E) / N + l2 * B)).ravel()

    return fg


def _lbfgs(fg, x: np.ndarray, *, max_iter: int, gtol: float, ftol: float, m: int = 10,
           memory: dict | None = None) -> np.ndarray:
    """L-BFGS (two-loop recursion, Armijo backtracking) for a smooth *convex* ``fg``.

    Stops when ``max |g| <= gtol``, when an accepted step lowers ``f`` by at most
    ``ftol * max(|f|, 1)`` (L-BFGS-B's ``factr`` test), after ``max_iter`` iterations, or when
    30 backtracking steps find no decrease (the objective's rounding floor). Convexity gives
    every pair ``s^T y >= 0``, so Armijo alone keeps the inverse-Hessian model positive
    definite (pairs with ``s^T y ~ 0`` are skipped). The pairs live in two ``m x n`` buffers
    updated in place (BLAS ``axpy``): ~2 ms an iteration at 1.3e5 variables against ~12 ms
    for scipy's L-BFGS-B, a quarter of a float32 evaluation at 5k x 1280 x 102.

    ``memory`` (a dict, filled on return) carries the pairs from one call to the next: a
    related problem (the next fold at the same ridge) starts with their curvature model
    instead of a gradient step. Any pairs with ``s^T y > 0`` keep the model positive definite,
    so they change the path, not the minimizer.
    """
    from scipy.linalg.blas import daxpy, ddot  # lazy, as every scipy import here

    x = np.array(x, dtype=np.float64)
    n = x.size
    if memory is not None and memory.get("S") is not None and memory["S"].shape == (m, n):
        S, Y, rho, order = memory["S"], memory["Y"], memory["rho"], memory["order"]
    else:
        S, Y, rho = np.empty((m, n)), np.empty((m, n)), np.empty(m)
        order: list[int] = []  # slots of the stored pairs, oldest first
    if memory is not None:
        memory.update(S=S, Y=Y, rho=rho, order=order)
    alpha = np.empty(m)
    f, g = fg(x)
    for _ in range(max_iter):
        if float(np.max(np.abs(g), initial=0.0)) <= gtol:
            break
        q = -g
        for i in reversed(order):
            alpha[i] = rho[i] * ddot(S[i], q)
            q = daxpy(Y[i], q, a=-alpha[i])
        if order:
            last = order[-1]
            q *= 1.0 / (rho[last] * ddot(Y[last], Y[last]))
            t = 1.0
        else:  # first step: length <= 1 (the preconditioning makes the start's curvature ~1)
            t = min(1.0, 1.0 / max(float(np.linalg.norm(g)), 1e-300))
        for i in order:
            q = daxpy(S[i], q, a=alpha[i] - rho[i] * ddot(Y[i], q))
        gd = ddot(g, q)
        if not gd < 0:  # rounding made it ascent: restart from the gradient
            order.clear()
            q, gd = -g, -ddot(g, g)
        for _ls in range(30):
            xn = daxpy(q, x.copy(), a=t)
            fn, gn = fg(xn)
            if fn <= f + 1e-4 * t * gd:
                break
            # minimizer of the quadratic through f, gd and fn, kept in [0.1 t, 0.5 t]
            curv = fn - f - gd * t
            t = t * (min(0.5, max(0.1, -gd * t / (2.0 * curv))) if curv > 0 else 0.5)
        else:
            break
        slot = order.pop(0) if len(order) == m else min(set(range(m)).difference(order))
        np.subtract(xn, x, out=S[slot])
        np.subtract(gn, g, out=Y[slot])
        sy = ddot(S[slot], Y[slot])
        if sy > 1e-12 * ddot(Y[slot], Y[slot]):
            rho[slot] = 1.0 / sy
            order.append(slot)
        done = f - fn <= ftol * max(abs(f), abs(fn), 1.0)
        x, f, g = xn, fn, gn
        if done:
            break
    return x


def _precondition(s: np.ndarray, n_classes: int, l2: float) -> np.ndarray:
    """``d_j = (s_j / C + l2)^(-1/2)`` as an ``(r, 1)`` column (see :func:`fit_logistic_spectral`)."""
    return 1.0 / np.sqrt(np.asarray(s, dtype=np.float64) / int(n_classes) + float(l2) + 1e-12)[:, None]


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

    Two phases: L-BFGS (:func:`_lbfgs`) with the products ``Z B`` and ``Z^T E`` in float32
    (about half the cost of float64) down to its rounding floor (:data:`F32_FTOL`), then
    scipy's L-BFGS-B in float64 from there with the stopping rule ``tol`` (and L-BFGS-B's
    default relative-reduction test), which decides the accuracy of the result as before.

    Args:
        Z: ``(N, r)`` spectral coordinates of the training rows (:func:`spectral_rows` of a
            superset of them).
        y: ``(N,)`` labels.
        n_classes: C.
        s: ``(r,)`` second moments per direction (:attr:`SpectralRows.s`).
        l2: ridge ``>= 0`` on the mean loss.
        init: starting ``B`` (``r x C``), default zeros.
        max_iter, tol: stopping rule of each phase (``tol`` on the preconditioned gradient).

    Returns:
        ``B`` of shape ``(r, C)``, float64 (``W = V @ B``).
    """
    from scipy.optimize import minimize  # lazy: ~0.4 s of CPU at import (benchmarks/startup.py)

    Z = np.asarray(Z, dtype=np.float64)
    N, r = Z.shape
    C = int(n_classes)
    if r == 0:  # all rows zero: the ridge alone, minimized at 0
        return np.zeros((0, C))
    y = np.asarray(y)
    d = _precondition(s, C, l2)
    u = np.zeros(r * C) if init is None else (np.asarray(init, dtype=np.float64) / d).ravel()
    u = _lbfgs(_spectral_objective(Z.astype(np.float32), y, C, d, l2), u, max_iter=max_iter, gtol=tol, ftol=F32_FTOL)
    res = minimize(_spectral_objective(Z, y, C, d, l2), u, jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iter, "gtol": tol})
    return d * res.x.reshape(r, C)


class CVResult(NamedTuple):
    """Outcome of :func:`cross_validate_l2`.

    Attributes:
        l2: the selected ridge.
        path: the ridges tried, strong to weak (empty when no CV was possible).
        errors: ``(len(path),)`` fraction of rows misclassified by the fold that held them out.
        init: mean of the fold solutions at the selected ridge, ``(r, C)`` in the spectral
            coordinates of the basis used (``None`` without CV): a warm start for the final
            fit on all rows, which every fold's training set is 1 - 1/k of.
    """

    l2: float
    path: tuple[float, ...]
    errors: np.ndarray
    init: np.ndarray | None


def cross_validate_l2(
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
) -> CVResult:
    """Stratified k-fold cross-validation of the ridge (see :func:`select_l2_cv`).

    Solver: every fold is fitted in the spectral coordinates of ``X`` (:func:`spectral_rows`,
    computed once from the same rows, or passed as ``basis``), with the curvature
    preconditioning of :func:`fit_logistic_spectral`, by the float32 L-BFGS phase alone
    (:func:`_lbfgs`, stopped by ``tol`` on the preconditioned gradient or a relative
    reduction below :data:`CV_FTOL`): the CV reads only the argmax of the validation logits.
    The first fold is warm-started along the ridge path from strong to weak, every later fold
    from the mean of the earlier folds' solutions at the same ridge (each shares (k-2)/(k-1)
    of its training rows with each of them; the mean sits nearer the all-rows solution than
    any one of them) and with the previous fold's L-BFGS pairs at that ridge. The eigenbasis only reparametrizes each fold's problem (its minimizer
    does not depend on it; it reads the validation fold's features, never its labels, and only
    shapes the optimizer's path). ``benchmarks/references.py`` times it against the former
    direct L-BFGS in feature space (docs/results/tuning_notes.md, select_l2_cv solver).
    """
    y = np.asarray(y)
    counts = np.bincount(y, minlength=n_classes)
    k = int(min(folds, counts[counts > 0].min()))
    if k < 2:
        return CVResult(float(grid[len(grid) // 2]), (), np.zeros(0), None)
    rng = np.random.default_rng([seed, 0xC5])
    fold_of = np.empty(len(y), dtype=np.int64)
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        fold_of[idx] = np.arange(len(idx)) % k
    sp = basis if basis is not None else spectral_rows(X)
    Z = np.asarray(sp.Z, dtype=np.float64)
    r, C = Z.shape[1], int(n_classes)
    path = tuple(sorted((float(v) for v in grid), reverse=True))
    wrong = np.zeros(len(path))
    sums = [np.zeros((r, C)) for _ in path]
    memories: list[dict] = [{} for _ in path]  # L-BFGS pairs of the previous fold, per ridge
    for f in range(k):
        tr, va = fold_of != f, fold_of == f
        Z32, ytr, Zva = Z[tr].astype(np.float32), y[tr], Z[va]
        B = np.zeros((r, C))
        for j, l2 in enumerate(path):
            # warm start: fold 0 walks the path, later folds start from the earlier folds' mean
            init = sums[j] / f if f else B
            d = _precondition(sp.s, C, l2)
            u = _lbfgs(_spectral_objective(Z32, ytr, C, d, l2), (init / d).ravel(), max_iter=max_iter,
                       gtol=tol, ftol=CV_FTOL, memory=memories[j])
            B = d * u.reshape(r, C)
            sums[j] += B
            wrong[j] += float(np.sum((Zva @ B).argmax(axis=1) != y[va]))
    errors = wrong / len(y)
    best = float(errors.min())
    j = next(i for i, e in enumerate(errors) if e <= best + 1e-12)  # ties: the stronger ridge
    return CVResult(path[j], path, errors, sums[j] / k)


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
    the larger ``l2`` (simpler model). Solver and warm starts: :func:`cross_validate_l2`,
    which also returns the per-ridge errors and a warm start for the final fit.

    Returns:
        The ``l2`` of ``grid`` with the lowest mean validation error.
    """
    return cross_validate_l2(X, y, n_classes, grid=grid, folds=folds, seed=seed, max_iter=max_iter, tol=tol,
                             basis=basis).l2


#: Ridge path of :func:`select_l2_loo` (mean-loss scale), strong to weak: half-decades from
#: 1 down to 1e-5. The two ends are the two limits of the ridge on unit rows: around
#: ``l2 = 1`` the fit is already in its strong-ridge limit (``W`` proportional to
#: ``X^T (Y - 1/C)``, a nearest-class-sum classifier), and below ``1e-4`` the predictions of
#: (almost) separable few-shot data stop changing (the max-margin limit, see
#: :func:`fit_public`). Contains :data:`PUBLIC_L2` and every value of :data:`L2_GRID`.
L2_PATH = tuple(10.0 ** (-k / 2) for k in range(11))

#: Size bounds of :func:`loo_ridge_path` (``N`` rows, rank ``r``, ``C`` classes, ``k`` rows in
#: the largest class): the approximate leave-one-out keeps ``C`` solves of ``r x r`` systems
#: against ``N`` right-hand sides (``8 C r N`` bytes, at most ~320 MB here, plus per-class
#: temporaries of ``N kC + k^3 C^2`` cells) and costs about
#: ``C (N r^2 + r^3 + N^2 r + N^3) + C^2 N^2 k + N k^3 C^3`` flops per ridge (at most ~3e10
#: here, tens of seconds for the whole path). Above either bound the selection is not
#: attempted and :func:`select_l2_loo` returns its fallback.
LOO_MAX_CELLS = 40_000_000
LOO_MAX_FLOPS = 3e10


def loo_logits_alo(Z: np.ndarray, y: np.ndarray, n_classes: int, B: np.ndarray, l2: float) -> np.ndarray:
    """Approximate class-balanced leave-one-out (ALO) logits of ridge softmax regression.

    ``B`` (``r x C``) minimizes ``F(B) = sum_i CE(z_i B, y_i) + (N l2 / 2) ||B||^2``
    (:func:`fit_logistic_spectral`'s objective times ``N``). For each row ``i`` of a class
    ``c`` with ``k >= 2`` rows, the refit leaves row ``i`` out *and* gives the ``k - 1`` other
    rows of ``c`` the weight ``k / (k - 1)``, so that class ``c`` keeps its total weight.
    Why balanced: the head has no bias, and on few-shot rows that share a large common
    component (post-ReLU features) the strong-ridge solution is close to
    ``W ~ X^T (Y - 1/C)``, which scores a class by the *sum* of its rows; a plain refit
    without row ``i`` halves class ``c``'s sum at 2 shots and misclassifies almost every
    held-out row whatever the ridge (measured: 100 % LOO error at every ridge on
    ``fine_grained_100`` against ~45 % test error). The balanced refit keeps every class's
    weight, so only the held-out row's information is missing.

    The refit's logits are approximated by one Newton step from ``B`` (approximate
    leave-one-out, Rad & Maleki 2020, "A scalable estimate of the out-of-sample prediction
    error via approximate leave-one-out", JRSS-B 82(4), here with ``C x C`` blocks and a
    reweighted group instead of one removed row). Notation: ``eta_a = z_a B``,
    ``p_a = softmax(eta_a)``, ``e_a = p_a - onehot(y_a)``, ``A_a = diag(p_a) - p_a p_a^T``
    (row ``a``'s loss Hessian in its logits), ``J_a = I_C (x) z_a`` (logits -> parameters),
    ``H`` the Hessian of ``F`` at ``B``. The refit objective is ``F + sum_{a in R} w_a l_a``
    with ``R`` the rows of class ``c``, ``w_i = -1`` and ``w_a = 1 / (k - 1)`` otherwise.
    Since ``grad F(B) = 0``, its gradient at ``B`` is ``J_R W e_R`` and its Hessian
    ``H + J_R W A_R J_R^T`` (``W = diag(w) (x) I_C``, ``A_R = blockdiag(A_a)``); the Newton
    step moves the logits of ``R`` by ``-J_R^T (H + J_R W A_R J_R^T)^-1 J_R W e_R`` and,
    with ``K_R = J_R^T H^-1 J_R`` (``kC x kC``) and the Woodbury identity,

    ``eta_-i ~= eta_i - [K_R (I + W A_R K_R)^-1 W e_R]_i``.

    With ``w_a = 0`` for ``a != i`` this is the usual ALO ``eta_i + K_i (I - A_i K_i)^-1 e_i``.
    The refit's rows still weigh ``N`` in total, so the ridge weight ``N l2`` is that of the
    mean-loss ``l2`` on the reweighted rows. Exact for a quadratic loss; for the logistic
    loss the error of one step grows as the ridge weakens and the fit approaches separation
    (tests compare it with exact refits; on development data it under-estimates the LOO
    log-loss at weak ridges, docs/results/only_public_ridge.md).

    ``K_R`` without the ``rC x rC`` Hessian: ``H = blockdiag_c(M_c) - U U^T`` with
    ``M_c = Z^T diag(p_{.c}) Z + N l2 I`` (``r x r``) and ``U`` the ``N`` columns
    ``p_j (x) z_j``; Woodbury once more gives ``J_a^T H^-1 J_b = diag_c(Q_c[a, b]) +
    V_a^T S^-1 V_b`` with ``Q_c = Z M_c^-1 Z^T``, ``S = I_N - sum_c diag(p_{.c}) Q_c
    diag(p_{.c})`` (positive definite because ``H`` is) and ``V_a[j, c] = p_jc Q_c[j, a]``.
    Cost: see :data:`LOO_MAX_FLOPS`; reads only ``Z``, ``y`` and ``B``.

    Args:
        Z: ``(N, r)`` training rows (spectral coordinates, :func:`spectral_rows`).
        y: ``(N,)`` labels.
        n_classes: C.
        B: ``(r, C)`` the minimizer at ridge ``l2``.
        l2: ridge ``> 0`` on the mean loss.

    Returns:
        ``(N, C)`` float64 logits; rows of classes with a single row are NaN (no refit).
    """
    Z = np.asarray(Z, dtype=np.float64)
    N, r = Z.shape
    C = int(n_classes)
    y = np.asarray(y)
    eta = Z @ np.asarray(B, dtype=np.float64)
    E, _ = softmax_residual(eta, y)
    P = E.copy()
    P[np.arange(N), y] += 1.0
    out = np.full((N, C), np.nan)
    groups = [R for R in (np.flatnonzero(y == c) for c in range(C)) if len(R) >= 2]
    if not groups:
        return out
    # One C x N x N buffer of every Q_c when it fits LOO_MAX_CELLS (the groups then read their
    # columns instead of recomputing them), else the C x r x N buffer of M_c^-1 Z^T. M_c^-1 from
    # its Cholesky factor (LAPACK potrf / potri): at r = N = 200 the triangular solves with N
    # right-hand sides ran at a fraction of GEMM speed (measured 1.9x slower for this loop).
    keep_q = C * N * N <= LOO_MAX_CELLS
    store = np.empty((C, N, N) if keep_q else (C, r, N))
    S = np.eye(N)
    ridge = N * float(l2) * np.eye(r)
    for c in range(C):
        ZM = Z @ _spd_inverse((Z * P[:, c, None]).T @ Z + ridge)  # Z M_c^-1 (N x r)
        Qc = ZM @ Z.T
        store[c] = Qc if keep_q else ZM.T
        S -= np.outer(P[:, c], P[:, c]) * Qc
    # S^-1 once (S is positive definite, N x N): every group's K_R then takes two GEMMs instead
    # of a triangular solve with C k right-hand sides (the larger part of a ridge's time at 100+
    # classes, measured)
    S_inv = _spd_inverse(S)
    cls = np.arange(C)
    for R in groups:
        k = len(R)
        Q = store[:, :, R] if keep_q else Z @ store[:, :, R]  # (C, N, k): Q_c[j, a]
        V = (P.T[:, :, None] * Q).transpose(1, 0, 2).reshape(N, C * k)  # [j, (c, a)]
        K = (V.T @ (S_inv @ V)).reshape(C, k, C, k)
        K[cls, :, cls, :] += Q[:, R, :]  # diag_c Q_c[a, b]
        K = K.transpose(1, 0, 3, 2).reshape(k * C, k * C)  # [(a, c), (b, d)]
        p = P[R]
        # A_R = blockdiag_a(A_a): A_R K one C x C block row at a time (k times fewer flops)
        A = p[:, :, None] * (np.eye(C)[None] - p[:, None, :])  # (k, C, C)
        AK = (A @ K.reshape(k, C, k * C)).reshape(k * C, k * C)
        w = np.full((k, k), 1.0 / (k - 1))
        w[np.arange(k), np.arange(k)] = -1.0  # w[i]: weights of the refit without row i
        wv = np.repeat(w, C, axis=1)  # (k, kC)
        lhs = np.eye(k * C)[None] + wv[:, :, None] * AK[None]
        step = np.linalg.solve(lhs, (wv * E[R].ravel()[None])[:, :, None])[:, :, 0]  # (k, kC)
        moved = step @ K.T  # row i: K_R (I + W_i A K)^-1 W_i e_R
        out[R] = eta[R] - moved.reshape(k, k, C)[np.arange(k), np.arange(k)]
    return out


def _spd_inverse(M: np.ndarray) -> np.ndarray:
    """The inverse of a symmetric positive definite matrix from its Cholesky factor."""
    from scipy.linalg.lapack import dpotrf, dpotri

    L, info = dpotrf(M, lower=1, clean=0)
    if info != 0:
        raise np.linalg.LinAlgError(f"matrix not positive definite (potrf info {info})")
    inv, info = dpotri(L, lower=1, overwrite_c=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"potri failed (info {info})")
    return np.tril(inv) + np.tril(inv, -1).T


class LooPath(NamedTuple):
    """Approximate balanced leave-one-out scores along a ridge path (:func:`loo_ridge_path`).

    Attributes:
        path: the ridges, strong to weak.
        log_loss: ``(len(path),)`` mean LOO cross-entropy (nats) of the scored rows.
        error: ``(len(path),)`` fraction of the scored rows whose LOO prediction is wrong.
        scored: ``(n_scored,)`` indices of the scored rows (classes with >= 2 rows).
    """

    path: tuple[float, ...]
    log_loss: np.ndarray
    error: np.ndarray
    scored: np.ndarray


def loo_cost(n_rows: int, rank: int, n_classes: int, per_class: int) -> tuple[float, float]:
    """``(cells, flops)`` of one ridge of :func:`loo_ridge_path` (see :data:`LOO_MAX_FLOPS`)."""
    N, r, C, k = float(n_rows), float(rank), float(n_classes), float(per_class)
    return C * r * N, C * (N * r * r + r ** 3 + N * N * r + N ** 3) + C * C * N * N * k + N * k ** 3 * C ** 3


def _loo_setup(X: np.ndarray, y: np.ndarray, n_classes: int,
               basis: SpectralRows | None) -> tuple[SpectralRows, np.ndarray] | None:
    """``(spectral basis of X, indices of the scored rows)`` for the approximate leave-one-out
    functions: the rows whose class has another row. ``None`` when no row can be scored (every
    class has a single row, or the rows span nothing: all equal) or the problem exceeds :data:`LOO_MAX_CELLS` / :data:`LOO_MAX_FLOPS`."""
    counts = np.bincount(y, minlength=n_classes)
    scored = np.flatnonzero(counts[y] >= 2)
    if len(scored) == 0:
        return None
    sp = basis if basis is not None else spectral_rows(X)
    N, r = sp.Z.shape
    if r == 0:  # every row the same (constant features): nothing to fit, LAPACK refuses a 0×0 inverse
        return None
    cells, flops = loo_cost(N, r, n_classes, int(counts.max()))
    if cells > LOO_MAX_CELLS or flops > LOO_MAX_FLOPS:
        return None
    return sp, scored


def logit_margins(Z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``Z[i, y_i] - max_{c != y_i} Z[i, c]`` per row of the logits ``Z`` (``(N,)``; negative
    where row ``i`` is misclassified). ``Z`` is not modified."""
    y = np.asarray(y)
    idx = np.arange(len(y))
    own = Z[idx, y].copy()
    rest = np.array(Z, copy=True)
    rest[idx, y] = -np.inf
    return own - rest.max(axis=1)


def loo_ridge_path(X: np.ndarray, y: np.ndarray, n_classes: int, *, path: tuple[float, ...] = L2_PATH,
                   basis: SpectralRows | None = None, max_iter: int = 1000, tol: float = 1e-7) -> LooPath | None:
    """Approximate balanced leave-one-out log-loss and error of the ridge fits of ``(X, y)``.

    At each ridge of ``path`` (strong to weak) the full-data fit (:func:`fit_logistic_spectral`,
    warm-started from the previous, stronger ridge's) is followed by :func:`loo_logits_alo`.
    Only rows whose class has another row are scored: without one the refit has never seen
    the class, so the row is wrong at every ridge and says nothing about the choice.

    Returns:
        The scores, or ``None`` when no row can be scored (every class has a single row) or
        the problem exceeds :data:`LOO_MAX_CELLS` / :data:`LOO_MAX_FLOPS`.
    """
    y = np.asarray(y)
    setup = _loo_setup(X, y, n_classes, basis)
    if setup is None:
        return None
    sp, scored = setup
    path = tuple(sorted((float(v) for v in path), reverse=True))
    ll, err = np.zeros(len(path)), np.zeros(len(path))
    B = None
    for j, l2 in enumerate(path):
        B = fit_logistic_spectral(sp.Z, y, n_classes, sp.s, l2=l2, init=B, max_iter=max_iter, tol=tol)
        eta = loo_logits_alo(sp.Z, y, n_classes, B, l2)[scored]
        _, loss = softmax_residual(eta, y[scored])
        ll[j] = float(np.mean(loss))
        err[j] = float(np.mean(eta.argmax(axis=1) != y[scored]))
    return LooPath(path=path, log_loss=ll, error=err, scored=scored)


def loo_margin_scale(X: np.ndarray, y: np.ndarray, n_classes: int, l2: float,
                     basis: SpectralRows | None = None) -> float | None:
    """Median absolute approximate leave-one-out logit margin of the ridge fit of ``(X, y)``.

    The margin of row ``i`` is ``eta_{i,y_i} - max_{c != y_i} eta_{i,c}`` with ``eta_i`` the
    logits of the refit without row ``i`` (:func:`loo_logits_alo`, class-balanced, one Newton
    step), over the rows whose class has another row. Why: the fit's own margins on its
    few-shot training rows are those of a (nearly) separating solution and overstate the
    margins that unseen rows of the same classes get: measured 4–24 times the test rows' median
    |margin| on the regime family, where this estimate came within a factor 0.6–1.7 of it
    (docs/results/tuning_notes.md, "The start's margin"). Reads ``(X, y)`` only (public rows):
    no privacy cost. Returns ``None`` where no row can be scored (1 shot) or the problem is
    beyond :data:`LOO_MAX_CELLS` / :data:`LOO_MAX_FLOPS`.
    """
    y = np.asarray(y)
    loo = loo_public_logits(X, y, n_classes, l2, basis)
    if loo is None:
        return None
    eta, scored = loo
    return float(np.median(np.abs(logit_margins(eta, y[scored]))))


def loo_public_logits(X: np.ndarray, y: np.ndarray, n_classes: int, l2: float,
                       basis: SpectralRows | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """``(logits, scored)``: the approximate class-balanced leave-one-out logits
    (:func:`loo_logits_alo`) of the ridge fit of ``(X, y)`` (the public solution of
    :func:`fit_public` at ridge ``l2``) on the rows ``scored``, those whose class has another row.
    The logits each row would get from the public model fitted without it: what an unseen row
    of its class gets, where the fit's own logits on its few-shot training rows are those of a
    (nearly) separating solution. Reads ``(X, y)`` only (public rows): no privacy cost.
    ``None`` where no row can be scored (1 shot) or the problem is beyond
    :data:`LOO_MAX_CELLS` / :data:`LOO_MAX_FLOPS`."""
    y = np.asarray(y)
    setup = _loo_setup(X, y, n_classes, basis)
    if setup is None:
        return None
    sp, scored = setup
    B = fit_logistic_spectral(sp.Z, y, n_classes, sp.s, l2=float(l2))
    return loo_logits_alo(sp.Z, y, n_classes, B, float(l2))[scored], scored


def select_l2_loo(X: np.ndarray, y: np.ndarray, n_classes: int, *, path: tuple[float, ...] = L2_PATH,
                  fallback: float = ONE_SHOT_L2, basis: SpectralRows | None = None) -> float:
    """The ridge of ``path`` with the lowest approximate balanced leave-one-out log-loss.

    For few-shot rows (the ``only_public`` reference: public rows only, so the choice costs
    no privacy). Unlike k-fold CV it works with 2 rows per class: each row is predicted by
    the refit on all other rows (:func:`loo_logits_alo`, one Newton step, class weight kept),
    so the held-out model differs from the final one by one row. Scored by log-loss, not
    error: with a few hundred scored rows the error moves in coarse steps and ties over
    most of the path, and the one-step approximation's logits are smooth where its argmax is
    not. Ties go to the larger ridge.

    Contract: reads ``(X, y)`` only; deterministic; returns a value of ``path``, or
    ``fallback`` when no row can be scored (every class has a single row: a 1-shot set
    gives no held-out evidence at all) or the set is beyond the size bounds of
    :func:`loo_ridge_path`.
    """
    res = loo_ridge_path(X, y, n_classes, path=path, basis=basis)
    if res is None:
        return float(fallback)
    best = float(res.log_loss.min())
    return float(next(l2 for l2, v in zip(res.path, res.log_loss) if v <= best + 1e-12))


def error_rate(X: np.ndarray, y: np.ndarray, W: np.ndarray) -> float:
    """Fraction of rows of normalized ``X`` misclassified by ``W``."""
    return float(np.mean((X @ W).argmax(axis=1) != y))
