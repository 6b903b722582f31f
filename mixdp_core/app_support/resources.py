"""Streamlit glue shared by the pages: the job manager resource, session settings, and the
drawing of one run (live charts, final metrics). No algorithm code lives here.

The job manager is created once per server process and run store by a
``st.cache_resource`` factory, so every browser session shares it and its worker threads;
creating it calls :meth:`RunStore.recover_interrupted` (app start).

Environment:
    ``MIXDP_HOME``: run store folder (see :func:`mixdp_core.runs.default_home`).
    ``MIXDP_APP_SYNC_JOBS=1``: run jobs synchronously in the script thread (tests).
    ``MIXDP_APP_POLL_S``: seconds between progress polls (default 0.2, at least 0.2; a
    running run's live charts are pushed in between, see :data:`LIVE_PUSH_S`).
    ``MIXDP_APP_RUN_PROCESSES=0``: train in job threads instead of the worker processes.
    ``MIXDP_APP_RUN_NICE``: niceness added to the worker processes (default 5, 0 = none; see
    :data:`mixdp_core.app_support.run_worker.RUN_NICE`).

Live charts are light and pushed: while a run trains, :func:`render_run` reads only its new
step records and draws small Vega-Lite charts whose specs stay fixed, so a redraw only swaps
their data (:mod:`mixdp_core.app_support.live`), and the server redraws them in place every
:data:`LIVE_PUSH_S` s while records arrive instead of waiting for the browser's next poll; the
full plotly charts with their exports come once the run has ended.

First contact is fast: the app's default encoder is ``pixels`` (no feature extraction);
creating the job manager starts its pre-warmed run processes (they import the training stack
and load the digits features, see :mod:`mixdp_core.app_support.run_worker`) and a background
warm-up of the page side (plotly, pandas) here, so that a run's first chart point comes within
about a second of Launch.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import streamlit as st

from ..errors import MixDPError
from ..runs.paths import default_home
from ..runs.store import CANCELLED, COMPLETED, FAILED, RUNNING, RunNotFoundError
from . import charts
from . import live
from .jobs import JobManager
from .notes import NOTES

#: Offline default of the app: digits (ships with scikit-learn) on raw pixels, which needs no
#: feature extraction, so that the demo and every default finish in seconds on a fresh install.
DEFAULT_DATASET = "digits"
DEFAULT_APP_ENCODER = "pixels"


def default_encoder() -> str:
    """The app's default encoder (``pixels``: instant; pre-trained encoders are one click away)."""
    return DEFAULT_APP_ENCODER


def _prewarm() -> None:
    """Import what the pages need to draw a run and to check a Launch (plotly, pandas, the
    method registry, the accounting behind a ``RunConfig``'s budget preflight), in the
    background: the training stack is warmed in the run processes, not here."""
    try:
        import pandas  # noqa: F401
        import plotly.graph_objects as go

        go.Figure(go.Scatter(x=[0], y=[0]))  # plotly loads its trace validators on first use
        from ..methods import METHODS  # noqa: F401
        from . import forms

        forms.demo_config()  # a RunConfig's budget preflight imports the accounting stack (~1 s cold)
    except Exception:  # warm-up only: the pages report real errors
        pass


@st.cache_resource(show_spinner=False)
def _manager(root: str, sync: bool) -> JobManager:
    import threading

    if not sync:
        # pandas first, in this thread: plotly peeks at ``sys.modules["pandas"]`` without the
        # import lock, so a page drawing a figure while the warm-up thread was still importing
        # pandas failed ("partially initialized module 'pandas' has no attribute 'Series'")
        import pandas  # noqa: F401

        threading.Thread(target=_prewarm, name="mixdp-app-prewarm", daemon=True).start()
    # MIXDP_APP_RUN_PROCESSES=0: train in the job threads of this process instead of the
    # pre-warmed worker processes (e.g. where subprocesses are not allowed).
    processes = None if os.environ.get("MIXDP_APP_RUN_PROCESSES", "1") != "0" else False
    return JobManager(root, sync=sync, processes=processes)


def get_manager() -> JobManager:
    """The process-wide :class:`JobManager` of the current run store."""
    import multiprocessing

    # A multiprocessing child (e.g. a sweep worker started from the Compare page) re-imports
    # the page script as ``__mp_main__``: it must not start job threads and run processes of
    # its own, so it gets a synchronous manager that never runs anything.
    sync = os.environ.get("MIXDP_APP_SYNC_JOBS", "") == "1" or multiprocessing.parent_process() is not None
    return _manager(str(default_home()), sync)


