"""Live per-step observation of a training run (used by the runner to stream quantities the
step records do not carry: minority accuracy and per-instance DP of the steps so far).

The runner installs an observer for the current thread with :func:`observing`; NoisyGD-type
methods call :func:`observer` once per run and, if one is installed, hand it their current
weights and the running ``Σ_t r_{i,t}²`` after each step. Nothing is observed (and nothing
costs time) when no observer is installed, e.g. in library use.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Optional

_local = threading.local()

#: ``observer(step=..., W=..., pdp_sq=..., problem=..., noise_multiplier=...)``; may mutate nothing
#: it is given. Its return value is ignored.
Observer = Callable[..., Any]


def observer() -> Optional[Observer]:
    """The observer installed for the current thread, or ``None``."""
    return getattr(_local, "observer", None)


@contextlib.contextmanager
def observing(fn: Optional[Observer]) -> Iterator[None]:
    """Install ``fn`` as the current thread's observer for the duration of the block."""
    prev = getattr(_local, "observer", None)
    _local.observer = fn
    try:
        yield
    finally:
        _local.observer = prev
