"""Imperative config-field checks (transitional).

New and converted configs declare their constraints once with
:func:`mixdp_core.config.param` instead; these helpers remain for the configs of
``methods/adamix.py`` until they are converted (issue 13). Each check raises :class:`~mixdp_core.errors.ConfigError` naming the field and its allowed
range, e.g. ``"k_pool: must be an integer >= 1, got 0"``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ConfigError


def check_int(field: str, value: Any, lo: int, hi: int | None = None) -> None:
    """``value`` is an integer (not a bool) in ``[lo, hi]`` (``hi=None``: no upper bound)."""
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= lo
    if ok and hi is not None:
        ok = value <= hi
    if not ok:
        rng = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ConfigError(field, f"must be an integer {rng}, got {value!r}")


def check_seed(value: Any) -> None:
    """``seed`` is an integer >= 0."""
    check_int("seed", value, 0)


def check_float(field: str, value: Any, lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> None:
    """``value`` is a finite number in the interval from ``lo`` to ``hi`` (open ends as given)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = float("nan")
    ok = not isinstance(value, bool) and np.isfinite(v)
    ok = ok and (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
    if not ok:
        lb = "(" if lo_open else "["
        rb = ")" if hi_open else "]"
        raise ConfigError(field, f"must lie in {lb}{lo}, {hi}{rb}, got {value!r}")


def check_positive(field: str, value: Any, *, allow_zero: bool = False, allow_none: bool = False) -> None:
    """``value`` is a finite number > 0 (>= 0 with ``allow_zero``; ``None`` with ``allow_none``)."""
    if value is None and allow_none:
        return
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = float("nan")
    if isinstance(value, bool) or not (math.isfinite(v) and (v >= 0 if allow_zero else v > 0)):
        rng = ">= 0" if allow_zero else "> 0"
        raise ConfigError(field, f"must be a finite number {rng}{' or None' if allow_none else ''}, got {value!r}")


def check_choice(field: str, value: Any, choices: tuple[str, ...]) -> None:
    """``value`` is one of ``choices``."""
    if value not in choices:
        raise ConfigError(field, f"must be one of {', '.join(map(repr, choices))}, got {value!r}")