#: Seconds between two polls of a page's progress fragment (feature extraction on the Data
#: and Train pages, a sweep on Compare, and the run view's next fragment rerun). A running
#: run's view does not poll for its redraws: the server pushes them within a fragment rerun
#: (:func:`render_run` ``live_s``, :data:`LIVE_PUSH_S`). A faster poll costs the browser more
#: than it shows sooner (docs/results/tuning_notes.md, POLL_S).
POLL_S = 0.2


def poll_seconds() -> float:
    """Progress poll period of the pages' fragments in seconds (``MIXDP_APP_POLL_S``, at
    least 0.2)."""
    try:
        return max(0.2, float(os.environ.get("MIXDP_APP_POLL_S", str(POLL_S))))
    except ValueError:
        return POLL_S


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
    ("pages/6_classroom.py", "Classroom", ":material/school:"),
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
    # Live charts redraw every half second: never fade the elements being redrawn (Streamlit
    # dims "stale" elements during a rerun, which made live charts look like a faded copy).
    st.markdown("<style>[data-stale='true']{opacity:1 !important;transition:none !important;}</style>",
                unsafe_allow_html=True)
    if LOGO.is_file():
        st.logo(str(LOGO))
    with st.sidebar:
        st.markdown("### MixDP Explorer")
        for path, label, icon in PAGES:
            st.page_link(path, label=label, icon=icon)
        running = sum(1 for j in manager.jobs() if not j.finished)
        if running:
            st.caption(f"{running} background job(s) running")
    warm_chart_renderers()
    return manager


# --------------------------------------------------------------------------- settings
SETTINGS_FILE = "app_settings.json"
_SETTING_KEYS = ("dataset", "encoder", "public_per_class", "imbalance_ratio", "public_from", "seed",
                 "dataset_kwargs")


def _settings_path() -> Path:
    return get_manager().store.root / SETTINGS_FILE


def data_settings() -> dict[str, Any]:
    """Dataset / encoder / split settings shared by the pages.

    Kept in session state (they survive page switches) and persisted in the run store
    (``app_settings.json``, written by :func:`save_data_settings`), so a new browser session
    starts from the last settings used on this server."""
    s = st.session_state.get("data_settings")
    if s is None:
        s = {}
        try:
            stored = json.loads(_settings_path().read_text())
            s.update({k: stored[k] for k in _SETTING_KEYS if k in stored})
        except (OSError, ValueError, TypeError):
            pass
        st.session_state["data_settings"] = s
    s.setdefault("dataset", DEFAULT_DATASET)
    s.setdefault("encoder", default_encoder())
    s.setdefault("public_per_class", 5)
    s.setdefault("imbalance_ratio", 1.0)
    s.setdefault("public_from", None)
    s.setdefault("seed", 0)
    s.setdefault("dataset_kwargs", {})
    return s


def save_data_settings(**values: Any) -> dict[str, Any]:
    """Update the settings and persist them in the store (no-op write when unchanged)."""
    s = data_settings()
    changed = any(s.get(k) != v for k, v in values.items())
    s.update(values)
    if changed or not _settings_path().exists():
        try:
            from .._io import atomic_write

            text = json.dumps({k: s.get(k) for k in _SETTING_KEYS}, indent=1)
            atomic_write(_settings_path(), lambda f: f.write(text.encode()))
        except Exception:  # read-only store: settings stay per session
            pass
    return s


def shown_id(value: object, limit: int = 64) -> str:
    """``value`` (a run id from a link, any text) as an inline code span that Markdown cannot
    turn into anything else: backticks, control characters and line breaks dropped, at most
    ``limit`` characters (then ``…``). Why: a ``?run=`` value is typed by whoever shares the
    link; shown raw inside a warning, ``[text](url)`` becomes a live link on the page."""
    text = "".join(ch for ch in str(value) if ch != "`" and ch.isprintable())
    if len(text) > limit:
        text = text[:limit] + "…"
    return f"`{text}`" if text else "`(empty)`"


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


def run_eps_label(rec: Any) -> str:
    """``ε=…`` of a run for labels: its target for a private method, ``ε=0`` for a reference that
    never reads a private row (Only-Public), ``ε=∞`` for the paragon, also while it runs (it
    showed Only-Public as ε=∞ and a running paragon with the sweep's placeholder ε=1)."""
    cls = forms_methods().get(rec.method)
    if cls is not None and not getattr(cls, "private", True):
        return "ε=0" if charts.reads_no_private(rec.method) else "ε=∞"
    if rec.metrics.get("private") is False:
        return "ε=0" if rec.metrics.get("epsilon") == 0.0 else "ε=∞"
    return f"ε={rec.target_epsilon:g}"


#: What the pages show for the encoder of a data set whose rows are the features (synthetic, an
#: .npz of features): no encoder runs there, whatever the run's placeholder encoder says.
NO_ENCODER = "— (rows are features)"


