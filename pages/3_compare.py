"""Compare: methods × ε × seeds through the sweep engine; error vs ε, attack AUC vs error,
minority accuracy. The selection lives in the URL (shareable, survives a reload)."""

import streamlit as st

from mixdp_core.app_support import budget, charts, compare_url, forms
from mixdp_core.app_support.data import private_row_count
from mixdp_core.app_support.resources import (
    data_settings, encoder_label, page_setup, note, poll_seconds, render_episodes, render_recommendations, show_chart,
    show_field_errors, shown_id,
)
from mixdp_core.errors import ConfigError

manager = page_setup("Compare")
store = manager.store
settings = data_settings()
methods = forms.method_classes()
SEED_CHOICES = list(range(10))

private = [n for n, c in methods.items() if c.private]
references = [n for n, c in methods.items() if not c.private and c.uses_private_data is not None
              and not c.needs_text]
# AdaMix against Fully-Private: what the public data buy (the paper's comparison). Not AdaMix
# against NGD: both end with the public-start guard, and where it keeps the public start in both
# the two runs are the same model.
default_methods = [m for m in ("adamix", "fully_private") if m in private] or private[:2]

# A shared / reloaded URL pre-fills the selection (once per distinct URL in this session).
query = st.query_params.to_dict()
if query and st.session_state.get("cmp_url_applied") != query:
    sel, bad = compare_url.from_query(query, methods=private, epsilons=forms.EPSILON_GRID,
                                      deltas=forms.DELTA_CHOICES, max_seed=SEED_CHOICES[-1])
    for key, field in (("dataset", "dataset"), ("encoder", "encoder"), ("ppc", "public_per_class"),
                       ("ir", "imbalance_ratio")):
        if key in sel:
            settings[field] = sel[key]
    if "dataset" in sel and "dataset" not in bad:
        # a link states the whole data setting: its loader options and public source, or none
        # (the session's synthetic options were kept for digits: "classes: not an option of 'digits'")
        settings["dataset_kwargs"] = dict(sel.get("dkw") or {})
        settings["public_from"] = sel.get("pf")
    for key, widget in (("methods", "cmp_methods"), ("epsilons", "cmp_eps"), ("seeds", "cmp_seeds"),
                        ("delta", "cmp_delta"), ("refs", "cmp_refs")):
        if key in sel:
            st.session_state[widget] = sel[key]
    # kept for every rerun of this URL: drawn once, the notice vanished when the page reran at once
    # (following an earlier comparison's job)
    st.session_state["cmp_url_bad"] = (query, ("Ignored invalid link parameter(s): " + "; ".join(
        f"{k} = {shown_id(query.get(k), 40)} (must be "
        f"{compare_url.allowed(k, epsilons=forms.EPSILON_GRID, deltas=forms.DELTA_CHOICES, max_seed=SEED_CHOICES[-1])})"
        for k in bad) + ".") if bad else None)
    st.session_state["cmp_url_applied"] = query
_bad_link = st.session_state.get("cmp_url_bad")
if _bad_link and _bad_link[1] and _bad_link[0] == query:
    st.warning(_bad_link[1])

st.title("Compare methods")
st.markdown(f"On **{settings['dataset']}** · **{encoder_label(settings['dataset'], settings['encoder'])}** · {settings['public_per_class']} public "
            f"samples per class · imbalance ratio {settings['imbalance_ratio']:g} (change on *Data & encoder*). "
            "Finished identical runs are reused from the store, so re-launching only runs what is missing; "
            "the link in the address bar reopens this comparison.")
mode = st.radio("Evaluate on", ["the test split (runs kept in the store)", "few-shot episodes (N-way K-shot)"],
                horizontal=True, key="cmp_mode",
                help="Episodes: the CD-FSL protocol (many small tasks drawn from this data set, each fit on K "
                     "rows per class as its private data), mean ± 95 % interval over episodes.")
if mode.startswith("few-shot"):
    render_episodes(manager, settings, private, references)
    st.stop()



def _default(key: str, value):
    """A widget default, unless the URL already put a value in the session state."""
    return {} if key in st.session_state else {("value" if key == "cmp_refs" else
                                                 "index" if key == "cmp_delta" else "default"): value}


# No form: the widgets update the run count and the cost below as they change, so what is shown
# before the launch is what the launch spends (inside a form the preview showed the last
# submitted selection: 10 runs and ε 25 shown, 30 runs and ε 75 spent). Only the button launches.
chosen = st.multiselect("Private methods", private, key="cmp_methods", **_default("cmp_methods", default_methods),
                        format_func=lambda n: f"{n} — {methods[n].description}")
eps_values = st.multiselect("ε values", forms.EPSILON_GRID, key="cmp_eps",
                            **_default("cmp_eps", [0.5, 1.0, 3.0, 8.0]), format_func=lambda v: f"{v:g}")
c1, c2, c3 = st.columns(3)
seeds = c1.multiselect("Seeds", SEED_CHOICES, key="cmp_seeds", **_default("cmp_seeds", [0]),
                       help="One run per seed and point; charts show mean ± std over seeds.")
delta = c2.selectbox("δ", forms.DELTA_CHOICES, key="cmp_delta",
                     **_default("cmp_delta", forms.DELTA_CHOICES.index(1e-5)), format_func=lambda v: f"{v:.0e}")
