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


def test_train_page_sets_and_removes_the_cap():
    from mixdp_core.app_support import budget
    from mixdp_core.runs import ledger as L

    store = _store()
    key = L.dataset_key("digits")
    ok, msg = budget.set_dataset_cap(store, "digits", {}, 4.0)
    assert ok and msg.startswith("Cap set: ε = 4") and L.get_cap(store, key).epsilon == 4.0
    ok, msg = budget.set_dataset_cap(store, "digits", {}, -1.0)
    assert not ok and msg.startswith("budget_cap:") and L.get_cap(store, key).epsilon == 4.0  # nothing lost
    ok, msg = budget.set_dataset_cap(store, "digits", {}, None)
    assert ok and msg == "Cap removed." and L.get_cap(store, key) is None


def test_train_page_cap_control(at):
    from mixdp_core.runs import ledger as L

    store = _store()
    at.switch_page("pages/2_train.py").run()
    at.selectbox(key="train_dataset").select("digits").run()
    at.number_input(key="budget_cap_eps").set_value(7.0).run()
    next(b for b in at.button if b.label == "Set cap").click().run()
    assert not at.exception, at.exception
    assert L.get_cap(store, L.dataset_key("digits")).epsilon == 7.0
    assert "cap ε = 7 (" in page_text(at)  # the budget line already shows it
    next(b for b in at.button if b.label == "Remove cap").click().run()
    assert L.get_cap(store, L.dataset_key("digits")) is None and "· no cap" in page_text(at)
    # out of range: one line naming the field (the widget's own min / max only outlined the box)
    at.number_input(key="budget_cap_eps").set_value(1e6).run()
    next(b for b in at.button if b.label == "Set cap").click().run()
    assert any("cap" in e.value and "[0.001, 10000]" in e.value for e in at.error)
    assert L.get_cap(store, L.dataset_key("digits")) is None
