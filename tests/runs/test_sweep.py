"""The sweep engine on the local executor: grid expansion, reuse, resume, worker loss,
store migration, and the ``mixdp sweep`` CLI."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from mixdp_core.errors import ConfigError
from mixdp_core.runs.store import RunStore
from mixdp_core.runs.sweep import (
    SweepSpec,
    TaskError,
    Variant,
    get_sweep,
    map_trainings,
    run_sweep,
)


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXDP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MIXDP_CACHE", str(tmp_path / "cache"))
    return tmp_path


# ------------------------------------------------------------------------------ grid
def test_expand_grid_counts_and_reference_runs_once_per_cell():
    spec = SweepSpec(methods=("paragon", "adamix", Variant("adamix_rank", "adamix", {"projection": "rank"})),
                     epsilons=(0.5, 1, 3), seeds=(0, 1), public_per_class=(2, 5), params={"noise_multiplier": 20})
    pts = spec.expand()
    # per (seed, ppc) cell: paragon once + 2 private variants x 3 eps
    assert len(pts) == 2 * 2 * (1 + 2 * 3)
    assert [p.label for p in pts[:4]] == ["paragon"] * 4  # references first
    rank = [p for p in pts if p.label == "adamix_rank"]
    assert all(p.config.method_params == {"noise_multiplier": 20, "projection": "rank"} for p in rank)
    assert all("noise_multiplier" not in p.config.method_params for p in pts if p.label == "paragon")
    assert len({p.config.config_hash() for p in pts}) == len(pts)


def test_spec_from_toml_and_errors_name_the_field(tmp_path):
    f = tmp_path / "grid.toml"
    f.write_text('dataset = "digits"\nencoders = ["pixels"]\n'
                 'methods = ["ngd", {label = "ada_r", method = "adamix", params = {projection = "rank"}}]\n'
                 "epsilons = [1, 3]\nseeds = [0]\n[params]\nnoise_multiplier = 20\n")
    spec = SweepSpec.from_toml(f)
    assert [v.label for v in spec.methods] == ["ngd", "ada_r"] and spec.epsilons == (1, 3)
    assert SweepSpec.from_dict(spec.to_dict()) == spec
    f.write_text('methods = ["adamix"]\nepsilonz = [1]\n')
    with pytest.raises(ConfigError, match="^epsilonz: not a sweep field"):
        SweepSpec.from_toml(f)
    with pytest.raises(ConfigError, match="^methods: unknown method 'nope'"):
        SweepSpec(methods=("nope",)).expand()
    with pytest.raises(ConfigError, match=r"^epsilon: adamix: must be a finite number in \[0.001, 1000\]"):
        SweepSpec(methods=("adamix",), epsilons=(-1,)).expand()
    # tracebacks before: a params string in a method entry, a non-number delta / placeholder ε
    with pytest.raises(ConfigError, match="^params: a method entry's params must be a table"):
        SweepSpec(methods=({"method": "adamix", "params": "x"},))
    with pytest.raises(ConfigError, match="^nonprivate_epsilon: must be a number"):
        SweepSpec(methods=("paragon",), nonprivate_epsilon="abc")
    with pytest.raises(ConfigError, match=r"^delta: must be a finite number in \(0, 0.1\]"):
        SweepSpec(methods=("adamix",), delta=0.5)
    with pytest.raises(ConfigError, match="^delta: must be a number, got True"):
        SweepSpec(methods=("adamix",), delta=True)


# ------------------------------------------------------------------------------ engine
def test_sweep_local_records_reuses_and_computes_boost(env):
    store = RunStore(env / "store")
    spec = SweepSpec(methods=("paragon", "only_public", "adamix", "ngd"), epsilons=(0.5, 2), seeds=(0,))
    configs = spec.configs()
    seen = []
    out = run_sweep(configs, store=store, workers=2, spec=spec, on_result=seen.append)
    assert out.status == "completed" and out.n_failed == 0 and out.n_reused == 0
    assert sorted(r.index for r in seen) == list(range(len(configs)))
    runs = store.list_runs()
    assert len(runs) == len(configs)
    for r in out.results:
        rec = store.get_run(r.run_id)
        assert rec.status == "completed" and rec.config_hash == configs[r.index].config_hash()
        assert len(store.steps(r.run_id)) == rec.metrics["n_step_records"] >= 1
        assert store.load_artifacts(r.run_id)  # per-sample arrays written by the driver
        if rec.method in ("adamix", "ngd"):
            # references were written first, so the boost is there; ε from the accountant
            assert rec.metrics["performance_boost"] is not None
            assert 0 < rec.metrics["epsilon"] <= rec.target_epsilon + 1e-9
    with sqlite3.connect(store.db_path) as con:
        assert {row[0] for row in con.execute("SELECT sweep_id FROM runs")} == {out.sweep_id}
    sw = get_sweep(store, out.sweep_id)
    assert sw["status"] == "completed" and sw["spec"]["methods"][2]["method"] == "adamix"
    assert [x["run_id"] for x in sw["runs"]] == [r.run_id for r in out.results]
    # the same sweep again: every run reused, nothing trained
    again = run_sweep(configs, store=store, workers=2, spec=spec)
    assert again.sweep_id == out.sweep_id and again.n_reused == len(configs)
    assert [r.run_id for r in again.results] == [r.run_id for r in out.results]
    assert len(store.list_runs()) == len(configs)


def test_killed_sweep_resumes_without_recomputing(env):
    store = RunStore(env / "store")
    configs = SweepSpec(methods=("ngd", "ppgd"), epsilons=(0.5, 1, 2), seeds=(0,)).configs()
    landed = []
    first = run_sweep(configs, store=store, workers=1, on_result=landed.append,
                      should_stop=lambda: len(landed) >= 2)  # "killed" after two runs
    assert first.status == "cancelled"
    done_ids = {r.run_id for r in first.results if r.status == "completed"}
    assert len(done_ids) == 2
    second = run_sweep(configs, store=store, workers=1)
    assert second.status == "completed" and second.n_reused == 2
    assert done_ids <= {r.run_id for r in second.results}
    assert len(store.list_runs()) == len(configs)  # nothing trained twice


def test_a_no_reuse_sweep_run_again_keeps_its_own_finished_runs(env):
    """An interrupted --no-reuse sweep said "run the same command to resume"; the same command (or
    --resume) trained its finished runs again and charged their ε twice."""
    store = RunStore(env / "store")
    configs = SweepSpec(methods=("ngd",), epsilons=(0.5, 1, 2), seeds=(0,)).configs()
    landed = []
    first = run_sweep(configs, store=store, workers=1, reuse=False, on_result=landed.append,
                      should_stop=lambda: len(landed) >= 1)
    assert first.status == "cancelled"
    second = run_sweep(configs, store=store, workers=1, reuse=False)
    assert second.status == "completed" and second.n_reused >= 1
    assert len(store.list_runs()) == len(configs)  # nothing trained twice
    # a fresh --no-reuse sweep of another id still trains again (that is what --no-reuse asks)
    third = run_sweep(configs, store=store, workers=1, reuse=False, sweep_id="sw-other")
    assert third.n_reused == 0 and len(store.list_runs()) == 2 * len(configs)


def test_resume_refuses_a_grid_that_expands_to_other_runs_now(env):
    """A resumed grid was re-expanded without a check: a relative data path read in another folder
    (or changed code or data) retrained every run under the old sweep's id."""
    from mixdp_core.runs.sweep import resume_spec

    store = RunStore(env / "store")
    spec = SweepSpec(methods=("ngd",), epsilons=(1,), seeds=(0,))
    out = run_sweep(spec.configs(), store=store, workers=1, spec=spec)
    assert resume_spec(store, out.sweep_id)[1][0].config_hash() == out.results[0].config.config_hash()
    with store._connect() as con:  # what another folder's data (or other code) does to the hashes
        con.execute("UPDATE sweep_runs SET config_hash='changed' WHERE sweep_id=?", (out.sweep_id,))
    with pytest.raises(ConfigError, match="resume: .* expands to other runs now \\(1 of 1 differ"):
        resume_spec(store, out.sweep_id)


