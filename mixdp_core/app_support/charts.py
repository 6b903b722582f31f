"""Plotly figures and tables the pages draw, built from run-store data.

Inputs are plain store data: step records (``RunStore.steps``: dicts of
:class:`~mixdp_core.methods.base.StepRecord`), run metrics (``RunRecord.metrics``), and the
run's ``.npz`` artifacts. Errors and accuracies are fractions in ``[0, 1]``; ε is reported at
the run's δ; ``None`` ε means a non-private method (ε = ∞).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

TEMPLATE = "plotly_white"
#: ``config`` of st.plotly_chart: no plotly logo, tool bar only on hover.
PLOTLY_CONFIG = {"displaylogo": False, "displayModeBar": "hover"}
#: ``config`` of the small live charts (no tool bar over their titles).
LIVE_CONFIG = {"displaylogo": False, "displayModeBar": False}
PUBLIC_COLOR = "#1f77b4"
PRIVATE_COLOR = "#ff7f0e"
MINORITY_COLOR = "#d62728"


def _go():
    import plotly.graph_objects as go

    return go


def _style(method: str) -> tuple[str, str | None]:
    from ..evaluation.plots import METHOD_STYLE

    return METHOD_STYLE.get(method, (method, None))


def _layout(fig, title: str, x: str, y: str, height: int = 320):
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, template=TEMPLATE, height=height,
                      margin=dict(l=40, r=20, t=50, b=40), legend=dict(orientation="h", y=-0.25))
    return fig


# --------------------------------------------------------------------------- data page
def class_counts_figure(summary: Mapping[str, Any]):
    """Grouped bars of public and private samples per class; minority classes marked.

    Args:
        summary: :meth:`mixdp_core.data.splits.Split.summary` (``class_names, public,
            private, test, minority``).
    """
    go = _go()
    names = [str(c) for c in summary["class_names"]]
    minority = [bool(m) for m in summary["minority"]]
    labels = [f"{n} ★" if m else n for n, m in zip(names, minority)]
    fig = go.Figure()
    fig.add_bar(x=labels, y=summary["public"], name="public", marker_color=PUBLIC_COLOR)
    fig.add_bar(x=labels, y=summary["private"], name="private", marker_color=[
        MINORITY_COLOR if m else PRIVATE_COLOR for m in minority],
        marker_pattern_shape=["/" if m else "" for m in minority])
    fig.update_layout(barmode="group")
    return _layout(fig, "Samples per class (★ = minority class, red)", "class", "samples")


# --------------------------------------------------------------------------- live charts
def steps_frame(steps: Sequence[Mapping[str, Any]]):
    """Step records as a DataFrame (one row per record, ``extra`` flattened)."""
    import pandas as pd

    rows = []
    for r in steps:
        row = {k: v for k, v in r.items() if k != "extra"}
        for k, v in (r.get("extra") or {}).items():
            row[f"extra.{k}"] = v
        rows.append(row)
    cols = ["step", "total_steps", "train_loss", "test_error", "clip_norm", "epsilon_spent"]
    df = pd.DataFrame(rows)
    for c in cols:
        if c not in df:
            df[c] = np.nan
    return df


def _line(df, col: str, title: str, ylabel: str, *, hline: float | None = None, hname: str = "",
          ymax: float | None = None, rangemode: str = "tozero"):
    go = _go()
    fig = go.Figure()
    d = df[["step", col]].dropna() if len(df) else df
    if len(d):
        fig.add_trace(go.Scatter(x=d["step"], y=d[col], mode="lines+markers", name=ylabel,
                                 marker=dict(size=4)))
    if hline is not None:
        fig.add_hline(y=hline, line_dash="dash", line_color="#d62728", annotation_text=hname)
    total = df["total_steps"].dropna().max() if len(df) and df["total_steps"].notna().any() else None
    if total:
        fig.update_xaxes(range=[0, float(total) * 1.02])
    fig.update_yaxes(rangemode=rangemode)
    if ymax is not None:
        fig.update_yaxes(range=[0, ymax])
    if not len(d):
        fig.add_annotation(text="no records yet", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return _layout(fig, title, "step", ylabel, height=280)


def live_figures(steps: Sequence[Mapping[str, Any]], *, target_epsilon: float | None = None) -> dict[str, Any]:
    """Figures for a running (or finished) run: ``test_error``, ``epsilon`` and ``clip``.

    Args:
        steps: the run's step records in order.
        target_epsilon: drawn as the budget line on the ε chart.
    """
    df = steps_frame(steps)
    return {
        "test_error": _line(df, "test_error", "Test error vs step", "test error"),
        "epsilon": _line(df, "epsilon_spent", "ε spent vs step", "ε spent", hline=target_epsilon,
                         hname="target ε"),
        "clip": _line(df, "clip_norm", "Clip threshold τ_t vs step", "τ_t"),
    }


# --------------------------------------------------------------------------- metrics
def privacy_table(metrics: Mapping[str, Any]) -> list[dict[str, str]]:
    """Side-by-side privacy numbers of a finished run: (ε, δ), μ-GDP, ρ-zCDP, pure ε.

    ``None`` values are shown as ``"∞"`` for ε of a non-private run and ``"—"`` otherwise
    (the conversion does not apply to the mechanism).
    """
    private = metrics.get("private", metrics.get("epsilon") is not None)
    p = metrics.get("privacy") or {}

    def fmt(v: Any, inf_if_none: bool = False) -> str:
        if v is None:
            return "∞" if inf_if_none else "—"
        if isinstance(v, float) and not math.isfinite(v):
            return "∞"
        return f"{v:.4g}" if isinstance(v, (int, float)) else str(v)

    rows = [
        {"notion": "(ε, δ)-DP: ε", "value": fmt(metrics.get("epsilon"), inf_if_none=not private)},
        {"notion": "(ε, δ)-DP: δ", "value": fmt(metrics.get("delta"))},
        {"notion": "μ-GDP: μ", "value": fmt(metrics.get("mu"), inf_if_none=not private)},
        {"notion": "ρ-zCDP: ρ", "value": fmt(metrics.get("rho"), inf_if_none=not private)},
    ]
    if p.get("pure_epsilon") is not None:
        rows.append({"notion": "pure ε-DP: ε", "value": fmt(p.get("pure_epsilon"))})
    if p.get("accountant"):
        rows.append({"notion": "accountant", "value": str(p.get("accountant"))})
    if p.get("mechanism"):
        rows.append({"notion": "mechanism", "value": str(p.get("mechanism"))})
    if not private:
        rows.append({"notion": "note", "value": "non-private method: no DP guarantee (ε = ∞)"
                     if metrics.get("method") not in ("only_public", "zero_shot")
                     else "private data never read: privacy loss 0"})
    return rows


def metric_cards(metrics: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(label, value)`` pairs for the final metrics of a run."""
    def pct(v: Any) -> str:
        return "—" if v is None else f"{100 * float(v):.1f} %"

    def num(v: Any) -> str:
        return "—" if v is None else f"{float(v):.3f}"

    return [
        ("test error", pct(metrics.get("test_error"))),
        ("balanced accuracy", pct(metrics.get("balanced_accuracy"))),
        ("minority-class accuracy", pct(metrics.get("minority_accuracy"))),
        ("attack AUC", num(metrics.get("mia_auc"))),
    ]


