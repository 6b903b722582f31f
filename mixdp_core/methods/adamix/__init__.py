"""AdaMix family (package) (Golatkar et al., "Mixed Differential Privacy in Computer Vision").

All train a linear softmax head ``logits = phi(x) @ W`` (``W`` is ``(D, C)``, no bias)
with full-batch gradient descent; see :mod:`mixdp_core.methods._linear` for conventions and
:mod:`mixdp_core.methods.adamix.engine` for the mechanism, its sensitivity and its accounting.

**Input map** ``phi`` (``feature_center``, :class:`~.references.FeatureMap`): rows scaled to unit
norm, minus ``m``, the mean of the unit-norm *public* rows, scaled to unit norm again
(default ``"auto"``: for every method that reads the public rows as public and starts from
them, and for the references ``only_public`` / ``paragon``, so all compare on one map;
``fully_private`` and starts from text or zero keep plain unit rows). Why: post-ReLU encoder
features share a large nonnegative mean; after normalization it is most of every row's norm,
carries no class signal, takes most of each clipped private gradient's norm (against noise of
the same size in every direction) and sets the loss's top curvature. ``m`` is public, so the
map costs no privacy and holds no constant; mapped rows still have norm <= 1, so every
sensitivity bound below holds. Measured (docs/results/centering.md, development regimes
chosen on, validation regimes reported): it turned the 100-class few-shot regime from "the
private phase wrecks the start" into a ~40 % error cut at epsilon = 3.

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
  of public per-sample gradient norms; noise ``N(0, sigma^2 tau_t^2 I)``. ``projection="paper"``
  projects the clipped private gradients on the left-singular basis of the public gradient
  (completed to the paper's k) and adds the noise in the projected space; the default
  ``"none"`` keeps every direction (item 8 below). ``clip="fixed"`` gives the ablation.
  Without Thm. 3's trust region ``||W - W_ref|| <= R`` (``trust_region=False``, AdaMix's
  default; the other NoisyGD methods keep it): where the ball binds (ε = 8 on small-D and
  imbalanced sets) it spends its radius on the classes with the most private rows; weight
  decay keeps the iterates bounded (docs/results/tuning_notes.md, "The trust region under
  imbalance").
* ``ppgd``: the PPGD baseline (PPSGD of Wang & Zhou, AAAI 2020, run with NoisyGD); see
  :class:`PPGD` for every choice made.

Privacy of every private method: each step releases a Gaussian mechanism of L2 sensitivity
``tau_t`` (add/remove one private sample) with noise std ``sigma tau_t``; ``T`` steps compose
to :class:`mixdp_core.accounting.ComposedGaussian` ``(sigma, T)`` with
``T = accounting.calibrate_steps(noise_multiplier=sigma, target_epsilon, target_delta)``.
``privacy_`` is computed for the steps actually executed.

Default schedule ``"smooth"`` (every quantity a run uses comes from public data or from
released noisy quantities, never from private labels or test data; the library constants set
on development data, see 4.-7., have their measurements in docs/results/tuning_notes.md).
Measured problem with the former default (``"theorem3"``: eta_t = 2/(lambda(t+1)) on the
*summed* loss with the Thm.-3 lambda): lambda keeps only the noise term, so eta_1 = 1/lambda
is 10-30x past the stability limit of the summed loss (smoothness ~N/2); the first step
overshoots by more than ``||w_ref||`` and the error after step 1 exceeds Only-Public's at
small epsilon. The new schedule:

1. **Mean-loss scale through a noisy count.** ``N_private`` is private under add/remove, so
   the run first releases ``N_private + N(0, sigma^2)`` (sensitivity 1, noise multiplier
   sigma: accounted as one more release of the composed Gaussian; T = count + T-1 gradient
   steps) and divides the summed update by ``n_hat = N^_private + 2 sigma + N_public``
   (upper confidence bound: noise can only shrink the steps). With
   ``class_balance="logit_adjust"`` (default) the release is the class histogram instead,
   ``(n_1, ..., n_C) + N(0, sigma^2 I_C)`` (one row moves one bin by 1: sensitivity 1, the
   same cost); the count is its sum (std ``sqrt(C) sigma``, bound ``+ 2 sqrt(C) sigma``).
   Shrunk towards its mean (positive-part James–Stein: balanced classes give no offset), it
   sets ``b = log pi^`` of the logit-adjusted loss ``-log softmax(x W + b)_y`` (Menon et al.
   2021) of the private rows: the clipped terms keep their bound, and ``argmax x W`` targets
   the balanced error, so an imbalanced private set no longer pulls the model to its majority
   classes (measured: docs/results/class_balance.md).
2. **Descent-lemma step cap.** eta_t = min(2/(lambda (t+1)), 1/(beta_t + lambda)) with
   ``beta_t`` the clip-aware smoothness of the mean clipped objective
   (:func:`~mixdp_core.methods.adamix.engine.clipped_smoothness`: ``min(1/2, 2 tau_t)`` per
   private row, a property of the model and tau). Early steps are the largest steps that
   cannot overshoot; later the Thm.-3 schedule and the t-weighted average take over.
3. **Thm.-3 constraint set** (``trust_region``; on for NGD / PPGD / Fully-Private, off by
   default for AdaMix: where it binds it starves the classes with few private rows,
   tuning_notes.md "The trust region under imbalance"). Projection onto
   ``{||w - w_ref|| <= R}``, ``R = REF_DISTANCE_SCALE * max(||w_ref||, sqrt(C) ln C)``
   (public; scale 2), as Alg. 1 allows.
4. **Noise-scaled public start** (``init_scale="release_capped"``: the ``class_scaled`` rule
   below, capped as 4a says): the public solution is
   rescaled, ``alpha w_pub`` (identical predictions, so step 0 *is* Only-Public), so that its
   median public logit margin is ``z = 3`` standard deviations of the logit noise the run adds
   in its burn-in; see :meth:`.private.NoisyGDMethod._noise_scaled_start`. Starting at the
   converged ``w_pub`` itself saturates the softmax on private rows and stalls the private
   phase where a step's signal is strong; starting near 0 lets noise undo the public model
   where it is weak (both measured: docs/results/centering.md). The burn-in horizon assumes an
   alignment of the clipped gradient sum, :data:`BURN_IN_ALIGNMENT` = 0.3, set at 10 classes;
   at the start each class column of the sum collects signal from its own rows only, so the
   alignment scales like ``1/sqrt(C)`` and ``class_scaled`` uses ``0.3 sqrt(10 / C)``
   (identical at 10 classes; at 100 the former rule shrank the start to ~15 % of the public fit
   and the first steps' noise flipped most predictions: 41 -> 83 % error after 5 steps).
   ``z = 3`` (:data:`NOISE_MARGIN_Z`) and 0.3 are library constants set earlier on development
   data (digits, CIFAR-10 and PACS few-shot splits): empirical choices at 10 classes, carried to
   other C by the derived law. The 0.3 assumes a class-signal share ``s ~ 0.95`` (the
   alignment is ``s / sqrt(C - 1)``); measured, ``s`` is 0.26-0.69, and the option
   ``signal_share`` estimates it from the public rows instead
   (:func:`.references.public_signal_share`). It is not the default: better by up to 3 points
   at epsilon = 3 in most regimes, but 1.1 +- 0.4 points worse at epsilon = 8 where the public
   start is poor (``many_class_100_d256``, 8 seeds), where it broke property (a) of
   docs/results/regimes.md (centering.md, last section). ``grow_only`` (never shrink) and
   ``noise`` (no C law) remain options.
4a. **The cap past the burn-in** (``release_capped``, the default). The burn-in's noise model is
   a random walk of constant steps: it ignores the Thm.-3 weight decay, whose contraction
   towards ``w_ref`` keeps the *released* average's noise far smaller once ``lambda eta T >> 1``.
   Once T outlasts the burn-in, the start is therefore never larger than the size the noise of the
   released average gives (:func:`.engine.averaged_logit_noise_std`, exact for the run's capped,
   decayed, t-weighted schedule; the option ``released_noise`` alone): the start need not outlast
   more noise than the release keeps. Within the burn-in the rule is unchanged (capping there
   too was measured worse at epsilon <= 1). Measured with common noise draws (8 seeds,
   docs/results/tuning_notes.md): identical to ``class_scaled`` wherever the cap does not bind;
   where it binds, CIFAR-10 2 + 60 at epsilon = 3 / 8 46.8 / 40.5 -> 40.2 / 34.6 % (Fully-Private
   44.1 / 35.3 %: property (a) of docs/results/regimes.md failed there before) and CIFAR-10 2 + 20
   at epsilon = 8 50.6 -> 45.0 %.
4b. **Class histogram** (``class_balance="logit_adjust"``, the default): the first releases
   are a noisy class histogram whose shrunk counts set the logit-adjusted loss's offsets. It
   may take ``m = round(a/(1+a) T)`` of the run's T releases (``a = 0.3 sqrt(10 / C)``, the
   alignment above: the split that balances a release's value to the offsets and to the class
   columns), staged: a pilot of ``m/4`` (:data:`HISTOGRAM_PILOT_SHARE`) and the rest only when
   a chi² test at 5 % (:data:`HISTOGRAM_TEST_LEVEL`) rejects "every row's class drawn with
   probability 1/C" (``histogram_test``: the counts' multinomial spread n/C, the noise and the
   rounding); see
   :meth:`.private.NoisyGDMethod._released_histogram` and docs/results/class_balance.md. One
   release at sigma = 20, the former default, left the offsets random where classes hold
   5-55 private rows.
5. lambda: the Thm.-3 rule on the mean loss (noise std ``sigma tau / n_hat``) with that R.
   The rule balances a worst-case bound (noise along all k C directions costs as much as
   along the loss's high-curvature ones) and over-regularizes towards ``w_ref``; the factor 2
   in R (:data:`REF_DISTANCE_SCALE`, a library constant chosen by looking at test error in
   development regimes) halves lambda: better at epsilon >= 3 in every development regime and
   in those re-checked on unseen seeds, within 2.4 points at epsilon <= 1.
5b. **The released update is shrunk towards the public start** (``update_shrinkage=
   "public_logits"``: the default until 2026-11-29, and the default's rule wherever 5c does not
   apply; ``adamix`` and ``ngd``, no projection or the public span): the
   run releases ``W_start + s (W - W_start)`` with ``s = max(0, 1 - C nu^2 sum ||x||^2 / sum
   ||x (W - W_start)||^2)`` over the public rows x, ``nu`` the per-coordinate std of the
   released average's noise (:func:`.engine.released_noise_std`, from the step records;
   0.86-1.01 of the realized std). It is the factor minimizing the expected squared logit error
   of the update on the public rows (positive-part James–Stein, :func:`.engine.update_shrinkage`):
   the noise fills all D x C coordinates while the signal lives in the few directions the data
   span, so where the noise's logit energy is most of the update's (many classes, high D, small
   epsilon) the whole update costs the public start more than its signal gives. No constant;
   post-processing, no privacy cost. The checkpoint test and the guard ask the shrunk models.
   Measured with common noise draws (docs/results/tuning_notes.md, "The private update's
   shrinkage"): 100 classes x 1280 dimensions, 2 + 62 rows per class, epsilon = 3: 32.0 -> 19.7 %.
5c. **On balanced classes, the average and the last iterate combined** (``update_shrinkage=
   "two_iterate_when_balanced"``, the default from 2026-11-29; kept by 5d's default): where the class histogram's χ²
   pilot test does not reject balance, the run releases ``W_start + u Delta + v L`` instead,
   ``Delta`` the average's update and ``L`` the last iterate's (both post-processing of the same
   noisy gradients), ``(u, v) = e_2 - G^{-1} N e_2`` the unbiased (Stein) minimizer of the squared
   logit error on the public rows against the noise-free last iterate (``G`` the Gram matrix of
   the two updates' public logits, ``N`` its noise part from the step records:
   :func:`.engine.two_iterate_combination`, :func:`.engine.iterate_noise_covariance`). Why: the
   released t-weighted average lags the iterate it averages (on 4 of 7 development cells the
   error kept falling past the whole averaged update), and the last iterate alone is noisier.
   Elsewhere (imbalance found, or the estimate undefined) the rule of 5b. Measured with common
   noise draws through the guard on 27 balanced cells: −0.48 points on average, better in 22,
   worse in 2; under imbalance 10 the combination did not help (docs/results/tuning_notes.md,
   "The average lags"). No constant; post-processing, no privacy cost.
5d. **Under imbalance, 5b's model is checked on the public labels** (``update_shrinkage=
   "checked_when_imbalanced"``, the default since 2026-11-30; 5c where the pilot finds balance):
   where the class histogram's pilot finds the private classes imbalanced, 5b's factor ``s`` is
   kept unless its model predicts the public labels worse than the start itself, by the profile
   likelihood :func:`.engine.profile_log_likelihood` on the public rows' leave-one-out logits
   (the start refitted without the row, the update less the row's own pull); then the run
   releases the likelihood's own factor (:func:`.engine.stacking_shrinkage`).
   ``update_check_rejected_`` records which. Why: 5b trusts the update's direction; under a
   steep tail on real features the direction itself lowers the balanced accuracy (CIFAR-10 at
   imbalance 100, epsilon = 3 and 8: the error is lowest at a factor of 0.1-0.2 and rises past
   Only-Public's along the rest of the path), which no noise-based rule can see, and the
   class-balanced public labels can. The likelihood's factor
   alone is biased low (the leave-one-out start has k - 1 shots), hence a check of 5b, not a
   replacement. No constant; post-processing, no privacy cost. Chosen on development sets
   (imbalanced synthetic regimes, CIFAR-10 and digits EfficientNet at imbalance 100) and
   reported on validation sets never used (docs/results/class_balance.md, "A steep tail"):
   balanced accuracy is non-decreasing in epsilon on all six real cells (three feature sets at
   imbalance 30 and 100) where the rule alone failed on four; digits pixels lose 1.0-1.6
   points at epsilon >= 3 (2.4 at epsilon = 8 in the prototypes table); the synthetic validation and drawn regimes move by -0.05 points,
   the drawn ones' regenerated splits by +0.16 (up to 3.5 in one cell). Its wrong rejections
   are the leave-one-out's bias: the evidence's z-score does not separate them from its
   right ones (same file, "What it does not fix").
6. **Public-start guard** (``public_guard=True``; ``adamix`` and ``ngd``): the run's last
   release is a noisy paired count on the private rows, (#correct of the trained model) −
   (#correct of the public start) + N(0, sigma_g^2) (sensitivity 1), and the public start is
   released unless it exceeds one noise std (:data:`GUARD_Z` = 1, a one-sided test;
   :meth:`.private.NoisyGDMethod._public_guard`). The count takes m of the ``T`` releases'
   worth, ``sigma_g = sigma / sqrt(m)`` (accounted as m releases at sigma), with m the
   smallest that makes ``sigma_g`` at most 2 % of the private rows' lower bound from the
   released histogram, capped at 1/16 of the gradient phase (``guard_resolution=0.02``,
   :meth:`.private.NoisyGDMethod._guard_releases`): m = 1 from 1,000 private rows on; on 200
   rows one release's std is 10 % of them, and the shrunk model's gain rarely cleared it
   (docs/results/tuning_notes.md, "The guard's resolution").
   In the regime measured where the private phase hurt, it brought the error back to
   Only-Public's. The count asks each private row the *first-order leave-one-out* model
   (``guard_count="leave_one_out"``, the default): the row's logits minus the pull its own
   clipped gradients had on them, tracked through the run by the same recursions as the
   weights and their average (:attr:`.engine.NoisyGDResult.self_pull`; within 3 % of
   retraining without the row in the tests). On the rows it trained on, the model's own
   count is optimistic, by about 20 points where the weights far outnumber the private rows
   (83 classes × 2048 dimensions, 49 rows per class): the in-sample count (``"in_sample"``,
   the default before) released models worse than their start there. Under imbalance the
   count still rewards majority-class predictions (docs/results/regimes.md).
   ``guard_holdout > 0`` asks held-out private rows instead, class-balanced, at no extra ε
   (:meth:`.private.NoisyGDMethod._fit_holdout_guard`); measured there, not the default (it
   trains on fewer rows). ``guard_rule="balanced_when_imbalanced"`` counts class-weighted
   where the histogram's pilot found imbalance, with the histogram's share of the releases
   (:meth:`.private.NoisyGDMethod._guard_releases`); measured, not the default: the
   weighting removes the imbalance's bias but not the in-sample optimism, and the share costs
   gradient steps (docs/results/tuning_notes.md, "The guard under imbalance").
6a. **The guard chooses along the shrinkage path** (``guard_candidates="shrinkage_path"``, the
   default). Where its count resolves three candidates (``σ_g sqrt(3) <= guard_resolution ·
   n̂_lo``: about 1,700 private rows at σ = 20), the one release becomes a Gaussian vector of
   the paired counts of ``W_start + t (W - W_start)``, t in (1/2, 1, 2)
   (:data:`~.configs.GUARD_PATH_FACTORS`; never more than the whole update; for the combination
   of 5c, factors above 1 only while ``t (u + v) <= 1``), with noise ``σ_g sqrt(K)`` each for K
   candidates: L2 sensitivity sqrt(K), so the μ of the single count and no extra ε
   (:meth:`.private.NoisyGDMethod._guard_path_select`). The largest noisy gain is released
   if it clears the Šidák bar ``Φ⁻¹(Φ(GUARD_Z)^(1/K)) σ_g sqrt(K)``. Why: the squared-logit
   rule's s was off by about a factor 2 either way on the development regimes. It shrank too
   little where many classes are imbalanced, and too much on 100 classes at epsilon = 1. With
   thousands of private rows, their count sees which. Measured (docs/results/tuning_notes.md,
   "The guard's path"):
   - a 100-class fine-grained regime at imbalance 10, epsilon = 8: 34.0 -> 29.2 %;
   - a held-out 109-class draw: 30.9 -> 23.2 %.
   Elsewhere the single count is asked, with the same release as before.
6b. **The released model's class prior** (``prior_correction="public_when_imbalanced"``, the
   default): where the class histogram's pilot finds the private classes imbalanced and the
   run releases its private model, per-class logit offsets are fitted on the public rows, the
   balanced maximum-likelihood intercepts: the model's mean predicted probability of every
   class over a class-balanced weighting of the public rows is 1/C
   (:func:`.engine.balanced_prior_bias`; post-processing, no constant). Why: the majority
   columns grow with their rows while the minority ones barely move from the shrunk start, so
   the argmax leans to the majority (ten classes at imbalance 10: the minority classes were
   predicted for 7–9 % of a balanced test set where they are 20 %). Pre-registered and
   validated on 18 imbalanced regimes never used to design it: −0.26 points of test error and
   +0.71 of minority-class accuracy over 288 paired cells, no regime worse than +0.34
   (docs/results/class_balance.md, "The released model's class prior").
7. **Early-checkpoint test** (``early_checkpoint=True``, with the guard, when >= 8 gradient
   steps remain): one more noisy paired count, (#correct of the average after a quarter of the
   steps) − (#correct of the final average) + N(0, sigma^2), sensitivity 1, accounted; the
   earlier average goes to the guard if it wins by more than one noise std
   (:meth:`.private.NoisyGDMethod._checkpoint_test`), measured under the PACS photo → art
   shift (:data:`~.configs.CHECKPOINT_DIVISOR`; docs/results/fewshot.md). Under the shrunk
   update (5b) with the trust region it kept the early average in none of 118 runs measured,
   PACS included; without it (the default since) in 19 of the 423 runs of the regenerated
   tables (docs/results/tuning_notes.md, CHECKPOINT_DIVISOR).

8. **No projection by default** (``projection="none"``; the paper's ``"paper"``, ``"rank"``,
   ``"public_span"`` and an integer k remain options). The public gradient ``G_pub = X_pub^T
   E_pub`` is D x C with rank r <= C - 1 (each row of ``E_pub`` sums to 0), so of the paper's
   "top k = round(D 2000/2048) components" only r are fixed by the data; the other k - r are
   an orthonormal completion that no data choose (here: a fixed random one). Dropping the
   D - k directions it leaves out removes, in expectation, the same share (D - k)/(D - r) of
   the private gradient's energy outside ``span U_r`` as of the noise there, and no step can
   ever move the model along them: a bias that stays while the noise averages out over the
   T steps. Subspaces fixed by the data (``"rank"``, ``"public_span"``) discard more private
   signal than noise in every few-shot regime measured (fewshot.md). Chosen on the
   development regimes with common noise draws (8 seeds; docs/results/tuning_notes.md, "The
   projection"): no projection 0.4-0.8 points better at epsilon >= 3 on ``many_class_100_d256``
   and ``ten_class_ir10``, never worse beyond one standard error; on real features (digits,
   CIFAR-10 2 + 20 / 2 + 60, 38 classes, PACS photo -> art; 4 seeds) -0.8 to +0.3 points
   (none minus paper), and +0.9 +- 0.9 in one cell where one guard decision differed.
   Reported after the choice on three validation regimes (8 seeds): 0.2-1.0 points better or
   equal in every cell. It also makes each private row's release its own (the white-box
   canary audit's independent-trial bound applies, :mod:`mixdp_core.evaluation.audit.canary`)
   and the release cheaper (docs/results/speed.md).

``schedule="theorem3"`` and ``"constant"`` remain available (paper ablations). The paper
tuned the learning rate on *test* error (App. A.6): available only as the explicit
``optimistic_tuning=True`` option, which leaks information and whose composed privacy cost
is reported. ``honest_tuning=True`` instead runs a private selection with random stopping
(Papernot & Steinke 2022) on a held-out part of the private data, its whole cost accounted
by :mod:`mixdp_core.accounting.selection`: a logarithmic number of repetitions (TNB(0, 0.2),
E[K] ~ 2.5) over candidates centred on the defaults (the default itself drawn with
probability 1/2, see :data:`HONEST_GRID`).
"""

