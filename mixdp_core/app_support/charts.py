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
#: The label of a membership attack's AUC wherever the app shows it: the attack reads the private
#: rows and their membership, so its score is the data owner's diagnostic, not covered by ε.
OWNER_AUC_LABEL = "attack AUC (owner only)"
PUBLIC_COLOR = "#1f77b4"
PRIVATE_COLOR = "#ff7f0e"
MINORITY_COLOR = "#d62728"
#: The budget (target ε) line of every chart that draws one, dashed.
BUDGET_COLOR = "#d62728"


def _go():
    import plotly.graph_objects as go

    return go


def _style(method: str) -> tuple[str, str | None]:
    from ..evaluation.plots import METHOD_STYLE

    return METHOD_STYLE.get(method, (method, None))


def percent(v: Any) -> str:
    """A fraction as a percentage with one decimal, never "0.0 %" or "100.0 %" for a value that
    is not exactly that (1 error in 2,500 read as "0.0 %", 0.9996 as "100.0 %")."""
    x = 100 * float(v)
    if 0 < x < 0.05:
        return "<0.1 %"
    if 99.95 <= x < 100:
        return ">99.9 %"
    return f"{x:.1f} %"


def _pct(v: Any) -> str:
    """:func:`percent`, or "—" for no value (cards and tables)."""
    return "—" if v is None else percent(v)


def reads_no_private(method: str) -> bool:
    """Whether ``method`` never reads the private rows (Only-Public, zero-shot): its privacy
    loss is 0, not the ∞ of a non-private reference."""
    from ..errors import UnknownNameError
    from ..methods import METHODS

    try:
        return not getattr(METHODS.get(method), "uses_private_data", True)
    except UnknownNameError:
        return False


def _reference_eps_label(method: str) -> str:
    return "ε=0" if reads_no_private(method) else "ε=∞"


def _owner_view(build: Any) -> Any:
    """Mark what ``build`` returns as computed on the private data without a guarantee
    (``layout.meta["owner_only"]``): its CSV export then starts with the owner's note. The page
    labels such a chart; its downloaded file (exact per-class private counts, per-instance ε,
    attack scores) carried no label at all."""
    import functools

    @functools.wraps(build)
    def marked(*args: Any, **kwargs: Any) -> Any:
        fig = build(*args, **kwargs)
        if fig is not None:
            fig.update_layout(meta={"owner_only": True})
        return fig

    return marked


def _layout(fig, title: str, x: str, y: str, height: int = 320):
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, template=TEMPLATE, height=height,
                      margin=dict(l=50, r=30, t=50, b=40), showlegend=True, modebar=dict(orientation="v"),
                      legend=dict(orientation="h", yanchor="top", y=-0.28, x=0))
    return fig


#: Metrics that are fractions in [0, 1] (drawn on a fixed 0-100 % axis).
FRACTION_METRICS = ("test_error", "minority_accuracy", "balanced_accuracy", "accuracy")


def _fraction_axis(fig, *, axis: str = "y"):
    """Fix an error / accuracy axis to [0, 1] shown in %."""
    upd = fig.update_yaxes if axis == "y" else fig.update_xaxes
    upd(range=[0, 1.0], tickformat=".0%", autorange=False)
    return fig


def _log_eps_axis(fig, eps: Sequence[float]):
    """Log-ε x axis with a labelled tick at every ε of the data and some room either side."""
    eps = sorted({float(e) for e in eps if e is not None and float(e) > 0})
    if not eps:
        return fig
    lo, hi = math.log10(eps[0]), math.log10(eps[-1])
    pad = max(0.15, 0.08 * (hi - lo))
    fig.update_xaxes(type="log", range=[lo - pad, hi + pad], tickvals=eps, ticktext=[f"{e:g}" for e in eps],
                     minor=dict(showgrid=False))
    return fig


# --------------------------------------------------------------------------- data page
@_owner_view
def class_counts_figure(summary: Mapping[str, Any], *, imbalance_ratio: float | None = None):
    """Grouped bars of public and private samples per class; minority classes marked only
    when the private part is imbalanced (``imbalance_ratio > 1``; a balanced split has no
    minority).

    Args:
        summary: :meth:`mixdp_core.data.splits.Split.summary` (``class_names, public,
            private, test, minority``) or :func:`mixdp_core.app_support.data.label_summary`.
        imbalance_ratio: the split's ratio; ``None`` = trust ``summary["minority"]``.
    """
    go = _go()
    names = [str(c) for c in summary["class_names"]]
    imbalanced = imbalance_ratio is None or float(imbalance_ratio) > 1.0
    minority = [bool(m) and imbalanced for m in summary["minority"]]
    labels = [f"{n} ★" if m else n for n, m in zip(names, minority)]
    fig = go.Figure()
    fig.add_bar(x=labels, y=summary["public"], name="public", marker_color=PUBLIC_COLOR, offsetgroup="public")
    # minority classes as their own trace in the private bars' slot: one trace with per-bar colours
    # showed the first bar's colour as the legend swatch ("private" drawn red-hatched when class 0
    # was a minority, and no entry for the other colour)
    priv = [None if m else v for v, m in zip(summary["private"], minority)]
    fig.add_bar(x=labels, y=priv, name="private", marker_color=PRIVATE_COLOR, offsetgroup="private")
    if any(minority):
        fig.add_bar(x=labels, y=[v if m else None for v, m in zip(summary["private"], minority)],
                    name="private, minority class ★", marker_color=MINORITY_COLOR, marker_pattern_shape="/",
                    offsetgroup="private")
    fig.update_layout(barmode="group")
    # the exact private counts are the owner's view: the title says so, since exports carry it
    # and not the page's caption (a review found the CSV / SVG / PNG unlabelled)
    title = ("Samples per class (owner's view, not private)" + (" (★ = minority class, red)" if any(minority)
                                                                 else ""))
    # class names can be numbers ("0".."9" on digits): the axis is declared categorical rather
    # than left to plotly.js's guess from the labels (a linear axis would drop the "7 ★" bars;
    # the guess was right in every case drawn in Chromium, 10 and 20 numbered classes)
    fig.update_xaxes(type="category")
    if len(names) <= 12:
        return _layout(fig, title, "class", "samples")
    # many classes: plotly labels only every k-th category (at 100 classes half the ★ marks were
    # unlabelled) and the legend below the plot covered the labels; every label is drawn,
    # turned, and the legend moves below them and the axis title
    label_px = 6 * max(len(lb) for lb in labels) + 12
    height, bottom = 420 + label_px, label_px + 75
    fig.update_xaxes(tickmode="array", tickvals=labels, ticktext=labels, tickangle=-90, tickfont=dict(size=9))
    _layout(fig, title, "class", "samples", height=height)
    fig.update_layout(margin=dict(b=bottom), legend=dict(y=-(label_px + 40) / (height - 50 - bottom)))
    return fig


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


#: Most points drawn per curve of a finished run (longer histories are thinned evenly).
MAX_POINTS = 400
#: Most points per curve while the run trains (:func:`live_line_chart`; the browser redraws
#: every live chart at every poll, so a bounded number of points keeps redraws light).
MAX_LIVE_POINTS = 150


#: The clip chart's y axis, in words: a bare "τ_t" meant nothing to a newcomer.
CLIP_AXIS = "clip norm τ_t (L2, feature units)"


def _line(df, col: str, title: str, ylabel: str, *, hline: float | None = None, hname: str = "",
          fraction: bool = False, color: str | None = None, live: bool = False):
    go = _go()
    fig = go.Figure()
    d = df[["step", col]].dropna() if len(df) and col in df else df.iloc[0:0] if len(df) else df
    cap = MAX_LIVE_POINTS if live else MAX_POINTS
    if len(d) > cap:  # thin long runs evenly (keep the last point): light redraws
        keep = np.unique(np.r_[np.linspace(0, len(d) - 1, cap).astype(int), len(d) - 1])
        d = d.iloc[keep]
    if len(d):
        fig.add_trace(go.Scatter(x=d["step"], y=d[col], mode="lines" if live and len(d) > 1 else "lines+markers",
                                 name=ylabel, marker=dict(size=4, color=color), line=dict(color=color)))
    if hline is not None:
        fig.add_trace(go.Scatter(x=[0, _total(df) or 1], y=[hline, hline], mode="lines", name=hname,
                                 line=dict(dash="dash", color=BUDGET_COLOR)))
    total = _total(df)
    if total:
        fig.update_xaxes(range=[0, float(total) * 1.02])
    if fraction:
        _fraction_axis(fig)
    else:
        fig.update_yaxes(rangemode="tozero")
    if not len(d):
        fig.add_annotation(text="waiting for the first record…", showarrow=False, x=0.5, y=0.5,
                           xref="paper", yref="paper")
    return _layout(fig, title, "step", ylabel, height=300)


def _total(df) -> float | None:
    if len(df) and "total_steps" in df and df["total_steps"].notna().any():
        return float(df["total_steps"].dropna().max())
    return None


