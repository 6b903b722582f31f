"""The AdaMix family's figures (Golatkar et al. 2022): error vs ε, few shots, ablation, the
value of a public vs a private sample, Performance Boost vs public shots.

Registers ``adamix_epsilon``, ``fewshot``, ``adamix_ablation``, ``public_vs_private`` and
``boost_vs_shots`` in :data:`~mixdp_core.runs.reproduce.FIGURES`. Every training is a
``RunConfig`` run through :meth:`~mixdp_core.runs.reproduce.Context.sweep` (run store, reused
when identical); errors are test errors in [0, 1] shown in %, ε are (ε, δ)-DP targets and the
accountant's ε of each run as executed. Also the variant tables (:data:`ADAMIX_FAMILY`,
:data:`ABLATION`, :data:`DISPLAY`) and :func:`_error_vs_epsilon`, which the DP-prototypes
family's ε sweep reuses.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np

from ...errors import ConfigError, UnknownNameError
from .base import (Context, FigureOutput, figure, _agg, _cell, _lines, _log_axis, _ms, _setup_line, _table,
                   test_tuned_footnotes)
from ..sweep import Variant


ADAMIX_FAMILY = (
    Variant("paragon", "paragon"), Variant("only_public", "only_public"), Variant("fully_private", "fully_private"),
    Variant("ngd", "ngd"), Variant("ppgd", "ppgd"), Variant("adamix", "adamix"),
    Variant("adamix_paper", "adamix", {"projection": "paper"}),
    Variant("adamix_rank", "adamix", {"projection": "rank"}),
    # private hyper-parameter selection, the whole search accounted (Papernot & Steinke 2022)
    Variant("adamix_honest", "adamix", {"honest_tuning": True}),
)
NONPRIVATE = ("paragon", "only_public")
#: table labels of the variants (others are shown by their key)
DISPLAY = {
    "paragon": "Paragon (non-private, public+private)", "only_public": "Only-Public (non-private)",
    "fully_private": "Fully-Private (NoisyGD)", "ngd": "NGD (public init + NoisyGD)", "ppgd": "PPGD",
    "adamix": "AdaMix", "adamix_paper": "AdaMix (paper projection)", "adamix_rank": "AdaMix (rank-C projection)",
    "adamix_honest": "AdaMix + private tuning (selection accounted)",
}


def _display(v: Variant) -> str:
    """The variant's table label; a variant that sets a ``leaks_private`` option (the papers'
    tuning on test results) is labelled as such, since its ε does not cover that choice."""
    from ...config import describe
    from ...methods import METHODS

    label = DISPLAY.get(v.label, v.label)
    try:
        specs = {sp.name: sp for sp in describe(METHODS.get(v.method).config_cls)}
    except Exception:  # noqa: BLE001 - a method without declared config: no label to add
        return label
    leaky = [k for k, val in dict(v.params).items() if k in specs and specs[k].leaks_for(val)]
    dagger = " †" if test_tuned_footnotes([(v.method, v.params)]) else ""
    return label + dagger + (f" — test-tuned ({', '.join(leaky)}: leaks private/test data, ε not a guarantee)"
                             if leaky else "")


def _variants(p: Mapping[str, Any], table: Sequence[Variant]) -> tuple[Variant, ...]:
    """The figure's ``variants`` parameter (labels of ``table``) as :class:`Variant` s."""
    by_label = {v.label: v for v in table}
    try:
        return tuple(by_label[str(lab)] for lab in p["variants"])
    except KeyError as e:
        raise ConfigError("variants", f"unknown variant {e.args[0]!r}; choose from {', '.join(by_label)}") from None


def better_reference_error(mean: Mapping[tuple, float | None], epsilon: float) -> float:
    """Property (a)'s bar at ``epsilon``: the lower mean error of Only-Public and of
    Fully-Private at that ε (Only-Public's where Fully-Private is not in the grid)."""
    op, fp = mean[("only_public", None)], mean.get(("fully_private", epsilon))
    return op if fp is None else min(op, fp)


