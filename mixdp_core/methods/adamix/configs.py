"""Configs of the AdaMix family: every field declares its type, range, help and privacy cost
(:func:`mixdp_core.config.param`); the library constants of the ``smooth`` schedule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ...config import SEED_RANGE, Interval, param
from ...errors import ConfigError
from ..base import PrivacyConfig

#: Learning rates the paper searched for ResNet-50 features (App. A.6), sum-loss scale.
PAPER_LEARNING_RATES: tuple[float, ...] = (5e-4, 1e-3, 2.5e-3, 5e-3)
#: z-score of the noise-scaled start (see ``NoisyGDMethod._noise_scaled_start``). Set on
#: development data, with BURN_IN_ALIGNMENT: docs/results/tuning_notes.md, NOISE_MARGIN_Z.
NOISE_MARGIN_Z = 3.0
#: Assumed alignment of the clipped private gradients in the burn-in horizon (see there), at
#: C = 10 classes; init_scale='class_scaled' (and the default 'release_capped') scales it by sqrt(10 / C).
BURN_IN_ALIGNMENT = 0.3
#: The number of classes at which BURN_IN_ALIGNMENT was set (digits, CIFAR-10).
BURN_IN_CLASSES = 10
#: Share of the class histogram's releases spent on its pilot (``histogram_share=None``): the
#: pilot decides by a χ² test whether the rest is spent. A convention fixed before measuring
#: (not chosen on test error): a quarter keeps the pilot's cost on balanced data small while its
#: noise std is only twice the full histogram's. docs/results/class_balance.md.
HISTOGRAM_PILOT_SHARE = 0.25
#: Level of the pilot's χ² test of balanced classes: the conventional 5 %, so a private set whose
#: rows' classes were drawn with equal probabilities spends the rest of the histogram's releases in
#: about 1 run in 20 (``histogram_test="sampled_classes"``, the default; classes of exactly equal
#: counts in fewer; docs/results/class_balance.md).
HISTOGRAM_TEST_LEVEL = 0.05
#: Threshold of the public-start guard in noise stds: the private phase's model is released
#: only if its noisy paired count beats the public start's by more than GUARD_Z * sigma (a
#: one-sided test; a phase that did not help passes with probability 1 - Phi(1) ~ 16 %, not
#: 1/2). Set on development data; measurements: docs/results/tuning_notes.md, GUARD_Z.
GUARD_Z = 1.0
#: Factors t of the path ``W_start + t (W_private - W_start)`` that the public-start guard chooses
#: among (``guard_candidates="shrinkage_path"``): the shrinkage rule's s halved, kept, doubled.
#: Why these: on the development regimes' guard-off grids the error-optimal s lay within a
#: factor 2 of the rule's on either side (fine-grained imbalance 6-10 at epsilon = 8 asked
#: s/2, the 100-class regimes at epsilon = 1 asked 2 s); a wider or finer path costs the count's
#: resolution (noise grows as sqrt(K)). docs/results/tuning_notes.md, "The guard's path".
GUARD_PATH_FACTORS: tuple[float, ...] = (0.5, 1.0, 2.0)
#: Early-checkpoint test (``early_checkpoint``): the earlier candidate is the released average
#: after ``T_grad // CHECKPOINT_DIVISOR`` gradient steps: a quarter in, a run whose noise outgrew
#: its signal under a domain shift was still better than at its end ("more budget never hurts").
#: Measurements: docs/results/tuning_notes.md, CHECKPOINT_DIVISOR.
CHECKPOINT_DIVISOR = 4
#: The early-checkpoint test runs only when at least this many gradient steps are left after
#: its release (at epsilon = 0.5, sigma = 20 a run has 6: a checkpoint after 1 step would only
#: cost one of them). Its source is this reasoning on step counts, not a measurement of error.
MIN_CHECKPOINT_STEPS = 8
#: Scale of the default guess of R = ||w* - w_ref|| (Thm. 3; ``ref_distance=None``): R =
#: REF_DISTANCE_SCALE * max(||w_ref||_F, sqrt(C) ln C). Thm. 3's lambda balances a worst-case
#: bound and over-regularizes towards w_ref; doubling R halves it. A library constant chosen on
#: development regimes (the user's ``ref_distance`` replaces the guess); measurements:
#: docs/results/tuning_notes.md, REF_DISTANCE_SCALE.
REF_DISTANCE_SCALE = 2.0
#: Candidates of ``honest_tuning`` (private selection with random stopping), as multipliers
#: (of the noise margin z of the start, of the Thm.-3 lambda) of the defaults; entry 0 is the
#: default itself (1, 1), the others halve/double z and divide/multiply lambda by 4 (one
#: factor per side: the selection affords E[K] ~ 2.5 repetitions, so a wide grid would
#: mostly draw far-off candidates).
HONEST_GRID: tuple[tuple[float, float], ...] = ((1.0, 1.0),) + tuple(
    (z, m) for z in (0.5, 1.0, 2.0) for m in (0.25, 1.0, 4.0) if (z, m) != (1.0, 1.0))
#: Probability that one honest-tuning repetition draws the default candidate (else one of the
#: others uniformly): the defaults are the public-information choice, so the selection's
#: prior puts half its mass on them; the draw is i.i.d. across repetitions, as Thm. 2 of
#: Papernot & Steinke (2022) requires.
HONEST_DEFAULT_WEIGHT = 0.5
#: Multipliers of the Thm.-3 lambda searched by optimistic tuning (an option labelled as costing
#: privacy): the same one factor of 4 per side as :data:`HONEST_GRID`'s lambda, by the same
#: reasoning; no measurement chose it.
THEOREM3_LAMBDA_GRID: tuple[float, ...] = (0.25, 1.0, 4.0)
#: The public-start guard's releases are at most ``(T − count releases) / GUARD_RELEASES_DIVISOR``
#: of the run's (``guard_resolution``): the guard may not take more than 1/16 of the gradient
#: steps. Measured with ``guard_resolution``: docs/results/tuning_notes.md, "The guard's resolution"
#: (development regimes, then the validation tables).
GUARD_RELEASES_DIVISOR = 16


# ----------------------------------------------------------------------------- configs

#: Choices and help of ``class_balance`` (one text for every config that has the field).
_CLASS_BALANCE_CHOICES = ("logit_adjust", "logit_adjust_weighted_tests", "none")
_CLASS_BALANCE_HELP = (
    "schedule='smooth': 'logit_adjust' (default) releases a noisy per-class histogram of the private rows "
    "instead of the noisy count (a Gaussian release of sensitivity 1 taking m of the run's T releases, noise "
    "σ/sqrt(m) per class: histogram_share; no extra ε), "
    "shrinks it towards its mean (James–Stein: balanced data give no offset) and trains on the "
    "logit-adjusted loss −log softmax(xW + log π̂)_y (Menon et al. 2021), so an imbalanced private set "
    "does not pull predictions to its majority classes: the model targets the balanced error. "
    "'logit_adjust_weighted_tests' also weighs the guard's and checkpoint's noisy counts by min n̂ / n̂_c "
    "(every class alike, sensitivity still 1; less power: measured in docs/results/class_balance.md). "
    "'none': plain cross-entropy and the noisy count."
)
#: Help of ``trust_region`` (AdaMix's field adds why its default is off).
_TRUST_REGION_HELP = "schedule='smooth': project the iterates onto ||w − w_ref|| <= R (Thm. 3's constraint set)."
#: Help of ``feature_center`` (one text for every config that has the field).
_FEATURE_CENTER_HELP = (
    "Input map of the linear head: 'auto' (default) = 'public_mean' for methods that read the public rows as "
    "public (only_public, paragon, ngd, adamix with init='public'), else 'none'; 'public_mean' = rows scaled to "
    "unit norm, minus the mean of the unit-norm public rows, scaled to unit norm again (removes the mean that "
    "encoder features share, which carries no class signal but takes most of a clipped gradient's norm; public "
    "data only, no privacy cost); 'none' = rows scaled to unit norm.")


_L2_RULE_HELP = (
    "Ridge of the public logistic fit: 'loo' (default) = selected from the public rows by approximate "
    "class-balanced leave-one-out log-loss over 1, 10^-0.5, ..., 1e-5 (select_l2_loo: works with 2 shots, reads "
    "no private or test data; with 1 public row per class nothing can be held out and it is ONE_SHOT_L2 = 1e-4, "
    "chosen on 1-shot development settings); 'fixed' = PUBLIC_L2 = 1e-2 (the earlier default).")
def _check_device(value: Any) -> None:
    from .kernels import check_device  # lazy: kept off the configs' import; the kernels import no torch

    check_device(value)


def device_param(*, help: str) -> Any:
    """A config's ``device`` field: ``'auto'`` (default), ``'cpu'`` or ``'cuda'``, with ``'cuda'``
    refused where torch sees no GPU (:func:`~mixdp_core.methods.adamix.kernels.check_device`).
    One declaration for every method that offers a device (``help`` says what runs there)."""
    return param("auto", choices=("auto", "cpu", "cuda"), check=_check_device, help=help)


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
        help="Ridge coefficient on the mean loss; None = picked by stratified 5-fold cross-validation on the rows "
             "the method trains on (non-private: no privacy cost, never looks at test data).")
    max_iter: int = param(500, type=int, range=Interval(1, None), help="L-BFGS iterations.")
    feature_center: str = param("auto", choices=("auto", "public_mean", "none"), help=_FEATURE_CENTER_HELP)


@dataclass(frozen=True, kw_only=True)
class OnlyPublicConfig(NonPrivateConfig):
    """``only_public``: :class:`NonPrivateConfig` with its own ridge rules (public rows only).

    ``l2_rule="loo"`` is the default: the ridge is selected from the public rows (approximate
    leave-one-out, ``ONE_SHOT_L2`` with one row per class), and the AdaMix family's public start
    uses the same rule (``public_l2_rule``), so Only-Public is still that start
    (docs/results/only_public_ridge.md)."""

    seed: int = param(0, type=int, range=SEED_RANGE, help="Unused (both ridge rules are deterministic); uniform "
                                                           "interface.")
    l2: Optional[float] = param(
        None, type=float, range=_NONNEG,
        help="Ridge coefficient on the mean loss; None = the rule l2_rule.")
    l2_rule: str = param(
        "loo", choices=("loo", "fixed"),
        help=_L2_RULE_HELP + " The same rule as the public start of AdaMix / NGD (public_l2_rule), so both "
             "report the same model.")


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

    ``schedule="smooth"`` is the default (see the module docstring: noisy count,
    mean-loss scale, descent-lemma step cap, ball projection, rescaled public start); every
    input of its step sizes is public or an already released noisy quantity.
    """

    noise_multiplier: float = param(20.0, type=float, range=_POS, unit="σ",
                                    help="σ (paper: 20); the number of steps T is calibrated from it.")
    seed: int = param(0, type=int, range=SEED_RANGE,
                      help="Seed of the projection completion, and of the noise only with noise='reproducible'.")
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
        "theorem3", choices=("theorem3", "worst_case", "effective"),
        help="'theorem3' (λ = (τ/R) sqrt(2 d / ρ), d = noise dimension, ρ = T/(2σ²)), 'worst_case' (also "
             "balances the optimization term of Thm. 3, on the mean-loss scale set by the released noisy count; "
             "stronger decay; schedule='smooth' only, since the other schedules would need the exact private "
             "count) or 'effective' (the noise costs loss only along curved directions: d is replaced by the "
             "ridge degrees of freedom tr(H (H + λ)⁻¹) <= tr(H)/λ, tr(H) <= 1 for unit rows on the mean loss, "
             "giving λ = min(theorem3, (4 s² / (R² T))^(1/3)); schedule='smooth' only).")
    ref_distance: Optional[float] = param(None, type=float, range=_POS,
                                          help="R, the guessed distance ||w* − w_ref|| of the Thm.-3 rule and the "
                                               f"trust region; None = {REF_DISTANCE_SCALE:g} max(||w_ref||_F, sqrt(C) "
                                               "ln C) (REF_DISTANCE_SCALE; public information only).")
    public_l2: Optional[float] = param(None, type=float, range=_NONNEG,
                                       help="Ridge (mean-loss scale) of the public pre-training; None = the rule "
                                            "public_l2_rule (the same fit only_public reports).")
    public_l2_rule: str = param("loo", choices=("loo", "fixed"),
                                help=_L2_RULE_HELP + " Used when public_l2 is None.")
    eval_every: Optional[int] = param(None, type=int, range=Interval(1, None),
                                      help="Test error every this many steps; None = max(1, T // 50).")
    feature_center: str = param("auto", choices=("auto", "public_mean", "none"), help=_FEATURE_CENTER_HELP)
    subspace_diagnostics: bool = param(
        False, type=bool, leaks_private=True,
        help="AdaMix Fig. 6 (runs with a projection): at every test-error step, the relative reconstruction error "
             "of the clipped private gradient sum on the public-gradient subspace and on a random subspace of the "
             "same dimension, in the step records (subspace_error_public / subspace_error_random) and as a live "
             "chart. The released model does not change.",
        privacy_note="reads the private gradient sum before the noise and is not covered by the run's ε: shown "
                     "to the data owner only, never released")
    optimistic_tuning: bool = param(
        False, type=bool, leaks_private=True,
        privacy_note="runs the method once per value of the paper's grid and keeps the run with the lowest test "
                     "error (App. A.6); the reported privacy_ composes all runs and exceeds target_epsilon, and "
                     "the selected test error is optimistic.",
        help="Tune on the paper's grid using test results, as the paper did. Off by default.")
    honest_tuning: bool = param(
        False, type=bool,
        help="Private hyper-parameter selection (candidates HONEST_GRID: the default with probability 1/2, else "
             "z x {1/2, 1, 2} and λ x {1/4, 1, 4} around it) with a TNB(tuning_eta, tuning_gamma) number of "
             "repetitions, scored on a held-out tuning_val_fraction of the private rows with a noisy count; the "
             "reported ε is that of the whole selection (Papernot & Steinke 2022, Thm. 2) and never exceeds the "
             "target. schedule='smooth' only.")
    tuning_gamma: float = param(0.2, type=float, range=Interval(0.001, 1.0, closed="left"),
                                help="γ of the truncated negative binomial TNB(η, γ) number of tuning repetitions "
                                     "(η = 0: logarithmic, E[K] = (1/γ − 1)/ln(1/γ) ≈ 2.5 at 0.2). At least 0.001: "
                                     "E[K] is about 1/γ (η = 1), and K full runs are trained before anything is "
                                     "released (the selection streams no record until it ends: K is hidden).")
    tuning_eta: float = param(0.0, type=float, range=Interval(0.0, 1.0),
                              help="η of TNB(η, γ): 0 (logarithmic, default) up to 1 (geometric). The privacy "
                                   "overhead of the selection grows with (1 + η) (Papernot & Steinke 2022, Thm. 2), "
                                   "so η = 0 leaves each repetition the most steps (at ε = 3, σ = 20: 96 of 205 "
                                   "vs 58 with the geometric γ = 0.2).")
    tuning_val_fraction: float = param(0.2, type=float, range=_UNIT_OPEN,
                                       help="Share of the private rows held out to score honest-tuning candidates.")
    blas_threads: Optional[int] = param(1, type=int, range=Interval(1, 1024), optional=True,
                                        none_means="the process setting",
                                        help="BLAS threads during fit (restored afterwards; at most the machine's "
                                             "CPU count are used); None leaves the process setting "
                                             "(benchmarks/train.py measures the best count).")
    trust_region: bool = param(True, type=bool, help=_TRUST_REGION_HELP)
    init_scale: str = param(
        "release_capped", choices=("release_capped", "class_scaled", "signal_share", "noise", "grow_only",
                                   "released_noise", "none"),
        help="schedule='smooth' with a public start: 'release_capped' (default) is 'class_scaled' capped, once "
             "the run outlasts its burn-in, at the size 'released_noise' gives: the start never needs to outlast "
             "more noise than the released average keeps (the burn-in's noise model ignores the weight decay's "
             "contraction; docs/results/tuning_notes.md). "
             "'class_scaled' rescales the public solution so the "
             "noise of the run's burn-in cannot flip its predictions (up or down), with a burn-in horizon that "
             "grows with the number of classes C: the assumed alignment of the clipped gradient sum "
             "(BURN_IN_ALIGNMENT, set at C = 10) scales as sqrt(10/C), since at the start each class column "
             "collects signal from its own rows only (docs/results/centering.md); 'signal_share' takes that "
             "alignment from the public rows instead of BURN_IN_ALIGNMENT: s / sqrt(C - 1), s the rows' class-signal "
             "share estimated without the few-shot bias (falls back to 'class_scaled' at 1 shot; measured, not the "
             "default: it loses about 1 point at epsilon = 8 where the public start is poor); 'noise' (the "
             "former default) "
             "keeps the alignment fixed at every C; 'grow_only' takes the 'noise' factor but never below 1; "
             "'released_noise' sizes the start, once the run outlasts the burn-in, against the noise of the "
             "released average; 'none' starts at the public solution unscaled. Public inputs only.")
    class_balance: str = param("logit_adjust", choices=_CLASS_BALANCE_CHOICES, help=_CLASS_BALANCE_HELP)
    histogram_share: Optional[float] = param(
        None, type=float, range=Interval(0.0, 0.5, closed="both"),
        help="schedule='smooth' with class_balance != 'none': share f of the run's T releases spent on the noisy "
             "class histogram, m = max(1, round(f T)) releases' worth: one Gaussian release with noise σ/sqrt(m) "
             "per class (exactly m releases at σ: the same μ), leaving T − m for the rest of the run; 0 = one "
             "release at σ (the former default). None (default): staged, m = round(a/(1 + a) T), a = "
             "BURN_IN_ALIGNMENT sqrt(10/C) the start's assumed alignment of the clipped gradient (the split that "
             "equalizes the marginal value of a release to the logit offsets and to the class columns): a pilot "
             "of a quarter of m, and the rest only if a χ² test at 5 % on the pilot finds the classes "
             "imbalanced (histogram_test; balanced classes lose about m/4 gradient steps, not m; "
             "docs/results/class_balance.md).")
    histogram_test: str = param(
        "sampled_classes", choices=("sampled_classes", "equal_counts"),
        help="histogram_share=None: the null hypothesis of the pilot's χ² test (statistic Σ_c (ñ_c − mean ñ)² / s², "
             "against the χ²_{C−1} quantile at 1 − HISTOGRAM_TEST_LEVEL). 'sampled_classes' (default since "
             "2026-11-29): every private row's class was drawn with equal probabilities, so the counts spread "
             "as a multinomial's, s² = n̂/C + σ²/m₁ + 1/12 (n̂ the pilot's total: sampling, noise, rounding); "
             "derived, no constant. 'equal_counts' (the former default): every class has exactly the same count, "
             "s² = σ²/m₁ + 1/12; it flags the natural spread of real data sets as imbalanced (digits in 9 of 40 "
             "runs; docs/results/class_balance.md). Post-processing of the pilot's release.",
        privacy_note="post-processing of the pilot: no release, no extra ε")
    public_guard: bool = param(
        True, type=bool,
        help="schedule='smooth' with a public start: release one noisy paired count on the private rows, "
             "(#correct of the trained model) − (#correct of the public start) + noise, and keep the public "
             "start unless it exceeds GUARD_Z (1) noise stds, so the private phase cannot make the released model "
             "worse than Only-Public by more than the noise allows. Sensitivity 1 (add/remove). Its noise takes m "
             "of the run's T releases (one Gaussian release at σ/√m; m from guard_resolution, at most 1/16 of the "
             "gradient releases; m = 1, noise σ, where guard_resolution is None or there is no class histogram), "
             "accounted (T = count + guard + gradient steps).",
        privacy_note="m of the run's Gaussian releases on private rows (guard_resolution), accounted in the run's ε")
    guard_rule: str = param(
        "single_count", choices=("single_count", "balanced_when_imbalanced"),
        help="schedule='smooth' with the public-start guard: 'single_count' (default): one release at σ, weights "
             "only with class_balance='logit_adjust_weighted_tests'. 'balanced_when_imbalanced' (measured, not "
             "the default: it moved the failing development cell by 0.1 point and cost 0.6–2.3 elsewhere; "
             "docs/results/tuning_notes.md, 'The guard under imbalance'): where the class "
             "histogram's pilot found the private classes imbalanced (class_balance='logit_adjust'), the guard's "
             "and the checkpoint test's paired counts weigh every class alike (w_c = min n̂ / n̂_c, from the released "
             "histogram: the count estimates the balanced accuracy gain the test set measures, not the majority "
             "classes'), and the guard takes the histogram's m releases' worth (one Gaussian release at σ/sqrt(m): "
             "the weighted count's power grows with the budget as the run's does); balanced data keep 'single_count'.",
        privacy_note="the guard's m releases are part of the run's T, accounted (no extra ε)")
    guard_count: str = param(
        "leave_one_out", choices=("leave_one_out", "in_sample"),
        help="schedule='smooth' with the public-start guard: which logits of the trained model its paired count "
             "asks on each private row. 'leave_one_out' (default): the row's logits minus its own clipped "
             "gradients' pull on them, tracked through the run (a first-order leave-one-out model: within 3 % of "
             "retraining without the row; the count no longer rewards rows the model is right on only because it "
             "trained on them). 'in_sample': the trained model's own logits, an optimistic count where the model "
             "has many more weights than private rows (measured: about 20 points optimistic on 83 classes × "
             "2048 dimensions with 49 rows per class; docs/results/tuning_notes.md, \"The guard's count\""
             "). Same release either way: sensitivity 1 (each row's term depends on that row and the "
             "releases only), one Gaussian release at σ.",
        privacy_note="no extra release: it changes what the guard's one accounted count sums")
    guard_candidates: str = param(
        "shrinkage_path", choices=("shrinkage_path", "single"),
        help="schedule='smooth' with the public-start guard: what its count asks. 'single': the released "
             "model against the public start (one count). 'shrinkage_path' (default): the models W_start + t (W − "
             "W_start) for t in GUARD_PATH_FACTORS (the shrinkage halved, kept, doubled; never more than the "
             "whole update), as one Gaussian vector release of their K paired counts with noise σ_g sqrt(K) each "
             "(L2 sensitivity sqrt(K): the μ of the single count, no extra ε); the largest noisy gain is "
             "released if it clears the bar raised to the Šidák level Φ⁻¹(Φ(GUARD_Z)^(1/K)). Only where that "
             "noise is at most guard_resolution times the private rows' lower bound n̂_lo (about 1,700 rows at "
             "σ = 20, r = 0.02); elsewhere the single count. Unweighted counts only (not with "
             "class-weighted tests). docs/results/tuning_notes.md, \"The guard's path\".",
        privacy_note="no extra release: the guard's one accounted release becomes a vector of the same μ")
    guard_resolution: Optional[float] = param(
        0.02, type=float, range=Interval(0.0, 0.5, closed="right"), optional=True,
        none_means="one release at σ",
        help="schedule='smooth' with the public-start guard and a class histogram (class_balance != 'none'): "
             "r (default 0.02), the largest noise std of the guard's count as a share of the private rows. "
             "The count takes m = ceil((σ / (r n̂_lo))²) releases' worth (one Gaussian release at σ/sqrt(m)), "
             "n̂_lo the released histogram's total minus two of its stds, at most (T − histogram releases)/16, "
             "so the gradient phase keeps at least 15/16 of its releases; m = 1 where n̂_lo ≥ σ/r (1,000 rows "
             "at r = 0.02). None: one release at σ (a noise std of 20 rows: 10 % of 200 private rows; the default before "
             "2026-11-28). Where the guard decides (a few hundred private rows) it gained 0.6–4.7 points and cost "
             "up to 0.8 where it does not (the releases it takes from the gradient phase; "
             "docs/results/tuning_notes.md, \"The guard's resolution\").",
        privacy_note="the guard's m releases are part of the run's T, accounted (no extra ε)")
    update_shrinkage: str = param(
        "checked_when_imbalanced",
        choices=("two_iterate_when_balanced", "checked_when_imbalanced", "public_logits", "public_likelihood",
                 "none"),
        help="schedule='smooth' with a public start and no projection: what the run releases of its private "
             "phase. 'public_logits': W_start + s (W − W_start) with s = max(0, 1 − C ν² Σ‖x‖² / "
             "Σ‖x (W − W_start)‖²) over the public rows x, ν the per-coordinate std of the released average's "
             "noise (from the step records): the factor minimizing the expected squared logit error on the "
             "public rows (positive-part James–Stein; no constant). Where the noise's logit energy is most of "
             "the update's (many classes, high D, small ε) it keeps the public start's knowledge instead of "
             "trading it for noise; the checkpoint test and the guard then ask the shrunk models. "
             "'two_iterate_when_balanced' (the default from 2026-11-29 to 11-30): where the class histogram's χ² test finds "
             "the private classes balanced, W_start + u Δ + v L instead, Δ the average's update and L the last "
             "iterate's, (u, v) the unbiased (Stein) minimizer of the squared logit error on the public rows "
             "against the noise-free last iterate (the average lags the iterate it averages); elsewhere "
             "'public_logits'. Chosen on 27 balanced cells through the guard (−0.48 points on average, better in 22, "
             "worse in 2) and validated on draws never run before (docs/results/tuning_notes.md, \"The average "
             "lags\"). 'none': the private phase's average as it ends (docs/results/tuning_notes.md, \"The "
             "private update's shrinkage\"). 'public_likelihood' (measured, not the default): s = b / a "
             "(clipped to [0, 1]) of "
             "the two-weight softmax model a·z_start + b·z_update fitted to the public labels, on each public "
             "row's leave-one-out logits (the start refitted without it, the update less its own gradient's "
             "pull); it targets the predicted class rather than the squared logit error, and falls back to "
             "'public_logits' at one public row per class. On the development regimes it moved the error by "
             "−1.4 to +1.8 points, no better overall: the leave-one-out start (k − 1 shots) under-states the "
             "k-shot start (docs/results/tuning_notes.md, \"Shrinkage by the public likelihood\"). "
             "'checked_when_imbalanced' (default since 2026-11-30): the two-iterate release where the pilot finds "
             "the classes balanced; "
             "where it finds them imbalanced, the 'public_logits' factor unless that model's profile likelihood of "
             "the public labels (leave-one-out logits, as 'public_likelihood' uses) is below the start's, then "
             "'public_likelihood''s factor (update_check_rejected_ says which). Why: under a steep tail on real "
             "features the update's direction itself can lower the balanced accuracy, which a noise-based rule "
             "cannot see. Chosen on development sets, reported on validation sets never used: balanced accuracy "
             "non-decreasing in ε on six real cells (CIFAR-10, digits EfficientNet and pixels at imbalance 30 and "
             "100) where the rule alone failed on four; digits pixels lose 1.0–1.6 points at ε ≥ 3; synthetic "
             "validation regimes −0.05 points (docs/results/class_balance.md, \"A steep tail\"). "
             "Post-processing of the releases and public rows.",
        privacy_note="post-processing: no release, no extra ε")
    guard_holdout: float = param(
        0.0, type=float, range=Interval(0.0, 0.5, closed="both"),
        help="0 (default): the public-start guard counts on the private training rows. > 0: that share of the "
             "private rows is held out by an independent coin (never trained on) and the guard asks them, class-"
             "balanced, instead: a noisy per-class histogram of the held-out rows sets weights 1/max(ñ_c, 3σ_g) "
             "and the weighted paired gain is released with noise σ_g/max weight. The two parts are disjoint, so "
             "the run is as private as its worse part and the held-out part is given the training part's μ: no "
             "extra ε (the early-checkpoint test is not run).",
        privacy_note="two Gaussian releases on held-out private rows, parallel to the training part (no extra ε)")
    early_checkpoint: bool = param(
        True, type=bool,
        help="schedule='smooth' with the public-start guard, when >= MIN_CHECKPOINT_STEPS (8) gradient steps "
             "remain: release one noisy paired count on the private rows, (#correct of the average after a "
             "quarter of the steps) − (#correct of the final average) + N(0, σ²), and carry the earlier average "
             "to the guard if it exceeds GUARD_Z σ (1 σ), so a run whose noise outgrew its private signal late "
             "(measured under domain shift) does not end worse than it was. Sensitivity 1 (add/remove): one more "
             "Gaussian release of the run, accounted (T = count + gradient steps + checkpoint test + guard).",
        privacy_note="one Gaussian release on private rows, accounted in the run's ε")

    # --- device of the private release: the same mechanism and ε on every device ---
    device: str = device_param(
        help="Where the private release (the two products with the private features) runs: 'cpu' (numpy, or "
             "the fused numba kernel for large feature matrices), 'cuda' (torch on the GPU; refused when torch "
             "sees none), 'auto' (CUDA when torch sees a GPU and the private features take >= 16 MiB, where a "
             "run outlasts starting CUDA and copying them; else cpu). The noise is drawn on the host, so the "
             "released quantity, its noise and ε are the same on every device.")

    def __post_init__(self) -> None:
        super().__post_init__()  # every declared field
        if self.schedule == "theorem3" and self.weight_decay == 0:
            raise ConfigError("weight_decay", "must be > 0 or None with schedule='theorem3', got 0")
        if self.weight_decay_rule == "worst_case" and self.schedule != "smooth" and self.weight_decay is None:
            # On the summed loss its Lipschitz constant is N_private τ: the exact private count,
            # unaccounted under add/remove neighbours. 'smooth' uses the released noisy count.
            raise ConfigError("weight_decay_rule", "'worst_case' needs schedule='smooth' (the other schedules "
                                                   "would set λ from the exact private count, which is private)")
        if self.weight_decay_rule == "effective" and self.schedule != "smooth" and self.weight_decay is None:
            raise ConfigError("weight_decay_rule", "'effective' needs schedule='smooth' (it is stated on the "
                                                   "mean loss, whose scale comes from the released count)")
        if self.honest_tuning and self.optimistic_tuning:
            raise ConfigError("honest_tuning", "choose honest_tuning or optimistic_tuning, not both")
        if self.honest_tuning and self.schedule != "smooth":
            raise ConfigError("honest_tuning", "is implemented for schedule='smooth'")
        if self.guard_holdout > 0:  # else silently a different mechanism from the one configured
            if self.honest_tuning:
                raise ConfigError("guard_holdout", "is not used with honest_tuning (each repetition runs the "
                                                   "in-sample guard); set guard_holdout=0")
            if not self.public_guard or self.schedule != "smooth":
                raise ConfigError("guard_holdout", "asks the public-start guard's question on held-out rows: it "
                                                   "needs public_guard=True and schedule='smooth'")