def is_one_shot(steps: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the run is a one-shot method (at most one step: prototypes, paragon...)."""
    total = max((int(s.get("total_steps") or 0) for s in steps), default=0)
    return bool(steps) and total <= 1 and max(int(s.get("step") or 0) for s in steps) <= 1


def live_figures(steps: Sequence[Mapping[str, Any]], *, target_epsilon: float | None = None,
                 running: bool = False, final: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Figures of a running (or finished) run, only for quantities the method has.

    Keys (present only when the run records the quantity, except that a running run always
    gets the test-error chart, empty until its first test error): ``test_error`` (fixed 0-100 % axis), ``epsilon`` (ε spent
    with the target ε line), ``minority`` (minority-class accuracy, 0-100 %) and ``clip``
    (clip threshold τ_t). One-shot methods (a single step) get none: a curve of one point
    says nothing; their final metrics say it all.

    Args:
        steps: the run's step records in order.
        target_epsilon: drawn as the budget line on the ε chart (``None``: non-private).
        running: the run is still going (draw an empty test-error chart while waiting).
        final: a finished run's metrics: the released model's test error and minority-class
            accuracy end their curves as a marked last point (the curves are the iterates'; the
            guard or the update's shrinkage may release another model, and the minority curve
            stopped at the public start's 82.1 % beside a final 78.3 %).
    """
    if is_one_shot(steps):
        return {}
    df = steps_frame(steps)
    out: dict[str, Any] = {}

    def has(col: str) -> bool:
        return len(df) > 0 and col in df and df[col].notna().any()

    # While running, the test-error chart is always there (empty at first: a run's first
    # record is its noisy-count release, with no test error yet), so the charts keep their
    # places between live redraws instead of shifting (and re-mounting) when it appears.
    if has("test_error") or running:
        out["test_error"] = _line(df, "test_error", "Test error vs step", "test error", fraction=True, live=running)
    if has("epsilon_spent"):
        out["epsilon"] = fig = _line(df, "epsilon_spent", "ε spent vs step", "ε spent", hline=target_epsilon,
                                     hname="target ε", live=running)
        first = df.iloc[0]
        n_count = first.get("extra.count_releases") if "extra.count_releases" in df else None
        if n_count is not None and np.isfinite(n_count) and n_count > 1 and np.isfinite(first["epsilon_spent"]):
            # the first record is the noisy count / class histogram, charged as that many of the
            # run's releases: the curve began at step 3,019 with 37 % of ε spent and no word why
            fig.add_scatter(x=[0, float(first["step"])], y=[0.0, float(first["epsilon_spent"])], mode="lines+markers",
                            line=dict(dash="dot", color="#7f7f7f"), marker=dict(size=5, color="#7f7f7f"),
                            name=f"noisy count / class histogram ({int(n_count):,} releases' worth)")
    if has("extra.minority_accuracy"):
        out["minority"] = _line(df, "extra.minority_accuracy", "Minority-class accuracy vs step",
                                "minority-class accuracy", fraction=True, color=MINORITY_COLOR, live=running)
    if has("clip_norm"):
        out["clip"] = _line(df, "clip_norm", "Clip threshold τ_t vs step", CLIP_AXIS, live=running)
    if has("extra.subspace_error_public"):
        out["subspace"] = subspace_figure(df)
    last = _total(df) or (float(df["step"].max()) if len(df) and "step" in df else None)
    for key, metric in (("test_error", "test_error"), ("minority", "minority_accuracy")):
        v = (final or {}).get(metric)
        if key in out and v is not None and last is not None and math.isfinite(float(v)):
            out[key].add_scatter(x=[last], y=[float(v)], mode="markers", name="released model (final metrics)",
                                 marker=dict(symbol="star", size=12, color=BUDGET_COLOR))
    return out


#: AdaMix Fig. 6 on the run view (owner's view: it reads the private gradients before noise).
SUBSPACE_TITLE = "Subspace reconstruction error vs step (owner's view: private gradients before noise)"
SUBSPACE_Y = "relative reconstruction error ‖S − PS‖/‖S‖"
SUBSPACE_NAMES = ("public-gradient subspace (AdaMix's projection)", "random subspace of the same dimension")
SUBSPACE_RANDOM_COLOR = "#ff7f0e"


@_owner_view
def subspace_figure(df):
    """Plotly chart of AdaMix Fig. 6 from a run's step frame (:func:`steps_frame`): the relative
    reconstruction error of the clipped private gradient sum on the public subspace and on a
    random one of the same dimension, vs step (0-100 % axis)."""
    go = _go()
    fig = go.Figure()
    for col, name, color in (("extra.subspace_error_public", SUBSPACE_NAMES[0], PUBLIC_COLOR),
                             ("extra.subspace_error_random", SUBSPACE_NAMES[1], SUBSPACE_RANDOM_COLOR)):
        d = df[["step", col]].dropna() if col in df else df.iloc[0:0]
        fig.add_trace(go.Scatter(x=d["step"], y=d[col], mode="lines+markers", name=name,
                                 marker=dict(size=4, color=color), line=dict(color=color)))
    total = _total(df)
    if total:
        fig.update_xaxes(range=[0, float(total) * 1.02])
    _fraction_axis(fig)
    return _layout(fig, SUBSPACE_TITLE, "step", SUBSPACE_Y, height=320)


# --------------------------------------------------------------------------- light live charts
# While a run trains its charts are redrawn several times a second. Plotly charts were too
# heavy for that (measured on a loaded 2-core machine: 0.3 s of server time per redraw to
# build validated figures, and in the browser every changed plotly chart is mounted afresh,
# about 1 s of main-thread work per redraw of four charts, so redraws came seconds apart).
# The live charts are therefore small Vega-Lite specs that stay the same for the whole run
# (titles, fixed axes, colours) with the changing points as data: Streamlit then only swaps
# the data of the chart already drawn instead of drawing it anew. Each chart marks its newest
# point (its SVG label carries the step, which the browser test reads). The finished run is
# drawn with the full plotly charts and their exports (:func:`live_figures`).

#: Vega-Lite options of the live charts: SVG (a few hundred marks; text readable in the page)
#: and no action menu.
LIVE_EMBED = {"renderer": "svg", "actions": False}
#: Height in pixels of a live chart with its title and axes (Streamlit fits the spec into it),
#: that of the finished run's charts, so that the page does not jump when the run ends.
LIVE_HEIGHT = 300


def thin(x: np.ndarray, y: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``cap`` (≥ 2) points evenly spread over the history, always keeping the first
    and the last (the newest step is what a live chart is watched for)."""
    if len(x) <= cap:
        return x, y
    keep = np.unique(np.r_[np.linspace(0, len(x) - 1, cap).astype(int), len(x) - 1])
    return x[keep], y[keep]


def live_line_chart(x: np.ndarray, y: np.ndarray, title: str, ylabel: str, *, total: float | None,
                    hline: float | None = None, hname: str = "", fraction: bool = False,
                    color: str | None = None, name: str | None = None,
                    more: Sequence[tuple[np.ndarray, np.ndarray, str, str]] = ()) -> tuple[dict[str, Any], Any]:
    """Vega-Lite spec and data of one live curve (same title and axes as :func:`_line`),
    thinned to :data:`MAX_LIVE_POINTS` points, the newest one marked.

    The spec depends only on the run (title, the planned number of steps, the target), never
    on the points, so successive redraws only replace the data.

    Args:
        x: steps of the records carrying the quantity; y: its values (same length).
        total: planned number of steps (fixes the x axis to the whole run), or ``None``.
        hline: a dashed reference line (e.g. the target ε) named ``hname``.
        fraction: the quantity is a fraction: fixed 0-100 % axis.
        name: the curve's legend name (default ``ylabel``).
        more: further solid curves ``(x, y, name, color)`` on the same axes.

    Returns:
        ``(spec, frame)``: the frame has columns ``step, value, series, newest``.
    """
    import pandas as pd

    x, y = thin(np.asarray(x, dtype=float), np.asarray(y, dtype=float), MAX_LIVE_POINTS)
    newest = np.zeros(len(x), dtype=bool)
    newest[-1:] = True
    frame = pd.DataFrame({"step": x, "value": y, "series": name or ylabel, "newest": newest})
    names, colors, dashes = [name or ylabel], [color or PUBLIC_COLOR], [[1, 0]]
    for mx, my, mname, mcolor in more:
        mx, my = thin(np.asarray(mx, dtype=float), np.asarray(my, dtype=float), MAX_LIVE_POINTS)
        frame = pd.concat([frame, pd.DataFrame({"step": mx, "value": my, "series": mname, "newest": False})],
                          ignore_index=True)
        names.append(mname), colors.append(mcolor), dashes.append([1, 0])
    if hline is not None:
        frame = pd.concat([frame, pd.DataFrame({"step": [0.0, float(total or 1)], "value": [hline, hline],
                                                "series": hname, "newest": False})], ignore_index=True)
        names.append(hname), colors.append(BUDGET_COLOR), dashes.append([6, 4])
    xscale: dict[str, Any] = {"domain": [0, float(total) * 1.02]} if total else {}
    yscale: dict[str, Any] = {"domain": [0, 1]} if fraction else {"zero": True}
    if hline is not None and not fraction:
        yscale = {"domain": [0, float(hline) * 1.1]}
    yaxis: dict[str, Any] = {"format": ".0%"} if fraction else {}
    spec = {
        "title": title, "height": LIVE_HEIGHT, "usermeta": {"embedOptions": LIVE_EMBED},
        "encoding": {
            "x": {"field": "step", "type": "quantitative", "title": "step", "scale": xscale},
            "y": {"field": "value", "type": "quantitative", "title": ylabel, "scale": yscale, "axis": yaxis},
        },
        "layer": [
            {"mark": {"type": "line", "clip": True},
             "encoding": {"color": {"field": "series", "type": "nominal", "title": None,
                                    "scale": {"domain": names, "range": colors},
                                    # a legend always, also for a single line: a line must say what it is
                                    "legend": {"orient": "bottom"}},
                          "strokeDash": {"field": "series", "type": "nominal", "legend": None,
                                         "scale": {"domain": names, "range": dashes}}}},
            {"transform": [{"filter": "datum.newest"}],
             "mark": {"type": "point", "filled": True, "size": 45, "color": color or PUBLIC_COLOR}},
        ],
    }
    return spec, frame


def live_charts(series: Any, *, target_epsilon: float | None = None) -> dict[str, tuple[dict[str, Any], Any]]:
    """Vega-Lite charts of a running run (the live counterpart of :func:`live_figures`: same
    keys and titles; the test-error chart is always there, empty until the first test error).

    Args:
        series: the run's :class:`~mixdp_core.app_support.live.RunSeries`.
        target_epsilon: drawn as the budget line on the ε chart (``None``: non-private).

    Returns:
        name → ``(spec, frame)`` (see :func:`live_line_chart`).
    """
    if series.one_shot():
        return {}
    total = series.total_steps
    out = {"test_error": live_line_chart(*series.arrays("test_error"), "Test error vs step", "test error",
                                         total=total, fraction=True)}
    if series.has("epsilon"):
        out["epsilon"] = live_line_chart(*series.arrays("epsilon"), "ε spent vs step", "ε spent", total=total,
                                         hline=target_epsilon, hname="target ε")
    if series.has("minority"):
        out["minority"] = live_line_chart(*series.arrays("minority"), "Minority-class accuracy vs step",
                                          "minority-class accuracy", total=total, fraction=True,
                                          color=MINORITY_COLOR)
    if series.has("clip"):
        out["clip"] = live_line_chart(*series.arrays("clip"), "Clip threshold τ_t vs step", CLIP_AXIS, total=total)
    if series.has("subspace_public"):
        out["subspace"] = live_line_chart(
            *series.arrays("subspace_public"), SUBSPACE_TITLE, SUBSPACE_Y, total=total, fraction=True,
            name=SUBSPACE_NAMES[0], color=PUBLIC_COLOR,
            more=[(*series.arrays("subspace_random"), SUBSPACE_NAMES[1], SUBSPACE_RANDOM_COLOR)])
    return out


def live_pdp_chart(eps_i: np.ndarray, target_epsilon: float | None, *, step: int | None = None,
                   total_steps: int | None = None, bins: int = 40) -> tuple[dict[str, Any], Any]:
    """Vega-Lite spec and data of the per-instance ε histogram while the run trains (the live
    counterpart of :func:`pdp_hist_figure`), binned here (``bins`` bars) rather than shipping
    every sample's ε at each redraw. The steps it covers are drawn from the data (a label in
    the chart), so that the spec stays the same while the histogram grows.

    Returns:
        ``(spec, frame)``: bars ``lo, hi, count`` and one ``label`` row.
    """
    import pandas as pd

    e = np.asarray(eps_i, dtype=float)
    top = max(float(target_epsilon or 0.0), float(e.max()) if e.size else 0.0) or 1.0
    counts, edges = np.histogram(e, bins=bins, range=(0.0, top))
    label = "" if step is None else f"steps 1–{step}" + (f" of {total_steps}" if total_steps else "")
    frame = pd.DataFrame({"lo": edges[:-1], "hi": edges[1:], "count": counts.astype(float), "label": "",
                          "series": "private samples (εᵢ)"})
    frame = pd.concat([frame, pd.DataFrame({"lo": [np.nan], "hi": [np.nan], "count": [np.nan], "label": [label],
                                            "series": [""]})], ignore_index=True)
    # one colour scale for the bars and the budget rule: the legend names both
    names, colors = ["private samples (εᵢ)"], [PRIVATE_COLOR]
    if target_epsilon is not None:
        names, colors = names + ["target ε"], colors + [BUDGET_COLOR]
    color = {"field": "series", "type": "nominal", "scale": {"domain": names, "range": colors},
             "legend": {"orient": "bottom", "title": None}}
    layers: list[dict[str, Any]] = [
        {"transform": [{"filter": "datum.label == ''"}],
         "mark": {"type": "bar"},
         "encoding": {"x": {"field": "lo", "type": "quantitative", "title": "εᵢ (owner's view, not private)",
                            "scale": {"domain": [0, top * 1.05]}},
                      "x2": {"field": "hi"},
                      "y": {"field": "count", "type": "quantitative", "title": "private samples"},
                      "y2": {"datum": 0},
                      "color": color}},
        {"transform": [{"filter": "datum.label != ''"}],
         "mark": {"type": "text", "align": "right", "baseline": "top", "dx": -4, "dy": 4, "fontSize": 12},
         "encoding": {"text": {"field": "label"}, "x": {"value": "width"}, "y": {"value": 0}}},
    ]
    if target_epsilon is not None:
        layers.insert(1, {"data": {"values": [{"series": "target ε"}]},  # one rule, not one per row
                          "mark": {"type": "rule", "strokeDash": [6, 4]},
                          "encoding": {"x": {"datum": float(target_epsilon), "type": "quantitative"},
                                       "color": color}})
    spec = {"title": "Histogram of per-instance ε · live", "height": LIVE_HEIGHT,
            "usermeta": {"embedOptions": LIVE_EMBED}, "layer": layers}
    return spec, frame


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

    # a method that never reads the private data loses nothing in every unit (the table said
    # ε 0 beside μ ∞ and ρ ∞ for Only-Public)
    reads_none = not private and (reads_no_private(str(metrics.get("method"))) or metrics.get("epsilon") == 0.0)
    zero = "0" if reads_none else None
    rows = [
        {"notion": "(ε, δ)-DP: ε", "value": zero or fmt(metrics.get("epsilon"), inf_if_none=not private)},
        # a non-private reference has no δ (its stored δ is the target it ignored)
        {"notion": "(ε, δ)-DP: δ", "value": zero or (fmt(metrics.get("delta")) if private else "—")},
        {"notion": "μ-GDP: μ", "value": zero or fmt(metrics.get("mu"), inf_if_none=not private)},
        {"notion": "ρ-zCDP: ρ", "value": zero or fmt(metrics.get("rho"), inf_if_none=not private)},
    ]
    if p.get("pure_epsilon") is not None:
        rows.append({"notion": "pure ε-DP: ε", "value": fmt(p.get("pure_epsilon"))})
    if p.get("accountant"):
        rows.append({"notion": "accountant", "value": str(p.get("accountant"))})
    if metrics.get("epsilon_rdp") is not None:
        rows.append({"notion": "ε by RDP (looser, for comparison)", "value": fmt(metrics.get("epsilon_rdp"))})
    if p.get("mechanism"):
        rows.append({"notion": "mechanism", "value": str(p.get("mechanism"))})
    if private:
        rows.append({"notion": "neighbouring relation", "value": "replace-one (not comparable with add/remove)"
                     if "replace-one" in str(p.get("mechanism", "")) else "add/remove one sample"})
    if not private:
        rows.append({"notion": "note", "value": "private data never read: privacy loss 0" if reads_none
                     else "non-private method: no DP guarantee (ε = ∞)"})
    return rows


#: The one unit of the Performance Boost everywhere in the app (a multiple, as in the paper).
BOOST_HELP = ("AdaMix paper's Performance Boost, PB = (error of Only-Public − error of paragon) / (error of this "
              "run − error of paragon), on the same split: 1× = no better than Only-Public (which reads no private "
              "data), higher is better, ∞ = as good as the non-private paragon, between 0 and 1× = worse than "
              "Only-Public; n/a where an error is below the paragon's (the ratio then has no meaning).")


def release_caption(metrics: Mapping[str, Any]) -> str | None:
    """What an AdaMix / NGD run released of its private phase, in words: the share ``s`` of the
    private update kept (``update_shrinkage``, post-processing; under imbalance whether the public
    labels' check rejected the noise rule's share, ``update_check_rejected``), or the weights ``(u, v)`` of its
    two-iterate combination (``update_combination``), and the public-start guard's outcome (one
    accounted noisy count). ``None`` for a run with none of them."""
    parts = []
    s = metrics.get("update_shrinkage")
    uv = metrics.get("update_combination")
    checked = metrics.get("update_check_rejected")
    if s is not None and checked:
        parts.append(f"private update kept: {100 * float(s):.0f} % (the noise rule's share predicted the public "
                     "labels worse than the public start, so the share they predict best was kept: "
                     "update_shrinkage, post-processing, no privacy cost)")
    elif s is not None:
        parts.append(f"private update kept: {100 * float(s):.0f} % (the rest was estimated to be mostly "
                     "noise" + ("; the public labels confirmed it" if checked is False else "")
                     + ": update_shrinkage, post-processing, no privacy cost)")
    elif uv is not None:
        v = float(uv[1])
        parts.append(f"private update kept: {float(uv[0]):.2f} × the averaged update {'−' if v < 0 else '+'} "
                     f"{abs(v):.2f} × the last iterate's (weights estimated from the public rows to keep the signal and drop the "
                     "noise: update_shrinkage, post-processing, no privacy cost)")
    g = metrics.get("guard_released_private")
    if g is not None:
        parts.append("public-start guard: released the private model" if g else
                     "public-start guard: kept the public start (the private phase did not pass its noisy check)")
    return " · ".join(parts) if parts else None


def _auc_with_interval(metrics: Mapping[str, Any]) -> str:
    """The attack AUC with its 95 % half-width over the scored rows (Hanley & McNeil), where
    the run stored how many rows per side were scored: an estimate, shown as one."""
    from ..evaluation.mia import auc_standard_error

    a, n = metrics.get("mia_auc"), metrics.get("mia_n_per_side")
    if a is None:
        return "—"
    if not n:
        return f"{float(a):.3f}"
    return f"{float(a):.3f} ± {1.96 * auc_standard_error(float(a), int(n), int(n)):.3f}"


def metric_cards(metrics: Mapping[str, Any], *, owner: bool = True) -> list[tuple[str, str]]:
    """``(label, value)`` pairs for the final metrics of a run (no minority-class accuracy
    where the split has no minority class; no attack AUC with ``owner=False``)."""

    def num(v: Any) -> str:
        return "—" if v is None else f"{float(v):.3f}"

    cards = [
        ("test error", _pct(metrics.get("test_error"))),
        ("balanced accuracy", _pct(metrics.get("balanced_accuracy"))),
        ("minority-class accuracy", _pct(metrics.get("minority_accuracy"))),
        (OWNER_AUC_LABEL, _auc_with_interval(metrics)),
    ]
    # A balanced split (imbalance ratio 1) has no minority class: no card for it. Older runs
    # stored a value for a quarter of near-equal classes; their ratio tells them apart.
    ir = metrics.get("imbalance_ratio")
    if metrics.get("minority_accuracy") is None or (ir is not None and float(ir) <= 1.0):
        cards = [c for c in cards if c[0] != "minority-class accuracy"]
    if not owner:
        cards = [c for c in cards if c[0] != OWNER_AUC_LABEL]
    from ..runs.owner_view import reads_private_in_clear

    if reads_private_in_clear(metrics):  # the paragon's outcomes: the data owner's only, labelled so
        if not owner:
            return []
        cards = [(c[0] if c[0] == OWNER_AUC_LABEL else f"{c[0]} (owner's view, not private)", c[1]) for c in cards]
    return cards


def test_error_interval_caption(metrics: Mapping[str, Any]) -> str | None:
    """One line giving a single run's test error its uncertainty: the 95 % Wilson interval over
    the test samples (the spread of the test set alone; another split or noise draw moves the
    error more, which only several seeds show). ``None`` without a test error or test count."""
    p, n = metrics.get("test_error"), metrics.get("n_test")
    if p is None or not n:
        return None
    p, n = float(p), int(n)
    lo, hi = _wilson(p, n)
    return (f"Test error {percent(p)}: 95 % interval {100 * lo:.1f}–{100 * hi:.1f} % "
            f"over the {n} test samples. That is the test set's spread alone; one training is one split and one "
            "noise draw, so differences of a few points between single runs can be chance (on the Compare page, "
            "choose several seeds).")


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
        sides = [int(x["mia_n_per_side"]) for x in ms if x.get("mia_n_per_side")]
        row["mia_n_per_side"] = min(sides) if sides else None  # the attack's scored rows (one seed's interval)
        tests = [int(x["n_test"]) for x in ms if x.get("n_test")]
        row["n_test"] = min(tests) if tests else None  # the test rows (one seed's test-error interval)
        rows.append(row)
    rows.sort(key=lambda r: (r["method"], -1.0 if r["epsilon"] is None else r["epsilon"]))
    return rows


#: Non-private reference methods drawn as horizontal lines on the ε axis.
REFERENCE_METHODS = ("paragon", "only_public", "zero_shot")


def compare_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Compare's table in the units of its charts: errors and accuracies in %, ε "0" for a
    method that reads no private data and "∞" for a non-private one, "—" where a value does
    not apply (minority accuracy at imbalance ratio 1)."""

    out = []
    for r in rows:
        eps = r.get("epsilon")
        out.append({"method": r["method"],
                    "ε": (f"{eps:g}" if eps is not None else "0" if reads_no_private(r["method"]) else "∞"),
                    "seeds": r["n"], "test error": _pct(r.get("test_error_mean")),
                    "± std": _pct(r.get("test_error_std")) if r.get("n", 1) > 1 else "—",
                    OWNER_AUC_LABEL: "—" if r.get("mia_auc_mean") is None else (
                        f"{float(r['mia_auc_mean']):.3f}" + (f" ± {float(r['mia_auc_std']):.3f} (std, seeds)"  # as the chart
                                                              if r.get("n", 1) > 1 and r.get("mia_auc_std") is not None
                                                              else _auc_rows_interval(r))),
                    "minority acc.": _pct(r.get("minority_accuracy_mean"))})
    return out