def _property_lines(mean: Mapping[tuple, float | None], eps: Sequence[float], n_seeds: int = 2) -> list[str]:
    """The paper's ordering per ε and the AdaMix property checks (means over seeds): public
    data never hurt, no worse than the better of Only-Public and Fully-Private (property (a) of
    docs/results/regimes.md), more budget never hurts, the relative gain over Only-Public at ε = 3."""
    par, pub = mean.get(("paragon", None)), mean.get(("only_public", None))
    lines: list[str] = []
    if par is None or pub is None:
        return lines
    if not any(mean.get(("adamix", e)) is not None and mean.get(("fully_private", e)) is not None for e in eps):
        # a heading with nothing under it read as a check that passed
        lines += ["", "Ordering check (paper: paragon < AdaMix < Only-Public < Fully-Private): not checked, "
                      "`adamix` and `fully_private` are not both among the variants."]
    else:
        lines += ["", "Ordering check (paper: paragon < AdaMix < Only-Public < Fully-Private)"
                  + (" — one seed: the verdicts below are of these means, not tested against seed noise" if n_seeds < 2
                     else "") + ":", ""]
    for e in eps:
        ada, fp = mean.get(("adamix", e)), mean.get(("fully_private", e))
        if ada is None or fp is None:
            continue
        chain = [("paragon", par), ("AdaMix", ada), ("Only-Public", pub), ("Fully-Private", fp)]
        holds = all(chain[i][1] < chain[i + 1][1] for i in range(3))
        ranked = sorted(chain, key=lambda t: t[1])
        order = f"{ranked[0][0]} ({100 * ranked[0][1]:.2f}%)"
        for (_, prev), (n, v) in zip(ranked, ranked[1:]):
            order += f" {'=' if v == prev else '<'} {n} ({100 * v:.2f}%)"
        lines.append(f"- ε = {e:g}: measured order {order} — paper's ordering "
                     f"{'**holds**' if holds else '**does not hold**'}.")
    ada = [(e, mean[("adamix", e)]) for e in eps if mean.get(("adamix", e)) is not None]
    if ada:
        worst = max(a - pub for _, a in ada)
        # every pair ε < ε' (consecutive pairs let a slow creep pass)
        incr = max([b - a for i, (_, a) in enumerate(ada) for (_, b) in ada[i + 1:]] or [0.0])
        lines += ["", "Fidelity property checks (means over seeds; AdaMix = default `adamix`):", "",
                  f"- public data never hurt (AdaMix ≤ Only-Public + 1 pt at every ε): "
                  f"{'**holds**' if worst <= 0.01 else '**fails**'} (worst AdaMix − Only-Public = {100 * worst:+.1f} pts)"]
        if all(mean.get(("fully_private", e)) is not None for e, _ in ada):  # regimes.md's property (a)
            worst_ref = max(a - better_reference_error(mean, e) for e, a in ada)
            lines.append(f"- no worse than the better reference (AdaMix ≤ min(Only-Public, Fully-Private) + 1 pt at "
                         f"every ε): {'**holds**' if worst_ref <= 0.01 else '**fails**'} (worst AdaMix − "
                         f"min(Only-Public, Fully-Private) = {100 * worst_ref:+.1f} pts)")
        lines.append(f"- more budget never hurts (non-increasing in ε, 1.5 pt seed-noise allowance): "
                     f"{'**holds**' if incr <= 0.015 else '**fails**'} (largest increase {100 * incr:+.1f} pts)")
        a3 = dict(ada).get(3.0)
        if a3 is not None and pub > 0:
            lines.append(f"- relative error reduction over Only-Public at ε = 3: {100 * (pub - a3) / pub:.1f} %")
    return lines


def _cap(value: Any) -> int | None:
    """A figure's ``private_per_class`` parameter: ``None`` (all private rows) or an int >= 1."""
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or int(value) != value or value < 1):
        raise ConfigError("private_per_class", f"must be null (all) or an integer >= 1, got {value!r}")
    return int(value)


