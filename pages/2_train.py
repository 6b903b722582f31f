"""Train: one run of a method at a chosen budget, with live charts and the final metrics.

The run shown is addressable: once a run is launched or opened, the URL carries
``?run=<run_id>``, and the page draws that run from the run store (live while it trains), so a
reload or a new browser session opening the URL shows it too.
"""

import dataclasses
import json

import streamlit as st

from mixdp_core.app_support import budget, forms
from mixdp_core.app_support.data import private_row_count, split_problem
from mixdp_core.app_support.resources import (
    data_settings, live_seconds, page_setup, note, poll_seconds, render_cancel, render_run, save_data_settings,
    run_eps_label, select_run, selected_run_id, show_field_errors,
)
from mixdp_core.data.datasets import carries_features
from mixdp_core.config import RUN_EPSILON, SEED_RANGE, parse_number
from mixdp_core.errors import ConfigError

manager = page_setup("Train")
store = manager.store
settings = data_settings()
methods = forms.method_classes()
encoders = forms.encoder_classes()

st.title("Train")

# ------------------------------------------------------------------ form
datasets = [d for d in forms.dataset_names() if d not in ("image_folder", "features")]
if settings["dataset"] not in datasets:
    datasets = [settings["dataset"]] + datasets
c1, c2, c3 = st.columns(3)
dataset = c1.selectbox("Dataset", datasets, index=datasets.index(settings["dataset"]), key="train_dataset",
                       help="Uploads and split settings: see the Data & encoder page.")
enc_names = list(encoders)
encoder = c2.selectbox("Encoder", enc_names, index=enc_names.index(settings["encoder"])
                       if settings["encoder"] in enc_names else 0, key="train_encoder",
                       format_func=lambda n: f"{n}" + ("" if encoders[n].offline else " (download)"),
                       disabled=carries_features(dataset),  # synthetic / .npz rows are the features
                       help="Not used for this dataset: its rows are already features." if carries_features(dataset)
                       else None)
names = list(methods)
method = c3.selectbox("Method", names, index=names.index("adamix") if "adamix" in names else 0, key="train_method",
                      format_func=lambda n: f"{n}" + ("" if methods[n].private else " (reads no private data)"
                                                      if not getattr(methods[n], "uses_private_data", True)
                                                      else " (non-private)"))
mcls = methods[method]
#: Network fine-tuning trains on the images themselves (flattened pixels), not on features.
needs_images = getattr(mcls, "family", "") == "finetune"
blocked = None
#: the Data page's loader options (synthetic) belong to the dataset they were set for
dataset_kwargs = dict(settings.get("dataset_kwargs") or {}) if dataset == settings["dataset"] else {}
bad_split = split_problem(dataset, public_per_class=int(settings["public_per_class"]),
                          imbalance_ratio=float(settings["imbalance_ratio"]), public_from=settings["public_from"],
                          seed=int(settings.get("seed", 0)), dataset_kwargs=dataset_kwargs)
# the split's private rows (owner's view, never released): the δ advice below reads it
n_private = None if bad_split else private_row_count(
    dataset, public_per_class=int(settings["public_per_class"]), imbalance_ratio=float(settings["imbalance_ratio"]),
    public_from=settings["public_from"], seed=int(settings.get("seed", 0)), dataset_kwargs=dataset_kwargs)
if bad_split:
    blocked = (f"The split settings cannot be made on `{dataset}`: **{bad_split[0]}**: {bad_split[1]}. "
               "Change them on the Data & encoder page.")
elif needs_images and dataset.startswith("features:"):
    blocked = (f"`{method}` fine-tunes a network on images, but `{dataset}` holds pre-extracted features "
               "only: choose an image dataset (e.g. digits) or a linear-head method.")
elif needs_images and encoder != "pixels":
    st.info(f"`{method}` fine-tunes a network on the images themselves: it runs on the `pixels` encoder "
            f"(not `{encoder}`).", icon=":material/info:")
    encoder = "pixels"
save_data_settings(dataset=dataset, encoder=encoder)
st.caption(f"**{method}**: {mcls.description}  \nPaper: {mcls.paper}")
st.caption(f"Split: {settings['public_per_class']} public samples per class · imbalance ratio "
           f"{settings['imbalance_ratio']:g}" + (f" · public from {settings['public_from']}" if settings["public_from"] else "")
           + " (change on the Data & encoder page)")
