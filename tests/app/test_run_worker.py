"""The app's pre-warmed run processes (mixdp_core.app_support.run_worker)."""

from __future__ import annotations

import os
import time

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
    proc = run_worker.RunProcess(tmp_path / "store", cache_dir=tmp_path / "cache")
    try:
        want = min(base + expected, 19)
        deadline = time.monotonic() + 20
        nice = os.getpriority(os.PRIO_PROCESS, proc.pid)
        while nice != want and proc.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
            nice = os.getpriority(os.PRIO_PROCESS, proc.pid)
        assert nice == want, (nice, base, expected)
    finally:
        proc.close()


def test_lower_priority_reads_the_environment(monkeypatch, capsys):
    monkeypatch.setenv("MIXDP_APP_RUN_NICE", "0")
    assert run_worker.lower_priority() == 0
    monkeypatch.setattr(os, "nice", lambda inc: None)
    monkeypatch.setenv("MIXDP_APP_RUN_NICE", "abc")
    assert run_worker.lower_priority() == run_worker.RUN_NICE
    assert "MIXDP_APP_RUN_NICE: must be an integer 0-19, got 'abc'" in capsys.readouterr().err