# --------------------------------------------------------------------------- compare
def _std(xs: list[float]) -> float:
    return float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0


def aggregate_runs(runs: Iterable[Any], metrics: Sequence[str] = ("test_error", "mia_auc", "minority_accuracy")
                   ) -> list[dict[str, Any]]:
    """Mean and std over seeds per (method, ε) of completed runs.

    Non-private methods get ``epsilon = None`` (reference lines), whatever ε they were stored
    with. Returns rows ``{method, epsilon, n, <m>_mean, <m>_std, ...}`` sorted by method, ε.
    """
    groups: dict[tuple[str, float | None], list[Mapping[str, Any]]] = {}
    for r in runs:
        m = r.metrics or {}
        if m.get("test_error") is None:
            continue
        eps = float(r.target_epsilon) if m.get("private", True) and m.get("epsilon") is not None else None
        groups.setdefault((r.method, eps), []).append(m)
    rows = []
    for (method, eps), ms in groups.items():
        row: dict[str, Any] = {"method": method, "epsilon": eps, "n": len(ms)}
        for k in metrics:
            xs = [float(x[k]) for x in ms if x.get(k) is not None]
            row[f"{k}_mean"] = float(np.mean(xs)) if xs else None
            row[f"{k}_std"] = _std(xs) if xs else None
        eps_spent = [float(x["epsilon"]) for x in ms if x.get("epsilon") is not None]
        row["epsilon_spent_max"] = max(eps_spent) if eps_spent else None
        rows.append(row)
    rows.sort(key=lambda r: (r["method"], -1.0 if r["epsilon"] is None else r["epsilon"]))
    return rows


def metric_vs_epsilon(rows: Sequence[Mapping[str, Any]], metric: str, title: str, ylabel: str):
    """``metric`` (mean ± std over seeds) vs ε, non-private methods as dashed lines."""
    from ..evaluation.plots import metric_vs_epsilon_figure

    fig = metric_vs_epsilon_figure(rows, metric=metric, title=title, ylabel=ylabel, log_x=True)
    eps = sorted({float(r["epsilon"]) for r in rows if r.get("epsilon") is not None})
    if eps:
        fig.update_xaxes(tickvals=eps, ticktext=[f"{e:g}" for e in eps], minor=dict(showgrid=False))
    fig.update_layout(height=360, margin=dict(l=40, r=20, t=50, b=40), template=TEMPLATE)
    return fig