def _auc_rows_half_width(row: Mapping[str, Any]) -> float | None:
    """One seed's 95 % AUC half-width over its scored rows, or ``None`` where they were not recorded."""
    from ..evaluation.mia import auc_standard_error

    n = row.get("mia_n_per_side")
    if not n or row.get("mia_auc_mean") is None:
        return None
    return 1.96 * auc_standard_error(float(row["mia_auc_mean"]), int(n), int(n))


def _auc_rows_interval(row: Mapping[str, Any]) -> str:
    """One seed's AUC interval over its scored rows (" ± h (95 %, rows)"), or "" where the rows
    were not recorded: at one seed the table showed 0.483 beside 0.515 with no uncertainty."""
    h = _auc_rows_half_width(row)
    return "" if h is None else f" ± {h:.3f} (95 %, rows)"


def _wilson(p: float, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The 95 % Wilson interval of a proportion ``p`` over ``n`` trials, clipped to [0, 1] (no
    "-0.0 %" at p = 0 from rounding)."""
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _bars(r: Mapping[str, Any], metric: str) -> tuple[float, float]:
    """``(above, below)`` of a point's error bar: ± the std over seeds where there are several;
    at one seed the 95 % interval of that one training where it is known (the test error's
    Wilson interval over the test rows, the AUC's over the scored rows), else 0 (a review found
    every one-seed bar at 0 beside a table that printed the AUC's interval)."""
    mean = r.get(f"{metric}_mean")
    if int(r.get("n", 1) or 1) > 1 or mean is None:
        sd = float(r.get(f"{metric}_std") or 0.0)
        return sd, sd
    if metric == "test_error" and r.get("n_test"):
        lo, hi = _wilson(float(mean), int(r["n_test"]))
        return hi - float(mean), float(mean) - lo
    h = _auc_rows_half_width(r) if metric == "mia_auc" else None
    return (h, h) if h is not None else (0.0, 0.0)


def _one_seed_note(rows: Sequence[Mapping[str, Any]], metric: str) -> str:
    """The caption's words for one training per point: what its bars are, if any."""
    if metric == "test_error" and any(r.get("n_test") for r in rows):
        return "one training per point; bars: 95 % interval over the test rows"
    if metric == "mia_auc" and any(r.get("mia_n_per_side") for r in rows):
        return "one training per point; bars: 95 % interval over the scored rows"
    return "one training per point (no spread to show: run several seeds)"


def metric_vs_epsilon(rows: Sequence[Mapping[str, Any]], metric: str, title: str, ylabel: str):
    """``metric`` (mean ± std over seeds as error bars) vs ε on a log axis with a tick at every
    ε; non-private methods (paragon, only-public, ...) as dashed reference lines with a
    ±std band; errors and accuracies on a fixed 0-100 % axis; a legend always."""
    go = _go()
    fig = go.Figure()
    eps_all = sorted({float(r["epsilon"]) for r in rows if r.get("epsilon") is not None
                      and r.get(f"{metric}_mean") is not None})
    x_ref = [eps_all[0] / 1.5, eps_all[-1] * 1.5] if eps_all else [0.1, 10.0]
    curves: dict[str, list[Mapping[str, Any]]] = {}
    # fractions (errors, accuracies) on a % axis; an AUC stays a number
    yfmt = ".3f" if metric == "mia_auc" else ".1%"
    for r in rows:
        if r.get(f"{metric}_mean") is None:
            continue
        if r.get("epsilon") is None:
            name, color = _style(r["method"])
            mean, std = float(r[f"{metric}_mean"]), float(r.get(f"{metric}_std") or 0.0)
            label = (f"{name} (ε = 0)" if reads_no_private(r["method"]) else
                     name if "non-private" in name.lower() else f"{name} (non-private)")
            if std > 0:
                fig.add_trace(go.Scatter(x=x_ref + x_ref[::-1], y=[mean + std] * 2 + [mean - std] * 2,
                                         fill="toself", line=dict(width=0), fillcolor=color or "#999999",
                                         opacity=0.15, hoverinfo="skip", name=f"{name}: ± std over seeds",
                                         legendgroup=label))
            fig.add_trace(go.Scatter(x=x_ref, y=[mean, mean], mode="lines", name=label, legendgroup=label,
                                     line=dict(color=color, dash="dash", width=2),
                                     hovertemplate=f"{label}: %{{y:{yfmt}}}<extra></extra>"))
        else:
            curves.setdefault(r["method"], []).append(r)
    for m, rs in curves.items():
        rs = sorted(rs, key=lambda r: float(r["epsilon"]))
        name, color = _style(m)
        bars = [_bars(r, metric) for r in rs]
        fig.add_trace(go.Scatter(
            x=[float(r["epsilon"]) for r in rs], y=[float(r[f"{metric}_mean"]) for r in rs],
            error_y=dict(type="data", array=[b[0] for b in bars], arrayminus=[b[1] for b in bars], visible=True),
            mode="lines+markers", name=name, customdata=[int(r.get("n", 1)) for r in rs],
            hovertemplate=f"ε=%{{x:g}}: %{{y:{yfmt}}} (mean over %{{customdata}} seed(s))",
            marker=dict(size=8, color=color), line=dict(color=color)))
    _layout(fig, title, "ε (log scale, δ fixed)", ylabel, height=380)
    # the caption says what a point is: a single training has no seed spread to show
    seeds = max((int(r.get("n", 1) or 1) for r in rows), default=1)
    has_ref = any(getattr(t.line, "dash", None) == "dash" for t in fig.data if getattr(t, "line", None) is not None)
    single = any(int(r.get("n", 1) or 1) == 1 for r in rows if r.get("epsilon") is not None
                 and r.get(f"{metric}_mean") is not None)
    note = (("mean ± std over seeds" + (" (one-seed points: 95 % interval over the rows)" if single else "")
             if seeds > 1 else _one_seed_note(rows, metric))
            + (" · dashed: reference methods (flat in ε)" if has_ref else ""))
    _legend_below(fig, title, note)
    _log_eps_axis(fig, eps_all)
    if metric in FRACTION_METRICS:
        _fraction_axis(fig)
    elif metric == "mia_auc":
        fig.update_yaxes(range=[0, 1.0], autorange=False)
    if not fig.data:
        fig.add_annotation(text="no completed runs", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


@_owner_view
def auc_vs_error_figure(rows: Sequence[Mapping[str, Any]]):
    """Membership-attack AUC vs test error, one marker per (method, ε), ε annotated
    (AdaMix Fig. 1 right). Non-private references are labelled ε = ∞, Only-Public and zero-shot
    (which never read the private rows) ε = 0."""
    go = _go()
    fig = go.Figure()
    by_method: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("test_error_mean") is None or r.get("mia_auc_mean") is None:
            continue
        by_method.setdefault(r["method"], []).append(r)
    positions = ("top center", "bottom center", "middle right", "middle left")
    for m in by_method:
        by_method[m] = sorted(by_method[m], key=lambda r: math.inf if r["epsilon"] is None else r["epsilon"])
    labels = _merged_point_labels(by_method)
    for k, (m, rs) in enumerate(by_method.items()):
        name, color = _style(m)
        # labels alternate above and below along a curve (its points are close in x), and
        # each method starts on another side: neighbours' labels no longer overlap
        pos = [positions[(k + i) % 2] for i in range(len(rs))]
        bx, by = [_bars(r, "test_error") for r in rs], [_bars(r, "mia_auc") for r in rs]
        fig.add_trace(go.Scatter(
            x=[r["test_error_mean"] for r in rs], y=[r["mia_auc_mean"] for r in rs],
            error_x=dict(type="data", array=[b[0] for b in bx], arrayminus=[b[1] for b in bx], visible=True,
                         thickness=1),
            error_y=dict(type="data", array=[b[0] for b in by], arrayminus=[b[1] for b in by], visible=True,
                         thickness=1),
            mode="markers+text+lines" if len(rs) > 1 else "markers+text", name=name,
            # only a curve's two ends carry their ε as text (every point has it on hover): the
            # middle points of several methods crowd one corner and their labels overlapped
            text=labels[m],
            hovertext=[_reference_eps_label(m) if r["epsilon"] is None else f"ε={r['epsilon']:g}" for r in rs],
            hovertemplate="%{hovertext}: test error %{x:.1%}, AUC %{y:.3f}<extra>" + name + "</extra>",
            textposition=pos, marker=dict(size=9, color=color), line=dict(color=color, width=1)))
    fig.add_trace(go.Scatter(x=[0, 1], y=[0.5, 0.5], mode="lines", name="random guess (AUC 0.5)",
                             line=dict(dash="dot", color="#7f7f7f")))
    title = "Attack AUC vs test error (owner only, not covered by ε)"
    _layout(fig, title, "test error", "membership-attack AUC", height=380)
    seeds = max((int(r.get("n", 1) or 1) for r in rows), default=1)
    _legend_below(fig, title, "error bars: ± std over seeds (both axes)" if seeds > 1 else
                  "one training per point; bars: 95 % intervals over the test rows (x) and the scored rows (y)")
    _fraction_axis(fig, axis="x")
    # the points' own span with room for their labels (0-100 % left every point in one corner
    # when the errors were 4-26 %), never past -6 % / 106 %
    # the error bars included: a seed spread wider than the pad was cut at the edge
    spans = [(float(r["test_error_mean"]) - _bars(r, "test_error")[1],
              float(r["test_error_mean"]) + _bars(r, "test_error")[0])
             for rs in by_method.values() for r in rs]
    lo, hi = (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0.0, 1.0)
    pad = max(0.05, 0.15 * (hi - lo))
    fig.update_xaxes(range=[max(-0.06, lo - pad), min(1.06, hi + pad)])
    fig.update_yaxes(range=[0.4, 1.0], autorange=False)
    return fig


def _merged_point_labels(by_method: Mapping[str, Sequence[Mapping[str, Any]]], *, dx: float = 0.03,
                         dy: float = 0.02) -> dict[str, list[str]]:
    """The ε text of each point of :func:`auc_vs_error_figure` (``{method: [text per point]}``).

    Only a curve's two ends carry their ε (every point has it on hover): the middle points of
    several methods crowd one corner. Where labelled points of *different* methods coincide
    (within ``dx`` test error and ``dy`` AUC — e.g. AdaMix whose guard kept the public start
    sits on Only-Public's point, or a curve whose two ends meet), their labels were drawn on
    top of each other: they become one label on the first point (each part naming its method
    where there are several) and the others stay blank."""
    cands = []  # (method, index, x, y, text)
    for m, rs in by_method.items():
        for i, r in enumerate(rs):
            if i in (0, len(rs) - 1):
                cands.append((m, i, float(r["test_error_mean"]), float(r["mia_auc_mean"]),
                              _reference_eps_label(m) if r["epsilon"] is None else f"ε={r['epsilon']:g}"))
    out = {m: [""] * len(rs) for m, rs in by_method.items()}
    taken: set[int] = set()
    for a, (m, i, x, y, t) in enumerate(cands):
        if a in taken:
            continue
        group = [b for b in range(a + 1, len(cands)) if b not in taken
                 and abs(cands[b][2] - x) <= dx and abs(cands[b][3] - y) <= dy]
        taken.update(group)
        parts = [(m, t)] + [(cands[b][0], cands[b][4]) for b in group]
        if len({mm for mm, _ in parts}) == 1:
            out[m][i] = " · ".join(tt for _, tt in parts)
        else:
            out[m][i] = " · ".join(f"{_style(mm)[0]} {tt}" for mm, tt in parts)
    return out


#: Legend rows a legend below a plot takes per entry: the Compare page draws these charts at half
#: width, where about two entries ("Paragon (non-private)", "Only-Public (ε = 0)") fit in a row.
LEGEND_ENTRIES_PER_ROW = 2
#: Pixels per legend row (plotly's default 12-px legend font with its line spacing).
LEGEND_ROW_PX = 22


def _legend_below(fig: Any, title: str, note: str) -> None:
    """The legend under the x-axis title, ``note`` as the title's subtitle, and the figure as
    much taller as the legend's rows need, so the plot area keeps its height whatever the count
    of entries. A legend at the right took about half of a half-width chart's plot (Compare
    draws two charts side by side); one below at a fixed height grew with its entries and
    squashed the plot, and one placed in the plot's coordinates ran into the axis title."""
    fig.update_layout(title=dict(text=title, subtitle=dict(text=note)))
    _legend_room(fig, per_row=LEGEND_ENTRIES_PER_ROW, row_px=LEGEND_ROW_PX, margin=dict(l=50, r=30, t=75, b=55))


def _legend_room(fig: Any, *, per_row: int, row_px: int, margin: Mapping[str, int], orientation: str = "h") -> None:
    """The legend at the container's bottom (under the axis title at any height), the bottom
    margin and the figure's height grown by its rows (``per_row`` entries of ``row_px`` each):
    the plot area keeps its height whatever the number of entries."""
    n = sum(1 for t in fig.data if t.showlegend is not False and t.name)
    extra = max(1, math.ceil(n / per_row)) * int(row_px)
    fig.update_layout(height=int(fig.layout.height or 380) + extra, margin=dict(margin, b=margin["b"] + extra),
                      legend=dict(orientation=orientation, yref="container", yanchor="bottom", y=0.0, x=0,
                                  xanchor="left"))


# --------------------------------------------------------------------------- privacy audit
@_owner_view
def pdp_sorted_figure(eps_i: np.ndarray, target_epsilon: float | None):
    """Per-instance ε of every private sample, sorted (AdaMix Fig. 3 left)."""
    go = _go()
    e = np.sort(np.asarray(eps_i, dtype=float))
    fig = go.Figure(go.Scatter(x=np.arange(1, len(e) + 1), y=e, mode="lines", name="εᵢ (sorted)"))
    if target_epsilon is not None:
        fig.add_hline(y=target_epsilon, line_dash="dash", line_color=BUDGET_COLOR, annotation_text="target ε")
    return _layout(fig, "Per-instance ε, sorted", "private samples (sorted)", "εᵢ", height=340)


@_owner_view
def pdp_hist_figure(eps_i: np.ndarray, target_epsilon: float | None, *, step: int | None = None,
                    total_steps: int | None = None):
    """Histogram of per-instance ε with the target ε line (AdaMix Fig. 3 right).

    ``step``/``total_steps``: the histogram covers the first ``step`` steps (live view)."""
    go = _go()
    e = np.asarray(eps_i, dtype=float)
    fig = go.Figure(go.Histogram(x=e, nbinsx=40, name="εᵢ of the private samples", marker_color=PRIVATE_COLOR))
    if target_epsilon is not None:
        # all εᵢ within a few ulps of each other (DPPL-Mean: every row loses the whole budget) left
        # numpy no 40 finite bins ("Too many bins"): the page crashed; one bar holds them all
        top = (float(np.histogram(e, bins=40)[0].max()) if e.size and np.ptp(e) > 1e-9 * max(abs(e.max()), 1.0)
               else float(e.size) or 1.0)
        fig.add_trace(go.Scatter(x=[target_epsilon, target_epsilon], y=[0, top], mode="lines", name="target ε",
                                 line=dict(dash="dash", color=BUDGET_COLOR)))
        fig.update_xaxes(range=[0, max(float(target_epsilon), float(e.max()) if e.size else 0.0) * 1.05])
    title = "Histogram of per-instance ε"
    if step is not None:
        title += f" · step {step}" + (f"/{total_steps}" if total_steps else "")
    return _layout(fig, title, "εᵢ (owner's view, not private)", "private samples", height=300)


#: Caption of the per-layer chart of a sparse fine-tuning run (owner's view).
LAYER_CHART_CAPTION = (
    "Per trainable tensor: the noise norm added per step (σ·C·√k on its k trainable entries) over the norm "
    "of the clipped gradient sum on them (RMS over steps), log scale; above 1 the noise dominates that "
    "tensor's update (Luo et al. 2021, Fig. 3). The bar labels give the share of its entries the mask "
    "trains (Fig. 4; public: a function of the public model). Owner's view: the gradient norms are "
    "unnoised private quantities, not covered by ε."
)


@_owner_view
def layer_stats_figure(rows: Sequence[Mapping[str, Any]]):
    """Noise-to-gradient ratio per trainable tensor of a DP fine-tuning run (log y), the kept
    share as bar text; tensors with nothing trainable are left out."""
    go = _go()
    shown = [r for r in rows if r.get("noise_to_gradient")]
    names = [str(r["layer"]) for r in shown]
    ratio = [float(r["noise_to_gradient"]) for r in shown]
    text = [f"{100 * float(r.get('share_kept', 1.0)):.1f} % kept" for r in shown]
    fig = go.Figure(go.Bar(x=names, y=ratio, text=text, textposition="outside", name="noise / clipped gradient",
                           marker_color=PRIVATE_COLOR))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#7f7f7f", annotation_text="noise = signal")
    fig.update_yaxes(type="log", exponentformat="power")
    return _layout(fig, "Noise-to-gradient ratio per layer (owner's view)", "trainable tensor",
                   "noise norm / clipped-gradient norm (per step, log)", height=360)


@_owner_view
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
    """δ(ε) of the run as executed, from its μ-GDP (exact for Gaussian compositions), from its
    pure ε₀ (tight, Kairouz et al.) or, if only ρ-zCDP is known, from the zCDP conversion.
    Returns ``(eps, delta, source)`` or ``None`` when the run has none (non-private methods)."""
    from .. import accounting

    mu, rho = metrics.get("mu"), metrics.get("rho")
    eps_run = metrics.get("epsilon") or 1.0
    if eps_grid is None:
        eps_grid = np.linspace(0.0, max(3.0 * float(eps_run), 1.0), 200)
    if mu is not None and mu > 0:
        d = np.asarray(accounting.gaussian_delta(float(mu), eps_grid), dtype=float)
        return eps_grid, d, f"μ-GDP, μ = {mu:.4g}"
    pure = (metrics.get("privacy") or {}).get("pure_epsilon")
    if pure is not None and float(pure) > 0:
        # a pure ε₀-DP run (the exponential mechanism): its tight curve, δ = 0 from ε₀ on (the
        # zCDP curve of ρ = ε₀²/8 drew δ = 0.055 at ε = 2 for an ε = 2, δ = 0 mechanism);
        # where ρ is known too, the smaller of the two bounds
        d = np.asarray([accounting.pure_dp_delta(float(pure), epsilon=float(e)) for e in eps_grid], dtype=float)
        if rho is not None and rho > 0:
            d = np.minimum(d, [accounting.zcdp_to_delta(float(rho), epsilon=float(e)) for e in eps_grid])
            return eps_grid, d, f"the smaller of pure ε-DP (ε₀ = {float(pure):.4g}) and ρ-zCDP (ρ = {float(rho):.4g})"
        return eps_grid, d, f"pure ε-DP, ε₀ = {float(pure):.4g}"
    if rho is not None and rho > 0:
        d = np.asarray([accounting.zcdp_to_delta(float(rho), epsilon=float(e)) for e in eps_grid], dtype=float)
        return eps_grid, d, f"ρ-zCDP, ρ = {rho:.4g}"
    return None


#: Smallest δ drawn on δ(ε) charts: below this the curve is "zero" for any practical purpose.
DELTA_FLOOR = 1e-12


def delta_curve_figure(metrics: Mapping[str, Any]):
    """Figure of :func:`delta_curve` with the run's (ε, δ) point, or ``None``.

    The δ axis is logarithmic and clipped to ``[min(δ_run/10⁴, 10⁻⁸) ∨ 10⁻¹², 1]`` so the
    run's δ (e.g. 10⁻⁵) sits mid-chart instead of near the top of a 10⁻³¹⁰ axis."""
    go = _go()
    c = delta_curve(metrics)
    if c is None:
        return None
    eps, d, src = c
    d_run = metrics.get("delta")
    floor = max(DELTA_FLOOR, min(float(d_run) / 1e4, 1e-8)) if d_run else 1e-8
    keep = d >= floor
    fig = go.Figure(go.Scatter(x=eps[keep], y=d[keep], mode="lines", name=f"δ(ε) of this run ({src})",
                               line=dict(color=PUBLIC_COLOR, width=2)))
    if metrics.get("epsilon") is not None and d_run is not None:
        e_run = float(metrics["epsilon"])
        fig.add_trace(go.Scatter(x=[e_run], y=[float(d_run)], mode="markers+text",
                                 name=f"reported guarantee (ε = {e_run:.3g}, δ = {float(d_run):.0e})",
                                 text=[f"  ε = {e_run:.3g}, δ = {float(d_run):.0e}"], textposition="middle right",
                                 marker=dict(size=12, color="#d62728", symbol="diamond")))
    fig.update_yaxes(type="log", exponentformat="power", range=[math.log10(floor), 0.0], autorange=False)
    fig.update_xaxes(range=[0, float(eps.max())])
    return _layout(fig, "Privacy curve δ(ε) of this run", "ε", "δ (log scale)", height=360)


# --------------------------------------------------------------------------- theory
def tradeoff_figure(curves: Sequence[tuple[str, Any]], *, fpr_mark: float | None = 0.01,
                    roc: tuple[np.ndarray, np.ndarray, str] | None = None, title: str = "Best possible attack"):
    """The best membership attack a guarantee allows: TPR bound vs FPR
    (:func:`mixdp_core.accounting.max_tpr`), one curve per ``(label, report)``, with the
    random-guess diagonal, an optional measured ROC ``(fpr, tpr, label)``, and the bound at
    ``fpr_mark`` marked."""
    from ..accounting import max_tpr

    go = _go()
    fpr = np.concatenate([[0.0], np.logspace(-4, 0, 200)])
    fig = go.Figure()
    palette = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd")
    for k, (label, report) in enumerate(curves):
        tpr = np.asarray(max_tpr(report, fpr), dtype=float)
        color = palette[k % len(palette)]
        fig.add_trace(go.Scatter(x=fpr, y=tpr, mode="lines", name=label, line=dict(color=color, width=3)))
        if fpr_mark is not None:
            t = float(max_tpr(report, fpr_mark))
            fig.add_trace(go.Scatter(x=[fpr_mark], y=[t], mode="markers", showlegend=False,
                                     name=f"{label} at FPR {fpr_mark:g}", marker=dict(size=11, color=color)))
    if roc is not None:
        fig.add_trace(go.Scatter(x=roc[0], y=roc[1], mode="lines", name=roc[2], line=dict(color="#d62728")))
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="random guess",
                             line=dict(dash="dot", color="#7f7f7f")))
    fig.update_xaxes(range=[0, 1], autorange=False)
    fig.update_yaxes(range=[0, 1], autorange=False)
    return _layout(fig, title, "false positive rate (non-members flagged)", "true positive rate (members found)",
                   height=420)


# --------------------------------------------------------------------------- export
def figure_frame(fig):
    """The data of every trace of ``fig`` as a long DataFrame ``trace, x, y[, error]`` (CSV export)."""
    import pandas as pd

    parts = []
    for k, tr in enumerate(fig.data):
        if getattr(tr, "fill", None) == "toself":  # a shaded band: its curve's rows carry the spread
            continue
        x = getattr(tr, "x", None)
        y = getattr(tr, "y", None)
        if x is None and y is None:
            continue
        if tr.type == "histogram":
            vals = np.asarray(x if x is not None else y, dtype=float)
            parts.append(pd.DataFrame({"trace": tr.name or f"trace{k}", "value": vals}))
            continue
        x = list(x) if x is not None else list(range(len(y)))
        y = list(y) if y is not None else [None] * len(x)
        df = pd.DataFrame({"trace": tr.name or f"trace{k}", "x": x, "y": y})
        err = getattr(getattr(tr, "error_y", None), "array", None)
        if err is not None and len(err) == len(df):
            df["std_over_seeds"] = list(err)  # the error bar is the std of the mean's seeds
        parts.append(df)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["trace", "x", "y"])


