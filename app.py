"""MixDP Explorer — Streamlit entry point and Home page (``streamlit run app.py`` / ``make app``).

Multipage app: this file is the Home page and ``pages/`` holds the others (their titled
navigation is drawn by :func:`mixdp_core.app_support.resources.page_setup`). Pages only read
widgets, build configs, start background jobs and draw; all algorithm code lives in
``mixdp_core``. The job manager (worker threads + run store) is created once per server
process on first use, which also marks runs left ``running`` by a dead server as failed.

Home: what mixed DP is, the method families, and a one-click demo run on the offline default.
"""


import streamlit as st

from mixdp_core.app_support import forms
from mixdp_core.app_support.resources import (
    note, page_setup, select_run,
)
from mixdp_core.errors import ConfigError

manager = page_setup("Home")

st.title("MixDP Explorer")
st.markdown(
    "Differential privacy (DP) trains a model so that no single person's data changes its "
    "behaviour by more than a factor governed by **ε**. "
    "Fully private training of vision models pays for this with noise, and accuracy drops "
    "sharply at small ε. "
    "**Mixed DP** adds a few *public* samples (for example 5 per class, collected with "
    "consent or from a public source) beside the large *private* set. "
    "The public samples cost no privacy and steer the private learner: its initialization, "
    "its clipping threshold and, optionally, the directions in which noise is added. "
    "This app lets you measure that privacy–utility trade-off: train, compare methods at "
    "chosen budgets, and audit what a run leaks."
)
note("mixed_dp", "Mixed DP in one paragraph")

st.subheader("Method families")
family_text = {
    "adamix": "**AdaMix family** (Golatkar et al., *Mixed Differential Privacy in Computer Vision*, CVPR 2022): "
              "linear heads on frozen features trained with NoisyGD, using public data for init and adaptive clipping "
              "(the paper's gradient projection is an option).",
    "prototypes": "**DP prototypes family** (Wahdany et al., *Beyond the Mean: DP Prototypes*): "
                  "one private prototype per class from features, or a public sample picked privately.",
    "finetune": "**Sparse DP fine-tuning** (Luo et al., *Scalable DP with Sparse Network Finetuning*, CVPR 2021): "
                "DP-SGD on a small subset of a public pre-trained network.",
}
fams = forms.families()
cols = st.columns(max(1, len(fams)))
for col, (fam, names) in zip(cols, fams.items()):
    with col:
        st.markdown(family_text.get(fam, f"**{fam}**"))
        classes = forms.method_classes()
        st.caption("Methods: " + ", ".join(
            f"`{n}`" + ("" if classes[n].private else " (non-private reference)") for n in names))

st.subheader("Try it: demo run")
demo = forms.demo_config()
st.markdown(f"One click trains **AdaMix at ε = {demo.target_epsilon:g}** on the offline default: "
            f"`{demo.dataset}` (8×8 handwritten digits, ships with scikit-learn) · `{demo.encoder}` "
            f"(the raw 64 pixel values: no feature extraction). It finishes in seconds; the *Data & encoder* "
            f"page switches to pre-trained encoders (e.g. `efficientnet_lite0`, whose weights ship with an "
            f"installed package; extracting its features takes minutes on a CPU). Beside the result it shows "
            f"Only-Public (the public samples alone, no private data) and Fully-Private at the same ε, so the "
            f"number says what the private data bought. Fully-Private is a second private run: the demo spends "
            f"ε = {demo.target_epsilon:g} twice on the digits data set's budget (about "
            f"{2 * demo.target_epsilon:g} in all, basic composition).")
if st.button("Run the demo", type="primary", key="demo", icon=":material/play_arrow:"):
    try:
        job = manager.submit_run(demo, kind="demo", reuse=True)
        for ref in forms.demo_references(demo):  # read the result against them: two runs of a second each, as
            manager.submit_run(ref, kind="demo_refs", reuse=True)  # plain runs (no sweep process pool to start)
    except ConfigError as e:  # e.g. budget_cap: the data set's cap (mixdp budget) refuses the demo
        st.error(f"**{e.field}**: {e.message}", icon="🚫")
        st.stop()
    st.session_state["train_job"] = job.job_id
    rid = manager.wait_run_id(job)
    select_run(rid)
    manager.wait_first_step(rid)  # the Train page opens with a chart point
    st.switch_page("pages/2_train.py", query_params={"run": rid} if rid else None)

st.divider()
st.markdown("**Where to go next** — *Data & encoder*: pick a dataset and see the public/private split · "
            "*Train*: one run with live charts · *Compare*: methods × ε × seeds · "
            "*Privacy audit*: per-instance ε and attack ROC · *Runs*: everything stored · "
            "*Classroom*: what ε means, in five projector-ready steps.")
if manager.recovered:
    st.info(f"{len(manager.recovered)} run(s) interrupted by a previous server stop were marked failed "
            f"(history kept; see Runs).")
