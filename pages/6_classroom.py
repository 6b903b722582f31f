"""Classroom: what ε means, in five projector-ready steps on offline data (digits, or a
synthetic many-class regime the teacher dials: classes, rows per class, class imbalance).

One ε slider drives every step; trainings are precomputed on a small ε grid in the
background (:class:`mixdp_core.app_support.classroom.LessonCache`), so each step draws in
about a second. No algorithm code here: see ``mixdp_core.app_support.classroom``.
"""

import streamlit as st

from mixdp_core import accounting
from mixdp_core.app_support import charts, forms
from mixdp_core.app_support.classroom import (
    DEFAULT_LESSON, LESSON_ALIASES, LESSON_DATA, LESSON_DELTA, LESSON_EPSILONS, Lesson, LessonCache, difference_note,
    guard_note, long_tail_note, noisy_class_means, pdp_spread_note, report_object,
)
from mixdp_core.config import describe
from mixdp_core.app_support.resources import page_setup, show_chart

manager = page_setup("Classroom")
# Projector: big type, no sidebar clutter (the sidebar stays one click away).
st.markdown("""<style>
[data-testid="stSidebar"][aria-expanded="true"] {min-width: 0; width: 14rem;}
.stMarkdown p, .stMarkdown li {font-size: 1.45rem; line-height: 1.5;}
h1 {font-size: 3rem !important;} h2 {font-size: 2.2rem !important;}
[data-testid="stSelectSlider"] p {font-size: 1.3rem;}
</style>""", unsafe_allow_html=True)

STEPS = ("1 · The noise", "2 · The accuracy lost", "3 · The best attack", "4 · Each person's loss",
         "5 · A few public samples")


@st.cache_resource(show_spinner=False, max_entries=4)
def lesson(data: Lesson) -> LessonCache:
    return LessonCache(lesson=data)


@st.cache_data(show_spinner=False, max_entries=32)
def _means(eps: float, data: Lesson):
    return noisy_class_means(eps, lesson=data)


#: The imbalance dial's stops (the field's declared range is 1 to 100).
IMBALANCE_STOPS = (1, 2, 5, 10, 20, 50, 100)


def big(fig, height: int = 520):
    """Classroom sizes for a projector. A legend placed under the plot (the charts' own layout)
    keeps its rows' room, scaled to the larger font; the title's subtitle gets room above the
    plot (it sat on the 100 % tick)."""
    below = fig.layout.legend.yref == "container"
    extra = int(round((fig.layout.margin.b or 60) - 55) * 18 / 12) if below else 0
    fig.update_layout(font=dict(size=20), title_font=dict(size=26), height=height + max(extra, 0),
                      legend=dict(font=dict(size=18)),
                      margin=dict(l=70, r=30, t=110 if fig.layout.title.subtitle.text else 80, b=60 + max(extra, 0)))
    return fig


st.title("Classroom: what does ε mean?")
q = st.query_params
data0 = LESSON_ALIASES.get(q.get("data"), q.get("data"))
data0 = data0 if data0 in LESSON_DATA else DEFAULT_LESSON
data = st.radio("Data", list(LESSON_DATA), index=list(LESSON_DATA).index(data0), horizontal=True, key="class_data",
                help="digits: 8×8 handwritten digits (offline). many classes: a synthetic few-shot regime (100 "
                     "classes by default, dial them below) where private data are scarce per class — the regime "
                     "most users meet.")
spec = {f.name: f for f in describe(Lesson)}
base = Lesson(data=data)


def _dial(name: str) -> int | float:
    """The URL's value of a dial if it is one the slider offers, else the field's default."""
    try:
        v = type(getattr(base, name))(q.get(name, getattr(base, name)))
    except (TypeError, ValueError):
        return getattr(base, name)
    return v if spec[name].range is None or v in spec[name].range else getattr(base, name)


