"""``mixdp audit``: one JSON line with the documented keys; stored audits reopen; bad args."""

from __future__ import annotations

import json

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
    (["audit", "--reference-models", "1"], "reference_models: must be an integer >= 2"),
])
def test_bad_arguments_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