# the cap first, so that the budget line below already shows a cap just set or removed
with st.expander("Cap this data set's total ε"):
    st.caption("A cap refuses, before anything runs, every private run that would take this data set's total "
               "ε (basic composition, running runs charged at their target) above it. The same cap as "
               "`mixdp budget --cap`.")
    cap_cols = st.columns([2, 1, 1])
    cap_eps = cap_cols[0].number_input("Cap ε (total over all runs on this data set)", value=10.0, step=1.0,
                                       format="%g", key="budget_cap_eps", help="A number in [0.001, 10000].")
    if cap_cols[1].button("Set cap", key="budget_cap_set"):
        bad = forms.range_error(cap_eps, 0.001, 1e4, integer=False)
        if bad:  # no min / max on the widget: out of range it only outlined the box, and Set cap did nothing
            show_field_errors({"cap": bad})
        else:
            ok, msg = budget.set_dataset_cap(store, dataset, dataset_kwargs, float(cap_eps))
            (st.success if ok else st.error)(msg)
    if cap_cols[2].button("Remove cap", key="budget_cap_clear"):
        ok, msg = budget.set_dataset_cap(store, dataset, dataset_kwargs, None)
        (st.success if ok else st.error)(msg)
_budget_slot = st.empty()  # drawn again after a launch: the line before it was stale until a reload
_BUDGET_HELP = ("Every run on this data set charges it, whatever its split (`mixdp budget` lists the runs). "
                "Basic composition holds for runs chosen after seeing earlier results; the tight total assumes "
                "they were fixed in advance. See docs/privacy.md.")


def _draw_budget_line() -> None:
    _budget_slot.caption(budget.dataset_budget_line(store, dataset, dataset_kwargs), help=_BUDGET_HELP)


_draw_budget_line()

specs = forms.method_field_specs(method)
config_fields = {f for f in dataclasses.fields(mcls.config_cls)}
field_names = {f.name for f in config_fields}
sigma_default = next((f.default for f in config_fields if f.name == "noise_multiplier"), None)

# enter_to_submit=False: a launch spends privacy budget, so only the button may start one (Enter in
# the typed-ε field would otherwise submit the form and launch a run)
with st.form("train_form", enter_to_submit=False):
    a, b = st.columns([2, 1])
    with a:
        typed = str(st.session_state.get("train_eps_exact") or "").strip()
        try:  # a valid typed ε (as last submitted) is the one a launch uses
            typed_ok = typed and parse_number("epsilon", typed, float, RUN_EPSILON.requirement()) in RUN_EPSILON.range
        except ConfigError:
            typed_ok = False
        # one visible ε: the slider says when a typed ε overrides it. It stays movable: inside the
        # form the typed field is read only at Launch, so a disabled slider could not come back
        # when the field is cleared without launching a run first
        eps = st.select_slider("ε — privacy budget (log scale)"
                               + (f": not used while the exact ε below is filled (typed: {typed})" if typed_ok else ""),
                               options=forms.EPSILON_GRID, value=3.0,
                               key="train_eps", format_func=lambda v: f"{v:g}",
                               disabled=not mcls.private)
        # select_slider labels only its ends: a tick row under it names every stop.
        st.markdown(forms.slider_tick_row(forms.EPSILON_GRID, testid="eps-ticks"), unsafe_allow_html=True)
        exact = st.text_input("…or type an exact ε (optional)", key="train_eps_exact",
                              placeholder="e.g. 2.5", disabled=not mcls.private,
                              help="When filled, this ε is used and the slider above is ignored "
                                   "(the run's header shows the target ε it was launched with).")
    with b:
        delta = st.selectbox("δ", forms.DELTA_CHOICES, index=forms.DELTA_CHOICES.index(1e-5), key="train_delta",
                             format_func=lambda v: f"{v:.0e}",
                             help="Keep δ well below 1/n, n the private rows (What does δ mean? below)."
                             + (f" This split: n = {n_private:,} private rows (owner's view, not released), "
                                f"1/n ≈ {1 / n_private:.1e}." if n_private else ""))
        # no min / max: out of range, Launch did nothing and said nothing; the run's declaration checks it
        seed = st.number_input("Seed", value=0, step=1, key="train_seed", help=f"An integer in [{SEED_RANGE.lo}, {SEED_RANGE.hi}].")
    sigma = None
    if "noise_multiplier" in field_names:
        sigma = st.number_input("σ — noise multiplier (the number of steps T is calibrated to meet ε)",
                                min_value=0.0, value=float(sigma_default), step=1.0, key="train_sigma",
                                help="Noise std relative to the clip threshold. Larger σ → more, noisier steps.")
    if not mcls.private and not getattr(mcls, "uses_private_data", True):
        st.info("This reference method never reads the private data: its privacy loss is 0 (ε = 0), whatever "
                "the ε slider says.")
    elif not mcls.private:
        st.info("This is a non-private reference method: ε and δ do not apply (reported as ε = ∞).")
    adv_values = {}
    with st.expander("Advanced hyper-parameters"):
        for sp in specs:
            label = sp.name
            help_text = sp.help or None
            if sp.leaks_private:
                when = f" {sp.leak_condition}" if sp.leak_condition else ""
                # a switch that reads private data beyond the mechanism, or a value (e.g. noise
                # 'reproducible') that voids the guarantee: the help says which, from the declaration
                label = f":material/warning: {sp.name} — COSTS PRIVACY{when}" + (
                    ": looks at private data" if sp.kind == "bool" else "")
                help_text = sp.help or None  # the declared help and what the option costs
            k = f"adv_{method}_{sp.name}"
            if sp.kind == "bool":
                adv_values[sp.name] = st.checkbox(label, value=bool(sp.default), key=k, help=help_text)
            elif sp.kind == "choice":
                adv_values[sp.name] = st.selectbox(label, sp.choices, index=sp.choices.index(sp.default), key=k,
                                                   help=help_text)
            elif sp.kind in ("int", "float") and not sp.optional:
                if sp.kind == "int":
                    adv_values[sp.name] = int(st.number_input(label, value=int(sp.default), step=1, key=k,
                                                              help=help_text))
                else:
                    adv_values[sp.name] = float(st.number_input(label, value=float(sp.default), key=k,
                                                                format="%.6g", help=help_text))
            else:
                default = "" if sp.default is None else (
                    sp.default if isinstance(sp.default, str)
                    else json.dumps(list(sp.default) if isinstance(sp.default, tuple) else sp.default))
                txt = st.text_input(label + (f" (empty = {sp.none_means})" if sp.optional else ""), value=default, key=k,
                                    help=help_text)
                adv_values[sp.name] = ("__text__", sp, txt)
    launch = st.form_submit_button("Launch", type="primary", icon=":material/rocket_launch:",
                                   disabled=blocked is not None)
