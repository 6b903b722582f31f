"""The CPU release (key ``"cpu"``, what ``device="cpu"`` runs): numpy, or numba where it pays.

At every call :class:`CpuKernel` picks the fused numba kernel (:mod:`.numba_backend`) for a
C-contiguous float32 ``X`` of at least :data:`FUSED_MIN_BYTES` whose case the kernel supports,
and the numpy kernel (:mod:`.numpy_backend`) otherwise. Both compute the same quantity, so the
choice changes only the time a step takes.
"""

from __future__ import annotations

from . import numba_backend
from .numpy_backend import DEFAULT_BLOCK_ROWS, SINGLE_BLOCK_BYTES
from .base import KERNELS, ReleaseKernel, register

#: :class:`CpuKernel` uses the fused one-pass kernel for a float32 ``X`` of at least this many
#: bytes. Why a threshold: importing numba and loading the cached machine code costs ~0.75-0.9 s
#: of CPU once per process (the first compilation on a machine ~4 s; measured on the
#: development machine), while the kernel saves ~2 streaming passes over ``X`` per step
#: (``benchmarks/train.py``: ``step_over_stream_floor_*`` vs ``*_numpy``). At 64 MiB one pass
#: is ~5 ms, so the import is repaid after ~80-90 steps; the calibrated T at sigma = 20 is a
#: few hundred (206 for digits at epsilon = 3). Below it (digits: 0.5 MiB) the numpy kernel
#: keeps the start-up fast (the 1.5 s CPU budget of a digits run) and numba is never imported.
FUSED_MIN_BYTES = 64 << 20


class CpuKernel(ReleaseKernel):
    """:meth:`~.base.ReleaseKernel.clipped_sum` by the numba kernel when :meth:`select` says so,
    else by the numpy kernel.

    ``size_hint``: the bytes the size test reads instead of ``X.nbytes`` (:meth:`sized`). A run
    on private rows passes a size from released or public values, so which kernel runs (its
    timing, its rounding) does not depend on the exact private count."""

    name = "cpu"

    def __init__(self, size_hint: int | None = None):
        self.size_hint = size_hint

    def sized(self, nbytes: int) -> "CpuKernel":
        """This kernel with its size test on ``nbytes`` (a released or public size)."""
        return CpuKernel(int(nbytes))

    def select(self, X, basis, X_Qp) -> ReleaseKernel:
        """The kernel this call runs on. The size test comes before :func:`.numba_backend.available`,
        so a small problem never imports numba."""
        size = X.nbytes if self.size_hint is None else self.size_hint
        if ("numba" in KERNELS and numba_backend.supports(X, basis, X_Qp) and X.flags.c_contiguous
                and size >= FUSED_MIN_BYTES and numba_backend.available()):
            return KERNELS.get("numba")
        return KERNELS.get("numpy")

    def clipped_sum(self, X, y, W, tau, basis, *, X_Qp=None, **kw):
        k = self.select(X, basis, X_Qp)
        if self.size_hint is not None and k.name == "numpy" and kw.get("block_rows") is None:
            # the numpy kernel's blocking from the same released size: one block or 384-row blocks
            # round differently (2.4e-6 apart), and the choice switched at an exact N (8,192 at D = 64)
            kw["block_rows"] = (len(X) or 1) if self.size_hint <= SINGLE_BLOCK_BYTES else DEFAULT_BLOCK_ROWS
        return k.clipped_sum(X, y, W, tau, basis, X_Qp=X_Qp, **kw)


register(CpuKernel())
