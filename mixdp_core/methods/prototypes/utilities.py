"""Shared numerics of the DP-prototype family (DPPL, Wahdany et al., "Beyond the Mean").

Contents:

* feature helpers (:func:`l2_normalize`, :func:`avg_pool`);
* the public-utility computation of DPPL-Public (Eq. 14 / Alg. 1), blocked over the public
  pool so that memory stays bounded for pools of 10^6+ candidates
  (:func:`public_utilities`, reference :func:`dense_public_utilities`);
* the exponential mechanism (:func:`em_log_probs`, :func:`sample_em`) and the joint
  exponential mechanism for unordered top-K (App. C.3, :func:`topk_rank_log_probs`,
  :func:`sample_topk`, :func:`topk_set_log_prob`);
* the public-pool loader (:func:`load_public_pool`); budget calibration (:func:`largest_param`)
  lives in :mod:`mixdp_core.accounting.calibration` (re-exported here).

Conventions: features are rows; utilities are float64 ``(C, N_pool)``; ``epsilon`` is the
privacy parameter of the *guarantee* (ε-DP), never a sampling temperature.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Sequence

import numpy as np
from scipy.special import gammaln, logsumexp

from ...accounting.calibration import largest_param  # noqa: F401  (moved to accounting; old path)
from ...errors import ConfigError, DataError

# --------------------------------------------------------------------------------------------
# Feature helpers
# --------------------------------------------------------------------------------------------


def l2_normalize(X: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows of ``X`` scaled to unit L2 norm (zero rows stay zero); keeps float32 as float32."""
    X = np.asarray(X)
    dtype = X.dtype if np.issubdtype(X.dtype, np.floating) else np.float32
    X = X.astype(dtype, copy=False)
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.maximum(n, eps)


