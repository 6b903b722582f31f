"""Privacy audit: per-instance ε of a run, membership-attack ROC, and the run's δ(ε) curve."""

import streamlit as st

from mixdp_core.app_support import charts
from mixdp_core.app_support.resources import page_setup, note, run_label, select_run, selected_run_id

manager = page_setup("Privacy audit")
store = manager.store

st.title("Privacy audit")
runs = store.list_runs(status=["completed", "cancelled"], limit=500)
runs = [r for r in runs if r.metrics.get("test_error") is not None]
if not runs:
    st.info("No finished run yet. Launch one on the *Train* page (or the demo on *Home*).")
    st.stop()
ids = [r.run_id for r in runs]
by_id = {r.run_id: r for r in runs}
sel = selected_run_id()
rid = st.selectbox("Run", ids, index=ids.index(sel) if sel in ids else 0, key="audit_run",
                   format_func=lambda i: run_label(by_id[i]))
if rid != sel:
    select_run(rid)
rec = by_id[rid]
m = rec.metrics
arrays = store.load_artifacts(rid)
target = rec.target_epsilon if m.get("private") else None

st.markdown(f"**{rec.method}** on {rec.dataset} · {rec.encoder}: test error {100 * m['test_error']:.1f} %, "
            + (f"ε = {m['epsilon']:.3g} at δ = {m['delta']:.0e}" if m.get("epsilon") is not None
               else "no DP guarantee (ε = ∞)" if m.get("method") not in ("only_public", "zero_shot")
               else "private data never read"))

st.subheader("Per-instance privacy")
eps_i = arrays.get("pdp_epsilon")
if eps_i is not None and len(eps_i):
    a, b = st.columns(2)
    a.plotly_chart(charts.pdp_sorted_figure(eps_i, target), key="audit_pdp_sorted", width="stretch", config=charts.PLOTLY_CONFIG)
    b.plotly_chart(charts.pdp_hist_figure(eps_i, target), key="audit_pdp_hist", width="stretch", config=charts.PLOTLY_CONFIG)
    st.caption(f"{len(eps_i)} private samples: median ε_i {m.get('pdp_epsilon_median', float('nan')):.3g}, "
               f"5–95 % range {m.get('pdp_epsilon_q05', float('nan')):.3g} – {m.get('pdp_epsilon_q95', float('nan')):.3g}, "
               f"max {m.get('pdp_epsilon_max', float('nan')):.3g} (target {rec.target_epsilon:g}).")
else:
    st.info("This method has no per-instance accounting (pDP is computed for NoisyGD-type methods, "
            "whose per-sample gradient norms are known at every step).")
note("pdp", "What is per-instance DP?")

st.subheader("Membership-inference attack")
c1, c2 = st.columns(2)
if "mia_fpr" in arrays:
    c1.plotly_chart(charts.roc_figure(arrays["mia_fpr"], arrays["mia_tpr"], m.get("mia_auc")),
                    key="audit_roc", width="stretch", config=charts.PLOTLY_CONFIG)
with c2:
    st.metric("attack AUC", f"{m.get('mia_auc', float('nan')):.3f}")
    st.metric("attack advantage (max TPR − FPR)", f"{m.get('mia_advantage', float('nan')):.3f}")
    st.caption(f"Loss-threshold attack on {m.get('mia_n_per_side', '?')} members (private training samples) "
               "vs as many non-members (test samples).")
    note("attack_auc", "What is attack AUC?")

st.subheader("δ(ε) curve of this run")
fig = charts.delta_curve_figure(m)
if fig is not None:
    st.plotly_chart(fig, key="audit_delta", width="stretch", config=charts.PLOTLY_CONFIG)
    st.caption("Every point on the curve is a valid (ε, δ) guarantee of the same run; the reported "
               "pair is one of them.")
else:
    st.info("No δ(ε) curve: the run is non-private, or its guarantee is pure ε-DP (δ = 0 for ε ≥ ε₀).")
note("conversions", "Why a whole curve?")
