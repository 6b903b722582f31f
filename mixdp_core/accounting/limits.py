"""The step ceiling of a run (``MIXDP_MAX_STEPS``): one module below the accountants, so that
calibration and private selection both use it without an import cycle."""

from __future__ import annotations

import os
from typing import Optional

from ..errors import ConfigError
from .errors import BudgetError

#: Hard upper limit of the numerical search in :func:`calibrate_steps`.
MAX_STEPS = 10**9

#: Default ceiling on the work a budget may imply (steps of one run), overridable with the
#: environment variable ``MIXDP_MAX_STEPS``. A budget whose calibrated T exceeds it is
#: refused *before anything runs* (the method's ``preflight`` calls the calibration), with a
#: message naming the field, the limit and the σ (or ε) that fits. Without it ε = 1e9 asked
#: for 10⁹ full-batch steps (22.9 GB for the per-step curve, MemoryError at σ = 1e9).
DEFAULT_STEP_LIMIT = 100_000


def step_limit() -> int:
    """The step ceiling in force: ``$MIXDP_MAX_STEPS`` if set (integer >= 1), else
    :data:`DEFAULT_STEP_LIMIT`.

    Raises:
        ConfigError: ``MIXDP_MAX_STEPS`` is not an integer >= 1 (field ``MIXDP_MAX_STEPS``).
    """
    raw = os.environ.get("MIXDP_MAX_STEPS", "").strip()
    if not raw:
        return DEFAULT_STEP_LIMIT
    try:
        v = int(float(raw))
        if v < 1 or v != float(raw):
            raise ValueError
    except (ValueError, OverflowError):
        raise ConfigError("MIXDP_MAX_STEPS", f"must be an integer >= 1, got {raw!r}") from None
    return min(v, MAX_STEPS)


def check_steps(steps: int, *, field: str = "steps", hint: str = "", limit: Optional[int] = None) -> int:
    """Refuse a step count above the ceiling (:func:`step_limit`); returns ``steps``.

    Raises:
        BudgetError: ``steps`` > the limit; the message names ``field``, the limit and
            ``hint`` (what to change).
    """
    lim = step_limit() if limit is None else int(limit)
    if steps > lim:
        raise BudgetError(
            field,
            f"this budget implies {steps:,} steps, above the limit of {lim:,} steps "
            f"(MIXDP_MAX_STEPS){'; ' + hint if hint else ''}",
        )
    return steps