def test_a_grid_naming_a_config_twice_is_charged_once_against_the_cap(env):
    """The cap check charged a config named twice twice (the sweep trains it once): a grid of
    ε = 2 under a cap of 3 was refused."""
    from mixdp_core.runs import ledger as L

    store = RunStore(env / "store")
    c = SweepSpec(methods=("ngd",), epsilons=(2,)).configs()
    L.set_cap(store, L.dataset_key("digits"), 3.0)
    L.check_caps(store, c + c)
    out = run_sweep(c + c, store=store, workers=1)
    assert out.status == "completed" and L.dataset_ledger(store, L.dataset_key("digits")).epsilon_basic <= 2.0


def test_an_unreachable_ray_address_is_one_line_in_seconds():
    """`--ray-address 127.0.0.1:1` retried for good (534 s); it is refused after a short connect."""
    import time

    from mixdp_core.runs.sweep.executors import _check_reachable

    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match="ray_address: cannot connect to a Ray cluster at '127.0.0.1:1'"):
        _check_reachable("127.0.0.1:1")
    assert time.perf_counter() - t0 < 10
    _check_reachable("auto"), _check_reachable(None)  # Ray's to resolve


def test_duplicate_configs_train_once(env):
    store = RunStore(env / "store")
    c = SweepSpec(methods=("ngd",), epsilons=(1,)).configs()
    out = run_sweep(c + c, store=store, workers=1)
    assert out.results[0].run_id == out.results[1].run_id and len(store.list_runs()) == 1


