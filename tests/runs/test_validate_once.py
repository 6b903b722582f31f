"""RunConfig validates its fields on construction and checks the budget once, in preflight."""

from __future__ import annotations

from unittest import mock

import pytest

from mixdp_core import accounting
from mixdp_core.errors import BudgetError, ConfigError
from mixdp_core.runs.runner import RunConfig


def _counting(monkeypatch):
    calls = []
    real = accounting.calibrate_steps

    def counted(**kw):
        calls.append(kw)
        return real(**kw)

    # every NoisyGD method's budget check goes through accounting.calibrate_steps
    monkeypatch.setattr(accounting, "calibrate_steps", counted)
    return calls


def test_constructing_a_config_calibrates_nothing_and_preflight_once(monkeypatch):
    calls = _counting(monkeypatch)
    cfg = RunConfig(dataset="digits", encoder="pixels", method="adamix", target_epsilon=3.0)
    assert calls == []
    cfg.preflight()
    n = len(calls)
    assert n >= 1
    cfg.preflight()
    cfg.preflight()
    assert len(calls) == n  # remembered on the config


def test_fields_are_still_checked_on_construction_and_the_budget_in_preflight():
    with pytest.raises(ConfigError, match="noise_multiplier"):
        RunConfig(dataset="digits", encoder="pixels", method="adamix", method_params={"noise_multiplier": -1})
    cfg = RunConfig(dataset="digits", encoder="pixels", method="adamix", target_epsilon=0.001,
                    method_params={"noise_multiplier": 50.0})
    with pytest.raises(BudgetError, match="target_epsilon"):
        cfg.preflight()
    with pytest.raises(BudgetError):  # a failed check is not remembered as passed
        cfg.preflight()


def test_execute_refuses_an_infeasible_budget_before_storing(tmp_path):
    from mixdp_core.runs.runner import execute
    from mixdp_core.runs.store import RunStore

    store = RunStore(tmp_path / "runs")
    cfg = RunConfig(dataset="digits", encoder="pixels", method="adamix", target_epsilon=0.001,
                    method_params={"noise_multiplier": 50.0})
    with pytest.raises(BudgetError):
        execute(cfg, store=store, cache_dir=tmp_path / "cache")
    assert store.list_runs() == []