def figure_csv(fig) -> str:
    """CSV text of :func:`figure_frame`; a chart of the owner's view (:func:`_owner_view`) starts
    with a ``#`` line holding the owner's note."""
    from ..runs.owner_view import OWNER_NOTE

    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    head = f"# {OWNER_NOTE}\n" if meta.get("owner_only") else ""
    return head + figure_frame(fig).to_csv(index=False)


def _bar_categories(bars) -> list[str]:
    """The x slots of ``bars`` (plotly bar traces) for the matplotlib export: in order of first
    appearance, or in numeric order where every x is a number (plotly's own order then; a chart
    that splits its bars over two traces, like the classroom's minority classes, was exported
    with the second trace's bars at the right end)."""
    cats = list(dict.fromkeys(str(v) for tr in bars for v in tr.x))
    try:
        return sorted(cats, key=float)
    except ValueError:
        return cats


def figure_image(fig, fmt: str = "svg") -> bytes:
    """Static image of a plotly figure (``"svg"`` or ``"png"``): plotly's own export when
    kaleido is installed, else redrawn with matplotlib from the same traces and axes."""
    try:
        return fig.to_image(format=fmt, width=900, height=int(fig.layout.height or 400), scale=2)
    except Exception:  # kaleido missing: matplotlib fallback
        pass
    import io

    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    lay = fig.layout
    mfig, ax = plt.subplots(figsize=(7.5, 0.75 * (lay.height or 400) / 100 + 1.2))
    # grouped bars side by side, as plotly draws them: one slot per offset group (traces sharing
    # one, like the private and the minority bars, share a slot); they were drawn on top of each other
    bars = [tr for tr in fig.data if tr.type == "bar"]
    groups = list(dict.fromkeys((tr.offsetgroup or f"_{i}") for i, tr in enumerate(bars)))
    slot = {id(tr): groups.index(tr.offsetgroup or f"_{i}") for i, tr in enumerate(bars)}
    cats = _bar_categories(bars)
    width = 0.8 / max(len(groups), 1)
    try:
        for tr in fig.data:
            name = tr.name or None
            color = None
            if getattr(tr, "marker", None) is not None and isinstance(tr.marker.color, str):
                color = tr.marker.color
            if getattr(tr, "line", None) is not None and isinstance(getattr(tr.line, "color", None), str):
                color = tr.line.color
            if tr.type == "histogram":
                ax.hist(np.asarray(tr.x, dtype=float), bins=40, label=name, color=color, alpha=0.8)
            elif tr.type == "bar":
                pos = np.array([cats.index(str(v)) for v in tr.x], dtype=float)
                pos += (slot[id(tr)] - (len(groups) - 1) / 2) * width
                y = np.array([np.nan if v is None else float(v) for v in tr.y])
                colors = tr.marker.color if tr.marker is not None else None
                colors = list(colors) if isinstance(colors, (list, tuple)) else color
                hatch = tr.marker.pattern.shape if tr.marker is not None and tr.marker.pattern is not None else None
                ax.bar(pos, np.nan_to_num(y), width=width, label=name, alpha=0.8, color=colors,
                       hatch=hatch if isinstance(hatch, str) and hatch else None)
                ax.set_xticks(range(len(cats)), cats)
            elif tr.type == "scatter":
                if getattr(tr, "fill", None) == "toself":
                    ax.fill(tr.x, tr.y, color=color, alpha=0.15)
                    continue
                x = np.asarray(tr.x, dtype=float)
                y = np.asarray(tr.y, dtype=float)
                mode = tr.mode or "lines"
                dash = "--" if getattr(tr.line, "dash", None) in ("dash", "dot") else "-"
                err = getattr(getattr(tr, "error_y", None), "array", None)
                fmt_s = ("o" if "markers" in mode else "") + (dash if "lines" in mode else "")
                if err is not None:
                    ax.errorbar(x, y, yerr=np.asarray(err, dtype=float), fmt=fmt_s or "o", label=name,
                                color=color, capsize=3)
                else:
                    ax.plot(x, y, fmt_s or "-", label=name, color=color)
        title = lay.title.text if lay.title and lay.title.text else ""
        ax.set_title(title)
        ax.set_xlabel(lay.xaxis.title.text or "")
        ax.set_ylabel(lay.yaxis.title.text or "")
        for axis, setter_scale, setter_lim in ((lay.xaxis, ax.set_xscale, ax.set_xlim),
                                               (lay.yaxis, ax.set_yscale, ax.set_ylim)):
            log = axis.type == "log"
            if log:
                setter_scale("log")
            if axis.range is not None:
                lo, hi = axis.range
                setter_lim((10 ** lo, 10 ** hi) if log else (lo, hi))
        if lay.yaxis.tickformat == ".0%":
            from matplotlib.ticker import PercentFormatter

            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        if lay.xaxis.tickvals is not None:
            from matplotlib.ticker import NullFormatter

            vals = list(lay.xaxis.tickvals)
            if bars and all(str(v) in cats for v in vals):  # category names: the bars' slots
                vals = [cats.index(str(v)) for v in vals]
            ax.set_xticks(vals, list(lay.xaxis.ticktext or lay.xaxis.tickvals))
            ax.xaxis.set_minor_formatter(NullFormatter())
        if lay.xaxis.tickangle is not None:  # every label drawn (many classes): as turned, and small
            ax.tick_params(axis="x", labelrotation=-float(lay.xaxis.tickangle),
                           labelsize=max(4.0, min(9.0, 600.0 / max(len(cats), 1))))
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        mfig.tight_layout()
        buf = io.BytesIO()
        mfig.savefig(buf, format=fmt, dpi=150)
        return buf.getvalue()
    finally:
        plt.close(mfig)