@dataclass(frozen=True, kw_only=True)
class FullyPrivateConfig(NoisyGDConfig):
    """``fully_private``: NoisyGD from zero on all rows as private."""

    clip_norm: float = param(1.0, type=float, range=_POS,
                             help="Fixed clip threshold τ (per-sample gradient norms are <= sqrt(2)).")

    # the public rows are private here: their mean is not free, so no centring on it
    feature_center: str = param("auto", choices=("auto", "none"),
                                help="'auto' = 'none' here: fully_private treats the public rows as private, so "
                                     "their mean is not free (no public-mean centring); rows scaled to unit norm.")
    # plain (uncentred) rows: an offset error times their shared mean drifts every class column
    class_balance: str = param(
        "none", choices=_CLASS_BALANCE_CHOICES,
        help="Default 'none' here: fully_private reads plain rows (no public-mean centring), whose shared mean "
             "turns any error of the noisy offsets into a drift of every class column (measured collapses, "
             "docs/results/class_balance.md). " + _CLASS_BALANCE_HELP)


@dataclass(frozen=True, kw_only=True)
class NGDConfig(FullyPrivateConfig):
    """``ngd``: public init + NoisyGD with fixed clip, decay centred at the public solution."""

    feature_center: str = param("auto", choices=("auto", "public_mean", "none"), help=_FEATURE_CENTER_HELP)
    class_balance: str = param("logit_adjust", choices=_CLASS_BALANCE_CHOICES, help=_CLASS_BALANCE_HELP)


