"""Exception types shared across MixDP Explorer.

Every user-facing error names the offending field and, where there is one, the allowed
range, so the CLI and the app can show it as a one-line message.
"""

from __future__ import annotations

from pathlib import Path


class MixDPError(Exception):
    """Base class of all errors raised deliberately by ``mixdp_core``."""


class ConfigError(MixDPError, ValueError):
    """A configuration field is out of its allowed range.

    Args:
        field: name of the offending field, as the user typed it (e.g. ``"epsilon"``).
        message: what is allowed, e.g. ``"must be > 0, got -1"``.
    """

    #: Longest message kept: an error names the field and the range, it never echoes a
    #: whole list (a value of 100,000 items once made a 129 KB "one-line" error).
    MAX_MESSAGE_CHARS = 600

    def __init__(self, field: str, message: str):
        self.field = field
        if len(message) > self.MAX_MESSAGE_CHARS:
            message = message[: self.MAX_MESSAGE_CHARS - 30] + f"... ({len(message)} chars cut)"
        #: what is allowed, without the field (pages show it under the field's widget)
        self.message = message
        super().__init__(f"{field}: {message}")


class DataError(MixDPError, ValueError):
    """Input data is malformed (NaN features, empty class, corrupt image, bad archive...)."""


class CorruptImageError(DataError):
    """An image file could not be decoded. ``path`` names the file.

    Raised by the image sources of :mod:`mixdp_core.data` and the encoders; defined here so
    that encoders need not import the data layer.
    """

    def __init__(self, path: str | Path, reason: str = ""):
        self.path = str(path)
        super().__init__(f"corrupt or non-image file {self.path}" + (f": {reason}" if reason else ""))


class BudgetError(ConfigError):
    """The privacy budget cannot be met with the other, fixed, parameters.

    Raised by the calibration functions of :mod:`mixdp_core.accounting`, e.g. when
    ``target_epsilon`` is so small that even a single step at the given noise multiplier
    spends more than it. ``field`` names the budget field the user should change
    (``"epsilon"`` by default); the message says by how much.
    """


class AccountingError(MixDPError, RuntimeError):
    """A numerical accountant (PRV, PLD) failed on the given inputs.

    The message names the accountant and suggests a fallback (usually ``accountant="rdp"``).
    """


class StorageError(MixDPError, OSError):
    """A folder or database MixDP Explorer writes to is unusable: disk full, read-only
    folder or database, no permission. The message names the path and what to do
    (e.g. set ``MIXDP_HOME`` / ``--store`` or ``MIXDP_CACHE`` / ``--cache-dir``)."""


class WeightsUnavailableError(MixDPError, RuntimeError):
    """Pretrained weights cannot be obtained (e.g. offline); the message says how to fix it."""


class UnknownNameError(MixDPError, KeyError):
    """A registry lookup failed; the message lists the registered keys."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


def field_and_message(exc: BaseException, default_field: str) -> tuple[str, str]:
    """``(field, message)`` of an error for a form: a :class:`ConfigError` carries both; other
    errors ("<field>: <message>" by convention) are split once, here, so pages never parse
    error strings themselves."""
    if isinstance(exc, ConfigError):
        return exc.field, exc.message
    text = str(exc)
    head, sep, rest = text.partition(": ")
    if sep and head and " " not in head and len(head) <= 40:
        return head, rest
    return default_field, text
