"""NoisyGD engine (AdaMix Alg. 1 and Alg. 2) for the linear softmax head.

One loop implements every private method of the AdaMix family; the methods in
:mod:`mixdp_core.methods.adamix` only choose its options.

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
``X Q = (X B - (X U_r)(U_r^T B)) R^{-1}`` need only ``X B`` (once) and ``X U_r``. Since
``G_pub = X_pub^T E_pub``, ``U_r = Q_p U~_r`` with ``X_pub^T = Q_p R_p`` (thin QR, once) and
``U~`` the left singular vectors of the small ``R_p E_pub``; so ``X U_r = (X Q_p) U~_r`` from
a cached ``N x n_pub`` matrix (when ``n_pub < D``; otherwise ``X U_r`` is fused with the
forward product ``X W``). No per-sample gradient and no ``N x D x k`` product is formed.
The noise ``U n_t`` (``n_t ~ N(0, s^2 I_k)``) is drawn as ``U U^T z`` with
``z ~ N(0, s^2 I_D)``, which has the same distribution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from .. import accounting
from ._linear import error_rate, row_norms, softmax_residual, xt_dot
from .base import OnStep, StepRecord

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
        schedule: ``"theorem3"`` (eta_t = 2/(lambda (t+1)), output the weighted average
            ``2/(T(T+1)) sum_t t w_t`` of Thm. 3) or ``"constant"`` (eta, last iterate).
        learning_rate: constant eta (sum-loss scale, as in the paper).
        weight_decay: lambda (sum-loss scale), decay centred at ``w_ref``.
        eval_every: test error every this many steps (and at the last step).
        seed: seed of the noise and of the projection completion.
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


@dataclass
class NoisyGDResult:
    """Output of :func:`run_noisygd`."""

    W: np.ndarray
    steps: int
    history: list[StepRecord] = field(default_factory=list)
    pdp_sq_ratio_sum: np.ndarray = field(default_factory=lambda: np.zeros(0))
    clip_norms: list[float] = field(default_factory=list)


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
    return int(min(int(spec), D))


def clip_threshold(kind: str, pub_norms: np.ndarray, G_pub_mean_norm: float, *, clip_norm: float, percentile: float) -> float:
    """tau_t from public data only (never from private data)."""
    if kind == "fixed":
        return float(clip_norm)
    if pub_norms.size == 0:
        raise ValueError("adaptive clipping needs public samples")
    if kind == "percentile":
        tau = float(np.percentile(pub_norms, percentile))
    elif kind == "public_mean":
        tau = float(G_pub_mean_norm)
    else:  # pragma: no cover - validated by configs
        raise ValueError(kind)
    return max(tau, 1e-12)


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


@dataclass
class ProjectionBasis:
    """Orthonormal basis ``U`` (``D x k``) of the AdaMix projection, stored implicitly.

    Attributes:
        mode: ``"sub"`` (``U = U_r[:, :k]`` stored in ``U``) or ``"complement"`` (``U`` spans the
            orthogonal complement of the ``m = D - k`` columns of ``Q``; ``U_r`` (the top
            singular directions of ``G_pub``) lies inside it).
        U: ``(D, k)`` for ``sub``; for ``complement`` the ``(D, r)`` top directions ``U_r``.
        Q: ``(D, m)`` dropped directions (``complement`` only).
        B: ``(D, m)`` fixed Gaussian matrix with ``Q R = (I - U_r U_r^T) B`` (``complement``).
        R: ``(m, m)`` triangular factor of that QR decomposition (``complement``).
        dim: k.
        coef: ``(n_pub, r)`` with ``U_r = Q_p coef`` when built from the public QR (see
            :func:`projection_basis`), else None.
    """

    mode: str
    U: np.ndarray
    dim: int
    Q: Optional[np.ndarray] = None
    B: Optional[np.ndarray] = None
    R: Optional[np.ndarray] = None
    coef: Optional[np.ndarray] = None

    def project(self, V: np.ndarray) -> np.ndarray:
        """``U U^T V`` for a ``(D, C)`` matrix ``V``."""
        if self.mode == "sub":
            return self.U @ (self.U.T @ V)
        return V - self.Q @ (self.Q.T @ V)


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
    """
    if public_qr is not None and E_pub is not None:
        Qp, Rp = public_qr
        Ut, s, _ = np.linalg.svd(Rp @ E_pub.astype(np.float64), full_matrices=False)
        U_full = Qp @ Ut
    else:
        U_full, s, _ = np.linalg.svd(G_pub.astype(np.float64), full_matrices=False)
        Ut = None
    r = int(np.sum(s > s[0] * 1e-6)) if s.size and s[0] > 0 else 0

    def _coef(j: int) -> Optional[np.ndarray]:
        return None if Ut is None else Ut[:, :j].astype(np.float32)

    if k == "rank":
        kk = max(r, 1)
        return ProjectionBasis("sub", U_full[:, :kk].astype(np.float32), kk, coef=_coef(kk))
    if k <= r:
        return ProjectionBasis("sub", U_full[:, :k].astype(np.float32), int(k), coef=_coef(int(k)))
    U_r = U_full[:, :r]
    B64 = B.astype(np.float64)
    Bp = B64 - U_r @ (U_r.T @ B64)
    Q, R = np.linalg.qr(Bp)
    return ProjectionBasis("complement", U_r.astype(np.float32), int(k), Q=Q.astype(np.float32), B=B, R=R, coef=_coef(r))


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
    rng = np.random.default_rng([opts.seed, 0xADA])

    xq_norm = row_norms(Xq)
    has_pub = Xp.shape[0] > 0
    xp_norm = row_norms(Xp) if has_pub else np.zeros(0)

    k = opts.projection_dim
    if k is not None and k != "rank" and k >= D:
        k = None  # projecting on all of R^D is the identity
    # Fixed data-independent directions used to complete the basis when k > rank(G_pub).
    B = XB = None
    if k is not None and k != "rank":
        m = D - k
        if m > 0:
            B = np.random.default_rng([opts.seed, 0xB]).standard_normal((D, m)).astype(np.float32)
            XB = Xq @ B  # (N, m), once

    # Public QR: X U_r = (X Q_p) coef at every step from a cached N x n_pub product.
    public_qr = X_Qp = None
    if k is not None and has_pub and Xp.shape[0] < D:
        public_qr = np.linalg.qr(Xp.T.astype(np.float64))
        X_Qp = Xq @ public_qr[0].astype(np.float32)

    W = np.array(W_init, dtype=np.float32, copy=True)
    W_ref = np.asarray(W_ref, dtype=np.float32)
    W_avg = W.copy()
    off = int(step_offset)
    eps_curve = (
        accounting.privacy_curve(noise_multiplier=sigma, steps=off + T, delta=opts.target_delta)[off:]
        if T > 0
        else np.zeros(0)
    )
    planned = int(total_steps) if total_steps is not None else off + T
    pdp = np.zeros(N)
    history: list[StepRecord] = []
    clip_norms: list[float] = []
    lam: Optional[float] = None
    n_all = N + Xp.shape[0]
    executed = 0
    from ..runs.live import observer as _live_observer

    live = _live_observer()  # the runner's live view (minority accuracy, pDP so far), else None

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
        basis = projection_basis(G_pub, k, B, public_qr=public_qr, E_pub=Ep) if k is not None else None
        if lam is None:
            k_eff = D if basis is None else basis.dim
            noise_dim = k_eff * C
            lam = float(weight_decay_fn(tau, noise_dim)) if weight_decay_fn is not None else float(opts.weight_decay)

        # --- Gaussian mechanism: noise sigma * tau in the projected space ---
        z = rng.standard_normal((D, C)).astype(np.float32) * np.float32(sigma * tau)
        noisy, ratio, loss_q = private_release(Xq, yq, W, tau, basis, noise=z, x_norm=xq_norm, XB=XB, X_Qp=X_Qp)
        pdp += ratio**2
        executed = t

        # --- update (post-processing) ---
        grad = noisy + np.float32(lam) * (W - W_ref)
        if G_pub is not None and opts.use_public_gradient:
            grad = grad + G_pub
        eta = 2.0 / (lam * (t + 1)) if opts.schedule == "theorem3" else float(opts.learning_rate)
        if opts.schedule == "theorem3":
            # w_bar_t = sum_{s<=t} 2 s w_s / (t (t+1)), incremental (Thm. 3); w_t is the
            # iterate at which this step's gradient was taken.
            W_avg = W_avg * np.float32((t - 1) / (t + 1)) + W * np.float32(2.0 / (t + 1))
        W = W - np.float32(eta) * grad
        out = W_avg if opts.schedule == "theorem3" else W
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
    out = (W_avg if opts.schedule == "theorem3" else W) if executed > 0 else W
    return NoisyGDResult(W=np.array(out, dtype=np.float32), steps=executed, history=history, pdp_sq_ratio_sum=pdp, clip_norms=clip_norms)
