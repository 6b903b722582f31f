"""The DP-prototypes family's figures (DPPL, Wahdany et al.): error vs ε, accuracy under
class imbalance, and DP prototypes vs baselines with a held-out unlabelled public pool.

Registers ``dppl_epsilon``, ``dppl_imbalance`` and ``prototypes`` in
:data:`~mixdp_core.runs.reproduce.FIGURES`. The first two are ``RunConfig`` sweeps (run
store); ``prototypes`` fits methods on feature matrices with
:func:`~mixdp_core.runs.sweep.map_trainings` (:func:`_proto_train`, one task per fit; the
pool of :func:`_proto_holdout` never reaches the private data). Accuracies are in [0, 1], ε
are (ε, δ)-DP targets and each fit's accounted ε.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import Any, Mapping

import numpy as np

from ...errors import ConfigError
from .base import (Context, FigureOutput, figure, _agg, _cell, _lines, _log_axis, _setup_line, _table,
                   test_tuned_footnotes)
from ..sweep import Variant
from .adamix import _error_vs_epsilon, _variants


DPPL_FAMILY = (
    Variant("paragon", "paragon"), Variant("only_public", "only_public"),
    Variant("dppl_mean", "dppl_mean"), Variant("dppl_public", "dppl_public"),
    Variant("dppl_public_top3", "dppl_public_topk", {"k": 3}), Variant("dp_ls", "dp_ls"),
    Variant("dp_linear_probe", "dp_linear_probe"), Variant("dpsgd_global_adapt", "dpsgd_global_adapt"),
    Variant("adamix", "adamix"),
)


@figure("dppl_epsilon", "DP-prototypes family: test error vs ε", "DP prototypes (DPPL), ε sweeps",
        epsilons=[0.1, 0.5, 1, 3, 8], seeds=[0, 1, 2], public_per_class=5, imbalance_ratio=1.0, detail_epsilon=1.0,
        variants=[v.label for v in DPPL_FAMILY])
def _dppl_epsilon(ctx: Context) -> FigureOutput:
    return _error_vs_epsilon(ctx, _variants(ctx.params, DPPL_FAMILY), {}, "DP-prototypes family: test error vs ε")


@figure("dppl_imbalance", "DPPL under class imbalance", "DP prototypes (DPPL), imbalance ratios 1–100", figsize=(11, 4.5),
        ratios=[1, 2, 5, 10, 20, 50, 100], epsilon=1.0, seeds=[0, 1, 2], public_per_class=5,
        methods=["dppl_mean", "dppl_public", "dppl_public_top3", "dp_linear_probe", "adamix"])
def _dppl_imbalance(ctx: Context) -> FigureOutput:
    p = ctx.params
    by_label = {v.label: v for v in DPPL_FAMILY}
    try:
        variants = tuple(by_label[m] for m in p["methods"])
    except KeyError as e:
        raise ConfigError("methods", f"unknown variant {e.args[0]!r}; choose from {', '.join(by_label)}") from None
    ratios = [float(x) for x in p["ratios"]]
    rows = ctx.sweep(ctx.spec(methods=variants, epsilons=(float(p["epsilon"]),), seeds=tuple(p["seeds"]),
                              public_per_class=(int(p["public_per_class"]),), imbalance_ratios=tuple(ratios)))
    mino = _agg(rows, ("label", "imbalance_ratio"), "minority_accuracy")
    bal = _agg(rows, ("label", "imbalance_ratio"), "balanced_accuracy")
    labels = [v.label for v in variants]
    hdr = ["method"] + [f"IR = {r:g}" for r in ratios]
    md = [f"**Minority-class accuracy (%) at target ε = {float(p['epsilon']):g} (the long tail's last 25 % of "
          "classes, chosen from the seed) — mean ± std over seeds**", ""]
    md += _table(hdr, [[lab] + [_cell(*mino.get((lab, r), (None, None))[:2]) for r in ratios] for lab in labels])
    if any(r <= 1.0 for r in ratios):  # the blank column, said
        md += ["", "(IR = 1: a balanced split has no minority class, so its column is –.)"]
    md += ["", "**Balanced accuracy (%) — mean ± std over seeds**", ""]
    md += _table(hdr, [[lab] + [_cell(*bal.get((lab, r), (None, None))[:2]) for r in ratios] for lab in labels])
    out_rows = [{"method": lab, "imbalance_ratio": r, "minority_accuracy_mean": mino[(lab, r)][0],
                 "minority_accuracy_std": mino[(lab, r)][1], "balanced_accuracy_mean": bal[(lab, r)][0],
                 "balanced_accuracy_std": bal[(lab, r)][1]} for lab in labels for r in ratios if (lab, r) in mino]

    def draw(fig: Any) -> None:
        for i, (agg, name) in enumerate(((mino, "minority-class accuracy (%)"), (bal, "balanced accuracy (%)"))):
            ax = fig.add_subplot(1, 2, i + 1)
            _lines(ax, {lab: [(r, *agg.get((lab, r), (None, None))[:2]) for r in ratios] for lab in labels})
            _log_axis(ax, ratios)
            ax.set_xlabel("imbalance ratio (log scale)")
            ax.set_ylabel(name)
            ax.set_title(f"{name.split(' (')[0]} vs imbalance, target ε = {float(p['epsilon']):g}", fontsize=10)
            if i == 0:
                ax.legend(fontsize=7)

    return FigureOutput("\n".join(md), out_rows, draw, _setup_line(ctx, rows) + f", {p['public_per_class']} public "
                        "samples per class")


# -- DP prototypes vs baselines with an unlabelled public pool: fits on feature matrices -> map_trainings
PROTO_METHODS = {  # variant label -> (registry key, params)
    "dppl_mean": ("dppl_mean", {}), "dppl_public": ("dppl_public", {}),
    "dppl_public_top3": ("dppl_public_topk", {"k": 3}), "dp_ls": ("dp_ls", {}),
    "dp_linear_probe": ("dp_linear_probe", {}), "dpsgd_global_adapt": ("dpsgd_global_adapt", {}),
    "adamix": ("adamix", {}),
}
PROTO_LABEL = {"dppl_mean": "DPPL-Mean", "dppl_public": "DPPL-Public", "dppl_public_top3": "DPPL-Public top-3",
               "dp_ls": "DP-LS (test-tuned default †)", "dp_linear_probe": "DP-SGD linear probe", "dpsgd_global_adapt": "DPSGD-Global-Adapt",
               "adamix": "AdaMix"}


def _proto_holdout(fs: Any, seed: int, frac: float) -> tuple[Any, np.ndarray]:
    """A fixed ``frac`` of the training rows (per seed) held out as the *unlabelled* public pool
    of DPPL-Public(K); they are removed from the data every method sees (never private)."""
    from ...featureset import FeatureSet

    rng = np.random.default_rng([seed, 0x9001])
    n = len(fs.y_train)
    held = rng.choice(n, size=int(frac * n), replace=False)
    keep = np.setdiff1d(np.arange(n), held)
    return (FeatureSet(fs.X_train[keep], fs.y_train[keep], fs.X_test, fs.y_test, fs.class_names, meta=fs.meta),
            fs.X_train[held])


def _proto_train(item: tuple[str, float, int, float], shared: Mapping[str, Any]) -> dict[str, Any]:
    """One fit of the prototypes grid (a :func:`map_trainings` task): hold-out pool, split,
    calibrated method (its ``privacy_`` from the accounting module), balanced / minority accuracy."""
    from ...data.splits import SplitSpec, make_split
    from ...evaluation.metrics import balanced_accuracy, minority_accuracy
    from ...methods import make_method

    label, ir, seed, eps = item
    cfg = shared["config"]
    base, unlabelled = _proto_holdout(shared["features"], seed, cfg["holdout"])
    split = make_split(base, SplitSpec(public_per_class=cfg["public_per_class"], imbalance_ratio=ir, seed=seed))
    method, kw = PROTO_METHODS[label]
    kw = dict(kw)
    if method == "adamix":
        # σ = 20 (paper) leaves no full-batch step at ε < ~0.2: σ grows as 3/ε below ε = 3 so
        # that ~100+ steps fit every budget (a rule on public quantities: σ, ε)
        kw["noise_multiplier"] = 20.0 * max(1.0, 3.0 / eps)
    t0 = time.perf_counter()
    m = make_method(method, target_epsilon=eps, target_delta=cfg["delta"], seed=seed, **kw)
    pool = np.concatenate([split.X_public, unlabelled]).astype(np.float32)
    m.fit(split, public_pool=pool) if method.startswith("dppl_public") else m.fit(split)
    m.verify_privacy()  # releases fit the plan and privacy_ is the ledger's (as the runner checks)
    pred = m.predict(split.X_test)
    pr = m.privacy_
    return {"label": label, "ir": ir, "seed": seed, "target_epsilon": eps,
            "metrics": {"balanced_accuracy": balanced_accuracy(split.y_test, pred, split.n_classes),
                        # None at imbalance ratio 1 (no minority class), not nan
                        "minority_accuracy": minority_accuracy(split.y_test, pred, split.minority_classes),
                        "epsilon": pr.epsilon, "delta": pr.delta, "rho": pr.rho, "pure_epsilon": pr.pure_epsilon,
                        "mechanism": pr.mechanism, "seconds": time.perf_counter() - t0,
                        "n_private": int(len(split.y_private)), "pool_size": int(len(pool))}}


@figure("prototypes", "DP prototypes vs baselines (balanced and minority-class accuracy)",
        "DP prototypes (DPPL, Wahdany et al.), ε sweeps at IR 1 and 100", figsize=(11, 8),
        epsilons=[0.1, 0.5, 1, 3, 8], ratios=[1, 100], seeds=[0, 1, 2], public_per_class=5, holdout=0.2,
        methods=list(PROTO_METHODS))
def _prototypes(ctx: Context) -> FigureOutput:
    """Every method gets the same split (public_per_class, IR, seed) and (ε, δ) target; the
    DPPL-Public(K) pool = the labelled public split (labels dropped) + a held-out unlabelled
    ``holdout`` fraction of the training rows. AdaMix and the baselines use only the public split."""
    from ...features import get_features

    p = ctx.params
    eps, ratios = [float(e) for e in p["epsilons"]], [float(r) for r in p["ratios"]]
    seeds = [int(s) for s in p["seeds"]]
    unknown = [m for m in p["methods"] if m not in PROTO_METHODS]
    if unknown:
        raise ConfigError("methods", f"unknown variant {unknown[0]!r}; choose from {', '.join(PROTO_METHODS)}")
    if not 0 < float(p["holdout"]) < 1:
        raise ConfigError("holdout", f"must lie in (0, 1), got {p['holdout']!r}")
    fs = get_features(ctx.dataset, ctx.encoder, root=ctx.dataset_root, cache_dir=ctx.cache_dir,
                      encoder_kwargs=ctx.encoder_kwargs, progress=ctx.progress, **ctx.dataset_kwargs)
    cfg = {"public_per_class": int(p["public_per_class"]), "holdout": float(p["holdout"]),
           "delta": float(p.get("delta", 1e-5))}
    items = [(m, r, s, e) for s in seeds for r in ratios for m in p["methods"] for e in eps]
    res = ctx.trainings(_proto_train, items, {"features": fs, "config": cfg},
                        charge=lambda it: (PROTO_METHODS[it[0]][0], it[3]))
    ctx.runs.extend(res)
    agg = {m: _agg(res, ("label", "ir", "target_epsilon"), m) for m in ("balanced_accuracy", "minority_accuracy")}
    spent = defaultdict(list)
    for r in res:
        spent[r["label"], r["ir"], r["target_epsilon"]].append(r["metrics"]["epsilon"])
    hdr = ["method"] + [f"target ε = {e:g}" for e in eps]
    md: list[str] = []
    for ir in ratios:
        for metric, what in (("balanced_accuracy", "balanced accuracy"),
                             ("minority_accuracy", "minority-class accuracy (the long tail's last 25 % of classes)")):
            md += ["", f"**IR = {ir:g}: {what}, mean ± std over seeds {seeds}**", ""]
            md += _table(hdr, [[PROTO_LABEL[m]] + [_cell(*agg[metric].get((m, ir, e), (None, None))[:2], pct=False,
                                                         digits=3) for e in eps] for m in p["methods"]])
        md += ["", f"**IR = {ir:g}: ε spent (accounting module, run as executed; max over seeds)**", ""]
        md += _table(hdr, [[PROTO_LABEL[m]] + [f"{max(spent[(m, ir, e)]):.3f}" for e in eps] for m in p["methods"]])
    out_rows = [{"method": m, "imbalance_ratio": ir, "target_epsilon": e,
                 **{f"{k}_{s}": agg[k][(m, ir, e)][j] for k in agg for j, s in enumerate(("mean", "std"))},
                 "epsilon_spent_max": max(spent[(m, ir, e)])}
                for m in p["methods"] for ir in ratios for e in eps]
    md += sum(([""] + [n] for n in test_tuned_footnotes((PROTO_METHODS[m][0], PROTO_METHODS[m][1])
                                                        for m in p["methods"])), [])
    n_priv = sorted({r["metrics"]["n_private"] for r in res})
    pool = sorted({r["metrics"]["pool_size"] for r in res})

    def draw(fig: Any) -> None:
        for i, ir in enumerate(ratios):
            for j, (metric, what) in enumerate((("balanced_accuracy", "balanced acc."),
                                                ("minority_accuracy", "minority acc."))):
                ax = fig.add_subplot(2, len(ratios), j * len(ratios) + i + 1)
                ax.set_title(f"IR = {ir:g}: {what}", fontsize=10)
                if metric == "minority_accuracy" and float(ir) <= 1.0:
                    # a balanced split has no minority class: say so instead of a blank 0-1 panel
                    ax.text(0.5, 0.5, "no minority class\nat IR = 1", ha="center", va="center",
                            transform=ax.transAxes, fontsize=9, color="0.4")
                    ax.set_xticks([]), ax.set_yticks([])
                    continue
                _lines(ax, {PROTO_LABEL[m]: [(e, *agg[metric].get((m, ir, e), (None, None))[:2]) for e in eps]
                            for m in p["methods"]}, pct=False, bounded=True)
                _log_axis(ax, eps)
                ax.set_xlabel("target ε (log scale)")
                ax.set_ylabel(f"{what} (fraction, ± std)")
                if i == 0 and j == 0:
                    ax.legend(fontsize=7)

    fs_meta = fs.meta or {}
    setup = (f"dataset `{ctx.dataset}`, encoder `{ctx.encoder}` (D = {fs.X_train.shape[1]}), {len(fs.class_names)} "
             f"classes, {len(fs.y_test)} test samples, δ = {cfg['delta']:g}, seeds {seeds} (hold-out and split; noise from the seed only with noise='reproducible'); "
             f"{cfg['public_per_class']} public samples per class; {100 * cfg['holdout']:g} % of the training rows "
             f"held out per seed as the unlabelled public pool of DPPL-Public(K) ({pool[0]}–{pool[-1]} candidates "
             f"with the public split), {n_priv[0]}–{n_priv[-1]} private samples; AdaMix σ = 20·max(1, 3/ε); dataset "
             f"options `{json.dumps(ctx.dataset_kwargs)}`, encoder options `{json.dumps(ctx.encoder_kwargs)}`"
             + (f", features `{fs_meta.get('cache_key')}`" if fs_meta.get("cache_key") else ""))
    return FigureOutput("\n".join(md), out_rows, draw, setup)