# --------------------------------------------------------------------------- sample images
@_owner_view
def noise_vs_separation_figure(error_norm: Sequence[float], mean_distance: float, *, epsilon: float,
                               minority: Sequence[int] = ()):
    """Classroom step 1 without images: per class, how far the published average lies from the
    true one (‖noise‖, sorted), against the median distance between two true class averages.
    ``minority``: class ids drawn as their own, hatched series (a long-tailed lesson)."""
    go = _go()
    raw = np.asarray(error_norm, dtype=float)
    order = np.argsort(raw, kind="stable")
    e = raw[order]
    mino = np.isin(order, np.asarray(list(minority), dtype=np.int64))
    x = np.arange(1, e.size + 1)
    fig = go.Figure()
    other = "‖published − true average‖ per class" if not mino.any() else "‖published − true average‖: other classes"
    fig.add_trace(go.Bar(x=x[~mino], y=e[~mino], name=other, marker_color=PRIVATE_COLOR))
    if mino.any():
        fig.add_trace(go.Bar(x=x[mino], y=e[mino], name="minority classes (the long tail's last quarter)",
                             marker_color=MINORITY_COLOR, marker_pattern_shape="/"))
    fig.add_hline(y=float(mean_distance), line=dict(color="black", dash="dash", width=3),
                  annotation_text="median distance between two true class averages", annotation_position="top left")
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=dict(color="black", dash="dash", width=3),
                             name="median distance between two true class averages"))
    # the true averages are the private rows' own: the distances are the owner's view (unlabelled before)
    return _layout(fig, f"How far the noise moves each class average at ε = {epsilon:g} (owner's view, not private)",
                   "classes (sorted)",
                   "distance (feature units)", height=420)


