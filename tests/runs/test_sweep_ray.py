"""The sweep engine on a real Ray head started by this test (own port, own temp dir, stopped
by its PID): >= 20 digits/pixels runs, one Ray worker process killed mid-sweep, no run lost."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import secrets
import shutil

import pytest

# A private auth token for the head of this test and this driver, independent of
# ~/.ray/auth_token (which other Ray users of the machine may create). Ray reads the auth mode
# when it is imported, so it must be set before the import.
AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
if "ray" not in sys.modules:
    os.environ.update(AUTH)
else:  # already imported by another test module: use whatever it set up
    AUTH = {k: os.environ[k] for k in AUTH if k in os.environ}
ray = pytest.importorskip("ray", reason="ray is not installed (pip install -r requirements.txt)")

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    return kids


def _busy_workers(head_pid: int) -> list[int]:
    """Descendants of our head whose process title says they execute a sweep task."""
    kids, out, todo = _children(), [], [head_pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            todo.append(c)
            try:
                title = Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if title.startswith(b"ray::_ray_call"):
                out.append(c)
    return out


@pytest.fixture
def ray_head():
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix=f"rt{os.getpid() % 100000}_", dir="/tmp")  # short: socket paths
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0", **AUTH)
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={port}",
           "--node-ip-address=127.0.0.1", f"--temp-dir={tmp}", "--disable-usage-stats", "--include-dashboard=false",
           "--num-cpus=2", "--object-store-memory=80000000"]
    log = open(Path(tmp) / "head.log", "wb")
    head = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 60
        while b"Ray runtime started" not in (Path(tmp) / "head.log").read_bytes():
            if head.poll() is not None or time.time() > deadline:
                pytest.fail("ray head did not start: " + (Path(tmp) / "head.log").read_text()[-2000:])
            time.sleep(0.3)
        yield f"127.0.0.1:{port}", head.pid
    finally:
        if ray.is_initialized():
            ray.shutdown()
        head.send_signal(signal.SIGTERM)  # only the head we started (it stops its own children)
        try:
            head.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)  # its own session, created above
            head.wait(timeout=10)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.timeout(150)
def test_ray_sweep_survives_a_killed_worker(ray_head, tmp_path, monkeypatch):
    from mixdp_core.runs.store import RunStore
    from mixdp_core.runs.sweep import SweepSpec, get_sweep, run_sweep

    address, head_pid = ray_head
    monkeypatch.setenv("MIXDP_CACHE", str(tmp_path / "cache"))
    store = RunStore(tmp_path / "store")
    spec = SweepSpec(methods=("adamix", "ngd", "ppgd", "fully_private"), epsilons=(0.5, 1, 3), seeds=(0, 1),
                     params={"noise_multiplier": 20})
    configs = spec.configs()
    assert len(configs) == 24

    killed: list[int] = []

    def killer() -> None:  # kill one Ray worker while it executes a run
        deadline = time.time() + 60
        while time.time() < deadline and not killed:
            busy = _busy_workers(head_pid)
            if busy:
                os.kill(busy[0], signal.SIGKILL)
                killed.append(busy[0])
                return
            time.sleep(0.05)

    landed = []
    t = threading.Thread(target=killer, daemon=True)
    t.start()
    out = run_sweep(configs, store=store, backend="ray", address=address, max_retries=3, spec=spec,
                    on_result=landed.append)
    t.join(timeout=5)
    assert killed, "no busy Ray worker was found to kill"
    assert not Path(f"/proc/{killed[0]}").exists() or b"ray::" not in Path(f"/proc/{killed[0]}/cmdline").read_bytes()
    # no run lost: every config landed once, completed, in the store, written by this process
    assert out.status == "completed" and out.n_failed == 0
    assert sorted(r.index for r in landed) == list(range(24))
    runs = store.list_runs()
    assert len(runs) == 24 and all(r.status == "completed" and r.pid == os.getpid() for r in runs)
    assert {r.config_hash for r in runs} == {c.config_hash() for c in configs}
    assert os.getpid() not in {r.metrics["worker"]["pid"] for r in runs}  # trained by Ray workers
    assert get_sweep(store, out.sweep_id)["status"] == "completed"
    # resumable: the same sweep again reuses all 24 without touching Ray's workers
    again = run_sweep(configs, store=store, backend="ray", address=address, spec=spec)
    assert again.n_reused == 24 and len(store.list_runs()) == 24
