"""AdaMix's input map and start, side by side on one regime: the tables of
docs/results/centering.md.

Variants (``--variants``, comma-separated): ``op0`` / ``opC`` Only-Public on plain unit rows /
centred on the public mean; ``base`` AdaMix with the former defaults (plain unit rows,
``init_scale="noise"``); ``C`` centred, ``"noise"``; ``CG`` centred, ``"grow_only"`` (the
defaults now); ``CN`` centred, unscaled start; ``fp`` Fully-Private. Every AdaMix run uses its
other defaults (guard on); ``CE`` / ``LA`` / ``LAW`` / ``CE-ng`` / ``LA-ng`` compare AdaMix's
``class_balance`` choices (docs/results/class_balance.md). Prints, per variant and ε, the mean test error and balanced
accuracy (%) over the seeds and how often the public-start guard released the private model.

Usage: ``python scripts/center_and_start.py REGIME EPSILONS SEEDS VARIANTS`` with REGIME a
name of ``REGIME_FAMILY`` (mixdp_core/runs/figures/regimes.py), ``digits`` (pixels, 5 public per
class) or ``digits_ir10`` (the same with imbalance ratio 10, the app's default setting), e.g.
``python scripts/center_and_start.py ten_class_ir10 0.5,1,3,8 0,1,2,3 op0,opC,base,C,CG,CN``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core

from mixdp_core.data.splits import SplitSpec, make_split  # noqa: E402
from mixdp_core.features.cache import get_features  # noqa: E402
from mixdp_core.runs.figures.regimes import regime_by_name  # noqa: E402

from mixdp_core.methods.adamix.configs import NOISE_MARGIN_Z  # noqa: E402

VARIANTS = {
    # the start's noise margin z x 1.5 / x 2 (a development round under the staged histogram's
    # tighter count bound; tuning_notes.md, NOISE_MARGIN_Z)
    "Z15": ("adamix", {"_margin_z": 1.5 * NOISE_MARGIN_Z}),
    "Z2": ("adamix", {"_margin_z": 2.0 * NOISE_MARGIN_Z}),
    "op0": ("only_public", {"feature_center": "none"}),
    "opC": ("only_public", {"feature_center": "auto"}),
    "base": ("adamix", {"feature_center": "none", "init_scale": "noise"}),
    "C": ("adamix", {"feature_center": "auto", "init_scale": "noise"}),
    "CG": ("adamix", {"feature_center": "auto", "init_scale": "grow_only"}),
    "CN": ("adamix", {"feature_center": "auto", "init_scale": "none"}),
    "fp": ("fully_private", {}),
    # class balance (docs/results/class_balance.md): plain cross-entropy / logit-adjusted loss with
    # unweighted / class-weighted noisy tests; "-ng": the same with the public-start guard off
    "CE": ("adamix", {"class_balance": "none"}),
    "LA": ("adamix", {"class_balance": "logit_adjust"}),
    "LAW": ("adamix", {"class_balance": "logit_adjust_weighted_tests"}),
    "CE-ng": ("adamix", {"class_balance": "none", "public_guard": False}),
    "LA-ng": ("adamix", {"class_balance": "logit_adjust", "public_guard": False}),
    # the public-start guard on held-out private rows (docs/results/regimes.md): share held out
    "op": ("only_public", {}),
    "pg": ("paragon", {}),
    "def": ("adamix", {}),
    "H05": ("adamix", {"guard_holdout": 0.05}),
    "H10": ("adamix", {"guard_holdout": 0.1}),
    "H20": ("adamix", {"guard_holdout": 0.2}),
    # the ridge of the public fit (docs/results/only_public_ridge.md): AdaMix's start / Only-Public
    "S4": ("adamix", {"public_l2": 1e-4}),
    "op4": ("only_public", {"l2": 1e-4}),
    "opL": ("only_public", {"l2_rule": "loo"}),
    # the start's burn-in alignment from the public rows (docs/results/centering.md, signal share)
    "SS": ("adamix", {"init_scale": "signal_share"}),
    "CS": ("adamix", {"init_scale": "class_scaled"}),
    # the class histogram's share of the budget (docs/results/class_balance.md)
    "H1": ("adamix", {"histogram_share": 0.0}),
    "HSA": ("adamix", {"histogram_share": None}),
    "HS4": ("adamix", {"histogram_share": 1 / 16}),
    "HS8": ("adamix", {"histogram_share": 1 / 8}),
    "HS16": ("adamix", {"histogram_share": 1 / 4}),
    "dplp": ("dp_linear_probe", {}),
    # every other feature method of the library with its defaults (regimes.md: whether any method
    # reaches property (c) where AdaMix does not)
    "ppgd": ("ppgd", {}),
    "dpls": ("dp_ls", {}),
    "dpga": ("dpsgd_global_adapt", {}),
    "dpplM": ("dppl_mean", {}),
    "dpplP": ("dppl_public", {}),
    "dpplT": ("dppl_public_topk", {}),
    # where Fully-Private beats AdaMix (plentiful private rows; docs/results/fewshot.md, CIFAR-10 2 + 60)
    "ngd": ("ngd", {}),
    "RN": ("adamix", {"init_scale": "released_noise"}),
    "RC": ("adamix", {"init_scale": "release_capped"}),
    # the guard's count under imbalance (tuning_notes.md, "The guard under imbalance"): the default one
    # release, unweighted ("GS"), against the option's class-weighted count at the histogram's share
    "GS": ("adamix", {"guard_rule": "single_count"}),
    "GB": ("adamix", {"guard_rule": "balanced_when_imbalanced"}),
    # the steep-tail measurements (docs/results/class_balance.md, "A steep tail"): the public
    # likelihood's factor (LWI; its rows in steep_tail_*.jsonl ran an interim option that took it
    # only where the pilot found imbalance, the two-iterate release elsewhere), the same with the
    # update's public logits in-sample (LWIin), the squared-logit rule checked on the public
    # likelihood under imbalance (CWI, the default since 2026-11-30)
    "LWI": ("adamix", {"update_shrinkage": "public_likelihood"}),
    "LWIin": ("adamix", {"update_shrinkage": "public_likelihood", "_update_in_sample": True}),
    "CWI": ("adamix", {"update_shrinkage": "checked_when_imbalanced"}),
    # the start's margin from approximate leave-one-out public margins instead of the fit's own
    # (tuning_notes.md, "The start's margin"), at the noise margin z x 1 / x 1/3 / x 1/6
    "LM": ("adamix", {"_start_margin": "loo"}),
    "LM3": ("adamix", {"_start_margin": "loo", "_margin_z": NOISE_MARGIN_Z / 3}),
    "LM6": ("adamix", {"_start_margin": "loo", "_margin_z": NOISE_MARGIN_Z / 6}),
    # the projection (tuning_notes.md, "The projection"): none (the default since 2026-11-28) / the paper's
    "Pn": ("adamix", {"projection": "none"}),
    "Pp": ("adamix", {"projection": "paper"}),
    # the public-start guard's noise at most a share r of the private rows (guard_resolution, 0.02
    # the default since 2026-11-28, a research hook before; releases' worth capped at (T - count) / 16);
    # GR0: one release at sigma, the rule before
    "GR0": ("adamix", {"guard_resolution": None}),
    "GR1": ("adamix", {"guard_resolution": 0.01}),
    "GR2": ("adamix", {"guard_resolution": 0.02}),
    # the public-start guard's one-sided threshold GUARD_Z (1) at 1.5 and 2 noise stds
    "GZ15": ("adamix", {"_guard_z": 1.5}),
    "GZ2": ("adamix", {"_guard_z": 2.0}),
    # the guard's count without each row's own pull, a fraction kappa of the bound
    # (tuning_notes.md, "The guard's in-sample optimism")
    "SP1": ("adamix", {"_guard_self_pull": 1.0}),
    "SP05": ("adamix", {"_guard_self_pull": 0.5}),
    "SP025": ("adamix", {"_guard_self_pull": 0.25}),
    # the guard's count on first-order leave-one-out logits (each row's own tracked pull removed;
    # tuning_notes.md, "The guard's count"; the default since it was measured),
    # the in-sample count before it, and with the leave-one-out count: class-weighted where
    # imbalanced, threshold 0, threshold from a worst-case expected harm of half a point
    "LOO": ("adamix", {"guard_count": "leave_one_out"}),
    "GIS": ("adamix", {"guard_count": "in_sample"}),
    "LOOB": ("adamix", {"guard_count": "leave_one_out", "guard_rule": "balanced_when_imbalanced"}),
    "LOOZ0": ("adamix", {"guard_count": "leave_one_out", "_guard_z": 0.0}),
    "LOOH": ("adamix", {"guard_count": "leave_one_out", "_guard_harm": 0.5}),
    # the private update shrunk towards the public start by the public-logit James–Stein factor
    # (update_shrinkage; docs/results/tuning_notes.md, "The private update's shrinkage")
    "SH": ("adamix", {"update_shrinkage": "public_logits"}),
    "SH0": ("adamix", {"update_shrinkage": "none"}),
    # the shrinkage's factor by the public rows' leave-one-out likelihood (tuning_notes.md,
    # "Shrinkage by the public likelihood")
    "SL": ("adamix", {"update_shrinkage": "public_likelihood"}),
    # the two-iterate combination where the histogram finds balance ("The average lags")
    "TI": ("adamix", {"update_shrinkage": "two_iterate_when_balanced"}),
    # the current default without the early-checkpoint test (its release goes to the gradient phase)
    "EC0": ("adamix", {"early_checkpoint": False}),
    # research: the update's in-sample public logits and the start's own-class logit scaled k/(k-1)
    "SLC": ("adamix", {"update_shrinkage": "public_likelihood", "_update_in_sample": True, "_start_loo_debias": True}),
    # the guard also asks the whole update with one more accounted count (research hook _guard_whole)
    "SHW": ("adamix", {"_guard_whole": True}),
    # the start's cap made continuous in T: relaxed by (burn-in / T)^p within the burn-in
    "CR0": ("adamix", {"_cap_relax_power": 0.0}),
    "CR05": ("adamix", {"_cap_relax_power": 0.5}),
    "CR1": ("adamix", {"_cap_relax_power": 1.0}),
    "Z0": ("adamix", {"init": "zero"}),
    # without / with Thm. 3's trust region ||W - W_ref|| <= R (where it binds it starves the minority
    # classes of an imbalanced private set; off is AdaMix's default since it was measured:
    # tuning_notes.md, "The trust region under imbalance")
    "NTR": ("adamix", {"trust_region": False}),
    "TR": ("adamix", {"trust_region": True}),
    # the guard chooses among the path W_start + t (W - W_start), t in GUARD_PATH_FACTORS, with one
    # vector count where its resolution allows (guard_candidates; tuning_notes.md, "The guard's path")
    "GP": ("adamix", {"guard_candidates": "shrinkage_path"}),
    "GP1": ("adamix", {"guard_candidates": "single"}),
    "L4": ("adamix", {"_lambda_mult": 0.25}),
    # the plain schedule a new user tried on unseen 102-class data (issue #25's table)
    "plain": ("adamix", {"schedule": "constant", "learning_rate": 1e-3, "weight_decay": 0.01, "init_scale": "none",
                         "public_guard": False}),
}


def regime_features(name: str):
    """``(feature set, public per class, imbalance ratio)`` of REGIME: a ``REGIME_FAMILY`` name or ``drawn_<i>``,
    ``digits`` or ``digits_ir10`` (pixels, 5 public per class, imbalance ratio 1 / 10), ``digits_1shot``, or
    ``cifar10_2_20`` / ``cifar10_2_60`` (fewshot.md's CIFAR-10 regimes, 2 public + 20 / 60
    private per class; ``CIFAR10_DIR`` in the environment, default /tmp/c10), ``pacs_photo_art``
    (fewshot.md's PACS shift: private and test rows from art_painting, 2 public per class from
    photo; ``PACS_DIR``, default /tmp/pacs/PACS), ``many38_2_60`` (fewshot.md's 38 classes, 2 public
    + 60 private per class: ``MANY38_DIR``, default /tmp/STORE20/many38, the folder
    ``scripts/make_results.sh`` builds), ``folder:PATH:SHOTS`` (any image folder with ``train/`` and
    ``test/`` class folders, EfficientNet-Lite0 at 128 px, SHOTS public rows per class), or
    ``digits_scarce`` (digits.md's scarce section: pixels, ``test_fraction=0.9``, 5 public per class), or
    ``classroom_20_60_ir10`` (the Classroom's synthetic lesson at 20 classes x 60 rows, 5 public,
    imbalance ratio 10: scarce and imbalanced)."""
    if name == "digits_scarce":  # digits.md's scarce section: test_fraction 0.9 (~13 private rows per class)
        return get_features("digits", "pixels", test_fraction=0.9), 5, 1.0
    if name.startswith("digits"):  # digits_1shot: fewshot.md's 1 public per class
        return get_features("digits", "pixels"), 1 if name == "digits_1shot" else 5, 10.0 if name == "digits_ir10" else 1.0
    if name == "classroom_20_60_ir10":  # the Classroom's synthetic lesson dialled to 20 classes x 60 rows, ratio 10
        from mixdp_core.app_support.classroom import Lesson

        les = Lesson(data="many classes (synthetic)", classes=20, train_per_class=60, imbalance_ratio=10)
        dataset, encoder, kw = les.source()
        return get_features(dataset, encoder, **kw), 5, les.imbalance_ratio
    if name.startswith("cifar10_2_"):
        fs = get_features("image_folder", "efficientnet_lite0", root=os.environ.get("CIFAR10_DIR", "/tmp/c10"),
                          max_per_class=2 + int(name.rsplit("_", 1)[1]), max_test_per_class=200,
                          encoder_kwargs={"image_size": 128, "precision": "fp32"})
        return fs, 2, 1.0
    if name == "pacs_photo_art":  # fewshot.md's PACS domain shift: private and test rows from art painting
        return _pacs_features("art_painting"), 2, 1.0
    if name.startswith("folder:"):  # any image folder (train/ and test/ of class folders): folder:PATH:SHOTS
        _, root, shots = name.rsplit(":", 2) if name.count(":") >= 2 else (None, name[len("folder:"):], "2")
        fs = get_features("image_folder", "efficientnet_lite0", root=root,
                          encoder_kwargs={"image_size": 128, "precision": "fp32"})
        return fs, int(shots), 1.0
    if name == "many38_2_60":  # fewshot.md's 38 classes (28 PACS domain x class + 10 CIFAR-10), 2 + 60
        fs = get_features("image_folder", "efficientnet_lite0", root=os.environ.get("MANY38_DIR", "/tmp/STORE20/many38"),
                          encoder_kwargs={"image_size": 128, "precision": "fp32"})
        return fs, 2, 1.0
    if name.startswith("userlike_"):
        reg = userlike_regime(int(name[len("userlike_"):]))
    else:
        reg = regime_by_name(name)  # the family's regimes and drawn_<i>
    return get_features("synthetic", "pixels", **reg["dataset_kwargs"]), reg["public_per_class"], reg["imbalance_ratio"]


def userlike_regime(index: int) -> dict:
    """``userlike_<index>``: a regime drawn *around the shape of the product owner's unseen data*
    (#25: about 100 classes, EfficientNet-Lite0's 1,280 dimensions, 2 public and about 62 private
    rows per class, balanced), its other options (spectrum, separation, shared mean, ambiguity)
    drawn from the drawn regimes' ranges (``DRAW_RANGES``) by a generator seeded with ``index``
    alone: how the defaults do on data like the user's, nothing chosen. Sizes: C uniform in
    [90, 115], private rows per class uniform in [50, 75], 20 test rows per class."""
    import numpy as np

    from mixdp_core.runs.figures.regimes import DRAW_RANGES, _draw

    g = np.random.default_rng([int(index), 0x05E2])
    C, D = int(g.integers(90, 116)), 1280
    n = int(g.integers(50, 76))
    d = {k: _draw(g, DRAW_RANGES[k]) for k in ("effective_rank_share", "separation_per_sqrt_log_c", "shared_mean",
                                             "ambiguity")}
    kw = {"classes": C, "dim": D, "train_per_class": n + 2, "test_per_class": 20,
          "effective_rank": round(d["effective_rank_share"] * D, 1),
          "separation": round(d["separation_per_sqrt_log_c"] * float(np.sqrt(np.log(C))), 2),
          "shared_mean": round(d["shared_mean"], 2), "ambiguity": round(d["ambiguity"], 3),
          "data_seed": 100_000 + int(index)}
    return {"name": f"userlike_{int(index)}", "role": "validation (user-like)", "public_per_class": 2,
            "imbalance_ratio": 1.0, "dataset_kwargs": kw}


def _pacs_features(domain: str):
    """EfficientNet-Lite0 features (128 px, fp32, as fewshot.md) of one PACS domain folder
    (``PACS_DIR``, default /tmp/pacs/PACS)."""
    root = os.environ.get("PACS_DIR", "/tmp/pacs/PACS")
    return get_features("image_folder", "efficientnet_lite0", root=f"{root}/{domain}",
                        encoder_kwargs={"image_size": 128, "precision": "fp32"})


def _public_from(name: str) -> str | None:
    """The ``public_from`` spec of REGIME's split (``None``: its own training rows)."""
    if name == "pacs_photo_art":
        return "image_folder:photo"
    if name.startswith(("digits", "cifar10_", "folder:", "many38_", "classroom_", "userlike_")):
        return None
    return regime_by_name(name).get("public_from")


def public_domain_features(name: str):
    """The features the public rows of REGIME come from when they are another domain's
    (``pacs_photo_art``: PACS photo; a synthetic regime with ``public_from``: its public domain,
    :func:`mixdp_core.data.datasets.public_source`), else ``None`` (the public rows are drawn
    from :func:`regime_features`' set)."""
    from mixdp_core.data.datasets import public_source

    if name == "pacs_photo_art":
        return _pacs_features("photo")
    pf = _public_from(name)
    if pf is None:
        return None
    spec, kw = public_source("synthetic", regime_by_name(name)["dataset_kwargs"], pf)
    return get_features(spec, "pixels", **kw)


def regime_splits(name: str, seeds):
    """``(seed, split)`` for each seed of REGIME (:func:`regime_features`, public rows from
    :func:`public_domain_features` where that is not ``None``). ``REGIME@irR`` is REGIME with
    its private rows' imbalance ratio set to R (e.g. ``fine_grained_100@ir6``)."""
    name, _, ir_override = name.partition("@ir")
    fs, k, ir = regime_features(name)
    if ir_override:
        ir = float(ir_override)
    pub = public_domain_features(name)
    for seed in seeds:
        spec = SplitSpec(public_per_class=k, imbalance_ratio=ir, seed=seed,
                         public_from=None if pub is None else _public_from(name))
        yield seed, make_split(fs, spec, public_features=pub)


def guard_off_fits(argv: list[str], **hooks):
    """``(regime, epsilon, seed, split, only_public, adamix)`` per seed of ``argv = [REGIME,
    EPSILON, SEEDS]``: Only-Public and AdaMix with the guard off (noise drawn from the seed, a
    research run) on each split, one BLAS thread; the guard diagnostics' common part. ``hooks``:
    research attributes set on the AdaMix instance before its fit (e.g. ``_track_self_pull=True``)."""
    from threadpoolctl import threadpool_limits

    from mixdp_core.methods import make_method

    reg, eps, seeds = argv[0], float(argv[1]), [int(s) for s in argv[2].split(",")]
    for seed, sp in regime_splits(reg, seeds):
        with threadpool_limits(1):
            op = make_method("only_public").fit(sp)
            m = make_method("adamix", target_epsilon=eps, seed=seed, noise="reproducible", public_guard=False)
            for k, v in hooks.items():
                setattr(m, k, v)
            m.fit(sp)
        yield reg, eps, seed, sp, op, m


def main() -> None:
    from variants_parallel import print_tables, run  # the same jobs and table, in this process

    name, eps_s, seeds_s, var_s = sys.argv[1:5]
    eps = [float(e) for e in eps_s.split(",")]
    seeds = [int(s) for s in seeds_s.split(",")]
    variants = var_s.split(",")
    print_tables(run([name], eps, seeds, variants, workers=1), [name], eps, seeds, variants)


if __name__ == "__main__":
    main()
