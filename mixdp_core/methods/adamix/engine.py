"""NoisyGD engine (AdaMix Alg. 1 and Alg. 2) for the linear softmax head.

One loop implements every private method of the AdaMix family; the methods in
:mod:`mixdp_core.methods.adamix` (:mod:`.private`) only choose its options.

Privacy (add/remove one private sample, AdaMix Sec. 3.1, Prop. 2 and 5). At step ``t`` the
only quantity computed from private data and released is

    ``R_t = U^T ( sum_i clip_{tau_t}(g_i(w_t)) ) + n_t``,   ``n_t ~ N(0, sigma^2 tau_t^2 I_{k x C})``

where ``g_i = x_i (p_i - y_i)^T`` is sample ``i``'s ``(D, C)`` gradient,
``clip_tau(g) = g * min(1, tau / ||g||_F)``, and ``U`` (``D x k``, orthonormal; ``U = I`` without
projection) depends only on public data and on ``w_t`` (itself a function of earlier releases).
Adding or removing one private sample changes the clipped sum by one term of norm
``<= tau_t`` and ``||U^T v|| <= ||v||``, so the **L2 sensitivity of R_t is tau_t** and each
step is a Gaussian mechanism with noise multiplier ``sigma`` (noise std / sensitivity). The
threshold ``tau_t`` is computed from public data only (or fixed), so the adaptive
composition of ``T`` steps is ``sqrt(T)/sigma``-GDP (Dong et al., Lemma 8 of the AdaMix
appendix): :class:`mixdp_core.accounting.ComposedGaussian` ``(sigma, T)``. Everything else in
the update (public gradient, weight decay, back-projection ``U R_t``, averaging) is
post-processing. ``T`` is ``accounting.calibrate_steps(sigma, eps, delta)``, never exceeded.

Per-instance DP (AdaMix App. C, Prop. 14): sample ``i``'s contribution at step ``t`` has norm
``r_{i,t} tau_t`` with ``r_{i,t} = min(1, tau_t/||g_i||) ||U^T x_i|| ||p_i - y_i|| / tau_t <= 1``;
it is ``mu_i = sqrt(sum_t r_{i,t}^2) / sigma``-pGDP. ``pdp_sq_ratio_sum`` accumulates
``sum_t r_{i,t}^2``; a sample clipped at every step with ``U^T x_i = x_i`` has ``r = 1`` and
``eps_i = eps``.

Projection (Alg. 2, "Adaptive subspace projection"): ``U`` is the left-singular basis of the
public gradient ``G_pub(w_t)`` (``D x C``, rank ``r <= C``), top directions first. For
``k <= r`` it is ``U_r[:, :k]``; for ``k > r`` (the paper's 2000 of 2048 ResNet-50 dims, 500
of 512 CLIP dims) the basis is completed orthonormally: we drop the ``m = D - k`` directions
``Q = orth((I - U_r U_r^T) B)`` with ``B`` a fixed data-independent Gaussian ``D x m``
matrix, i.e. ``U U^T = I - Q Q^T``. Then ``||U^T x||^2 = ||x||^2 - ||Q^T x||^2`` and
``X Q = (X B - (X U_r)(U_r^T B)) R^{-1}`` need only ``X B`` (once) and ``X U_r`` (the fused
path uses the cheaper low-rank form of :func:`_complement_maps`: ``||P_B x||^2`` once per run,
then ``2 r`` dot products per row). Since
``G_pub = X_pub^T E_pub``, ``U_r = Q_p U~_r`` with ``X_pub^T = Q_p R_p`` (thin QR, once) and
``U~`` the left singular vectors of the small ``R_p E_pub``; so ``X U_r = (X Q_p) U~_r`` from
a cached ``N x n_pub`` matrix (when ``n_pub < D``; otherwise ``X U_r`` is fused with the
forward product ``X W``). No per-sample gradient and no ``N x D x k`` product is formed.
The noise ``U n_t`` (``n_t ~ N(0, s^2 I_k)``) is drawn as ``U U^T z`` with
``z ~ N(0, s^2 I_D)``, which has the same distribution.

Kernels: the clipped sum is computed by :func:`private_release` (blocked numpy, or for large
float32 problems the fused numba kernel of :mod:`mixdp_core.methods._fused_kernel`) or, with
``device="cuda"``, by the torch kernel of :mod:`mixdp_core.methods._torch_kernel`. All compute
the same quantity; the noise is drawn here on the host and the projection applied after, so
the mechanism, its sensitivity and the accounting do not depend on the kernel.
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from ... import accounting
from ...randomness import SECURE, noise_rng
from .._linear import error_rate, row_norms, softmax_residual, xt_dot
from ..base import OnStep, StepRecord

#: Paper's projection ratio (AdaMix App. A.6: 2000 of 2048 ResNet-50 dims, 500 of 512 CLIP).
PAPER_PROJECTION_RATIO = 2000.0 / 2048.0


@dataclass
class NoisyGDProblem:
    """Normalized data for one NoisyGD run.

    Attributes:
        X_private, y_private: rows protected by DP (for ``fully_private`` this includes the
            public rows, stacked *after* the private ones).
        X_public, y_public: public rows (possibly empty ``(0, D)``).
        X_test, y_test: evaluation rows (diagnostic only), or ``None``.
        n_classes: C.
    """

    X_private: np.ndarray
    y_private: np.ndarray
    X_public: np.ndarray
    y_public: np.ndarray
    X_test: Optional[np.ndarray]
    y_test: Optional[np.ndarray]
    n_classes: int


@dataclass
class NoisyGDOptions:
    """Options of :func:`run_noisygd` (validated by the method configs).

    Attributes:
        noise_multiplier: sigma.
        steps: T (calibrated by the caller).
        target_delta: delta for the epsilon reported in step records.
        clip: ``"fixed"`` (tau = ``clip_norm``), ``"percentile"`` (tau_t = q-th percentile of
            public per-sample gradient norms, Alg. 2) or ``"public_mean"`` (tau_t = norm of
            the mean public gradient, the PPGD rule).
        clip_norm: fixed tau.
        clip_percentile: q in (0, 100].
        projection_dim: k, ``"rank"`` (k = rank of ``G_pub`` at each step, ``<= C - 1``
            since the rows of ``P - Y`` sum to zero), or ``None`` for no projection.
        use_public_gradient: add the exact public gradient sum ``G_pub`` to the update.
        schedule: ``"smooth"`` (default of the methods; mean-loss scale, see
            :func:`run_noisygd`), ``"theorem3"`` (eta_t = 2/(lambda (t+1)) on the summed loss,
            output the weighted average ``2/(T(T+1)) sum_t t w_t`` of Thm. 3) or
            ``"constant"`` (eta, last iterate).
        learning_rate: constant eta (sum-loss scale, as in the paper).
        weight_decay: lambda (sum-loss scale for ``theorem3``/``constant``, mean-loss scale
            for ``smooth``), decay centred at ``w_ref``.
        n_hat: ``smooth`` only: the (noisy, released) number of rows the summed gradient
            covers, private + public; the summed update is divided by it (post-processing).
        smoothness: ``smooth`` only: beta, an upper bound on the smoothness of one sample's
            loss. For the softmax cross-entropy of a linear head the Hessian is
            ``(diag p - p p^T) (x) x x^T`` whose norm is ``<= ||x||^2 / 2``; rows are
            L2-normalized, so beta = 1/2 (a property of the model, no data involved). The
            step also uses the sharper clip-aware bound of :func:`clipped_smoothness`.
        n_hat_private: ``smooth`` only: the private part of ``n_hat``.
        ball_radius: radius ``R`` of the constraint set ``W = {w : ||w - w_ref|| <= R}`` of
            Thm. 3 / Alg. 1 (projected GD); ``None`` = unconstrained.
        releases_before: Gaussian releases of the same noise multiplier (and sensitivity
            ratio 1) already made on this data before step 1 (e.g. the noisy count); the
            epsilon in the step records includes them.
        eval_every: test error every this many steps (and at the last step).
        seed: seed of the noise and of the projection completion.
        device: where the private release runs (:func:`mixdp_core.methods._torch_kernel.resolve_device`):
            ``"cpu"`` (this module's numpy / fused kernel), ``"cuda"`` (the torch kernel on the
            GPU), ``"auto"`` (CUDA when available and ``X_private`` has at least
            ``AUTO_CUDA_MIN_BYTES``, else cpu) or ``"torch_cpu"`` (torch on the CPU, for
            tests). Every device releases the same quantity with the same noise (drawn here,
            on the host), so the accounting does not depend on it.
    """

    noise_multiplier: float
    steps: int
    target_delta: float
    clip: str = "percentile"
    clip_norm: float = 1.0
    clip_percentile: float = 90.0
    projection_dim: Any = None
    use_public_gradient: bool = True
    schedule: str = "theorem3"
    learning_rate: float = 1e-3
    weight_decay: float = 1.0
    eval_every: int = 10
    seed: int = 0
    noise: str = SECURE
    n_hat: Optional[float] = None
    n_hat_private: Optional[float] = None
    smoothness: float = 0.5
    ball_radius: Optional[float] = None
    releases_before: int = 0
    device: str = "auto"


@dataclass
class NoisyGDResult:
    """Output of :func:`run_noisygd`."""

    W: np.ndarray
    steps: int
    history: list[StepRecord] = field(default_factory=list)
    pdp_sq_ratio_sum: np.ndarray = field(default_factory=lambda: np.zeros(0))
    clip_norms: list[float] = field(default_factory=list)
    #: the output (released average) after ``snapshot_at`` steps, if asked and reached
    snapshot: Optional[np.ndarray] = None


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


def percentile_linear(a: np.ndarray, q: float) -> float:
    """``np.percentile(a, q)`` (default ``"linear"`` method), bit for bit, for a small 1-d ``a``.

    Why not ``np.percentile``: its generic machinery costs ~70 us per call, paid at every step
    for a few dozen public norms (~40 ms of a 206-step digits run, a few % of the 1.5 s start-up
    budget). Same arithmetic as numpy: virtual index ``(n - 1) q / 100`` and numpy's two-sided
    ``_lerp`` (``b - (b - a)(1 - g)`` when ``g >= 0.5``), so the threshold is unchanged.
    """
    v = np.sort(np.asarray(a, dtype=np.float64).ravel())
    n = v.size
    vi = (n - 1) * (float(q) / 100.0)
    if vi >= n - 1:
        return float(v[-1])
    if vi <= 0:
        return float(v[0])
    lo = math.floor(vi)
    g = vi - lo
    x0, x1 = float(v[lo]), float(v[lo + 1])
    d = x1 - x0
    return x1 - d * (1.0 - g) if g >= 0.5 else x0 + d * g


def clip_threshold(kind: str, pub_norms: np.ndarray, G_pub_mean_norm: float, *, clip_norm: float, percentile: float) -> float:
    """tau_t from public data only (never from private data)."""
    if kind == "fixed":
        return float(clip_norm)
    if pub_norms.size == 0:
        raise ValueError("adaptive clipping needs public samples")
    if kind == "percentile":
        tau = percentile_linear(pub_norms, percentile)
    elif kind == "public_mean":
        tau = float(G_pub_mean_norm)
    else:  # pragma: no cover - validated by configs
        raise ValueError(kind)
    return max(tau, 1e-12)


def clipped_smoothness(tau: float, beta: float = 0.5) -> float:
    """Lipschitz constant of one sample's *clipped* gradient map ``w -> clip_tau(g(w))``.

    For softmax cross-entropy with ``||x|| = 1``: ``H = (diag p - p p^T) (x) x x^T`` has
    ``||H|| <= tr(diag p - p p^T) = 1 - ||p||^2 <= 2 (1 - p_y) <= 2 ||p - y|| = 2 ||g||``
    (and ``<= beta = 1/2``). Where the sample is clipped the map is ``tau g/||g||`` with
    Jacobian ``(tau/||g||) (I - u u^T) H``, of norm ``<= (tau/||g||) 2 ||g|| = 2 tau``; where
    it is not, ``||H|| <= 2 ||g|| <= 2 tau``. The map is continuous and piecewise smooth, so
    it is ``min(beta, 2 tau)``-Lipschitz: clipping at a small ``tau`` makes the (Huberized)
    objective proportionally smoother, and the descent-lemma step ``1/beta_eff`` larger.
    A property of the model and ``tau`` only (no data).
    """
    return float(min(beta, 2.0 * tau))


def averaged_logit_noise_std(*, step_cap: float, weight_decay: float, steps: int, noise_std: float) -> float:
    """Std of one logit's noise in the released t-weighted average of the ``smooth`` schedule.

    Model (public inputs only): a unit-norm row ``x`` sees, at step ``t``, the noise
    ``x . (eta_t n_t / n_hat)`` of std ``eta_t s`` (``s = sigma tau / n_hat``, the mean-scale
    noise std per coordinate); the iterates follow the linear recursion
    ``e_{t+1} = (1 - eta_t lambda) e_t - eta_t s xi_t`` (weight decay contracts, the loss
    curvature is ignored, so this over-estimates), ``e_1 = 0`` at the start, with
    ``eta_t = min(step_cap, 2 / (lambda (t + 1)))`` as in :func:`run_noisygd`, and the output is
    ``sum_t 2 t e_t / (T (T + 1))`` (Thm. 3's average; the last step's noise never enters it).

    Returns:
        ``s * sqrt(sum_j (eta_j A_j)^2)`` with ``A_j`` the total weight the average puts on the
        noise of step ``j`` (backward recursion ``A_j = c_{j+1} + (1 - eta_{j+1} lambda) A_{j+1}``).
    """
    T = int(steps)
    if T <= 1 or noise_std <= 0:
        return 0.0
    t = np.arange(1, T + 1, dtype=float)
    eta = np.full(T, float(step_cap))
    if weight_decay > 0:
        eta = np.minimum(eta, 2.0 / (weight_decay * (t + 1.0)))
    c = 2.0 * t / (T * (T + 1.0))  # c[t-1]: weight of iterate t
    A = np.zeros(T + 1)  # A[j]: weight on the noise injected at step j (enters iterates j+1..T)
    for j in range(T - 1, 0, -1):
        A[j] = c[j] + (1.0 - eta[j] * weight_decay) * A[j + 1]
    return float(noise_std * math.sqrt(float(np.sum((eta[: T - 1] * A[1:T]) ** 2))))


def theorem3_weight_decay(
    *, lipschitz: float, noise_std: float, dim: int, steps: int, ref_distance: float, include_optimization: bool = False
) -> float:
    """lambda of Thm. 3 (noise term only, default) or of the full Thm.-15 bound.

    The Thm.-3 bound for NoisyGD with eta_t = 2/(lambda (t+1)) and weighted averaging is
    ``2 (L^2 + d s^2) / (lambda T) + lambda R^2 / 2`` (``L``: Lipschitz constant of the summed
    loss, ``s``: noise std per coordinate, ``d``: noise dimension, ``R = ||w* - w_ref||``).
    Thm. 3 keeps the noise term only (the regime T -> infinity) and balances
    ``d tau^2 / (lambda rho) + lambda R^2 / 2`` with ``rho = T / (2 sigma^2)``, giving

        ``lambda = (tau / R) sqrt(2 d / rho) = 2 s sqrt(d) / (R sqrt(T))``

    (the paper prints this fraction inverted). It depends on T and sigma only through the
    privacy level mu = sqrt(T)/sigma, and shrinks to 0 as epsilon grows.
    ``include_optimization=True`` also keeps ``L^2``:
    ``lambda = 2 sqrt(L^2 + d s^2) / (R sqrt(T))`` (worst case, much stronger decay).
    """
    G2 = dim * noise_std**2 + (lipschitz**2 if include_optimization else 0.0)
    return 2.0 * math.sqrt(G2) / (max(ref_distance, 1e-12) * math.sqrt(max(steps, 1)))


def effective_weight_decay(*, noise_std: float, steps: int, ref_distance: float, hessian_trace: float = 1.0) -> float:
    r"""λ of the Thm.-3 balance with the noise dimension replaced by what the noise costs.

    Thm. 3 charges the noise ``d s²`` per step (``d`` = noise dimension, ``s`` = std per
    coordinate) through the loss's Lipschitz constant: every one of the ``d = k C``
    directions is charged as if the loss were curved along it. Near the solution the noise
    costs loss ``½ ξᵀ H ξ`` instead; with weight decay ``λ`` a direction of curvature ``h``
    holds variance ``∝ s²/(h + λ)`` and costs ``∝ s² h/(h + λ)``, so the dimension that
    counts is the ridge degrees of freedom ``d_λ = tr(H (H + λI)⁻¹) <= tr(H)/λ``. Balancing
    ``2 d_λ s²/(λ T)`` against ``λ R²/2`` as Thm. 3 does gives

    .. math:: λ = \left(\frac{4\,\mathrm{tr}(H)\,s^2}{R^2 T}\right)^{1/3},

    which does not grow with ``k C``. For the mean softmax loss on unit-norm rows
    ``tr(H) = mean_i ||x_i||² (1 − ||p_i||²) <= 1`` (``hessian_trace``'s default: a bound
    that reads no data). Use as ``min(theorem3 rule, this)``: both bound the same noise term.
    """
    return (4.0 * float(hessian_trace) * float(noise_std) ** 2
            / (max(float(ref_distance), 1e-12) ** 2 * max(int(steps), 1))) ** (1.0 / 3.0)


class ProjectionBasis:
    """Orthonormal basis ``U`` (``D x k``) of the AdaMix projection, stored implicitly.

    Attributes:
        mode: ``"sub"`` (``U = U_r[:, :k]`` stored in ``U``) or ``"complement"`` (``U`` spans the
            orthogonal complement of the ``m = D - k`` columns of ``Q``; ``U_r`` (the top
            singular directions of ``G_pub``) lies inside it).
        U: ``(D, k)`` for ``sub``; for ``complement`` the ``(D, r)`` top directions ``U_r``.
        Q: ``(D, m)`` dropped directions (``complement`` only), float32. Formed on first access
            when the basis was built from ``R`` alone (:func:`projection_basis`): the release
            needs only ``B``, ``U_r``, ``K = B^T U_r`` and ``R`` (:meth:`project`, the engine's
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
            B64 = _b_gram(self.B)[0]
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


class _DerivedCache:
    """Values computed from arrays, kept while every source array lives (weak references, so a
    finished run's arrays free their entries; at most ``limit`` entries). The sources must not
    change in place: the key is their identity, not their content."""

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


_B_GRAMS = _DerivedCache()


def _b_gram(B: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    B64, BtB, _ = _b_gram(B)
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


#: Rows of ``X`` per block in :func:`private_release`: the block must stay in cache between
#: the forward and the backward product, and be large enough that the per-block numpy calls
#: are amortized. Measured (``benchmarks/train.py``, key ``release_over_stream_by_block_rows``;
#: 50,000 x 1,280, C = 10, 1 thread, medians of 15 interleaved rounds): 128: 5.85x,
#: 256: 5.09x, 384: 4.85x, 512: 5.27x, 768: 5.08x, 1024: 4.97x, 2048: 5.30x, 4096: 5.33x the
#: streaming pass; 256-1024 are within the noise of a shared machine, 128 and >= 2048 worse.
DEFAULT_BLOCK_ROWS = 384

#: Without ``block_rows``, an ``X`` of at most this many bytes is processed as one block.
SINGLE_BLOCK_BYTES = 2 << 20

#: Without ``fused``, :func:`private_release` uses the fused one-pass kernel
#: (:mod:`mixdp_core.methods._fused_kernel`) for a float32 ``X`` of at least this many bytes.
#: Why a threshold: importing numba and loading the cached machine code costs ~0.75-0.9 s of
#: CPU once per process (the first compilation on a machine ~4 s; measured on the development
#: machine), while the kernel saves ~2 streaming passes over ``X`` per step
#: (``benchmarks/train.py``: ``step_over_stream_floor_*`` vs ``*_numpy``). At 64 MiB one pass
#: is ~5 ms, so the import is repaid after ~80-90 steps; the calibrated T at sigma = 20 is a
#: few hundred (206 for digits at epsilon = 3). Below it (digits: 0.5 MiB) the numpy kernel
#: keeps the start-up fast (issue 13's 1.5 s CPU budget of a digits run) and numba is never
#: imported.
FUSED_MIN_BYTES = 64 << 20

_WORKSPACES = threading.local()

#: The backward product ``(c E)^T X_b`` is taken with ``E^T`` padded by zero rows to a multiple
#: of this many classes: OpenBLAS' single-precision kernels run ``12 x b`` by ``b x D`` faster
#: than ``10 x b`` by ``b x D`` (``benchmarks/train.py``, section ``blocks``). 1 = no padding.
BACKWARD_ROW_MULTIPLE = 4


def _padded_classes(C: int) -> int:
    k = max(1, int(BACKWARD_ROW_MULTIPLE))
    return -(-C // k) * k


class ReleaseWorkspace:
    """Block-sized buffers of :func:`private_release`, allocated once and reused across steps.

    Only ``O(block_rows * (C + r + m))`` memory: nothing of size ``N x C`` is allocated per
    step (the ``(N,)`` outputs ``ratio`` and ``loss`` can be passed in too).
    """

    def __init__(self, block_rows: int, n_cols: int, C: int, D: int, dtype: Any, m: int = 0, r: int = 0):
        b = int(block_rows)
        self.Z = np.empty((b, n_cols), dtype)  # [logits | X U_r] of the block (forward product)
        # logits -> E = softmax - onehot, transposed (C x nb, contiguous): the per-sample
        # reductions over the C classes then run along contiguous rows of length nb.
        self.Cp = _padded_classes(C)
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


_POOLS: dict = {}
_POOLS_LOCK = threading.Lock()


def _pool(n: int):
    """A persistent thread pool with ``n`` workers (created on first use)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(n)
        if pool is None:
            from concurrent.futures import ThreadPoolExecutor

            pool = _POOLS[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="mixdp-release")
        return pool


_SIDE_BY_SIDE = _DerivedCache()


def _side_by_side(A: np.ndarray, B: np.ndarray, dtype: Any) -> np.ndarray:
    """``[A | B]`` as one C-contiguous array, built once per pair of arrays (a run's cached
    ``X B`` and ``X Q_p``) and kept while both live. The arrays must not change in place."""
    return _SIDE_BY_SIDE.get(
        (A, B), lambda: np.concatenate([np.asarray(A, dtype=dtype), np.asarray(B, dtype=dtype)], axis=1),
        extra=(np.dtype(dtype),))


_BASES = _DerivedCache()


def _complement_base(XB: np.ndarray, B: np.ndarray, x_norm: np.ndarray) -> np.ndarray:
    """``(N,)`` float64 ``||x_i||^2 - ||P_B x_i||^2`` (``P_B`` the orthogonal projector on
    ``span B``, ``||P_B x||^2 = b^T (B^T B)^{-1} b`` with ``b = B^T x`` the cached row of ``X B``).

    Fixed for a run (``B`` is): computed once per ``(X B, B, x_norm)`` triple and kept while the
    three arrays live (none may change in place); the per-step part is in
    :func:`_complement_maps`.
    """

    def compute():
        L = np.linalg.cholesky(_b_gram(B)[2])  # H = (B^T B)^{-1} = L L^T: b^T H b = ||L^T b||^2
        base = np.square(np.asarray(x_norm, dtype=np.float64))
        for a in range(0, XB.shape[0], 8192):
            Y = np.asarray(XB[a:a + 8192], dtype=np.float64) @ L
            base[a:a + 8192] -= np.einsum("ij,ij->i", Y, Y)
        return base

    return _BASES.get((XB, B, x_norm), compute)


def _complement_maps(basis: ProjectionBasis, n_pub: int) -> tuple[np.ndarray, np.ndarray]:
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
    is fixed for the run (:func:`_complement_base`).
    """
    _, _, H = _b_gram(basis.B)
    m = basis.B.shape[1]
    r = basis.U.shape[1] if n_pub else 0
    if r == 0:  # U_r empty (no public directions): ||Q^T x||^2 = ||P_B x||^2
        return np.zeros((0, m + n_pub), np.float32), np.zeros((0, n_pub), np.float32)
    K = basis.BtU if basis.BtU is not None else _b_gram(basis.B)[0].T @ basis.U.astype(np.float64)
    HK = H @ K
    L = np.linalg.cholesky(np.eye(r) - K.T @ HK)
    coef = basis.coef.astype(np.float64)
    M1T = np.linalg.solve(L, np.concatenate([-HK, coef], axis=0).T)  # L^{-1} [-H K ; coef]^T
    return np.ascontiguousarray(M1T, dtype=np.float32), np.ascontiguousarray(coef.T, dtype=np.float32)


def release_workspace(block_rows: int, n_cols: int, C: int, D: int, dtype: Any, m: int = 0, r: int = 0) -> ReleaseWorkspace:
    """The calling thread's cached :class:`ReleaseWorkspace` for these sizes (made on first use)."""
    key = (int(block_rows), int(n_cols), int(C), int(D), np.dtype(dtype), int(m), int(r), _padded_classes(C))
    cache = getattr(_WORKSPACES, "cache", None)
    if cache is None:
        cache = _WORKSPACES.cache = {}
    ws = cache.get(key)
    if ws is None:
        if len(cache) >= 8:
            cache.clear()
        ws = cache[key] = ReleaseWorkspace(*key[:-1])
    return ws


def _fused_available() -> bool:
    """Whether the fused kernel can run (imports numba on the first call: large problems only)."""
    from .. import _fused_kernel

    return _fused_kernel.available()


def _fused_clipped_sum(X, y, W, x_norm, tau, ce_out, loss_out, threads) -> np.ndarray:
    """``(C, D)`` float64 ``sum_i c_i (p_i - y_i) x_i^T`` by the fused kernel; fills ``ce_out``
    with ``c_i ||p_i - y_i||`` and ``loss_out``. ``threads`` > 1: contiguous row ranges (the
    kernel releases the GIL), partial sums added in order."""
    from .. import _fused_kernel

    N, D = X.shape
    Xc = np.ascontiguousarray(X, dtype=np.float32)
    yc = np.ascontiguousarray(y, dtype=np.int64)
    VT = _fused_kernel.shifted_weights(W)  # (C - 1, D): logits relative to the last class
    xn = np.ascontiguousarray(x_norm, dtype=np.float64)
    C = VT.shape[0] + 1

    def part(lo: int, hi: int) -> np.ndarray:
        S = np.zeros((C, D))
        _fused_kernel.clipped_sum(Xc, yc, VT, xn, float(tau), lo, hi, S, ce_out, loss_out)
        return S

    n_threads = max(1, min(int(threads or 1), -(-N // 4096)))
    if n_threads == 1:
        return part(0, N)
    per = ((N + n_threads - 1) // n_threads + 3) // 4 * 4  # whole groups of 4 rows per thread
    bounds = [(lo, min(N, lo + per)) for lo in range(0, N, per)]
    parts = list(_pool(len(bounds)).map(lambda lh: part(*lh), bounds))
    S = parts[0]
    for P in parts[1:]:
        S += P
    return S


def private_release(
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
    block_rows: Optional[int] = None,
    ratio_out: Optional[np.ndarray] = None,
    loss_out: Optional[np.ndarray] = None,
    threads: Optional[int] = None,
    fused: Optional[bool] = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Gaussian-mechanism release of AdaMix / NoisyGD, back-projected to ``(D, C)``.

    Computes ``U U^T (sum_i clip_tau(g_i) + noise)`` (``U = I`` when ``basis`` is None), which
    is a post-processing of ``U^T sum_i clip_tau(g_i) + U^T noise``; with
    ``noise ~ N(0, sigma^2 tau^2 I_{D x C})``, ``U^T noise ~ N(0, sigma^2 tau^2 I_{k x C})``.
    Sensitivity of ``U^T sum_i clip_tau(g_i)`` under add/remove of one row: ``tau``
    (``clip_tau(g) = g min(1, tau/||g||_F)``, ``||g_i||_F = ||x_i|| ||p_i - y_i||``).

    Per-sample quantities are closed-form: ``||g_i|| = ||x_i|| ||p_i - y_i||`` and
    ``||U^T clip(g_i)|| = c_i ||U^T x_i|| ||p_i - y_i||``; the only products with ``X`` are
    ``X [W | U_r]`` and ``(c E)^T X``. They are done block by block of rows, the backward
    product right after the forward one, so each block of ``X`` is read from memory once per
    step (one pass over ``X``); the softmax, clip factors and projection norms work in place
    in block-sized buffers (:class:`ReleaseWorkspace`, cached per thread and reused across
    steps). Computation is in ``X``'s floating dtype (float32 for float32 features); the
    per-sample squared norms are summed in that dtype, their square roots, the clip factors
    and ``ratio`` are float64.

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
        block_rows: rows of ``X`` per block (default :data:`DEFAULT_BLOCK_ROWS`, or all rows
            when ``X`` has at most :data:`SINGLE_BLOCK_BYTES`).
        ratio_out, loss_out: optional ``(N,)`` float64 arrays receiving ``ratio`` / ``loss``.
        threads: worker threads (default 1); each takes a contiguous range of whole blocks
            with its own buffers and partial sum (run BLAS single-threaded meanwhile). The
            result equals the 1-thread one up to float rounding of the partial sums.
        fused: use the fused one-pass kernel (:mod:`mixdp_core.methods._fused_kernel`: each
            row of ``X`` read once per step for logits, softmax residual, clip factor and the
            clipped sum); it computes the same quantity (same sensitivity ``tau``, same noise
            and projection here). ``None`` (default): when numba is installed, ``X`` is a
            C-contiguous float32 array of at least :data:`FUSED_MIN_BYTES` and ``X U_r`` needs
            no product with ``X`` (no projection, or the cached ``X_Qp``); ``True`` forces it
            (``ValueError`` if the case is not supported), ``False`` keeps the numpy kernel.

    Returns:
        ``(released, ratio, loss)``: the back-projected noisy sum ``(D, C)``, ``r_i =
        ||U^T clip(g_i)|| / tau`` (``(N,)``, ``<= 1``) and per-sample losses.
    """
    N, D = X.shape
    C = W.shape[1]
    ft = np.result_type(X.dtype, np.float32)
    if block_rows is None:  # a small X is one block: fewer numpy calls, it fits in cache anyway
        block_rows = N if N * D * np.dtype(ft).itemsize <= SINGLE_BLOCK_BYTES else DEFAULT_BLOCK_ROWS
    b = max(1, int(block_rows))
    b = min(b, max(N, 1))
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

    supported = ft == np.float32 and X.dtype == np.float32 and (not has_ur or via_qp)
    if fused is None:
        fused = supported and X.flags.c_contiguous and X.nbytes >= FUSED_MIN_BYTES and _fused_available()
    elif fused and not (supported and _fused_available()):
        raise ValueError("fused kernel: needs numba, float32 X and no projection or a cached X_Qp")
    if fused:
        ST = _fused_clipped_sum(X, y, Wf, x_norm, tau, ratio, loss, threads)
        # ratio holds c_i ||p_i - y_i|| -> r_i = c_i ||U^T x_i|| ||p_i - y_i|| / tau, block by block
        if basis is not None and (complement or via_qp):
            from .. import _fused_kernel

            if complement:  # ||U^T x||^2 from [X B | X Q_p] and low-rank maps (see _complement_maps)
                base = _complement_base(XB, basis.B, x_norm)
                A = _side_by_side(XB, X_Qp, np.float32) if via_qp else np.ascontiguousarray(XB, dtype=np.float32)
                M1T, M2T = _complement_maps(basis, X_Qp.shape[1] if via_qp else 0)
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
                    _fused_kernel.sq_norms_lowrank(A, M1T, m_cols, M2T, base, sl.start, sl.stop, pn)
                else:
                    _fused_kernel.row_sq_norms(A, MT, sl.start, sl.stop, pn)
                np.sqrt(pn, out=pn)
            else:  # a basis without directions: U^T x = 0
                pn = np.zeros(sl.stop - sl.start)
            rb = ratio[sl]
            np.multiply(rb, pn, out=rb)
            np.divide(rb, tau, out=rb)
            np.minimum(rb, 1.0, out=rb)
        S = ST.T.astype(ft)
        noisy = S if noise is None else S + noise
        if basis is not None:
            noisy = basis.project(noisy)
        return noisy, ratio, loss

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
            XB_Qp = _side_by_side(XB, X_Qp, ft)

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
        parts = list(_pool(len(bounds)).map(lambda lh: rows(*lh), bounds))
        ST = parts[0]
        for P in parts[1:]:
            ST += P
    S = ST.T
    noisy = S if noise is None else S + noise
    if basis is not None:
        noisy = basis.project(noisy)
    return noisy, ratio, loss


from .._observe import notify_release, step_observer  # noqa: E402  (audits, live view)


def _release_function(device: str, nbytes: int) -> Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The release kernel of a run: this module's :func:`private_release` (looked up when the
    run starts) or the torch kernel on the resolved device."""
    from .._torch_kernel import resolve_device, torch_private_release

    dev = resolve_device(device, nbytes)
    if dev == "numpy":
        return private_release
    return lambda *a, **k: torch_private_release(*a, device=dev, **k)


def run_noisygd(
    problem: NoisyGDProblem,
    W_init: np.ndarray,
    W_ref: np.ndarray,
    opts: NoisyGDOptions,
    *,
    on_step: OnStep | None = None,
    weight_decay_fn: Callable[[float, Optional[int]], float] | None = None,
    step_offset: int = 0,
    total_steps: Optional[int] = None,
    snapshot_at: Optional[int] = None,
) -> NoisyGDResult:
    """Run NoisyGD / AdaMix (Alg. 1 / Alg. 2) for at most ``opts.steps`` steps.

    Args:
        problem: normalized data.
        W_init: ``w_1``.
        W_ref: centre of the weight decay ``lambda/2 ||w - w_ref||^2`` (Thm. 3).
        opts: options.
        on_step: callback; returning True stops before the next noisy release.
        weight_decay_fn: if given, called once as ``fn(tau_1, k)`` to get lambda (used for
            the Thm. 3 rule, which needs the first clip threshold and noise dimension).
        step_offset: noisy steps already spent on the same private data by earlier runs
            (optimistic tuning); step records then number steps and report epsilon
            cumulatively, ``epsilon_spent`` being that of ``step_offset + t`` composed steps.
        total_steps: planned total shown in the records (default ``step_offset + T``).
        snapshot_at: keep a copy of the output after this many steps (``result.snapshot``;
            post-processing of the releases so far, e.g. for the early-checkpoint test).

    Returns:
        :class:`NoisyGDResult` with the output weights (weighted average for ``theorem3``,
        last iterate for ``constant``), steps executed, history and pDP sums.
    """
    Xq, yq = problem.X_private, problem.y_private
    Xp, yp = problem.X_public, problem.y_public
    N, D = Xq.shape
    C = problem.n_classes
    T = int(opts.steps)
    sigma = float(opts.noise_multiplier)
    rng = noise_rng(opts.noise, opts.seed, 0xADA)
    release = _release_function(opts.device, Xq.nbytes)

    xq_norm = row_norms(Xq)
    has_pub = Xp.shape[0] > 0
    xp_norm = row_norms(Xp) if has_pub else np.zeros(0)

    k = opts.projection_dim
    span_basis = None
    if k == "span":
        # Fixed basis of span(X_pub^T): every public gradient G_pub(w) = X_pub^T E(w), at
        # every w, lies in span(X_pub^T) (x) R^C, so this is the union of AdaMix's subspaces
        # U_t over all iterates. Public data only.
        span_basis, k = resolve_span(Xp)
    if k is not None and k != "rank" and k >= D:
        k = None  # projecting on all of R^D is the identity
        span_basis = None
    # Fixed data-independent directions used to complete the basis when k > rank(G_pub).
    B = XB = None
    if k is not None and k != "rank" and span_basis is None:
        m = D - k
        if m > 0:
            B = np.random.default_rng([opts.seed, 0xB]).standard_normal((D, m)).astype(np.float32)
            XB = Xq @ B  # (N, m), once

    # Public QR: X U_r = (X Q_p) coef at every step from a cached N x n_pub product.
    public_qr = X_Qp = None
    if k is not None and has_pub and Xp.shape[0] < D and span_basis is None:
        public_qr = np.linalg.qr(Xp.T.astype(np.float64))
        X_Qp = Xq @ public_qr[0].astype(np.float32)

    W = np.array(W_init, dtype=np.float32, copy=True)
    W_ref = np.asarray(W_ref, dtype=np.float32)
    W_avg = W.copy()
    off = int(step_offset)
    pre = int(opts.releases_before)
    eps_curve = (
        accounting.privacy_curve(noise_multiplier=sigma, steps=off + pre + T, delta=opts.target_delta)[off + pre:]
        if T > 0
        else np.zeros(0)
    )
    smooth = opts.schedule == "smooth"
    if smooth and (opts.n_hat is None or not opts.n_hat > 0):
        raise ValueError("schedule 'smooth' needs n_hat > 0 (the released row count)")
    inv_n = np.float32(1.0 / float(opts.n_hat)) if smooth else np.float32(1.0)
    R_ball = float(opts.ball_radius) if opts.ball_radius is not None else None
    planned = int(total_steps) if total_steps is not None else off + T
    pdp = np.zeros(N)
    # (N,) per-step outputs of the release in buffers reused across steps: fresh 400 KB arrays
    # for ratio, loss and ratio**2 at every step cost ~0.04 of a stream pass over the
    # 50,000 x 1,280 X (allocation and first-touch page faults; 0.004 reused, side by side)
    ratio_buf, loss_buf, sq_buf = np.empty(N), np.empty(N), np.empty(N)
    history: list[StepRecord] = []
    clip_norms: list[float] = []
    lam: Optional[float] = None
    n_all = N + Xp.shape[0]
    executed = 0
    live = step_observer()  # the runner's live view (minority accuracy, pDP so far), else None
    snapshot: Optional[np.ndarray] = None

    for t in range(1, T + 1):
        # --- public quantities (no privacy cost) ---
        if has_pub:
            Ep, loss_p = softmax_residual(Xp @ W, yp)
            G_pub = xt_dot(Xp, Ep)
            pub_norms = xp_norm * row_norms(Ep)
            g_mean_norm = float(np.linalg.norm(G_pub)) / Xp.shape[0]
        else:
            G_pub, loss_p, pub_norms, g_mean_norm = None, np.zeros(0), np.zeros(0), 0.0
        tau = clip_threshold(opts.clip, pub_norms, g_mean_norm, clip_norm=opts.clip_norm, percentile=opts.clip_percentile)

        # --- projection basis from the public gradient (public data only) ---
        if span_basis is not None:
            basis = span_basis
        else:
            basis = projection_basis(G_pub, k, B, public_qr=public_qr, E_pub=Ep) if k is not None else None
        if lam is None:
            k_eff = D if basis is None else basis.dim
            noise_dim = k_eff * C
            lam = float(weight_decay_fn(tau, noise_dim)) if weight_decay_fn is not None else float(opts.weight_decay)

        # --- Gaussian mechanism: noise sigma * tau in the projected space ---
        z = rng.standard_normal((D, C)).astype(np.float32) * np.float32(sigma * tau)
        noisy, ratio, loss_q = release(Xq, yq, W, tau, basis, noise=z, x_norm=xq_norm, XB=XB, X_Qp=X_Qp,
                                       ratio_out=ratio_buf, loss_out=loss_buf)
        pdp += np.square(ratio, out=sq_buf)
        executed = t
        notify_release(t, W, noisy, tau)

        # --- update (post-processing) ---
        grad = noisy
        if G_pub is not None and opts.use_public_gradient:
            grad = grad + G_pub
        if smooth:
            grad = grad * inv_n  # summed -> mean-loss scale (n_hat is released, public)
        grad = grad + np.float32(lam) * (W - W_ref)
        if opts.schedule == "theorem3":
            eta = 2.0 / (lam * (t + 1))
        elif smooth:
            # Thm.-3 schedule capped at 1/(beta_t + lambda), the step of the descent lemma for
            # the mean (clipped) objective: private rows contribute the clip-aware bound
            # min(beta, 2 tau_t), public rows (exact gradients) min(beta, 2 ||g_j||) at w_t.
            beta_pub = (
                float(np.minimum(opts.smoothness, 2.0 * pub_norms).sum())
                if (has_pub and opts.use_public_gradient) else 0.0
            )
            n_priv_hat = float(opts.n_hat_private) if opts.n_hat_private is not None else float(opts.n_hat)
            beta_t = (n_priv_hat * clipped_smoothness(tau, opts.smoothness) + beta_pub) / float(opts.n_hat)
            eta = 1.0 / (beta_t + lam)
            if lam > 0:
                eta = min(eta, 2.0 / (lam * (t + 1)))
        else:
            eta = float(opts.learning_rate)
        averaged = opts.schedule in ("theorem3", "smooth")
        if averaged:
            # w_bar_t = sum_{s<=t} 2 s w_s / (t (t+1)), incremental (Thm. 3); w_t is the
            # iterate at which this step's gradient was taken.
            W_avg = W_avg * np.float32((t - 1) / (t + 1)) + W * np.float32(2.0 / (t + 1))
        W = W - np.float32(eta) * grad
        if R_ball is not None:
            # projection onto W = {||w - w_ref|| <= R} (Alg. 1, last line; post-processing)
            dist = float(np.linalg.norm(W - W_ref))
            if dist > R_ball:
                W = W_ref + (W - W_ref) * np.float32(R_ball / dist)
        out = W_avg if averaged else W
        if t == snapshot_at:
            snapshot = np.array(out, dtype=np.float32)
        clip_norms.append(tau)

        test_err = None
        if problem.X_test is not None and (t % max(1, opts.eval_every) == 0 or t == T):
            test_err = error_rate(problem.X_test, problem.y_test, out)
        train_loss = float((loss_q.sum() + loss_p.sum()) / n_all)
        rec = StepRecord(
            step=off + t,
            total_steps=planned,
            train_loss=train_loss,
            test_error=test_err,
            clip_norm=tau,
            epsilon_spent=float(eps_curve[t - 1]),
            extra={"lr": float(eta), "weight_decay": float(lam)},
        )
        history.append(rec)
        if live is not None:
            live(rec=rec, W=out, pdp_sq=pdp, problem=problem, noise_multiplier=sigma)
        if on_step is not None and on_step(rec):
            break
    out = (W_avg if opts.schedule in ("theorem3", "smooth") else W) if executed > 0 else W
    return NoisyGDResult(W=np.array(out, dtype=np.float32), steps=executed, history=history, pdp_sq_ratio_sum=pdp,
                         clip_norms=clip_norms, snapshot=snapshot)
