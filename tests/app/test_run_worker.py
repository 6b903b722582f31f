"""The app's pre-warmed run processes (mixdp_core.app_support.run_worker)."""

from __future__ import annotations

import os

import pytest

from mixdp_core.app_support import run_worker


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="no process priorities on this platform")
@pytest.mark.parametrize("env, expected", [(None, run_worker.RUN_NICE), ("0", 0), ("3", 3)])
def test_run_process_runs_at_a_lower_priority_than_the_server(tmp_path, monkeypatch, env, expected):
    """The child adds RUN_NICE (or MIXDP_APP_RUN_NICE) to the server's niceness, so the
    server's live redraws are scheduled before the training on a busy machine."""
    if env is None:
        monkeypatch.delenv("MIXDP_APP_RUN_NICE", raising=False)
    else:
        monkeypatch.setenv("MIXDP_APP_RUN_NICE", env)
    base = os.getpriority(os.PRIO_PROCESS, 0)
    if base + run_worker.RUN_NICE > 19:
        pytest.skip(f"this test runs at niceness {base}: no room to tell the increments apart")
    proc = run_worker.RunProcess(tmp_path / "store", cache_dir=tmp_path / "cache")
    try:
        # the child lowers its priority before it warms up and says "ready": read it then
        assert proc.conn.poll(120), "the run process never said it was ready"
        assert proc.conn.recv()[0] == "ready"
        nice = os.getpriority(os.PRIO_PROCESS, proc.pid)
        assert nice == base + expected, (nice, base, expected)
    finally:
        proc.close()


def test_lower_priority_reads_the_environment(monkeypatch, capsys):
    monkeypatch.setenv("MIXDP_APP_RUN_NICE", "0")
    assert run_worker.lower_priority() == 0
    niceness = [2]

    def fake_nice(inc):  # the kernel's rule: the result is capped at 19
        niceness[0] = min(niceness[0] + inc, 19)
        return niceness[0]

    monkeypatch.setattr(os, "nice", fake_nice)
    monkeypatch.setenv("MIXDP_APP_RUN_NICE", "abc")
    assert run_worker.lower_priority() == run_worker.RUN_NICE and niceness[0] == 2 + run_worker.RUN_NICE
    assert "MIXDP_APP_RUN_NICE: must be an integer 0-19, got 'abc'; using 5" in capsys.readouterr().err
    monkeypatch.setenv("MIXDP_APP_RUN_NICE", "-3")
    assert run_worker.lower_priority() == 0
    assert "got '-3'; using 0" in capsys.readouterr().err
    monkeypatch.setenv("MIXDP_APP_RUN_NICE", "40")  # from 7: only 12 more are possible
    assert run_worker.lower_priority() == 12 and niceness[0] == 19
    assert "got '40'; using 19" in capsys.readouterr().err

    def refused(inc):
        raise PermissionError("not permitted")

    monkeypatch.setattr(os, "nice", refused)
    monkeypatch.setenv("MIXDP_APP_RUN_NICE", "5")
    assert run_worker.lower_priority() == 0  # the run goes on at the server's priority