from .configs import (
    BURN_IN_ALIGNMENT,
    CHECKPOINT_DIVISOR,
    GUARD_Z,
    HISTOGRAM_PILOT_SHARE,
    HISTOGRAM_TEST_LEVEL,
    MIN_CHECKPOINT_STEPS,
    HONEST_DEFAULT_WEIGHT,
    HONEST_GRID,
    NOISE_MARGIN_Z,
    PAPER_LEARNING_RATES,
    PROJECTIONS,
    REF_DISTANCE_SCALE,
    THEOREM3_LAMBDA_GRID,
    FullyPrivateConfig,
    NGDConfig,
    AdaMixConfig,
    NoisyGDConfig,
    NonPrivateConfig,
    OnlyPublicConfig,
    PPGDConfig,
    ZeroShotConfig,
)
from .references import LinearHead, OnlyPublic, Paragon, UnitRows, ZeroShot, text_init, unit_rows
from .private import NGD, PPGD, AdaMix, FullyPrivate, NoisyGDMethod

__all__ = [
    "AdaMix", "AdaMixConfig", "BURN_IN_ALIGNMENT", "CHECKPOINT_DIVISOR", "MIN_CHECKPOINT_STEPS", "FullyPrivate", "FullyPrivateConfig", "GUARD_Z", "HISTOGRAM_PILOT_SHARE",
    "HISTOGRAM_TEST_LEVEL", "HONEST_DEFAULT_WEIGHT",
    "HONEST_GRID",
    "LinearHead", "NGD", "NGDConfig", "NOISE_MARGIN_Z", "NoisyGDConfig", "NoisyGDMethod", "NonPrivateConfig",
    "OnlyPublic", "OnlyPublicConfig", "PAPER_LEARNING_RATES", "PPGD", "PPGDConfig", "PROJECTIONS", "Paragon", "REF_DISTANCE_SCALE", "THEOREM3_LAMBDA_GRID",
    "UnitRows", "ZeroShot", "ZeroShotConfig", "text_init", "unit_rows",
]