dials = {}
with st.expander("Dial the lesson: class imbalance" + (", classes, rows per class" if base.synthetic else ""),
                 expanded=any(k in q for k in ("imbalance_ratio", "classes", "train_per_class"))):
    ir0 = _dial("imbalance_ratio")
    dials["imbalance_ratio"] = float(st.select_slider(
        "Class imbalance of the private data (largest ÷ smallest class)", options=IMBALANCE_STOPS,
        value=min(IMBALANCE_STOPS, key=lambda v: abs(v - ir0)), key="class_ir", help=spec["imbalance_ratio"].help))
    if base.synthetic:
        for name, label, step in (("classes", "Classes", 10), ("train_per_class", "Training rows per class", 10)):
            r = spec[name].range
            dials[name] = int(st.slider(label, int(r.lo), int(r.hi), int(_dial(name)), step=step,
                                        key=f"class_{name}", help=spec[name].help))
les = Lesson(data=data, **dials)
st.markdown(les.describe() + " Move **ε**, the privacy budget, and walk through five steps. "
            "Smaller ε = stronger privacy.")
eps0 = float(q.get("eps", 1.0)) if q.get("eps") in [f"{e:g}" for e in LESSON_EPSILONS] else 1.0
# The browser's Back / Forward: the URL differs from the one this page last wrote, and then the URL
# wins over the widgets' session state (Back showed step 2 for a moment, then the page wrote step 3
# again: the user was stuck)
OWN = ("eps", "step", "data", "imbalance_ratio", "classes", "train_per_class")
_moved = (st.session_state.get("class_url_written") is not None
          and {n: q[n] for n in OWN if n in q} != st.session_state["class_url_written"])
if _moved:
    st.session_state["class_eps"] = eps0
eps = st.select_slider("ε — privacy budget", options=list(LESSON_EPSILONS), value=eps0, key="class_eps",
                       format_func=lambda v: f"{v:g}")
st.markdown(forms.slider_tick_row(list(LESSON_EPSILONS), testid="class-eps-ticks", font_size="1.2rem",
                                  margin="-0.8rem 0 0.6rem 0"), unsafe_allow_html=True)
step0 = int(q.get("step", 1)) if str(q.get("step", "1")).isdigit() and 1 <= int(q.get("step", 1)) <= 5 else 1
if "class_step" not in st.session_state or _moved:
    st.session_state["class_step"] = STEPS[step0 - 1]  # from the URL (?step=), then the widget's own
step = st.segmented_control("Step", STEPS, key="class_step") or STEPS[0]
k = STEPS.index(step) + 1
# The URL carries what differs from the defaults, so a shared link opens the same lesson.
url = {"eps": f"{eps:g}", "step": str(k), **({"data": data} if data != DEFAULT_LESSON else {}),
       **{n: f"{getattr(les, n):g}" for n in dials if getattr(les, n) != getattr(base, n)}}
if {n: q[n] for n in OWN if n in q} != url:
    for n in [n for n in OWN if n in q and n not in url]:  # a dial back at its default leaves the URL
        del st.query_params[n]
    st.query_params.update(url)
st.session_state["class_url_written"] = dict(url)

cache = lesson(les)
# A dial moved: the lesson left behind stops training (it resumes if anyone opens it again).
prev = st.session_state.get("class_cache")
if prev is not None and prev is not cache:
    prev.stop(timeout=0)
st.session_state["class_cache"] = cache
cache.start(priority_epsilon=eps)


IMBALANCED = les.imbalance_ratio > 1


def _rows(methods, metric: str) -> list[dict]:
    """The lesson's ready trainings as chart rows of ``metric`` (one training per ε: no std)."""
    rows = [{"method": m, "epsilon": e, "n": 1, f"{metric}_mean": r[metric], f"{metric}_std": 0.0}
            for m in methods if m != "paragon" for e in LESSON_EPSILONS if (r := cache.get(m, e)) is not None]
    if "paragon" in methods and (par := cache.get("paragon", None)) is not None:
        rows.append({"method": "paragon", "epsilon": None, "n": 1, f"{metric}_mean": par[metric],
                     f"{metric}_std": 0.0})
    return rows


def _balance_note(r: dict) -> str:
    """Balanced and minority-class accuracy of one training, in words (imbalanced lessons)."""
    return (f" Balanced accuracy (each class counts the same) **{100 * r['balanced_accuracy']:.1f} %**; on the "
            f"minority classes (the tail's last quarter) **{100 * r['minority_accuracy']:.1f} %**.")


