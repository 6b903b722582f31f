"""Fused numba kernel of the private release (key ``"numba"``, registered where numba is installed).

Each row of a C-contiguous float32 ``X`` is read once per step for the logits, the softmax
residual, the clip factor and the clipped sum (:func:`.numba_jit.clipped_sum`); the per-instance
DP ratios are completed here from cached products (``||U^T x_i||`` without a product with
``X``). Supported: no projection, or a projection whose ``X U_r`` comes from the cached
``X Q_p`` (``ValueError`` otherwise: the numpy kernel handles those). numba itself is imported
only when this kernel first runs (:func:`available`), never when the package is imported.
"""

from __future__ import annotations

import importlib.util
from typing import Optional

import numpy as np

from ..._linear import row_norms
from ..projection import DerivedCache, ProjectionBasis, b_gram
from .base import ReleaseKernel, register
from .numpy_backend import block_rows_for
from .pools import side_by_side, thread_pool


def available() -> bool:
    """Whether the fused kernel can run (imports numba on the first call: large problems only)."""
    from . import numba_jit

    return numba_jit.available()


def supports(X: np.ndarray, basis: Optional[ProjectionBasis], X_Qp: Optional[np.ndarray]) -> bool:
    """Whether the kernel computes this case (float32 ``X``; ``X U_r`` needs no product with
    ``X``: no projection directions, or the cached ``X_Qp`` with ``basis.coef``). Imports nothing."""
    has_ur = basis is not None and basis.U.shape[1] > 0
    via_qp = has_ur and basis.coef is not None and X_Qp is not None
    ft = np.result_type(X.dtype, np.float32)
    return ft == np.float32 and X.dtype == np.float32 and (not has_ur or via_qp)


_BASES = DerivedCache()


def complement_base(XB: np.ndarray, B: np.ndarray, x_norm: np.ndarray) -> np.ndarray:
    """``(N,)`` float64 ``||x_i||^2 - ||P_B x_i||^2`` (``P_B`` the orthogonal projector on
    ``span B``, ``||P_B x||^2 = b^T (B^T B)^{-1} b`` with ``b = B^T x`` the cached row of ``X B``).

    Fixed for a run (``B`` is): computed once per ``(X B, B, x_norm)`` triple and kept while the
    three arrays live (none may change in place); the per-step part is in
    :func:`complement_maps`.
    """

    def compute():
        L = np.linalg.cholesky(b_gram(B)[2])  # H = (B^T B)^{-1} = L L^T: b^T H b = ||L^T b||^2
        base = np.square(np.asarray(x_norm, dtype=np.float64))
        for a in range(0, XB.shape[0], 8192):
            Y = np.asarray(XB[a:a + 8192], dtype=np.float64) @ L
            base[a:a + 8192] -= np.einsum("ij,ij->i", Y, Y)
        return base

    return _BASES.get((XB, B, x_norm), compute)