def _die_once(item, shared):
    """Loses its worker process the first time it sees an item (marker files)."""
    marker = Path(shared["dir"]) / f"seen-{item}"
    if not marker.exists():
        marker.touch()
        if item % 2 == 0:
            os._exit(3)
    return item * shared["scale"], os.getpid()


def test_map_trainings_survives_worker_loss(tmp_path):
    shared = {"dir": str(tmp_path), "scale": 10}
    res = map_trainings(_die_once, list(range(6)), workers=2, shared=shared, max_retries=2)
    assert [r[0] for r in res] == [0, 10, 20, 30, 40, 50]
    for f in tmp_path.glob("seen-*"):
        f.unlink()
    with pytest.raises(TaskError, match="worker process lost"):
        map_trainings(_die_once, [0, 1], workers=2, shared=shared, max_retries=0)


def test_v1_store_is_migrated_and_stays_readable(tmp_path):
    db = tmp_path / "runs.sqlite"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE runs (run_id TEXT PRIMARY KEY, status TEXT NOT NULL, config_json TEXT NOT NULL,
          config_hash TEXT NOT NULL, split_hash TEXT, method TEXT, dataset TEXT, encoder TEXT, seed INTEGER,
          target_epsilon REAL, label TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL, finished_at REAL,
          heartbeat_at REAL, host TEXT, pid INTEGER, pid_token TEXT, versions_json TEXT, metrics_json TEXT,
          error TEXT, cancel_requested INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE steps (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, step INTEGER,
          record_json TEXT NOT NULL);
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
        INSERT INTO meta VALUES ('schema_version', '1');
        INSERT INTO runs(run_id, status, config_json, config_hash, method, created_at, updated_at, metrics_json)
          VALUES ('old-1', 'completed', '{"method": "ngd"}', 'h1', 'ngd', 1.0, 2.0, '{"test_error": 0.1}');
    """)
    con.commit()
    con.close()
    store = RunStore(tmp_path)
    assert store.get_run("old-1").metrics == {"test_error": 0.1}
    with sqlite3.connect(db) as con:
        assert "sweep_id" in {r[1] for r in con.execute("PRAGMA table_info(runs)")}
        assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "2"
    RunStore(tmp_path)  # opening again is a no-op
    rid = store.create_run({"method": "ngd"}, config_hash="h2", sweep_id="sw-x")
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT sweep_id FROM runs WHERE run_id=?", (rid,)).fetchone()[0] == "sw-x"


def test_private_per_class_caps_the_private_split(digits_features):
    from mixdp_core.data.splits import SplitSpec, make_split

    full = make_split(digits_features, SplitSpec(public_per_class=2, seed=0))
    capped = make_split(digits_features, SplitSpec(public_per_class=2, seed=0, private_per_class=7))
    assert capped.private_counts.tolist() == [7] * 10
    assert np.array_equal(capped.X_public, full.X_public)
    assert set(map(bytes, capped.X_private)) <= set(map(bytes, full.X_private))
    with pytest.raises(ConfigError, match="^private_per_class"):
        SplitSpec(private_per_class=0)


# ------------------------------------------------------------------------------ CLI
def test_cli_sweep_json_lines_then_reused(env, capsys):
    from mixdp_core.cli import main

    argv = ["sweep", "--dataset", "digits", "--encoder", "pixels", "--methods", "adamix,ngd", "--epsilons", "0.5,2",
            "--seeds", "0", "--workers", "1", "--json", "--no-progress"]
    assert main(argv) == 0
    cap = capsys.readouterr()
    lines = [json.loads(x) for x in cap.out.splitlines()]
    assert len(lines) == 4 and "sweep sw-" in cap.err
    for d in lines:
        assert {"run_id", "method", "epsilon", "seed", "test_error", "epsilon_spent", "reused"} <= set(d)
        assert d["reused"] is False and 0 < d["epsilon_spent"] <= d["epsilon"] + 1e-9
    assert sorted((d["method"], d["epsilon"]) for d in lines) == [("adamix", 0.5), ("adamix", 2.0),
                                                                   ("ngd", 0.5), ("ngd", 2.0)]
    assert main(argv) == 0
    again = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert all(d["reused"] for d in again) and {d["run_id"] for d in again} == {d["run_id"] for d in lines}


def test_cli_sweep_resume_of_an_unknown_sweep_is_one_line(env, capsys):
    from mixdp_core.cli import main

    assert main(["sweep", "--resume", "sw-nope", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("mixdp sweep: error: resume: no sweep 'sw-nope'"), err


@pytest.mark.parametrize("extra, field", [
    (["--epsilons", "0,1"], "epsilons"),
    (["--epsilons", "x"], "epsilons"),
    (["--seeds", "1.5"], "seeds"),
    (["--methods", "nope"], "methods"),
    (["--encoder", "nope"], "encoder"),
    (["--backend", "dask"], "backend"),
    (["--workers", "0"], "workers"),
    (["--imbalance-ratio", "0.5"], "imbalance_ratio"),
    (["--public-per-class", "0"], "public_per_class"),
    (["--ray-address", "auto"], "ray_address"),
    (["--config", "/nonexistent.toml"], "config"),
    (["--resume", "sw-nope"], "methods"),  # the base --methods beside --resume: refused, not ignored
    (["--param", "clip_percentil=50"], "clip_percentil"),  # a misspelt key was dropped silently
    (["--param", "d_min=0.5"], "d_min"),  # a real field of another family, unused by ngd: also refused
    # a local Ray head is this machine: the local bound; flags that do not apply are refused
    (["--backend", "ray", "--workers", "100000"], "workers"),
    (["--backend", "ray", "--ray-address", "auto", "--workers", "2"], "workers"),
    (["--ray-ship-code"], "ray_ship_code"),
])
def test_cli_sweep_bad_arguments_one_line(env, capsys, extra, field):
    from mixdp_core.cli import main

    assert main(["sweep", "--methods", "ngd", "--no-progress", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"mixdp sweep: error: {field}"), err


# ------------------------------------------------------------------------------ worker sessions
def _session_after(seconds: float) -> tuple[int, int]:
    import time

    time.sleep(seconds)
    return os.getsid(0), os.getpid()


def _pid_then_sleep(item: str | tuple[str, float]) -> int:
    import time

    path, seconds = (item, 120.0) if isinstance(item, str) else item
    Path(path, f"{os.getpid()}.pid").write_text("")
    time.sleep(seconds)
    return os.getpid()


def _state(pid: int) -> str | None:
    """The process state letter of ``pid`` (``Z`` = exited, not reaped), ``None`` if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _gone(pid: int, timeout: float = 10.0) -> bool:
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        if _state(pid) in (None, "Z", "X"):
            return True
        time.sleep(0.05)
    return False


linux_only = pytest.mark.skipif(not os.path.isdir("/proc/self") or not hasattr(os, "setsid"),
                                reason="worker sessions and /proc are Linux features")


@linux_only
def test_local_workers_each_lead_their_own_session():
    from mixdp_core.runs.sweep import LocalExecutor

    own = map_trainings(_session_after, [0.3] * 4, workers=2)
    assert len({pid for _, pid in own}) == 2  # both workers ran tasks
    assert all(sid == pid != os.getsid(0) for sid, pid in own)  # session leaders, not the driver's session
    ex = LocalExecutor(workers=2, own_session=False)
    try:
        shared = [r for _, r in ex.imap(_session_after, [0.3] * 2)]
    finally:
        ex.close()
    assert all(sid == os.getsid(0) for sid, _ in shared)


@linux_only
def test_closing_the_stream_terminates_workers_in_flight(tmp_path):
    """Ctrl-C of the driver no longer reaches workers in their own session: closing the result
    stream (what run_sweep and map_trainings do when KeyboardInterrupt or an error leaves their
    loop) must end the workers at once instead of waiting for their runs."""
    import time

    from mixdp_core.runs.sweep import LocalExecutor

    ex = LocalExecutor(workers=2)
    stream = ex.imap(_pid_then_sleep, [(str(tmp_path), 0.0), (str(tmp_path), 120.0), (str(tmp_path), 120.0)])
    first = next(stream)  # item 0 done; the two workers now sleep in items 1 and 2
    assert first[0] == 0
    deadline = time.time() + 30
    while len(list(tmp_path.glob("*.pid"))) < 2 and time.time() < deadline:
        time.sleep(0.05)
    pids = [int(p.stem) for p in tmp_path.glob("*.pid")]
    assert len(pids) == 2
    t0 = time.perf_counter()
    stream.close()
    ex.close()
    assert time.perf_counter() - t0 < 10
    assert all(_gone(pid) for pid in pids), [(_state(p), p) for p in pids]


@linux_only
def test_ctrl_c_inside_the_wait_terminates_workers_in_flight(tmp_path):
    """Ctrl-C (or SIGTERM) arrives while the driver waits inside the stream, not between its
    items: only a closed stream terminated the workers, so a local sweep waited 13-21 s for the
    runs in flight after the signal (and then dropped them)."""
    import signal
    import time

    from mixdp_core.runs.sweep import LocalExecutor

    ex = LocalExecutor(workers=2)
    stream = ex.imap(_pid_then_sleep, [(str(tmp_path), 120.0), (str(tmp_path), 120.0)])
    pids: list[int] = []
    fired: list[float] = []

    def interrupt(signum, frame):
        found = [int(p.stem) for p in tmp_path.glob("*.pid")]
        if len(found) == 2:  # both workers are in their runs: the user presses Ctrl-C now
            pids.extend(found)
            fired.append(time.perf_counter())
            signal.setitimer(signal.ITIMER_REAL, 0)
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2, 0.2)
        with pytest.raises(KeyboardInterrupt):
            next(stream)  # blocked inside the stream's wait() when the alarm fires
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert time.perf_counter() - fired[0] < 10  # not the 120 s of the runs in flight
    t0 = time.perf_counter()
    ex.close()
    while not all(_gone(pid) for pid in pids) and time.perf_counter() - t0 < 10:
        time.sleep(0.05)
    assert len(pids) == 2 and all(_gone(pid) for pid in pids), [(_state(p), p) for p in pids]


