"""Runs: every stored run; filter, reopen in other pages, delete, export."""

import streamlit as st

from mixdp_core.app_support import budget, charts
from mixdp_core.app_support.resources import (
    STATUS_BADGE, config_json, encoder_label, fmt_time, live_seconds, page_setup, poll_seconds, render_cancel,
    render_run, run_label, select_run, selected_run_id, shown_id,
)
from mixdp_core.runs.owner_view import OWNER_NOTE, public_error, reads_private_in_clear, timing_is_owner_only
from mixdp_core.runs.store import STATUSES

#: The encoder column of a run whose dataset brought its own features (no encoder ran).

manager = page_setup("Runs")
store = manager.store

st.title("Runs")
all_runs = store.list_runs()
c1, c2, c3 = st.columns(3)
statuses = c1.multiselect("Status", list(STATUSES), default=list(STATUSES), key="runs_status")
methods = sorted({r.method for r in all_runs if r.method})
meth = c2.multiselect("Method", methods, default=[], key="runs_method", placeholder="all methods")
text = c3.text_input("Search (id, method, dataset, encoder, label)", key="runs_search")
runs = [r for r in all_runs if r.status in statuses and (not meth or r.method in meth)
        and (not text or any(text.lower() in str(x).lower()
                             for x in (r.run_id, r.method, r.dataset, r.encoder, r.label)))]
owner = st.toggle("Show owner-only diagnostics (not private)", value=False, key="runs_owner",
                  help=OWNER_NOTE + " Exports include them only with this on, grouped under 'owner_only'.")


def _row(r):
    m = r.metrics
    # the paragon's outcomes are owner-only (not private): shown with the toggle, as the AUC is
    hide = not owner and reads_private_in_clear(m)
    return {
        "run_id": r.run_id, "status": STATUS_BADGE.get(r.status, r.status), "method": r.method,
        "dataset": r.dataset, "encoder": encoder_label(r.dataset, r.encoder), "seed": r.seed,
        "target ε": r.target_epsilon if m.get("private", True) else None,
        "ε spent": m.get("epsilon"), "guarantee": m.get("epsilon_label"), "noise": m.get("noise"),
        "test error (%)": None if m.get("test_error") is None or hide else 100 * m["test_error"],
        **({charts.OWNER_AUC_LABEL: m.get("mia_auc")} if owner else {}),
        "minority acc. (%)": None if m.get("minority_accuracy") is None or hide else 100 * m["minority_accuracy"],
        "created": fmt_time(r.created_at),
        # a private run's duration grows with its private rows (owner-only, as in the exports)
        "duration (s)": (round(r.duration_s, 1) if r.duration_s is not None
                         and (owner or not timing_is_owner_only(m)) else None),
        # a failure's message may quote the private data (a class's exact count): its type and field only
        "label": r.label, "error": r.error if owner else public_error(r.error),
    }


st.caption(f"{len(runs)} of {len(all_runs)} stored runs (store: `{store.root}`)")
for line in budget.runs_budget_lines(store, runs):  # what each data set has spent, over all its runs
    st.caption(line)
st.dataframe([_row(r) for r in runs], hide_index=True, key="runs_table", width="stretch",
             column_config={"test error (%)": st.column_config.NumberColumn(format="%.1f"),
                            "ε spent": st.column_config.NumberColumn(format="%.3f"),
                            charts.OWNER_AUC_LABEL: st.column_config.NumberColumn(format="%.3f"),
                            "minority acc. (%)": st.column_config.NumberColumn(format="%.1f")})

e1, e2, _ = st.columns([1, 1, 3])
ids = [r.run_id for r in runs]
if runs:
    # built when clicked, not on every rerun (10 MB of JSON and 1.5 s at 47 runs, growing with the store)
    e1.download_button("Export CSV", lambda: store.export(run_ids=ids, fmt="csv", owner_view=owner),
                       file_name="mixdp_runs.csv", mime="text/csv", key="runs_csv")
    e2.download_button("Export JSON", lambda: store.export(run_ids=ids, fmt="json", owner_view=owner),
                       file_name="mixdp_runs.json", mime="application/json", key="runs_json")
else:
    st.info("No runs match. Launch one on the *Train* page.")
    st.stop()

st.subheader("Run details")
by_id = {r.run_id: r for r in runs}
sel = selected_run_id()
if sel and sel not in by_id:  # a link to a missing or deleted run: say so, never show another run silently
    st.warning(f"Run {shown_id(sel)} from the link is not in this store (or not among the filtered runs); "
               "showing the newest run instead.")
rid = st.selectbox("Run", ids, index=ids.index(sel) if sel in ids else 0, key="runs_pick",
                   format_func=lambda i: run_label(by_id[i]))
rec = by_id[rid]
b1, b2, b3, b4 = st.columns(4)
if b1.button("Open in Train", key="runs_open_train"):
    select_run(rid)
    st.session_state.pop("train_job", None)
    st.switch_page("pages/2_train.py", query_params={"run": rid})
if b2.button("Open in Privacy audit", key="runs_open_audit", disabled=rec.status not in ("completed", "cancelled")):
    select_run(rid)
    st.switch_page("pages/4_audit.py", query_params={"run": rid})
confirm = b4.checkbox("confirm delete", key="runs_confirm",
                      help="Deletes the run's record, steps and arrays. What a private run spent stays in its data "
                           "set's privacy budget: spent privacy cannot be given back.")
if b3.button("Delete run", key="runs_delete", disabled=not confirm):
    try:
        store.delete_run(rid)
    except Exception as e:  # still running in a live process
        st.error(f"**run_id**: {e}")
    else:
        if selected_run_id() == rid:
            select_run(None)
        st.toast(f"Deleted {rid}")
        st.rerun()


@st.fragment(run_every=poll_seconds() if rec.status == "running" else None)
def details():
    status = render_run(manager, rid, key="runs", live_s=live_seconds(), owner=owner)
    if rec.status == "running" and status != "running":
        st.rerun()  # finished: redraw the page once (table, buttons) and stop polling


if rec.label:
    st.caption(f"label: {rec.label}")
with st.expander("Configuration and software versions"):
    st.code(config_json(rec), language="json")
    st.json(rec.versions, expanded=False)
line = st.empty()  # one node either way (see render_run): the running run's Cancel button
if rec.status == "running":
    with line:
        render_cancel(manager, rid, key="runs")
details()  # last: while the run trains, its live redraws keep the script running a while
