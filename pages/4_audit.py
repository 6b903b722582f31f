"""Privacy audit: theory vs attacks, empirical ε lower bounds, per-instance ε (owner only)."""

import streamlit as st

from mixdp_core.accounting import tradeoff_sentence
from mixdp_core.app_support import charts, forms
from mixdp_core.app_support.resources import (cancel_button, encoder_label, page_setup, note, poll_seconds, run_label,
                                              select_run, selected_run_id, show_chart, show_field_errors, shown_id)
from mixdp_core.app_support.jobs import QUEUED
from mixdp_core.errors import MixDPError
from mixdp_core.app_support.audit import (
    ATTACK_LABELS, AUDIT_CHART_CAPTION, alarm_message, guarantee_caveat, attack_available, audit_rows, default_attack, audits_for_run, audit_trainings, pdp_unavailable_reason, run_report,
)

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
if sel and sel not in by_id:  # a link to a missing or unfinished run: say so, never show another run silently
    st.warning(f"Run {shown_id(sel)} from the link is not a finished run in this store; showing the newest "
               "finished run instead.")
rid = st.selectbox("Run", ids, index=ids.index(sel) if sel in ids else 0, key="audit_run",
                   format_func=lambda i: run_label(by_id[i]))
if rid != sel or st.query_params.get("run") != rid or st.session_state.get("selected_run") != rid:
    select_run(rid)  # both places: a return or a reload finds this run, and its audit job, again
rec = by_id[rid]
m = rec.metrics
arrays = store.load_artifacts(rid)
target = rec.target_epsilon if m.get("private") else None
report = run_report(m)

st.markdown(f"**{rec.method}** on {rec.dataset} · {encoder_label(rec.dataset, rec.encoder)}: test error {100 * m['test_error']:.1f} %, "
            + (f"ε = {m['epsilon']:.3g} at δ = {m['delta']:.0e}" if m.get("private") and m.get("epsilon") is not None
               else "private data never read (ε = 0)" if m.get("epsilon") == 0.0
               else "no DP guarantee (ε = ∞)"))

from mixdp_core.runs.audits import AuditStore  # noqa: E402

audits = AuditStore(store)
stored = audits_for_run(audits, rec)  # their alarms qualify the guarantee here (read again below)
caveat = guarantee_caveat(m, [a.summary for a in stored])
if caveat:
    st.warning(f":material/warning: The guarantee below does not hold as stated: {caveat}.")

# ------------------------------------------------------------------ theory vs attack
st.subheader("What the guarantee allows vs what attacks achieve")
st.caption("Owner only: the attacks read the private rows and who is a member, so their scores (AUC, "
           "ROC, empirical ε) are the data owner's diagnostics, not covered by the run's ε. "
           "Audits are not charged to the data set's budget; do not publish their results.")
from mixdp_core.evaluation.audit import MAX_CANARIES, MAX_REPLAY_TRIALS  # noqa: E402  (the audit size bounds, one declaration)

with st.form("audit_form", enter_to_submit=False):  # starts only by its button: an audit trains on private data
    c1, c2, c3, c4 = st.columns(4)
    attack = c1.selectbox("Attack", list(ATTACK_LABELS), format_func=ATTACK_LABELS.get, key="audit_attack",
                          index=list(ATTACK_LABELS).index(default_attack(rec)))
    # no min / max on the widgets: out of range, the button did nothing and said nothing; checked below
    K = c2.number_input("Reference models (LiRA/RMIA)", value=8, step=1, key="audit_k", help="An integer in [2, 64].")
    trials = c3.number_input("Trials (canary audits, seed replay; empty: the attack's default)", value=None,
                             step=1, key="audit_trials",
                             help="An integer in [4, 20000] (seed replay: at most 2,000, two trainings each), or "
                                  "empty: 100 trainings for black-box canaries, 1,000 canaries for white-box ones, "
                                  "enough to refute ε for seed replay.")
    canaries = c4.number_input("Canaries per training", value=1000, step=1, key="audit_canaries",
                               help=f"An integer in [10, {MAX_CANARIES}].")
    go = st.form_submit_button("Run audit")
if go:
    ok, why = attack_available(rec, attack)
    bad = {f: m for f, m in (("reference_models", forms.range_error(K, 2, 64)),
                             ("trials", None if trials is None else forms.range_error(
                                 trials, 4, MAX_REPLAY_TRIALS if attack == "seed-replay" else 20000)),
                             ("canaries", forms.range_error(canaries, 10, MAX_CANARIES))) if m}
    if bad:
        show_field_errors(bad)
    elif not ok:
        st.error(why)
    else:
        try:  # a background job: it outlives the page (leaving it had stopped the audit, nothing stored)
            st.session_state["audit_job"] = manager.submit_audit(
                rid, attack=attack, reference_models=int(K), trials=None if trials is None else int(trials),
                canaries=int(canaries)).job_id
        except MixDPError as e:
            st.error(str(e))
job = manager.get(st.session_state.get("audit_job"))
if job is None or job.finished or job.feature_request.get("run_id") != rid:
    # a reload, another run, or a newer audit of this run (another tab): its running or latest
    # job (every job of this server, the session's own included, is among those it looks at)
    job = manager.find_audit(rid)
    st.session_state["audit_job"] = None if job is None else job.job_id
