"""The release-kernel interface (:class:`ReleaseKernel`) and the registry of backends (:data:`KERNELS`).

A kernel computes the part of one NoisyGD / AdaMix step that reads the private rows: the
clipped gradient sum and two per-sample diagnostics. It adds no noise and applies no
projection: :func:`mixdp_core.methods.adamix.engine.private_release` does both, the same way
for every backend, so the mechanism, its sensitivity and the accounting never depend on
which kernel ran.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Optional

import numpy as np

from ....registry import Registry


class ReleaseKernel(ABC):
    """One backend of the private release (numpy, numba, torch on the CPU or on CUDA).

    Attributes:
        name: the key in :data:`KERNELS`.

    Every backend computes the same quantities (to float rounding; each backend is
    deterministic for a given input, thread count and block size).
    """

    name: str = ""

    @abstractmethod
    def clipped_sum(
        self,
        X: np.ndarray,
        y: np.ndarray,
        W: np.ndarray,
        tau: float,
        basis: Any,
        *,
        x_norm: Optional[np.ndarray] = None,
        XB: Optional[np.ndarray] = None,
        X_Qp: Optional[np.ndarray] = None,
        block_rows: Optional[int] = None,
        threads: Optional[int] = None,
        ratio_out: Optional[np.ndarray] = None,
        loss_out: Optional[np.ndarray] = None,
        logit_offset: Optional[np.ndarray] = None,
        resid_out: Optional[np.ndarray] = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The clipped per-sample gradient sum of the linear softmax head, and per-sample data.

        With ``g_i = x_i (p_i - y_i)^T`` (``p_i = softmax(x_i W + b)``, ``b`` the fixed
        ``logit_offset``, 0 by default) and
        ``c_i = min(1, tau / ||g_i||_F)``, ``||g_i||_F = ||x_i|| ||p_i - y_i||``:

        * ``S = sum_i c_i g_i``, ``(D, C)`` in ``X``'s floating dtype (float32 for float32
          features). Under add/remove of one row ``S`` changes by one term of Frobenius norm
          ``<= tau``: its L2 sensitivity is ``tau``. ``S`` is *not* private by itself; the
          caller releases ``U U^T (S + noise)`` with noise ``N(0, sigma^2 tau^2)`` per
          coordinate.
        * ``ratio_i = min(1, c_i ||U^T x_i|| ||p_i - y_i|| / tau)`` (``(N,)`` float64, ``<= 1``):
          the per-instance DP ratio ``||U^T clip(g_i)|| / tau`` (``U = I`` without ``basis``).
        * ``loss_i = -log p_{i, y_i}`` (``(N,)`` float64).

        Args:
            X, y: ``(N, D)`` normalized private rows and their ``(N,)`` integer labels.
            W: ``(D, C)`` current weights.
            tau: clip threshold, > 0 (the caller computes it from public data only).
            basis: the projection (:class:`~..projection.ProjectionBasis`) or None; only
                ``||U^T x_i||`` (the ratio) and the fused product ``X U_r`` read it.
            x_norm: cached ``(N,)`` ``||x_i||`` (computed if None).
            XB: cached ``X @ basis.B`` (``complement`` bases; computed if None).
            X_Qp: cached ``X @ Q_p`` (``N x n_pub``); with ``basis.coef`` it gives ``X U_r``
                without a product with ``X``.
            block_rows: rows of ``X`` per block (backend-specific default).
            threads: worker threads (CPU backends; default 1).
            ratio_out, loss_out: optional ``(N,)`` float64 arrays that receive ``ratio`` and
                ``loss`` (and are returned).
            logit_offset: ``(C,)`` fixed per-class offset ``b`` added to every row's logits
                (the logit-adjusted loss; None = 0). ``b`` does not depend on the row, so
                ``||g_i||_F = ||x_i|| ||p_i - y_i|| <= sqrt(2) ||x_i||`` still and the clip and
                the sensitivity ``tau`` are unchanged.
            resid_out: optional ``(N, C)`` float64 array that receives the clipped residuals
                ``c_i (p_i - y_i)`` (owner's view: the engine's own-pull tracking for the guard's
                leave-one-out count; nothing released depends on it).

        Returns:
            ``(S, ratio, loss)``.
        """


#: Backend name -> kernel instance. Unknown names raise
#: :class:`~mixdp_core.errors.UnknownNameError` listing the registered ones.
KERNELS: Registry[ReleaseKernel] = Registry("release kernel")


def register(kernel: ReleaseKernel) -> ReleaseKernel:
    """Add ``kernel`` to :data:`KERNELS` under ``kernel.name``."""
    return KERNELS.add(kernel.name, kernel)


def get_kernel(kernel: str | ReleaseKernel) -> ReleaseKernel:
    """The kernel named ``kernel`` (a :class:`ReleaseKernel` is returned as it is).

    Raises:
        UnknownNameError: no backend of that name; the message lists the registered ones.
    """
    return kernel if isinstance(kernel, ReleaseKernel) else KERNELS.get(kernel)