def encoder_label(dataset: str, encoder: str) -> str:
    """``encoder``, or :data:`NO_ENCODER` where ``dataset``'s rows are already features
    ("adamix on synthetic · pixels" named an encoder that never ran)."""
    from ..data.datasets import carries_features

    return NO_ENCODER if carries_features(str(dataset)) else str(encoder)


def run_label(rec: Any) -> str:
    """One-line description of a run for select boxes."""
    return (f"{rec.run_id} · {rec.method} · {run_eps_label(rec)} · {rec.dataset}/"
            f"{encoder_label(rec.dataset, rec.encoder)} · seed {rec.seed} · {rec.status}")


#: Status words with a symbol every text font has (emoji need a colour-emoji font, which
#: headless browsers and many servers lack: they drew boxes).
STATUS_BADGE = {RUNNING: "● running", COMPLETED: "✓ completed", FAILED: "✗ failed", CANCELLED: "○ cancelled"}


def show_chart(fig: Any, key: str, *, name: str | None = None) -> None:
    """Draw a plotly figure with its exports: PNG and SVG (plotly's tool bar also saves PNG)
    and the plotted data as CSV, all built only when clicked."""
    config = dict(charts.PLOTLY_CONFIG)
    config["toImageButtonOptions"] = {"format": "png", "filename": name or key, "scale": 2}
    st.plotly_chart(fig, key=key, width="stretch", config=config)
    fname = name or key
    with st.popover("Export", icon=":material/download:"):
        _exports(fig, key, fname, [st, st, st])


def _exports(fig: Any, key: str, fname: str, c: Any) -> None:
    c[0].download_button("CSV", lambda: charts.figure_csv(fig), file_name=f"{fname}.csv", mime="text/csv",
                         key=f"{key}-csv", on_click="ignore", icon=":material/download:")
    c[1].download_button("SVG", lambda: charts.figure_image(fig, "svg"), file_name=f"{fname}.svg",
                         mime="image/svg+xml", key=f"{key}-svg", on_click="ignore", icon=":material/download:")
    c[2].download_button("PNG", lambda: charts.figure_image(fig, "png"), file_name=f"{fname}.png",
                         mime="image/png", key=f"{key}-png", on_click="ignore", icon=":material/download:")


def live_pdp(store: Any, run_id: str) -> tuple[Any, int | None]:
    """Per-instance ε of a run: the final ``pdp_epsilon`` or, while it trains, the
    ``live_pdp_epsilon`` of the steps so far (with that step). ``(None, None)`` if neither.
    (:func:`mixdp_core.app_support.live.live_pdp`: re-read only when the artifact changed.)"""
    return live.live_pdp(store, run_id)


def _live_charts(store: Any, series: Any, run_id: str, target_epsilon: float | None) -> dict[str, Any]:
    """Vega-Lite ``(spec, frame)`` charts of a running run (:func:`charts.live_charts`), built
    once per new batch of records and shared by every session that follows the run; the
    pDP histogram is rebuilt only when the run rewrote its artifact."""
    # Built under the series lock: another session's update() may append records meanwhile,
    # and the key must name the records the charts were built from.
    with series.lock:
        key = ("lines", series.version, target_epsilon)
        figs = series.figures.get(key)
        if figs is None:
            figs = charts.live_charts(series, target_epsilon=target_epsilon)
            series.figures[key] = figs
    figs = dict(figs)
    if target_epsilon is not None:
        eps_i, step = live.live_pdp(store, run_id)
        if eps_i is not None and len(eps_i):
            # live_pdp returns the same array object until the artifact changes; the entry
            # holds that array, so an identity test cannot match a reloaded one at a reused id()
            pkey = (step, series.total_steps, target_epsilon)
            cached = series.pdp_figure
            if cached is None or cached[0] is not eps_i or cached[1] != pkey:
                cached = (eps_i, pkey, charts.live_pdp_chart(
                    eps_i, target_epsilon, step=step, total_steps=series.total_steps if step is not None else None))
                series.pdp_figure = cached
            figs["pdp"] = cached[2]
    return figs


def show_live_chart(chart: tuple[Mapping[str, Any], Any]) -> None:
    """Draw a live Vega-Lite chart ``(spec, frame)``. Its spec stays the same while the run
    trains, so a redraw in the same place only replaces its data in the browser."""
    spec, frame = chart
    st.vega_lite_chart(frame, dict(spec), width="stretch")


