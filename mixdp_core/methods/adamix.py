"""AdaMix-family methods (Golatkar et al., "Mixed Differential Privacy in Computer Vision").

All train a linear softmax head ``logits = normalize(x) @ W`` (``W`` is ``(D, C)``, no bias)
with full-batch gradient descent; see :mod:`mixdp_core.methods._linear` for conventions and
:mod:`mixdp_core.methods.noisygd` for the mechanism, its sensitivity and its accounting.

Registered methods:

* ``paragon`` (non-private, public + private) and ``only_public`` (non-private, public only):
  L-BFGS on the mean cross-entropy + ``l2/2 ||W||^2``. Nothing is released privately.
* ``zero_shot``: ``W = beta [enc(c_1), ..., enc(c_C)]`` from CLIP text embeddings (Sec. 3.3);
  uses no image data at all.
* ``fully_private``: NoisyGD (Alg. 1) from zero init on private + public rows, all treated as
  private (Tab. 1 "Fully-Private").
* ``ngd``: public initialization, NoisyGD with a fixed clip on the private rows plus the exact
  public gradient, weight decay centred at the public solution ``w_ref`` (Thm. 3; the paper's
  ablation "NGD").
* ``adamix``: Alg. 2: public (or text, or zero) init; adaptive clip tau_t = q-th percentile
  of public per-sample gradient norms; projection of the clipped private gradients on the
  left-singular basis of the public gradient; noise ``N(0, sigma^2 tau_t^2 I)`` in the
  projected space. ``clip="fixed"`` / ``projection="none"`` give the ablations.
* ``ppgd``: the PPGD baseline (PPSGD of Wang & Zhou, AAAI 2020, run with NoisyGD); see
  :class:`PPGD` for every choice made.

Privacy of every private method: each step releases a Gaussian mechanism of L2 sensitivity
``tau_t`` (add/remove one private sample) with noise std ``sigma tau_t``; ``T`` steps compose
to :class:`mixdp_core.accounting.ComposedGaussian` ``(sigma, T)`` with
``T = accounting.calibrate_steps(noise_multiplier=sigma, target_epsilon, target_delta)``.
``privacy_`` is computed for the steps actually executed.

Default schedule ``"smooth"`` (issue 10; every quantity a run uses comes from public data or
from released noisy quantities, never from private labels or test data; two library constants
were set on development data, see 4.). Measured problem with the former
default (``"theorem3"``: eta_t = 2/(lambda(t+1)) on the *summed* loss with the Thm.-3
lambda): lambda keeps only the noise term, so eta_1 = 1/lambda is 10-30x past the stability
limit of the summed loss (smoothness ~N/2); the first step overshoots by more than
``||w_ref||`` and the error after step 1 exceeds Only-Public's at small epsilon. The new
schedule:

1. **Mean-loss scale through a noisy count.** ``N_private`` is private under add/remove, so
   the run first releases ``N_private + N(0, sigma^2)`` (sensitivity 1, noise multiplier
   sigma: accounted as one more release of the composed Gaussian; T = count + T-1 gradient
   steps) and divides the summed update by ``n_hat = N^_private + 2 sigma + N_public``
   (upper confidence bound: noise can only shrink the steps).
2. **Descent-lemma step cap.** eta_t = min(2/(lambda (t+1)), 1/(beta_t + lambda)) with
   ``beta_t`` the clip-aware smoothness of the mean clipped objective
   (:func:`~mixdp_core.methods.noisygd.clipped_smoothness`: ``min(1/2, 2 tau_t)`` per
   private row, a property of the model and tau). Early steps are the largest steps that
   cannot overshoot; later the Thm.-3 schedule and the t-weighted average take over.
3. **Thm.-3 constraint set.** Projection onto ``{||w - w_ref|| <= R}``,
   ``R = max(||w_ref||, sqrt(C) ln C)`` (public), as Alg. 1 allows.
4. **Noise-scaled public start** (``init_scale="noise"``): the public solution is rescaled,
   ``alpha w_pub`` (identical predictions, so step 0 *is* Only-Public), so that its median
   public logit margin is ``z = 3`` standard deviations of the logit noise the run adds in
   its burn-in; see :meth:`_NoisyGDMethod._noise_scaled_start`. Starting at the converged
   ``w_pub`` itself saturates the softmax on private rows and stalls the private phase;
   starting near 0 lets noise undo the public model at small epsilon (both measured).
   The two constants of this rule, ``z = 3`` (:data:`NOISE_MARGIN_Z`) and the assumed
   burn-in alignment 0.3 (:data:`BURN_IN_ALIGNMENT`), are library constants set during
   development by measuring test error on *development* data (digits, CIFAR-10 and PACS
   few-shot splits, several epsilon): they never see a user's data, but they are empirical
   choices, not derived from theory. The first values tried (z = 2, alignment 1) let AdaMix
   fall below Only-Public under the PACS domain shift at epsilon <= 1.
5. lambda: the Thm.-3 rule on the mean loss (noise std ``sigma tau / n_hat``).

``schedule="theorem3"`` and ``"constant"`` remain available (paper ablations). The paper
tuned the learning rate on *test* error (App. A.6): available only as the explicit
``optimistic_tuning=True`` option, which leaks information and whose composed privacy cost
is reported. ``honest_tuning=True`` instead runs a private selection with random stopping
(Papernot & Steinke 2022) on a held-out part of the private data, its whole cost accounted
by :mod:`mixdp_core.accounting.selection`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import numpy as np

from .. import accounting
from ..errors import ConfigError, DataError
from ._linear import PUBLIC_L2, fit_logistic, fit_public, l2_normalize, select_l2_cv
from ..config import SEED_RANGE, Interval, param
from .base import METHODS, ROLE_METHOD, ROLE_REFERENCE_LOWER, ROLE_REFERENCE_UPPER, Method, OnStep, PrivacyConfig, StepRecord
from ._linear import row_norms, softmax_residual
from .noisygd import (
    clip_threshold,
    clipped_smoothness,
    NoisyGDOptions,
    NoisyGDProblem,
    projection_dim_for,
    run_noisygd,
    theorem3_weight_decay,
)

#: Learning rates the paper searched for ResNet-50 features (App. A.6), sum-loss scale.
PAPER_LEARNING_RATES: tuple[float, ...] = (5e-4, 1e-3, 2.5e-3, 5e-3)
#: z-score of the noise-scaled start (see ``_NoisyGDMethod._noise_scaled_start``).
NOISE_MARGIN_Z = 3.0
#: Assumed alignment of the clipped private gradients in the burn-in horizon (see there).
BURN_IN_ALIGNMENT = 0.3
#: Candidates (noise-margin z of the start, multiplier of the Thm.-3 lambda) drawn by
#: ``honest_tuning`` (private selection with random stopping).
HONEST_GRID: tuple[tuple[float, float], ...] = tuple((z, m) for z in (0.5, 1.0, 2.0, 4.0) for m in (0.25, 1.0, 4.0))
#: Multipliers of the Thm.-3 lambda searched by optimistic tuning.
THEOREM3_LAMBDA_GRID: tuple[float, ...] = (0.25, 1.0, 4.0)


# ----------------------------------------------------------------------------- configs


_POS = Interval(0.0, None, closed="neither")
_NONNEG = Interval(0.0, None)
_UNIT_OPEN = Interval(0.0, 1.0, closed="neither")


def _check_projection(p: Any) -> None:
    if isinstance(p, str):
        if p not in PROJECTIONS:
            raise ConfigError("projection", f"must be one of {', '.join(map(repr, PROJECTIONS))} or an integer "
                                            f">= 1, got {p!r}")
    elif isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
        raise ConfigError("projection", f"must be one of {', '.join(map(repr, PROJECTIONS))} or an integer >= 1, "
                                        f"got {p!r}")


#: Named projections of :class:`AdaMixConfig` (an integer k >= 1 is allowed too).
PROJECTIONS = ("paper", "rank", "public_span", "none")


@dataclass(frozen=True, kw_only=True)
class NonPrivateConfig(PrivacyConfig):
    """Non-private logistic regression (``paragon``, ``only_public``); each field declares its
    range and help below.

    ``target_epsilon``/``target_delta`` are accepted so sweeps can pass them uniformly, and
    ignored: these methods release nothing privately.
    """

    seed: int = param(0, type=int, range=SEED_RANGE, help="Seed of the cross-validation folds (the solver is "
                                                           "deterministic).")
    l2: Optional[float] = param(
        None, type=float, range=_NONNEG,
        help="Ridge coefficient on the mean loss; None = the method's rule: paragon picks it by stratified "
             "5-fold cross-validation on the rows it trains on (non-private: no privacy cost, never looks at test "
             "data); only_public uses the fixed weak ridge PUBLIC_L2 = 1e-2 of the public fit AdaMix starts from "
             "(fit_public), so both report the same model.")
    max_iter: int = param(500, type=int, range=Interval(1, None), help="L-BFGS iterations.")


@dataclass(frozen=True, kw_only=True)
class ZeroShotConfig(PrivacyConfig):
    """Zero-shot CLIP classifier (Sec. 3.3)."""

    seed: int = param(0, type=int, range=SEED_RANGE, help="Unused (deterministic); uniform interface.")
    beta: float = param(100.0, type=float, range=_POS, help="Scale of the text embeddings (paper: 100, CLIP's "
                                                             "logit scale).")


@dataclass(frozen=True, kw_only=True)
class NoisyGDConfig(PrivacyConfig):
    """Hyper-parameters shared by every NoisyGD-type method; each field declares its range and
    help below. The (ε, δ) target refers to add/remove-one-private-sample neighbours.

    ``schedule="smooth"`` is the default since issue 10 (see the module docstring: noisy count,
    mean-loss scale, descent-lemma step cap, ball projection, rescaled public start); every
    input of its step sizes is public or an already released noisy quantity.
    """

    noise_multiplier: float = param(20.0, type=float, range=_POS, unit="σ",
                                    help="σ (paper: 20); the number of steps T is calibrated from it.")
    seed: int = param(0, type=int, range=SEED_RANGE,
                      help="Seed of the Gaussian noise (and of the projection completion).")
    schedule: str = param(
        "smooth", choices=("smooth", "theorem3", "constant"),
        help="'smooth' (default: noisy count, mean-loss scale, descent-lemma step cap, Thm.-3 ball projection, "
             "rescaled public start), 'theorem3' (former default: η_t = 2/(λ(t+1)) on the summed loss, weighted "
             "averaging) or 'constant' (learning_rate, last iterate, as in the paper's experiments).")
    learning_rate: float = param(1e-3, type=float, range=_POS,
                                 help="Constant step size on the summed loss (paper grid 5e-4 … 5e-3 for ResNet-50 "
                                      "features); used only with schedule='constant'.")
    weight_decay: Optional[float] = param(None, type=float, range=_NONNEG,
                                          help="λ on the summed loss (> 0 with schedule='theorem3'); None = "
                                               "weight_decay_rule.")
    weight_decay_rule: str = param(
        "theorem3", choices=("theorem3", "worst_case"),
        help="'theorem3' (λ = (τ/R) sqrt(2 d / ρ), d = noise dimension, ρ = T/(2σ²)) or 'worst_case' (also "
             "balances the optimization term of Thm. 3, on the mean-loss scale set by the released noisy count; "
             "stronger decay; schedule='smooth' only, since the other schedules would need the exact private "
             "count).")
    ref_distance: Optional[float] = param(None, type=float, range=_POS,
                                          help="R, the guessed distance ||w* − w_ref|| of the Thm.-3 rule and the "
                                               "trust region; None = ||w_ref||_F (public) or sqrt(C) ln C when "
                                               "w_ref = 0.")
    public_l2: Optional[float] = param(None, type=float, range=_NONNEG,
                                       help="Ridge (mean-loss scale) of the public pre-training; None = PUBLIC_L2 "
                                            "(1e-2, fixed: the paper's coefficient; the same fit only_public "
                                            "reports).")
    eval_every: Optional[int] = param(None, type=int, range=Interval(1, None),
                                      help="Test error every this many steps; None = max(1, T // 50).")
    optimistic_tuning: bool = param(
        False, type=bool, leaks_private=True,
        privacy_note="runs the method once per value of the paper's grid and keeps the run with the lowest test "
                     "error (App. A.6); the reported privacy_ composes all runs and exceeds target_epsilon, and "
                     "the selected test error is optimistic.",
        help="Tune on the paper's grid using test results, as the paper did. Off by default.")
    honest_tuning: bool = param(
        False, type=bool,
        help="Private hyper-parameter selection (candidates HONEST_GRID) with a Geometric(tuning_gamma) number "
             "of repetitions, scored on a held-out tuning_val_fraction of the private rows with a noisy count; "
             "the reported ε is that of the whole selection (Papernot & Steinke 2022, Thm. 2) and never exceeds "
             "the target. schedule='smooth' only.")
    tuning_gamma: float = param(0.2, type=float, range=_UNIT_OPEN,
                                help="γ of the Geometric number of tuning repetitions (E[K] = 1/γ).")
    tuning_val_fraction: float = param(0.2, type=float, range=_UNIT_OPEN,
                                       help="Share of the private rows held out to score honest-tuning candidates.")
    blas_threads: Optional[int] = param(1, type=int, range=Interval(1, None),
                                        help="BLAS threads during fit (restored afterwards); None leaves the "
                                             "process setting (benchmarks/train.py measures the best count).")
    trust_region: bool = param(True, type=bool,
                               help="schedule='smooth': project the iterates onto ||w − w_ref|| <= R (Thm. 3's "
                                    "constraint set).")
    init_scale: str = param("noise", choices=("noise", "none"),
                            help="schedule='smooth' with a public start: 'noise' rescales the public solution so "
                                 "the run's noise cannot flip its predictions; 'none' starts at it unscaled.")

    def __post_init__(self) -> None:
        super().__post_init__()  # every declared field
        if self.schedule == "theorem3" and self.weight_decay == 0:
            raise ConfigError("weight_decay", "must be > 0 or None with schedule='theorem3', got 0")
        if self.weight_decay_rule == "worst_case" and self.schedule != "smooth" and self.weight_decay is None:
            # On the summed loss its Lipschitz constant is N_private τ: the exact private count,
            # unaccounted under add/remove neighbours. 'smooth' uses the released noisy count.
            raise ConfigError("weight_decay_rule", "'worst_case' needs schedule='smooth' (the other schedules "
                                                   "would set λ from the exact private count, which is private)")
        if self.honest_tuning and self.optimistic_tuning:
            raise ConfigError("honest_tuning", "choose honest_tuning or optimistic_tuning, not both")
        if self.honest_tuning and self.schedule != "smooth":
            raise ConfigError("honest_tuning", "is implemented for schedule='smooth'")


@dataclass(frozen=True, kw_only=True)
class FullyPrivateConfig(NoisyGDConfig):
    """``fully_private``: NoisyGD from zero on all rows as private."""

    clip_norm: float = param(1.0, type=float, range=_POS,
                             help="Fixed clip threshold τ (per-sample gradient norms are <= sqrt(2)).")


@dataclass(frozen=True, kw_only=True)
class NGDConfig(FullyPrivateConfig):
    """``ngd``: public init + NoisyGD with fixed clip, decay centred at the public solution."""


@dataclass(frozen=True, kw_only=True)
class AdaMixConfig(NoisyGDConfig):
    """``adamix`` (Alg. 2) and its ablations; each field declares its range and help below.

    ``projection`` stays ``"paper"`` by default: the rank-C and public-span subspaces discard
    more private signal than noise in every few-shot regime measured (docs/results/fewshot.md).
    """

    init: str = param("public", choices=("public", "text", "zero"),
                      help="'public' (the few-shot public fit, as only_public), 'text' (beta × CLIP text embeddings, "
                           "Sec. 3.3; needs a CLIP encoder) or 'zero'.")
    beta: float = param(100.0, type=float, range=_POS, help="Text-init scale (paper: 100).")
    clip: str = param("adaptive", choices=("adaptive", "fixed"),
                      help="'adaptive' (τ_t = clip_percentile-th percentile of the public per-sample gradient norms) "
                           "or 'fixed' (clip_norm; ablation).")
    clip_percentile: float = param(90.0, type=float, range=Interval(0.0, 100.0, closed="right"),
                                   help="q (paper: 90).")
    clip_norm: float = param(1.0, type=float, range=_POS, help="τ for clip='fixed'.")
    projection: Any = param(
        "paper", check=_check_projection, allowed="'paper', 'rank', 'public_span', 'none' or an integer >= 1",
        help="'paper' (k = round(D · 2000/2048)), 'rank' (rank of the public gradient, <= C−1), 'public_span' "
             "(fixed basis of the span of the public features), 'none' (ablation: adaptive clip only) or an "
             "integer k >= 1.")


@dataclass(frozen=True, kw_only=True)
class PPGDConfig(NoisyGDConfig):
    """``ppgd`` (see :class:`PPGD`)."""

    reuse_l2: Optional[float] = param(None, type=float, range=_NONNEG,
                                      help="Strength of the model-reuse regularizer reuse_l2/2 ||W − W_priv||² on the "
                                           "mean public loss; None = 1/N_pub.")


# ----------------------------------------------------------------------------- helpers


def _normalized(split: Any) -> dict[str, np.ndarray]:
    return {
        "Xq": l2_normalize(split.X_private),
        "Xp": l2_normalize(split.X_public) if len(split.X_public) else np.zeros((0, split.dim), np.float32),
        "Xt": l2_normalize(split.X_test),
    }


def text_init(split: Any, beta: float, method: str) -> np.ndarray:
    """``W = beta [enc(c_1), ..., enc(c_C)]`` (Sec. 3.3), shape ``(D, C)``.

    Raises:
        DataError: the split has no text embeddings (encoder without a text tower).
    """
    T = getattr(split, "text_embeddings", None)
    if T is None:
        raise DataError(
            f"text_embeddings: method {method!r} needs CLIP text embeddings, but these features "
            f"come from an encoder without a text tower; use a CLIP encoder (clip_vit_b32 or "
            f"clip_rn50) or another init"
        )
    T = np.asarray(T, dtype=np.float32)
    if T.shape != (split.n_classes, split.dim):
        raise DataError(f"text_embeddings: expected shape ({split.n_classes}, {split.dim}), got {T.shape}")
    return (np.float32(beta) * l2_normalize(T)).T.copy()


class _LinearHead(Method):
    """Shared prediction for linear heads on normalized features."""

    family: ClassVar[str] = "adamix"
    W_: np.ndarray

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "W_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(split) first")
        return l2_normalize(X) @ self.W_


# ----------------------------------------------------------------------------- non-private


@METHODS.register("paragon")
class Paragon(_LinearHead):
    """Non-private upper bound: logistic regression on public + private rows.

    Privacy: none (``privacy_ = None``, epsilon = infinity); nothing is released privately.
    """

    role = ROLE_REFERENCE_UPPER

    config_cls = NonPrivateConfig
    description = "Non-private paragon: logistic regression on public + private data (ε = ∞)"
    paper = "AdaMix (Golatkar et al. 2022), Tab. 1 'Non-Private (paragon)'"
    private = False

    def fit(self, split: Any, *, on_step: OnStep | None = None) -> "Paragon":
        self._reset()
        d = _normalized(split)
        X = np.vstack([d["Xp"], d["Xq"]])
        y = np.concatenate([split.y_public, split.y_private])
        l2 = self.config.l2 if self.config.l2 is not None else select_l2_cv(X, y, split.n_classes, seed=self.config.seed)
        self.l2_ = float(l2)
        self.W_ = fit_logistic(X, y, split.n_classes, l2=l2, max_iter=self.config.max_iter)
        self._finish(split, d["Xt"], on_step)
        return self

    def _finish(self, split: Any, Xt: np.ndarray, on_step: OnStep | None) -> None:
        err = float(np.mean((Xt @ self.W_).argmax(1) != split.y_test))
        rec = StepRecord(step=1, total_steps=1, test_error=err)
        self.history_ = [rec]
        self.steps_ = 1
        if on_step is not None:
            on_step(rec)


@METHODS.register("only_public")
class OnlyPublic(Paragon):
    """Few-shot baseline: logistic regression on the public rows only.

    Privacy: the private rows are never read, so their privacy loss is 0 (``privacy_`` stays
    ``None`` as for every non-private method; ``uses_private_data = False``).
    """

    role = ROLE_REFERENCE_LOWER

    description = "Only-public: logistic regression on the public samples only (private data unused)"
    paper = "AdaMix (Golatkar et al. 2022), Tab. 1 'Only-Public'"
    uses_private_data = False

    def fit(self, split: Any, *, on_step: OnStep | None = None) -> "OnlyPublic":
        self._reset()
        d = _normalized(split)
        if len(split.y_public) == 0:
            raise DataError("X_public: only_public needs at least one public sample")
        # The same function (and ridge) as the public start of adamix / ngd: see fit_public.
        self.l2_ = float(self.config.l2 if self.config.l2 is not None else PUBLIC_L2)
        self.W_ = fit_public(d["Xp"], split.y_public, split.n_classes, l2=self.l2_,
                             max_iter=max(self.config.max_iter, 1000))
        self._finish(split, d["Xt"], on_step)
        return self


@METHODS.register("zero_shot")
class ZeroShot(Paragon):
    """CLIP zero-shot classifier ``W = beta [enc(c_1), ..., enc(c_C)]`` (Sec. 3.3).

    Privacy: uses only the class names (public), so no private data is read.

    Raises:
        DataError (at fit): the encoder has no text tower.
    """

    role = ROLE_METHOD

    config_cls = ZeroShotConfig
    description = "Zero-shot CLIP: class-name text embeddings as weights (no image training)"
    paper = "AdaMix (Golatkar et al. 2022), Sec. 3.3; Radford et al. 2021"
    needs_text = True
    uses_private_data = False

    def fit(self, split: Any, *, on_step: OnStep | None = None) -> "ZeroShot":
        self._reset()
        self.W_ = text_init(split, self.config.beta, "zero_shot")
        self._finish(split, l2_normalize(split.X_test), on_step)
        return self


# ----------------------------------------------------------------------------- private


class _NoisyGDMethod(_LinearHead):
    """Common fit logic: calibrate T, build the problem, run (or optimistically tune)."""

    config_cls = NoisyGDConfig
    _public_start: ClassVar[bool] = False

    # subclasses implement
    def _setup(self, split: Any, d: dict[str, np.ndarray]) -> tuple[NoisyGDProblem, np.ndarray, np.ndarray, NoisyGDOptions, int]:
        raise NotImplementedError

    def _public_init(self, split: Any, d: dict[str, np.ndarray]) -> np.ndarray:
        if len(split.y_public) == 0:
            raise DataError(f"X_public: {type(self).__name__} with a public init needs public samples")
        return fit_public(d["Xp"], split.y_public, split.n_classes, l2=self.config.public_l2)

    def _noise_scaled_start(self, W_pub: np.ndarray, problem: NoisyGDProblem, opts: NoisyGDOptions,
                            T_grad: int, n_hat: float) -> tuple[np.ndarray, float]:
        """Rescale the public solution ``alpha * W_pub`` (same predictions, ``alpha > 0``).

        The private phase starts where the released noise cannot, in expectation, flip the
        public predictions, and no further: ``alpha`` makes the median public logit margin
        ``kappa = 2`` standard deviations of the logit noise that the run will add to its
        output, ``nu = eta sigma tau sqrt(8 T / 15) / n_hat`` per class logit (noise of the
        t-weighted average of Thm. 3 for a constant step ``eta = 1/min(1/2, 2 tau)``,
        ``||x|| = 1``). A larger start would make every private sample's gradient vanish
        (saturated softmax, slow private phase: measured), a smaller one lets the noise
        undo the public model at small epsilon. Inputs: public rows, sigma, T, the released
        count; no private data. Returns ``(alpha W_pub, alpha)``.
        """
        cfg = self.config
        Xp, yp = problem.X_public, problem.y_public
        if Xp.shape[0] == 0 or T_grad <= 0 or not np.any(W_pub):
            return W_pub, 1.0
        Z = Xp @ W_pub
        idx = np.arange(len(yp))
        zy = Z[idx, yp].copy()
        Z[idx, yp] = -np.inf
        margin = float(np.median(zy - Z.max(axis=1)))
        if not margin > 0:
            return W_pub, 1.0
        D, C = W_pub.shape
        k = opts.projection_dim
        k = D if k is None else (max(C - 1, 1) if k == "rank" else min(int(k), D))
        # burn-in: steps until the (at most N tau per step) signal can outgrow the noise
        # sigma tau sqrt(k C t): t* = sigma^2 k C / n_hat^2, at least 1, at most T.
        horizon = min(float(T_grad), max(1.0, cfg.noise_multiplier**2 * k * C / n_hat**2) / BURN_IN_ALIGNMENT**2)
        alpha = 1.0
        for _ in range(4):  # fixed point: tau depends on the scale of the start
            Ep, _ = softmax_residual(Xp @ (W_pub * np.float32(alpha)), yp)
            norms = row_norms(Xp) * row_norms(Ep)
            tau = clip_threshold(opts.clip, norms, float(np.linalg.norm(Xp.T @ Ep)) / len(yp),
                                 clip_norm=opts.clip_norm, percentile=opts.clip_percentile)
            eta = 1.0 / clipped_smoothness(tau, opts.smoothness)
            nu = eta * cfg.noise_multiplier * tau * math.sqrt(8.0 * horizon / 15.0) / n_hat
            alpha = getattr(self, "_margin_z", NOISE_MARGIN_Z) * math.sqrt(2.0) * nu / margin
        return (W_pub * np.float32(alpha)).astype(np.float32), float(alpha)

    def _ref_distance(self, W_ref: np.ndarray, C: int) -> float:
        if self.config.ref_distance is not None:
            return float(self.config.ref_distance)
        return max(float(np.linalg.norm(W_ref)), math.sqrt(C) * math.log(C))

    def fit(self, split: Any, *, on_step: OnStep | None = None) -> "_NoisyGDMethod":
        if self.config.blas_threads is None:
            return self._fit(split, on_step)
        import threadpoolctl

        with threadpoolctl.threadpool_limits(int(self.config.blas_threads)):
            return self._fit(split, on_step)

    def _calibrated_steps(self) -> int:
        """T: the largest number of full-batch steps within (ε, δ) at σ (accounting module);
        with ``honest_tuning``, the releases of *one* repetition (count + steps)."""
        cfg = self.config
        if cfg.honest_tuning:
            T_rep, _ = self._selection_plan()
            return 1 + T_rep
        return int(
            accounting.calibrate_steps(
                noise_multiplier=cfg.noise_multiplier,
                target_epsilon=cfg.target_epsilon,
                target_delta=cfg.target_delta,
            )
        )

    def preflight(self) -> None:
        """Raise :class:`~mixdp_core.accounting.BudgetError` if no step fits the budget."""
        self._calibrated_steps()

    def _noisy_count(self, n_private: int) -> float:
        """Release ``N_private + N(0, sigma^2)`` (``smooth`` schedule only).

        Gaussian mechanism on the count: L2 sensitivity 1 under add/remove of one private
        row, noise std ``sigma`` (the run's noise multiplier), so it is accounted exactly as
        one more NoisyGD step (``mu^2 = 1/sigma^2``); the run composes ``1 + T_grad``
        releases, which is the calibrated ``T``. Seeded apart from the gradient noise.
        """
        rng = np.random.default_rng([self.config.seed, 0xC0417])
        return float(n_private + self.config.noise_multiplier * rng.standard_normal())

    def _fit(self, split: Any, on_step: OnStep | None) -> "_NoisyGDMethod":
        if self.config.honest_tuning:
            return self._fit_honest(split, on_step)
        return self._fit_once(split, on_step)

    def _selection_plan(self) -> tuple[int, float]:
        cfg = self.config
        return accounting.selection_plan(
            noise_multiplier=cfg.noise_multiplier, target_epsilon=cfg.target_epsilon,
            target_delta=cfg.target_delta, eta=1.0, gamma=cfg.tuning_gamma, extra_releases=1)

    def _fit_honest(self, split: Any, on_step: OnStep | None) -> "_NoisyGDMethod":
        """Private hyper-parameter selection with random stopping (Papernot & Steinke 2022).

        Mechanism (add/remove one private row):

        1. Every private row is assigned to *validation* with probability
           ``tuning_val_fraction`` by an independent coin from the seed (data-independent),
           else to *training*; adding/removing a row changes exactly one part.
        2. ``K ~ Geometric(tuning_gamma)`` (``TNB(1, gamma)``) repetitions. Repetition ``j``
           draws a candidate (noise-margin z x lambda multiplier) uniformly from
           :data:`HONEST_GRID`, trains on the training part with the full method (noisy
           count + ``T`` steps; ``mu_run = sqrt(T + 1)/sigma``-GDP) and releases the number
           of validation rows it classifies correctly + ``N(0, 1/mu_run^2)`` (sensitivity 1,
           so also ``mu_run``-GDP). The two parts are disjoint, so one repetition is
           ``mu_run``-GDP (a mixture over which part holds the row; Renyi divergence is
           quasi-convex), i.e. ``(lambda, lambda mu_run^2/2)``-RDP.
        3. Output: the repetition with the best noisy score.

        ``T`` comes from :func:`mixdp_core.accounting.selection_steps` and the reported
        epsilon from :func:`mixdp_core.accounting.selection_epsilon` (Thm. 2) for the run
        as executed; it never exceeds ``target_epsilon``. No test data is read.
        """
        cfg = self.config
        rng = np.random.default_rng([cfg.seed, 0x7E57])
        n_priv = len(split.y_private)
        val = rng.random(n_priv) < cfg.tuning_val_fraction
        sub = dataclasses.replace(split, X_private=split.X_private[~val], y_private=split.y_private[~val])
        Xv = l2_normalize(split.X_private[val])
        yv = split.y_private[val]
        K = int(accounting.sample_tnb(rng, 1.0, cfg.tuning_gamma))
        T_grad, sigma = self._selection_plan()  # sigma < noise_multiplier only if no step fits
        T_rep = T_grad + 1  # count + gradient steps of one repetition
        mu_run = math.sqrt(T_rep) / sigma
        best = None
        history: list[StepRecord] = []
        for j in range(K):
            z, mult = HONEST_GRID[int(rng.integers(len(HONEST_GRID)))]
            run = type(self)(dataclasses.replace(cfg, honest_tuning=False, seed=int(rng.integers(2**31)),
                                                 optimistic_tuning=False, noise_multiplier=sigma))
            run._margin_z, run._lambda_mult, run._forced_T = z, mult, T_rep
            run._fit_once(sub, None)
            correct = float(np.sum((Xv @ run.W_).argmax(1) == yv)) if len(yv) else 0.0
            score = correct + rng.normal(0.0, 1.0 / mu_run)
            history.append(StepRecord(step=j + 1, total_steps=K, test_error=None,
                                      extra={"candidate_z": z, "lambda_mult": mult, "noisy_val_correct": score}))
            if best is None or score > best[0]:
                best = (score, run)
        _, run = best
        self._reset()
        for attr in ("W_", "noise_multiplier_", "clip_norms_", "weight_decay_", "init_scale_", "n_hat_",
                     "count_releases_"):
            setattr(self, attr, getattr(run, attr, None))
        self.steps_ = K * T_rep
        self.history_ = history
        self.pdp_sq_ratio_sum_ = None  # per-instance accounting of the selection is not derived
        eps = accounting.selection_epsilon(mu_run, delta=cfg.target_delta, eta=1.0, gamma=cfg.tuning_gamma)
        self.privacy_ = accounting.PrivacyReport(
            epsilon=float(eps), delta=float(cfg.target_delta), mu=None, rho=None, pure_epsilon=None,
            mechanism=(f"private selection (Papernot & Steinke 2022, TNB(1, {cfg.tuning_gamma:g}), K = {K} run(s)) "
                       f"of {mu_run:.4g}-GDP repetitions (count + {T_rep - 1} NoisyGD steps, sigma = "
                       f"{sigma:.4g}; noisy validation count)"),
            accountant="rdp",
        )
        self.tuning_repetitions_ = K
        self.calibrated_steps_ = T_rep - 1
        self.stopped_early_ = False
        return self

    def _fit_once(self, split: Any, on_step: OnStep | None) -> "_NoisyGDMethod":
        self._reset()
        cfg = self.config
        T = getattr(self, "_forced_T", None) or self._calibrated_steps()
        smooth = cfg.schedule == "smooth"
        d = _normalized(split)
        problem, W_init, W_ref, opts, n_report = self._setup(split, d)
        n_pub_grad = problem.X_public.shape[0] if opts.use_public_gradient else 0
        n_count = 1 if smooth else 0  # releases spent on the noisy count
        T_grad = T - n_count
        n_hat = None
        if smooth:
            # Post-processing of the released count: an upper confidence bound (+2 sigma),
            # so a noise draw can only make the mean-scale steps smaller, never larger.
            n_hat_priv = self._noisy_count(problem.X_private.shape[0])
            n_hat_priv = max(n_hat_priv + 2.0 * cfg.noise_multiplier, 1.0)
            n_hat = n_hat_priv + n_pub_grad
            opts.n_hat_private = n_hat_priv
        self.init_scale_ = 1.0
        if smooth and cfg.init_scale == "noise" and self._public_start:
            W_init, self.init_scale_ = self._noise_scaled_start(W_init, problem, opts, T_grad, n_hat)
            W_ref = W_init
        opts.steps = T_grad
        opts.n_hat = n_hat
        opts.releases_before = n_count
        opts.eval_every = cfg.eval_every if cfg.eval_every is not None else max(1, T_grad // 50)
        R = self._ref_distance(W_ref, split.n_classes)
        opts.ball_radius = R if (smooth and cfg.trust_region) else None
        lip_pub = math.sqrt(2.0)  # ||g_j|| <= ||x_j|| ||p_j - y_j|| <= sqrt(2) for public rows

        def wd_fn(mult: float):
            if cfg.weight_decay is not None:
                return lambda tau, dim: float(cfg.weight_decay) * mult
            if smooth:
                # Thm.-3 rule on the mean loss: gradient sum / n_hat, noise std sigma tau / n_hat
                return lambda tau, dim: mult * theorem3_weight_decay(
                    lipschitz=tau, noise_std=cfg.noise_multiplier * tau / n_hat, dim=dim,
                    steps=max(T_grad, 1), ref_distance=R,
                    include_optimization=cfg.weight_decay_rule == "worst_case",
                )
            # theorem3 / constant: noise term only (the config refuses 'worst_case' here, whose
            # Lipschitz term would need the exact private count).
            return lambda tau, dim: mult * theorem3_weight_decay(
                lipschitz=n_pub_grad * lip_pub, noise_std=cfg.noise_multiplier * tau, dim=dim, steps=T,
                ref_distance=R, include_optimization=False,
            )

        # The noisy count is the run's first release: it gets step record 1 (so steps_,
        # history and the accounting all count n_count + gradient steps releases).
        opts.releases_before = 0
        head: list[StepRecord] = []
        stop_now = False
        if n_count:
            n_cand = len(THEOREM3_LAMBDA_GRID if cfg.schedule != "constant" else PAPER_LEARNING_RATES)
            rec0 = StepRecord(
                step=1, total_steps=T if not cfg.optimistic_tuning else n_count + T_grad * n_cand, test_error=None,
                epsilon_spent=float(accounting.privacy_curve(
                    noise_multiplier=cfg.noise_multiplier, steps=1, delta=cfg.target_delta)[0]),
                extra={"noisy_count": float(n_hat_priv - 2.0 * cfg.noise_multiplier)},
            )
            head.append(rec0)
            stop_now = bool(on_step(rec0)) if on_step is not None else False

        if not cfg.optimistic_tuning:
            candidates = [(opts, getattr(self, "_lambda_mult", 1.0))]
        elif cfg.schedule == "constant":
            candidates = [(dataclasses.replace(opts, learning_rate=lr), 1.0) for lr in PAPER_LEARNING_RATES]
        else:
            candidates = [(opts, m) for m in THEOREM3_LAMBDA_GRID]

        total_steps, best, pdp_total, all_hist = n_count, None, None, list(head)
        stopped = stop_now
        for j, (o, mult) in enumerate(candidates if not stop_now else []):
            def cb(rec: StepRecord, j=j) -> Optional[bool]:
                if len(candidates) > 1:
                    rec.extra["candidate"] = float(j)
                return on_step(rec) if on_step is not None else None

            # the count is released once and reused by every candidate (post-processing)
            res = run_noisygd(
                problem, W_init, W_ref, o, on_step=cb, weight_decay_fn=wd_fn(mult),
                step_offset=total_steps, total_steps=n_count + T_grad * len(candidates),
            ) if T_grad > 0 else None
            if res is None:
                from .noisygd import NoisyGDResult

                res = NoisyGDResult(W=W_init.copy(), steps=0, pdp_sq_ratio_sum=np.zeros(problem.X_private.shape[0]))
            total_steps += res.steps
            pdp_total = res.pdp_sq_ratio_sum if pdp_total is None else pdp_total + res.pdp_sq_ratio_sum
            all_hist.extend(res.history)
            final_err = next((h.test_error for h in reversed(res.history) if h.test_error is not None), None)
            if best is None or (final_err is not None and final_err < best[0]):
                best = (final_err if final_err is not None else float("inf"), res)
            if res.steps < T_grad:
                stopped = True
                break
        if best is None:  # stopped right after the count
            from .noisygd import NoisyGDResult

            best = (float("inf"), NoisyGDResult(W=W_init.copy(), steps=0,
                                                pdp_sq_ratio_sum=np.zeros(problem.X_private.shape[0])))
            pdp_total = best[1].pdp_sq_ratio_sum
        res = best[1]
        self.W_ = res.W if res.steps > 0 else W_init.copy()
        self.steps_ = total_steps  # Gaussian releases executed: the count + gradient steps
        self.history_ = all_hist if cfg.optimistic_tuning else head + res.history
        self.noise_multiplier_ = float(cfg.noise_multiplier)
        # pDP: the count adds (1/sigma)^2 to every private row's mu^2 (sensitivity 1).
        self.pdp_sq_ratio_sum_ = pdp_total[:n_report].copy() + n_count
        # Every release (the count and each gradient step) is a Gaussian mechanism with noise
        # multiplier sigma (noise std / sensitivity): they compose, as executed, to
        # ComposedGaussian(sigma, n_count + steps).
        self.privacy_ = accounting.privacy_report(
            accounting.ComposedGaussian(noise_multiplier=cfg.noise_multiplier, steps=max(1, total_steps)),
            delta=cfg.target_delta,
        )
        self.count_releases_ = n_count
        self.n_hat_ = n_hat
        self.calibrated_steps_ = T
        self.stopped_early_ = stopped
        self.clip_norms_ = np.asarray(res.clip_norms)
        self.weight_decay_ = float(res.history[0].extra["weight_decay"]) if res.history else None
        return self


@METHODS.register("fully_private")
class FullyPrivate(_NoisyGDMethod):
    """Fully-Private baseline: NoisyGD (Alg. 1) from ``W = 0`` on private + public rows.

    Public rows are treated as private (stacked after the private ones). Sensitivity of each
    released noisy gradient sum: ``clip_norm`` (add/remove one row), noise std
    ``noise_multiplier * clip_norm``; weight decay centred at 0. ``pdp_sq_ratio_sum_`` covers
    the ``N_private`` rows of ``split.X_private``.
    """

    config_cls = FullyPrivateConfig
    description = "Fully-private NoisyGD from zero init, public data treated as private"
    paper = "AdaMix (Golatkar et al. 2022), Alg. 1, Tab. 1 'Fully-Private'"

    def _setup(self, split, d):
        cfg = self.config
        C = split.n_classes
        Xq = np.vstack([d["Xq"], d["Xp"]])
        yq = np.concatenate([split.y_private, split.y_public])
        empty = np.zeros((0, split.dim), np.float32)
        prob = NoisyGDProblem(Xq, yq, empty, np.zeros(0, np.int64), d["Xt"], split.y_test, C)
        W0 = np.zeros((split.dim, C), np.float32)
        opts = NoisyGDOptions(
            noise_multiplier=cfg.noise_multiplier, steps=0, target_delta=cfg.target_delta,
            clip="fixed", clip_norm=cfg.clip_norm, projection_dim=None, use_public_gradient=False,
            schedule=cfg.schedule, learning_rate=cfg.learning_rate, seed=cfg.seed,
        )
        return prob, W0, W0, opts, len(split.y_private)


@METHODS.register("ngd")
class NGD(_NoisyGDMethod):
    """NGD ablation: public init ``w_ref``, NoisyGD with fixed clip on private rows + exact
    public gradient, weight decay ``lambda/2 ||w - w_ref||^2`` (Thm. 3).

    Sensitivity of each released sum: ``clip_norm`` (add/remove one private row); noise std
    ``noise_multiplier * clip_norm``; no projection.
    """

    config_cls = NGDConfig
    description = "NGD: public init + NoisyGD with fixed clipping, decay centred at the public solution"
    paper = "AdaMix (Golatkar et al. 2022), Thm. 3, App. A.1 'NGD'"

    def _setup(self, split, d):
        cfg = self.config
        W0 = self._public_init(split, d)
        self._public_start = True
        prob = NoisyGDProblem(d["Xq"], split.y_private, d["Xp"], split.y_public, d["Xt"], split.y_test, split.n_classes)
        opts = NoisyGDOptions(
            noise_multiplier=cfg.noise_multiplier, steps=0, target_delta=cfg.target_delta,
            clip="fixed", clip_norm=cfg.clip_norm, projection_dim=None, use_public_gradient=True,
            schedule=cfg.schedule, learning_rate=cfg.learning_rate, seed=cfg.seed,
        )
        return prob, W0, W0, opts, len(split.y_private)


@METHODS.register("adamix")
class AdaMix(_NoisyGDMethod):
    """AdaMix (Alg. 2): adaptive clipping + adaptive subspace projection from public data.

    Released per step: ``U_t^T sum_i clip_{tau_t}(g_i) + N(0, sigma^2 tau_t^2 I_{k x C})``;
    sensitivity ``tau_t`` (add/remove one private row), tau_t and ``U_t`` computed from
    public data and ``w_t`` only. The update adds the exact public gradient, the
    back-projected noisy private sum and weight decay centred at the initialization
    (``init="zero"`` centres it at 0, as written in Alg. 2).
    """

    config_cls = AdaMixConfig
    description = "AdaMix: public init, adaptive clipping and gradient projection from public data"
    paper = "AdaMix (Golatkar et al. 2022), Alg. 2, Sec. 3.2-3.3"

    def _setup(self, split, d):
        cfg = self.config
        C = split.n_classes
        if cfg.init == "public":
            W0 = self._public_init(split, d)
            self._public_start = True
        elif cfg.init == "text":
            W0 = text_init(split, cfg.beta, "adamix (init='text')")
        else:
            W0 = np.zeros((split.dim, C), np.float32)
        if len(split.y_public) == 0 and (cfg.clip == "adaptive" or cfg.projection != "none"):
            raise DataError("X_public: adaptive clipping and projection need public samples")
        prob = NoisyGDProblem(d["Xq"], split.y_private, d["Xp"], split.y_public, d["Xt"], split.y_test, C)
        opts = NoisyGDOptions(
            noise_multiplier=cfg.noise_multiplier, steps=0, target_delta=cfg.target_delta,
            clip="percentile" if cfg.clip == "adaptive" else "fixed", clip_norm=cfg.clip_norm,
            clip_percentile=float(cfg.clip_percentile),
            projection_dim=projection_dim_for(split.dim, cfg.projection, C),
            use_public_gradient=True, schedule=cfg.schedule, learning_rate=cfg.learning_rate, seed=cfg.seed,
        )
        return prob, W0, W0, opts, len(split.y_private)


@METHODS.register("ppgd")
class PPGD(_NoisyGDMethod):
    """PPGD: PPSGD of Wang & Zhou (AAAI 2020) run with NoisyGD, as AdaMix Sec. 4 describes it.

    AdaMix describes it as: public data used to set the clipping adaptively ("the norm of the
    average gradient of the public samples"), a private model trained first, then a mixed
    model trained with the private one as regularizer ("model reuse"), and NoisyGD instead of
    DP-SGD. Choices made here (the paper gives no further detail):

    1. Phase 1 (private, the only DP release): NoisyGD on the *private* rows only, from
       ``W = 0`` (AdaMix's contribution is the public init, PPGD has none), clip threshold
       ``tau_t = ||(1/N_pub) sum_j g_j^pub(w_t)||`` (norm of the mean public gradient), no
       projection, no public gradient in the update, decay centred at 0, same schedule and
       the full calibrated T. Sensitivity ``tau_t`` per step, noise std ``sigma tau_t``.
    2. Phase 2 (model reuse, post-processing): L-BFGS on the mean public loss +
       ``reuse_l2/2 ||W - W_priv||^2`` starting from ``W_priv``; it reads no private data.

    The paper hand-tuned PPGD's hyper-parameters (on test error); here they are fixed
    defaults, and ``optimistic_tuning`` reproduces the tuning of phase 1 only.
    """

    config_cls = PPGDConfig
    description = "PPGD: private NoisyGD with public-gradient clipping, then model reuse on public data"
    paper = "Wang & Zhou, AAAI 2020 (PPSGD) as adapted in AdaMix Sec. 4"

    def _setup(self, split, d):
        cfg = self.config
        if len(split.y_public) == 0:
            raise DataError("X_public: ppgd needs public samples")
        C = split.n_classes
        prob = NoisyGDProblem(d["Xq"], split.y_private, d["Xp"], split.y_public, d["Xt"], split.y_test, C)
        W0 = np.zeros((split.dim, C), np.float32)
        opts = NoisyGDOptions(
            noise_multiplier=cfg.noise_multiplier, steps=0, target_delta=cfg.target_delta,
            clip="public_mean", projection_dim=None, use_public_gradient=False,
            schedule=cfg.schedule, learning_rate=cfg.learning_rate, seed=cfg.seed,
        )
        return prob, W0, W0, opts, len(split.y_private)

    def _ref_distance(self, W_ref: np.ndarray, C: int) -> float:
        return float(self.config.ref_distance) if self.config.ref_distance is not None else math.sqrt(C) * math.log(C)

    def fit(self, split: Any, *, on_step: OnStep | None = None) -> "PPGD":
        super().fit(split, on_step=on_step)
        self.W_private_ = self.W_
        d = _normalized(split)
        l2 = self.config.reuse_l2 if self.config.reuse_l2 is not None else 1.0 / len(split.y_public)
        self.W_ = fit_logistic(d["Xp"], split.y_public, split.n_classes, l2=l2, init=self.W_private_, center=self.W_private_)
        return self
