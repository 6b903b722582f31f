"""The sweep driver: run a list of ``RunConfig`` s and record every run in one run store.

Contract:

* :func:`run_sweep` trains each config at most once per store: a run already ``completed``
  with the same config hash is reused, never recomputed (also within the sweep), so a
  killed sweep, started again, resumes where it stopped (:func:`resume_spec`).
* Feature matrices are loaded once per (dataset, encoder, options) by the driver and
  shipped once per executor (:mod:`.executors`); workers train without a store.
* Only the driver writes the SQLite store: runs (tagged with the sweep id), the ``sweeps``
  / ``sweep_runs`` rows (:func:`get_sweep`, :func:`list_sweeps`). Private runs whose
  reference runs (paragon, only-public of the same split) are still pending in the sweep are
  written after them, so their Performance Boost is computed.
* The sweep id is deterministic (:func:`sweep_id_for`): the same grid on the same code gets
  the same id. A failed run is a :class:`SweepResult` with status ``failed``, not an
  exception; ``should_stop`` cancels the rest (status ``cancelled``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from ...errors import ConfigError
from ..store import COMPLETED, FAILED, RunNotFoundError, RunStore
from .executors import TaskError, make_executor
from .spec import SweepSpec

@dataclass
class SweepResult:
    """What :func:`run_sweep` reports for one config (``on_result`` and the outcome).

    ``reused``: an earlier completed run was found (nothing trained). ``metrics``: the
    stored metrics (``test_error``, ``epsilon`` = ε from the accounting module for the run
    as executed, ``None`` for non-private methods...)."""

    index: int
    config: Any
    run_id: str | None
    status: str
    reused: bool
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        """One JSON-ready line: ``epsilon`` is the grid's target ε (``None`` for
        non-private methods, which ignore it), ``epsilon_spent`` the accounted ε."""
        from ...methods import METHODS
        from ..owner_view import move_hidden, public_error
        from ..runner import DIAGNOSTICS_NOTE

        c, m = self.config, self.metrics
        private = bool(getattr(METHODS.get(c.method), "private", True))
        out = {
            "run_id": self.run_id, "status": self.status, "method": c.method,
            "dataset": c.dataset, "encoder": c.encoder, "seed": c.seed,
            "epsilon": c.target_epsilon if private else None, "delta": c.target_delta,
            "epsilon_spent": m.get("epsilon"), "public_per_class": c.public_per_class,
            "imbalance_ratio": c.imbalance_ratio, "private_per_class": c.private_per_class,
            "test_error": m.get("test_error"), "minority_accuracy": m.get("minority_accuracy"),
            "performance_boost": m.get("performance_boost"),
            "wall_seconds": m.get("wall_seconds"), "reused": self.reused,
            # an error's message can quote the private data (a class's exact count): its type and
            # field here, the whole text in the owner's block, as the store's exports do
            "error": public_error(self.error),
            # a run on noise replayable from its seed says so on its line, as train --json does
            "noise": m.get("noise"), "noise_label": m.get("noise_label"),
        }
        # owner-only (no DP guarantee), grouped under its note as `mixdp train --json` does: the
        # attack's AUC and what a public view hides (the boost, a secret-dependent duration,
        # every outcome of the paragon; owner_view.hidden_from_public)
        diag = {"note": DIAGNOSTICS_NOTE, "mia_auc": m.get("mia_auc")}
        if self.error is not None and self.error != out["error"]:
            diag["error"] = self.error
        move_hidden(out, m, diag)
        out["diagnostics"] = diag
        return out


@dataclass
class SweepOutcome:
    """Result of :func:`run_sweep`: ``results[i]`` belongs to ``configs[i]``."""

    sweep_id: str
    results: list[SweepResult]
    status: str
    wall_seconds: float

    @property
    def n_reused(self) -> int:
        return sum(r.reused for r in self.results)

    @property
    def n_failed(self) -> int:
        return sum(r.status != COMPLETED for r in self.results)


def sweep_id_for(hashes: Sequence[str]) -> str:
    """Deterministic id of a sweep (the same grid on the same code gets the same id, so
    re-running a killed sweep continues it)."""
    return "sw-" + hashlib.sha256("\n".join(sorted(set(hashes))).encode()).hexdigest()[:12]


def _feature_key(c: Any) -> str:
    return json.dumps([c.dataset, c.encoder, c.dataset_root, c.dataset_kwargs, c.encoder_kwargs, c.public_from],
                      sort_keys=True, default=str)


def _train_item(item: tuple[dict, str, str | None, str], shared: Mapping[str, Any]):
    """Worker side of a sweep: train one config on the shipped features, no store."""
    from ..runner import RunConfig, train

    cfg_dict, key, cache_dir, chash = item
    feats, pub = shared.get(key, (None, None))
    # the driver's hash: the worker's working directory and files may differ (a remote node)
    return train(RunConfig.from_dict(cfg_dict), features=feats, public_features=pub, cache_dir=cache_dir,
                 config_hash=chash)


class _SweepLog:
    """The ``sweeps`` / ``sweep_runs`` rows of one sweep (driver side)."""

    def __init__(self, store: RunStore, sweep_id: str):
        self.store, self.sweep_id = store, sweep_id

    def start(self, spec: Mapping[str, Any], hashes: Sequence[str], backend: str) -> None:
        now = time.time()
        with self.store._connect() as con, self.store._write(con):
            con.execute("INSERT OR IGNORE INTO sweeps(sweep_id, spec_json, n_runs, status, backend, created_at, "
                        "updated_at) VALUES (?,?,?,?,?,?,?)",
                        (self.sweep_id, json.dumps(spec, sort_keys=True, default=str), len(hashes), "running",
                         backend, now, now))
            con.execute("UPDATE sweeps SET status='running', backend=?, updated_at=? WHERE sweep_id=?",
                        (backend, now, self.sweep_id))
            con.executemany("INSERT OR IGNORE INTO sweep_runs(sweep_id, idx, config_hash) VALUES (?,?,?)",
                            [(self.sweep_id, i, h) for i, h in enumerate(hashes)])

    def link(self, idxs: Iterable[int], run_id: str, reused: bool) -> None:
        with self.store._connect() as con, self.store._write(con):
            con.executemany("UPDATE sweep_runs SET run_id=?, reused=? WHERE sweep_id=? AND idx=?",
                            [(run_id, int(reused), self.sweep_id, i) for i in idxs])

    def finish(self, status: str) -> None:
        self.store._exec_write("UPDATE sweeps SET status=?, updated_at=? WHERE sweep_id=?",
                               (status, time.time(), self.sweep_id))


def _own_completed_runs(store: RunStore, sweep_id: str) -> dict[str, Any]:
    """``{config_hash: record}`` of the completed runs a stored sweep ``sweep_id`` already has
    (``{}`` for a new sweep): what a rerun of it must not train again."""
    try:
        runs = get_sweep(store, sweep_id)["runs"]
    except ConfigError:  # a new sweep
        return {}
    out = {}
    for r in runs:
        if r["run_id"] and r["config_hash"] not in out:
            try:
                rec = store.get_run(r["run_id"])
            except RunNotFoundError:  # deleted since: trained again (its tombstone still charges it)
                continue
            if rec.status == COMPLETED and rec.config_hash == r["config_hash"]:
                out[r["config_hash"]] = rec
    return out


def get_sweep(store: RunStore, sweep_id: str) -> dict[str, Any]:
    """The stored sweep: ``{"sweep_id", "spec", "n_runs", "status", "backend", "runs": [...]}``
    where ``runs[i]`` is ``{"config_hash", "run_id", "reused"}`` (``run_id`` ``None`` until done)."""
    with store._connect() as con:
        row = con.execute("SELECT spec_json, n_runs, status, backend, created_at, updated_at FROM sweeps "
                          "WHERE sweep_id=?", (sweep_id,)).fetchone()
        if row is None:
            raise ConfigError("resume", f"no sweep {sweep_id!r} in {store.db_path}")
        runs = con.execute("SELECT config_hash, run_id, reused FROM sweep_runs WHERE sweep_id=? ORDER BY idx",
                           (sweep_id,)).fetchall()
    return {"sweep_id": sweep_id, "spec": json.loads(row[0]), "n_runs": row[1], "status": row[2],
            "backend": row[3], "created_at": row[4], "updated_at": row[5],
            "runs": [{"config_hash": h, "run_id": r, "reused": bool(u)} for h, r, u in runs]}


def list_sweeps(store: RunStore) -> list[dict[str, Any]]:
    """Every stored sweep (newest first), without its run list."""
    with store._connect() as con:
        rows = con.execute("SELECT sweep_id, n_runs, status, backend, created_at FROM sweeps "
                           "ORDER BY created_at DESC").fetchall()
    return [dict(zip(("sweep_id", "n_runs", "status", "backend", "created_at"), r)) for r in rows]


def run_sweep(
    configs: Sequence[Any],
    *,
    store: RunStore,
    backend: str = "local",
    workers: int | None = None,
    address: str | None = None,
    max_retries: int = 2,
    ship_code: bool = False,
    spec: SweepSpec | Mapping[str, Any] | None = None,
    sweep_id: str | None = None,
    label: str | None = None,
    reuse: bool = True,
    cache_dir: Any = None,
    on_result: Callable[[SweepResult], Any] | None = None,
    on_start: Callable[[int, int], Any] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> SweepOutcome:
    """Run ``configs`` (``RunConfig`` s) and record every run in ``store``.

    Completed runs with the same config hash are reused (never recomputed, also within the
    sweep); the rest are trained by the ``backend`` executor and written to the store by
    this process only, with ``sweep_id`` and ``label``. Private runs whose reference runs
    (paragon, only-public of the same split) are still pending in this sweep are written
    after them, so their Performance Boost is computed.

    Args:
        configs: the runs.
        store: the run store (only this process writes it).
        backend: ``"local"`` or ``"ray"`` (:data:`EXECUTORS`).
        workers: local worker processes (default: CPUs available; 1 = inline).
        address: Ray address (``"auto"``, ``"host:port"``; ``None`` starts a local Ray).
        max_retries: re-runs of a run whose worker process died.
        ship_code: Ray only: send ``mixdp_core`` to the workers (``py_modules``).
        spec: the grid, stored with the sweep (so ``--resume`` can expand it again).
        sweep_id: default :func:`sweep_id_for` the config hashes (resumable).
        label: store label of the new runs.
        reuse: reuse completed identical runs (default).
        cache_dir: feature cache folder.
        on_result: called with each :class:`SweepResult` as it lands (reused ones first).
        on_start: ``on_start(n_total, n_reused)`` before training starts.
        progress: feature extraction progress ``(split, done, total)``.
        should_stop: polled between results; ``True`` cancels the rest (status ``cancelled``).

    Returns:
        The :class:`SweepOutcome`.
    """
    from ..ledger import reserve_budget

    configs = list(configs)
    # every caller (CLI, app, the papers' figures) is held to the data sets' caps: the grid's
    # charges are checked and reserved until its runs are stored (ledger.reserve_budget)
    with reserve_budget(store, configs, reuse=reuse) as reservation:
        return _run_sweep(configs, store=store, backend=backend, workers=workers, address=address,
                          max_retries=max_retries, ship_code=ship_code, spec=spec, sweep_id=sweep_id, label=label,
                          reuse=reuse, cache_dir=cache_dir, on_result=on_result, on_start=on_start,
                          progress=progress, should_stop=should_stop, reservation=reservation)


def _run_sweep(configs: list, *, store: RunStore, backend: str, workers: int | None, address: str | None,
               max_retries: int, ship_code: bool, spec: Any, sweep_id: str | None, label: str | None, reuse: bool,
               cache_dir: Any, on_result: Any, on_start: Any, progress: Any, should_stop: Any,
               reservation: Any = None) -> SweepOutcome:
    """:func:`run_sweep` inside its budget reservation."""
    from ..runner import _load_features, record_trained

    t0 = time.perf_counter()
    hashes = [c.config_hash() for c in configs]
    sweep_id = sweep_id or sweep_id_for(hashes)
    spec_d = spec.to_dict() if isinstance(spec, SweepSpec) else dict(spec or {"configs": [c.to_dict() for c in configs]})
    log = _SweepLog(store, sweep_id)
    executor = make_executor(backend, workers=workers, address=address, max_retries=max_retries, ship_code=ship_code)
    log.start(spec_d, hashes, backend)
    results: list[SweepResult | None] = [None] * len(configs)

    def land(res: SweepResult, idxs: Sequence[int]) -> None:
        for n, i in enumerate(idxs):  # duplicates of a config reuse its run
            r = dataclasses.replace(res, index=i, config=configs[i], reused=res.reused or (n > 0 and res.run_id is not None))
            results[i] = r
            if on_result is not None:
                on_result(r)

    # 1. reuse: completed identical runs (reuse=True), and always this sweep's own completed runs
    # (an interrupted --no-reuse sweep, run again or resumed, trained its finished runs again and
    # charged their ε twice)
    groups: dict[str, list[int]] = {}
    for i, h in enumerate(hashes):
        groups.setdefault(h, []).append(i)
    own = _own_completed_runs(store, sweep_id)
    todo: list[str] = []
    found = {}
    for h, idxs in groups.items():
        rec = store.find_completed(h) if reuse else own.get(h)
        if rec is not None:
            found[h] = rec
        else:
            todo.append(h)
    if on_start is not None:
        on_start(len(configs), len(configs) - sum(len(groups[h]) for h in todo))
    for h, rec in found.items():
        log.link(groups[h], rec.run_id, True)
        land(SweepResult(0, configs[groups[h][0]], rec.run_id, rec.status, True, rec.metrics), groups[h])

    # 2. features, once per (dataset, encoder, options), loaded by the driver
    shared: dict[str, Any] = {}
    items = []
    for h in todo:
        c = configs[groups[h][0]]
        key = _feature_key(c)
        if key not in shared:
            shared[key] = _load_features(c, cache_dir=cache_dir, progress=progress)
        items.append((c.to_dict(), key, None if cache_dir is None else str(cache_dir), h))

    # 3. train, write as results come back (references before the private runs they boost)
    from ...methods.base import is_reference

    def is_ref(c: Any) -> bool:
        return is_reference(c.method)

    pending_refs: dict[str, int] = {}
    for h in todo:
        c = configs[groups[h][0]]
        if is_ref(c):
            pending_refs[c.split_hash()] = pending_refs.get(c.split_hash(), 0) + 1
    deferred: dict[str, list[tuple[str, Any]]] = {}
    warned: list[str] = []

    def write(h: str, trained: Any) -> None:
        c = configs[groups[h][0]]
        if isinstance(trained, TaskError):
            land(SweepResult(0, c, None, FAILED, False, {}, str(trained)), groups[h])
        else:
            worker_code = (trained.versions or {}).get("mixdp_core_source_sha256")
            if worker_code is not None and worker_code != own_code:
                # other code made this run: never reused as this driver's identical run
                trained = dataclasses.replace(trained, config_hash=hashlib.sha256(
                    f"{h}:{worker_code}".encode()).hexdigest()[:32])
                if not warned:
                    warned.append(h)
                    warnings.warn(f"sweep {sweep_id}: a worker ran other mixdp_core code than this driver (source "
                                  "hash differs); its runs are stored under their own hash and will not be reused "
                                  "by this driver. Install the same code on every node (or ship_code=True).",
                                  RuntimeWarning, stacklevel=2)
            rid = record_trained(store, trained, label=label, sweep_id=sweep_id)
            if reservation is not None:
                reservation.land(h)  # its row now counts it: release the charge it reserved
            log.link(groups[h], rid, False)
            land(SweepResult(0, c, rid, trained.status, False, store.get_run(rid).metrics, trained.error), groups[h])
        if is_ref(c):
            sh = c.split_hash()
            pending_refs[sh] -= 1
            if pending_refs[sh] == 0:
                for h2, t2 in deferred.pop(sh, []):
                    write(h2, t2)

    from ..runner import _source_identity

    own_code = _source_identity()["mixdp_core_source_sha256"]
    status = COMPLETED
    stream = executor.imap(_train_item, items, shared) if items else iter(())
    try:
        for j, trained in stream:
            h = todo[j]
            c = configs[groups[h][0]]
            sh = c.split_hash()
            if not is_ref(c) and pending_refs.get(sh, 0) > 0 and not isinstance(trained, TaskError):
                deferred.setdefault(sh, []).append((h, trained))
            else:
                write(h, trained)
            if should_stop is not None and should_stop():
                status = "cancelled"
                executor.cancel()
                break
    except BaseException:
        status = "interrupted"
        raise
    finally:
        if hasattr(stream, "close"):
            stream.close()
        for sh in list(deferred):  # never lose a finished run
            for h2, t2 in deferred.pop(sh):
                try:
                    write(h2, t2)
                except Exception:  # noqa: BLE001
                    pass
        executor.close()
        if status == COMPLETED and any(r is None or r.status != COMPLETED for r in results):
            status = FAILED if any(r is not None and r.status == FAILED for r in results) else status
        try:
            log.finish(status)
        except Exception:  # noqa: BLE001
            pass
    done = [r if r is not None else SweepResult(i, configs[i], None, "cancelled", False) for i, r in enumerate(results)]
    return SweepOutcome(sweep_id, done, status, time.perf_counter() - t0)


def resume_spec(store: RunStore, sweep_id: str) -> tuple[SweepSpec | None, list[Any]]:
    """The grid of a stored sweep, to run it again (``mixdp sweep --resume ID``):
    ``(spec, configs)``; ``spec`` is ``None`` for sweeps submitted as a plain config list."""
    from ..runner import RunConfig

    stored = get_sweep(store, sweep_id)
    d = stored["spec"]
    if "configs" in d:
        spec, configs = None, [RunConfig.from_dict(c) for c in d["configs"]]
    else:
        spec = SweepSpec.from_dict(d)
        configs = spec.configs()
    # the grid expanded now must be the runs stored then: a relative data path resolved in another
    # folder, changed data or changed code retrained every run under the old sweep's id
    then = [r["config_hash"] for r in stored["runs"]]
    now = [c.config_hash() for c in configs]
    differ = sum(a != b for a, b in zip(then, now)) + abs(len(then) - len(now))
    if then and differ:
        raise ConfigError("resume", f"sweep {sweep_id!r} expands to other runs now ({differ} of {len(then)} differ: "
                                    "the code, the data, or a relative data path read from another folder); "
                                    "start a new sweep with the same flags instead")
    return spec, configs
