"""Plotting helpers shared by the results reports and the app.

Figures are built with plotly (interactive, for the Streamlit app). Static PNGs for reports
are written with plotly + kaleido when kaleido is installed, else drawn with matplotlib from
the same data, so the report code works either way.

Input convention: "rows" are dicts with at least ``method``, ``epsilon`` (x value) and a mean
and standard deviation of the plotted metric (e.g. ``test_error_mean``/``test_error_std``).
Non-private reference methods (``epsilon`` ``None``) are drawn as horizontal lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

#: Display names and colours of the AdaMix-family methods (others get defaults).
METHOD_STYLE: dict[str, tuple[str, str]] = {
    "paragon": ("Paragon (non-private)", "#2ca02c"),
    "only_public": ("Only-Public", "#d62728"),
    "fully_private": ("Fully-Private", "#7f7f7f"),
    "ngd": ("NGD (mixed)", "#ff7f0e"),
    "adamix": ("AdaMix", "#1f77b4"),
    "adamix_rank": ("AdaMix (rank-C projection)", "#17becf"),
    "zero_shot": ("Zero-shot", "#9467bd"),
    "ppgd": ("PPGD", "#8c564b"),
}


def _style(method: str) -> tuple[str, str | None]:
    return METHOD_STYLE.get(method, (method, None))


def _series(rows: Iterable[Mapping[str, Any]], metric: str):
    """{method: (eps array, mean array, std array)}, sorted by ε; and reference lines."""
    curves: dict[str, list[tuple[float, float, float]]] = {}
    refs: dict[str, tuple[float, float]] = {}
    for r in rows:
        mean = r.get(f"{metric}_mean")
        if mean is None:
            continue
        std = r.get(f"{metric}_std") or 0.0
        if r.get("epsilon") is None:
            refs[r["method"]] = (float(mean), float(std))
        else:
            curves.setdefault(r["method"], []).append((float(r["epsilon"]), float(mean), float(std)))
    out = {}
    for m, pts in curves.items():
        pts.sort()
        a = np.asarray(pts)
        out[m] = (a[:, 0], a[:, 1], a[:, 2])
    return out, refs


def metric_vs_epsilon_figure(
    rows: Sequence[Mapping[str, Any]],
    *,
    metric: str = "test_error",
    title: str = "",
    ylabel: str = "test error",
    log_x: bool = True,
):
    """Plotly figure of ``metric`` (mean ± std error bars) against ε, one curve per method."""
    import plotly.graph_objects as go

    curves, refs = _series(rows, metric)
    fig = go.Figure()
    xs = np.concatenate([c[0] for c in curves.values()]) if curves else np.array([1.0])
    for m, (mean, std) in refs.items():
        name, color = _style(m)
        fig.add_trace(go.Scatter(x=[xs.min(), xs.max()], y=[mean, mean], mode="lines", name=name,
                                 line=dict(color=color, dash="dash")))
    for m, (eps, mean, std) in curves.items():
        name, color = _style(m)
        fig.add_trace(go.Scatter(x=eps, y=mean, error_y=dict(type="data", array=std, visible=True),
                                 mode="lines+markers", name=name, line=dict(color=color)))
    fig.update_layout(title=title, xaxis_title="ε (δ fixed)", yaxis_title=ylabel, template="plotly_white")
    if log_x:
        fig.update_xaxes(type="log")
    return fig


def _kaleido_available() -> bool:
    try:
        import kaleido  # noqa: F401

        return True
    except ImportError:
        return False


def _finish_png(fig: Any, ax: Any, path: Path, *, xlabel: str, ylabel: str, title: str) -> Path:
    """Shared labels, grid, legend and save of the matplotlib report figures; closes ``fig``."""
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def save_metric_vs_epsilon_png(
    rows: Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    metric: str = "test_error",
    title: str = "",
    ylabel: str = "test error",
    log_x: bool = True,
) -> Path:
    """Write the ``metric``-vs-ε plot as a PNG (plotly+kaleido if available, else matplotlib)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if _kaleido_available():
        fig = metric_vs_epsilon_figure(rows, metric=metric, title=title, ylabel=ylabel, log_x=log_x)
        fig.write_image(str(path), width=800, height=500, scale=2)
        return path
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves, refs = _series(rows, metric)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for m, (eps, mean, std) in curves.items():
        name, color = _style(m)
        ax.errorbar(eps, mean, yerr=std, marker="o", capsize=3, label=name, color=color)
    for m, (mean, std) in refs.items():
        name, color = _style(m)
        ax.axhline(mean, linestyle="--", color=color, label=name)
        if std > 0:
            ax.axhspan(mean - std, mean + std, color=color or "grey", alpha=0.12)
    if log_x:
        ax.set_xscale("log")
        allx = sorted({float(x) for c in curves.values() for x in c[0]})
        if allx:
            ax.set_xticks(allx)
            ax.set_xticklabels([f"{x:g}" for x in allx])
            ax.minorticks_off()
    return _finish_png(fig, ax, path, xlabel="ε (δ fixed)", ylabel=ylabel, title=title)


def save_sorted_pdp_png(
    eps_by_method: Mapping[str, np.ndarray], path: str | Path, *, target_epsilon: float, title: str = ""
) -> Path:
    """Sorted per-instance ε_i of each method with the target ε as a line (AdaMix Fig. 3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for m, e in eps_by_method.items():
        name, color = _style(m)
        e = np.sort(np.asarray(e))
        ax.plot(np.arange(e.size) / max(e.size - 1, 1), e, label=name, color=color)
    ax.axhline(target_epsilon, color="k", linestyle=":", label=f"target ε = {target_epsilon:g}")
    return _finish_png(fig, ax, path, xlabel="private samples (fraction, sorted by ε_i)",
                       ylabel="per-instance ε_i", title=title)
