"""Compare: methods × ε × seeds in the background; error vs ε, attack AUC vs error, minority accuracy."""

import streamlit as st

from mixdp_core.app_support import charts, forms
from mixdp_core.app_support.resources import data_settings, page_setup, note, poll_seconds, show_field_errors

manager = page_setup("Compare")
store = manager.store
settings = data_settings()
methods = forms.method_classes()

st.title("Compare methods")
st.markdown(f"On **{settings['dataset']}** · **{settings['encoder']}** · {settings['public_per_class']} public "
            f"samples per class · imbalance ratio {settings['imbalance_ratio']:g} (change on *Data & encoder*). "
            "Finished identical runs are reused from the store, so re-launching only runs what is missing.")

private = [n for n, c in methods.items() if c.private]
references = [n for n, c in methods.items() if not c.private and c.uses_private_data is not None
              and not c.needs_text]
default_methods = [m for m in ("adamix", "ngd") if m in private] or private[:2]
with st.form("compare_form"):
    chosen = st.multiselect("Private methods", private, default=default_methods, key="cmp_methods",
                            format_func=lambda n: f"{n} — {methods[n].description}")
    eps_values = st.multiselect("ε values", forms.EPSILON_GRID, default=[0.5, 1.0, 3.0, 8.0], key="cmp_eps",
                                format_func=lambda v: f"{v:g}")
    c1, c2, c3 = st.columns(3)
    n_seeds = c1.number_input("Seeds per point", min_value=1, max_value=10, value=1, step=1, key="cmp_seeds")
    delta = c2.selectbox("δ", forms.DELTA_CHOICES, index=forms.DELTA_CHOICES.index(1e-5), key="cmp_delta",
                         format_func=lambda v: f"{v:.0e}")
    with_refs = c3.checkbox(f"Reference lines ({', '.join(references)})", value=True, key="cmp_refs",
                            help="Non-private paragon (all data, no privacy) and only-public (private data unused).")
    launch = st.form_submit_button("Run comparison", type="primary", icon=":material/rocket_launch:")


def _configs():
    """The RunConfigs of the current selection (non-private references at a canonical ε=1,
    which they ignore, so they are reused across comparisons)."""
    cfgs, errors = [], {}
    if not chosen:
        errors["methods"] = "choose at least one method"
    if not eps_values:
        errors["epsilon"] = "choose at least one ε value"
    if errors:
        return [], errors
    base = dict(dataset=settings["dataset"], encoder=settings["encoder"], target_delta=delta,
                public_per_class=settings["public_per_class"], imbalance_ratio=settings["imbalance_ratio"],
                public_from=settings["public_from"])
    for seed in range(int(n_seeds)):
        if with_refs:
            for m in references:
                cfg, err = forms.build_run_config(dict(base, method=m, seed=seed, target_epsilon=1.0))
                if err:
                    return [], err
                cfgs.append(cfg)
        for m in chosen:
            for e in sorted(eps_values):
                cfg, err = forms.build_run_config(dict(base, method=m, seed=seed, target_epsilon=float(e)))
                if err:
                    return [], {k: f"{m}: {v}" for k, v in err.items()}
                cfgs.append(cfg)
    return cfgs, {}


configs, errors = _configs()
if errors:
    show_field_errors(errors)
else:
    hashes = [c.config_hash() for c in configs]
    stored = sum(store.find_completed(h) is not None for h in hashes)
    st.caption(f"{len(configs)} runs in this comparison, {stored} already stored.")
    if launch:
        job = manager.submit_sweep(configs, kind="compare", reuse=True)
        st.session_state["compare_job"] = job.job_id

job = manager.get(st.session_state.get("compare_job"))


@st.fragment(run_every=poll_seconds() if job is not None and not job.finished else None)
def results():
    j = manager.get(st.session_state.get("compare_job"))
    if j is not None and not j.finished:
        st.progress(j.n_done / max(1, len(j.configs)),
                    text=f"running {j.n_done + 1} / {len(j.configs)}: "
                         f"{j.configs[min(j.current, len(j.configs) - 1)].method} "
                         f"ε={j.configs[min(j.current, len(j.configs) - 1)].target_epsilon:g}")
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
    for s in charts.best_method_sentences(rows):
        st.markdown("- " + s)
    a, b = st.columns(2)
    a.plotly_chart(charts.metric_vs_epsilon(rows, "test_error", "Test error vs ε", "test error"),
                   key="cmp_err", width="stretch", config=charts.PLOTLY_CONFIG)
    b.plotly_chart(charts.auc_vs_error_figure(rows), key="cmp_auc", width="stretch", config=charts.PLOTLY_CONFIG)
    a.plotly_chart(charts.metric_vs_epsilon(rows, "minority_accuracy", "Minority-class accuracy vs ε",
                                            "minority-class accuracy"), key="cmp_min", width="stretch", config=charts.PLOTLY_CONFIG)
    with b:
        st.dataframe([{"method": r["method"], "ε": "∞" if r["epsilon"] is None else f"{r['epsilon']:g}",
                       "seeds": r["n"], "test error": r["test_error_mean"], "attack AUC": r["mia_auc_mean"],
                       "minority acc.": r["minority_accuracy_mean"]} for r in rows],
                     hide_index=True, key="cmp_table",
                     column_config={c: st.column_config.NumberColumn(format="%.3f")
                                    for c in ("test error", "attack AUC", "minority acc.")})
        note("attack_auc", "What is attack AUC?")
        note("epsilon", "What does ε mean?")
    if j is not None and j.finished and st.session_state.get("cmp_drawn") != j.job_id:
        st.session_state["cmp_drawn"] = j.job_id
        st.rerun()


results()
# "Which method at my ε?": one line per ε from the stored runs of this setting (library: evaluation.recommend).
if not errors and configs:
    from mixdp_core.app_support.resources import render_recommendations

    render_recommendations([r for r in (store.find_completed(c.config_hash()) for c in configs) if r is not None])
