"""Errors raised by the accounting module.

Both subclass :class:`~mixdp_core.errors.ConfigError` or
:class:`~mixdp_core.errors.MixDPError`, so the app can show them as one-line messages that
name the offending field.
"""

from __future__ import annotations

from ..errors import ConfigError, MixDPError


class BudgetError(ConfigError):
    """The privacy budget cannot be met with the other, fixed, parameters.

    Raised by the calibration functions, e.g. when ``target_epsilon`` is so small that even
    a single step at the given noise multiplier spends more than it. ``field`` names the
    budget field the user should change (``"epsilon"`` by default); the message says by how
    much.
    """


class AccountingError(MixDPError, RuntimeError):
    """A numerical accountant (PRV, PLD) failed on the given inputs.

    The message names the accountant and suggests a fallback (usually ``accountant="rdp"``).
    """
