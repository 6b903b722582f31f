import json
import multiprocessing as mp
import os
import signal
import sqlite3
import time

import numpy as np
import pytest

from mixdp_core.errors import ConfigError
from mixdp_core.runs import (
    COMPLETED,
    FAILED,
    RUNNING,
    RunNotFoundError,
    RunStore,
    default_home,
)

CTX = mp.get_context("fork")


def _cfg(method="adamix", seed=0):
    return {"dataset": "digits", "encoder": "pixels", "method": method, "seed": seed, "target_epsilon": 3.0}


def test_default_home_env(monkeypatch, tmp_path):
    monkeypatch.setenv("MIXDP_HOME", str(tmp_path / "h"))
    assert default_home() == tmp_path / "h"
    monkeypatch.delenv("MIXDP_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_home() == tmp_path / "xdg" / "mixdp"
    assert RunStore().root == tmp_path / "xdg" / "mixdp"


def test_wal_mode_and_lifecycle(tmp_path):
    st = RunStore(tmp_path)
    with sqlite3.connect(st.db_path) as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    rid = st.create_run(_cfg(), config_hash="h1", split_hash="s1", versions={"numpy": np.__version__})
    rec = st.get_run(rid)
    assert rec.status == RUNNING and rec.method == "adamix" and rec.pid == os.getpid()
    st.add_step(rid, {"step": 1, "total_steps": 2, "train_loss": 0.5})
    st.append_steps(rid, [{"step": 2, "total_steps": 2, "train_loss": 0.4}])
    assert [s["step"] for s in st.steps(rid)] == [1, 2]
    assert st.find_completed("h1") is None
    st.finish(rid, COMPLETED, metrics={"test_error": 0.25})
    rec = st.get_run(rid)
    assert rec.status == COMPLETED and rec.metrics == {"test_error": 0.25}
    assert rec.finished_at >= rec.created_at and rec.duration_s >= 0
    assert st.find_completed("h1").run_id == rid
    assert not st.request_cancel(rid)  # already finished
    with pytest.raises(ConfigError, match="status"):
        st.finish(rid, "done")
    with pytest.raises(RunNotFoundError):
        st.get_run("nope")


def test_list_filters_delete_export(tmp_path):
    st = RunStore(tmp_path)
    ids = {}
    for m in ("adamix", "ngd", "paragon"):
        for seed in (0, 1):
            rid = st.create_run(_cfg(m, seed), config_hash=f"{m}{seed}", split_hash=f"s{seed}")
            st.add_step(rid, {"step": 1})
            st.finish(rid, COMPLETED if m != "ngd" else FAILED, metrics={"test_error": 0.1 * seed},
                      error="boom" if m == "ngd" else None)
            ids[m, seed] = rid
    assert len(st.list_runs()) == 6
    assert {r.method for r in st.list_runs(status=COMPLETED)} == {"adamix", "paragon"}
    assert len(st.list_runs(method=["adamix", "ngd"], seed=1)) == 2
    assert len(st.list_runs(split_hash="s0", status=[COMPLETED, FAILED])) == 3
    assert len(st.list_runs(limit=2)) == 2
    with pytest.raises(ConfigError, match="status"):
        st.list_runs(status="finished")
    st.save_artifacts(ids["adamix", 0], {"a": np.arange(3)})
    text = st.export(tmp_path / "out.json", method="adamix")
    data = json.loads((tmp_path / "out.json").read_text())
    assert text and len(data) == 2 and data[0]["steps"] == [{"step": 1}]
    csv_text = st.export(fmt="csv", status=FAILED)
    lines = csv_text.strip().splitlines()
    assert len(lines) == 3 and "metric.test_error" in lines[0] and "boom" in csv_text
    st.delete_run(ids["adamix", 0])
    assert not st.artifact_path(ids["adamix", 0]).exists()
    assert st.steps(ids["adamix", 0]) == []
    with pytest.raises(RunNotFoundError):
        st.get_run(ids["adamix", 0])
    live = st.create_run(_cfg(), config_hash="x")
    with pytest.raises(ConfigError, match="still running"):
        st.delete_run(live)
    st.delete_run(live, force=True)


def test_artifacts_atomic_roundtrip(tmp_path):
    st = RunStore(tmp_path)
    rid = st.create_run(_cfg(), config_hash="h")
    assert st.load_artifacts(rid) == {}
    arr = {"pdp_epsilon": np.linspace(0, 3, 10), "idx": np.arange(4)}
    st.save_artifacts(rid, arr)
    st.save_artifacts(rid, {**arr, "idx": np.arange(5)})  # overwrite
    back = st.load_artifacts(rid)
    assert np.allclose(back["pdp_epsilon"], arr["pdp_epsilon"]) and back["idx"].size == 5
    assert sorted(p.name for p in st.artifacts_dir.iterdir()) == [f"{rid}.npz"]  # no temp files

    class Boom:
        def __array__(self, *a, **k):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        st.save_artifacts(rid, {"x": Boom()})
    assert st.load_artifacts(rid)["idx"].size == 5  # old file intact
    assert sorted(p.name for p in st.artifacts_dir.iterdir()) == [f"{rid}.npz"]


def test_cancel_flag(tmp_path):
    st = RunStore(tmp_path)
    rid = st.create_run(_cfg(), config_hash="h")
    assert not st.is_cancel_requested(rid)
    assert st.request_cancel(rid)
    assert RunStore(tmp_path).is_cancel_requested(rid)  # visible from another handle


def _child_running(root, ready, release, qid):
    st = RunStore(root)
    rid = st.create_run(_cfg(), config_hash="live")
    st.add_step(rid, {"step": 1})
    qid.put(rid)
    ready.set()
    release.wait(30)
    st.add_step(rid, {"step": 2})
    st.finish(rid, COMPLETED, metrics={})


def test_killed_run_marked_failed_live_run_untouched(tmp_path):
    ready, release, q = CTX.Event(), CTX.Event(), CTX.Queue()
    p = CTX.Process(target=_child_running, args=(str(tmp_path), ready, release, q))
    p.start()
    assert ready.wait(30)
    rid = q.get(timeout=10)
    # a live run of another process must stay "running" when a store is opened
    st = RunStore(tmp_path)
    assert st.get_run(rid).status == RUNNING
    release.set()
    p.join(30)
    assert st.get_run(rid).status == COMPLETED

    ready2, release2, q2 = CTX.Event(), CTX.Event(), CTX.Queue()
    p2 = CTX.Process(target=_child_running, args=(str(tmp_path), ready2, release2, q2))
    p2.start()
    assert ready2.wait(30)
    rid2 = q2.get(timeout=10)
    os.kill(p2.pid, signal.SIGKILL)
    p2.join(30)
    assert RunStore(tmp_path, recover=False).get_run(rid2).status == RUNNING
    st2 = RunStore(tmp_path)  # "next start-up"
    rec = st2.get_run(rid2)
    assert rec.status == FAILED and "interrupted" in rec.error
    assert [s["step"] for s in st2.steps(rid2)] == [1]  # history kept


def test_reused_pid_and_remote_heartbeat(tmp_path):
    st = RunStore(tmp_path)
    a = st.create_run(_cfg(), config_hash="a")
    b = st.create_run(_cfg(), config_hash="b")
    c = st.create_run(_cfg(), config_hash="c")
    with sqlite3.connect(st.db_path) as con:
        con.execute("UPDATE runs SET pid_token='not-the-start-time' WHERE run_id=?", (a,))
        con.execute("UPDATE runs SET host='elsewhere', heartbeat_at=? WHERE run_id=?", (time.time() - 1000, b))
        con.execute("UPDATE runs SET host='elsewhere', heartbeat_at=? WHERE run_id=?", (time.time(), c))
    dead = RunStore(tmp_path, stale_after=300, recover=False).recover_interrupted()
    assert b in dead
    if os.path.exists("/proc/self/stat"):  # pid start tokens are read from /proc
        assert set(dead) == {a, b}
    assert st.get_run(c).status == RUNNING


def _writer(root, tag, n_runs, n_steps, barrier):
    st = RunStore(root)
    barrier.wait(30)
    for r in range(n_runs):
        rid = st.create_run(_cfg(tag, r), config_hash=f"{tag}-{r}")
        for s in range(n_steps):
            st.add_step(rid, {"step": s + 1, "tag": tag})
        st.save_artifacts(rid, {"x": np.full(10, r)})
        st.finish(rid, COMPLETED, metrics={"tag": tag})


def test_two_processes_write_concurrently(tmp_path):
    RunStore(tmp_path)
    barrier = CTX.Barrier(2)
    procs = [CTX.Process(target=_writer, args=(str(tmp_path), t, 3, 60, barrier)) for t in ("p", "q")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    st = RunStore(tmp_path)
    runs = st.list_runs(status=COMPLETED)
    assert len(runs) == 6
    for r in runs:
        steps = st.steps(r.run_id)
        assert [s["step"] for s in steps] == list(range(1, 61))
        assert all(s["tag"] == r.method for s in steps)
        assert st.load_artifacts(r.run_id)["x"].size == 10


def test_a_damaged_row_is_a_one_line_error_naming_the_run(tmp_path, capsys):
    """Half a metrics cell made `mixdp budget` and sweeps end in a JSONDecodeError traceback."""
    import sqlite3

    from mixdp_core.cli import main
    from mixdp_core.errors import StorageError
    from mixdp_core.runs.runner import RunConfig, execute
    from mixdp_core.runs.store import RunStore

    store = RunStore(tmp_path / "s")
    rid = execute(RunConfig(dataset="digits", encoder="pixels", method="only_public"), store=store,
                  cache_dir=tmp_path / "c")
    con = sqlite3.connect(tmp_path / "s" / "runs.sqlite")
    (m,) = con.execute("SELECT metrics_json FROM runs WHERE run_id=?", (rid,)).fetchone()
    con.execute("UPDATE runs SET metrics_json=? WHERE run_id=?", (m[: len(m) // 2], rid))
    con.commit()
    con.close()
    with pytest.raises(StorageError, match=f"^run {rid}: its stored metrics is unreadable"):
        store.list_runs()
    assert main(["budget", "--store", str(tmp_path / "s")]) != 0
    err = capsys.readouterr().err
    assert f"run {rid}: its stored metrics is unreadable" in err and "Traceback" not in err
