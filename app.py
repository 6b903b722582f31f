"""MixDP Explorer — Streamlit entry point (``streamlit run app.py`` / ``make app``).

Pages only read widgets, build configs, start background jobs and draw; all algorithm code
lives in ``mixdp_core``. The job manager (worker threads + run store) is created once per
server process here, which also marks runs left ``running`` by a dead server as failed.
"""

import streamlit as st

from mixdp_core.app_support.resources import get_manager

st.set_page_config(page_title="MixDP Explorer", page_icon="🔐", layout="wide")

manager = get_manager()  # st.cache_resource: one per server; calls store.recover_interrupted()

pages = [
    st.Page("pages/home.py", title="Home", icon="🏠", default=True),
    st.Page("pages/data.py", title="Data & encoder", icon="🗂️", url_path="data"),
    st.Page("pages/train.py", title="Train", icon="🏋️", url_path="train"),
    st.Page("pages/compare.py", title="Compare", icon="📈", url_path="compare"),
    st.Page("pages/audit.py", title="Privacy audit", icon="🔍", url_path="audit"),
    st.Page("pages/runs.py", title="Runs", icon="🗄️", url_path="runs"),
]
st.navigation(pages).run()
