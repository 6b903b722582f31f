"""Embedded run store: one SQLite database (WAL mode) plus ``.npz`` artifacts beside it.

Layout under the store root (default :func:`mixdp_core.runs.paths.default_home`)::

    runs.sqlite            # tables runs, steps, meta, sweeps, sweep_runs (WAL journal: readers never block the writer)
    artifacts/<run_id>.npz # per-sample arrays (pDP ε_i, MIA scores, ROC...), written atomically

Life cycle of a run row: ``running`` → ``completed`` | ``failed`` | ``cancelled``. A row
stays ``running`` only while its process lives: every row records the writer's host, pid and
process start token plus a heartbeat; when a store is opened, ``running`` rows whose process
is gone (same host) or whose heartbeat is older than ``stale_after`` seconds (other hosts)
are marked ``failed``; their step history is kept. Several processes may write at once:
every write is a short ``BEGIN IMMEDIATE`` transaction with a 30 s busy timeout.

Step history: :meth:`RunStore.step_writer` batches step records of a run and writes them in one
transaction on a persistent connection when the oldest unwritten record is ``max_age_s``
(default 1 s) old, when ``max_steps`` are pending, on :meth:`StepWriter.flush` and at
:meth:`StepWriter.close`; a background thread flushes records older than ``max_age_s`` even
when no new step arrives. Each flush is one committed WAL transaction, so a process killed
with SIGKILL keeps every record written up to its last flush: it loses at most the records
of the last ``max_age_s`` seconds (plus the time of one write).

Cancellation: :meth:`RunStore.request_cancel` sets a flag that the runner polls from its
``on_step`` callback; the run then stops and is marked ``cancelled``.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import os
import socket
import sqlite3
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from .._io import atomic_write, env_limit, storage_error, sweep_orphans
from ..errors import ConfigError, MixDPError, StorageError
from .paths import store_root

RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
STATUSES = (RUNNING, COMPLETED, FAILED, CANCELLED)
#: ``meta`` key prefix of a deleted run's record, its tombstone (:meth:`RunStore.delete_run`).
DELETED_PREFIX = "deleted_run:"

SCHEMA_VERSION = 2

#: Schema migrations: ``(version, statements)`` applied in order to a store whose
#: ``meta.schema_version`` is lower (older stores stay readable; old code ignores the
#: additions). v2: sweeps (``sweeps``, ``sweep_runs``, ``runs.sweep_id``).
_MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (2, ("ALTER TABLE runs ADD COLUMN sweep_id TEXT",
         "CREATE INDEX IF NOT EXISTS runs_sweep ON runs(sweep_id)")),
)

_FIX = "free some space or point MIXDP_HOME (CLI: --store) to a writable folder"

#: Seconds a command waits for a store another process holds (``$MIXDP_STORE_WAIT_S``): a
#: write transaction lasts milliseconds, so a longer wait means a stuck writer; say so
#: within the 10 s every bad input is answered in.
DEFAULT_STORE_WAIT_S = 8.0


def store_wait_s() -> float:
    return float(env_limit("MIXDP_STORE_WAIT_S", DEFAULT_STORE_WAIT_S, kind=float, hi=600))


@functools.lru_cache(maxsize=1)
def _expected_columns() -> dict[str, set[str]]:
    """``{table: columns}`` of the current schema (built once in memory)."""
    con = sqlite3.connect(":memory:")
    try:
        for stmt in _SCHEMA.strip().split(";"):
            if stmt.strip():
                con.execute(stmt)
        for _, stmts in _MIGRATIONS:
            for stmt in stmts:
                con.execute(stmt)
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: {r[1] for r in con.execute(f"PRAGMA table_info({t})")} for t in tables}
    finally:
        con.close()

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    config_json TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    split_hash TEXT,
    method TEXT,
    dataset TEXT,
    encoder TEXT,
    seed INTEGER,
    target_epsilon REAL,
    label TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    finished_at REAL,
    heartbeat_at REAL,
    host TEXT,
    pid INTEGER,
    pid_token TEXT,
    versions_json TEXT,
    metrics_json TEXT,
    error TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_hash ON runs(config_hash, status);
CREATE INDEX IF NOT EXISTS runs_split ON runs(split_hash, status);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    step INTEGER,
    record_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS steps_run ON steps(run_id, id);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS sweeps (
    sweep_id TEXT PRIMARY KEY,
    spec_json TEXT NOT NULL,
    n_runs INTEGER NOT NULL,
    status TEXT NOT NULL,
    backend TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sweep_runs (
    sweep_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    config_hash TEXT NOT NULL,
    run_id TEXT,
    reused INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (sweep_id, idx)
);
"""


