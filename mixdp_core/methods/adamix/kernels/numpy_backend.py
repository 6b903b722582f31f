"""Blocked numpy kernel of the private release (key ``"numpy"``; any float dtype, every projection).

The per-sample quantities are closed-form: ``||g_i|| = ||x_i|| ||p_i - y_i||`` and
``||U^T clip(g_i)|| = c_i ||U^T x_i|| ||p_i - y_i||``; the only products with ``X`` are
``X [W | U_r]`` and ``(c E)^T X``. They are done block by block of rows, the backward product
right after the forward one, so each block of ``X`` is read from memory once per step (one
pass over ``X``); the softmax, clip factors and projection norms work in place in block-sized
buffers (:class:`~.pools.ReleaseWorkspace`, cached per thread and reused across steps).
Computation is in ``X``'s floating dtype (float32 for float32 features); the per-sample
squared norms are summed in that dtype, their square roots, the clip factors and ``ratio``
are float64. With ``complement`` bases ``||U^T x||^2 = ||x||^2 - ||Q^T x||^2`` with
``X Q = (X B - (X U_r)(U_r^T B)) R^{-1}`` (:mod:`..projection`).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..._linear import row_norms
from .base import ReleaseKernel, register
from .pools import release_workspace, side_by_side, thread_pool

#: Rows of ``X`` per block of the numpy kernel: the block must stay in cache between
#: the forward and the backward product, and be large enough that the per-block numpy calls
#: are amortized. Measured (``benchmarks/train.py``, key ``release_over_stream_by_block_rows``;
#: 50,000 x 1,280, C = 10, 1 thread, medians of 15 interleaved rounds): 128: 5.85x,
#: 256: 5.09x, 384: 4.85x, 512: 5.27x, 768: 5.08x, 1024: 4.97x, 2048: 5.30x, 4096: 5.33x the
#: streaming pass; 256-1024 are within the noise of a shared machine, 128 and >= 2048 worse.
DEFAULT_BLOCK_ROWS = 384

#: Without ``block_rows``, an ``X`` of at most this many bytes is processed as one block: at
#: 2 MiB the block and its temporaries stay within a core's cache, so blocking has nothing to
#: save (digits, 0.5 MiB, is one block). Speed only: every block size gives the same release up to
#: float rounding (~1e-6 relative), which is why a private run sizes it from its released count
#: (:class:`.cpu.CpuKernel`'s ``size_hint``), never from the exact one.
SINGLE_BLOCK_BYTES = 2 << 20


def block_rows_for(N: int, D: int, dtype: Any, block_rows: Optional[int]) -> int:
    """Rows per block: ``block_rows``, else all of a small ``X`` (at most
    :data:`SINGLE_BLOCK_BYTES`: fewer numpy calls, it fits in cache anyway), else
    :data:`DEFAULT_BLOCK_ROWS`; within ``[1, max(N, 1)]``."""
    if block_rows is None:
        block_rows = N if N * D * np.dtype(dtype).itemsize <= SINGLE_BLOCK_BYTES else DEFAULT_BLOCK_ROWS
    return min(max(1, int(block_rows)), max(N, 1))


class NumpyKernel(ReleaseKernel):
    """:meth:`~.base.ReleaseKernel.clipped_sum` in blocked numpy. ``threads > 1``: contiguous
    ranges of whole blocks, each with its own buffers and partial sum, added in order (equal
    to the 1-thread result up to float rounding of the partial sums; run BLAS single-threaded
    meanwhile)."""

    name = "numpy"

    def clipped_sum(self, X, y, W, tau, basis, *, x_norm=None, XB=None, X_Qp=None, block_rows=None, threads=None,
                    ratio_out=None, loss_out=None, logit_offset=None, resid_out=None):
        N, D = X.shape
        C = W.shape[1]
        ft = np.result_type(X.dtype, np.float32)
        off = None if logit_offset is None else np.asarray(logit_offset, dtype=ft).reshape(C, 1)
        b = block_rows_for(N, D, ft, block_rows)
        tau = float(tau)
        if x_norm is None:
            x_norm = row_norms(X)
        Wf = np.asarray(W, dtype=ft)
        U_r = basis.U if basis is not None else None
        has_ur = U_r is not None and U_r.shape[1] > 0
        via_qp = has_ur and basis.coef is not None and X_Qp is not None
        rhs = np.concatenate([Wf, U_r.astype(ft)], axis=1) if has_ur and not via_qp else Wf
        # column-major right operand: OpenBLAS runs X_b @ W a little faster (2-12 % measured)
        rhs = np.asfortranarray(rhs)
        n_cols = rhs.shape[1]
        complement = basis is not None and basis.mode == "complement"
        r = U_r.shape[1] if via_qp else 0
        ratio = ratio_out if ratio_out is not None else np.empty(N)
        loss = loss_out if loss_out is not None else np.empty(N)
        x_norm = np.asarray(x_norm, dtype=np.float64)
        y = np.asarray(y)
        if complement and XB is None:
            XB = X @ basis.B

        m = 0
        if complement:
            m = basis.B.shape[1]
            M = np.linalg.inv(basis.R)  # (m, m); X Q = (X B - (X U_r)(U_r^T B)) R^{-1}
            M_f = M.astype(ft)
            UBM = (basis.U.T.astype(np.float64) @ basis.B.astype(np.float64) @ M).astype(ft)  # (r, m)
        if via_qp:
            coef = basis.coef.astype(ft)
            if complement:
                # X Q = [X B | X Q_p] [[R^-1], [-coef U_r^T B R^-1]]: one product per block with a
                # cached (N, m + n_pub) side by side copy of the two cached matrices
                coef_UBM = coef.astype(np.float64) @ UBM.astype(np.float64)  # (n_pub, m)
                M_cat = np.concatenate([M, -coef_UBM], axis=0).astype(ft)
                XB_Qp = side_by_side(XB, X_Qp, ft)

        def rows(lo: int, hi: int) -> np.ndarray:
            """(sum over rows lo..hi-1 of clipped g_i)^T; fills ratio/loss there."""
            ws = release_workspace(b, n_cols, C, D, ft, m, r)  # this thread's buffers
            ST = np.zeros((C, D), dtype=ft)
            with np.errstate(divide="ignore"):
                for a in range(lo, hi, b):
                    nb = min(b, hi - a)
                    sl = slice(a, a + nb)
                    Xb = X[sl]
                    Z = ws.Z[:nb]
                    np.matmul(Xb, rhs, out=Z)  # forward: reads the block of X (from memory)
                    ETp = ws.ET[: ws.Cp * nb].reshape(ws.Cp, nb)
                    ET = ETp[:C]
                    ETp[C:] = 0.0
                    np.copyto(ET, Z[:, :C].T)
                    if off is not None:
                        np.add(ET, off, out=ET)  # logits x_i W + b
                    # --- softmax residual, in place: E = softmax(logits) - onehot(y) ---
                    mx, s, zy = ws.rowmax[:nb], ws.rowsum[:nb], ws.z_y[:nb]
                    np.maximum.reduce(ET, axis=0, out=mx)
                    np.subtract(ET, mx, out=ET)
                    flat = ws.flat[:nb]
                    np.multiply(y[sl], nb, out=flat)
                    np.add(flat, ws.cols[:nb], out=flat)
                    Ef = ET.reshape(-1)
                    np.take(Ef, flat, out=zy)
                    np.exp(ET, out=ET)
                    np.add.reduce(ET, axis=0, out=s)
                    lb = loss[sl]
                    np.log(s, out=lb)
                    np.subtract(lb, zy, out=lb)  # -log p_y = log sum exp(z - max) - (z_y - max)
                    np.divide(ET, s, out=ET)
                    Ef[flat] -= 1.0
                    # --- per-sample clip factors c_i = min(1, tau / (||x_i|| ||e_i||)) ---
                    en, g, c = ws.e_norm[:nb], ws.g_norm[:nb], ws.clip[:nb]
                    if ft == np.float64:
                        np.einsum("ji,ji->i", ET, ET, out=en)
                    else:  # float32 sum of C squares (a few ulp), then float64
                        np.einsum("ji,ji->i", ET, ET, out=ws.sq_f[:nb])
                        en[...] = ws.sq_f[:nb]
                    np.sqrt(en, out=en)
                    np.multiply(x_norm[sl], en, out=g)
                    np.divide(tau, g, out=c)
                    np.minimum(c, 1.0, out=c)
                    cf = ws.clip_f[:nb]
                    cf[...] = c
                    np.multiply(ET, cf, out=ET)
                    if resid_out is not None:
                        resid_out[sl] = ET.T  # c_i (p_i - y_i), before the block leaves the cache
                    # --- backward: (c E)^T X_b while X_b is still in cache ---
                    np.matmul(ETp, Xb, out=ws.ST_block)
                    np.add(ST, ws.ST_block[:C], out=ST)
                    # --- r_i = c_i ||U^T x_i|| ||e_i|| / tau ---
                    rb = ratio[sl]
                    if basis is None:
                        np.multiply(c, g, out=rb)  # ||U^T x_i|| = ||x_i||
                    else:
                        pn = ws.proj[:nb]
                        if via_qp and not complement:
                            XU = ws.XU[:nb]
                            np.matmul(X_Qp[sl], coef, out=XU)
                        elif not via_qp:
                            XU = Z[:, C:]
                        if not complement:
                            if ft == np.float64:
                                np.einsum("ij,ij->i", XU, XU, out=pn)
                            else:
                                np.einsum("ij,ij->i", XU, XU, out=ws.sq_f[:nb])
                                pn[...] = ws.sq_f[:nb]
                        else:  # ||U^T x||^2 = ||x||^2 - ||Q^T x||^2
                            XQ = ws.XQ[:nb]
                            if via_qp:
                                np.matmul(XB_Qp[sl], M_cat, out=XQ)
                            else:
                                np.matmul(XB[sl], M_f, out=XQ)
                            if not via_qp and XU.shape[1] > 0:
                                np.matmul(XU, UBM, out=ws.XQ2[:nb])
                                np.subtract(XQ, ws.XQ2[:nb], out=XQ)
                            t = ws.tmp[:nb]
                            if ft == np.float64:
                                np.einsum("ij,ij->i", XQ, XQ, out=t)
                            else:
                                np.einsum("ij,ij->i", XQ, XQ, out=ws.sq_f[:nb])
                                t[...] = ws.sq_f[:nb]
                            np.square(x_norm[sl], out=pn)
                            np.subtract(pn, t, out=pn)
                            np.maximum(pn, 0.0, out=pn)
                        np.sqrt(pn, out=pn)
                        np.multiply(c, pn, out=rb)
                        np.multiply(rb, en, out=rb)
                    np.divide(rb, tau, out=rb)
                    np.minimum(rb, 1.0, out=rb)
            return ST

        n_threads = max(1, min(int(threads or 1), -(-N // b)))
        if n_threads == 1:
            ST = rows(0, N)
        else:  # contiguous row ranges (whole blocks) per thread; partial sums added in order
            per = -(-(-(-N // b)) // n_threads) * b
            bounds = [(lo, min(N, lo + per)) for lo in range(0, N, per)]
            parts = list(thread_pool(len(bounds)).map(lambda lh: rows(*lh), bounds))
            ST = parts[0]
            for P in parts[1:]:
                ST += P
        return ST.T, ratio, loss


register(NumpyKernel())