def warm_chart_renderers() -> None:
    """Draw an empty, one-pixel Vega-Lite chart and an empty, static 10-pixel plotly chart in
    the sidebar of every page (:func:`page_setup`), so that the browser has loaded both chart
    renderers before a run is launched rather than when its first chart arrives (loading them
    then cost seconds between Launch and the first chart: docs/results/tuning_notes.md,
    warm_chart_renderers)."""
    try:  # a warm-up only: it must never take a page down
        import plotly.graph_objects as go

        with st.sidebar:
            st.vega_lite_chart(None, {"width": 1, "height": 1, "mark": "point", "config": {"view": {"stroke": None}},
                                      "usermeta": {"embedOptions": charts.LIVE_EMBED}},
                               key="live-charts-warmup", width="content")
            fig = go.Figure(layout=dict(width=10, height=10, margin=dict(l=0, r=0, t=0, b=0),  # plotly's least
                                        xaxis=dict(visible=False), yaxis=dict(visible=False)))
            st.plotly_chart(fig, key="final-charts-warmup", width="content",
                            config={"staticPlot": True, "displayModeBar": False})
    except Exception:
        pass


#: Live charts drawn by the first draw after Launch (:func:`render_run` ``first_draw``).
FIRST_DRAW_CHARTS = ("test_error", "epsilon")


#: Seconds between two server-driven redraws of a running run's live charts
#: (:func:`render_run` ``live_s``): the run's records reach the store every
#: :data:`~mixdp_core.app_support.jobs.APP_FLUSH_S` = 0.1 s.
LIVE_PUSH_S = 0.1
#: Seconds a script run (the page's, then each fragment rerun) keeps pushing redraws
#: (:func:`live_seconds`) before it returns and the page's ``run_every`` poll starts the next
#: fragment rerun. The page's own run pushes too: a hand-over to the fragment right after the
#: first point cost the browser 0.2-0.4 s, when the run's first records come fastest (up to
#: 5.9 % of its steps between the first two points). Bounded so that a script run
#: does not outlive the page's session for long; widgets that must answer at once while a
#: run trains (:func:`render_cancel`) live outside the fragment, because Streamlit queues a
#: click inside a fragment behind the fragment's running rerun.
LIVE_LOOP_S = 30.0
def live_seconds() -> float:
    """How long a page's live view keeps pushing redraws in one script run: :data:`LIVE_LOOP_S`,
    or 0 with synchronous jobs (``MIXDP_APP_SYNC_JOBS=1``, the page tests: a run launched
    there has ended before it is drawn, and a run seen running is drawn once)."""
    return 0.0 if os.environ.get("MIXDP_APP_SYNC_JOBS", "") == "1" else LIVE_LOOP_S


def render_cancel(manager: JobManager, run_id: str, *, key: str) -> None:
    """A "Cancel run" button for a running run. Call it from the page body, not from the
    live fragment: a click inside a fragment would wait for its running rerun to end."""
    if st.button("Cancel run", key=f"{key}-cancel", type="secondary", icon=":material/stop_circle:"):
        manager.cancel_run(run_id)
        st.toast("Cancellation requested; the run stops at its next step.")