class RunNotFoundError(MixDPError, KeyError):
    """No run with that id exists in the store."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _set_wal(con: sqlite3.Connection) -> None:
    """Switch to WAL. The switch takes an exclusive lock and SQLite's busy handler does not wait
    for it: when several processes open a fresh store at once it fails at once with "database
    is locked". Retried with backoff for the store's wait; a store already in WAL skips it."""
    deadline = time.monotonic() + store_wait_s()
    pause = 0.005
    while True:
        try:
            if str(con.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                con.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.25)


def _process_token(pid: int) -> str | None:
    """Start time of process ``pid`` (Linux ``/proc``), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = data.rsplit(")", 1)[-1].split()
    # rest[0] is the state (field 3); starttime is field 22 -> rest[19]
    return rest[19] if len(rest) > 19 else None


def _process_alive(pid: int, token: str | None) -> bool:
    """Whether process ``pid`` (with start token ``token``, if known) is still running."""
    if pid is None or pid <= 0:
        return False
    if sys.platform.startswith("win"):  # os.kill(pid, 0) would terminate it on Windows
        return True  # fall back to the heartbeat
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().decode(errors="replace").rsplit(")", 1)[-1].split()[0]
        if state in ("Z", "X"):  # zombie: dead, not yet reaped
            return False
    except OSError:
        pass
    now_token = _process_token(pid)
    if token is not None and now_token is not None and token != now_token:
        return False  # pid reused by another process
    return True


@dataclass
class RunRecord:
    """One row of the ``runs`` table, decoded.

    Timestamps are Unix seconds (UTC). ``metrics`` is ``{}`` until the run finishes.
    """

    run_id: str
    status: str
    config: dict[str, Any]
    config_hash: str
    split_hash: str | None
    method: str | None
    dataset: str | None
    encoder: str | None
    seed: int | None
    target_epsilon: float | None
    label: str | None
    created_at: float
    updated_at: float
    finished_at: float | None
    heartbeat_at: float | None
    host: str | None
    pid: int | None
    versions: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    cancel_requested: bool = False

    @property
    def duration_s(self) -> float | None:
        """Seconds from creation to finish (or to the last heartbeat while running)."""
        end = self.finished_at or self.heartbeat_at
        return None if end is None else end - self.created_at

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_RUN_COLS = (
    "run_id, status, config_json, config_hash, split_hash, method, dataset, encoder, seed, "
    "target_epsilon, label, created_at, updated_at, finished_at, heartbeat_at, host, pid, "
    "versions_json, metrics_json, error, cancel_requested"
)


def _row_to_record(row: tuple) -> RunRecord:
    (run_id, status, cfg, chash, shash, method, dataset, encoder, seed, teps, label, created,
     updated, finished, hb, host, pid, versions, metrics, error, cancel) = row

    def load(column: str, text: Any) -> Any:
        try:
            return json.loads(text) if text else {}
        except (ValueError, TypeError):
            # one line naming the run, not a traceback from every command that lists runs; the
            # ledger cannot count a run it cannot read, so it fails closed rather than skip it
            raise StorageError(f"run {run_id}: its stored {column} is unreadable (a damaged store); restore "
                               f"the store from a backup, or delete that run's row (sqlite3 runs.sqlite "
                               f"\"DELETE FROM runs WHERE run_id='{run_id}'\") knowing its privacy spend is "
                               f"then no longer counted") from None

    return RunRecord(
        run_id=run_id, status=status, config=load("config", cfg), config_hash=chash,
        split_hash=shash, method=method, dataset=dataset, encoder=encoder, seed=seed,
        target_epsilon=teps, label=label, created_at=created, updated_at=updated,
        finished_at=finished, heartbeat_at=hb, host=host, pid=pid,
        versions=load("versions", versions), metrics=load("metrics", metrics), error=error,
        cancel_requested=bool(cancel),
    )


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, allow_nan=False, default=_json_default)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def records_epsilon(records: Any, start: float = 0.0) -> float:
    """The largest finite ``epsilon_spent`` that step records (dicts) state, or ``start`` when it
    is larger or none states one: what a run that failed after writing them is charged
    (:mod:`mixdp_core.runs.ledger`; the runner records it as ``epsilon_released``)."""
    best = float(start)
    for r in records:
        try:
            e = float(r.get("epsilon_spent"))
        except (TypeError, ValueError):
            continue
        if math.isfinite(e):
            best = max(best, e)
    return best


def new_run_id() -> str:
    """Time-sortable unique id, e.g. ``20240501-134501-3f9a2c1b``."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def export_target_epsilon(r: Any) -> Any:
    """A run's target ε for exports: ``None`` for a non-private reference, which has no budget
    (not the placeholder ε it is filed under)."""
    return r.target_epsilon if r.metrics.get("private", True) else None


def _iso(t: Any) -> Any:
    """Unix seconds as ISO 8601 UTC (exports), ``None`` kept."""
    if not isinstance(t, (int, float)):
        return t
    import datetime as _dt

    return _dt.datetime.fromtimestamp(float(t), tz=_dt.timezone.utc).isoformat(timespec="seconds")