def sample_grid_figure(images: Mapping[str, Sequence[np.ndarray]], *, title: str = "Public samples per class"):
    """A grid of small images: one column per class, one row per sample (grayscale or RGB in [0, 1])."""
    from plotly.subplots import make_subplots

    go = _go()
    names = list(images)
    rows = max((len(v) for v in images.values()), default=0)
    if not names or rows == 0:
        return None
    fig = make_subplots(rows=rows, cols=len(names), column_titles=names, horizontal_spacing=0.01,
                        vertical_spacing=0.01)
    for j, n in enumerate(names):
        for i, img in enumerate(images[n]):
            a = np.asarray(img, dtype=float)
            if a.ndim == 2:
                fig.add_trace(go.Heatmap(z=a[::-1], colorscale="gray_r", showscale=False, hoverinfo="skip",
                                         name=n), row=i + 1, col=j + 1)
            else:
                fig.add_trace(go.Image(z=(255 * a).astype(np.uint8), name=n), row=i + 1, col=j + 1)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(title=title, template=TEMPLATE, height=70 * rows + 90, showlegend=False,
                      margin=dict(l=10, r=10, t=70, b=10))
    return fig


#: Colours of the attacks drawn against the theory curve (audit page, classroom mode).
ATTACK_COLORS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")