def render_run(manager: JobManager, run_id: str, *, key: str, first_draw: bool = False,
               live_s: float = 0.0, owner: bool = True) -> str | None:
    """Draw one run from the store: status, progress, live charts (test error, ε spent,
    minority-class accuracy, clip threshold and the pDP histogram of the steps so far — only
    those the method has), and on completion the final metrics.

    While the run trains, its records are read incrementally (:mod:`.live`) and drawn as
    light charts; once it ended, the full charts with their exports.

    Live redraws are pushed by the server: with ``live_s > 0`` and the run training, this
    call keeps redrawing the progress bar and the live charts in place (``st.empty`` slots)
    every :data:`LIVE_PUSH_S` s while new records arrive, for up to ``live_s`` s or until the
    run ends. Why: a poll (a fragment rerun requested by the browser every 0.2 s) costs the
    browser about 0.11 s of its main thread per redraw (the rerun's round trip and the
    fragment's clear-and-redraw) and showed a new point only every 0.2-0.4 s, up to 10 % of
    a 5-second run's steps at once; a pushed redraw only swaps the data of the charts that
    changed (``benchmarks/app_latency.py``).

    Args:
        first_draw: the draw right after Launch: of the live charts, only
            :data:`FIRST_DRAW_CHARTS` (those with the run's first points); the others come
            with the next redraw. Why: the browser sets up each new live chart once (about
            0.1-0.5 s of its time per chart on a loaded 2-core machine), and the first point
            should not wait for charts that have nothing to show yet.
        live_s: seconds to keep pushing live redraws (0: draw once and return).
        owner: show the owner-only diagnostics (per-instance ε, attack AUC, exact private
            count), each labelled; ``False`` leaves them out (the Runs page's toggle).

    Returns:
        The run's status when the call returns (``None`` if the run does not exist).
    """
    store = manager.store
    try:
        rec = store.get_run(run_id)
    except RunNotFoundError:
        st.warning(f"Run {shown_id(run_id)} is not in the store (deleted?).")
        return None
    running = rec.status == RUNNING
    mcls = forms_methods().get(rec.method)
    private = rec.metrics.get("private", True) and getattr(mcls, "private", True)
    target = rec.target_epsilon if private else None
    st.markdown(f"**Run `{rec.run_id}`** — {rec.method} on {rec.dataset} · {encoder_label(rec.dataset, rec.encoder)} · "
                + (f"target ε = {rec.target_epsilon:g}, δ = {rec.config.get('target_delta', 1e-5):g}"
                   if private else "reference that reads no private data (ε = 0)"
                   if charts.reads_no_private(rec.method) else "non-private reference (ε = ∞)")
                + f" · seed {rec.seed} — {STATUS_BADGE.get(rec.status, rec.status)}")
    if running:
        return _render_live(manager, rec, target=target, first_draw=first_draw, live_s=live_s, owner=owner)
    steps = store.steps(run_id)
    # The same six nodes as the live view (_render_live): a full page run that draws a live
    # view where a finished run was shown replaces every node, so nothing of the finished run
    # stays on the page while the live view keeps the script running (Streamlit keeps an
    # earlier script run's elements that were not redrawn yet until the run ends).
    status_slot, caption_slot = st.empty(), st.empty()
    if rec.status == FAILED:
        from ..runs.owner_view import public_error

        # the message may quote the private data (a class's exact count): in full on the owner's view only
        status_slot.error(f"Run failed: {rec.error if owner else public_error(rec.error)}")
    elif rec.status == CANCELLED:
        status_slot.warning("Run cancelled; the privacy numbers below cover the steps actually executed.")
    total = next((s.get("total_steps") for s in reversed(steps) if s.get("total_steps")), None)
    figs = charts.live_figures(steps, target_epsilon=target,
                               final=rec.metrics if rec.status in (COMPLETED, CANCELLED) else None)
    if not owner:
        figs.pop("subspace", None)  # reads the private gradients before noise: the owner's view only
    eps_i, pdp_step = live_pdp(store, run_id) if private and owner else (None, None)
    if eps_i is not None and len(eps_i):
        figs["pdp"] = charts.pdp_hist_figure(eps_i, rec.target_epsilon, step=pdp_step,
                                             total_steps=int(total) if pdp_step is not None and total else None)
    if not figs and charts.is_one_shot(steps):
        caption_slot.caption("One-shot method: no training curve (a single release); see the final metrics.")
    order = [k for k in ("test_error", "epsilon", "minority", "pdp", "clip", "subspace") if k in figs]
    for cell, name in zip(_chart_cells(), order):
        with cell, st.container():  # one node per column, as the live view's slot
            show_chart(figs[name], key=f"{key}-{name}", name=f"{rec.run_id}_{name}")
    with st.container():
        if rec.status in (COMPLETED, CANCELLED) and rec.metrics.get("test_error") is not None:
            render_final_metrics(rec.metrics, key=key, context=context_lines(store, rec), owner=owner)
    return rec.status


#: Seconds at most between two messages of a pushed live view: Streamlit stops a script run
#: (superseded by a click elsewhere on the page, or its tab closed) when it next sends something.
LIVE_YIELD_S = 0.25
#: Chart cells of a run's view, live or finished: every chart the run page can draw.
_CHART_ROWS, _CHART_COLS = 2, 3


def _chart_cells() -> list[Any]:
    """The run view's chart cells (two rows of three columns), the same whether the run is
    live or finished (see :func:`render_run`), row by row."""
    return [col for _ in range(_CHART_ROWS) for col in st.columns(_CHART_COLS)]