def complement_maps(basis: ProjectionBasis, n_pub: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-step ``(M_1^T, M_2^T)`` (float32) with ``||U^T x||^2 = base - ||a M_1||^2 + ||q M_2||^2``
    for the row ``a = [b | q] = [B^T x | Q_p^T x]`` of the cached ``[X B | X Q_p]``.

    Why (``complement`` basis, ``U U^T = I - Q Q^T``): ``span [U_r, B] = span U_r (+) span Q``
    (orthogonal sum) ``= span B (+) span Z`` with ``Z`` the orthonormalized ``(I - P_B) U_r``, so

        ``||Q^T x||^2 = ||P_B x||^2 + ||Z^T x||^2 - ||U_r^T x||^2``.

    With ``K = B^T U_r``, ``H = (B^T B)^{-1}``, ``S = I_r - K^T H K = L L^T`` (Cholesky):
    ``Z = (I - P_B) U_r L^{-T}``, ``Z^T x = L^{-1} (u - K^T H b)`` with ``u = U_r^T x =
    coef^T q``, i.e. ``Z^T x = a M_1``, ``M_1 = [-H K ; coef] L^{-T}`` (``(m + n_pub) x r``), and
    ``U_r^T x = q M_2``, ``M_2 = coef``. Per row ``r (m + 2 n_pub)`` multiply-adds (1,170 at
    r = 9, m = 30, n_pub = 50) instead of ``m (m + n_pub)`` (2,400) for ``Q^T x`` itself; ``||P_B x||^2``
    is fixed for the run (:func:`complement_base`).
    """
    _, _, H = b_gram(basis.B)
    m = basis.B.shape[1]
    r = basis.U.shape[1] if n_pub else 0
    if r == 0:  # U_r empty (no public directions): ||Q^T x||^2 = ||P_B x||^2
        return np.zeros((0, m + n_pub), np.float32), np.zeros((0, n_pub), np.float32)
    K = basis.BtU if basis.BtU is not None else b_gram(basis.B)[0].T @ basis.U.astype(np.float64)
    HK = H @ K
    L = np.linalg.cholesky(np.eye(r) - K.T @ HK)
    coef = basis.coef.astype(np.float64)
    M1T = np.linalg.solve(L, np.concatenate([-HK, coef], axis=0).T)  # L^{-1} [-H K ; coef]^T
    return np.ascontiguousarray(M1T, dtype=np.float32), np.ascontiguousarray(coef.T, dtype=np.float32)


def fused_clipped_sum(X, y, W, x_norm, tau, ce_out, loss_out, threads, logit_offset=None, resid_out=None) -> np.ndarray:
    """``(C, D)`` float64 ``sum_i c_i (p_i - y_i) x_i^T`` by the fused kernel; fills ``ce_out``
    with ``c_i ||p_i - y_i||`` and ``loss_out``. ``threads`` > 1: contiguous row ranges (the
    kernel releases the GIL), partial sums added in order. ``logit_offset``: ``(C,)`` ``b`` of
    ``p_i = softmax(x_i W + b)`` (None = 0)."""
    from . import numba_jit

    N, D = X.shape
    Xc = np.ascontiguousarray(X, dtype=np.float32)
    yc = np.ascontiguousarray(y, dtype=np.int64)
    VT = numba_jit.shifted_weights(W)  # (C - 1, D): logits relative to the last class
    xn = np.ascontiguousarray(x_norm, dtype=np.float64)
    C = VT.shape[0] + 1
    # the offsets relative to the last class, like the logits (that class's logit is 0)
    b = np.zeros(C, np.float64) if logit_offset is None else np.asarray(logit_offset, dtype=np.float64)
    off = np.ascontiguousarray(b[:-1] - b[-1], dtype=np.float32)
    # (N, C) clipped residuals c_i (p_i - y_i) where asked (float64, written row by row), else a
    # (0, C) placeholder the kernel skips
    E = resid_out if resid_out is not None else np.empty((0, C))

    def part(lo: int, hi: int) -> np.ndarray:
        S = np.zeros((C, D))
        numba_jit.clipped_sum(Xc, yc, VT, xn, float(tau), lo, hi, S, ce_out, loss_out, off, E)
        return S

    n_threads = max(1, min(int(threads or 1), -(-N // 4096)))
    if n_threads == 1:
        return part(0, N)
    per = ((N + n_threads - 1) // n_threads + 3) // 4 * 4  # whole groups of 4 rows per thread
    bounds = [(lo, min(N, lo + per)) for lo in range(0, N, per)]
    parts = list(thread_pool(len(bounds)).map(lambda lh: part(*lh), bounds))
    S = parts[0]
    for P in parts[1:]:
        S += P
    return S


class NumbaKernel(ReleaseKernel):
    """:meth:`~.base.ReleaseKernel.clipped_sum` by the fused one-pass numba kernel.

    Raises:
        ValueError: the case is not :func:`supported <supports>` or numba cannot be imported.
    """

    name = "numba"

    def clipped_sum(self, X, y, W, tau, basis, *, x_norm=None, XB=None, X_Qp=None, block_rows=None, threads=None,
                    ratio_out=None, loss_out=None, logit_offset=None, resid_out=None):
        if not (supports(X, basis, X_Qp) and available()):
            raise ValueError("fused kernel: needs numba, float32 X and no projection or a cached X_Qp")
        from . import numba_jit

        N, D = X.shape
        ft = np.float32
        b = block_rows_for(N, D, ft, block_rows)
        tau = float(tau)
        if x_norm is None:
            x_norm = row_norms(X)
        Wf = np.asarray(W, dtype=ft)
        has_ur = basis is not None and basis.U.shape[1] > 0
        via_qp = has_ur and basis.coef is not None and X_Qp is not None
        complement = basis is not None and basis.mode == "complement"
        ratio = ratio_out if ratio_out is not None else np.empty(N)
        loss = loss_out if loss_out is not None else np.empty(N)
        x_norm = np.asarray(x_norm, dtype=np.float64)
        y = np.asarray(y)
        if complement and XB is None:
            XB = X @ basis.B
        ST = fused_clipped_sum(X, y, Wf, x_norm, tau, ratio, loss, threads, logit_offset, resid_out)
        # ratio holds c_i ||p_i - y_i|| -> r_i = c_i ||U^T x_i|| ||p_i - y_i|| / tau, block by block
        if basis is not None and (complement or via_qp):
            if complement:  # ||U^T x||^2 from [X B | X Q_p] and low-rank maps (see complement_maps)
                base = complement_base(XB, basis.B, x_norm)
                A = side_by_side(XB, X_Qp, np.float32) if via_qp else np.ascontiguousarray(XB, dtype=np.float32)
                M1T, M2T = complement_maps(basis, X_Qp.shape[1] if via_qp else 0)
                m_cols = XB.shape[1]
            else:  # ||U^T x||^2 = ||(X Q_p) coef||^2
                A = np.ascontiguousarray(X_Qp, dtype=np.float32)
                MT = np.ascontiguousarray(basis.coef.astype(np.float32).T)
        pb = max(b, 4096)
        sq_all = np.empty(min(pb, N))  # block-sized: no per-step (N,) temporary
        for a in range(0, N, pb):
            sl = slice(a, min(N, a + pb))
            if basis is None:
                pn = x_norm[sl]  # ||U^T x_i|| = ||x_i||
            elif complement or via_qp:
                pn = sq_all[: sl.stop - sl.start]
                if complement:
                    numba_jit.sq_norms_lowrank(A, M1T, m_cols, M2T, base, sl.start, sl.stop, pn)
                else:
                    numba_jit.row_sq_norms(A, MT, sl.start, sl.stop, pn)
                np.sqrt(pn, out=pn)
            else:  # a basis without directions: U^T x = 0
                pn = np.zeros(sl.stop - sl.start)
            rb = ratio[sl]
            np.multiply(rb, pn, out=rb)
            np.divide(rb, tau, out=rb)
            np.minimum(rb, 1.0, out=rb)
        return ST.T.astype(ft), ratio, loss


if importlib.util.find_spec("numba") is not None:  # "numba where installed": find_spec imports nothing
    register(NumbaKernel())
