"""kill -9 at random points of a run and of an encode, and concurrent writers: nothing in
the store or the feature cache is lost or left corrupt."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .conftest import REPO, Outcome, assert_ok, orphan_files, record, store_snapshot


def _env(home: Path, cache: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MIXDP_HOME=str(home),
                MIXDP_CACHE=str(cache), MIXDP_OFFLINE="1")


def _running_rows(home: Path) -> int:
    import sqlite3

    try:
        con = sqlite3.connect(Path(home) / "runs.sqlite", timeout=5)
        try:
            return con.execute("SELECT COUNT(*) FROM runs WHERE status='running'").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def _kill_at_random(cmd: list[str], env: dict, lo: float, hi: float, rng: random.Random,
                    home: Path | None = None) -> float:
    """Start ``mixdp <cmd>``; kill -9 it ``lo..hi`` s after start, or, with ``home``, that
    long after its run row appeared (so the kill lands inside the run)."""
    p = subprocess.Popen([sys.executable, "-m", "mixdp_core.cli", *cmd], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    t0 = time.perf_counter()
    if home is not None:
        while _running_rows(home) == 0 and p.poll() is None and time.perf_counter() - t0 < 15:
            time.sleep(0.05)
    delay = rng.uniform(lo, hi)
    time.sleep(delay)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    return time.perf_counter() - t0


def test_kill9_during_runs_loses_nothing(env, baseline_run):
    from mixdp_core.runs.store import RunStore

    rng = random.Random(int(os.environ.get("MIXDP_FAULT_SEED", "15")))
    home, cache = env["home"], env["cache"]
    before = store_snapshot(home)
    t0 = time.perf_counter()
    delays = []
    for i in range(int(os.environ.get("MIXDP_FAULT_KILLS", "1"))):
        delays.append(_kill_at_random(["train", "--dataset", "digits", "--encoder", "pixels", "--method", "adamix",
                                       "--noise-multiplier", "200", "--epsilon", "1", "--seed", str(i),
                                       "--no-progress"], _env(home, cache), 0.0, 1.5, rng, home=home))
    store = RunStore(home)  # reopening marks the killed runs failed, history kept
    after = store_snapshot(home)
    o = Outcome("kill -9 at a random point of a run", "crash", "documented", "-")
    o.seconds = time.perf_counter() - t0
    probs = [k for k, v in before.items() if k not in after or after[k][1] < v[1]]
    probs += [k for k, v in after.items() if v[0] == "running"]
    probs += orphan_files(cache)  # cache writes are atomic; a kill leaves at most young temp files
    o.outcome = "documented"
    o.message = (f"killed after {', '.join(f'{d:.1f}' for d in delays)} s; {len(after) - len(before)} killed run(s) "
                 f"marked failed on reopen, history kept; store integrity ok")
    o.lost, o.notes = bool([p for p in probs if not p.endswith((".tmp", ".npz", ".json"))]), probs
    record(o)
    assert not o.lost, probs
    assert store.get_run(baseline_run).status == "completed"
    assert o.seconds < 10 * len(delays)


def test_kill9_during_encode_leaves_cache_valid(env, tmp_path):
    from mixdp_core.features.cache import get_features

    rng = random.Random(7)
    cache = tmp_path / "cache_kill"
    t0 = time.perf_counter()
    d = _kill_at_random(["encode", "--dataset", "digits", "--encoder", "pixels", "--no-progress",
                         "--cache-dir", str(cache), "--dtype", "float32"], _env(env["home"], cache), 0.3, 2.5, rng)
    # every entry is complete (meta.json written last) or ignored; the next call works
    for entry in cache.glob("*"):
        if (entry / "meta.json").exists():
            assert (entry / "features.npz").exists()
    fs = get_features("digits", "pixels", cache_dir=cache, dtype="float32")
    assert fs.X_train.shape[0] > 0 and np.isfinite(fs.X_train).all()
    o = Outcome("kill -9 at a random point of an encode", "crash", "documented", "-", outcome="documented",
                seconds=time.perf_counter() - t0,
                message=f"killed after {d:.1f} s; cache entry complete or absent; re-encode works")
    record(o)
    assert_ok(o)


_WRITER = """
import sys
from mixdp_core.runs.store import RunStore
s = RunStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    r = s.create_run({"method": "w", "dataset": "d", "encoder": "e", "seed": i}, config_hash=sys.argv[2] + str(i))
    s.append_steps(r, [{"step": k, "v": k} for k in range(1, 6)])
    s.finish(r, "completed", metrics={"i": i})
"""


def test_concurrent_writers_lose_nothing(env, tmp_path):
    home = tmp_path / "conc"
    from mixdp_core.runs.store import RunStore

    RunStore(home)
    t0 = time.perf_counter()
    n_proc, n_runs = 6, 5
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(home), f"p{j}-", str(n_runs)],
                              env=_env(home, env["cache"]), stderr=subprocess.PIPE) for j in range(n_proc)]
    errs = [p.communicate(timeout=60)[1].decode() for p in procs]
    snap = store_snapshot(home)
    o = Outcome(f"{n_proc} concurrent writers x {n_runs} runs", "concurrency", "documented", "-",
                outcome="documented", seconds=time.perf_counter() - t0)
    probs = [e for e in errs if e.strip()]
    if len(snap) != n_proc * n_runs or any(v != ("completed", 5) for v in snap.values()):
        probs.append(f"store has {len(snap)} runs: {sorted(set(snap.values()))}")
    o.lost, o.notes = bool(probs), probs
    o.message = f"{len(snap)} runs, all completed with 5 steps"
    record(o)
    assert_ok(o)
