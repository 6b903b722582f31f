"""Fault-injection suite: every case is recorded (outcome, field, seconds, peak memory,
whether anything was lost) and, when ``MIXDP_RELIABILITY_OUT`` names a file, the records
are written there as JSON at the end of the session (``scripts/reliability_table.py`` turns
them into the table of ``docs/reliability.md``)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS: list[dict[str, Any]] = []

#: Every case must finish within this many seconds and below this peak RSS.
CASE_SECONDS = 10.0
PEAK_BYTES = 2**30


@dataclass
class Outcome:
    case: str
    category: str
    expect: str  # "clear" (one-line error naming the field) or "documented" (accepted, warned)
    field: str
    outcome: str = "?"  # clear | documented | unclear | traceback
    lost: bool = False
    seconds: float = 0.0
    peak_mb: Optional[float] = None
    message: str = ""
    notes: list = field(default_factory=list)


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("MIXDP_RELIABILITY_OUT")
    if out and RESULTS:
        Path(out).write_text(json.dumps(RESULTS, indent=1))


def record(o: Outcome) -> Outcome:
    RESULTS.append(asdict(o))
    return o


# ----------------------------------------------------------------------------- store checks
def orphan_files(*roots: Path) -> list[str]:
    """Hidden temp files of atomic writes / uploads left anywhere under ``roots``."""
    bad = []
    for r in roots:
        if not Path(r).exists():
            continue
        for p in Path(r).rglob(".*"):
            if p.name.endswith((".tmp", ".npz", ".json")) and p.name.startswith("."):
                bad.append(str(p))
    return bad


def store_snapshot(home: Path) -> dict[str, tuple[str, int]]:
    """``{run_id: (status, n_steps)}`` read straight from SQLite (integrity checked)."""
    db = Path(home) / "runs.sqlite"
    if not db.exists():
        return {}
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = con.execute("SELECT r.run_id, r.status, (SELECT COUNT(*) FROM steps s WHERE s.run_id=r.run_id) "
                           "FROM runs r").fetchall()
    finally:
        con.close()
    return {r[0]: (r[1], r[2]) for r in rows}


def lost_between(before: dict, after: dict) -> list[str]:
    """Runs that vanished, changed status or lost steps; runs left ``running``."""
    probs = [f"{k} lost or changed" for k, v in before.items()
             if k not in after or after[k][1] < v[1] or (v[0] != "running" and after[k][0] != v[0])]
    probs += [f"{k} left running" for k, v in after.items() if v[0] == "running"]
    return probs


@pytest.fixture(scope="session")
def suite_dirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("robust")
    d = {"home": base / "home", "cache": base / "cache", "files": base / "files", "data_root": base / "data_root"}
    for p in d.values():
        p.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture
def env(suite_dirs, monkeypatch):
    monkeypatch.setenv("MIXDP_HOME", str(suite_dirs["home"]))
    monkeypatch.setenv("MIXDP_CACHE", str(suite_dirs["cache"]))
    monkeypatch.setenv("MIXDP_DATA_ROOT", str(suite_dirs["data_root"]))
    monkeypatch.setenv("MIXDP_OFFLINE", "1")
    return suite_dirs


@pytest.fixture(scope="session")
def baseline_run(suite_dirs):
    """One completed run in the suite's store, which no case may lose."""
    mp = pytest.MonkeyPatch()
    mp.setenv("MIXDP_HOME", str(suite_dirs["home"]))
    mp.setenv("MIXDP_CACHE", str(suite_dirs["cache"]))
    try:
        from mixdp_core.cli import main

        buf_o, buf_e = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(buf_o), contextlib.redirect_stderr(buf_e):
            rc = main(["train", "--dataset", "digits", "--encoder", "pixels", "--method", "only_public",
                       "--json", "--no-progress"])
        assert rc == 0, buf_e.getvalue()
        return json.loads(buf_o.getvalue())["run_id"]
    finally:
        mp.undo()


# ----------------------------------------------------------------------------- runners
def classify(rc: Optional[int], err: str, expect: str, fld: str, exc: Optional[BaseException]) -> tuple[str, str]:
    """``(outcome, message)`` from a command's exit status and stderr."""
    if exc is not None or "Traceback" in err:
        return "traceback", (err.strip().splitlines() or [repr(exc)])[-1]
    err_lines = [ln for ln in err.splitlines() if ": error: " in ln]
    if rc == 0:
        return ("documented" if expect == "documented" else "accepted"), (err_lines[0] if err_lines else "")
    if len(err_lines) == 1 and fld.lower() in err_lines[0].lower():
        return "clear", err_lines[0]
    return "unclear", " | ".join(err.strip().splitlines()[-3:])