if blocked:
    st.warning(blocked, icon=":material/block:")

if launch and not blocked:
    errors = {}
    params = {}
    for name, v in adv_values.items():
        if isinstance(v, tuple) and v and v[0] == "__text__":
            try:
                v = forms.parse_text_value(v[1], v[2])
            except ConfigError as e:
                errors[e.field] = e.message
                continue
        params[name] = v
    target_eps = eps
    if exact.strip():
        try:
            target_eps = parse_number("epsilon", exact, float, RUN_EPSILON.requirement())
        except ConfigError as e:
            errors["epsilon"] = e.message
    params = forms.changed_params(method, params)
    if sigma is not None:
        if sigma <= 0:
            errors["noise_multiplier"] = f"must be > 0, got {sigma:g}"
        elif sigma != sigma_default:
            params["noise_multiplier"] = float(sigma)
    # every bad field in one click: the form's own checks above and the declarations' here
    cfg, more = forms.build_run_config(dict(
        dataset=dataset, encoder=encoder, method=method, seed=int(seed),
        target_epsilon=target_eps if mcls.private else 1.0, target_delta=delta,
        public_per_class=settings["public_per_class"], imbalance_ratio=settings["imbalance_ratio"],
        public_from=settings["public_from"], method_params=params, dataset_kwargs=dataset_kwargs,
        # the Data page's weights file applies to the encoder it was given for
        encoder_kwargs=dict(settings.get("encoder_kwargs") or {}) if encoder == settings["encoder"] else {}))
    errors = {**more, **errors}
    if errors:
        show_field_errors(errors)
    else:
        # said with the launch line, in its one element (below): a warning element of its own,
        # drawn on the launch's page run only, shifted the run view's nodes (see "the run's view")
        cautions = [c for c in (
            forms.epsilon_advice(target_eps) if mcls.private else None,
            forms.delta_advice(delta, n_private) if mcls.private else None,
            ("Optimistic tuning is on: this run looks at private data to pick hyper-parameters; its reported ε "
             "is the composition of every candidate run.") if params.get("optimistic_tuning") else None) if c]
        try:
            job = manager.submit_run(cfg, kind="train")
        except ConfigError as e:  # e.g. budget_cap: the data set's cap refuses the run before it starts
            show_field_errors({e.field: e.message})
            job = None
        if job is not None:
            st.session_state["train_job"] = job.job_id
            # one ε on screen: the one the run uses, said where the form is (a reference's launch
            # left the previous private launch's "Launched at ε = 3 (slider)." under the form)
            used = (f"Launched at ε = {target_eps:g}" + (f" — the typed value; the slider's {eps:g} was not used."
                                                         if exact.strip() else " (slider).")) if mcls.private else (
                f"Launched {method}, a reference method: the ε slider does not apply.")
            rid = manager.wait_run_id(job)
            # "Launched" only for a run that exists: a launch refused when its job started (the cap,
            # reached by another tab meanwhile) said "Launched at ε = 0.5" above its refusal
            if rid is None and job.finished:
                st.session_state.pop("train_used_eps", None)
            else:
                # a weak ε, a δ not below 1/n, optimistic tuning: said in the launch line's element
                # (one more element above the run's view shifted its nodes and left the previous
                # run's view on the page), and kept there while this run is followed
                st.session_state["train_used_eps"] = used + "".join(f" **{c}**" for c in cautions)
                st.session_state["train_used_eps_weak"] = bool(cautions)
            select_run(rid)  # the run id goes into the URL right away
            manager.wait_first_step(rid)  # first draw with a chart point (the run is pre-warmed: ~0.5 s)
            st.session_state["train_first_draw"] = rid  # this draw: only the charts with that point