def avg_pool(X: np.ndarray, k_pool: int) -> np.ndarray:
    """1-D average pooling over features with kernel = stride = ``k_pool`` (DPPL-Mean k_pool).

    Reduces dimension ``d`` to ``ceil(d / k_pool)``; the last window averages the remaining
    ``d mod k_pool`` coordinates. ``k_pool = 1`` returns ``X`` unchanged.
    """
    if k_pool == 1:
        return X
    n, d = X.shape
    m = -(-d // k_pool)
    pad = m * k_pool - d
    Xp = np.concatenate([X, np.zeros((n, pad), X.dtype)], axis=1) if pad else X
    sums = Xp.reshape(n, m, k_pool).sum(axis=2)
    counts = np.full(m, k_pool, dtype=X.dtype)
    if pad:
        counts[-1] = k_pool - pad
    return (sums / counts).astype(X.dtype, copy=False)


def cosine_scores(X: np.ndarray, prototypes: np.ndarray) -> np.ndarray:
    """Class scores = cosine similarity, averaged over the K prototypes of each class (Eq. 7).

    Args:
        X: ``(N, d)`` features.
        prototypes: ``(C, d)`` (one per class) or ``(C, K, d)``.

    Returns:
        ``(N, C)``; argmax = nearest prototype in cosine distance (mean distance for K > 1).
    """
    Xn = l2_normalize(np.asarray(X, dtype=np.float32))
    P = np.asarray(prototypes, dtype=np.float32)
    if P.ndim == 2:
        P = P[:, None, :]
    C, K, d = P.shape
    Pn = l2_normalize(P.reshape(C * K, d))
    return (Xn @ Pn.T).reshape(len(Xn), C, K).mean(axis=2)


# --------------------------------------------------------------------------------------------
# Public utilities (DPPL-Public, Eq. 14)
# --------------------------------------------------------------------------------------------


#: The utilities are a float64 (classes x pool rows) array, whatever the block size: at most this
#: many cells (2 GiB), so a pool a user can give (a 512 MiB .npz of 4-dimensional rows holds 33 M)
#: is refused before the work, not after 25 GiB. ``MIXDP_MAX_UTILITY_CELLS`` raises it.
MAX_UTILITY_CELLS = 2**28


def check_utility_size(n_classes: int, n_pool: int) -> None:
    """Raise a one-line :class:`DataError` on ``public_pool`` when the (C, N) utilities would
    exceed :data:`MAX_UTILITY_CELLS` (or ``MIXDP_MAX_UTILITY_CELLS``)."""
    from ...safe_npz import env_limit

    limit = env_limit("MIXDP_MAX_UTILITY_CELLS", MAX_UTILITY_CELLS, unit="cells")
    if int(n_classes) * int(n_pool) > limit:
        raise DataError(f"public_pool: {n_pool:,} candidates x {n_classes} classes need {n_classes * n_pool:,} "
                        f"utilities, above the limit of {limit:,} (8 bytes each; set MIXDP_MAX_UTILITY_CELLS "
                        f"to raise it, or use a smaller pool)")


def _check_utility_args(d_min: float, d_max: float) -> None:
    if not (0.0 <= d_min < d_max <= 2.0):
        raise ConfigError("d_min/d_max", f"must satisfy 0 <= d_min < d_max <= 2, got {d_min}, {d_max}")


def dense_public_utilities(
    X_private: np.ndarray,
    y_private: np.ndarray,
    pool: np.ndarray,
    *,
    n_classes: int,
    d_min: float = 0.0,
    d_max: float = 2.0,
) -> np.ndarray:
    """Reference (un-blocked, float64) utilities of Eq. 14; memory O(N_private * N_pool).

    ``u_c(j) = Σ_{i: y_i = c} clip(1 + cos(e_i, ê_j), d_min, d_max) − d_min``.
    Only for tests and small pools; use :func:`public_utilities` otherwise.
    """
    _check_utility_args(d_min, d_max)
    E = l2_normalize(np.asarray(X_private, dtype=np.float64))
    P = l2_normalize(np.asarray(pool, dtype=np.float64))
    S = np.clip(1.0 + E @ P.T, d_min, d_max) - d_min
    U = np.zeros((n_classes, P.shape[0]))
    np.add.at(U, np.asarray(y_private), S)
    return U


def default_block_size(n_private: int, budget_bytes: int = 64 * 2**20) -> int:
    """Pool rows per block so the ``(N_private, block)`` float32 similarity tile fits ``budget_bytes``."""
    return int(max(256, min(65536, budget_bytes // (4 * max(n_private, 1)))))


def public_utilities(
    X_private: np.ndarray,
    y_private: np.ndarray,
    pool: Any,
    *,
    n_classes: int,
    d_min: float = 0.0,
    d_max: float = 2.0,
    block_size: int | None = None,
    dtype: Any = np.float32,
    layout: str = "pool_major",
    device: str = "cpu",
    precision: str = "fp32",
    plan_rows: int | None = None,
) -> np.ndarray:
    """Utilities of every pool candidate for every class (Eq. 14, Alg. 1), blocked.

    ``u_c(j) = Σ_{i: y_i = c} clip(1 + cos(e_i, ê_j), d_min, d_max) − d_min``, each summand in
    ``[0, d_max − d_min]`` (sensitivity Δu = d_max − d_min, positively monotone under
    add/remove of one private sample; Lemma 5). Subtracting ``d_min`` shifts every candidate
    of a class by the same constant ``n_c·d_min`` relative to Alg. 1, so the exponential
    mechanism's distribution is unchanged.

    Memory is bounded: the pool is read ``block_size`` rows at a time (it may be a
    ``np.memmap`` or any object with ``.shape`` and row slicing), and the only large
    temporary is one ``(N_private, block_size)`` tile. Two paths:

    * **no clipping** (``d_min == 0`` and ``d_max == 2``: 1 + cos is already in [0, 2]):
      ``u_c(j) = n_c + s_c · ê_j`` with ``s_c`` the sum of the normalized private features
      of class ``c`` — a ``(C, d) x (d, block)`` product;
    * **clipping**: the full ``(N_private, block)`` cosine tile is clipped, then summed per
      class. ``layout="private_major"``: tile ``E @ P.T`` of shape ``(N_private, block)``,
      class sums by ``np.add.reduceat`` over the class-sorted private rows (float64
      accumulation); ``layout="pool_major"``: tile ``P @ E.T`` of shape
      ``(block, N_private)``, class sums as a second product with the ``(N_private, C)``
      one-hot matrix (float32 accumulation). ``pool_major`` is the default: about twice as
      fast in ``benchmarks/dppl.py`` (docs/results/tuning_notes.md, layout of the DPPL pool
      utilities).

    Args:
        X_private: ``(n, d)`` private features (raw; normalized here).
        y_private: ``(n,)`` labels in ``[0, n_classes)``.
        pool: ``(N, d)`` public candidates.
        n_classes: C.
        d_min, d_max: clip range of ``1 + cos`` (``0 <= d_min < d_max <= 2``).
        block_size: pool rows per block (default: :func:`default_block_size`).
        dtype: compute dtype of the tiles (float32 default).
        layout: ``"private_major"`` or ``"pool_major"`` (clipping path only, see above).
        device: ``"cpu"`` (numpy, above), ``"cuda"`` (torch on the GPU) or ``"auto"``
            (:func:`utilities_device`); ``"torch_cpu"`` runs the torch path on the CPU (tests).
            The torch path computes the same float32 tiles as ``pool_major`` (the pool is
            copied to the device block by block; no TF32), so the utilities, and the
            exponential mechanism drawn from them on the host, are the same on every device.
        precision: ``"fp32"`` (default), ``"bf16"`` or ``"auto"`` (:func:`utilities_precision`).
            ``"bf16"`` (clipping path, torch on the CPU): the cosine tile is a bfloat16 product
            (fp32 accumulation inside the matrix unit, bf16 output), clipped in bf16 and summed
            per class in float32 (:func:`_public_utilities_bf16`). Each summand is still a clipped
            value in ``[0, d_max − d_min]``, so the sensitivity, and the privacy guarantee, are
            unchanged; only the utilities' rounding differs from fp32, by at most
            ``3·2⁻⁹`` per summand (the rows' and the tile's bf16 rounding, 1-Lipschitz clip), so
            ``3·2⁻⁹·n_c`` in a class sum; measured 0.8-5.1 x ``2⁻⁹·√n_c`` (features with a
            shared mean round alike), the exponential mechanism's distribution moving by a
            total variation of at most 0.4 % at ε = 1 and 2.1 % at ε = 8
            (``scripts/bf16_utilities_agreement.py``; docs/results/prototypes.md, "bf16 utilities").

        plan_rows: the row count that sizes the plan (``"auto"`` device and precision, the bf16
            path's row groups), default ``len(X_private)``. A method releasing these utilities
            passes a public size (DPPL-Public: the pool's), so that how they are computed, and
            so how they round, never depends on the private count.

    Returns:
        ``(C, N)`` float64 utilities.
    """
    _check_utility_args(d_min, d_max)
    if layout not in ("private_major", "pool_major"):
        raise ConfigError("layout", f"must be 'private_major' or 'pool_major', got {layout!r}")
    y = np.asarray(y_private)
    E = l2_normalize(np.asarray(X_private, dtype=dtype))
    N = int(pool.shape[0])
    check_utility_size(n_classes, N)  # before any work: the (C, N) float64 result is the floor
    if pool.shape[1] != E.shape[1]:
        raise DataError(f"public_pool: has {pool.shape[1]} features, private data has {E.shape[1]}")
    counts = np.bincount(y, minlength=n_classes).astype(np.float64)
    clipping = clips(d_min, d_max)
    n_plan = len(E) if plan_rows is None else int(plan_rows)
    where, prec = utilities_plan(device, precision, clipping=clipping, n_private=n_plan, n_pool=N, dim=E.shape[1])
    # the clip of the cosines to [d_min - 1, d_max - 1], its bounds rounded inward in the
    # arithmetic that runs (computed once here for every path)
    lo, hi = _clip_bounds(d_min, d_max, prec, E.dtype) if clipping else (d_min - 1.0, d_max - 1.0)
    if prec == "bf16":
        return _public_utilities_bf16(E, y, pool, counts, d_min=d_min, bounds=(lo, hi), block_size=block_size,
                                      plan_rows=n_plan)
    if where != "cpu":
        return _public_utilities_torch(E, y, pool, counts, d_min=d_min, bounds=(lo, hi), block_size=block_size,
                                       clipping=clipping, device="cpu" if where == "torch" else where)
    U = np.empty((n_classes, N), dtype=np.float64)
    if not clipping:
        S = np.zeros((n_classes, E.shape[1]), dtype=np.float64)
        np.add.at(S, y, E.astype(np.float64))
        S = S.astype(dtype)
        bs = block_size or 65536
    else:
        order = np.argsort(y, kind="stable")
        E = np.ascontiguousarray(E[order])
        ys = y[order]
        present = np.flatnonzero(counts > 0)
        starts = np.searchsorted(ys, present)
        # never a tile wider than the pool (a block of 10^8 rows over a pool of 6 asked 74.5 GiB)
        bs = max(1, min(block_size or default_block_size(len(E)), N))
        if layout == "private_major":
            tile = np.empty((len(E), bs), dtype=dtype)
        else:
            tile = np.empty((bs, len(E)), dtype=dtype)
            onehot = np.zeros((len(E), n_classes), dtype=dtype)
            onehot[np.arange(len(E)), ys] = 1.0
    for a in range(0, N, bs):
        b = min(N, a + bs)
        P = l2_normalize(np.asarray(pool[a:b], dtype=dtype))
        if not clipping:
            U[:, a:b] = S @ P.T
            U[:, a:b] += counts[:, None]
        elif layout == "private_major":
            T = tile[:, : b - a] if b - a < bs else tile
            np.matmul(E, P.T, out=T)
            T += 1.0 - d_min
            np.clip(T, 0.0, _inward(d_max - d_min, dtype, up=False), out=T)
            U[:, a:b] = 0.0
            U[present, a:b] = np.add.reduceat(T, starts, axis=0, dtype=np.float64)
        else:
            T = tile[: b - a]
            np.matmul(P, E.T, out=T)
            # clip(1 + c, d_min, d_max) - d_min = clip(c, d_min - 1, d_max - 1) + (1 - d_min):
            # one pass over the tile instead of two; the constant goes in per class, n_c (1 - d_min)
            np.clip(T, lo, hi, out=T)
            U[:, a:b] = (T @ onehot).T
            U[:, a:b] += (counts * (1.0 - d_min))[:, None]
    return U


#: ``device="auto"`` moves the clipped utilities to a GPU from this many multiply-adds of the
#: cosine tile (``N_private * N_pool * d``). Why: a CUDA run first pays torch's import and the
#: CUDA context (~1-3 s), while these cores do ~30-70 GFLOP/s of fp32 products
#: (``docs/results/speed.md``), i.e. ~1e11 multiply-adds in that time; below it the CPU finishes
#: first. From public orders of magnitude, like the release kernels' ``AUTO_CUDA_MIN_BYTES``.
AUTO_CUDA_MIN_MACS = 10**11


def utilities_device(device: str, *, n_private: int, n_pool: int, dim: int) -> str:
    """Where :func:`public_utilities` runs: ``"cpu"`` (numpy), ``"torch"`` (torch, CPU) or ``"cuda"``.

    ``"auto"`` is ``"cuda"`` when torch sees a GPU and the cosine tile has at least
    :data:`AUTO_CUDA_MIN_MACS` multiply-adds, else ``"cpu"``; the other options are those of the
    release kernels' :func:`~mixdp_core.methods.adamix.kernels.resolve_device` (``"cuda"``
    without a GPU is a one-line ``ConfigError`` on ``device``).
    """
    from ..adamix.kernels import resolve_device  # imports neither torch nor numba

    if device == "auto" and n_private * n_pool * dim < AUTO_CUDA_MIN_MACS:
        return "cpu"  # decided before looking for a GPU: small problems never import torch
    return resolve_device(device)


def clips(d_min: float, d_max: float) -> bool:
    """Whether the range ``[d_min, d_max]`` clips ``1 + cos`` (which spans ``[0, 2]``): the
    clipped path of :func:`public_utilities` (its tile, its precision choice)."""
    return d_min > 0.0 or d_max < 2.0


#: ``precision="auto"`` multiplies in bfloat16 from this many multiply-adds of the cosine tile,
#: on a CPU with bfloat16 matrix units (AMX-BF16). Why this size: the bf16 path imports torch
#: (~1-2 s) and its result differs from fp32 by rounding; below 1e11 multiply-adds the fp32
#: products take seconds at most (30-70 GFLOP/s on these cores), so exact fp32 is kept.
AUTO_BF16_MIN_MACS = 10**11


def cpu_has_bf16_matrix_units() -> bool:
    """Whether this CPU has AMX-BF16 tile units (Linux ``/proc/cpuinfo`` flag ``amx_bf16``).

    Where it does, a bfloat16 product runs ~4-5x the fp32 rate of the same cores (measured
    side by side in ``benchmarks/dppl.py``); the gain is the matrix units' (a CPU without them
    was not measured), so ``precision="auto"`` keeps fp32 there. Read once per process; False
    where the file is missing (other systems)."""
    global _AMX
    if _AMX is None:
        try:
            with open("/proc/cpuinfo") as f:
                _AMX = any(line.startswith("flags") and " amx_bf16" in line for line in f)
        except OSError:
            _AMX = False
    return _AMX


_AMX: bool | None = None
#: The values of ``precision`` (the DPPL-Public configs declare the same tuple).
PRECISIONS = ("auto", "fp32", "bf16")


def utilities_precision(precision: str, *, device: str, clipping: bool, n_private: int, n_pool: int,
                        dim: int) -> str:
    """The arithmetic of :func:`public_utilities`: ``"fp32"`` or ``"bf16"``.

    ``"auto"`` is ``"bf16"`` only for the clipping path on the CPU (``device`` resolved to
    ``"cpu"``), when :func:`cpu_has_bf16_matrix_units` and the tile has at least
    :data:`AUTO_BF16_MIN_MACS` multiply-adds; else ``"fp32"`` (the no-clipping path is a
    ``(C, d)`` product, memory-bound, and a GPU's fp32 is already fast). ``"bf16"`` asks for
    it wherever clipping applies on the CPU (on a CPU without matrix units it runs as well,
    at a speed not measured here; with ``device="cuda"`` a one-line ``ConfigError``); without
    clipping it is ``"fp32"``.
    """
    if precision not in PRECISIONS:
        raise ConfigError("precision", f"must be one of {list(PRECISIONS)}, got {precision!r}")
    if not clipping or precision == "fp32":
        return "fp32"
    if precision == "bf16":
        if device == "cuda":
            raise ConfigError("precision", "'bf16' is the CPU's bfloat16 path; with device 'cuda' use 'fp32' or "
                                           "'auto'")
        return "bf16"
    big = n_private * n_pool * dim >= AUTO_BF16_MIN_MACS
    return "bf16" if device == "cpu" and big and cpu_has_bf16_matrix_units() else "fp32"


def utilities_plan(device: str, precision: str, *, clipping: bool, n_private: int, n_pool: int,
                   dim: int) -> tuple[str, str]:
    """``(where, precision)`` of :func:`public_utilities`: :func:`utilities_device`, then
    :func:`utilities_precision` there. An explicit ``precision="bf16"`` with ``device="auto"``
    runs on the CPU (the bf16 path is the CPU's); with ``device="cuda"`` it is refused."""
    if precision == "bf16" and device == "auto" and clipping:
        where = "cpu"
    else:
        where = utilities_device(device, n_private=n_private, n_pool=n_pool, dim=dim)
    return where, utilities_precision(precision, device=where, clipping=clipping, n_private=n_private,
                                      n_pool=n_pool, dim=dim)


def _bf16_group(n: int, n_classes: int) -> int:
    """Rows per group of the bf16 path's class sums: a power of two up to 64 whose padding,
    at most ``(g - 1)`` zero rows per class, stays within an eighth of the ``n`` rows."""
    g = 64
    while g > 1 and (g - 1) * n_classes > n / 8:
        g //= 2
    return g


def _clip_bounds(d_min: float, d_max: float, prec: str, dtype: Any) -> tuple[float, float]:
    """``(lo, hi)``: ``d_min − 1`` and ``d_max − 1`` rounded inward to the numbers of the
    utilities' arithmetic (bfloat16 for ``prec == "bf16"``, else ``dtype``), so every clipped
    summand stays in the range and the sensitivity d_max − d_min holds.

    Raises:
        ConfigError: on ``d_min/d_max`` where the range is below that arithmetic's resolution
            (the inward bounds cross: every candidate would get the same utility).
    """
    if prec == "bf16":
        lo, hi = _bf16_inward(d_min - 1.0, up=True), _bf16_inward(d_max - 1.0, up=False)
    else:
        lo, hi = _inward(d_min - 1.0, dtype, up=True), _inward(d_max - 1.0, dtype, up=False)
    if lo > hi:
        raise ConfigError("d_min/d_max", f"d_max - d_min = {d_max - d_min:.3g} is below the resolution of the "
                                         f"utilities' {prec if prec == 'bf16' else np.dtype(dtype)} arithmetic near "
                                         "these values (every candidate would get the same utility); widen the range")
    return lo, hi


def _inward(x: float, dtype: Any, *, up: bool) -> float:
    """``x`` rounded to ``dtype`` (float32 or float64) on its ``up`` (>= x) or down (<= x) side.

    A clip bound given as a Python float is rounded to the tile's dtype *to nearest*, which can
    step outside [d_min − 1, d_max − 1] by half an ulp, and then one private row moves a utility
    by more than Δu (1.31e-7 against 1.10e-7 at d_max − d_min = 1.1e-7 in float32); rounded
    inward, every summand stays in the range and the sensitivity holds (:func:`public_utilities`
    refuses a range so narrow that the inward bounds cross)."""
    v = np.asarray(x, dtype=dtype)
    if up and float(v) < x:
        v = np.nextafter(v, np.asarray(np.inf, dtype=dtype))
    elif not up and float(v) > x:
        v = np.nextafter(v, np.asarray(-np.inf, dtype=dtype))
    return float(v)


def _bf16_inward(x: float, *, up: bool) -> float:
    """The bfloat16 number nearest ``x`` on its ``up`` (>= x) or down (<= x) side.

    bfloat16 is the top 16 bits of a float32: ``x`` truncated to them, and that number's two
    neighbours one bf16 ulp apart, bracket ``x``; the nearest on the asked side is returned."""
    t = int(np.array([x], dtype=np.float32).view(np.uint32)[0]) & 0xFFFF0000
    vals = [float(np.array([b], dtype=np.uint32).view(np.float32)[0])
            for b in (t - 0x10000, t, t + 0x10000) if 0 <= b <= 0xFFFFFFFF]
    side = [v for v in vals if np.isfinite(v) and (v >= x if up else v <= x)]
    return min(side) if up else max(side)


def _public_utilities_bf16(E: np.ndarray, y: np.ndarray, pool: Any, counts: np.ndarray, *, d_min: float,
                           bounds: tuple[float, float], block_size: int | None,
                           plan_rows: int | None = None) -> np.ndarray:
    """The clipping path of :func:`public_utilities` with bfloat16 products (torch, CPU).

    Layout: the normalized private rows sorted by class, each class padded with zero rows to a
    multiple of ``g`` (:func:`_bf16_group`). Per pool block ``P`` (normalized in fp32, then
    rounded to bf16): tile ``T = P @ E.T`` in bf16 (fp32 accumulation inside the product),
    ``clip(T, d_min - 1, d_max - 1)`` in place, row-group sums in **float32**
    (``T.view(b, groups, g).sum(-1, dtype=float32)``), then a float32 product with the
    ``(groups, C)`` one-hot of the groups' classes. A padded row has cosine 0, so it adds
    ``clip(0, d_min - 1, d_max - 1)`` to its class, subtracted exactly afterwards. The class
    sums never pass through bf16: a bf16 output there would round a utility of ~10³ by ~2.
    """
    import torch

    n_classes = len(counts)
    N = int(pool.shape[0])
    g = _bf16_group(len(E) if plan_rows is None else int(plan_rows), n_classes)
    n_c = counts.astype(np.int64)
    padded = -(-n_c // g) * g
    order = np.argsort(y, kind="stable")
    Ep = np.zeros((int(padded.sum()), E.shape[1]), dtype=np.float32)
    starts = np.concatenate([[0], np.cumsum(padded)[:-1]])
    src = np.concatenate([[0], np.cumsum(n_c)[:-1]])
    for c in np.flatnonzero(n_c):
        Ep[starts[c]: starts[c] + n_c[c]] = E[order[src[c]: src[c] + n_c[c]]]
    groups = len(Ep) // g
    Mg = torch.zeros((groups, n_classes), dtype=torch.float32)
    Mg[torch.arange(groups), torch.from_numpy(np.repeat(np.arange(n_classes), padded // g))] = 1.0
    Eb = torch.from_numpy(Ep).to(torch.bfloat16)
    # the clip's bounds rounded *inward* to bf16 numbers (_clip_bounds): every summand stays in
    # [d_min - 1, d_max - 1] (the sensitivity d_max - d_min holds); to nearest could step out
    lo, hi = bounds
    pad_value = min(max(0.0, lo), hi)  # what a zero row's cosine adds after the clip
    offset = torch.from_numpy(counts * (1.0 - d_min) - (padded - n_c) * pad_value)
    # tile budget 4 MiB of bf16: it stays in the cores' caches between product, clip and sums
    bs = block_size or int(max(64, min(N, (4 * 2**20) // (2 * max(len(Ep), 1)))))
    U = np.empty((n_classes, N), dtype=np.float64)
    with torch.no_grad():
        for a in range(0, N, bs):
            b = min(N, a + bs)
            P = torch.from_numpy(np.ascontiguousarray(pool[a:b], dtype=np.float32))
            P = (P / P.norm(dim=1, keepdim=True).clamp_min(1e-12)).to(torch.bfloat16)
            T = (P @ Eb.T).clamp_(lo, hi)
            S = T.view(b - a, groups, g).sum(-1, dtype=torch.float32) @ Mg
            U[:, a:b] = (S.T.double() + offset[:, None]).numpy()
    return U


def _public_utilities_torch(E: np.ndarray, y: np.ndarray, pool: Any, counts: np.ndarray, *, d_min: float,
                            bounds: tuple[float, float], block_size: int | None, clipping: bool,
                            device: str) -> np.ndarray:
    """The ``pool_major`` computation of :func:`public_utilities` in torch on ``device``.

    ``E``: normalized private rows, in the compute dtype of the tiles. Same tiles, same clip, same float32 class sums by a
    product with the one-hot matrix; only the arithmetic's order inside the products differs
    (relative differences ~1e-6, tested against the numpy path).
    """
    import torch

    n_classes = len(counts)
    N = int(pool.shape[0])
    Et = torch.from_numpy(np.ascontiguousarray(E)).to(device)
    dt = Et.dtype
    yt = torch.from_numpy(np.asarray(y, dtype=np.int64)).to(device)
    if clipping:
        M = torch.zeros((len(E), n_classes), dtype=dt, device=device)
        M[torch.arange(len(E), device=device), yt] = 1.0  # one-hot: class sums as one product
        # the (block, N_private) float32 tile is the only large temporary: 1 GiB on a GPU
        budget = (1 << 30) if device != "cpu" else 64 * 2**20
        bs = block_size or int(max(256, min(N, budget // (E.itemsize * max(len(E), 1)))))
    else:
        M = torch.zeros((n_classes, E.shape[1]), dtype=torch.float64, device=device)
        M.index_add_(0, yt, Et.double())  # s_c: float64 class sums, as the numpy path
        M = M.to(dt)
        bs = block_size or 65536
    lo = 1.0 - d_min
    cnt = torch.from_numpy(counts).to(device)
    U = np.empty((n_classes, N), dtype=np.float64)
    with torch.no_grad():
        for a in range(0, N, bs):
            b = min(N, a + bs)
            P = torch.from_numpy(np.ascontiguousarray(pool[a:b], dtype=E.dtype)).to(device)
            P = P / P.norm(dim=1, keepdim=True).clamp_min(1e-12)
            if clipping:
                # one pass, as the numpy path; the bounds rounded inward to the tile's dtype (_clip_bounds)
                T = (P @ Et.T).clamp_(*bounds)
                Ub = (T @ M).T.double() + lo * cnt[:, None]
            else:
                Ub = (M @ P.T).double() + cnt[:, None]
            U[:, a:b] = Ub.cpu().numpy()
    return U


# --------------------------------------------------------------------------------------------
# Exponential mechanism
# --------------------------------------------------------------------------------------------


def em_log_probs(u: np.ndarray, *, epsilon: float, sensitivity: float, monotone: bool) -> np.ndarray:
    """Log-probabilities of the exponential mechanism (McSherry & Talwar; paper Eq. 4).

    ``P[j] ∝ exp(ε u_j / Δ)`` for a utility that is monotone in the private data (ε-DP,
    Lemma 2), ``P[j] ∝ exp(ε u_j / (2Δ))`` otherwise (ε-DP, Lemma 1 with ε/2).

    Args:
        u: ``(N,)`` utilities.
        epsilon: the ε of the ε-DP guarantee.
        sensitivity: Δu (add/remove one private sample).
        monotone: whether ``u`` is monotone in the private data.
    """
    scale = epsilon / (sensitivity if monotone else 2.0 * sensitivity)
    z = scale * np.asarray(u, dtype=np.float64)
    return z - logsumexp(z)


def sample_em(
    u: np.ndarray, *, epsilon: float, sensitivity: float, monotone: bool, rng: np.random.Generator
) -> int:
    """One draw of the exponential mechanism (inverse CDF on :func:`em_log_probs`)."""
    p = np.exp(em_log_probs(u, epsilon=epsilon, sensitivity=sensitivity, monotone=monotone))
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))


def topk_rank_log_probs(
    u_sorted_desc: np.ndarray, k: int, *, epsilon: float, sensitivity: float, monotone: bool = False
) -> np.ndarray:
    """Log-probabilities over the rank ``y`` of the worst member of the released K-set.

    Joint exponential mechanism for *unordered* top-K (App. C.3, after Gillenwater et al.
    2022). The set utility ``U(S) = min_{s∈S} u_s − u_(K)`` (Eq. 5) has sensitivity
    ``ΔU = Δu`` (Lemma 4). Exactly ``binom(y−1, K−1)`` K-sets have their worst member at
    rank ``y`` (1-based, ``y >= K``); hence
    ``P[y] ∝ binom(y−1, K−1) · exp(scale · (u_(y) − u_(K)))`` with

    * ``monotone=False`` (the paper's App. C.3 analysis): ``scale = ε / (2Δu)`` because U is
      not monotone (its ``−u_(K)`` term moves against ``min u_s``);
    * ``monotone=True``: ``scale = ε / Δu``. The ``−u_(K)`` term is the same for every set S,
      so it cancels in the normalisation: the mechanism *is* the exponential mechanism of
      ``U'(S) = min_{s∈S} u_s``, and U' is positively monotone with sensitivity Δu (adding one
      private sample raises every ``u_s`` by a value in ``[0, Δu]``, hence ``min_S u_s`` too;
      Lemma 5), so Lemma 2 (McSherry & Talwar) gives ε-DP at the monotone scale. For K = 1
      this is exactly DPPL-Public's mechanism.

    Note: the paper's Eq. 6 writes ``binom(y, K)`` and the authors' code uses
    ``binom(y−1, K)`` (the log-count of 0-based position ``y−1``), which gives the exact
    top-K set probability 0; ``binom(y−1, K−1)`` is the count that makes the two-stage
    sampler equal to the set-level exponential mechanism (checked by brute force in the tests).

    Returns:
        ``(N − K + 1,)`` log-probabilities for ranks ``y = K..N``.
    """
    u = np.asarray(u_sorted_desc, dtype=np.float64)
    N = len(u)
    y = np.arange(k, N + 1)
    log_count = gammaln(y) - gammaln(k) - gammaln(y - k + 1)  # log binom(y-1, k-1)
    scale = epsilon / (sensitivity if monotone else 2.0 * sensitivity)
    z = log_count + scale * (u[k - 1 :] - u[k - 1])
    return z - logsumexp(z)


def sample_topk(
    u: np.ndarray, k: int, *, epsilon: float, sensitivity: float, rng: np.random.Generator,
    monotone: bool = False,
) -> np.ndarray:
    """Draw an unordered K-set of candidate indices with the joint EM (App. C.3).

    1. sample the worst rank ``y`` with :func:`topk_rank_log_probs`;
    2. keep the candidate at rank ``y``;
    3. draw the other ``K−1`` uniformly without replacement from ranks ``1..y−1``.

    Ties in ``u`` are broken by index (stable sort); the set distribution is unaffected.
    """
    u = np.asarray(u, dtype=np.float64)
    if not (1 <= k <= len(u)):
        raise ConfigError("k", f"must lie in [1, {len(u)}] (pool size), got {k}")
    order = np.argsort(-u, kind="stable")
    lp = topk_rank_log_probs(u[order], k, epsilon=epsilon, sensitivity=sensitivity, monotone=monotone)
    p = np.exp(lp)
    cdf = np.cumsum(p)
    j = int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))
    y = j + k  # 1-based rank of the worst member
    others = rng.choice(y - 1, size=k - 1, replace=False) if k > 1 else np.empty(0, dtype=int)
    return np.sort(order[np.concatenate([others, [y - 1]]).astype(int)])


def topk_set_log_prob(u: np.ndarray, S: Sequence[int], k: int, *, epsilon: float, sensitivity: float,
                      monotone: bool = False) -> float:
    """Brute-force-free log P[S] of the joint top-K mechanism (for tests and diagnostics)."""
    u = np.asarray(u, dtype=np.float64)
    order = np.argsort(-u, kind="stable")
    rank = np.empty(len(u), dtype=int)
    rank[order] = np.arange(1, len(u) + 1)
    y = int(max(rank[list(S)]))
    lp = topk_rank_log_probs(u[order], k, epsilon=epsilon, sensitivity=sensitivity, monotone=monotone)
    return float(lp[y - k] - (gammaln(y) - gammaln(k) - gammaln(y - k + 1)))


# --------------------------------------------------------------------------------------------
# Public pool, calibration
# --------------------------------------------------------------------------------------------


def validate_pool_spec(value: Any) -> None:
    """Config check of ``public_pool``: ``"split"`` or a path to an ``.npz`` file."""
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError("public_pool", f'must be "split" or a path to an .npz file, got {value!r}')
    if str(value) != "split" and not str(value).endswith(".npz"):
        raise ConfigError("public_pool", f'must be "split" or a path ending in .npz, got {value!r}')


def load_public_pool(spec: Any, split: Any, override: np.ndarray | None = None) -> np.ndarray:
    """The candidate pool of DPPL-Public.

    Args:
        spec: ``"split"`` (the labelled public split ``split.X_public``, labels discarded) or a
            path to an ``.npz`` holding an ``(N, d)`` array ``X`` (e.g. features of an
            unlabelled public dataset from another domain).
        split: the :class:`~mixdp_core.data.splits.Split`.
        override: an in-memory ``(N, d)`` pool (the ``public_pool=`` fit kwarg), used as is.

    Raises:
        ConfigError: missing file / array; DataError: wrong shape or non-finite values.
    """
    if override is not None:
        X = override
        where = "public_pool (array)"
    elif str(spec) == "split":
        X = split.X_public
        where = "split.X_public"
    else:
        from ...safe_npz import load_npz

        if not os.path.isfile(spec):
            raise ConfigError("public_pool", f"file {spec!r} does not exist or is not a file")
        # the bounded reader: sizes checked from the headers before anything is decompressed, no
        # pickles (np.load read a 256 MiB array out of a 261 KB file)
        arrays = load_npz(spec, field="public_pool")
        X = arrays.get("X")
        if X is None:
            raise ConfigError("public_pool", f"{spec!r} has no array 'X' (found {sorted(arrays)})")
        if not np.issubdtype(X.dtype, np.floating):
            raise DataError(f"public_pool: 'X' must hold floating-point features, got dtype {X.dtype}")
        where = str(spec)
    if X.ndim != 2 or X.shape[0] == 0:
        raise DataError(f"{where}: public pool must be a non-empty 2-D array, got shape {X.shape}")
    if X.shape[1] != split.dim:
        raise DataError(f"{where}: has {X.shape[1]} features, the private data has {split.dim}")
    if not isinstance(X, np.memmap) and not np.all(np.isfinite(X)):
        raise DataError(f"{where}: contains NaN or infinite values")
    return X