@_owner_view
def theory_vs_attack_figure(report: Any, rocs: Mapping[str, tuple[np.ndarray, np.ndarray]], *,
                            log: bool = True, fpr_floor: float = 1e-4, large: bool = True,
                            counts: Mapping[str, tuple[int, int]] | None = None, confidence: float = 0.95):
    """The best trade-off any attack can reach under the guarantee, with measured ROCs on top.

    Args:
        report: the run's privacy report (``epsilon``, ``delta``, optional ``mu``), or ``None``
            for a non-private run (then the bound is TPR = 1).
        rocs: ``{attack name: (fpr, tpr)}`` measured curves.
        log: log–log axes (Carlini et al. 2022 convention, to show the low-FPR regime); ``False``
            gives linear axes.
        fpr_floor: smallest FPR drawn on log axes.
        large: large fonts (classroom projection).
        counts: ``{attack name: (non-members, members)}`` behind each curve; where given, the
            curve is drawn with its pointwise Clopper–Pearson ``confidence`` band
            (:func:`mixdp_core.evaluation.audit.stats.roc_band`).

    The theory curve is :func:`mixdp_core.accounting.max_tpr` (μ-GDP where the report has μ,
    else (ε, δ)). A measured curve is an estimate and its band is pointwise and descriptive:
    crossing the theory curve somewhere along it is not a test at ``confidence`` (many points,
    read after the data; rows scored by one model are not independent trials). The test is the
    audit's lower bound (one held-out threshold, :func:`~mixdp_core.evaluation.audit.stats.epsilon_lower_bound`).
    """
    from ..evaluation.audit.stats import roc_band
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
        color = ATTACK_COLORS[i % len(ATTACK_COLORS)]
        n = (counts or {}).get(nm)
        if n is not None and min(n) > 0 and f.size:
            f_lo, f_hi, t_lo, t_hi = roc_band(f, t, int(n[0]), int(n[1]), confidence=confidence)
            # polygon: optimistic edge out, pessimistic edge back
            bx = np.concatenate([np.maximum(f_lo, fpr_floor if log else 0.0), f_hi[::-1]])
            by = np.concatenate([t_hi, np.maximum(t_lo, fpr_floor if log else 0.0)[::-1]])
            # the band has no legend entry of its own: its curve's entry names it (one row per
            # attack, not two: after a LiRA audit 12 rows pushed the plot down to ~150 px)
            fig.add_trace(go.Scatter(x=bx, y=by, mode="lines", fill="toself", line=dict(width=0, color=color),
                                     opacity=0.18, hoverinfo="skip", legendgroup=str(nm), showlegend=False,
                                     name=f"{nm}: {100 * confidence:.0f} % band"))
        if log:
            keep = f >= fpr_floor
            f, t = f[keep], np.maximum(t[keep], fpr_floor)
        band_note = (f" (shaded: {100 * confidence:.0f} % band, {n[1]} members, {n[0]} non-members)"
                     if n is not None and min(n) > 0 and f.size else "")
        fig.add_trace(go.Scatter(x=f, y=t, mode="lines", name=f"{nm}{band_note}", legendgroup=str(nm),
                                 line=dict(color=color, width=3)))
    # powers of ten (10⁻⁴), not SI prefixes: "100μ" read as the GDP μ beside it
    axis = dict(type="log", range=[math.log10(fpr_floor), 0], exponentformat="power") if log else dict(range=[0, 1])
    fig.update_xaxes(**axis)
    fig.update_yaxes(**axis)
    font = 20 if large else 13
    _layout(fig, "What the guarantee allows vs what the attacks achieve",
            "false positive rate (non-members wrongly accused)", "true positive rate (members found)",
            height=560 if large else 380)
    # the legend under the axis title, one entry per row, and the figure taller by its rows, so
    # the plot keeps its height whatever the number of audits drawn
    fig.update_layout(font=dict(size=font), legend=dict(font=dict(size=font - 4)))
    _legend_room(fig, per_row=1, row_px=font + 10, margin=dict(l=60, r=30, t=50, b=70), orientation="v")
    return fig


