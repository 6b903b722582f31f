"""Transitional descriptions of the configs in :mod:`mixdp_core.methods.adamix`.

The NoisyGD / AdaMix / non-private / zero-shot configs still validate themselves in their
``__post_init__`` (``adamix.py`` is being rewritten for issue 10). So that the app forms, the
CLI help and ``docs/methods.md`` still describe them from declarations (choices, ranges,
help, the privacy cost of ``optimistic_tuning``), their fields are described here with
:func:`mixdp_core.config.declare_external`. Describing is all this does: validation is
unchanged.

To convert a class: move each entry below into the class body as
``name: T = param(default, <same keywords>)`` and delete its ``__post_init__`` checks and
its entry here.
"""

from __future__ import annotations

from ..config import Interval, ParamSpec, declare_external
from . import adamix as _a

_POS = Interval(0.0, None, closed="neither")
_NONNEG = Interval(0.0, None)
_SEED = ParamSpec(type=int, range=Interval(0, None), help="Seed of the Gaussian noise (and of the projection "
                                                             "completion); unused by deterministic methods.")

declare_external(
    _a.NonPrivateConfig,
    seed=ParamSpec(type=int, range=Interval(0, None), help="Seed of the cross-validation folds."),
    l2=ParamSpec(type=float, range=_NONNEG, optional=True,
                 help="Ridge coefficient on the mean loss; None = chosen by stratified 5-fold cross-validation "
                      "on the training rows (non-private methods: no privacy cost, never looks at test data)."),
    max_iter=ParamSpec(type=int, range=Interval(1, None), help="L-BFGS iterations."),
)
declare_external(
    _a.ZeroShotConfig,
    seed=ParamSpec(type=int, range=Interval(0, None), help="Unused (deterministic); uniform interface."),
    beta=ParamSpec(type=float, range=_POS, help="Scale of the text embeddings (paper: 100, CLIP's logit scale)."),
)
declare_external(
    _a.NoisyGDConfig,
    noise_multiplier=ParamSpec(type=float, range=_POS, unit="σ",
                               help="σ (paper: 20); the number of steps T is calibrated from it."),
    seed=_SEED,
    schedule=ParamSpec(type=str, choices=("theorem3", "constant"),
                       help="'theorem3' (η_t = 2/(λ(t+1)) and weighted averaging) or 'constant' "
                            "(learning_rate, last iterate, as in the paper's experiments)."),
    learning_rate=ParamSpec(type=float, range=_POS,
                            help="Constant step size on the summed loss; used only with schedule='constant'."),
    weight_decay=ParamSpec(type=float, range=_NONNEG, optional=True,
                           help="λ on the summed loss (> 0 with schedule='theorem3'); None = weight_decay_rule."),
    weight_decay_rule=ParamSpec(type=str, choices=("theorem3", "worst_case"),
                                help="'theorem3' (λ = (τ/R) sqrt(2 d / ρ)) or 'worst_case' (also balances the "
                                     "optimization term with the Lipschitz constant N τ; stronger decay)."),
    ref_distance=ParamSpec(type=float, range=_POS, optional=True,
                           help="R, the guessed distance ||w* − w_ref|| of the Thm.-3 rule; None = ||w_ref||_F "
                                "(public) or sqrt(C) ln C when w_ref = 0."),
    public_l2=ParamSpec(type=float, range=_NONNEG, optional=True,
                        help="Ridge (mean-loss scale) of the public pre-training; None = 1/N_pub."),
    eval_every=ParamSpec(type=int, range=Interval(1, None), optional=True,
                         help="Test error every this many steps; None = max(1, T // 50)."),
    optimistic_tuning=ParamSpec(
        type=bool, leaks_private=True,
        privacy_note="runs the method once per value of the paper's grid and keeps the run with the lowest "
                     "test error (App. A.6); the reported privacy_ composes all runs and exceeds target_epsilon, "
                     "and the selected test error is optimistic.",
        help="Tune on the paper's grid using test results, as the paper did. Off by default."),
    blas_threads=ParamSpec(type=int, range=Interval(1, None), optional=True,
                           help="BLAS threads during fit (restored afterwards); None leaves the process setting."),
)
declare_external(
    _a.FullyPrivateConfig,
    clip_norm=ParamSpec(type=float, range=_POS, help="Fixed clip threshold τ (per-sample gradient norms are "
                                                     "<= sqrt(2))."),
)
declare_external(
    _a.AdaMixConfig,
    init=ParamSpec(type=str, choices=("public", "text", "zero"),
                   help="'public' (few-shot logistic regression on public rows), 'text' (beta × CLIP text "
                        "embeddings, Sec. 3.3; needs a CLIP encoder) or 'zero'."),
    beta=ParamSpec(type=float, range=_POS, help="Text-init scale (paper: 100)."),
    clip=ParamSpec(type=str, choices=("adaptive", "fixed"),
                   help="'adaptive' (τ_t = clip_percentile-th percentile of the public per-sample gradient "
                        "norms) or 'fixed' (clip_norm; ablation)."),
    clip_percentile=ParamSpec(type=float, range=Interval(0.0, 100.0, closed="right"), help="q (paper: 90)."),
    clip_norm=ParamSpec(type=float, range=_POS, help="τ for clip='fixed'."),
    projection=ParamSpec(help="'paper' (k = round(D · 2000/2048)), 'rank' (rank of the public gradient, <= C−1), "
                              "'none' (ablation: adaptive clip only) or an integer k >= 1."),
)
declare_external(
    _a.PPGDConfig,
    reuse_l2=ParamSpec(type=float, range=_NONNEG, optional=True,
                       help="Strength of the model-reuse regularizer reuse_l2/2 ||W − W_priv||² on the mean "
                            "public loss; None = 1/N_pub."),
)
