"""White-box observation of released noisy gradients, for privacy audits only.

:func:`observe_releases` registers ``fn(t, W_t, released_t, scale_t)``; the mechanisms that
support white-box audits (``run_noisygd``; the DP-SGD linear probes) call
:func:`notify_release` right after each Gaussian release with the iterate ``W_t`` at which the
gradients were taken, the released noisy clipped sum and its sensitivity (τ_t, or C). Observing
changes nothing in the run. A context variable keeps concurrent threads apart.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Callable

import numpy as np

_OBSERVERS: contextvars.ContextVar[tuple] = contextvars.ContextVar("release_observers", default=())


@contextlib.contextmanager
def observe_releases(fn: Callable[[int, np.ndarray, np.ndarray, float], None]):
    """Call ``fn(t, W_t, released_t, scale_t)`` after every release inside the block."""
    token = _OBSERVERS.set(_OBSERVERS.get() + (fn,))
    try:
        yield fn
    finally:
        _OBSERVERS.reset(token)


def notify_release(t: int, W: np.ndarray, released: np.ndarray, scale: float) -> None:
    """Called by the mechanisms (no-op without observers)."""
    for fn in _OBSERVERS.get():
        fn(t, W, released, scale)


# ----------------------------------------------------------------------------- live steps
#: The run's live view: ``fn(rec=..., W=..., pdp_sq=..., problem=..., noise_multiplier=...)``,
#: called after each NoisyGD-type step with the output weights and the running Σ_t r_{i,t}²
#: (per-instance DP of the steps so far). The runner installs it to stream quantities the step
#: records do not carry (minority accuracy, live pDP); library use installs nothing and pays
#: nothing. It must not mutate what it is given.
_STEP_OBSERVER: contextvars.ContextVar = contextvars.ContextVar("step_observer", default=None)


@contextlib.contextmanager
def observing_steps(fn):
    """Install ``fn`` as the live step observer of the current thread for the block."""
    token = _STEP_OBSERVER.set(fn)
    try:
        yield fn
    finally:
        _STEP_OBSERVER.reset(token)


def step_observer():
    """The live step observer installed for the current thread, or ``None``."""
    return _STEP_OBSERVER.get()