_n_private = private_row_count(
    settings["dataset"], public_per_class=int(settings["public_per_class"]),
    imbalance_ratio=float(settings["imbalance_ratio"]), public_from=settings["public_from"],
    seed=int(settings.get("seed", 0)), dataset_kwargs=dict(settings.get("dataset_kwargs") or {}))
_delta_advice = forms.delta_advice(delta, _n_private)  # owner's view of the private row count, never released
if _delta_advice:
    st.warning(_delta_advice, icon=":material/warning:")
with_refs = c3.checkbox(f"Reference lines ({', '.join(references)})", key="cmp_refs",
                        **_default("cmp_refs", True),
                        help="Non-private paragon (all data, no privacy) and only-public (private data unused).")


# the grid, expanded like `mixdp sweep` (references at a canonical ε they ignore: reused across comparisons)
configs, errors = forms.compare_configs(settings, methods=list(chosen), epsilons=[float(e) for e in eps_values],
                                        seeds=list(seeds), delta=delta, references=list(references) if with_refs else [])


def _selection() -> dict:
    return {"dataset": settings["dataset"], "encoder": settings["encoder"], "methods": list(chosen),
            "epsilons": sorted(float(e) for e in eps_values), "seeds": sorted(int(x) for x in seeds),
            "delta": float(delta), "refs": bool(with_refs), "ppc": int(settings["public_per_class"]),
            "ir": float(settings["imbalance_ratio"]),
            "dkw": {k: v for k, v in dict(settings.get("dataset_kwargs") or {}).items() if k != "root"},
            "pf": settings.get("public_from")}


if errors:
    show_field_errors(errors)
    st.button("Run comparison", type="primary", icon=":material/rocket_launch:", key="cmp_launch", disabled=True)
else:
    hashes = [c.config_hash() for c in configs]
    stored = sum(store.find_completed(h) is not None for h in hashes)
    st.caption(f"{len(configs)} runs in this comparison, {stored} already stored.")
    cost = budget.grid_cost_line(store, configs)  # what the launch would spend, before it
    if cost:
        st.caption(cost)
    launch = st.button("Run comparison", type="primary", icon=":material/rocket_launch:", key="cmp_launch")
    if manager.get(st.session_state.get("compare_job")) is None:
        # a new session (reload, shared link, reconnected socket) of a comparison launched
        # earlier on this server: follow that job's progress rather than only the stored runs
        earlier = manager.find_sweep(hashes, kind="compare")
        if earlier is not None:
            st.session_state["compare_job"] = earlier.job_id
    if launch:
        try:
            job = manager.submit_sweep(configs, kind="compare", reuse=True)
        except ConfigError as e:  # e.g. budget_cap: the grid would take the data set above its cap
            show_field_errors({e.field: e.message})
        else:
            st.session_state["compare_job"] = job.job_id
            # the comparison becomes addressable: share or reload this URL
            st.query_params.from_dict(compare_url.to_query(_selection()))
            st.session_state["cmp_url_applied"] = st.query_params.to_dict()

job = manager.get(st.session_state.get("compare_job"))


@st.fragment(run_every=poll_seconds() if job is not None and not job.finished else None)
def results():
    j = manager.get(st.session_state.get("compare_job"))
    if j is not None and not j.finished:
        n = len(j.configs)
        st.progress(j.n_done / max(1, n), text=f"{j.n_done} / {n} runs finished "
                    f"({sum(j.reused)} reused) on the {manager.sweep_backend} executor; results appear as runs finish")
        if st.button("Cancel comparison", key="cmp_cancel"):
            manager.cancel(j.job_id)
    elif j is not None and any(j.errors):
        for cfg, err in zip(j.configs, j.errors):
            if err:
                st.error(f"{cfg.method} ε={cfg.target_epsilon:g} seed {cfg.seed}: {err}")
    if errors or not configs:
        return
    runs = [store.find_completed(c.config_hash()) for c in configs]
    runs = [r for r in runs if r is not None]
    if not runs:
        st.caption("No finished runs for this selection yet.")
        return
    rows = charts.aggregate_runs(runs)
    # "Which method at my ε?": one line per ε (library: evaluation.recommend); a winner is
    # named only when its lead is beyond seed noise.
    render_recommendations(runs)
    sel = _selection()
    tag = f"{sel['dataset']}_{sel['encoder']}"
    a, b = st.columns(2)
    with a:
        show_chart(charts.metric_vs_epsilon(rows, "test_error", "Test error vs ε", "test error"),
                   key="cmp_err", name=f"compare_{tag}_test_error")
    with b:
        show_chart(charts.auc_vs_error_figure(rows), key="cmp_auc", name=f"compare_{tag}_attack_auc")
    if any(r.get("minority_accuracy_mean") is not None for r in rows):  # only when there is a minority
        with a:
            show_chart(charts.metric_vs_epsilon(rows, "minority_accuracy", "Minority-class accuracy vs ε",
                                                "minority-class accuracy"), key="cmp_min",
                       name=f"compare_{tag}_minority_accuracy")
    else:
        a.caption("No minority-class accuracy: at imbalance ratio 1 no class is a minority.")
    with b:
        st.dataframe(charts.compare_table(rows), hide_index=True, key="cmp_table")
        note("attack_auc", "What is attack AUC?")
        note("epsilon", "What does ε mean?")
    if j is not None and j.finished and st.session_state.get("cmp_drawn") != j.job_id:
        st.session_state["cmp_drawn"] = j.job_id
        st.rerun()


results()
