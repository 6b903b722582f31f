"""Experiment runs: the SQLite run store, the runner (``execute``, store-less ``train``), the sweep
engine (:mod:`.sweep`) and the papers' figures (:mod:`.reproduce`: registry and output; :mod:`.figures`:
the figures, one module per family)."""

from .paths import default_home, user_data_dir
from .store import (
    CANCELLED,
    COMPLETED,
    FAILED,
    RUNNING,
    STATUSES,
    RunNotFoundError,
    RunRecord,
    RunStore,
)

__all__ = [
    "CANCELLED",
    "COMPLETED",
    "FAILED",
    "RUNNING",
    "STATUSES",
    "RunConfig",
    "RunNotFoundError",
    "RunRecord",
    "RunStore",
    "default_home",
    "execute",
    "user_data_dir",
]


def __getattr__(name):  # lazy: the runner imports methods/data, the store does not
    if name in ("RunConfig", "execute"):
        from . import runner

        return getattr(runner, name)
    raise AttributeError(name)