@dataclass(frozen=True, kw_only=True)
class AdaMixConfig(NoisyGDConfig):
    """``adamix`` (Alg. 2) and its ablations; each field declares its range and help below.

    ``projection`` is ``"none"`` by default (package docstring, item 8): the public gradient
    ``G_pub`` (D x C) has rank r <= C - 1, so the paper's "top 2000 of 2048 components" are
    fixed by the data only up to r; the rest of the kept subspace is a data-independent
    completion, which drops the same share of private signal outside ``U_r`` as of noise and
    keeps the model from ever learning the dropped directions. Measured on the development
    regimes with common noise draws (docs/results/tuning_notes.md, "The projection"): no
    projection is up to 0.8 points better at epsilon >= 3 and never worse beyond one standard
    error; on real features -0.8 to +0.3 points. The rank-C and public-span subspaces discard more private signal than
    noise in every few-shot regime measured (docs/results/fewshot.md). ``"paper"`` remains the
    paper's choice.
    """

    # The ball binds only where the private data ask the iterate to move further than the guessed R
    # (epsilon >= 8 in the regimes measured), and there it spends its radius on the classes with the
    # most rows; weight decay already keeps the strongly convex objective's iterates bounded.
    trust_region: bool = param(
        False, type=bool,
        help=_TRUST_REGION_HELP + " Off by default for AdaMix (on for the other NoisyGD methods): where the ball binds (ε = 8 on "
             "small-D and imbalanced sets) it starves the classes with few private rows; off was 0.1–2.2 points "
             "better at ε = 8 on nine of 28 development and validation sets, identical at ε ≤ 3 except +0.1 on one set, "
             "one validation cost of +0.4 ± 0.4 (docs/results/tuning_notes.md, \"The trust region under "
             "imbalance\"). Post-processing of released iterates either way: no privacy cost.")
    prior_correction: str = param(
        "public_when_imbalanced", choices=("public_when_imbalanced", "public", "none"),
        help="What the released model's per-class offsets are. 'public_when_imbalanced' (default since "
             "2026-11-29, pre-registered and validated on 18 imbalanced regimes never used to design it: −0.26 "
             "points of test error, +0.71 of minority-class accuracy, no regime worse than +0.34; "
             "docs/results/class_balance.md): where the class "
             "histogram's χ² pilot finds the private classes imbalanced and the run releases its private model "
             "(not the public start), per-class logit offsets fitted on the public rows so that the model's "
             "average predicted probability of every class over a class-balanced weighting of those rows is 1/C "
             "(the balanced maximum-likelihood intercepts; no constant): under imbalance the majority columns "
             "grow with their rows and the argmax leans to them (docs/results/class_balance.md, \"The released "
             "model's class prior\"). 'public': wherever the private model is released (measured: it costs "
             "0.2–1.3 points on balanced digits, where the offsets fit the few public rows' noise). 'none': no "
             "offsets (the default before).",
        privacy_note="post-processing of the released model on public rows: no release, no extra ε")
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
        "none", check=_check_projection, allowed="'paper', 'rank', 'public_span', 'none' or an integer >= 1",
        help="'none' (default: the released sum keeps every direction; beyond the public gradient's rank a "
             "kept subspace is not fixed by the data, and dropping data-independent directions cost up to 0.8 "
             "points at ε >= 3 in the development regimes), 'paper' (the paper's k = round(D · 2000/2048): the public "
             "gradient's top directions completed by fixed random ones), 'rank' (rank of the public gradient, "
             "<= C−1), 'public_span' (fixed basis of the span of the public features) or an integer k >= 1.")


@dataclass(frozen=True, kw_only=True)
class PPGDConfig(NoisyGDConfig):
    """``ppgd`` (see :class:`PPGD`)."""

    reuse_l2: Optional[float] = param(None, type=float, range=_NONNEG,
                                      help="Strength of the model-reuse regularizer reuse_l2/2 ||W − W_priv||² on the "
                                           "mean public loss; None = 1/N_pub.")
    ref_distance: Optional[float] = param(None, type=float, range=_POS,
                                          help="R, the guessed distance ||w* − w_0|| of the Thm.-3 rule and the trust "
                                               "region (from w_0 = 0); None = sqrt(C) ln C (the paper's guess, not "
                                               "scaled: REF_DISTANCE_SCALE was not measured for PPGD).")