class RunStore:
    """The run database and its artifacts folder.

    Args:
        root: store folder; default ``$MIXDP_HOME`` or the user data folder.
        stale_after: seconds without heartbeat after which a ``running`` row of *another
            host* counts as dead (same-host rows are checked by pid). Default 300.
        recover: mark interrupted runs ``failed`` on opening (see module docstring).
    """

    def __init__(self, root: str | os.PathLike | None = None, *, stale_after: float = 300.0,
                 recover: bool = True):
        self.root = store_root(root)
        self.artifacts_dir = self.root / "artifacts"
        self.db_path = self.root / "runs.sqlite"
        if self.root.exists() and not self.root.is_dir():
            raise StorageError(f"store: {str(self.root)!r} is a file, not a folder; point MIXDP_HOME (CLI: --store) "
                               "to a folder (it is created if missing)")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.artifacts_dir.mkdir(exist_ok=True)
        except OSError as e:
            raise storage_error(e, self.root, what="store", fix=_FIX) from None
        sweep_orphans(self.artifacts_dir, (".*.tmp",))  # temp files of interrupted artifact writes
        self.stale_after = float(stale_after)
        self.host = socket.gethostname()
        with self._connect() as con:
            _set_wal(con)
            with self._write(con):
                for stmt in _SCHEMA.strip().split(";"):
                    if stmt.strip():
                        con.execute(stmt)
                # _SCHEMA is version 1 plus new tables; columns added later come from _MIGRATIONS.
                row = con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                try:
                    have = int(row[0]) if row else 1
                except (TypeError, ValueError):
                    raise StorageError(f"store: {str(self.db_path)!r} has an unreadable schema version "
                                       f"{row[0]!r}; use another store (MIXDP_HOME, CLI: --store)") from None
                if have > SCHEMA_VERSION:  # written by newer code: refuse before writing anything
                    raise StorageError(f"store: {str(self.db_path)!r} has schema version {have}, newer than this "
                                       f"version of mixdp ({SCHEMA_VERSION}); upgrade mixdp or use another store "
                                       f"(MIXDP_HOME, CLI: --store)")
                for version, stmts in _MIGRATIONS:
                    if version > have:
                        for stmt in stmts:
                            con.execute(stmt)
                con.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)",
                            (str(max(have, SCHEMA_VERSION)),))
                self._check_columns(con)
        if recover:
            self.recover_interrupted()

    def _check_columns(self, con: sqlite3.Connection) -> None:
        """Every column this code writes exists (a renamed or dropped column would otherwise
        be found only by the first write after a training, leaving a run ``running``)."""
        for table, want in _expected_columns().items():
            have = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
            missing = sorted(want - have)
            if missing:
                raise StorageError(f"store: {str(self.db_path)!r}: table {table!r} lacks column(s) "
                                   f"{', '.join(missing)} (edited by hand or by other software); use another "
                                   f"store (MIXDP_HOME, CLI: --store)")

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection; SQLite failures (disk full, read-only database, unopenable file)
        surface as one-line :class:`~mixdp_core.errors.StorageError` naming the database."""
        try:
            con = sqlite3.connect(self.db_path, timeout=store_wait_s(), isolation_level=None)
        except sqlite3.Error as e:
            raise storage_error(e, self.db_path, what="store", fix=_FIX) from None
        try:
            con.execute(f"PRAGMA busy_timeout={int(store_wait_s() * 1000)}")
            con.execute("PRAGMA synchronous=NORMAL")
            yield con
        except sqlite3.Error as e:
            raise storage_error(e, self.db_path, what="store", fix=_FIX) from None
        finally:
            con.close()

    @contextmanager
    def _write(self, con: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        """One short write transaction; retried by SQLite's busy handler up to 30 s."""
        con.execute("BEGIN IMMEDIATE")
        try:
            yield con
        except BaseException:
            try:  # SQLite may already have rolled back (e.g. SQLITE_FULL): keep the real error
                con.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise
        else:
            con.execute("COMMIT")

    @contextmanager
    def exclusive(self) -> Iterator[sqlite3.Connection]:
        """A write transaction held for the block (``BEGIN IMMEDIATE``): writers of every
        process wait for it, readers do not (WAL). For a check and the write it licenses in one
        step (the ledger's budget reservation); keep the block short, and write only through
        the connection it yields."""
        with self._connect() as con, self._write(con):
            yield con

    def _exec_write(self, sql: str, params: tuple = ()) -> int:
        with self._connect() as con, self._write(con):
            return con.execute(sql, params).rowcount

    # ------------------------------------------------------------------ meta
    #: ``meta`` keys the store itself owns; :meth:`set_meta` refuses them.
    _RESERVED_META = ("schema_version",)

    def get_meta(self, key: str) -> str | None:
        """The text stored under ``key`` in the ``meta`` table, or ``None``."""
        with self._connect() as con:
            row = con.execute("SELECT value FROM meta WHERE key=?", (str(key),)).fetchone()
        return None if row is None else row[0]

    def meta_items(self, prefix: str) -> dict[str, str]:
        """``{key: value}`` of every ``meta`` entry whose key starts with ``prefix``."""
        like = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        with self._connect() as con:
            rows = con.execute("SELECT key, value FROM meta WHERE key LIKE ? ESCAPE '\\' ORDER BY key",
                               (like,)).fetchall()
        return {k: v for k, v in rows}

    def set_meta(self, key: str, value: str | None) -> None:
        """Store ``value`` under ``key`` in the ``meta`` table (``None`` deletes the entry).

        Used for per-store settings that need no schema change (e.g. a data set's budget
        cap, :mod:`mixdp_core.runs.ledger`).

        Raises:
            ConfigError: ``key``: empty or reserved by the store (``schema_version``).
        """
        key = str(key)
        if not key or key in self._RESERVED_META:
            raise ConfigError("key", f"must be a non-empty key other than {', '.join(self._RESERVED_META)}, "
                                     f"got {key!r}")
        if value is None:
            self._exec_write("DELETE FROM meta WHERE key=?", (key,))
        else:
            self._exec_write("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, str(value)))

    # ------------------------------------------------------------------ runs
    def create_run(
        self,
        config: Mapping[str, Any],
        *,
        config_hash: str,
        split_hash: str | None = None,
        versions: Mapping[str, Any] | None = None,
        label: str | None = None,
        run_id: str | None = None,
        sweep_id: str | None = None,
    ) -> str:
        """Insert a new ``running`` row for the current process; returns its id.
        ``sweep_id``: the sweep that produced the run (``None`` for single runs)."""
        run_id = run_id or new_run_id()
        now = time.time()
        pid = os.getpid()
        self._exec_write(
            "INSERT INTO runs(run_id, status, config_json, config_hash, split_hash, method, "
            "dataset, encoder, seed, target_epsilon, label, created_at, updated_at, heartbeat_at, "
            "host, pid, pid_token, versions_json, sweep_id, cancel_requested) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,0)",
            (
                run_id, RUNNING, _dumps(dict(config)), config_hash, split_hash,
                config.get("method"), config.get("dataset"), config.get("encoder"),
                config.get("seed"), config.get("target_epsilon"), label, now, now, now,
                self.host, pid, _process_token(pid), _dumps(dict(versions or {})), sweep_id,
            ),
        )
        return run_id

    def heartbeat(self, run_id: str) -> None:
        """Record that the run's process is alive."""
        now = time.time()
        self._exec_write("UPDATE runs SET heartbeat_at=? WHERE run_id=?", (now, run_id))

    def append_steps(self, run_id: str, records: Iterable[Mapping[str, Any]]) -> int:
        """Append step records (``StepRecord.to_dict()``) in order; also a heartbeat.

        Returns:
            The number of records written.
        """
        rows = [(run_id, r.get("step"), _dumps(dict(r))) for r in records]
        with self._connect() as con:
            self._insert_steps(con, run_id, rows)
        return len(rows)

    def _insert_steps(self, con: sqlite3.Connection, run_id: str, rows: list[tuple[str, Any, str]]) -> None:
        """The one write of step rows (and the run's heartbeat), for :meth:`append_steps` and
        :class:`StepWriter` alike; SQLite failures (disk full, read-only) surface as
        :class:`~mixdp_core.errors.StorageError`."""
        now = time.time()
        try:
            with self._write(con):
                if rows:
                    con.executemany("INSERT INTO steps(run_id, step, record_json) VALUES (?,?,?)", rows)
                con.execute("UPDATE runs SET heartbeat_at=?, updated_at=? WHERE run_id=?", (now, now, run_id))
        except sqlite3.Error as e:
            raise storage_error(e, self.db_path, what="store", fix=_FIX) from None

    def step_writer(self, run_id: str, *, max_age_s: float = 1.0, max_steps: int = 256,
                    background: bool = True, write_first: bool = False) -> "StepWriter":
        """A batched writer of the run's step records (see :class:`StepWriter`)."""
        return StepWriter(self, run_id, max_age_s=max_age_s, max_steps=max_steps, background=background,
                          write_first=write_first)

    def add_step(self, run_id: str, record: Mapping[str, Any]) -> None:
        """Append one step record."""
        self.append_steps(run_id, [record])

    def steps(self, run_id: str) -> list[dict[str, Any]]:
        """The run's step records, in the order written."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT record_json FROM steps WHERE run_id=? ORDER BY id", (run_id,)
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def steps_after(self, run_id: str, after: int = 0) -> tuple[list[dict[str, Any]], int]:
        """The run's step records written after the cursor ``after``, in order, and the new
        cursor (pass it back to read only newer records; ``0`` reads them all).

        Why: a live chart polls a run several times a second, and re-reading (and
        re-parsing) thousands of records at every poll was the slowest part of a redraw.
        """
        with self._connect() as con:
            rows = con.execute(
                "SELECT id, record_json FROM steps WHERE run_id=? AND id>? ORDER BY id", (run_id, int(after))
            ).fetchall()
        return [json.loads(r[1]) for r in rows], (rows[-1][0] if rows else int(after))

    def finish(self, run_id: str, status: str, *, metrics: Mapping[str, Any] | None = None,
               error: str | None = None) -> None:
        """Set the final status (``completed``/``failed``/``cancelled``), metrics and error."""
        if status not in (COMPLETED, FAILED, CANCELLED):
            raise ConfigError("status", f"must be one of completed, failed, cancelled; got {status!r}")
        now = time.time()
        n = self._exec_write(
            "UPDATE runs SET status=?, metrics_json=?, error=?, finished_at=?, updated_at=?, "
            "heartbeat_at=? WHERE run_id=?",
            (status, _dumps(dict(metrics)) if metrics is not None else None, error, now, now, now, run_id),
        )
        if n == 0:
            raise RunNotFoundError(f"no run {run_id!r} in {self.db_path}")

    def request_cancel(self, run_id: str) -> bool:
        """Ask a running run to stop (the app's Cancel button).

        Returns:
            ``True`` if a ``running`` run was flagged, ``False`` if it had already finished.
        """
        self.get_run(run_id)  # raises if unknown
        return self._exec_write(
            "UPDATE runs SET cancel_requested=1, updated_at=? WHERE run_id=? AND status=?",
            (time.time(), run_id, RUNNING),
        ) > 0

    def is_cancel_requested(self, run_id: str) -> bool:
        """Whether :meth:`request_cancel` was called for the run."""
        with self._connect() as con:
            row = con.execute("SELECT cancel_requested FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return bool(row and row[0])

    def get_run(self, run_id: str) -> RunRecord:
        """The run's record.

        Raises:
            RunNotFoundError: no such run.
        """
        with self._connect() as con:
            row = con.execute(f"SELECT {_RUN_COLS} FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(f"no run {run_id!r} in {self.db_path}")
        return _row_to_record(row)

    def list_runs(
        self,
        *,
        status: str | Iterable[str] | None = None,
        method: str | Iterable[str] | None = None,
        dataset: str | None = None,
        encoder: str | None = None,
        seed: int | None = None,
        config_hash: str | None = None,
        split_hash: str | None = None,
        label: str | None = None,
        since: float | None = None,
        limit: int | None = None,
        newest_first: bool = True,
    ) -> list[RunRecord]:
        """Runs matching every given filter (strings or iterables of allowed values)."""
        where, params = [], []

        def add(col: str, val: Any) -> None:
            if val is None:
                return
            if isinstance(val, (str, int, float)):
                where.append(f"{col}=?")
                params.append(val)
            else:
                vals = list(val)
                where.append(f"{col} IN ({','.join('?' * len(vals))})" if vals else "0")
                params.extend(vals)

        if status is not None:
            for s in [status] if isinstance(status, str) else list(status):
                if s not in STATUSES:
                    raise ConfigError("status", f"must be one of {', '.join(STATUSES)}; got {s!r}")
        add("status", status)
        add("method", method)
        add("dataset", dataset)
        add("encoder", encoder)
        add("seed", seed)
        add("config_hash", config_hash)
        add("split_hash", split_hash)
        add("label", label)
        if since is not None:
            where.append("created_at>=?")
            params.append(float(since))
        sql = f"SELECT {_RUN_COLS} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at " + ("DESC" if newest_first else "ASC") + ", run_id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._connect() as con:
            rows = con.execute(sql, params).fetchall()
        return [_row_to_record(r) for r in rows]

    def find_completed(self, config_hash: str) -> RunRecord | None:
        """The newest ``completed`` run with this config hash, or ``None`` (to reuse it)."""
        runs = self.list_runs(status=COMPLETED, config_hash=config_hash, limit=1)
        return runs[0] if runs else None

    def deleted_records(self) -> list[RunRecord]:
        """The tombstones of deleted runs (:meth:`delete_run`), oldest first.

        Raises:
            StorageError: a tombstone is unreadable (the ledger fails closed rather than drop
                what a deleted run spent)."""
        out = []
        for key, raw in self.meta_items(DELETED_PREFIX).items():
            try:
                out.append(RunRecord(**json.loads(raw)))
            except (ValueError, TypeError):
                raise StorageError(f"run {key[len(DELETED_PREFIX):]}: the record kept of this deleted run is "
                                   f"unreadable, so the budget ledger cannot be computed; restore the store from "
                                   f"a backup") from None
        return sorted(out, key=lambda r: r.created_at)

    def delete_run(self, run_id: str, *, force: bool = False) -> None:
        """Delete a run, its steps and its artifacts. Its record stays as a tombstone
        (:meth:`deleted_records`) from which the budget ledger keeps counting what a private run
        spent: privacy spent cannot be deleted (deleting gave its ε back to the data set and
        re-opened a capped one).

        Args:
            force: also delete a run that is still ``running`` in a live process.

        Raises:
            RunNotFoundError: no such run.
            ConfigError: the run is live and ``force`` is false.
        """
        rec = self.get_run(run_id)
        if rec.status == RUNNING and not force and self._is_live(run_id):
            raise ConfigError("run_id", f"run {run_id} is still running; cancel it first or use force=True")
        # the tombstone first: a failed delete then counts the run twice, never zero times. Its
        # step records go with the row, so what they showed is folded into its metrics; a run
        # deleted while running is a failed run that may have released.
        steps = self.steps(run_id)
        m = dict(rec.metrics or {})

        def number(v: Any) -> float:
            try:
                f = float(v)
            except (TypeError, ValueError):
                return 0.0
            return f if math.isfinite(f) else 0.0

        m["n_step_records"] = max(int(number(m.get("n_step_records"))), len(steps))
        m["epsilon_released"] = records_epsilon(steps, number(m.get("epsilon_released")))
        m["deleted"] = True
        if rec.status == RUNNING:
            m["released"] = True
        tomb = replace(rec, status=FAILED if rec.status == RUNNING else rec.status, metrics=m)
        self.set_meta(DELETED_PREFIX + run_id, _dumps(tomb.to_dict()))
        with self._connect() as con, self._write(con):
            con.execute("DELETE FROM steps WHERE run_id=?", (run_id,))
            con.execute("DELETE FROM runs WHERE run_id=?", (run_id,))
        try:
            self.artifact_path(run_id).unlink()
        except FileNotFoundError:
            pass

    # ------------------------------------------------------------------ liveness
    def _is_live(self, run_id: str) -> bool:
        with self._connect() as con:
            row = con.execute(
                "SELECT host, pid, pid_token, heartbeat_at FROM runs WHERE run_id=?", (run_id,)
            ).fetchone()
        if row is None:
            return False
        host, pid, token, hb = row
        if host == self.host:
            return _process_alive(pid, token)
        return hb is not None and time.time() - hb < self.stale_after

    def recover_interrupted(self) -> list[str]:
        """Mark ``running`` rows whose process is gone as ``failed`` (history kept).

        Returns:
            Ids of the runs marked failed.
        """
        with self._connect() as con:
            rows = con.execute(
                "SELECT run_id, host, pid, pid_token, heartbeat_at FROM runs WHERE status=?", (RUNNING,)
            ).fetchall()
        dead = []
        now = time.time()
        for run_id, host, pid, token, hb in rows:
            if host == self.host:
                alive = _process_alive(pid, token)
                why = f"process {pid} on {host} ended without finishing the run"
            else:
                alive = hb is not None and now - hb < self.stale_after
                why = f"no heartbeat from {host} for more than {self.stale_after:.0f} s"
            if not alive:
                n = self._exec_write(
                    "UPDATE runs SET status=?, error=?, finished_at=?, updated_at=? "
                    "WHERE run_id=? AND status=?",
                    (FAILED, f"interrupted: {why} (marked failed when the store was opened)",
                     now, now, run_id, RUNNING),
                )
                if n:
                    dead.append(run_id)
        return dead

    # ------------------------------------------------------------------ artifacts
    def artifact_path(self, run_id: str) -> Path:
        """Path of the run's ``.npz`` artifact (may not exist)."""
        return self.artifacts_dir / f"{run_id}.npz"

    def save_artifacts(self, run_id: str, arrays: Mapping[str, np.ndarray]) -> Path:
        """Write ``arrays`` to ``artifacts/<run_id>.npz`` atomically (temp file + rename)."""
        path = self.artifact_path(run_id)
        try:
            atomic_write(path, lambda f: np.savez_compressed(f, **{k: np.asarray(v) for k, v in arrays.items()}),
                         suffix=".npz.tmp")
        except OSError as e:  # temp file already removed by atomic_write
            raise storage_error(e, path, what="store", fix=_FIX) from None
        return path

    def load_artifacts(self, run_id: str) -> dict[str, np.ndarray]:
        """The run's arrays (``{}`` if it stored none)."""
        path = self.artifact_path(run_id)
        if not path.exists():
            return {}
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    # ------------------------------------------------------------------ export
    def export(
        self,
        path: str | os.PathLike | None = None,
        *,
        run_ids: Iterable[str] | None = None,
        fmt: str = "json",
        include_steps: bool = True,
        owner_view: bool = False,
        **filters: Any,
    ) -> str:
        """Export runs as JSON (records with config, metrics and steps) or CSV (one flat row each).

        By default the export is the *public* view: every owner-only value (computed on the
        private data without a DP guarantee, :mod:`mixdp_core.runs.owner_view`) is left out
        of metrics and step records. ``owner_view=True`` adds them, grouped under
        ``owner_only`` (JSON) or ``owner_only.*`` columns (CSV) with the owner note — never
        flat beside the released values. Times are ISO 8601 UTC; runs with reproducible noise
        carry ``noise_label`` saying they are not private against anyone who knows the seed.

        Args:
            path: file to write; ``None`` returns the text only.
            run_ids: the runs to export; default every run matching ``filters``
                (keyword filters of :meth:`list_runs`).
            fmt: ``"json"`` or ``"csv"``.
            include_steps: JSON only: add each run's step records.

        Returns:
            The exported text.
        """
        if fmt not in ("json", "csv"):
            raise ConfigError("fmt", f"must be 'json' or 'csv', got {fmt!r}")
        recs = [self.get_run(r) for r in run_ids] if run_ids is not None else self.list_runs(
            newest_first=False, **filters)
        from .owner_view import owner_block, public_error, public_metrics, public_steps, timing_is_owner_only

        def finished(r: Any) -> Any:  # a secret-dependent duration: the finish time is the owner's
            return None if timing_is_owner_only(r.metrics) else _iso(r.finished_at)

        def created(r: Any) -> Any:  # ... and the creation time too: a run trained before it is
            # stored (``train`` then ``record_trained``) is created when it lands, and its run id
            # carries its start: the two gave the duration away
            return None if timing_is_owner_only(r.metrics) else _iso(r.created_at)

        if fmt == "json":
            out = []
            for r in recs:
                d = r.to_dict()
                steps = self.steps(r.run_id) if include_steps or owner_view else []
                d["metrics"] = public_metrics(r.metrics)
                d["error"] = public_error(r.error)
                if include_steps:
                    d["steps"] = public_steps(steps, r.metrics)
                if owner_view:
                    d["owner_only"] = dict(owner_block(r.metrics, steps), error=r.error,
                                           finished_at=_iso(r.finished_at))
                if timing_is_owner_only(r.metrics):  # every time after the launch gives the duration away
                    if owner_view:
                        d["owner_only"].update(updated_at=_iso(r.updated_at), heartbeat_at=_iso(r.heartbeat_at),
                                               created_at=_iso(r.created_at))
                    d.update(updated_at=None, heartbeat_at=None)
                else:
                    d.update(updated_at=_iso(r.updated_at), heartbeat_at=_iso(r.heartbeat_at))
                d.update(created_at=created(r), finished_at=finished(r),
                         target_epsilon=export_target_epsilon(r))
                out.append(d)
            text = json.dumps(out, indent=2, sort_keys=True, default=_json_default)
        else:
            rows = []
            for r in recs:
                row: dict[str, Any] = {
                    "run_id": r.run_id, "status": r.status, "method": r.method,
                    "dataset": r.dataset, "encoder": r.encoder, "seed": r.seed,
                    "target_epsilon": export_target_epsilon(r),
                    "config_hash": r.config_hash,
                    "created_at": created(r), "finished_at": finished(r),
                    "error": public_error(r.error),
                }
                for k, v in public_metrics(r.metrics).items():
                    if v is None or isinstance(v, (int, float, str, bool)):
                        row[f"metric.{k}"] = v
                    elif isinstance(v, Mapping):  # one level down: the privacy report's accountant, mechanism...
                        for k2, v2 in v.items():
                            if v2 is None or isinstance(v2, (int, float, str, bool)):
                                row[f"metric.{k}.{k2}"] = v2
                if owner_view:
                    for k, v in dict(owner_block(r.metrics), error=r.error,
                                     finished_at=_iso(r.finished_at)).items():
                        if v is None or isinstance(v, (int, float, str, bool)):
                            row[f"owner_only.{k}"] = v
                for k, v in r.config.items():
                    if isinstance(v, (int, float, str, bool)) or v is None:
                        row.setdefault(f"config.{k}", v)
                    elif isinstance(v, Mapping):  # method_params, dataset_kwargs, encoder_kwargs: runs
                        # differing only there looked identical (a synthetic regime's classes, noise)
                        for k2, v2 in v.items():
                            row.setdefault(f"config.{k}.{k2}", v2 if v2 is None or isinstance(
                                v2, (int, float, str, bool)) else json.dumps(v2, default=str))
                rows.append(row)
            cols: list[str] = []
            for row in rows:
                cols.extend(c for c in row if c not in cols)
            buf = io.StringIO()
            w = csv.DictWriter(buf, fieldnames=cols)
            w.writeheader()
            w.writerows(rows)
            text = buf.getvalue()
        if path is not None:
            atomic_write(path, lambda f: f.write(text.encode()))
        return text


class StepWriter:
    """Batched, crash-safe appends of one run's step records.

    Records are buffered in memory and written in one transaction (plus the run's heartbeat)
    on a connection kept open for the writer's lifetime, when:

    * the oldest buffered record is ``0.9 * max_age_s`` old (checked at each :meth:`append`
      and, with ``background=True``, by a daemon thread every ``max_age_s / 20``, so records
      also reach the database during long gaps between steps);
    * ``max_steps`` records are buffered;
    * :meth:`flush` or :meth:`close` is called (the runner does both at the end of a run);
    * with ``write_first=True``, at the first record (the runner's choice: a live chart gets
      its first point as soon as the run has one, instead of up to ``max_age_s`` later).

    A committed WAL transaction survives the death of the process (SIGKILL included), so after
    a kill the run's history holds every record appended more than ``max_age_s`` (plus the
    duration of one write) before the kill; :meth:`RunStore.recover_interrupted` marks the run
    failed as usual. Thread-safe.

    Attributes:
        n_written: records written so far.
        n_flushes: write transactions so far.
        flush_seconds: wall seconds spent writing.
    """

    def __init__(self, store: RunStore, run_id: str, *, max_age_s: float = 1.0, max_steps: int = 256,
                 background: bool = True, write_first: bool = False):
        if not (max_age_s >= 0):
            raise ConfigError("max_age_s", f"must be >= 0 (0: write at every append), got {max_age_s!r}")
        if int(max_steps) < 1:
            raise ConfigError("max_steps", f"must be >= 1, got {max_steps!r}")
        self.store, self.run_id = store, run_id
        self.max_age_s, self.max_steps = float(max_age_s), int(max_steps)
        self.write_first = bool(write_first)
        self._lock = threading.RLock()
        self._pending: list[tuple[str, Any, str]] = []
        self._oldest: float | None = None
        self._con: sqlite3.Connection | None = None
        self._closed = False
        self.n_written = 0
        self.n_flushes = 0
        self.flush_seconds = 0.0
        self._stop = threading.Event()
        self._thread = None
        if background and self.max_age_s > 0:
            self._thread = threading.Thread(target=self._loop, daemon=True, name=f"mixdp-steps-{run_id}")
            self._thread.start()

    def _connection(self) -> sqlite3.Connection:
        if self._con is None:
            con = sqlite3.connect(self.store.db_path, timeout=30.0, isolation_level=None, check_same_thread=False)
            con.execute("PRAGMA busy_timeout=30000")
            con.execute("PRAGMA synchronous=NORMAL")
            self._con = con
        return self._con

    def _due(self, now: float) -> bool:
        return bool(self._pending) and (
            len(self._pending) >= self.max_steps or now - self._oldest >= 0.9 * self.max_age_s
            or (self.write_first and self.n_flushes == 0))

    def append(self, record: Mapping[str, Any]) -> bool:
        """Buffer one record (``StepRecord.to_dict()``); returns whether a flush happened."""
        row = (self.run_id, record.get("step"), _dumps(dict(record)))
        with self._lock:
            if self._closed:
                raise ConfigError("step_writer", "append after close")
            now = time.monotonic()
            if not self._pending:
                self._oldest = now
            self._pending.append(row)
            if self._due(now):
                self._flush_locked()
                return True
        return False

    def extend(self, records: Iterable[Mapping[str, Any]]) -> None:
        for r in records:
            self.append(r)

    def flush(self) -> int:
        """Write the buffered records now; returns how many were written."""
        with self._lock:
            return self._flush_locked()

    def _flush_locked(self) -> int:
        rows = self._pending
        if not rows:
            return 0
        a = time.perf_counter()
        # On failure the rows stay pending: the next append / flush / close retries and, if
        # the store is still unusable (disk full), raises in the training thread.
        self.store._insert_steps(self._connection(), self.run_id, rows)
        self._pending = []
        self._oldest = None
        self.n_written += len(rows)
        self.n_flushes += 1
        self.flush_seconds += time.perf_counter() - a
        return len(rows)

    def cancel_requested(self) -> bool:
        """Whether the run's cancel flag is set (read on the writer's connection)."""
        with self._lock:
            row = self._connection().execute(
                "SELECT cancel_requested FROM runs WHERE run_id=?", (self.run_id,)).fetchone()
        return bool(row and row[0])

    def _loop(self) -> None:
        tick = self.max_age_s / 20.0
        while not self._stop.wait(tick):
            try:
                with self._lock:
                    if not self._closed and self._due(time.monotonic()):
                        self._flush_locked()
            except Exception:  # a busy database must not kill the run; the next flush retries
                pass

    def close(self) -> None:
        """Flush and release the connection (idempotent)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        with self._lock:
            if self._closed:
                return
            try:
                self._flush_locked()
            finally:
                self._closed = True
                if self._con is not None:
                    self._con.close()
                    self._con = None

    def __enter__(self) -> "StepWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
