"""The data set's privacy ledger on the Train and Runs pages, and the cap at launch."""

from __future__ import annotations

import pytest

from .helpers import page_text, small_config

pytestmark = pytest.mark.timeout(600)


def _store():
    from mixdp_core.runs import RunStore

    return RunStore(recover=False)


def test_train_and_runs_pages_say_what_the_data_set_spent_and_the_cap_refuses_a_launch(at):
    from mixdp_core.runs import ledger as L
    from mixdp_core.runs.runner import execute

    store = _store()
    execute(small_config(method="ngd", target_epsilon=0.5, method_params={"noise_multiplier": 20.0}), store=store)
    spent = L.dataset_ledger(store, L.dataset_key("digits")).epsilon_basic
    at.switch_page("pages/2_train.py").run()
    at.selectbox(key="train_dataset").select("digits").run()
    at.selectbox(key="train_encoder").select("pixels").run()
    assert not at.exception, at.exception
    text = page_text(at)
    assert f"This data set has spent ε = {spent:.3g} (basic composition" in text and "in 1 private run" in text
    assert "· no cap" in text
    # a cap the next launch (ε = 3, the slider's default) would exceed: refused, nothing stored
    L.set_cap(store, L.dataset_key("digits"), 2.0, dataset="digits")
    at.run()
    assert "cap ε = 2 (" in page_text(at)
    next(b for b in at.button if "Launch" in b.label).click().run()
    assert not at.exception, at.exception
    errs = [e.value for e in at.error]
    assert any(e.startswith("**budget_cap**") and "cap ε = 2" in e for e in errs), errs
    assert len(store.list_runs()) == 1
    at.switch_page("pages/5_runs.py").run()
    assert not at.exception, at.exception
    assert f"Data set `digits` has spent ε = {spent:.3g}" in page_text(at)