def _render_live(manager: JobManager, rec: Any, *, target: float | None, first_draw: bool,
                 live_s: float, owner: bool = True) -> str:
    """The running branch of :func:`render_run`: progress and live charts in fixed slots,
    redrawn in place for up to ``live_s`` s. Returns the run's status at return."""
    store, run_id = manager.store, rec.run_id
    progress, caption = st.empty(), st.empty()
    # Fixed slots: a chart keeps its place (Streamlit identifies an element by its place on
    # the page, and a moved chart is set up anew by the browser) and a redraw replaces only
    # the slots whose chart changed.
    slots = [cell.empty() for cell in _chart_cells()]
    st.empty()  # where the finished run's final metrics go (see render_run)
    drawn: dict[int, Any] = {}  # slot -> the (spec, frame) object last sent there
    shown: list[Any] = [None, 0.0, False]  # progress text last sent, when, one-shot caption sent

    def draw(series: Any, limit_first: bool) -> None:
        total, done = series.total_steps, series.last_step
        text = f"step {done} / {total}" if total else "preparing (loading features, calibrating)…"
        # Re-sent at least every LIVE_YIELD_S even when unchanged: the script runner handles a
        # stop request (another click started a new run of the page, the tab was closed) only
        # when the script sends something, and a run can go seconds without a record (public
        # pre-training, calibration); otherwise this loop would keep reading the store for up
        # to LIVE_LOOP_S s beside the page's new run.
        if text != shown[0] or time.monotonic() - shown[1] >= LIVE_YIELD_S:
            progress.progress(min(1.0, done / total) if total else 0.0, text=text)
            shown[0], shown[1] = text, time.monotonic()
        if series.one_shot() and not shown[2]:
            caption.caption("One-shot method: no training curve (a single release); see the final metrics.")
            shown[2] = True
        figs = _live_charts(store, series, run_id, target)
        if not owner:  # per-instance ε and the private-gradient subspace chart: the owner's view only
            figs.pop("pdp", None)
            figs.pop("subspace", None)
        names = [k for k in ("test_error", "epsilon", "minority", "pdp", "clip", "subspace") if k in figs]
        order = series.chart_order([k for k in names if not limit_first or k in FIRST_DRAW_CHARTS])
        mounts = 0
        for i, (slot, name) in enumerate(zip(slots, order)):
            chart = figs[name]
            if drawn.get(i) is chart:  # cached per records version: same object = no news
                continue
            if i not in drawn:
                # A new chart costs the browser 0.1-0.2 s to set up (a Vega view): one per
                # redraw after the first, so that the charts that appear together (clip
                # threshold, pDP histogram) do not stall the redraws of the others.
                if mounts and not limit_first:
                    continue
                mounts += 1
            with slot:
                show_live_chart(chart)
            drawn[i] = chart

    series = live.run_series(store, run_id)
    draw(series, first_draw)
    now = time.monotonic()
    deadline, tick = now + max(0.0, live_s), now
    status = RUNNING
    while tick + LIVE_PUSH_S < deadline:
        # a fixed rate (the redraw's own time is not added to the period), without bursts of
        # back-to-back redraws to catch up after a stall
        tick = max(tick + LIVE_PUSH_S, time.monotonic())
        time.sleep(max(0.0, tick - time.monotonic()))
        # the status first: records written before the run's end are then in this draw
        status = store.get_run(run_id).status  # its end is in the run's row (about 1 ms to read)
        series = live.run_series(store, run_id)
        draw(series, False)
        if status != RUNNING:
            break
    return status


def forms_methods() -> dict[str, Any]:
    from . import forms

    return forms.method_classes()


def context_lines(store: Any, rec: Any) -> list[str]:
    """What a finished run's error means, from the runs beside it on the same split: the
    Only-Public reference (uses no private data) and Fully-Private at the same ε and δ.
    Empty when neither was run (the demo launches both)."""
    from ..runs.store import COMPLETED

    if not getattr(rec, "split_hash", None) or rec.metrics.get("test_error") is None:
        return []
    err = 100 * float(rec.metrics["test_error"])

    def newest(method: str, same_budget: bool) -> float | None:
        # the newest completed run of ``method`` on this split (as sibling_boost looks up references)
        for r in store.list_runs(status=COMPLETED, split_hash=rec.split_hash, method=method, limit=50):
            if r.metrics.get("test_error") is None or (same_budget and (
                    r.target_epsilon != rec.target_epsilon or r.config.get("method_params")
                    or r.config.get("target_delta") != rec.config.get("target_delta"))):
                continue
            return 100 * float(r.metrics["test_error"])
        return None

    def versus(ref: float) -> str:
        d = round(err - ref, 1)  # as shown: "0.0 points the same as" read oddly
        return ("the same as" if d == 0 else f"{abs(d):.1f} points " + ("better than" if d < 0 else "worse than"))

    parts = []
    pub = newest("only_public", False) if rec.method != "only_public" else None
    if pub is not None:
        parts.append(f"Only-Public (public samples only, ε = 0): {pub:.1f} % — this run is {versus(pub)} using "
                     f"no private data")
    fp = newest("fully_private", True) if rec.method != "fully_private" else None
    if fp is not None:
        parts.append(f"Fully-Private at the same ε = {rec.target_epsilon:g} (no public start): {fp:.1f} % — this "
                     f"run is {versus(fp)} it")
    return [f"Beside this run ({err:.1f} % test error) on the same split: " + "; ".join(parts) + "."] if parts else []


