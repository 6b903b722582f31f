"""The private release as it was before the fused in-place kernel (commit 3902d5c), kept only so
``benchmarks/train.py`` can time before and after side by side in one process. Not used by the
library."""

from __future__ import annotations

from typing import Optional

import numpy as np

from mixdp_core.methods._linear import row_norms, softmax_residual
from mixdp_core.methods.adamix.projection import ProjectionBasis


def private_release_v0(
    X: np.ndarray,
    y: np.ndarray,
    W: np.ndarray,
    tau: float,
    basis: Optional[ProjectionBasis],
    *,
    noise: Optional[np.ndarray] = None,
    x_norm: Optional[np.ndarray] = None,
    XB: Optional[np.ndarray] = None,
    X_Qp: Optional[np.ndarray] = None,
    block_rows: int = 1024,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Gaussian-mechanism release of AdaMix / NoisyGD, back-projected to ``(D, C)``.

    Computes ``U U^T (sum_i clip_tau(g_i) + noise)`` (``U = I`` when ``basis`` is None), which
    is a post-processing of ``U^T sum_i clip_tau(g_i) + U^T noise``; with
    ``noise ~ N(0, sigma^2 tau^2 I_{D x C})``, ``U^T noise ~ N(0, sigma^2 tau^2 I_{k x C})``.
    Sensitivity of ``U^T sum_i clip_tau(g_i)`` under add/remove of one row: ``tau``.

    Per-sample quantities are closed-form: ``||g_i|| = ||x_i|| ||p_i - y_i||`` and
    ``||U^T clip(g_i)|| = c_i ||U^T x_i|| ||p_i - y_i||``; the only products with ``X`` are
    ``X [W | U_r]`` and ``(c E)^T X``, done block by block of rows.

    Args:
        X, y: normalized private rows and labels.
        W: ``(D, C)`` current weights.
        tau: clip threshold > 0.
        basis: projection, or None.
        noise: ``(D, C)`` noise already scaled by ``sigma * tau`` (None = no noise, for tests).
        x_norm: cached ``||x_i||``.
        XB: cached ``X @ basis.B`` (``complement`` mode); computed if missing.
        X_Qp: cached ``X @ Q_p`` (``N x n_pub``); with ``basis.coef`` it gives ``X U_r``
            without an extra product with ``X``.
        block_rows: rows of ``X`` processed together (forward and backward per block).

    Returns:
        ``(released, ratio, loss)``: the back-projected noisy sum ``(D, C)``, ``r_i =
        ||U^T clip(g_i)|| / tau`` (``(N,)``, ``<= 1``) and per-sample losses.
    """
    N = X.shape[0]
    C = W.shape[1]
    if x_norm is None:
        x_norm = row_norms(X)
    U_r = basis.U if basis is not None else None
    via_qp = basis is not None and basis.coef is not None and X_Qp is not None and U_r.shape[1] > 0
    fused = np.concatenate([W, U_r], axis=1) if U_r is not None and U_r.shape[1] > 0 and not via_qp else W
    if basis is not None and basis.mode == "complement":
        if XB is None:
            XB = X @ basis.B
        M = np.linalg.inv(basis.R)  # (m, m); X Q = (X B - (X U_r)(U_r^T B)) R^{-1}
        M32 = M.astype(np.float32)
        UBM = (basis.U.T.astype(np.float64) @ basis.B.astype(np.float64) @ M).astype(np.float32)
    S_T = np.zeros((C, X.shape[1]), dtype=np.result_type(X.dtype, np.float32))  # (sum of clipped g_i)^T
    ratio = np.empty(N)
    loss = np.empty(N)
    # Row blocks keep each block of X in cache between the forward and the backward product
    # (one pass over X per step instead of two; benchmarks/train.py measures the gain).
    for a in range(0, N, max(1, int(block_rows))):
        sl = slice(a, min(N, a + int(block_rows)))
        Xb = X[sl]
        Z = Xb @ fused
        logits, XU = (Z[:, :C], Z[:, C:]) if fused is not W else (Z, None)
        if via_qp:
            XU = X_Qp[sl] @ basis.coef
        E, loss[sl] = softmax_residual(logits, y[sl])
        e_norm = np.sqrt(np.einsum("ij,ij->i", E, E, dtype=np.float64))
        g_norm = x_norm[sl] * e_norm
        c = np.where(g_norm > tau, tau / np.where(g_norm > 0, g_norm, 1.0), 1.0)
        S_T += (E * c[:, None].astype(E.dtype)).T @ Xb
        if basis is None:
            proj_norm = x_norm[sl]
        elif basis.mode == "sub":
            proj_norm = row_norms(XU)
        else:
            XQ = XB[sl] @ M32
            if XU is not None:
                XQ -= XU @ UBM
            proj_norm = np.sqrt(np.maximum(x_norm[sl] ** 2 - np.einsum("ij,ij->i", XQ, XQ, dtype=np.float64), 0.0))
        ratio[sl] = np.minimum(c * proj_norm * e_norm / tau, 1.0)
    S = S_T.T
    noisy = S if noise is None else S + noise
    if basis is not None:
        noisy = basis.project(noisy)
    return noisy, ratio, loss

