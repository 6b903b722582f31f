"""Privacy audits in the run store: an ``audits`` table beside ``runs`` (additive migration).

:class:`AuditStore` wraps a :class:`~mixdp_core.runs.store.RunStore` and adds, on first use,
the table ``audits`` and the meta key ``audit_schema_version`` to its SQLite database (``CREATE
TABLE IF NOT EXISTS``: stores written before audits existed stay readable and gain the table
the first time an audit is saved or listed; the ``runs``/``steps`` tables are not touched).
ROC curves go to ``artifacts/audit_<audit_id>.npz``.

Every saved summary carries ``"pdp_owner_only": true`` when it holds per-instance DP values:
pDP is an owner-only diagnostic, never a released guarantee.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from .._io import atomic_write
from .store import RunStore

AUDIT_SCHEMA_VERSION = 1

_AUDIT_SCHEMA = """
CREATE TABLE IF NOT EXISTS audits (
    audit_id TEXT PRIMARY KEY,
    run_id TEXT,
    created_at REAL NOT NULL,
    attack TEXT NOT NULL,
    method TEXT,
    dataset TEXT,
    encoder TEXT,
    claimed_epsilon REAL,
    empirical_epsilon_lower REAL,
    alarm INTEGER NOT NULL DEFAULT 0,
    config_json TEXT NOT NULL,
    summary_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audits_run ON audits(run_id, created_at);
"""


@dataclass
class AuditRecord:
    """One stored audit."""

    audit_id: str
    run_id: Optional[str]
    created_at: float
    attack: str
    method: Optional[str]
    dataset: Optional[str]
    encoder: Optional[str]
    config: dict[str, Any]
    summary: dict[str, Any]

    @property
    def alarm(self) -> bool:
        return bool(self.summary.get("alarm"))


class AuditStore:
    """Audits of one run store (see module docstring)."""

    def __init__(self, store: RunStore):
        self.store = store
        with store._connect() as con, store._write(con):
            for stmt in _AUDIT_SCHEMA.strip().split(";"):
                if stmt.strip():
                    con.execute(stmt)
            con.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('audit_schema_version', ?)",
                        (str(AUDIT_SCHEMA_VERSION),))

    def artifact_path(self, audit_id: str):
        return self.store.artifacts_dir / f"audit_{audit_id}.npz"

    def save(self, summary: Mapping[str, Any], *, config: Mapping[str, Any], run_id: Optional[str] = None,
             rocs: Optional[Mapping[str, tuple[np.ndarray, np.ndarray]]] = None) -> str:
        """Insert one audit; returns its id. ``rocs``: ``{name: (fpr, tpr)}``."""
        aid = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        s = dict(summary)
        with self.store._connect() as con, self.store._write(con):
            con.execute(
                "INSERT INTO audits(audit_id, run_id, created_at, attack, method, dataset, encoder, claimed_epsilon, "
                "empirical_epsilon_lower, alarm, config_json, summary_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (aid, run_id, time.time(), s.get("attack"), s.get("method"), config.get("dataset"),
                 config.get("encoder"), s.get("claimed_epsilon"), s.get("empirical_epsilon_lower"),
                 int(bool(s.get("alarm"))), json.dumps(dict(config), default=str),
                 json.dumps(s, allow_nan=False, default=str)),
            )
        if rocs:
            arrays = {}
            for i, (name, (f, t)) in enumerate(rocs.items()):
                arrays[f"roc{i}_fpr"] = np.asarray(f, np.float64)
                arrays[f"roc{i}_tpr"] = np.asarray(t, np.float64)
            arrays["roc_names"] = np.array(list(rocs.keys()))
            atomic_write(self.artifact_path(aid), lambda fh: np.savez_compressed(fh, **arrays), suffix=".npz")
        return aid

    def list(self, *, run_id: Optional[str] = None, limit: int = 200) -> list[AuditRecord]:
        """Newest first."""
        sql = ("SELECT audit_id, run_id, created_at, attack, method, dataset, encoder, config_json, summary_json "
               "FROM audits")
        args: tuple = ()
        if run_id is not None:
            sql += " WHERE run_id = ?"
            args = (run_id,)
        sql += " ORDER BY created_at DESC LIMIT ?"
        with self.store._connect() as con:
            rows = con.execute(sql, args + (int(limit),)).fetchall()
        return [AuditRecord(r[0], r[1], r[2], r[3], r[4], r[5], r[6], json.loads(r[7]), json.loads(r[8])) for r in rows]

    def get(self, audit_id: str) -> AuditRecord:
        for r in self.list(limit=100000):
            if r.audit_id == audit_id:
                return r
        raise KeyError(audit_id)

    def rocs(self, audit_id: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The stored ROC curves of an audit (empty if none)."""
        p = self.artifact_path(audit_id)
        if not p.exists():
            return {}
        with np.load(p, allow_pickle=False) as z:
            names = [str(n) for n in z["roc_names"]]
            return {n: (z[f"roc{i}_fpr"], z[f"roc{i}_tpr"]) for i, n in enumerate(names)}
