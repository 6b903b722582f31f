"""Re-exports of the accounting errors, now defined in :mod:`mixdp_core.errors`.

:class:`BudgetError` subclasses :class:`~mixdp_core.errors.ConfigError` and
:class:`AccountingError` :class:`~mixdp_core.errors.MixDPError`, so the app shows them as
one-line messages naming the offending field.
"""

from __future__ import annotations

from ..errors import AccountingError, BudgetError

__all__ = ["AccountingError", "BudgetError"]
