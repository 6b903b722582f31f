"""Streamlit glue shared by the pages: the job manager resource, session settings, and the
drawing of one run (live charts, final metrics). No algorithm code lives here.

The job manager is created once per server process and run store by a
``st.cache_resource`` factory, so every browser session shares it and its worker threads;
creating it calls :meth:`RunStore.recover_interrupted` (app start).

Environment:
    ``MIXDP_HOME``: run store folder (see :func:`mixdp_core.runs.default_home`).
    ``MIXDP_APP_SYNC_JOBS=1``: run jobs synchronously in the script thread (tests).
    ``MIXDP_APP_POLL_S``: seconds between live-chart refreshes (default 1).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Mapping

import streamlit as st

from ..errors import MixDPError
from ..runs.paths import default_home
from ..runs.store import CANCELLED, COMPLETED, FAILED, RUNNING, RunNotFoundError
from . import charts
from .jobs import JobManager
from .notes import NOTES

#: Offline default of the app (digits; the default encoder ships with an installed package).
DEFAULT_DATASET = "digits"


def default_encoder() -> str:
    from ..encoders import DEFAULT_ENCODER

    return DEFAULT_ENCODER


@st.cache_resource(show_spinner=False)
def _manager(root: str, sync: bool) -> JobManager:
    return JobManager(root, sync=sync)


def get_manager() -> JobManager:
    """The process-wide :class:`JobManager` of the current run store."""
    sync = os.environ.get("MIXDP_APP_SYNC_JOBS", "") == "1"
    return _manager(str(default_home()), sync)


def poll_seconds() -> float:
    try:
        return max(0.2, float(os.environ.get("MIXDP_APP_POLL_S", "1")))
    except ValueError:
        return 1.0


# --------------------------------------------------------------------------- navigation
#: (script path relative to app.py, title, material icon) in the order a first-time user
#: needs them. Streamlit runs ``app.py`` + ``pages/`` as a multipage app; the built-in page
#: list (file names) is hidden in .streamlit/config.toml and this titled list drawn instead.
PAGES: tuple[tuple[str, str, str], ...] = (
    ("app.py", "Home", ":material/home:"),
    ("pages/1_data.py", "Data & encoder", ":material/dataset:"),
    ("pages/2_train.py", "Train", ":material/model_training:"),
    ("pages/3_compare.py", "Compare", ":material/compare_arrows:"),
    ("pages/4_audit.py", "Privacy audit", ":material/policy:"),
    ("pages/5_runs.py", "Runs", ":material/storage:"),
)
PAGE_PATH = {title: path for path, title, _ in PAGES}

#: The app's logo and page icon (``assets/`` at the repository root).
LOGO = Path(__file__).resolve().parents[2] / "assets" / "logo.svg"


def page_setup(title: str) -> JobManager:
    """Common start of every page: page config, titled sidebar navigation, job manager.

    Returns:
        The process-wide :class:`JobManager` (created on first use: app start).
    """
    try:
        icon = str(LOGO) if LOGO.is_file() else ":material/lock:"
        st.set_page_config(page_title=f"{title} · MixDP Explorer", page_icon=icon, layout="wide")
    except Exception:  # already set in this run
        pass
    try:
        manager = get_manager()
    except MixDPError as e:  # e.g. read-only or full MIXDP_HOME: a red message, not a traceback
        st.error(str(e), icon="🚫")
        st.stop()
    if LOGO.is_file():
        st.logo(str(LOGO))
    with st.sidebar:
        st.markdown("### MixDP Explorer")
        for path, label, icon in PAGES:
            st.page_link(path, label=label, icon=icon)
        running = sum(1 for j in manager.jobs() if not j.finished)
        if running:
            st.caption(f"{running} background job(s) running")
    return manager


# --------------------------------------------------------------------------- settings
def data_settings() -> dict[str, Any]:
    """Dataset / encoder / split settings shared by the pages (session state, not widgets,
    so they survive page switches)."""
    s = st.session_state.setdefault("data_settings", {})
    s.setdefault("dataset", DEFAULT_DATASET)
    s.setdefault("encoder", default_encoder())
    s.setdefault("public_per_class", 5)
    s.setdefault("imbalance_ratio", 1.0)
    s.setdefault("public_from", None)
    s.setdefault("seed", 0)
    return s


def selected_run_id() -> str | None:
    """Run chosen elsewhere (Runs page, a launch, the URL ``?run=<id>``)."""
    rid = st.query_params.get("run")
    return rid or st.session_state.get("selected_run")


def select_run(run_id: str | None) -> None:
    """Remember ``run_id`` in the session and the URL (survives a page reload)."""
    st.session_state["selected_run"] = run_id
    if run_id:
        st.query_params["run"] = run_id
    elif "run" in st.query_params:
        del st.query_params["run"]


# --------------------------------------------------------------------------- widgets
def note(key: str, label: str = "What does this mean?") -> None:
    """A collapsed teaching note."""
    with st.expander(f"ℹ️ {label}", expanded=False):
        st.markdown(NOTES[key])


def show_field_errors(errors: Mapping[str, str]) -> None:
    """One error box per field, naming the field."""
    for field, msg in errors.items():
        st.error(f"**{field}**: {msg}", icon="🚫")


def run_label(rec: Any) -> str:
    """One-line description of a run for select boxes."""
    eps = "ε=∞" if rec.metrics.get("private") is False else f"ε={rec.target_epsilon:g}"
    return f"{rec.run_id} · {rec.method} · {eps} · {rec.dataset}/{rec.encoder} · seed {rec.seed} · {rec.status}"


STATUS_BADGE = {RUNNING: "🟡 running", COMPLETED: "🟢 completed", FAILED: "🔴 failed", CANCELLED: "⚪ cancelled"}


def render_run(manager: JobManager, run_id: str, *, key: str, show_cancel: bool = True) -> str | None:
    """Draw one run: status, progress, live charts, and on completion the final metrics.

    Returns:
        The run's status (``None`` if the run does not exist).
    """
    store = manager.store
    try:
        rec = store.get_run(run_id)
    except RunNotFoundError:
        st.warning(f"Run {run_id} is not in the store (deleted?).")
        return None
    steps = store.steps(run_id)
    st.markdown(f"**Run `{rec.run_id}`** — {rec.method} on {rec.dataset} · {rec.encoder} · "
                f"target ε = {rec.target_epsilon:g}, δ = {rec.config.get('target_delta', 1e-5):g} · "
                f"seed {rec.seed} — {STATUS_BADGE.get(rec.status, rec.status)}")
    total = next((s.get("total_steps") for s in reversed(steps) if s.get("total_steps")), None)
    if rec.status == RUNNING:
        done = steps[-1]["step"] if steps else 0
        if total:
            st.progress(min(1.0, done / total), text=f"step {done} / {total}")
        else:
            st.progress(0.0, text="preparing (loading features, calibrating)…")
        if show_cancel and st.button("Cancel run", key=f"{key}-cancel", type="secondary"):
            manager.cancel_run(run_id)
            st.toast("Cancellation requested; the run stops at its next step.")
    elif rec.status == FAILED:
        st.error(f"Run failed: {rec.error}")
    elif rec.status == CANCELLED:
        st.warning("Run cancelled; the privacy numbers below cover the steps actually executed.")
    figs = charts.live_figures(steps, target_epsilon=rec.target_epsilon if rec.metrics.get("private", True) else None)
    c1, c2, c3 = st.columns(3)
    c1.plotly_chart(figs["test_error"], key=f"{key}-err", width="stretch", config=charts.LIVE_CONFIG)
    c2.plotly_chart(figs["epsilon"], key=f"{key}-eps", width="stretch", config=charts.LIVE_CONFIG)
    c3.plotly_chart(figs["clip"], key=f"{key}-clip", width="stretch", config=charts.LIVE_CONFIG)
    if rec.status in (COMPLETED, CANCELLED) and rec.metrics.get("test_error") is not None:
        render_final_metrics(rec.metrics, key=key)
    return rec.status


def render_final_metrics(metrics: Mapping[str, Any], *, key: str) -> None:
    """Final utility metrics and the privacy numbers side by side."""
    st.subheader("Final metrics")
    cols = st.columns(4)
    for col, (label, value) in zip(cols, charts.metric_cards(metrics)):
        col.metric(label, value)
    left, right = st.columns([1, 1])
    with left:
        st.markdown("**Privacy of the run as executed**")
        st.dataframe(charts.privacy_table(metrics), hide_index=True, key=f"{key}-priv", width="stretch")
    with right:
        if metrics.get("performance_boost") is not None:
            st.metric("performance boost vs only-public → paragon", f"{100 * metrics['performance_boost']:.1f} %")
        st.caption(f"{metrics.get('n_private', '?')} private, {metrics.get('n_public', '?')} public, "
                   f"{metrics.get('n_test', '?')} test samples · {metrics.get('steps', '?')} steps · "
                   f"σ = {metrics.get('noise_multiplier') if metrics.get('noise_multiplier') is not None else '—'} · "
                   f"{metrics.get('fit_seconds', 0):.1f} s fit")
        note("epsilon", "What does ε mean?")
        note("delta", "What does δ mean?")
        note("attack_auc", "What is attack AUC?")
        note("conversions", "Why several privacy numbers?")


def config_json(rec: Any) -> str:
    return json.dumps(rec.config, indent=2, sort_keys=True)


def fmt_time(t: float | None) -> str:
    return "" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
