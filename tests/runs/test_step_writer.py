"""Batched step writes (RunStore.step_writer): fewer transactions, nothing older than max_age_s
lost when the writing process is killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mixdp_core.errors import ConfigError
from mixdp_core.runs.store import FAILED, RunStore

ROOT = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent("""
    import sys, time
    from mixdp_core.runs.store import RunStore
    st = RunStore(sys.argv[1])
    rid = st.create_run({"method": "x"}, config_hash="h")
    print(rid, flush=True)
    w = st.step_writer(rid, max_age_s=float(sys.argv[2]), max_steps=10**6)
    i = 0
    while True:
        w.append({"step": i})
        print(i, repr(time.time()), w.n_flushes, flush=True)  # appended step i at time t
        i += 1
        time.sleep(0.01)
""")


def test_sigkill_keeps_steps_older_than_max_age(tmp_path):
    max_age = 0.5
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path), str(max_age)], stdout=subprocess.PIPE,
                         text=True, env=env)
    try:
        rid = p.stdout.readline().strip()
        appended = []
        t_start = None
        while True:
            line = p.stdout.readline()
            assert line, "child died"
            i, t, n_flushes = line.split()
            appended.append((int(i), float(t)))
            t_start = t_start or float(t)
            if float(t) - t_start > 4 * max_age:
                break
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    t_kill = time.time()
    st = RunStore(tmp_path)  # reopening marks the dead run failed, history kept
    assert st.get_run(rid).status == FAILED
    steps = [s["step"] for s in st.steps(rid)]
    assert steps == list(range(len(steps)))  # a prefix, in order, no duplicates
    # every step appended more than max_age (+ slack for one write on a busy machine)
    # before the last appended step reached the database; the newest ones may be lost
    t_last = appended[-1][1]
    must = [i for i, t in appended if t < t_last - max_age - 0.25]
    assert must and len(steps) >= must[-1] + 1
    assert len(steps) < len(appended) + 5 and t_kill >= t_last
    # batched by age: about one transaction per 0.9 * max_age, not one per step
    duration = t_last - t_start
    assert 1 <= int(n_flushes) <= duration / (0.9 * max_age) + 2
    assert len(appended) >= 5 * int(n_flushes)


def test_writer_batches_by_count_and_age(tmp_path):
    st = RunStore(tmp_path)
    rid = st.create_run({"method": "x"}, config_hash="h")
    w = st.step_writer(rid, max_age_s=60.0, max_steps=4, background=False)
    flushed = [w.append({"step": i}) for i in range(10)]
    assert flushed == [False, False, False, True] * 2 + [False, False]
    assert [s["step"] for s in st.steps(rid)] == list(range(8))
    w.close()
    assert [s["step"] for s in st.steps(rid)] == list(range(10)) and w.n_flushes == 3
    with pytest.raises(ConfigError):
        w.append({"step": 10})
    # age: the background thread writes a lone record without a further append
    w2 = st.step_writer(rid, max_age_s=0.2, max_steps=1000)
    w2.append({"step": 10})
    deadline = time.time() + 5
    # both conditions: the thread commits the record, then counts the flush (a read between
    # the two saw 11 records and 0 flushes once, under load)
    while (len(st.steps(rid)) < 11 or w2.n_flushes < 1) and time.time() < deadline:
        time.sleep(0.02)
    assert len(st.steps(rid)) == 11 and w2.n_flushes == 1
    w2.close()
    # 0 = write at every append
    w3 = st.step_writer(rid, max_age_s=0)
    assert w3.append({"step": 11}) and len(st.steps(rid)) == 12
    w3.close()


def test_write_first_writes_the_first_record_at_once(tmp_path):
    """The runner's writer: the first record is in the store before max_age_s (the live
    charts' first point), the next ones are batched as usual."""
    st = RunStore(tmp_path)
    rid = st.create_run({"method": "x"}, config_hash="h")
    w = st.step_writer(rid, max_age_s=60.0, max_steps=100, background=False, write_first=True)
    assert w.append({"step": 1}) is True and [s["step"] for s in st.steps(rid)] == [1]
    assert [w.append({"step": i}) for i in (2, 3)] == [False, False]
    assert [s["step"] for s in st.steps(rid)] == [1] and w.n_flushes == 1
    w.close()
    assert [s["step"] for s in st.steps(rid)] == [1, 2, 3]
    plain = st.step_writer(rid, max_age_s=60.0, max_steps=100, background=False)
    assert plain.append({"step": 4}) is False  # default: batched from the first record
    plain.close()