if launch and not blocked:
    _draw_budget_line()  # the launched run is running (charged at its target) or already done

if st.session_state.get("train_used_eps"):
    (st.warning if st.session_state.get("train_used_eps_weak") else st.caption)(st.session_state["train_used_eps"])

# ------------------------------------------------------------------ follow the run
st.divider()
job = manager.get(st.session_state.get("train_job"))
url_run = selected_run_id()
if job is not None and url_run is not None and manager.current_run_id(job) not in (None, url_run):
    job = None  # the URL names another run (opened from Runs or a link): show that one
running = store.list_runs(status="running", limit=10)
others = [r for r in running if r.run_id != url_run]
# Below the divider, a fixed number of nodes (one box, one line, then follow()'s): a page run
# whose live view keeps the script running then replaces every node of the previous run's
# page, so nothing of it lingers (Streamlit keeps an earlier run's elements that were not
# redrawn yet until the script run ends). The box is emptied first (st.empty): its content
# varies.
with st.empty().container():
    if others:
        st.markdown("**Runs in progress on this server** (every run keeps going when you leave; open one to follow it):")
        cols = st.columns(min(3, len(others)))
        for i, r in enumerate(others):
            if cols[i % len(cols)].button(f"Open {r.run_id} · {r.method} · {run_eps_label(r)}",
                                          key=f"follow-{r.run_id}"):
                st.session_state.pop("train_job", None)
                select_run(r.run_id)
                st.rerun()
line = st.empty()  # "Launch a run…" or the running run's Cancel button
if job is None and url_run is None:
    line.caption("Launch a run to see its live charts here.")
    active = False
elif job is not None and not job.finished:
    active = True
else:
    try:
        active = store.get_run(url_run).status == "running"
    except Exception:
        active = False


@st.fragment(run_every=poll_seconds() if active else None)
def follow():
    j = manager.get(st.session_state.get("train_job"))
    rid = selected_run_id()
    box = st.empty().container()  # one node before the run's view (see above)
    if j is not None and (rid is None or rid == manager.current_run_id(j)):
        rid = manager.current_run_id(j) or rid
        if rid is None:
            if j.finished:
                box.error(f"The run could not start: {j.error}")
            else:
                p = j.progress
                if p.get("total"):
                    box.progress(p["done"] / p["total"], text=f"extracting features ({p.get('split')}): "
                                                              f"{p['done']} / {p['total']}")
                else:
                    box.info("Queued / preparing…")
            return
        p = j.progress if not j.finished else {}
        if p.get("total") and p.get("done", 0) < p["total"]:
            box.progress(p["done"] / p["total"], text=f"extracting features ({p.get('split')}): "
                                                      f"{p['done']} / {p['total']} images (cached for later runs)")
        if j.reused[0]:
            box.info("An identical completed run was found in the store and is shown instead of re-running.")
    if rid is None:
        return
    if st.query_params.get("run") != rid:
        st.query_params["run"] = rid
    if (st.session_state.get("train_cancel_for") != rid and st.session_state.get("train_rerun_for") != rid
            and any(r.run_id == rid for r in store.list_runs(status="running", limit=50))):
        # the page body drew no Cancel button for this run (its id came after the page's run,
        # e.g. queued behind other jobs): run the page once more so that it does
        st.session_state["train_rerun_for"] = rid
        st.rerun()
    first = st.session_state.pop("train_first_draw", None) == rid
    # while it trains, the server pushes redraws for a while (see live_seconds)
    status = render_run(manager, rid, key="train", first_draw=first, live_s=live_seconds())
    if status != "running" and active and st.session_state.get("train_drawn") != rid:
        st.session_state["train_drawn"] = rid
        st.rerun()  # finished: redraw once without polling


with st.sidebar:  # before follow(): its live redraws keep the script running a while
    note("epsilon", "What does ε mean?")
    note("delta", "What does δ mean?")
live_rid = (url_run or (manager.current_run_id(job) if job is not None else None)) if active else None
if live_rid is not None:
    with line:
        render_cancel(manager, live_rid, key="train")
st.session_state["train_cancel_for"] = live_rid  # (follow() checks it: see there)
follow()