def run_inprocess(case: Outcome, argv: list[str], env_dirs: dict, extra_check: Optional[Callable] = None) -> Outcome:
    """Run ``mixdp <argv>`` in this process and classify it."""
    from mixdp_core.cli import main

    before = store_snapshot(env_dirs["home"])
    buf_o, buf_e = io.StringIO(), io.StringIO()
    exc = None
    rc = None
    t0 = time.perf_counter()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        # as in a real process: warnings are printed on stderr
        warnings.showwarning = lambda m, c, f, n, file=None, line=None: buf_e.write(f"{c.__name__}: {m}\n")
        with contextlib.redirect_stdout(buf_o), contextlib.redirect_stderr(buf_e):
            limit = int(os.environ.get("MIXDP_CASE_ALARM_S", "0"))  # safety net for old code
            if limit:
                import signal

                def _alarm(*_):
                    raise TimeoutError(f"case still running after {limit} s (safety net)")

                signal.signal(signal.SIGALRM, _alarm)
                signal.alarm(limit)
            try:
                rc = main(argv)
            except SystemExit as e:  # argparse
                rc = e.code
            except BaseException as e:  # noqa: BLE001 - a traceback is a finding
                exc = e
                buf_e.write(traceback.format_exc())
            finally:
                if limit:
                    signal.alarm(0)
    case.seconds = time.perf_counter() - t0
    case.outcome, case.message = classify(rc, buf_e.getvalue(), case.expect, case.field, exc)
    after = store_snapshot(env_dirs["home"])
    probs = lost_between(before, after) + orphan_files(env_dirs["home"], env_dirs["cache"])
    if extra_check is not None:
        probs += extra_check(rc, buf_o.getvalue(), buf_e.getvalue()) or []
    case.lost = bool(probs)
    case.notes = probs
    return record(case)


_LAUNCHER = (
    "import os, resource, subprocess, sys, time\n"
    "kill_kb = int(os.environ.get('MIXDP_CASE_KILL_KB', '0')); limit = float(os.environ.get('MIXDP_CASE_KILL_S', '0'))\n"
    "p = subprocess.Popen(sys.argv[1:]); t0 = time.time(); why = ''\n"
    "while p.poll() is None:\n"
    "    time.sleep(0.05)\n"
    "    if kill_kb or limit:  # safety net when measuring old code: stop runaway cases\n"
    "        try:\n"
    "            rss = int(next(l for l in open(f'/proc/{p.pid}/status') if l.startswith('VmRSS')).split()[1])\n"
    "        except Exception:\n"
    "            rss = 0\n"
    "        if kill_kb and rss > kill_kb: why = f'killed above {kill_kb // 1024} MB RSS'; p.kill()\n"
    "        if limit and time.time() - t0 > limit: why = f'killed after {limit:g} s'; p.kill()\n"
    "p.wait()\n"
    "if why: sys.stderr.write('\\nTraceback (safety net): ' + why + '\\n')\n"
    "sys.stderr.write('\\nMAXRSS_KB %d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.exit(p.returncode)\n"
)


def run_subprocess(case: Outcome, cmd: list[str], env_dirs: dict, env_extra: Optional[dict] = None,
                   timeout: float = 60.0) -> Outcome:
    """Run ``cmd`` (a Python command line) in a child of a launcher that reports the child's
    peak RSS from ``resource.getrusage(RUSAGE_CHILDREN)``."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MIXDP_HOME=str(env_dirs["home"]),
               MIXDP_CACHE=str(env_dirs["cache"]), MIXDP_OFFLINE="1", **(env_extra or {}))
    before = store_snapshot(env_dirs["home"])
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _LAUNCHER, sys.executable, *cmd], env=env, capture_output=True,
                       text=True, timeout=timeout)
    case.seconds = time.perf_counter() - t0
    err = p.stderr
    kb = [ln for ln in err.splitlines() if ln.startswith("MAXRSS_KB ")]
    case.peak_mb = int(kb[-1].split()[1]) / 1024 if kb else None
    err = "\n".join(ln for ln in err.splitlines() if not ln.startswith("MAXRSS_KB "))
    case.outcome, case.message = classify(p.returncode, err, case.expect, case.field, None)
    probs = lost_between(before, store_snapshot(env_dirs["home"])) + orphan_files(env_dirs["home"], env_dirs["cache"])
    case.lost = bool(probs)
    case.notes = probs
    return record(case)


def assert_ok(o: Outcome) -> None:
    assert o.outcome == o.expect, f"{o.case}: {o.outcome}: {o.message}"
    assert not o.lost, f"{o.case}: {o.notes}"
    assert o.seconds < CASE_SECONDS, f"{o.case}: {o.seconds:.1f} s"
    if o.peak_mb is not None:
        assert o.peak_mb * 2**20 < PEAK_BYTES, f"{o.case}: peak {o.peak_mb:.0f} MB"
