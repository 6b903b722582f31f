"""Memory and thread pools of the CPU release kernels (no private data is kept beyond a call).

* :class:`ReleaseWorkspace`: the numpy kernel's block-sized buffers, one set per thread and
  size, reused across steps (:func:`release_workspace`): nothing of size ``N x C`` is
  allocated per step.
* :func:`thread_pool`: persistent worker threads for ``threads > 1`` (each takes a contiguous
  range of rows; the kernels release the GIL in BLAS / numba).
* :func:`side_by_side`: a run's cached ``[X B | X Q_p]``, built once per pair of arrays.

Caches are keyed by the identity of the arrays they derive from (weak references,
:class:`~..projection.DerivedCache`): those arrays must not change in place during a run.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..projection import DerivedCache

_WORKSPACES = threading.local()

#: The backward product ``(c E)^T X_b`` is taken with ``E^T`` padded by zero rows to a multiple
#: of this many classes: OpenBLAS' single-precision kernels run ``12 x b`` by ``b x D`` faster
#: than ``10 x b`` by ``b x D`` (``benchmarks/train.py``, section ``blocks``). 1 = no padding.
BACKWARD_ROW_MULTIPLE = 4


def padded_classes(C: int) -> int:
    """``C`` rounded up to a multiple of :data:`BACKWARD_ROW_MULTIPLE` (read at call time)."""
    k = max(1, int(BACKWARD_ROW_MULTIPLE))
    return -(-C // k) * k


class ReleaseWorkspace:
    """Block-sized buffers of the numpy kernel (:class:`.numpy_backend.NumpyKernel`), allocated
    once and reused across steps.

    Only ``O(block_rows * (C + r + m))`` memory: nothing of size ``N x C`` is allocated per
    step (the ``(N,)`` outputs ``ratio`` and ``loss`` can be passed in too).
    """

    def __init__(self, block_rows: int, n_cols: int, C: int, D: int, dtype: Any, m: int = 0, r: int = 0):
        b = int(block_rows)
        self.Z = np.empty((b, n_cols), dtype)  # [logits | X U_r] of the block (forward product)
        # logits -> E = softmax - onehot, transposed (C x nb, contiguous): the per-sample
        # reductions over the C classes then run along contiguous rows of length nb.
        self.Cp = padded_classes(C)
        self.ET = np.empty(self.Cp * b, dtype)
        self.rowmax = np.empty(b, dtype)
        self.rowsum = np.empty(b, dtype)
        self.z_y = np.empty(b, dtype)
        self.flat = np.empty(b, np.intp)  # flat index of (y_i, i) in the C x nb block of E^T
        self.cols = np.arange(b, dtype=np.intp)
        self.e_norm = np.empty(b)
        self.g_norm = np.empty(b)
        self.clip = np.empty(b)
        self.clip_f = np.empty(b, dtype)
        self.proj = np.empty(b)
        self.tmp = np.empty(b)
        self.sq_f = np.empty(b, dtype)
        self.ST_block = np.empty((self.Cp, D), dtype)
        self.XQ = np.empty((b, m), dtype) if m else None
        self.XQ2 = np.empty((b, m), dtype) if m else None
        self.XU = np.empty((b, r), dtype) if r else None


def release_workspace(block_rows: int, n_cols: int, C: int, D: int, dtype: Any, m: int = 0, r: int = 0) -> ReleaseWorkspace:
    """The calling thread's cached :class:`ReleaseWorkspace` for these sizes (made on first use)."""
    key = (int(block_rows), int(n_cols), int(C), int(D), np.dtype(dtype), int(m), int(r), padded_classes(C))
    cache = getattr(_WORKSPACES, "cache", None)
    if cache is None:
        cache = _WORKSPACES.cache = {}
    ws = cache.get(key)
    if ws is None:
        if len(cache) >= 8:
            cache.clear()
        ws = cache[key] = ReleaseWorkspace(*key[:-1])
    return ws


_POOLS: dict = {}
_POOLS_LOCK = threading.Lock()


def thread_pool(n: int):
    """A persistent thread pool with ``n`` workers (created on first use)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(n)
        if pool is None:
            from concurrent.futures import ThreadPoolExecutor

            pool = _POOLS[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="mixdp-release")
        return pool


_SIDE_BY_SIDE = DerivedCache()


def side_by_side(A: np.ndarray, B: np.ndarray, dtype: Any) -> np.ndarray:
    """``[A | B]`` as one C-contiguous array, built once per pair of arrays (a run's cached
    ``X B`` and ``X Q_p``) and kept while both live. The arrays must not change in place."""
    return _SIDE_BY_SIDE.get(
        (A, B), lambda: np.concatenate([np.asarray(A, dtype=dtype), np.asarray(B, dtype=dtype)], axis=1),
        extra=(np.dtype(dtype),))