@st.fragment(run_every=1.0 if not cache.done else None)
def show_step():
    # The step from the widget's state, not the ``k`` of the full run that defined this
    # fragment: if a full run started by a click is interrupted before it redefines the
    # fragment, a timed run of the older definition would redraw the step before the click
    # under the new one's selected button (seen once in the browser walk: "4" selected, step 3
    # drawn, nothing redrawing it once every training was ready).
    k = STEPS.index(st.session_state.get("class_step") or STEPS[0]) + 1
    if not cache.done:
        cache.start(priority_epsilon=eps)  # no-op while it trains; resumes it if another session stopped it
    run = cache.get("adamix", eps)
    if k == 1:
        d = _means(eps, les)
        st.header("Step 1 — The noise added")
        unit, item = ("class", "rows") if les.synthetic else ("digit", "images")
        st.markdown(f"To publish the **average {item[:-1] if les.synthetic else 'image'} of each {unit}** with "
                    f"ε = {eps:g}, the Gaussian mechanism publishes each {unit}'s **sum of {item}** and its "
                    f"**number of {item}**, each with noise of "
                    f"standard deviation **σ = {d['sigma']:.2f}** times what one person can change "
                    f"(σ from the accounting module at δ = {LESSON_DELTA:g}); the published average is the noisy "
                    "sum divided by the noisy count."
                    + ("" if les.synthetic else " Top: the true averages. Bottom: what is published."))
        st.caption(d["mechanism"])
        if d["clean"].ndim == 3:  # images: draw them
            imgs = {n: [d["clean"][c], d["noisy"][c]] for c, n in enumerate(d["class_names"])}
            fig = charts.sample_grid_figure(imgs, title=f"True (top) vs published (bottom) class averages at ε = {eps:g} "
                                                        "(the true ones: owner's view, not private)")
            st.plotly_chart(big(fig, 360), key="class_noise", width="stretch", config=charts.LIVE_CONFIG)
        else:  # feature rows: how far the noise moves each average, against what separates two classes
            fig = charts.noise_vs_separation_figure(d["error_norm"], d["mean_distance"], epsilon=eps,
                                                    minority=d["minority"])
            show_chart(big(fig, 420), key="class_noise", name="classroom_noise")
            import numpy as np

            st.markdown(f"At ε = {eps:g} the noise moves a published class average by **{np.median(d['error_norm']):.2g}** "
                        f"(median), while two true class averages lie **{d['mean_distance']:.2g}** apart: "
                        + ("the noise is larger than what tells the classes apart." if np.median(d["error_norm"])
                           > d["mean_distance"] else "the classes stay apart.")
                        + " *(Owner's view, not private: the true averages are the private rows'.)*")
        if d["minority"]:
            st.markdown(long_tail_note(d["counts"], d["error_norm"], d["minority"]) + " *(Owner's view, not private.)*")
        return
    if run is None:
        st.info(f"Training at ε = {eps:g} … (a few seconds; the lesson's trainings run in the background)")
        return
    report = report_object(run["report"])
    if k == 2:
        st.header("Step 2 — The accuracy lost")
        rows = _rows(("adamix", "paragon"), "test_error")
        par = cache.get("paragon", None)
        fig = charts.metric_vs_epsilon(rows, "test_error", "Test error vs ε", "test error")
        fig.add_scatter(x=[eps], y=[run["test_error"]], mode="markers", name=f"your ε = {eps:g}",
                        marker=dict(size=22, color="#d62728", symbol="star"))
        show_chart(big(fig), key="class_acc", name="classroom_accuracy")
        msg = f"At ε = {eps:g} the private model misclassifies **{100 * run['test_error']:.1f} %** of test samples"
        if par is not None:
            msg += f"; without privacy: **{100 * par['test_error']:.1f} %**"
            note_ = difference_note(run["test_error"], par["test_error"], run.get("n_test", 0))
            msg += (". " + note_[1:-1]) if note_ else ""
        st.markdown(msg + "." + guard_note(run) + (_balance_note(run) if IMBALANCED else ""))
        if IMBALANCED:
            fig = charts.metric_vs_epsilon(_rows(("adamix", "paragon"), "balanced_accuracy"),
                                           "balanced_accuracy", "Balanced accuracy vs ε (every class counts the same)",
                                           "balanced accuracy")
            show_chart(big(fig), key="class_balanced", name="classroom_balanced_accuracy")
    elif k == 3:
        st.header("Step 3 — The best possible attack")
        curves = [(f"ε = {eps:g} (this run)", report)]
        if eps != LESSON_EPSILONS[-1] and cache.get("adamix", LESSON_EPSILONS[-1]) is not None:
            curves.append((f"ε = {LESSON_EPSILONS[-1]:g}", report_object(cache.get("adamix", LESSON_EPSILONS[-1])["report"])))
        fig = charts.tradeoff_figure(curves, fpr_mark=0.01,
                                     title="Best membership attack any attacker can build (theory bound)")
        show_chart(big(fig, 560), key="class_attack", name="classroom_attack")
        st.markdown(accounting.tradeoff_sentence(report, 0.01) + " " + accounting.tradeoff_sentence(report, 0.1))
    elif k == 4:
        st.header("Step 4 — Each person's privacy loss")
        e_i = run["pdp_epsilon"]
        if e_i is None:
            st.info("No per-instance accounting for this method.")
        else:
            fig = charts.pdp_hist_figure(e_i, run["report"]["epsilon"])
            fig.update_layout(title=f"Per-person ε at ε = {eps:g} (owner's view, not private)")
            show_chart(big(fig), key="class_pdp", name="classroom_pdp")
            import numpy as np

            med = float(np.median(e_i))
            st.markdown(f"The guarantee is **ε = {run['report']['epsilon']:.3g}** for everyone, a worst case. "
                        f"What each {'row' if les.synthetic else 'digit'} actually lost varies: median **{med:.3g}** "
                        f"({100 * med / run['report']['epsilon']:.0f} % of the budget), smallest "
                        f"**{float(np.min(e_i)):.3g}**. " + pdp_spread_note(e_i, run["report"]["epsilon"]))
    elif k == 5:
        st.header("Step 5 — What a few public samples change")
        fig = charts.metric_vs_epsilon(_rows(("fully_private", "adamix"), "test_error"), "test_error",
                                       "No public data vs 5 public samples per class", "test error")
        show_chart(big(fig), key="class_public", name="classroom_public")
        if IMBALANCED:
            fig = charts.metric_vs_epsilon(_rows(("fully_private", "adamix"), "balanced_accuracy"),
                                           "balanced_accuracy", "Balanced accuracy: no public data vs 5 public "
                                           "samples per class", "balanced accuracy")
            show_chart(big(fig), key="class_public_balanced", name="classroom_public_balanced_accuracy")
        fp = cache.get("fully_private", eps)
        if fp is not None:
            st.markdown(f"At ε = {eps:g}: **{100 * fp['test_error']:.1f} %** error with private data only, "
                        f"**{100 * run['test_error']:.1f} %** when {run['n_public']} public samples "
                        "(no privacy needed) guide the private learner." + guard_note(run)
                        + difference_note(fp["test_error"], run["test_error"], run.get("n_test", 0))
                        + (f" Balanced accuracy **{100 * fp['balanced_accuracy']:.1f} %** against "
                           f"**{100 * run['balanced_accuracy']:.1f} %**." if IMBALANCED else ""))
    if not cache.done:
        st.caption(f"{len(cache.results)} / {len(cache.keys())} lesson trainings ready…")
    elif not st.session_state.get("class_all_drawn"):
        st.session_state["class_all_drawn"] = True
        st.rerun()  # everything ready: redraw once and stop polling


show_step()
def _go(n: int) -> None:
    st.session_state["class_step"] = STEPS[n - 1]


c1, _, c2 = st.columns([1, 4, 1])
if k > 1:
    c1.button("← Previous step", key="class_prev", on_click=_go, args=(k - 1,))
if k < 5:
    c2.button("Next step →", key="class_next", type="primary", on_click=_go, args=(k + 1,))
