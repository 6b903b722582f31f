"""The sweep engine on real Ray nodes started by these tests (own port, own temp dirs, stopped
by their PIDs): >= 20 digits/pixels runs with one Ray worker process killed mid-sweep and no
run lost; and a simulated two-node cluster (a head and a second node joined to it) whose two
nodes both train runs of one sweep."""

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
from typing import Any

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

# Under pytest-xdist (make test: -n 2 --dist loadgroup) these tests run one after the other on
# one worker: each head also binds Ray's fixed default ports (the client server's 10001, the
# dashboard agent's), which two heads started at once by two workers would both claim.
pytestmark = pytest.mark.xdist_group("ray")


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


def _ray_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
                OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0", **AUTH)


def _start(args: list[str], tmp: str, log_name: str) -> tuple[subprocess.Popen, Any]:
    """``ray start --block ARGS`` in its own session (so that it can be stopped by its PID
    and its process group only); returns once Ray says the node is up."""
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", "--node-ip-address=127.0.0.1",
           "--disable-usage-stats", "--object-store-memory=80000000", *args]
    log_path = Path(tmp) / log_name
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, env=_ray_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 60
    while b"Ray runtime started" not in log_path.read_bytes():
        if proc.poll() is not None or time.time() > deadline:
            _stop(proc, log)
            pytest.fail(f"ray start {' '.join(args)} failed: " + log_path.read_text()[-2000:])
        time.sleep(0.3)
    return proc, log


def _stop(proc: subprocess.Popen, log: Any) -> None:
    """Stop one node this test started: SIGTERM to its ``ray start --block`` (it stops its
    own raylet and workers), SIGKILL to its own process group if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session, created by _start
            proc.wait(timeout=10)
    log.close()


@pytest.fixture
def ray_head():
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix=f"rt{os.getpid() % 100000}_", dir="/tmp")  # short: socket paths
    head, log = _start(["--head", f"--port={port}", f"--temp-dir={tmp}", "--include-dashboard=false",
                        "--num-cpus=2"], tmp, "head.log")
    try:
        yield f"127.0.0.1:{port}", head.pid
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _stop(head, log)
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


def _descendants(root: int) -> set[int]:
    kids, out, todo = _children(), set(), [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


@pytest.mark.timeout(90)
def test_ray_sweep_runs_on_two_nodes(tmp_path, monkeypatch):
    """A head (1 CPU) and a second node joined with ``ray start --address`` (1 CPU, its own
    temp dir and a custom resource): a 24-run sweep through ``--ray-address`` puts runs on
    both nodes (each run's worker PID is a descendant of one node's ``ray start``, and each
    node is alive in ``ray.nodes()`` under its own node id)."""
    from mixdp_core.runs.store import RunStore
    from mixdp_core.runs.sweep import SweepSpec, run_sweep

    port = _free_port()
    tmp_head = tempfile.mkdtemp(prefix=f"rh{os.getpid() % 100000}_", dir="/tmp")
    tmp_node = tempfile.mkdtemp(prefix=f"rn{os.getpid() % 100000}_", dir="/tmp")
    started: list[tuple[subprocess.Popen, Any]] = []
    try:
        started.append(_start(["--head", f"--port={port}", f"--temp-dir={tmp_head}", "--include-dashboard=false",
                               "--num-cpus=1", "--resources={\"head_node\": 1}"], tmp_head, "head.log"))
        started.append(_start([f"--address=127.0.0.1:{port}", f"--temp-dir={tmp_node}", "--num-cpus=1",
                               "--resources={\"second_node\": 1}"], tmp_node, "node.log"))
        ray.init(address=f"127.0.0.1:{port}", log_to_driver=False)
        deadline = time.time() + 30
        while sum(n["Alive"] for n in ray.nodes()) < 2:
            assert time.time() < deadline, f"second node did not join: {ray.nodes()}"
            time.sleep(0.3)
        by_res = {r: n["NodeID"] for n in ray.nodes() if n["Alive"] for r in ("head_node", "second_node")
                  if r in n["Resources"]}
        assert set(by_res) == {"head_node", "second_node"} and len(set(by_res.values())) == 2

        monkeypatch.setenv("MIXDP_CACHE", str(tmp_path / "cache"))
        store = RunStore(tmp_path / "store")
        spec = SweepSpec(methods=("adamix", "ngd", "ppgd", "fully_private"), epsilons=(0.5, 1, 3), seeds=(0, 1),
                         params={"noise_multiplier": 20})
        configs = spec.configs()
        assert len(configs) >= 20
        out = run_sweep(configs, store=store, backend="ray", address=f"127.0.0.1:{port}", spec=spec)
        assert out.status == "completed" and out.n_failed == 0
        runs = store.list_runs()
        assert len(runs) == len(configs) and all(r.status == "completed" and r.pid == os.getpid() for r in runs)
        pids = {r.metrics["worker"]["pid"] for r in runs}
        per_node = {name: pids & _descendants(proc.pid) for name, (proc, _) in zip(("head_node", "second_node"),
                                                                                   started)}
        assert per_node["head_node"] and per_node["second_node"], (per_node, pids)
        assert pids == per_node["head_node"] | per_node["second_node"]  # no run trained elsewhere
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for proc, log in reversed(started):  # the worker node first, then the head
            _stop(proc, log)
        shutil.rmtree(tmp_head, ignore_errors=True)
        shutil.rmtree(tmp_node, ignore_errors=True)