#: Horizontal offset between methods of :func:`episodes_figure` at one shot count (a factor on
#: its log axis): side by side, not on top of each other.
DODGE_FACTOR = 1.05


def episodes_figure(rows: Sequence[Mapping[str, Any]], *, n_way: int, epsilon: float):
    """Query accuracy (%) vs shots per class for each method of an episodes evaluation
    (rows of the ``episodes`` figure: ``method``, ``k_shot``, ``mean``, ``ci95`` as fractions),
    error bars = the 95 % interval over episodes; chance (1/n_way) as a dotted line; log-scale
    shots. ``None`` when no row has a result."""
    go = _go()
    ok = [r for r in rows if r.get("mean") is not None]
    if not ok:
        return None
    fig = go.Figure()
    shots = sorted({int(r["k_shot"]) for r in ok})
    methods = list(dict.fromkeys(r["method"] for r in ok))
    symbols = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star", "pentagon")
    for i, m in enumerate(methods):
        rs = sorted((r for r in ok if r["method"] == m), key=lambda r: int(r["k_shot"]))
        name, color = _style(m)
        # methods side by side around each shot count (a few % on the log axis) with their own
        # markers: AdaMix equal to Only-Public was drawn exactly under it, in the legend only
        dodge = DODGE_FACTOR ** (i - (len(methods) - 1) / 2)
        fig.add_trace(go.Scatter(
            x=[int(r["k_shot"]) * dodge for r in rs], y=[float(r["mean"]) for r in rs],
            customdata=[int(r["k_shot"]) for r in rs],
            error_y=dict(type="data", array=[float(r.get("ci95") or 0.0) for r in rs], visible=True),
            mode="lines+markers", name=name, marker=dict(size=8, color=color, symbol=symbols[i % len(symbols)]),
            line=dict(color=color), hovertemplate="%{customdata}-shot: %{y:.1%}"))
    x = [shots[0] / 1.3, shots[-1] * 1.3]
    fig.add_trace(go.Scatter(x=x, y=[1.0 / n_way] * 2, mode="lines", name=f"chance (1/{n_way})",
                             line=dict(color="grey", dash="dot", width=1)))
    _layout(fig, f"{n_way}-way episodes: query accuracy vs shots (target ε = {epsilon:g} per fit)",
            "shots per class (support set = the private data of each fit; log scale)",
            "query accuracy", height=380)
    fig.update_xaxes(type="log", tickvals=shots, ticktext=[str(k) for k in shots])
    _fraction_axis(fig)
    fig.update_layout(legend_title_text="mean ± 95 % interval over episodes")
    return fig


def episodes_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per method: accuracy "mean ± 95 % interval" (%) per shot count and the ε spent
    (largest over episodes); a method that could not run shows its one-line reason."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        row = out.setdefault(r["method"], {"method": _style(r["method"])[0]})
        key = f"{int(r['k_shot'])}-shot accuracy (%)"
        if r.get("error"):
            row[key] = "–"
            row["note"] = str(r["error"])[:200]
        else:
            ci = r.get("ci95")  # None / NaN with one episode: no interval, never "± 0.0"
            row[key] = (f"{100 * float(r['mean']):.1f} ± {100 * float(ci):.1f}"
                        if ci is not None and math.isfinite(float(ci)) else f"{100 * float(r['mean']):.1f} (—)")
            spent = r.get("epsilon_spent_max")
            if spent is not None:
                row["ε spent per fit (max)"] = round(float(spent), 3)
    return list(out.values())
