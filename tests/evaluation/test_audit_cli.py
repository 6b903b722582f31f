"""``mixdp audit``: one JSON line with the documented keys; stored audits reopen; bad args."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mixdp_core.cli import main

KEYS = ("attack", "method", "claimed_epsilon", "claimed_delta", "auc", "tpr_at_fpr_0.001", "tpr_at_fpr_0.01",
        "empirical_epsilon_lower", "confidence", "n_trials", "alarm")


@pytest.mark.parametrize("method,attack,extra", [
    ("fully_private", "canary-whitebox", ["--trials", "400", "--canaries", "400"]),
    ("dp_ls", "loss", ["--imbalance-ratio", "10"]),
    ("dppl_mean", "lira", ["--reference-models", "4"]),
    ("dp_linear_probe", "one-run", ["--canaries", "100"]),
])
def test_audit_json_line_and_store(method, attack, extra, tmp_path, capsys):
    rc = main(["audit", "--method", method, "--epsilon", "3", "--attack", attack, "--json", "--no-progress",
               "--store", str(tmp_path)] + extra)
    assert rc == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    for k in KEYS:
        assert k in out, k
    assert out["attack"] == attack and out["method"] == method and out["alarm"] is False
    assert out["note"].startswith("Owner-only diagnostic") and "not covered by the claimed epsilon" in out["note"]
    from mixdp_core.runs import RunStore
    from mixdp_core.runs.audits import AuditStore

    au = AuditStore(RunStore(tmp_path, recover=False))
    rec = au.get(out["audit_id"])
    assert rec.summary["claimed_epsilon"] == out["claimed_epsilon"]
    assert au.rocs(out["audit_id"])


def test_old_store_gains_the_audit_table_and_stays_readable(tmp_path):
    from mixdp_core.runs import RunStore
    from mixdp_core.runs.audits import AuditStore

    s = RunStore(tmp_path)
    rid = s.create_run({"method": "x"}, config_hash="h")
    s.finish(rid, "completed", metrics={"a": 1})
    au = AuditStore(RunStore(tmp_path))  # migration on an existing store
    assert au.list() == []
    assert RunStore(tmp_path).get_run(rid).metrics == {"a": 1}


@pytest.mark.parametrize("argv,needle", [
    (["audit", "--attack", "lirra"], "attack: must be one of"),
    (["audit", "--method", "dp_ls", "--attack", "canary-whitebox"], "canary-whitebox needs a NoisyGD-family"),
    (["audit", "--reference-models", "1"], "reference_models: must be an integer in [2, 256]"),
    # sizes bounded before any allocation (a billion canaries held 16 GB, then crashed)
    (["audit", "--attack", "one-run", "--canaries", "1000000000"], "canaries: must be an integer in [10, 5,000]"),
    (["audit", "--attack", "lira", "--reference-models", "5000"], "reference_models: must be an integer in [2, 256]"),
    (["audit", "--attack", "canary", "--trials", "1000000000"], "trials: must be an integer in [4, 100,000]"),
])
def test_bad_arguments_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_audit_runs_its_trainings_on_the_sweep_engine(tmp_path, capsys, monkeypatch):
    """`--executor local`: the reference models train on the sweep engine's process pool and
    the audit is the sequential one (every training is seeded; worker processes may sum in
    another order, so equal to float precision)."""
    import mixdp_core.runs.sweep as sweep

    calls = []
    real = sweep.map_trainings
    monkeypatch.setattr(sweep, "map_trainings", lambda fn, items, **kw: calls.append(len(items)) or real(fn, items, **kw))
    outs = {}
    for ex in ("sequential", "local"):
        rc = main(["audit", "--method", "fully_private", "--epsilon", "3", "--attack", "lira", "--reference-models",
                   "4", "--json", "--no-progress", "--no-store", "--executor", ex, "--workers", "2",
                   "--param", "noise=reproducible"])
        assert rc == 0
        outs[ex] = json.loads(capsys.readouterr().out)
    assert calls and calls[0] >= 4  # the engine ran the reference trainings
    for k in ("auc", "empirical_epsilon_lower"):
        assert outs["local"][k] == pytest.approx(outs["sequential"][k], rel=1e-4, abs=1e-9), k
    # a TPR at a fixed FPR is a step function of the scores: float-order differences between
    # processes may move one member across the threshold (1/2800 here), no more
    assert outs["local"]["tpr_at_fpr_0.01"] == pytest.approx(outs["sequential"]["tpr_at_fpr_0.01"], abs=1e-3)


def test_audit_executor_must_be_known(capsys):
    rc = main(["audit", "--executor", "threads", "--no-progress", "--no-store"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "executor" in err and "sequential, local, ray" in err and len(err.splitlines()) == 1


def test_run_audit_bounds_its_size_before_touching_the_data():
    from mixdp_core.errors import ConfigError
    from mixdp_core.evaluation.audit import run_audit

    for kw, field in (({"reference_models": 10**6}, "reference_models"), ({"canaries": 9}, "canaries"),
                      ({"trials": 10**9}, "trials"), ({"canaries": 1.5}, "canaries")):
        with pytest.raises(ConfigError) as ei:
            run_audit(None, "fully_private", attack="lira", **kw)  # None: the split is never read
        assert ei.value.field == field


def test_a_one_run_whitebox_audit_bounds_its_canaries_before_training():
    """Where the canaries are not independent trials (DP-SGD's shared bias row), every trial's
    canary goes into one training: `trials` is bounded by the canary limit, before any work."""
    from mixdp_core.config import AUDIT_MAX_CANARIES
    from mixdp_core.errors import ConfigError
    from mixdp_core.evaluation.audit.canary import whitebox_canary_audit

    with pytest.raises(ConfigError, match=f"trials: .*at most {AUDIT_MAX_CANARIES:,}, got 100,000") as ei:
        whitebox_canary_audit("dp_linear_probe", {}, None, trials=100_000)  # None: the split is never read
    assert ei.value.field == "trials"


@pytest.mark.parametrize("kw,field", [({"confidence": 95}, "confidence"), ({"confidence": 0.0}, "confidence"),
                                      ({"delta": 2.0}, "delta"), ({"delta": float("nan")}, "delta")])
def test_the_bounds_statement_is_checked_in_the_library(kw, field):
    """confidence = 95 used to state a bound of 0 "at confidence 95"; delta = 2 a bound of 0."""
    from mixdp_core.errors import ConfigError
    from mixdp_core.evaluation.audit import run_audit
    from mixdp_core.evaluation.audit.stats import epsilon_lower_bound, one_run_epsilon_lower_bound

    with pytest.raises(ConfigError) as ei:
        run_audit(None, "fully_private", attack="canary", **kw)  # None: the split is never read
    assert ei.value.field == field
    args = {"delta": 1e-5, "confidence": 0.95, **kw}
    with pytest.raises(ConfigError, match=field):
        epsilon_lower_bound([1.0, 1.0], [0.0, 0.0], **args)
    with pytest.raises(ConfigError, match=field):
        one_run_epsilon_lower_bound(np.zeros(4), np.array([True, False, True, False]), **args)