@linux_only
def test_workers_die_with_their_driver(tmp_path):
    """A driver killed with SIGKILL cannot clean up: its workers (own sessions, so no terminal
    signal reaches them) are ended by PR_SET_PDEATHSIG instead of running on as orphans."""
    import signal
    import subprocess
    import sys
    import time

    code = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.runs.test_sweep import _pid_then_sleep; "
            "from mixdp_core.runs.sweep import map_trainings; map_trainings(_pid_then_sleep, [sys.argv[2]] * 2, workers=2)")
    root = str(Path(__file__).resolve().parents[2])
    driver = subprocess.Popen([sys.executable, "-c", code, root, str(tmp_path)],
                              env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=root))
    try:
        deadline = time.time() + 60
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.time() < deadline and driver.poll() is None:
            time.sleep(0.05)
        pids = [int(p.stem) for p in tmp_path.glob("*.pid")]
        assert len(pids) == 2, "the workers did not start"
    finally:
        driver.send_signal(signal.SIGKILL)  # only the driver this test started
        driver.wait(timeout=10)
    survivors = [pid for pid in pids if not _gone(pid)]
    for pid in survivors:  # this test's own orphans, so that a failure leaves nothing behind
        os.kill(pid, signal.SIGKILL)
    assert not survivors, [(_state(p), p) for p in survivors]