def _error_vs_epsilon(ctx: Context, variants: Sequence[Variant], params: Mapping[str, Any], title: str,
                      labels_here: Mapping[str, str] | None = None) -> FigureOutput:
    """Test error vs target ε of ``variants`` (one sweep), with: ε spent and steps T per cell;
    utility / MIA / pDP / Performance Boost at ``detail_epsilon``; the sorted per-instance ε_i
    at ``detail_epsilon`` (first seed; AdaMix Fig. 3) as a second chart; the ordering and
    property checks when the AdaMix family is in the grid. ``params`` go to every method that
    declares them (e.g. σ), a variant's own params win. ``labels_here`` replaces a variant's
    table label in this figure only (the ablation names the default ``adamix`` by its step)."""
    p = ctx.params
    eps = [float(e) for e in p["epsilons"]]
    ir = float(p.get("imbalance_ratio", 1.0))
    cap = _cap(p.get("private_per_class"))
    rows = ctx.sweep(ctx.spec(methods=tuple(variants), epsilons=tuple(eps), seeds=tuple(p["seeds"]),
                              public_per_class=(int(p["public_per_class"]),), imbalance_ratios=(ir,),
                              private_per_class=(cap,), params=dict(params)))
    err = _agg(rows, ("label", "target_epsilon"), "test_error")
    spent, steps = defaultdict(list), defaultdict(list)
    for r in rows:
        spent[r["label"], r["target_epsilon"]].append(r["metrics"].get("epsilon"))
        steps[r["label"], r["target_epsilon"]].append(r["metrics"].get("steps"))
    labels = [v.label for v in variants]
    shown = {v.label: (labels_here or {}).get(v.label) or _display(v) for v in variants}
    private = [lab for lab in labels if lab not in NONPRIVATE]
    ref_eps = {r["target_epsilon"] for r in rows if r["label"] in NONPRIVATE}
    refs = {lab: err[(lab, e)][:2] for lab in labels if lab in NONPRIVATE for e in ref_eps if (lab, e) in err}
    table_rows, out_rows = [], []
    for lab in labels:
        if lab in NONPRIVATE:
            m, s = refs.get(lab, (None, None))
            table_rows.append([shown[lab]] + [f"{_cell(m, s)} (ε = {'0' if lab == 'only_public' else '∞'})"]
                              * len(eps))
            out_rows.append({"method": lab, "epsilon": None, "test_error_mean": m, "test_error_std": s})
            continue
        table_rows.append([shown[lab]] + [_cell(*err.get((lab, e), (None, None, 0))[:2]) for e in eps])
        for e in eps:
            m, s, n = err.get((lab, e), (None, None, 0))
            vals = [v for v in spent[(lab, e)] if v is not None]
            out_rows.append({"method": lab, "target_epsilon": e, "test_error_mean": m, "test_error_std": s, "n": n,
                             "epsilon_spent_max": max(vals) if vals else None})

    def spent_cell(lab: str, e: float) -> str:
        vals = [v for v in spent[(lab, e)] if v is not None]
        ts = [t for t in steps[(lab, e)] if t is not None]
        if not vals:
            return "–"
        return (f"T = {np.mean(ts):.0f}, " if ts else "") + f"ε = {max(vals):.3f}"

    # How often the public-start guard released the private model (issue #25: every results table
    # says it), per guarded method and ε; methods without the guard (None) get no row.
    released: dict[tuple, list[bool]] = defaultdict(list)
    for r in rows:
        g = r["metrics"].get("guard_released_private")
        if g is not None:
            released[r["label"], r["target_epsilon"]].append(bool(g))
    for lab in private:
        if any(released.get((lab, e)) for e in eps):
            table_rows.append([f"{shown[lab]}: guard released the private model"] +
                              [f"{sum(released[(lab, e)])}/{len(released[(lab, e)])}" if released.get((lab, e))
                               else "–" for e in eps])
    for row in out_rows:
        g = released.get((row["method"], row.get("target_epsilon")))
        if g:
            row["guard_released"] = sum(g) / len(g)
    hdr = ["method"] + [f"target ε = {e:g}" for e in eps]
    md = ["**Test error (%) — mean ± std over seeds**", ""]
    md += _table(hdr, table_rows)
    md += ["", "**Steps T (mean over seeds) and ε spent (accounting module, run as executed; max over seeds)**", ""]
    md += _table(hdr, [[shown[lab]] + [spent_cell(lab, e) for e in eps] for lab in private])
    de = float(p.get("detail_epsilon", eps[-1]))
    if de not in eps:  # the default 3 with --epsilons 1,8, or a value off the grid: the largest ε, said so
        # (it drew no detail table and no pDP chart, without a word)
        md += ["", f"(detail ε = {eps[-1]:g}: the detail_epsilon asked, {de:g}, is not among the epsilons)"]
        de = eps[-1]
    pdp: dict[str, np.ndarray] = {}
    if de in eps:  # utility, privacy audit and boost at one ε (mean ± std over seeds)
        det = []
        for lab in labels:
            key_eps = next(iter(ref_eps)) if lab in NONPRIVATE and ref_eps else de
            sub = [r for r in rows if r["label"] == lab and r["target_epsilon"] == key_eps]

            def c(metric: str, pct: bool = False, digits: int = 3) -> str:
                return _cell(*_ms([r["metrics"].get(metric) for r in sub])[:2], pct=pct, digits=digits)

            det.append([shown[lab], c("test_error", True, 1), c("balanced_accuracy", True, 1),
                        c("minority_accuracy", True, 1), c("mia_auc"), c("mia_advantage"), c("pdp_epsilon_min"),
                        c("pdp_epsilon_median"), c("pdp_epsilon_q95"), c("pdp_epsilon_max"),
                        c("performance_boost", digits=2)])
            first = [r for r in sub if r["seed"] == p["seeds"][0]]
            if lab not in NONPRIVATE and first and ctx.store is not None:
                arr = ctx.store.load_artifacts(first[0]["run_id"]).get("pdp_epsilon")
                if arr is not None and np.size(arr):
                    pdp[lab] = np.sort(np.asarray(arr, dtype=float))
        md += ["", f"**At target ε = {de:g}: utility, membership-inference AUC / advantage, per-instance ε (pDP "
               "min / median / q95 / max) and Performance Boost (mean ± std over seeds; non-private methods: ε = ∞)**", ""]
        md += _table(["method", "test error (%)", "balanced acc. (%)", "minority acc. (%)", "MIA AUC", "MIA advantage",
                      "pDP ε_i min", "median", "q95", "max", "Performance Boost"], det)
    mean = {(lab, None if lab in NONPRIVATE else e): m for (lab, e), (m, _, _) in err.items()}
    md += _property_lines(mean, eps, n_seeds=len(list(p["seeds"])))
    notes = test_tuned_footnotes((v.method, v.params) for v in variants)
    if notes:  # DP-LS's test-tuned default, as the prototypes figure says it
        md += [""] + notes

    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        _lines(ax, {shown[lab]: [(e, *err.get((lab, e), (None, None))[:2]) for e in eps] for lab in private},
               refs={shown[k]: v for k, v in refs.items()})
        _log_axis(ax, eps)
        ax.set_xlabel("target ε (log scale)")
        ax.set_ylabel("test error (%)")
        ax.set_title(title)
        ax.legend(fontsize=7)

    def draw_pdp(fig: Any) -> None:  # AdaMix Fig. 3: sorted per-instance ε_i, every one ≤ the target
        ax = fig.add_subplot(1, 1, 1)
        for j, (lab, e_i) in enumerate(pdp.items()):
            ax.plot(np.arange(e_i.size) / max(e_i.size - 1, 1), e_i, label=shown[lab], ls="-" if j < 10 else "--")
        ax.axhline(de, color="k", ls=":", label=f"target ε = {de:g}")
        ax.set_xlabel("private samples (fraction, sorted by ε_i)")
        ax.set_ylabel("per-instance ε_i")
        ax.set_title(f"per-instance ε_i at target ε = {de:g} (seed {p['seeds'][0]}; owner's view, not private)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)

    extra = {"pdp": (f"Sorted per-instance ε_i at target ε = {de:g} (seed {p['seeds'][0]}; cf. AdaMix Fig. 3)",
                     draw_pdp)} if pdp else {}
    return FigureOutput("\n".join(md), out_rows, draw, _setup_line(ctx, rows) +
                        f", {p['public_per_class']} public samples per class"
                        + (f", at most {cap} private samples per class" if cap else "")
                        + f", imbalance ratio {ir:g}, method params `{json.dumps(dict(params))}`", extra)


@figure("adamix_epsilon", "AdaMix family: test error vs ε", "AdaMix (Golatkar et al. 2022), Table 1 / Fig. 4",
        epsilons=[0.5, 1, 2, 3, 8], seeds=[0, 1, 2], public_per_class=5, noise_multiplier=20.0, detail_epsilon=3.0,
        variants=["paragon", "only_public", "fully_private", "ngd", "ppgd", "adamix", "adamix_rank"])
def _adamix_epsilon(ctx: Context) -> FigureOutput:
    return _error_vs_epsilon(ctx, _variants(ctx.params, ADAMIX_FAMILY),
                             {"noise_multiplier": float(ctx.params["noise_multiplier"])},
                             "AdaMix family: test error vs ε")


@figure("fewshot", "AdaMix family in few-shot regimes: test error vs ε",
        "AdaMix (Golatkar et al. 2022), Table 1 / Fig. 3-4, few public shots",
        epsilons=[0.5, 1, 3, 8], seeds=[0, 1], public_per_class=2, private_per_class=None, noise_multiplier=20.0,
        detail_epsilon=3.0, variants=["paragon", "only_public", "fully_private", "ngd", "ppgd", "adamix", "adamix_honest"])
def _fewshot(ctx: Context) -> FigureOutput:
    return _error_vs_epsilon(ctx, _variants(ctx.params, ADAMIX_FAMILY),
                             {"noise_multiplier": float(ctx.params["noise_multiplier"])},
                             "AdaMix family, few public shots: test error vs ε")


#: AdaMix Fig. 5's ablation, one ingredient at a time from NGD (public start, fixed clip, no
#: projection) to the paper's AdaMix (adaptive clip + projection on the public-gradient
#: subspace). The default ``adamix`` (no projection) is the adaptive-clip step, so the
#: figure's property checks read the default; ``adamix_clip_only`` spells it out (same settings,
#: its own runs).
ABLATION = (
    Variant("paragon", "paragon"), Variant("only_public", "only_public"),
    Variant("ngd", "ngd"),
    Variant("adamix", "adamix"),
    Variant("adamix_clip_only", "adamix", {"clip": "adaptive", "projection": "none"}),
    Variant("adamix_projection_only", "adamix", {"clip": "fixed", "projection": "paper"}),
    Variant("adamix_both", "adamix", {"clip": "adaptive", "projection": "paper"}),
)
DISPLAY.update({"adamix_clip_only": "+ adaptive clip (no projection)",
                "adamix_projection_only": "+ projection (fixed clip)",
                "adamix_both": "+ both (AdaMix as in the paper)"})
#: the ablation's name for the default ``adamix``: its step in the ablation
ABLATION_LABELS = {"adamix": "+ adaptive clip, no projection (AdaMix's default)"}


@figure("adamix_ablation", "AdaMix ablation: NGD, + adaptive clip, + projection, both (the paper's AdaMix)",
        "AdaMix (Golatkar et al. 2022), Fig. 5 (ablation of adaptive clipping and projection)",
        epsilons=[0.5, 1, 3, 8], seeds=[0, 1, 2], public_per_class=2, private_per_class=None,
        noise_multiplier=20.0, detail_epsilon=3.0,
        variants=["paragon", "only_public", "ngd", "adamix", "adamix_projection_only", "adamix_both"])
def _adamix_ablation(ctx: Context) -> FigureOutput:
    """Test error vs ε of each ablation step (one sweep; the same engine and accounting for all)."""
    return _error_vs_epsilon(ctx, _variants(ctx.params, ABLATION),
                             {"noise_multiplier": float(ctx.params["noise_multiplier"])},
                             "AdaMix ablation (Fig. 5): test error vs ε", labels_here=ABLATION_LABELS)


@figure("public_vs_private", "Value of a public vs a private sample", "AdaMix (Golatkar et al. 2022), Fig. 2",
        public=[1, 2, 5, 10], private=[5, 10, 20, 50, 100], epsilon=3.0, seeds=[0, 1, 2], method="adamix",
        noise_multiplier=20.0)
def _public_vs_private(ctx: Context) -> FigureOutput:
    p = ctx.params
    from ...methods import METHODS

    try:  # the figure's own parameter, named in the error (it said "methods: unknown method")
        METHODS.get(str(p["method"]))
    except UnknownNameError as e:
        raise ConfigError.unknown_name("method", e) from None
    pubs, privs = [int(x) for x in p["public"]], [int(x) for x in p["private"]]
    rows = ctx.sweep(ctx.spec(methods=(p["method"],), epsilons=(float(p["epsilon"]),), seeds=tuple(p["seeds"]),
                              public_per_class=tuple(pubs), private_per_class=tuple(privs),
                              params={"noise_multiplier": float(p["noise_multiplier"])}))
    err = _agg(rows, ("public_per_class", "private_per_class"), "test_error")
    n_priv = defaultdict(list)
    for r in rows:
        n_priv[r["private_per_class"]].append(r["metrics"].get("n_private"))
    md = [f"**{p['method']} test error (%) at target ε = {float(p['epsilon']):g} — rows: public samples per class, "
          "columns: private samples per class (cap; mean ± std over seeds)**", ""]
    md += _table(["public \\ private"] + [str(v) for v in privs],
                 [[str(a)] + [_cell(*err.get((a, b), (None, None))[:2]) for b in privs] for a in pubs])
    md += ["", "Private samples actually available (mean over the grid): " +
           ", ".join(f"cap {b}: {np.mean([x for x in n_priv[b] if x is not None]):.0f}" for b in privs) + "."]
    out_rows = [{"public_per_class": a, "private_per_class": b, "test_error_mean": err[(a, b)][0],
                 "test_error_std": err[(a, b)][1], "n": err[(a, b)][2]} for a in pubs for b in privs if (a, b) in err]

    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        _lines(ax, {f"{a} public / class": [(b, *err.get((a, b), (None, None))[:2]) for b in privs] for a in pubs})
        _log_axis(ax, privs)
        ax.set_xlabel("private samples per class (log scale)")
        ax.set_ylabel("test error (%)")
        ax.set_title(f"{p['method']}, target ε = {float(p['epsilon']):g}: public vs private samples")
        ax.legend(fontsize=8)

    return FigureOutput("\n".join(md), out_rows, draw, _setup_line(ctx, rows))


@figure("boost_vs_shots", "Performance Boost vs public shots", "AdaMix (Golatkar et al. 2022), Sec. 4 (PB)",
        shots=[1, 2, 5, 10, 20], epsilon=3.0, seeds=[0, 1, 2], methods=["ngd", "ppgd", "adamix"],
        noise_multiplier=20.0)
def _boost_vs_shots(ctx: Context) -> FigureOutput:
    from ...evaluation.metrics import performance_boost

    p = ctx.params
    shots, methods = [int(x) for x in p["shots"]], list(p["methods"])
    rows = ctx.sweep(ctx.spec(methods=("paragon", "only_public", *methods), epsilons=(float(p["epsilon"]),),
                              seeds=tuple(p["seeds"]), public_per_class=tuple(shots),
                              params={"noise_multiplier": float(p["noise_multiplier"])}))
    err = {(r["label"], r["public_per_class"], r["seed"]): r["metrics"]["test_error"] for r in rows}
    pb: dict[tuple, list] = defaultdict(list)
    for (lab, k, seed), e in err.items():
        if lab in methods:  # PB of each seed against the references of the same split
            pb[lab, k].append(performance_boost(e, err_public=err[("only_public", k, seed)],
                                                err_paragon=err[("paragon", k, seed)]))
    agg = {key: _ms(v) for key, v in pb.items()}
    n_inf = sum(1 for v in pb.values() for x in v if x == math.inf)
    n_undef = sum(1 for v in pb.values() for x in v if x == -math.inf or math.isnan(x))
    md = [f"**Performance Boost PB = (err_public − err_paragon) / (err_DP − err_paragon) at target ε = "
          f"{float(p['epsilon']):g} — mean ± std over seeds (PB = 1: no better than Only-Public)**", ""]
    md += _table(["method"] + [f"{k} public / class" for k in shots],
                 [[m] + [_cell(*agg.get((m, k), (None, None))[:2], pct=False, digits=2) for k in shots] for m in methods])
    e_agg = _agg(rows, ("label", "public_per_class"), "test_error")
    md += ["", "**Test error (%) — mean ± std over seeds**", ""]
    md += _table(["method"] + [f"{k} public / class" for k in shots],
                 [[m] + [_cell(*e_agg.get((m, k), (None, None))[:2]) for k in shots]
                  for m in ("paragon", "only_public", *methods)])
    if n_inf:
        md += ["", f"{n_inf} seed(s) with err_DP = err_paragon (PB infinite) left out of the means."]
    if n_undef:
        md += ["", f"{n_undef} seed(s) where an error is below the paragon's, or all three are equal (PB undefined), "
                   "left out of the means."]
    out_rows = [{"method": m, "public_per_class": k, "pb_mean": agg[(m, k)][0], "pb_std": agg[(m, k)][1],
                 "n": agg[(m, k)][2]} for m in methods for k in shots if (m, k) in agg]

    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        _lines(ax, {m: [(k, *agg.get((m, k), (None, None))[:2]) for k in shots] for m in methods}, pct=False)
        ax.axhline(1.0, color="grey", lw=1, ls=":", label="PB = 1 (Only-Public)")
        _log_axis(ax, shots)
        ax.set_xlabel("public samples per class (log scale)")
        ax.set_ylabel("Performance Boost")
        ax.set_title(f"Performance Boost vs public shots (target ε = {float(p['epsilon']):g}; owner's view: "
                     "a ratio with the paragon's error)")
        ax.legend(fontsize=8)

    return FigureOutput("\n".join(md), out_rows, draw, _setup_line(ctx, rows))
