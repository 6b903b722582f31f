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
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core

from sklearn.metrics import balanced_accuracy_score  # noqa: E402

from mixdp_core.data.splits import SplitSpec, make_split  # noqa: E402
from mixdp_core.features.cache import get_features  # noqa: E402
from mixdp_core.methods import make_method  # noqa: E402
from mixdp_core.runs.figures.regimes import REGIME_FAMILY  # noqa: E402

VARIANTS = {
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
    "def": ("adamix", {}),
    "H05": ("adamix", {"guard_holdout": 0.05}),
    "H10": ("adamix", {"guard_holdout": 0.1}),
    "H20": ("adamix", {"guard_holdout": 0.2}),
    # the ridge of the public fit (docs/results/only_public_ridge.md): AdaMix's start / Only-Public
    "S4": ("adamix", {"public_l2": 1e-4}),
    "op4": ("only_public", {"l2": 1e-4}),
    "opL": ("only_public", {"l2_rule": "loo"}),
}


def regime_splits(name: str, seeds):
    """``(seed, split)`` for each seed of REGIME (a ``REGIME_FAMILY`` name, ``digits`` or
    ``digits_ir10``: pixels, 5 public per class, imbalance ratio 1 / 10; ``cifar10_2_20`` /
    ``cifar10_2_60``: fewshot.md's CIFAR-10 regimes, 2 public + 20 / 60 private per class)."""
    if name.startswith("digits"):
        reg = {"public_per_class": 5, "imbalance_ratio": 10.0 if name == "digits_ir10" else 1.0}
        fs = get_features("digits", "pixels")
    elif name.startswith("cifar10_2_"):  # fewshot.md's CIFAR-10 regimes: CIFAR10_DIR in the environment
        reg = {"public_per_class": 2, "imbalance_ratio": 1.0}
        fs = get_features("image_folder", "efficientnet_lite0", root=os.environ.get("CIFAR10_DIR", "/tmp/c10"),
                          max_per_class=2 + int(name.rsplit("_", 1)[1]), max_test_per_class=200,
                          encoder_kwargs={"image_size": 128, "precision": "fp32"})
    else:
        reg = {r["name"]: r for r in REGIME_FAMILY}[name]
        fs = get_features("synthetic", "pixels", **reg["dataset_kwargs"])
    for seed in seeds:
        yield seed, make_split(fs, SplitSpec(public_per_class=reg["public_per_class"],
                                             imbalance_ratio=reg["imbalance_ratio"], seed=seed))


def main() -> None:
    name, eps_s, seeds_s, var_s = sys.argv[1:5]
    eps = [float(e) for e in eps_s.split(",")]
    seeds = [int(s) for s in seeds_s.split(",")]
    variants = var_s.split(",")
    res = defaultdict(list)
    for seed, sp in regime_splits(name, seeds):
        for lab in variants:
            meth, kw = VARIANTS[lab]
            for e in (eps if meth != "only_public" else [None]):
                t = time.time()
                args = dict(kw)
                if e is not None:
                    args.update(target_epsilon=e, seed=seed)
                m = make_method(meth, **args).fit(sp)
                pred = m.predict(sp.X_test)
                res[(lab, e)].append((100 * np.mean(pred != sp.y_test), 100 * balanced_accuracy_score(sp.y_test, pred),
                                      getattr(m, "guard_kept_private_", None)))
                print(f"# {name} s{seed} {lab} eps={e} err={res[(lab, e)][-1][0]:.1f} "
                      f"alpha={getattr(m, 'init_scale_', None)} t={time.time() - t:.0f}s", file=sys.stderr, flush=True)
    print(f"\n{name} seeds {seeds}: error % (balanced acc %) [guard released private / runs]")
    for lab in variants:
        row = []
        for e in (eps if VARIANTS[lab][0] != "only_public" else [None]):
            r = res[(lab, e)]
            g = [x[2] for x in r if x[2] is not None]
            row.append(f"eps={e}: {np.mean([x[0] for x in r]):.1f} ({np.mean([x[1] for x in r]):.1f})"
                       + (f" [{sum(g)}/{len(g)}]" if g else ""))
        print(f"  {lab:10s} " + " | ".join(row), flush=True)


if __name__ == "__main__":
    main()
