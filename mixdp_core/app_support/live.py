"""Incremental reads of a running run for the live charts (no algorithm code).

A live chart polls its run several times a second. Re-reading and re-parsing every step
record at each poll, and rebuilding validated plotly figures from them, took longer than the
poll period on a loaded 2-core machine (measured: about 0.5 s to read 4,000 records and 0.8 s
to build the figures, so redraws came seconds apart). Here, per server process:

* :class:`RunSeries` keeps the columns the live charts draw and a cursor into the store's
  step table: each poll reads only the records written since the last one
  (:meth:`RunStore.steps_after`); every browser session following the run shares it.
* :func:`live_pdp` re-reads the run's per-instance ε artifact only when the file changed.

Nothing here looks at private data beyond what the run itself stored for its owner (the
step records and the owner's-view pDP artifact the run page already shows).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

#: Step-record fields the live charts draw: series name → (record key, ``extra`` key or None).
COLUMNS: dict[str, tuple[str, str | None]] = {
    "test_error": ("test_error", None),
    "epsilon": ("epsilon_spent", None),
    "minority": ("extra", "minority_accuracy"),
    "clip": ("clip_norm", None),
    # AdaMix Fig. 6 (owner's view, subspace_diagnostics=True)
    "subspace_public": ("extra", "subspace_error_public"),
    "subspace_random": ("extra", "subspace_error_random"),
}
#: Runs whose series a server process keeps (least recently used dropped first): a series
#: holds a few floats per step, a few hundred kB for the longest app runs.
MAX_CACHED_RUNS = 32


class RunSeries:
    """The live-chart columns of one run, grown from the store a few records at a time.

    Attributes:
        steps: step index of every record (1-based; ``float`` for plotting).
        values: series name (keys of :data:`COLUMNS`) → one value per record (``nan`` where the
            record does not carry it).
        total_steps: the planned number of steps (largest ``total_steps`` seen), or ``None``.
        version: number of records read so far (changes exactly when new records arrived).
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.steps: list[float] = []
        self.values: dict[str, list[float]] = {k: [] for k in COLUMNS}
        self.total_steps: int | None = None
        self.cursor = 0
        self.lock = threading.RLock()  # re-entrant: chart building holds it around arrays()
        #: figures built for (version, options): reused by every session while nothing changed
        self.figures: dict[Any, Any] = {}
        #: the last pDP histogram drawn (rebuilt when the artifact changed)
        self.pdp_figure: tuple[Any, Any, Any] | None = None  # (eps_i array, key, chart)
        #: live charts in the order they first appeared (see :meth:`chart_order`)
        self.order: list[str] = []

    @property
    def version(self) -> int:
        return len(self.steps)

    @property
    def last_step(self) -> int:
        return int(self.steps[-1]) if self.steps else 0

    def has(self, name: str) -> bool:
        """Whether any record so far carries series ``name``."""
        return any(not math.isnan(v) for v in self.values[name])

    def one_shot(self) -> bool:
        """At most one step planned and done (prototypes, references): no curve to draw."""
        return bool(self.steps) and (self.total_steps or 0) <= 1 and max(self.steps) <= 1

    def chart_order(self, names: Any) -> list[str]:
        """``names`` (the live charts drawn now) in the order they first appeared.

        Why: Streamlit identifies an element by its place on the page, so a chart that
        appears before others (e.g. minority accuracy, once the run's first evaluation comes)
        would move them, and a moved live chart is drawn anew (about 0.2-1 s of browser
        work on a loaded machine) instead of only receiving its new points. Charts never
        disappear while the run trains, so appending keeps every chart in its place."""
        with self.lock:
            self.order += [n for n in names if n not in self.order]
            return [n for n in self.order if n in names]

    def add(self, records: list[dict[str, Any]]) -> None:
        """Append step records (``StepRecord.to_dict()``) in order."""
        for r in records:
            self.steps.append(float(r.get("step") or 0))
            for name, (key, sub) in COLUMNS.items():
                v = r.get(key)
                if sub is not None:
                    v = (v or {}).get(sub)
                self.values[name].append(float(v) if v is not None else math.nan)
            t = r.get("total_steps")
            if t:
                self.total_steps = max(int(t), self.total_steps or 0)

    def update(self, store: Any) -> bool:
        """Read the records written since the last update. Returns whether there were any."""
        with self.lock:
            records, cursor = store.steps_after(self.run_id, self.cursor)
            if records:
                self.add(records)
                self.figures.clear()
            self.cursor = cursor
            return bool(records)

    def arrays(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(steps, values)`` of the records that carry series ``name``."""
        with self.lock:
            # add() appends the step before the values: a consistent prefix of both lists
            n = min(len(self.steps), len(self.values[name]))
            x = np.asarray(self.steps[:n], dtype=float)
            y = np.asarray(self.values[name][:n], dtype=float)
        keep = ~np.isnan(y)
        return x[keep], y[keep]


_SERIES: "OrderedDict[tuple[str, str], RunSeries]" = OrderedDict()
_SERIES_LOCK = threading.Lock()


def run_series(store: Any, run_id: str) -> RunSeries:
    """The process-wide :class:`RunSeries` of ``run_id`` in ``store``, updated with the
    records written since its last update."""
    key = (str(store.db_path), run_id)
    with _SERIES_LOCK:
        s = _SERIES.get(key)
        if s is None:
            s = _SERIES[key] = RunSeries(run_id)
        _SERIES.move_to_end(key)
        while len(_SERIES) > MAX_CACHED_RUNS:
            _SERIES.popitem(last=False)
    s.update(store)
    return s


_PDP: "OrderedDict[str, tuple[tuple[int, int, int], Any, int | None]]" = OrderedDict()
_PDP_LOCK = threading.Lock()


def live_pdp(store: Any, run_id: str) -> tuple[Any, int | None]:
    """Per-instance ε of a run (owner's view): the final ``pdp_epsilon`` or, while it trains,
    the ``live_pdp_epsilon`` of the steps so far with that step. ``(None, None)`` if neither.

    The artifact is re-read only when its file changed (inode, size or modification time):
    the run's live view rewrites it at most every 0.5 s (``_LiveView.PDP_EVERY_S``)."""
    path = store.artifact_path(run_id)
    try:
        st = path.stat()
    except OSError:
        return None, None
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)  # the run replaces the file (new inode)
    key = str(path)
    with _PDP_LOCK:
        hit = _PDP.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1], hit[2]
    try:
        arr = store.load_artifacts(run_id)
    except Exception:  # artifact being replaced: next poll
        return (hit[1], hit[2]) if hit is not None else (None, None)
    if "pdp_epsilon" in arr:
        out = (arr["pdp_epsilon"], None)
    elif "live_pdp_epsilon" in arr:
        out = (arr["live_pdp_epsilon"], int(arr.get("live_step", 0)))
    else:
        out = (None, None)
    with _PDP_LOCK:
        _PDP[key] = (stamp, *out)
        _PDP.move_to_end(key)
        while len(_PDP) > MAX_CACHED_RUNS:
            _PDP.popitem(last=False)
    return out
