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
    with pytest.raises(ConfigError, match="^epsilon: adamix: must be a finite number > 0"):
        SweepSpec(methods=("adamix",), epsilons=(-1,)).expand()


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
    (["--resume", "sw-nope"], "resume"),
])
def test_cli_sweep_bad_arguments_one_line(env, capsys, extra, field):
    from mixdp_core.cli import main

    assert main(["sweep", "--methods", "ngd", "--no-progress", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"mixdp sweep: error: {field}"), err
