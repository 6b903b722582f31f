"""Input checks shared by the accounting module.

Every check raises :class:`~mixdp_core.errors.ConfigError` whose message names the field
and its allowed range, e.g. ``"epsilon: must be > 0, got -1"``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..config import check_delta, check_epsilon
from ..errors import ConfigError


def _is_real(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def positive(field: str, x: object, *, allow_inf: bool = False) -> float:
    """``x > 0`` (finite unless ``allow_inf``); returns it as a float."""
    if not _is_real(x) or math.isnan(float(x)) or not float(x) > 0 or (
        not allow_inf and math.isinf(float(x))
    ):
        rng = "> 0" if allow_inf else "> 0 and finite"
        raise ConfigError(field, f"must be {rng}, got {x!r}")
    return float(x)


def nonnegative(field: str, x: object) -> float:
    """Finite ``x >= 0``; returns it as a float."""
    if not _is_real(x) or not math.isfinite(float(x)) or float(x) < 0:
        raise ConfigError(field, f"must be >= 0 and finite, got {x!r}")
    return float(x)


def open_unit(field: str, x: object) -> float:
    """A δ in ``(0, 1)``, checked against its one declaration (:data:`mixdp_core.config.DELTA`)."""
    return check_delta(x, field=field)


def epsilon(field: str, x: object) -> float:
    """An ε > 0, checked against its one declaration (:data:`mixdp_core.config.EPSILON`)."""
    return check_epsilon(x, field=field)


def rate(field: str, x: object) -> float:
    """``0 < x <= 1`` (a sampling rate); returns it as a float."""
    if not _is_real(x) or not (0.0 < float(x) <= 1.0):
        raise ConfigError(field, f"must lie in (0, 1], got {x!r}")
    return float(x)


def count(field: str, x: object, *, minimum: int = 1) -> int:
    """Integer ``x >= minimum`` (integral floats such as ``3.0`` are accepted)."""
    if isinstance(x, bool) or not _is_real(x):
        raise ConfigError(field, f"must be an integer >= {minimum}, got {x!r}")
    xf = float(x)
    if not math.isfinite(xf) or xf != math.floor(xf) or xf < minimum:
        raise ConfigError(field, f"must be an integer >= {minimum}, got {x!r}")
    return int(x)


def array_nonnegative(field: str, x: object) -> np.ndarray:
    """A float64 array with finite entries ``>= 0``."""
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(field, f"must be an array of numbers >= 0, got {type(x).__name__}") from None
    if a.size and not (np.all(np.isfinite(a)) and np.all(a >= 0)):
        bad = a[~(np.isfinite(a) & (a >= 0))].ravel()[0]
        raise ConfigError(field, f"entries must be finite and >= 0, got {bad!r}")
    return a