def render_final_metrics(metrics: Mapping[str, Any], *, key: str, context: Sequence[str] = (),
                         owner: bool = True) -> None:
    """Final utility metrics and the privacy numbers side by side; ``context``: lines that
    place the result (:func:`context_lines`); ``owner=False`` leaves out the owner-only
    diagnostics (attack AUC, exact private count)."""
    st.subheader("Final metrics")
    if metrics.get("noise") == "reproducible":
        st.warning(f"Research option: {metrics.get('noise_label')}. Run `mixdp audit --attack seed-replay` "
                   "(or the Privacy audit page) to see what this costs.")
    from ..runs.owner_view import hidden_from_public, reads_private_in_clear, timing_is_owner_only

    cards = charts.metric_cards(metrics, owner=owner)
    cols = st.columns(4)
    for col, (label, value) in zip(cols, cards):
        col.metric(label, value)
    if not cards:  # the paragon's outcomes with the owner's view off
        st.caption("This run's outcomes are the data owner's view (it reads the private rows with no "
                   "guarantee): turn on the owner-only diagnostics to see them.")
    spread = charts.test_error_interval_caption(metrics) if owner or not hidden_from_public(
        metrics, "test_error") else None
    if spread:
        st.caption(spread + (" (Owner's view, not private.)" if reads_private_in_clear(metrics) else ""))
    # what the number means: the references beside it. They quote this run's error: for a run
    # that reads the private rows in the clear (the paragon) that is the owner's view, hidden
    # from the public view with its cards and labelled in the owner's (it was shown unlabelled)
    clear = reads_private_in_clear(metrics)
    for line in (context if owner or not clear else ()):
        st.markdown(line + (" *(Owner's view, not private.)*" if clear else ""))
    left, right = st.columns([1, 1])
    with left:
        st.markdown("**Privacy of the run as executed**")
        st.dataframe(charts.privacy_table(metrics), hide_index=True, key=f"{key}-priv", width="stretch")
    with right:
        if owner and (metrics.get("performance_boost") is not None or metrics.get("performance_boost_label")):
            from ..evaluation.metrics import format_boost

            # owner-only: a ratio with the paragon's error (the private rows, no guarantee)
            st.metric("performance boost (× Only-Public; owner's view, not private)",
                      metrics.get("performance_boost_label") or format_boost(metrics["performance_boost"]),
                      help=charts.BOOST_HELP)
        n_priv = (f"{metrics.get('n_private', '?')} private (exact count: owner's view, not private), "
                  if owner else "")
        # a private run's duration grows with its private rows: owner-only, labelled so
        timed = timing_is_owner_only(metrics)
        fit = ("" if timed and not owner else
               f" · {metrics.get('fit_seconds', 0):.1f} s fit" + (" (owner's view, not private)" if timed else ""))
        st.caption(f"{n_priv}{metrics.get('n_public', '?')} public, "
                   f"{metrics.get('n_test', '?')} test samples · {metrics.get('steps', '?')} steps · "
                   f"σ = {_fmt_sigma(metrics.get('noise_multiplier'))}{fit}")
        released = charts.release_caption(metrics)
        if released:
            st.caption(released)
        note("epsilon", "What does ε mean?")
        note("delta", "What does δ mean?")
        note("attack_auc", "What is attack AUC?")
        note("conversions", "Why several privacy numbers?")
    if metrics.get("layer_stats") and owner:  # sparse fine-tuning / whole-network DP-SGD runs (owner's view)
        with st.expander("Per-layer noise and mask (owner's view, not private)"):
            st.plotly_chart(charts.layer_stats_figure(metrics["layer_stats"]), key=f"{key}-layers",
                            width="stretch")
            st.caption(charts.LAYER_CHART_CAPTION)


def _fmt_sigma(v: Any) -> str:
    """σ of a run: one number, or one per release (e.g. CoinPress iterations)."""
    if v is None:
        return "—"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(f"{float(x):.3g}" for x in v) + "] (per release)"
    return f"{float(v):.4g}"


def config_json(rec: Any) -> str:
    return json.dumps(rec.config, indent=2, sort_keys=True)


def fmt_time(t: float | None) -> str:
    return "" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def render_recommendations(runs: Any, *, names: Mapping[str, str] | None = None) -> int:
    """"Which method at my ε?": one line per (setting, ε) from finished runs
    (:func:`mixdp_core.evaluation.recommend.recommend`). Returns the number of lines drawn."""
    from ..evaluation.plots import METHOD_STYLE
    from ..evaluation.recommend import recommend

    recs = recommend(runs)
    if not recs:
        return 0
    names = dict(names or {m: v[0] for m, v in METHOD_STYLE.items()})
    st.markdown("**Which method at my ε?** (from the stored runs of this setting)")
    for r in recs:
        st.markdown("- " + r.sentence(names))
    return len(recs)


def cancel_button(manager: Any, job: Any, *, label: str, key: str, toast: str) -> None:
    """A Cancel button for an unfinished background ``job`` (nothing otherwise). Drawn in the
    page body, not in the job's polling fragment: a click there would wait for the fragment."""
    if job is not None and not job.finished and st.button(label, key=key, icon=":material/stop_circle:"):
        manager.cancel(job.job_id)
        st.toast(toast)