def auc_vs_error_figure(rows: Sequence[Mapping[str, Any]]):
    """Membership-attack AUC vs test error, one marker per (method, ε), ε annotated
    (AdaMix Fig. 1 right). Reference (non-private) methods are labelled ε = ∞."""
    go = _go()
    fig = go.Figure()
    by_method: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("test_error_mean") is None or r.get("mia_auc_mean") is None:
            continue
        by_method.setdefault(r["method"], []).append(r)
    positions = ("top center", "bottom center", "middle right", "middle left")
    for k, (m, rs) in enumerate(by_method.items()):
        name, color = _style(m)
        rs = sorted(rs, key=lambda r: math.inf if r["epsilon"] is None else r["epsilon"])
        fig.add_trace(go.Scatter(
            x=[r["test_error_mean"] for r in rs], y=[r["mia_auc_mean"] for r in rs],
            mode="markers+text+lines" if len(rs) > 1 else "markers+text", name=name,
            text=["ε=∞" if r["epsilon"] is None else f"ε={r['epsilon']:g}" for r in rs],
            textposition=positions[k % len(positions)], marker=dict(size=9, color=color), line=dict(color=color, width=1)))
    fig.add_hline(y=0.5, line_dash="dot", line_color="#7f7f7f", annotation_text="random guess")
    return _layout(fig, "Attack AUC vs test error", "test error", "membership-attack AUC", height=360)