cancel_button(manager, job, label="Cancel audit", key="audit_cancel",
              toast="Cancellation requested; the audit stops after its current training and stores nothing.")


@st.fragment(run_every=poll_seconds() if job is not None and not job.finished else None)
def _audit_job() -> None:
    j = manager.get(st.session_state.get("audit_job"))
    if j is None:
        return
    req = j.feature_request
    if not j.finished:
        if j.state == QUEUED:  # audits run one at a time: it waits, it is not "preparing"
            st.caption("This audit waits for another audit of this server to finish (audits run one at a time); "
                       "Cancel ends it at once.")
            st.progress(0.0, text="waiting for its turn …")
            return
        n, d = j.progress.get("total"), j.progress.get("done", 0)
        st.caption(f"This audit trains the method {audit_trainings(req['attack'], reference_models=req['reference_models'], trials=req['trials'], canaries=req['canaries'], method=rec.method, params=(rec.config or {}).get('method_params'))}. "
                   "It runs on the server: you may leave this page and come back to it.")
        st.progress(d / n if n else 0.0, text=f"{d}/{n} trainings" if n else "preparing the audit (features, split) …")
        return
    if st.session_state.get("audit_drawn") != j.job_id:  # finished: the page's audits and caveat read it
        st.session_state["audit_drawn"] = j.job_id
        st.rerun()
    if j.error:
        st.error(f"The last audit failed: {j.error}")
    elif "result" not in j.progress:
        st.warning("The last audit was cancelled; nothing was stored.")


_audit_job()

stored = audits_for_run(audits, rec)
rocs, counts = {}, {}
if "mia_fpr" in arrays:
    name = "loss attack (class-matched)" if m.get("mia_class_matched") else "loss attack (unmatched, old run)"
    rocs[name] = (arrays["mia_fpr"], arrays["mia_tpr"])
    if m.get("mia_n_per_side"):
        counts[name] = (int(m["mia_n_per_side"]), int(m["mia_n_per_side"]))
for a in stored:
    for name, curve in audits.rocs(a.audit_id).items():
        key = f"{name} [{a.audit_id[-6:]}]"
        rocs.setdefault(key, curve)
        n_neg, n_pos = a.summary.get("n_nonmembers"), a.summary.get("n_members")
        if n_neg and n_pos:
            counts[key] = (int(n_neg), int(n_pos))
log_axes = st.toggle("log–log axes (low false-positive regime)", value=True, key="audit_log")
show_chart(charts.theory_vs_attack_figure(report, rocs, log=log_axes, counts=counts), key="audit_theory",
           name=f"{rec.run_id}_theory_vs_attack")
st.markdown(f"### {'If the guarantee held: ' if caveat else ''}{tradeoff_sentence(report, 0.01)}")
st.caption(AUDIT_CHART_CAPTION)

if stored:
    st.subheader("Audits of this run")
    rows = audit_rows(stored)
    st.dataframe(rows, key="audit_table", hide_index=True)
    for a in stored:
        if a.summary.get("alarm"):
            st.error(alarm_message(a.summary))
    st.caption("Lower bounds hold with the stated confidence (exact Clopper–Pearson intervals, threshold chosen "
               "on a separate half of the trials, or the one-run bound of Steinke et al. 2023). "
               "A lower bound below the claim does not prove the claim; it only fails to refute it.")
else:
    st.info("No audit of this run yet: pick an attack above. White-box Dirac canaries give the tightest bounds "
            "for the NoisyGD family; LiRA measures what a realistic attacker gets.")
note("attack_auc", "What is attack AUC?")

# ------------------------------------------------------------------ pDP
st.subheader("Per-instance privacy (owner only)")
st.caption("Per-instance ε is computed from the private data along the realised run: a diagnostic for the data "
           "owner, **not a released guarantee**; publishing it leaks information.")
eps_i = arrays.get("pdp_epsilon")
if eps_i is not None and len(eps_i):
    a, b = st.columns(2)
    with a:
        show_chart(charts.pdp_sorted_figure(eps_i, target), key="audit_pdp_sorted", name=f"{rec.run_id}_pdp_sorted")
    with b:
        show_chart(charts.pdp_hist_figure(eps_i, target), key="audit_pdp_hist", name=f"{rec.run_id}_pdp_hist")
    st.caption(f"{len(eps_i)} private samples: median εᵢ {m.get('pdp_epsilon_median', float('nan')):.3g}, "
               f"5–95 % range {m.get('pdp_epsilon_q05', float('nan')):.3g} – {m.get('pdp_epsilon_q95', float('nan')):.3g}, "
               f"max {m.get('pdp_epsilon_max', float('nan')):.3g} (target {rec.target_epsilon:g}).")
else:
    st.info(f"No per-instance ε for {rec.method}: {pdp_unavailable_reason(rec.method)}")
note("pdp", "What is per-instance DP?")

st.subheader("δ(ε) curve of this run")
fig = charts.delta_curve_figure(m)
if fig is not None:
    show_chart(fig, key="audit_delta", name=f"{rec.run_id}_delta_curve")
    st.caption("Every point on the curve is a valid (ε, δ) guarantee of the same run; the reported "
               "pair is one of them.")
else:
    st.info("No δ(ε) curve: the run is non-private, or its guarantee is pure ε-DP (δ = 0 for ε ≥ ε₀).")
note("conversions", "Why a whole curve?")
