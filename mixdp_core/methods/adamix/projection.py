"""The AdaMix projection basis ``U`` (Alg. 2, "Adaptive subspace projection"), from public data only.

``U`` is the left-singular basis of the public gradient ``G_pub(w_t)`` (``D x C``, rank
``r <= C``), top directions first. For ``k <= r`` it is ``U_r[:, :k]``; for ``k > r`` (the
paper's 2000 of 2048 ResNet-50 dims, 500 of 512 CLIP dims) the basis is completed
orthonormally: we drop the ``m = D - k`` directions ``Q = orth((I - U_r U_r^T) B)`` with ``B`` a
fixed data-independent Gaussian ``D x m`` matrix, i.e. ``U U^T = I - Q Q^T``. Then
``||U^T x||^2 = ||x||^2 - ||Q^T x||^2`` and ``X Q = (X B - (X U_r)(U_r^T B)) R^{-1}`` need only
``X B`` (once) and ``X U_r`` (the numba kernel uses the cheaper low-rank form of
:func:`~.kernels.numba_backend.complement_maps`: ``||P_B x||^2`` once per run, then ``2 r``
dot products per row). Since ``G_pub = X_pub^T E_pub``, ``U_r = Q_p U~_r`` with
``X_pub^T = Q_p R_p`` (thin QR, once) and ``U~`` the left singular vectors of the small
``R_p E_pub``; so ``X U_r = (X Q_p) U~_r`` from a cached ``N x n_pub`` matrix (when
``n_pub < D``; otherwise ``X U_r`` is fused with the forward product ``X W``). No per-sample
gradient and no ``N x D x k`` product is formed.

Privacy: nothing here reads private data. ``U`` depends on the public rows and on ``w_t``
(a function of earlier releases), so projecting a release on it is post-processing and
``||U^T v|| <= ||v||`` keeps the sensitivity of the clipped sum (:mod:`.engine`).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Optional

import numpy as np

#: Paper's projection ratio (AdaMix App. A.6: 2000 of 2048 ResNet-50 dims, 500 of 512 CLIP).
PAPER_PROJECTION_RATIO = 2000.0 / 2048.0


def projection_dim_for(D: int, spec: Any, n_classes: int) -> Any:
    """Resolve a projection spec to ``k`` (``None`` = no projection).

    Args:
        D: feature dimension.
        spec: ``"paper"`` (``round(D * 2000/2048)``, >= 1), ``"rank"`` (the rank of ``G_pub``,
            resolved at every step), ``"none"``, or an int ``k``.
        n_classes: C.
    """
    if spec == "none" or spec is None:
        return None
    if spec == "paper":
        return max(1, min(D, int(round(D * PAPER_PROJECTION_RATIO))))
    if spec == "rank":
        return "rank"
    if spec == "public_span":
        return "span"
    return int(min(int(spec), D))


def public_span_basis(X_pub: np.ndarray, rel_tol: float = 1e-6) -> Optional[ProjectionBasis]:
    """Orthonormal basis of ``span(X_pub^T)`` (``D x r``, ``r = rank X_pub``), or None if
    ``r = D`` (projecting on all of ``R^D`` is the identity)."""
    U, s, _ = np.linalg.svd(np.asarray(X_pub, dtype=np.float64).T, full_matrices=False)
    r = int(np.sum(s > s[0] * rel_tol)) if s.size and s[0] > 0 else 0
    if r == 0 or r >= X_pub.shape[1]:
        return None
    return ProjectionBasis("sub", U[:, :r].astype(np.float32), r)


def resolve_span(X_pub: np.ndarray) -> tuple[Optional[ProjectionBasis], Optional[int]]:
    """``projection_dim="span"``: the basis of ``span(X_pub^T)`` and its dimension, or
    ``(None, None)`` (no public rows, or rank ``D``: no projection)."""
    basis = public_span_basis(X_pub) if X_pub.shape[0] > 0 else None
    return basis, (None if basis is None else basis.dim)


class ProjectionBasis:
    """Orthonormal basis ``U`` (``D x k``) of the AdaMix projection, stored implicitly.

    Attributes:
        mode: ``"sub"`` (``U = U_r[:, :k]`` stored in ``U``) or ``"complement"`` (``U`` spans the
            orthogonal complement of the ``m = D - k`` columns of ``Q``; ``U_r`` (the top
            singular directions of ``G_pub``) lies inside it).
        U: ``(D, k)`` for ``sub``; for ``complement`` the ``(D, r)`` top directions ``U_r``.
        Q: ``(D, m)`` dropped directions (``complement`` only), float32. Formed on first access
            when the basis was built from ``R`` alone (:func:`projection_basis`): the release
            needs only ``B``, ``U_r``, ``K = B^T U_r`` and ``R`` (:meth:`project`, the kernels'
            projection norms), not the ``D x m`` matrix.
        B: ``(D, m)`` fixed Gaussian matrix with ``Q R = (I - U_r U_r^T) B`` (``complement``).
        R: ``(m, m)`` upper triangular factor of that decomposition (``complement``), float64.
        dim: k.
        coef: ``(n_pub, r)`` with ``U_r = Q_p coef`` when built from the public QR (see
            :func:`projection_basis`), else None.
        U64, BtU: float64 ``U_r`` (``(D, r)``) and ``K = B^T U_r`` (``(m, r)``), ``complement``
            bases built by :func:`projection_basis` only (else None).
    """

    def __init__(self, mode: str, U: np.ndarray, dim: int, Q: Optional[np.ndarray] = None,
                 B: Optional[np.ndarray] = None, R: Optional[np.ndarray] = None,
                 coef: Optional[np.ndarray] = None, *, U64: Optional[np.ndarray] = None,
                 BtU: Optional[np.ndarray] = None):
        self.mode = mode
        self.U = U
        self.dim = int(dim)
        self._Q = Q
        self.B = B
        self.R = R
        self.coef = coef
        self.U64 = U64
        self.BtU = BtU
        self._G: Optional[np.ndarray] = None  # (R^T R)^{-1}, on first use

    @property
    def Q(self) -> Optional[np.ndarray]:
        if self._Q is None and self.mode == "complement" and self.R is not None:
            B64 = b_gram(self.B)[0]
            Bp = B64 - self.U64 @ self.BtU.T  # (I - U_r U_r^T) B
            self._Q = np.linalg.solve(self.R.T, Bp.T).T.astype(np.float32)  # Bp R^{-1}
        return self._Q

    def project(self, V: np.ndarray) -> np.ndarray:
        """``U U^T V`` for a ``(D, C)`` matrix ``V`` (same dtype as ``V``)."""
        if self.mode == "sub":
            return self.U @ (self.U.T @ V)
        if self._Q is not None or self.U64 is None:
            return V - self.Q @ (self.Q.T @ V)
        # Q Q^T V = Bp (R^T R)^{-1} Bp^T V with Bp = B - U_r K^T: O(D (m + r) C) work in V's
        # dtype with the stored B and U_r, the small m x C and r x C parts in float64; no D x m
        # matrix is formed (the same projection as with the orthonormal Q, to float rounding)
        if self._G is None:
            self._G = np.linalg.inv(self.R.T @ self.R)
        BpV = (self.B.T @ V).astype(np.float64) - self.BtU @ (self.U.T @ V).astype(np.float64)  # (m, C)
        Y = self._G @ BpV
        dt = V.dtype
        return V - (self.B @ Y.astype(dt) - self.U @ (self.BtU.T @ Y).astype(dt))


class DerivedCache:
    """Values computed from arrays, kept while every source array lives (weak references, so a
    finished run's arrays free their entries; at most ``limit`` entries). The sources must not
    change in place: the key is their identity, not their content. Thread-safe; also holds the
    release kernels' per-run products (:mod:`.kernels`)."""

    def __init__(self, limit: int = 4):
        self._d: dict = {}
        self._lock = threading.Lock()
        self.limit = limit

    def get(self, sources: tuple, compute: Callable[[], Any], extra: tuple = ()) -> Any:
        key = tuple(id(o) for o in sources) + tuple(extra)
        with self._lock:
            hit = self._d.get(key)
            if hit is not None and all(w() is o for w, o in zip(hit[0], sources)):
                return hit[1]
        value = compute()
        d = self._d
        try:
            drop = lambda _r, k=key, d=d: d.pop(k, None)  # noqa: E731  (d: alive at exit)
            refs = tuple(weakref.ref(o, drop) for o in sources)
        except TypeError:  # not weak-referenceable (e.g. a memmap subclass): no caching
            return value
        with self._lock:
            if len(d) >= self.limit:
                d.clear()
            d[key] = (refs, value)
        return value


_B_GRAMS = DerivedCache()


def b_gram(B: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(B64, B^T B, (B^T B)^{-1})`` in float64 for a run's fixed ``B``, computed once per array
    (kept while ``B`` lives; ``B`` must not change in place)."""

    def compute():
        B64 = np.array(B, dtype=np.float64)  # a copy: the entry must not keep B itself alive
        BtB = B64.T @ B64
        return B64, BtB, np.linalg.inv(BtB)

    return _B_GRAMS.get((B,), compute)


def projection_basis(
    G_pub: np.ndarray,
    k: Any,
    B: Optional[np.ndarray],
    *,
    public_qr: Optional[tuple[np.ndarray, np.ndarray]] = None,
    E_pub: Optional[np.ndarray] = None,
) -> ProjectionBasis:
    """Left-singular basis of the public gradient, top directions first (Alg. 2).

    Args:
        G_pub: ``(D, C)`` summed public gradient ``X_pub^T E_pub``.
        k: projection dimension, or ``"rank"`` for the numerical rank ``r`` of ``G_pub``.
        B: ``(D, D - k)`` fixed data-independent Gaussian matrix used to complete the basis
            when ``k > r`` (``None`` if ``k`` is ``"rank"``).
        public_qr: optional thin QR ``(Q_p, R_p)`` of ``X_pub^T`` (``D x n_pub``). With it (and
            ``E_pub``) the SVD is taken of the small ``R_p E_pub`` (``n_pub x C``):
            ``G_pub = Q_p (R_p E_pub) = (Q_p U~) S V^T``, and ``coef = U~[:, :r]`` lets callers
            form ``X U_r = (X Q_p) coef`` from a cached ``X Q_p`` (``N x n_pub``) instead of
            a ``N x D x r`` product at every step.
        E_pub: ``(n_pub, C)`` public residual ``P - Y`` (with ``public_qr``).

    For ``k > r`` the dropped directions are ``Q = orth((I - U_r U_r^T) B)``, given by the
    triangular ``R`` of ``Q R = (I - U_r U_r^T) B`` with ``R^T R = B^T B - K K^T``
    (``K = B^T U_r``, ``U_r`` orthonormal): a Cholesky factorization of an ``m x m`` matrix
    from the run's cached ``B^T B`` instead of a QR of the ``D x m`` matrix at every step
    (0.013 vs 0.053 of a stream pass over the 50,000 x 1,280 ``X``, medians of 15 interleaved
    rounds). Householder QR is kept as the fallback when the Cholesky factorization fails or
    its diagonal spans more than 1e4 (forming ``R^T R`` squares the condition number); a
    Gaussian ``B`` with ``m << D`` has condition ~ (sqrt(D) + sqrt(m)) / (sqrt(D) - sqrt(m)),
    1.4 at D = 1,280, m = 30. ``Q`` is formed only when read (:attr:`ProjectionBasis.Q`).
    """
    if public_qr is not None and E_pub is not None:
        Qp, Rp = public_qr
        Ut, s, _ = np.linalg.svd(Rp @ E_pub.astype(np.float64), full_matrices=False)
    else:
        U_full, s, _ = np.linalg.svd(G_pub.astype(np.float64), full_matrices=False)
        Ut = None
    r = int(np.sum(s > s[0] * 1e-6)) if s.size and s[0] > 0 else 0

    def _coef(j: int) -> Optional[np.ndarray]:
        return None if Ut is None else Ut[:, :j].astype(np.float32)

    def _top(j: int) -> np.ndarray:  # (D, j) float64 U_r[:, :j]; only the needed columns formed
        return Qp @ Ut[:, :j] if Ut is not None else U_full[:, :j]

    if k == "rank":
        kk = max(r, 1)
        return ProjectionBasis("sub", _top(kk).astype(np.float32), kk, coef=_coef(kk))
    if k <= r:
        return ProjectionBasis("sub", _top(int(k)).astype(np.float32), int(k), coef=_coef(int(k)))
    U_r = _top(r)
    B64, BtB, _ = b_gram(B)
    K = B64.T @ U_r  # (m, r)
    R = None
    try:
        R = np.linalg.cholesky(BtB - K @ K.T).T  # upper, positive diagonal
        d = np.abs(np.diag(R))
        if not (d.min() > d.max() * 1e-4):
            R = None
    except np.linalg.LinAlgError:
        R = None
    if R is None:  # ill-conditioned (B nearly inside span U_r): Householder QR
        Q, R = np.linalg.qr(B64 - U_r @ K.T)
        return ProjectionBasis("complement", U_r.astype(np.float32), int(k), Q=Q.astype(np.float32), B=B, R=R,
                               coef=_coef(r), U64=U_r, BtU=K)
    return ProjectionBasis("complement", U_r.astype(np.float32), int(k), B=B, R=R, coef=_coef(r), U64=U_r, BtU=K)


class RandomSubspaces:
    """Random orthonormal subspaces of ``R^D`` with the dimension of each projection basis met,
    for AdaMix's Fig. 6 comparison (:func:`subspace_errors`). One subspace per dimension, drawn
    once from ``numpy.random.default_rng(seed)``: it serves an owner's-view diagnostic only,
    never a release, so a seeded (non-secret) generator is right here.

    A basis of dimension ``k`` is compared with a random ``k``-dimensional subspace; for
    ``k > D / 2`` the subspace is stored through its ``D - k`` dimensional complement (the
    projection is then ``V - Q Q^T V``), so memory stays ``D x min(k, D - k)``."""

    def __init__(self, D: int, seed: int = 0):
        self.D = int(D)
        self._rng = np.random.default_rng([int(seed), 0x5B5])
        self._cache: dict[int, tuple[bool, np.ndarray]] = {}

    def project(self, V: np.ndarray, k: int) -> np.ndarray:
        """Projection of the ``(D, C)`` matrix ``V`` on the random ``k``-dimensional subspace."""
        if k not in self._cache:
            comp = k > self.D - k
            m = self.D - k if comp else k
            Q = np.linalg.qr(self._rng.standard_normal((self.D, max(m, 1))))[0][:, :m]
            self._cache[k] = (comp, Q)
        comp, Q = self._cache[k]
        V64 = np.asarray(V, dtype=np.float64)
        P = Q @ (Q.T @ V64) if Q.shape[1] else np.zeros_like(V64)
        return V64 - P if comp else P


def subspace_errors(S: np.ndarray, basis: "ProjectionBasis", random: RandomSubspaces) -> tuple[float, float]:
    """AdaMix Fig. 6: relative reconstruction errors ``||S - P S||_F / ||S||_F`` of the clipped
    private gradient sum ``S`` (``(D, C)``, before noise) for ``P`` the run's projection on the
    public-gradient subspace (:meth:`ProjectionBasis.project`) and for a random subspace of the
    same dimension. Both in ``[0, 1]``; ``(nan, nan)`` when ``S = 0``.

    Owner's view: it reads the private sum before the noise, so it is not covered by the run's
    ε and is shown to the data owner only."""
    S64 = np.asarray(S, dtype=np.float64)
    norm = float(np.linalg.norm(S64))
    if norm == 0.0:
        return float("nan"), float("nan")
    pub = float(np.linalg.norm(S64 - np.asarray(basis.project(S), dtype=np.float64))) / norm
    rnd = float(np.linalg.norm(S64 - random.project(S64, basis.dim))) / norm
    return min(pub, 1.0), min(rnd, 1.0)