def best_method_sentences(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One sentence per ε naming the private method with the lowest mean test error."""
    by_eps: dict[float, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("epsilon") is not None and r.get("test_error_mean") is not None:
            by_eps.setdefault(r["epsilon"], []).append(r)
    out = []
    for eps in sorted(by_eps):
        rs = sorted(by_eps[eps], key=lambda r: r["test_error_mean"])
        best = rs[0]
        s = (f"At ε = {eps:g}, the best method is **{_style(best['method'])[0]}** "
             f"(test error {100 * best['test_error_mean']:.1f} %")
        if len(rs) > 1:
            s += f"; next: {_style(rs[1]['method'])[0]} {100 * rs[1]['test_error_mean']:.1f} %"
        s += f", mean over {best['n']} seed{'s' if best['n'] > 1 else ''})."
        out.append(s)
    return out


# --------------------------------------------------------------------------- privacy audit
def pdp_sorted_figure(eps_i: np.ndarray, target_epsilon: float | None):
    """Per-instance ε of every private sample, sorted (AdaMix Fig. 3 left)."""
    go = _go()
    e = np.sort(np.asarray(eps_i, dtype=float))
    fig = go.Figure(go.Scatter(x=np.arange(1, len(e) + 1), y=e, mode="lines", name="ε_i (sorted)"))
    if target_epsilon is not None:
        fig.add_hline(y=target_epsilon, line_dash="dash", line_color="#d62728", annotation_text="target ε")
    return _layout(fig, "Per-instance ε, sorted", "private samples (sorted)", "ε_i", height=340)


def pdp_hist_figure(eps_i: np.ndarray, target_epsilon: float | None):
    """Histogram of per-instance ε with the target ε line (AdaMix Fig. 3 right)."""
    go = _go()
    fig = go.Figure(go.Histogram(x=np.asarray(eps_i, dtype=float), nbinsx=40, name="ε_i"))
    if target_epsilon is not None:
        fig.add_vline(x=target_epsilon, line_dash="dash", line_color="#d62728", annotation_text="target ε")
    return _layout(fig, "Histogram of per-instance ε", "ε_i", "private samples", height=340)


def roc_figure(fpr: np.ndarray, tpr: np.ndarray, auc: float | None):
    """ROC curve of the loss-threshold membership attack, with its AUC."""
    go = _go()
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=fpr, y=tpr, mode="lines", name=f"attack (AUC {auc:.3f})" if auc is not None
                             else "attack"))
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="random guess (AUC 0.5)",
                             line=dict(dash="dot", color="#7f7f7f")))
    fig.update_xaxes(range=[0, 1])
    fig.update_yaxes(range=[0, 1])
    return _layout(fig, "Membership-attack ROC", "false positive rate", "true positive rate", height=360)


def delta_curve(metrics: Mapping[str, Any], eps_grid: np.ndarray | None = None):
    """δ(ε) of the run as executed, from its μ-GDP (exact for Gaussian compositions) or, if
    only ρ-zCDP is known, from the zCDP conversion. Returns ``(eps, delta, source)`` or
    ``None`` when the run has neither (non-private or pure-DP methods)."""
    from .. import accounting

    mu, rho = metrics.get("mu"), metrics.get("rho")
    eps_run = metrics.get("epsilon") or 1.0
    if eps_grid is None:
        eps_grid = np.linspace(0.0, max(3.0 * float(eps_run), 1.0), 200)
    if mu is not None and mu > 0:
        d = np.asarray(accounting.gaussian_delta(float(mu), eps_grid), dtype=float)
        return eps_grid, d, f"μ-GDP, μ = {mu:.4g}"
    if rho is not None and rho > 0:
        d = np.asarray([accounting.zcdp_to_delta(float(rho), epsilon=float(e)) for e in eps_grid], dtype=float)
        return eps_grid, d, f"ρ-zCDP, ρ = {rho:.4g}"
    return None


def delta_curve_figure(metrics: Mapping[str, Any]):
    """Figure of :func:`delta_curve` with the run's (ε, δ) point, or ``None``."""
    go = _go()
    c = delta_curve(metrics)
    if c is None:
        return None
    eps, d, src = c
    fig = go.Figure(go.Scatter(x=eps, y=d, mode="lines", name=f"δ(ε) ({src})"))
    if metrics.get("epsilon") is not None and metrics.get("delta") is not None:
        fig.add_trace(go.Scatter(x=[metrics["epsilon"]], y=[metrics["delta"]], mode="markers",
                                 name="this run's (ε, δ)", marker=dict(size=10, color="#d62728")))
    fig.update_yaxes(type="log", exponentformat="power")
    return _layout(fig, "Privacy curve δ(ε) of this run", "ε", "δ", height=340)


#: Colours of the attacks drawn against the theory curve (audit page, classroom mode).
ATTACK_COLORS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def theory_vs_attack_figure(report: Any, rocs: Mapping[str, tuple[np.ndarray, np.ndarray]], *,
                            log: bool = True, fpr_floor: float = 1e-4, large: bool = True):
    """The best trade-off any attack can reach under the guarantee, with measured ROCs on top.

    Args:
        report: the run's privacy report (``epsilon``, ``delta``, optional ``mu``), or ``None``
            for a non-private run (then the bound is TPR = 1).
        rocs: ``{attack name: (fpr, tpr)}`` measured curves.
        log: log–log axes (Carlini et al. 2022 convention, to show the low-FPR regime); ``False``
            gives linear axes.
        fpr_floor: smallest FPR drawn on log axes.
        large: large fonts (classroom projection).

    The theory curve is :func:`mixdp_core.accounting.max_tpr` (μ-GDP where the report has μ,
    else (ε, δ)); an attack above it would mean a privacy bug.
    """
    from ..accounting import max_tpr

    go = _go()
    fig = go.Figure()
    grid = np.logspace(math.log10(fpr_floor), 0, 300) if log else np.linspace(0, 1, 301)
    bound = np.asarray(max_tpr(report, grid), dtype=float)
    if report is None:
        name = "no guarantee: any attack possible"
    elif getattr(report, "mu", None) is not None:
        name = f"best possible attack under the guarantee (μ = {report.mu:.3g}, ε = {report.epsilon:.3g})"
    else:
        name = f"best possible attack under ε = {report.epsilon:.3g}, δ = {report.delta:.0e}"
    fig.add_trace(go.Scatter(x=grid, y=bound, mode="lines", name=name, line=dict(color="black", width=4),
                             fill="tozeroy", fillcolor="rgba(0,0,0,0.06)"))
    fig.add_trace(go.Scatter(x=grid, y=grid, mode="lines", name="random guessing",
                             line=dict(dash="dot", color="#7f7f7f", width=2)))
    for i, (nm, (f, t)) in enumerate(rocs.items()):
        f = np.asarray(f, dtype=float)
        t = np.asarray(t, dtype=float)
        if log:
            keep = f >= fpr_floor
            f, t = f[keep], np.maximum(t[keep], fpr_floor)
        fig.add_trace(go.Scatter(x=f, y=t, mode="lines", name=str(nm),
                                 line=dict(color=ATTACK_COLORS[i % len(ATTACK_COLORS)], width=3)))
    axis = dict(type="log", range=[math.log10(fpr_floor), 0]) if log else dict(range=[0, 1])
    fig.update_xaxes(**axis)
    fig.update_yaxes(**axis)
    font = 20 if large else 13
    _layout(fig, "What the guarantee allows vs what the attacks achieve",
            "false positive rate (non-members wrongly accused)", "true positive rate (members found)",
            height=560 if large else 380)
    fig.update_layout(font=dict(size=font), legend=dict(orientation="h", y=-0.3, font=dict(size=font - 4)))
    return fig
