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
public gradient ``G_pub(w_t)``, completed by fixed data-independent directions when ``k``
exceeds its rank; it is built from public data only (:mod:`.projection`). The noise ``U n_t``
(``n_t ~ N(0, s^2 I_k)``) is drawn as ``U U^T z`` with ``z ~ N(0, s^2 I_D)``, which has the
same distribution.

Kernels: the clipped sum (and the per-sample ratios and losses) comes from a release kernel
of :mod:`.kernels` (numpy, numba, torch on the CPU or CUDA), chosen by ``device``; the noise
is drawn here on the host and added, and the projection applied, by :func:`private_release`
for every kernel, so the mechanism, its sensitivity and the accounting do not depend on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from ... import accounting
from ...errors import ConfigError
from ...randomness import SECURE, noise_rng
from .._linear import error_rate, row_norms, softmax_residual, xt_dot
from .._observe import notify_release, step_observer
from ..base import OnStep, StepRecord
from .kernels import ReleaseKernel, get_kernel, kernel_for
from .projection import ProjectionBasis, RandomSubspaces, projection_basis, resolve_span, subspace_errors


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
        logit_offset: ``(C,)`` offset ``b`` of the private rows' logit-adjusted loss (Menon et
            al. 2021, Eq. 11: ``-log softmax(x W + b)_y`` with ``b_c = log pi_c``, pi the
            private class prior): training against the prior makes ``argmax x W`` (prediction
            without ``b``) target the *balanced* error. ``b`` must be public or released (the
            method releases a noisy class histogram for it); None = plain cross-entropy.
        public_logit_offset: the same for the public rows (from their exact, public counts).
        subspace_every: owner's-view diagnostic (0 = off): every this many steps (and at the
            last), the relative reconstruction errors of the clipped private sum on the
            projection's public subspace and on a random one of the same dimension
            (:func:`.projection.subspace_errors`, AdaMix Fig. 6) go into the step record's
            ``extra`` (``subspace_error_public``, ``subspace_error_random``, and the subspace's
            dimension ``subspace_dim``). Reads the private
            sum before noise: not covered by ε; the release does not change.
        releases_before: Gaussian releases of the same noise multiplier (and sensitivity
            ratio 1) already made on this data before step 1 (e.g. the noisy count); the
            epsilon in the step records includes them.
        eval_every: test error every this many steps (and at the last step).
        seed: seed of the projection completion, and of the noise only with
            ``noise="reproducible"`` (research; secure noise never reads it).
        noise_stream: the reproducible noise's stream (:func:`~mixdp_core.randomness.noise_rng`):
            every run on the same rows with the same seed needs its own (optimistic tuning's
            candidates drew one noise, so their releases' differences were noise-free while
            the ledger composed them as independent).
        device: where the private release runs (:func:`.kernels.resolve_device`):
            ``"cpu"`` (the numpy / fused numba kernel), ``"cuda"`` (the torch kernel on the
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
    noise_stream: int = 0xADA
    n_hat: Optional[float] = None
    n_hat_private: Optional[float] = None
    smoothness: float = 0.5
    ball_radius: Optional[float] = None
    releases_before: int = 0
    device: str = "auto"
    subspace_every: int = 0
    logit_offset: Optional[np.ndarray] = None
    public_logit_offset: Optional[np.ndarray] = None
    #: track each private row's own pull on its own logits in the output
    #: (:attr:`NoisyGDResult.self_pull`; the guard's leave-one-out count): the kernel also
    #: writes its clipped residuals, an (N, C) array, and two (N, C) recursions run per step
    track_self_pull: bool = False
    #: track each public row's own gradient's pull on its own logits in the output
    #: (:attr:`NoisyGDResult.public_pull`; the released update's leave-one-out logits on the
    #: public rows, :func:`stacking_shrinkage`): two ``(N_pub, C)`` recursions per step
    track_public_pull: bool = False


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
    #: ``(N, C)``, with ``opts.track_self_pull``: row i's own clipped gradients' total change to
    #: its own logits in the output (:func:`run_noisygd`); ``snapshot_self_pull`` the same at
    #: ``snapshot_at``. Owner's view (reads private rows), never released.
    self_pull: Optional[np.ndarray] = None
    snapshot_self_pull: Optional[np.ndarray] = None
    #: ``(N_pub, C)``, with ``opts.track_public_pull``: public row j's own (exact) gradients'
    #: total change to its own logits in the output; ``snapshot_public_pull`` the same at
    #: ``snapshot_at``. Public: computed from public rows and released iterates.
    public_pull: Optional[np.ndarray] = None
    snapshot_public_pull: Optional[np.ndarray] = None
    #: the last iterate ``w_T`` where the output is the average (``theorem3``, ``smooth``), else
    #: ``None``: post-processing of the same noisy gradients; the released model combines it with
    #: the average where ``update_shrinkage="two_iterate_when_balanced"`` applies
    #: (:func:`two_iterate_combination`), and the shrinkage research reads it
    #: (scripts/shrinkage_criteria.py)
    last_iterate: Optional[np.ndarray] = None
    #: with ``last_iterate`` and the tracking options: each private / public row's own pull in
    #: the last iterate (``_OwnPull.P``), what a guard counting a model built on ``w_T`` would
    #: subtract (research, tuning_notes.md, "The average lags")
    last_self_pull: Optional[np.ndarray] = None
    last_public_pull: Optional[np.ndarray] = None
    #: the last iterate after ``snapshot_at`` steps and, with ``track_self_pull``, each private
    #: row's own pull in it (the early checkpoint's two-iterate combination, like the final one)
    snapshot_last: Optional[np.ndarray] = None
    snapshot_last_self_pull: Optional[np.ndarray] = None


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


def shrunk_class_counts(noisy: np.ndarray, noise_std: float) -> np.ndarray:
    """Class counts from a noisy histogram ``ñ_c = n_c + N(0, s²)``, shrunk towards their mean.

    Positive-part James–Stein (Efron & Morris 1973) towards the grand mean ``m``: ``n̂_c = m +
    f (ñ_c − m)``, ``f = max(0, 1 − (C − 3) s² / Σ_c (ñ_c − m)²)`` for ``C >= 4`` (``f = 1``
    below: the estimator dominates the raw counts only from 4 classes), floored at the
    estimate's own noise std ``f s`` (and at 1 row). Post-processing of the released
    histogram: no privacy cost. Why: with balanced classes the spread of ``ñ`` is noise alone
    and ``f`` ~ 2/(C − 1) -> 0, so no noise is mistaken for imbalance (a logit offset of ± s/m
    per class would be); with real imbalance the spread dwarfs ``s`` and ``f`` -> 1. The floor:
    a count below its noise std cannot be told from noise, and an underestimated small class
    gets a strongly negative offset that the trained head over-compensates (measured: a
    minority class of ~34 rows estimated at 1–12 took Fully-Private on ``ten_class_ir10`` from
    ~41 % to 60–87 % error; docs/results/class_balance.md). No constant is chosen: ``s`` is the
    release's noise std.
    """
    v = np.asarray(noisy, dtype=np.float64)
    C = v.shape[0]
    m = float(v.mean())
    ss = float(np.sum((v - m) ** 2))
    f = 1.0 if C < 4 or ss <= 0 else max(0.0, 1.0 - (C - 3) * float(noise_std) ** 2 / ss)
    return np.maximum(m + f * (v - m), max(1.0, f * float(noise_std)))


def log_prior(counts: np.ndarray) -> np.ndarray:
    """``b_c = log(counts_c / sum counts)`` (counts floored at 1): the offset of the
    logit-adjusted loss (Menon et al. 2021, Eq. 11, τ = 1, the Fisher-consistent choice for the
    balanced error)."""
    c = np.maximum(np.asarray(counts, dtype=np.float64), 1.0)
    return np.log(c / c.sum()).astype(np.float32)


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
    return float(noise_std * math.sqrt(float(np.sum(_update_weights(eta, weight_decay) ** 2))))


def _update_weights(eta: np.ndarray, weight_decay: float) -> np.ndarray:
    """``eta_j A_j`` for the updates of steps ``j = 1..T`` (0-based here): the total weight the
    released t-weighted average ``sum_t 2 t w_t / (T (T + 1))`` puts on step j's update, which
    enters iterates ``j+1..T`` contracted by ``1 - eta lambda`` per later step (backward
    recursion ``A_j = c_{j+1} + (1 - eta_{j+1} lambda) A_{j+1}``; the last update never enters)."""
    T = len(eta)
    c = 2.0 * np.arange(1, T + 1) / (T * (T + 1.0))  # c[t-1]: weight of iterate t
    A = np.zeros(T)
    for j in range(T - 2, -1, -1):
        A[j] = c[j + 1] + (1.0 - eta[j + 1] * weight_decay) * A[j + 1]
    return eta * A


def _recorded_steps(history: list) -> tuple[np.ndarray, np.ndarray, float] | None:
    """``(eta_j, tau_j, lambda)`` of the gradient steps of a ``smooth`` run, from its step records
    (public: ``extra["lr"]``, ``clip_norm``, ``extra["weight_decay"]``). ``None`` with fewer than
    two gradient steps."""
    steps = [h for h in history if h.extra and "lr" in h.extra and h.clip_norm is not None]
    if len(steps) < 2:
        return None
    eta = np.array([h.extra["lr"] for h in steps], dtype=float)
    tau = np.array([h.clip_norm for h in steps], dtype=float)
    return eta, tau, float(steps[0].extra["weight_decay"])


def released_noise_std(history: list, n_hat: float, noise_multiplier: float) -> float:
    """Std of one coordinate of the Gaussian noise in the released t-weighted average of a
    ``smooth`` run, from its step records (public: ``extra["lr"]`` = eta_t,
    ``extra["weight_decay"]`` = lambda, ``clip_norm`` = tau_t).

    Step t adds ``N(0, (sigma tau_t)^2)`` per coordinate to the summed clipped gradient, scaled
    by ``eta_t / n_hat`` (mean-loss scale); the weight decay contracts it by ``1 - eta lambda``
    per later step and the average weighs step j's update by ``eta_j A_j``
    (:func:`_update_weights`), so the released average's noise has std
    ``nu = sigma sqrt(sum_j (eta_j A_j tau_j)^2) / n_hat`` per coordinate. The loss's curvature
    and the ball projection, which contract the noise, are ignored: an upper bound (measured
    against two noise draws of the same run: 0.86–1.01 of the realized std,
    docs/results/tuning_notes.md, "The private update's shrinkage"). ``history``: the gradient
    steps whose average is released (a prefix gives the average after that many steps)."""
    w = _iterate_noise_weights(history)
    if w is None or not n_hat > 0:
        return 0.0
    return float(noise_multiplier) * math.sqrt(float(np.sum(w[0] ** 2))) / float(n_hat)


def update_shrinkage(X_public: np.ndarray, delta_W: np.ndarray, noise_std: float) -> float:
    """``s`` in ``[0, 1]`` for the released model ``W_start + s (W - W_start)``: the factor that
    minimizes the expected squared logit error on the public rows (positive-part James–Stein).

    Model: the private phase's update ``Delta = W - W_start = S + N``, ``S`` what the private
    rows' gradients moved (the noise-free update) and ``N`` the mechanism's Gaussian noise, iid
    ``N(0, nu^2)`` per coordinate (:func:`released_noise_std`), independent of the public rows
    ``x``. The logit error of ``W_start + s Delta`` against ``W_start + S`` on a row x is
    ``(s - 1) x S + s x N``, with expectation ``(1 - s)^2 q + s^2 C nu^2 ||x||^2`` summed over
    the public rows, ``q = sum_x ||x S||^2``; the minimizer is ``s* = q / (q + C nu^2 sum ||x||^2)``.
    ``q`` is unknown, but ``E sum_x ||x Delta||^2 = q + C nu^2 sum_x ||x||^2``, hence
    ``s = max(0, 1 - C nu^2 sum_x ||x||^2 / sum_x ||x Delta||^2)``. Why: the noise fills all
    ``D x C`` coordinates while the private signal lives in the few directions the data span;
    where the noise's logit energy is most of the update's (many classes, high D, small epsilon)
    the unshrunk update costs the public start more than its signal gives (measured:
    docs/results/tuning_notes.md, "The private update's shrinkage"). No constant. Inputs: the
    public rows, the released update and the noise's public std: post-processing, no privacy
    cost. Returns 1 where nothing can be estimated (no public rows, no noise, no update)."""
    X = np.asarray(X_public, dtype=np.float64)
    D = np.asarray(delta_W, dtype=np.float64)
    if X.shape[0] == 0 or not noise_std > 0:
        return 1.0
    energy = float(np.sum((X @ D) ** 2))
    if not energy > 0:
        return 1.0
    noise = D.shape[1] * float(noise_std) ** 2 * float(np.sum(X * X))
    return float(max(0.0, 1.0 - noise / energy))


def iterate_noise_covariance(history: list, n_hat: float, noise_multiplier: float) -> np.ndarray | None:
    """``2 x 2`` covariance of one coordinate of the Gaussian noise in (the released t-weighted
    average, the last iterate) of a ``smooth`` run, from its step records (public, as in
    :func:`released_noise_std`, whose square is entry ``[0, 0]``).

    Step j's noise ``N(0, (sigma tau_j)^2)`` enters the average with weight ``eta_j A_j / n_hat``
    (:func:`_update_weights`) and the last iterate with ``eta_j prod_{k > j} (1 - eta_k lambda) /
    n_hat`` (each later step's weight decay contracts it); the two share every draw, so they are
    correlated. Curvature and the ball projection, which contract the noise, are ignored (an upper
    bound, as for the average). ``None`` with fewer than two gradient steps."""
    w = _iterate_noise_weights(history)
    if w is None or not n_hat > 0:
        return None
    w = w * (float(noise_multiplier) / float(n_hat))
    return w @ w.T


def _iterate_noise_weights(history: list) -> np.ndarray | None:
    """``2 x T``: row 0 the weight ``eta_j A_j tau_j`` of step j's unit noise draw in the released
    average, row 1 its weight ``eta_j prod_{k > j} (1 - eta_k lambda) tau_j`` in the last iterate
    (times ``sigma / n_hat`` in either). The one source of :func:`released_noise_std` and
    :func:`iterate_noise_covariance`. ``None`` with fewer than two gradient steps."""
    rec = _recorded_steps(history)
    if rec is None:
        return None
    eta, tau, lam = rec
    later = np.append(np.cumprod((1.0 - eta[1:] * lam)[::-1])[::-1], 1.0)
    return np.stack([_update_weights(eta, lam) * tau, eta * later * tau])


def two_iterate_combination(X_public: np.ndarray, delta_avg: np.ndarray, delta_last: np.ndarray,
                            noise_cov: np.ndarray) -> tuple[float, float] | None:
    """``(u, v)`` of the released model ``W_start + u Delta + v L``: ``Delta`` the released average's
    update, ``L = w_T - W_start`` the last iterate's, whose expected squared logit error on the
    public rows against the noise-free last iterate is least (an unbiased, Stein, estimate).

    Model: ``Y = [x Delta, x L] = S + N`` over the public rows' logits, ``N`` the two iterates'
    shared Gaussian noise with per-coordinate covariance ``Sigma`` (:func:`iterate_noise_covariance`),
    independent of the public rows. The error of ``Y w`` against ``S e_2`` has expectation
    ``w^T E[Y^T Y] w - 2 w^T S^T S e_2 + const``, with ``E[Y^T Y] = S^T S + N_E`` and ``N_E = C
    sum_x ||x||^2 Sigma``; the observed Gram ``G = Y^T Y`` estimates ``E[Y^T Y]`` without bias, so
    ``w = e_2 - G^{-1} N_E e_2``. Why the last iterate's noise-free value as the target: the
    released average lags the iterate it averages (on several development cells the error kept
    falling past the whole averaged update), and the last iterate alone carries more noise
    (1.16–1.37 times the average's std); the combination takes the signal of the iterate at
    the noise of a mixture of both (measured: docs/results/tuning_notes.md, "The average lags").
    No constant. Post-processing of the releases and public rows: no privacy cost.

    Returns ``None`` (the caller keeps the one-factor rule, :func:`update_shrinkage`) where the
    estimate is undefined: no public row, no noise, a singular Gram, or no estimable signal in
    the last iterate (``G_22 <= (N_E)_22``: its logit energy is all noise)."""
    X = np.asarray(X_public, dtype=np.float64)
    if X.shape[0] == 0 or noise_cov is None:
        return None
    U = X @ np.asarray(delta_avg, dtype=np.float64)
    UL = X @ np.asarray(delta_last, dtype=np.float64)
    G = np.array([[np.sum(U * U), np.sum(U * UL)], [np.sum(U * UL), np.sum(UL * UL)]])
    N = U.shape[1] * float(np.sum(X * X)) * np.asarray(noise_cov, dtype=np.float64)
    if not N[1, 1] > 0 or not G[1, 1] > N[1, 1] or not np.linalg.det(G) > 1e-12 * G[0, 0] * G[1, 1]:
        return None
    u, v = np.array([0.0, 1.0]) - np.linalg.solve(G, N[:, 1])
    return float(u), float(v)


def _centred_logits(start_logits: np.ndarray, update_logits: np.ndarray,
                    y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The start's and the update's logits as float64 deviations from each row's mean (the
    softmax is shift-invariant), and the labels: the inputs of :func:`stacking_shrinkage` and
    :func:`profile_log_likelihood`."""
    A = np.asarray(start_logits, dtype=np.float64)
    U = np.asarray(update_logits, dtype=np.float64)
    return A - A.mean(1, keepdims=True), U - U.mean(1, keepdims=True), np.asarray(y)


def stacking_shrinkage(start_logits: np.ndarray, update_logits: np.ndarray, y: np.ndarray) -> float:
    """``s`` in ``[0, 1]`` for the released model ``W_start + s (W - W_start)``: the ratio
    ``b / a`` of the two weights of the multinomial logistic model ``softmax(a z_start + b z_update)``
    fitted to the public labels by maximum likelihood (stacking).

    Inputs, per public row that has a leave-one-out version: ``start_logits`` (``n x C``), the
    start's logits from the public model fitted without that row (:func:`.._linear.loo_public_logits`,
    times the start's scale); ``update_logits`` (``n x C``), the released update's logits ``x (W -
    W_start)`` minus the row's own public gradients' pull on them (:attr:`NoisyGDResult.public_pull`);
    ``y`` their labels. Both are out-of-sample for the row, as a test row's are.

    Why a likelihood and not the squared logit error (:func:`update_shrinkage`): the released
    model is judged by the classes it predicts. Where the start's margins are large the update's
    noise flips few predictions, and where the start is wrong a signal far below the noise's
    energy can still flip them right; the squared error counts every logit alike and shrinks too
    much there (measured: docs/results/tuning_notes.md, "Shrinkage by the public likelihood").
    The likelihood weighs the two sources by how well each predicts unseen public rows, in the
    units of their logits; ``b / a`` is then the update's scale relative to the start. Clipped to
    ``[0, 1]``: the run releases at most its whole update. A concave problem in two variables
    (damped Newton). Post-processing of releases and public rows: no privacy cost. Returns 1
    where nothing can be fitted (no row), 0 where the fitted weight on the update is not positive.
    """
    A, U, y = _centred_logits(start_logits, update_logits, y)
    n = len(y)
    if n == 0:
        return 1.0
    idx = np.arange(n)
    F = np.stack([A, U], axis=-1)  # (n, C, 2): the features of the two-weight model

    def nll(w: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        Z = F @ w
        Z = Z - Z.max(1, keepdims=True)
        P = np.exp(Z)
        P /= P.sum(1, keepdims=True)
        f = float(-np.sum(np.log(np.maximum(P[idx, y], 1e-300))))
        Fbar = np.einsum("nc,nck->nk", P, F)  # E_p[F] per row
        g = -(F[idx, y] - Fbar).sum(0)
        H = np.einsum("nc,nck,ncl->kl", P, F, F) - np.einsum("nk,nl->kl", Fbar, Fbar)
        return f, g, H

    # start from the scale that makes each source's logits unit-variance (the softmax's units)
    sd = np.array([F[..., 0].std(), F[..., 1].std()])
    if not (sd > 0).all():
        return 1.0 if sd[1] > 0 else 0.0
    w = 1.0 / sd
    f, g, H = nll(w)
    for _ in range(100):
        try:
            step = np.linalg.solve(H + 1e-12 * np.trace(H) * np.eye(2), g)
        except np.linalg.LinAlgError:
            step = g
        t = 1.0
        while t > 1e-8:
            w_new = w - t * step
            f_new, g_new, H_new = nll(w_new)
            if f_new <= f - 1e-4 * t * float(g @ step):
                break
            t *= 0.5
        else:
            break
        w, f, g, H = w_new, f_new, g_new, H_new
        # separable public rows: the likelihood has no maximum and |w| grows without bound while
        # its direction (the ratio) settles; stop once the loss is that of near-certain predictions
        if float(np.abs(g).max()) < 1e-9 * max(1.0, n) or f < 1e-6 * n:
            break
    a, b = float(w[0]), float(w[1])
    if not b > 0:
        return 0.0
    if not a > 0:
        return 1.0
    return float(min(1.0, b / a))


#: Resolution of :func:`profile_log_likelihood` (mean log-likelihood per row): its iteration stops
#: once the loss is below this (rows it separates), so two values closer than this are not told
#: apart. A numerical tolerance of the solver, not a tuned constant.
PROFILE_LL_TOL = 1e-6


def profile_log_likelihood(start_logits: np.ndarray, update_logits: np.ndarray, y: np.ndarray, s: float) -> float:
    """Mean log-likelihood of the labels ``y`` under ``softmax(a (z_start + s z_update))``,
    maximized over the common scale ``a >= 0``: how well the model ``W_start + s (W - W_start)``
    predicts the rows, in the units :func:`stacking_shrinkage` fits (whose ratio ``b / a``
    maximizes this over ``s``). The scale is free because the released logits' temperature does
    not change a prediction; ``a = 0`` gives ``-log C``.

    Inputs as :func:`stacking_shrinkage`'s (the public rows' leave-one-out logits). Concave in
    ``a`` (a one-parameter exponential family): damped Newton. Where the rows are separated the
    supremum is 0, approached as ``a`` grows; the iteration stops once the loss is below
    :data:`PROFILE_LL_TOL`, so values within it of each other are ties. Public rows and
    releases: post-processing, no privacy cost.
    """
    A, U, y = _centred_logits(start_logits, update_logits, y)
    n = len(y)
    if n == 0:
        return 0.0
    idx = np.arange(n)
    Z0 = A + float(s) * U

    def ll(a: float) -> tuple[float, float, float]:
        Z = a * Z0
        m = Z.max(1, keepdims=True)
        E = np.exp(Z - m)
        tot = E.sum(1)
        P = E / tot[:, None]
        val = float(np.mean(Z[idx, y] - m[:, 0] - np.log(tot)))
        mu = np.sum(P * Z0, 1)
        grad = float(np.mean(Z0[idx, y] - mu))
        var = float(np.mean(np.sum(P * Z0 * Z0, 1) - mu * mu))
        return val, grad, var

    sd = float(Z0.std())
    if not sd > 0:
        return float(-np.log(A.shape[1]))
    a = 1.0 / sd
    f, g, v = ll(a)
    for _ in range(200):
        step = g / v if v > 0 else g
        t, accepted = 1.0, False
        while t > 1e-10:
            a_new = max(0.0, a + t * step)
            f_new, g_new, v_new = ll(a_new)
            if f_new >= f + 1e-4 * t * g * step or a_new == a:
                accepted = True
                break
            t *= 0.5
        if not accepted:  # no ascent left along the step: keep the best point found
            break
        converged = abs(a_new - a) <= 1e-10 * max(1.0, a)
        a, f, g, v = a_new, f_new, g_new, v_new
        if converged or abs(g) * max(a, 1.0 / sd) < 1e-10 or -f < PROFILE_LL_TOL or (a == 0.0 and g <= 0):
            break
    return f


def balanced_prior_bias(scores: np.ndarray, y: np.ndarray, n_classes: int) -> np.ndarray | None:
    """Per-class logit offsets ``b`` (``C``, summing to 0) that make the model's average predicted
    probability of every class, over a class-balanced weighting of the labelled rows, equal to
    ``1/C``: the maximum-likelihood intercepts of ``softmax(scores + b)`` with each class's rows
    weighted ``1 / (C n_c)``, whose stationarity condition is exactly that moment condition
    (prior correction: Saerens, Latinne & Decaestecker 2002, here on labelled public rows).

    Why: a released model's classes are not on one scale when their columns received unequal
    private signal under equal noise. Under class imbalance the majority columns grow with their
    rows while the minority columns barely move from the (shrunk) start, so the argmax leans to
    the majority classes even though the logit-adjusted loss targets the balanced error
    (measured on ``ten_class_ir10``: the minority classes predicted for 7–9 % of the balanced test
    rows, 20 % true; docs/results/class_balance.md, "The released model's class prior").
    The offsets put the classes back on one scale where the balanced error is judged. No
    constant: the weighting is the balanced one, the target ``1/C`` its consequence.

    Inputs: ``scores`` (``n x C``) the released model's logits on *public* rows, ``y`` their
    labels. Post-processing of a release and public rows: no privacy cost. Returns ``None``
    where a class has no labelled row (its offset would have no data, and the rest could not be
    placed against it) or there are no rows. The problem is convex and, with a row in every
    class, attains its minimum (unique up to a common shift, fixed by the zero sum).
    """
    from scipy.optimize import minimize  # noqa: PLC0415 (only at the end of a fit)

    S = np.asarray(scores, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    C = int(n_classes)
    if S.ndim != 2 or S.shape[1] != C or len(y) != S.shape[0]:
        raise ValueError(f"scores: expected shape (n, {C}) matching {len(y)} labels, got {S.shape}")
    counts = np.bincount(y, minlength=C)
    if len(y) == 0 or (counts == 0).any():
        return None
    w = 1.0 / (C * counts[y])  # each class's rows weigh 1/C in all
    S = S - S.max(1, keepdims=True)
    idx = np.arange(len(y))
    target = np.full(C, 1.0 / C)

    def f(b: np.ndarray) -> tuple[float, np.ndarray]:
        Z = S + b
        m = Z.max(1, keepdims=True)
        E = np.exp(Z - m)
        tot = E.sum(1)
        lse = m[:, 0] + np.log(tot)
        P = E / tot[:, None]
        return float(w @ (lse - Z[idx, y])), (w @ P) - target

    res = minimize(f, np.zeros(C), jac=True, method="L-BFGS-B", options={"gtol": 1e-10, "maxiter": 2000})
    b = np.asarray(res.x, dtype=np.float64)
    if not np.isfinite(b).all():
        return None
    return (b - b.mean()).astype(np.float32)


def self_pull_bound(history: list, n_hat: float) -> float:
    """Largest change one private row's own clipped gradients can make to its own margin
    ``z_y - z_k`` in the released t-weighted average of a ``smooth`` run, per unit row norm.

    From the run's step records (public: ``extra["lr"]`` = eta_t, ``extra["weight_decay"]`` =
    lambda, ``clip_norm`` = tau_t): a clipped per-row gradient ``x r^T`` has Frobenius norm at
    most ``tau_t``, so one step moves ``x^T W (e_y - e_k)`` by at most ``sqrt(2) tau_t ||x||
    eta_t / n_hat`` (mean-loss scale); the weight decay contracts it by ``1 - eta lambda`` per
    later step and the average weighs it as :func:`averaged_logit_noise_std` weighs the noise
    (the loss's own curvature is ignored, so this over-states the pull). A row the released
    model classifies right with a margin above this times ``||x||`` is right for the model
    trained without that row under the linearized dynamics. Research use only (the hook
    ``_guard_self_pull`` of :class:`~.private.NoisyGDMethod`, docs/results/tuning_notes.md,
    "The guard's in-sample optimism").
    """
    w = _iterate_noise_weights(history)
    if w is None or not n_hat > 0:
        return 0.0
    return float(math.sqrt(2.0) * np.sum(w[0]) / float(n_hat))


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


def private_release(
    X: np.ndarray,
    y: np.ndarray,
    W: np.ndarray,
    tau: float,
    basis: Optional[ProjectionBasis],
    *,
    noise: Optional[np.ndarray] = None,
    kernel: str | ReleaseKernel = "cpu",
    x_norm: Optional[np.ndarray] = None,
    XB: Optional[np.ndarray] = None,
    X_Qp: Optional[np.ndarray] = None,
    block_rows: Optional[int] = None,
    ratio_out: Optional[np.ndarray] = None,
    loss_out: Optional[np.ndarray] = None,
    threads: Optional[int] = None,
    on_sum: Optional[Callable[[np.ndarray], None]] = None,
    logit_offset: Optional[np.ndarray] = None,
    resid_out: Optional[np.ndarray] = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Gaussian-mechanism release of AdaMix / NoisyGD, back-projected to ``(D, C)``.

    Computes ``U U^T (sum_i clip_tau(g_i) + noise)`` (``U = I`` when ``basis`` is None), which
    is a post-processing of ``U^T sum_i clip_tau(g_i) + U^T noise``; with
    ``noise ~ N(0, sigma^2 tau^2 I_{D x C})``, ``U^T noise ~ N(0, sigma^2 tau^2 I_{k x C})``.
    Sensitivity of ``U^T sum_i clip_tau(g_i)`` under add/remove of one row: ``tau``
    (``clip_tau(g) = g min(1, tau/||g||_F)``, ``||g_i||_F = ||x_i|| ||p_i - y_i||``).

    The clipped sum comes from a release kernel (:mod:`.kernels`); the noise is added and the
    projection applied here, the same way whichever kernel ran, so the mechanism does not
    depend on the backend.

    Args:
        X, y: normalized private rows ``(N, D)`` and labels ``(N,)``.
        W: ``(D, C)`` current weights.
        tau: clip threshold > 0, from public data only (or fixed).
        basis: projection (:class:`~.projection.ProjectionBasis`, from public data), or None.
        noise: ``(D, C)`` noise already scaled by ``sigma * tau`` (None = no noise, for tests).
        kernel: a :data:`~.kernels.KERNELS` key (``"cpu"``: numpy, or numba for a large float32
            ``X``; ``"numpy"``; ``"numba"``, ``ValueError`` for a case it does not support;
            ``"torch"``; ``"cuda"``) or a :class:`~.kernels.ReleaseKernel`.
        x_norm: cached ``||x_i||``.
        XB: cached ``X @ basis.B`` (``complement`` mode); computed if missing.
        X_Qp: cached ``X @ Q_p`` (``N x n_pub``); with ``basis.coef`` it gives ``X U_r``
            without an extra product with ``X``.
        block_rows, threads: the kernel's rows per block and worker threads
            (:meth:`~.kernels.ReleaseKernel.clipped_sum`).
        ratio_out, loss_out: optional ``(N,)`` float64 arrays receiving ``ratio`` / ``loss``.
        on_sum: called with the clipped sum ``S`` before the noise is added (owner's-view
            diagnostics only; it must not keep ``S``, which may be a reused buffer). The
            release does not depend on it.
        logit_offset: ``(C,)`` fixed offset ``b`` of the logit-adjusted loss, ``p_i =
            softmax(x_i W + b)`` (None = 0); it must be public or already released. The
            sensitivity stays ``tau`` (the clip bounds each term whatever ``b`` is).
        resid_out: optional ``(N, C)`` float64 array receiving the clipped residuals ``c_i (p_i
            - y_i)`` (owner's view; the release does not depend on it).

    Returns:
        ``(released, ratio, loss)``: the back-projected noisy sum ``(D, C)`` in ``X``'s float
        dtype, ``r_i = ||U^T clip(g_i)|| / tau`` (``(N,)``, ``<= 1``) and per-sample losses.
    """
    S, ratio, loss = get_kernel(kernel).clipped_sum(
        X, y, W, tau, basis, x_norm=x_norm, XB=XB, X_Qp=X_Qp, block_rows=block_rows, threads=threads,
        ratio_out=ratio_out, loss_out=loss_out, logit_offset=logit_offset, resid_out=resid_out)
    if on_sum is not None:
        on_sum(S)
    noisy = S if noise is None else S + noise
    if basis is not None:
        noisy = basis.project(noisy)
    return noisy, ratio, loss


class _OwnPull:
    """Each row's own gradients' change to its own logits, carried by the same linear recursions
    as the iterate ``W`` (decay, ball projection) and the released t-weighted average: ``P`` the
    share in the current iterate, ``Q`` in the average. A first-order leave-one-out (the loss's
    curvature, one row's effect on the other rows' residuals, is left out). One per tracked set
    of rows: the private rows (the guard's count) and the public rows (the shrinkage's stacking)."""

    # In place, into buffers of their own: P and Q are N x C float64 (40 MB at 50,000 rows and
    # 100 classes) and updated at every step, where fresh arrays cost more than the arithmetic
    # (measured at 49,800 x 100 on one CPU thread: 15 s of a 154 s fit; with device="cuda" the
    # release leaves the host and this stays). The same operations in the same order: the
    # results are the same to the bit (benchmarks/train.py's ownpull section checks it).

    def __init__(self, n_rows: int, n_classes: int) -> None:
        self.P = np.zeros((n_rows, n_classes))
        self.Q = np.zeros((n_rows, n_classes))
        self._scratch = np.empty((n_rows, n_classes))

    def average(self, t: int) -> None:
        """The average's step ``w_bar_t = ((t - 1) w_bar_{t-1} + 2 w_t) / (t + 1)``."""
        self.Q *= (t - 1) / (t + 1)
        self.Q += np.multiply(self.P, 2.0 / (t + 1), out=self._scratch)

    def step(self, eta: float, lam: float, scale: float, own: np.ndarray) -> None:
        """The iterate's step: weight decay contracts the pull, and the row's own term ``own``
        (its logits' change per unit step of the summed gradient) is added with ``-eta scale``
        (``scale``: 1/n_hat on the mean-loss scale). ``own`` is not modified."""
        self.P *= 1.0 - eta * lam
        self.P -= np.multiply(own, eta * scale, out=self._scratch)

    def scale(self, factor: float) -> None:
        """The ball projection's contraction of ``W - W_ref``."""
        self.P *= factor

    def output(self, averaged: bool) -> np.ndarray:
        """The pull in the released output (the average or the iterate), a copy."""
        return (self.Q if averaged else self.P).copy()


#: Most directions an integer ``projection=k`` may drop (``D − k``) where it keeps more than
#: the public gradients' rank: that complement is factorised at every step (O((D − k)³)).
MAX_COMPLEMENT_DIM = 1024


def check_complement(D: int, k: Any, C: int) -> None:
    """Refuse an integer ``projection=k`` that keeps more directions than the public gradients'
    rank (``k > C − 1``) but drops more than :data:`MAX_COMPLEMENT_DIM`: that complement is
    factorised at every step, O((D − k)³) (k = 8 at D = 2,048 took 58 s for 18 steps against
    1.3 s without projection, and 417 MB). Public values only (D, C, k).

    Raises:
        ConfigError: field ``projection``, naming the k that fits."""
    if isinstance(k, (int, np.integer)) and not isinstance(k, bool) and D - k > MAX_COMPLEMENT_DIM and k > C - 1:
        raise ConfigError("projection", f"projection={k} keeps {k} of D = {D} directions: its complement of "
                                        f"{D - k} directions (more than {MAX_COMPLEMENT_DIM}) would be factorised at "
                                        f"every step; use k >= {D - MAX_COMPLEMENT_DIM}, 'rank' or 'none'")


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
    rng = noise_rng(opts.noise, opts.seed, opts.noise_stream)
    # the backend only (the mechanism is private_release's), chosen from released or public sizes:
    # from the exact private size, a run's kernel (its timing and rounding) changed at an N threshold
    # no accounting covers. n_hat is the released noisy count (smooth schedule); without one, the
    # public rows stand in (an explicit ``device`` chooses otherwise)
    rows_hint = float(opts.n_hat) if opts.n_hat else float(Xp.shape[0])
    size_hint = int(max(rows_hint, 0.0) * D * Xq.itemsize)
    kernel = kernel_for(opts.device, size_hint)
    if hasattr(kernel, "sized"):  # the CPU kernel's numpy / numba choice on the same size
        kernel = kernel.sized(size_hint)

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
        check_complement(D, k, C)  # the methods check it before their first release too
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
    resid_buf = np.empty((N, C)) if opts.track_self_pull else None  # the kernel's clipped residuals
    history: list[StepRecord] = []
    clip_norms: list[float] = []
    lam: Optional[float] = None
    n_all = N + Xp.shape[0]
    executed = 0
    live = step_observer()  # the runner's live view (minority accuracy, pDP so far), else None
    snapshot: Optional[np.ndarray] = None
    # Own pull (opts.track_self_pull): row i's own clipped gradients' share of the iterate's and
    # the released average's logits x_i W (_OwnPull: a first-order leave-one-out)
    pull = _OwnPull(N, C) if opts.track_self_pull else None
    snapshot_pull: Optional[np.ndarray] = None
    # The same first-order leave-one-out for the public rows (opts.track_public_pull): row j's
    # exact gradient x_j^T e_j moves its own logits by ||x_j||^2 e_j (it is added unprojected)
    track_pub = bool(opts.track_public_pull and has_pub and opts.use_public_gradient)
    pub_pull = _OwnPull(Xp.shape[0], C) if track_pub else None
    xp_norm_sq = np.square(xp_norm)[:, None] if track_pub else None
    snapshot_pub: Optional[np.ndarray] = None
    snapshot_last: Optional[np.ndarray] = None
    snapshot_last_pull: Optional[np.ndarray] = None

    # AdaMix Fig. 6 (owner's view, opts.subspace_every > 0): the random subspaces compared with the
    # public one, drawn once per dimension from a seeded generator (a diagnostic, not a release)
    rand_sub = RandomSubspaces(D, seed=opts.seed) if opts.subspace_every else None
    for t in range(1, T + 1):
        # --- public quantities (no privacy cost) ---
        if has_pub:
            Zp = Xp @ W
            if opts.public_logit_offset is not None:
                Zp = Zp + opts.public_logit_offset.astype(Zp.dtype)
            Ep, loss_p = softmax_residual(Zp, yp)
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
        diag: dict[str, float] = {}
        on_sum = None
        if opts.subspace_every and basis is not None and (t % opts.subspace_every == 0 or t == T):
            def on_sum(S, basis=basis, diag=diag):  # owner's view: the clipped sum before the noise
                diag["subspace_error_public"], diag["subspace_error_random"] = subspace_errors(S, basis, rand_sub)
                diag["subspace_dim"] = float(basis.dim)
        noisy, ratio, loss_q = private_release(Xq, yq, W, tau, basis, noise=z, kernel=kernel, x_norm=xq_norm, XB=XB,
                                               X_Qp=X_Qp, ratio_out=ratio_buf, loss_out=loss_buf, on_sum=on_sum,
                                               logit_offset=opts.logit_offset, resid_out=resid_buf)
        pdp += np.square(ratio, out=sq_buf)
        own = None
        if pull is not None:
            # row i's released term U U^T c_i x_i r_i^T moves its own logits by ||U^T x_i||^2 e_i
            # (e_i = c_i r_i, the kernel's clipped residual); the ratio is ||U^T x_i|| ||e_i|| / tau,
            # so ||U^T x_i||^2 = (ratio_i tau / ||e_i||)^2 whatever the projection
            en = np.linalg.norm(resid_buf, axis=1)
            nu_sq = np.divide(np.square(ratio * float(tau)), np.square(en), out=np.zeros(N), where=en > 0)
            # in place: the kernel overwrites resid_buf at the next release and nothing else reads it
            own = np.multiply(resid_buf, nu_sq[:, None], out=resid_buf)
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
            for tracked in (pull, pub_pull):
                if tracked is not None:
                    tracked.average(t)
        W = W - np.float32(eta) * grad
        if not math.isfinite(float(W.sum(dtype=np.float64))):
            # a step past float32's range (learning_rate 1e6, weight_decay 1e-300 under theorem3's
            # 1/(λt) step, clip_norm 1e30): the run stops here instead of releasing NaN weights
            # with an ε beside them (what it released so far is charged as a failed run's)
            field_ = "clip_norm" if opts.clip == "fixed" else (
                "learning_rate" if opts.schedule == "constant" else "weight_decay")
            if opts.schedule != "constant" and eta > 1e3:
                # the step size itself blew up: the smooth cap 1/(β + λ) with β = min(1/2, 2τ) grows
                # as the clip shrinks (clip_norm 1e-45 gave 4.9e44), theorem3's 1/(λt) as λ does;
                # "lower clip_norm" would have made it worse
                advice = ("raise clip_norm (the step size grows as 1/clip_norm when it is tiny) or weight_decay"
                          if opts.clip == "fixed" and opts.schedule == "smooth" else "raise weight_decay")
            else:
                advice = "lower learning_rate or clip_norm, or raise weight_decay"
            raise ConfigError(field_, f"the weights left float32's range at step {t} (schedule "
                                      f"{opts.schedule!r}, step size {eta:.3g}): {advice}")
        scale_n = float(inv_n) if smooth else 1.0
        if pull is not None:
            pull.step(float(eta), lam, scale_n, own)
        if pub_pull is not None:
            pub_pull.step(float(eta), lam, scale_n, Ep * xp_norm_sq)
        if R_ball is not None:
            # projection onto W = {||w - w_ref|| <= R} (Alg. 1, last line; post-processing)
            dist = float(np.linalg.norm(W - W_ref))
            if dist > R_ball:
                W = W_ref + (W - W_ref) * np.float32(R_ball / dist)
                for tracked in (pull, pub_pull):
                    if tracked is not None:
                        tracked.scale(R_ball / dist)
        out = W_avg if averaged else W
        if t == snapshot_at:
            snapshot = np.array(out, dtype=np.float32)
            if pull is not None:
                snapshot_pull = pull.output(averaged)
            if pub_pull is not None:
                snapshot_pub = pub_pull.output(averaged)
            if averaged:
                snapshot_last = np.array(W, dtype=np.float32)
                snapshot_last_pull = None if pull is None else pull.output(False)
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
            extra={"lr": float(eta), "weight_decay": float(lam), **diag},
        )
        history.append(rec)
        if live is not None:
            live(rec=rec, W=out, pdp_sq=pdp, problem=problem, noise_multiplier=sigma)
        if on_step is not None and on_step(rec):
            break
    out = (W_avg if opts.schedule in ("theorem3", "smooth") else W) if executed > 0 else W
    # (before any step both recursions are still zero: the pull of an empty run)
    averaged_out = opts.schedule in ("theorem3", "smooth")
    return NoisyGDResult(W=np.array(out, dtype=np.float32), steps=executed, history=history, pdp_sq_ratio_sum=pdp,
                         clip_norms=clip_norms, snapshot=snapshot,
                         self_pull=None if pull is None else pull.output(averaged_out),
                         snapshot_self_pull=snapshot_pull,
                         public_pull=None if pub_pull is None else pub_pull.output(averaged_out),
                         snapshot_public_pull=snapshot_pub,
                         last_iterate=np.array(W, dtype=np.float32) if averaged_out and executed > 0 else None,
                         last_self_pull=pull.output(False) if averaged_out and pull is not None else None,
                         last_public_pull=pub_pull.output(False) if averaged_out and pub_pull is not None else None,
                         snapshot_last=snapshot_last, snapshot_last_self_pull=snapshot_last_pull)