def render_episodes(manager: Any, settings: Mapping[str, Any], private: Sequence[str],
                    references: Sequence[str]) -> None:
    """The Compare page's episodes evaluation: a form (methods, ε, N-way, shots, episodes), a
    background job (:meth:`~.jobs.JobManager.submit_episodes`: the ``episodes`` figure), its
    progress, then the accuracy-vs-shots chart with 95 % intervals, the table and exports."""
    from . import forms

    st.caption("Each episode draws N classes of this data set, K rows per class as the **private** training "
               "set of one fit (at the ε below) and 15 other rows per class as its query set — the CD-FSL "
               "protocol of the sparse fine-tuning paper (Table 2). The public data are this data set's public "
               "split (held out of the episodes) or the public-from data set of the Data page.")
    with st.form("episodes_form"):
        chosen = st.multiselect("Methods", list(private) + list(references), key="ep_methods",
                                default=[m for m in ("adamix", "fully_private", "only_public") if m in
                                         list(private) + list(references)])
        c1, c2, c3, c4 = st.columns(4)
        eps = c1.selectbox("ε per fit", forms.EPSILON_GRID, index=forms.EPSILON_GRID.index(1.0)
                           if 1.0 in forms.EPSILON_GRID else 0, key="ep_eps", format_func=lambda v: f"{v:g}")
        n_way = c2.number_input("N-way", *forms.EPISODE_BOUNDS["n_way"], value=5, step=1, key="ep_way")
        shots = c3.multiselect("K shots", forms.EPISODE_SHOTS, default=[5, 20], key="ep_shots")
        n_ep = c4.number_input("Episodes", *forms.EPISODE_BOUNDS["episodes"], value=10, step=1, key="ep_n",
                               help="The paper uses 60; each episode fits every chosen method once per K.")
        go_ep = st.form_submit_button("Run episodes", type="primary", icon=":material/rocket_launch:")
    if go_ep:
        req, errs = forms.episodes_request(settings, methods=list(chosen), epsilon=float(eps), n_way=int(n_way),
                                           shots=[int(k) for k in shots], episodes=int(n_ep))
        if errs:
            show_field_errors(errs)
        else:
            try:
                st.session_state["episodes_job"] = manager.submit_episodes(req).job_id
            except MixDPError as e:
                st.error(str(e))
    if manager.get(st.session_state.get("episodes_job")) is None:  # a reload: this data's latest episodes job
        found = manager.find_episodes(forms.episodes_data(settings))
        if found is not None:
            st.session_state["episodes_job"] = found.job_id
    job = manager.get(st.session_state.get("episodes_job"))
    cancel_button(manager, job, label="Cancel episodes", key="ep_cancel",
                  toast="Cancellation requested; the episodes stop after the current cell.")

    @st.fragment(run_every=poll_seconds() if job is not None and not job.finished else None)
    def _results() -> None:
        j = manager.get(st.session_state.get("episodes_job"))
        if j is None:
            st.caption("Choose methods and shots, then run the episodes.")
            return
        p = j.feature_request["params"] if j.feature_request else {}
        if not j.finished:
            n, d = j.progress.get("cells"), j.progress.get("cells_done", 0)
            st.progress(d / n if n else 0.0, text=(f"{d} / {n} method × shot cells done" if n else
                                                    "preparing the episodes (features, public split) …"))
            return
        if j.error:
            st.error(f"The episodes failed: {j.error}")
            return
        if "result" not in j.progress:  # cancelled
            st.warning("The episodes were cancelled; nothing was written.")
            return
        rows = forms.episodes_rows(j.progress["result"])
        fig = charts.episodes_figure(rows, n_way=int(p.get("n_way", 5)), epsilon=float(p.get("epsilon", 1.0)))
        if fig is not None:
            show_chart(fig, key="ep_chart", name=f"episodes_{settings['dataset']}_{settings['encoder']}".replace(
                ":", "_").replace("/", "_"))
        st.dataframe(charts.episodes_table(rows), hide_index=True, key="ep_table")
        st.caption(f"{p.get('episodes')} episodes per cell; intervals are 95 % Student-t intervals over episodes (t · sample std / √n). Each fit "
                   "protects its own support set at the target ε; a row drawn into several episodes is not "
                   "covered jointly. **Owner's view, costs privacy if published:** the accuracies are measured on "
                   "this data set's rows and are not charged to its budget (an evaluation protocol, not a "
                   "private release).")
        if j.finished and st.session_state.get("ep_drawn") != j.job_id:
            st.session_state["ep_drawn"] = j.job_id
            st.rerun()

    _results()