def test_a_repeated_axis_value_is_one_grid_point():
    from mixdp_core.runs.sweep import SweepSpec

    s = SweepSpec(dataset="digits", methods=("ngd",), epsilons=(1, 1.0, 1), seeds=(0, 0))
    assert s.epsilons == (1.0,) and s.seeds == (0,) and s.n_points() == 1


def test_the_library_gives_a_figures_shared_params_to_the_variants_that_take_them():
    """Figures pass one set of parameters to every variant: a field only other registered
    methods take is accepted by SweepSpec (ignored where a method lacks it); a name no method
    declares is refused."""
    from mixdp_core.errors import ConfigError
    from mixdp_core.runs.sweep import SweepSpec

    s = SweepSpec(dataset="digits", methods=("paragon", "only_public"), params={"noise_multiplier": 20})
    assert s.n_points() == 2
    with pytest.raises(ConfigError) as e:
        SweepSpec(dataset="digits", methods=("ngd",), params={"noise_multiplyer": 20})
    assert e.value.field == "noise_multiplyer"


def test_map_trainings_reports_the_tasks_that_started(tmp_path):
    """What may have run when a figure's stream ends: every task of a complete pool run, the
    tasks up to the failing one inline, never one that was not begun."""
    from mixdp_core.runs.sweep import map_trainings

    started: set = set()
    assert map_trainings(_square, [1, 2, 3], workers=2, started=started) == [1, 4, 9]
    assert started == {0, 1, 2}
    started = set()
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C inside the third task, inline
        map_trainings(_interrupt_at_two, [0, 1, 2, 3, 4], workers=1, started=started)
    assert started == {0, 1, 2}


def _square(x):
    return x * x


def _interrupt_at_two(x):
    if x == 2:
        raise KeyboardInterrupt
    return x


def _fail_before_or_after_noise(item):
    from mixdp_core.errors import ConfigError
    from mixdp_core.randomness import noise_rng

    if item == "after":
        noise_rng("secure", 0, 1)  # a release's generator made: it may have released
    raise ConfigError("epochs", f"refused ({item})")


@pytest.mark.parametrize("workers", [1, 2])
def test_a_task_error_says_whether_the_task_drew_private_noise(workers):
    """A figure's fit that fails before making any release's noise generator (a refusal from
    public values) released nothing and is not charged; one that fails after may have released
    (charged). The executors carry the difference on the TaskError, in-process and across the pool."""
    res = map_trainings(_fail_before_or_after_noise, ["before", "after"], workers=workers, raise_errors=False)
    assert [type(r).__name__ for r in res] == ["TaskError", "TaskError"]
    assert res[0].released is False and res[1].released is True
    assert "epochs" in str(res[0])
