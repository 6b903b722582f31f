"""Exception types shared across MixDP Explorer.

Every user-facing error names the offending field and, where there is one, the allowed
range, so the CLI and the app can show it as a one-line message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable


class MixDPError(Exception):
    """Base class of all errors raised deliberately by ``mixdp_core``."""


class ConfigError(MixDPError, ValueError):
    """A configuration field is out of its allowed range.

    The error is structured, so that forms and pages read its parts instead of parsing its
    text; ``str(e)`` is the one-line ``"<field>: <message>"`` the CLI prints.

    Args:
        field: name of the offending field, as the user typed it (e.g. ``"epsilon"``).
        message: what is wrong, e.g. ``"must be > 0, got -1"``. Optional when ``allowed`` is
            given: it is then ``"must be <allowed>, got <got!r>"``.
        allowed: what the field accepts, in words (``"a finite number in [0.001, 1000]"``,
            ``"a registered method"``), when the error is about a value's range or kind.
        got: the offending value as given (``None`` when the error names no value).
        choices: the valid values when the field takes one of a known set (an unknown
            method, backend, lesson...), else ``()``.

    Attributes:
        field, message, allowed, got, choices: as given (``message`` cut to
            :attr:`MAX_MESSAGE_CHARS`; ``choices`` a tuple).
    """

    #: Longest message kept: an error names the field and the range, it never echoes a
    #: whole list (a value of 100,000 items once made a 129 KB "one-line" error).
    MAX_MESSAGE_CHARS = 600

    def __init__(self, field: str, message: str | None = None, *, allowed: str | None = None,
                 got: Any = None, choices: Iterable[Any] = ()):
        if message is None:
            if allowed is None:
                raise TypeError("ConfigError needs a message or what is allowed")
            message = f"must be {allowed}, got {got!r}"
        self.field = field
        if len(message) > self.MAX_MESSAGE_CHARS:
            message = message[: self.MAX_MESSAGE_CHARS - 30] + f"... ({len(message)} chars cut)"
        #: what is allowed, without the field (pages show it under the field's widget)
        self.message = message
        self.allowed = allowed
        self.got = got
        self.choices = tuple(choices)
        super().__init__(f"{field}: {message}")

    @classmethod
    def unknown_name(cls, field: str, error: "UnknownNameError") -> "ConfigError":
        """The :class:`UnknownNameError` of a registry lookup, as an error of ``field`` (same
        text; ``got`` the name, ``choices`` the registered names)."""
        return cls(field, str(error), allowed=f"a registered {error.kind}" if error.kind else None,
                   got=error.name, choices=error.choices)

    def __reduce__(self):  # pickled across processes (sweep workers): keep every part
        return (_rebuild_config_error, (type(self), self.field, self.message),
                {"allowed": self.allowed, "got": self.got, "choices": self.choices})


def _rebuild_config_error(cls: type, field: str, message: str) -> "ConfigError":
    return cls(field, message)


class DataError(MixDPError, ValueError):
    """Input data is malformed (NaN features, empty class, corrupt image, bad archive...).

    Args:
        message: one line, by convention ``"<array or file>: <what is wrong>"``.
        field: the setting that would fix it, when one would (``"public_per_class"`` for a
            class with fewer samples than that); forms name it instead of the array.
    """

    def __init__(self, message: str = "", *, field: str | None = None):
        super().__init__(message)
        self.field = field

    def __reduce__(self):
        return (type(self), tuple(self.args[:1]), {"field": self.field})


class CorruptImageError(DataError):
    """An image file could not be decoded. ``path`` names the file.

    ``str(e)`` is one line: the path is quoted with ``repr`` (so that a line break or another
    control character in a file name shows as an escape) and ``reason`` is folded onto it.

    Raised by the image sources of :mod:`mixdp_core.data` and the encoders; defined here so
    that encoders need not import the data layer.
    """

    def __init__(self, path: str | Path, reason: str = ""):
        self.path, self.reason = str(path), reason
        # the path is quoted with repr and the reason's line breaks folded: a file named
        # "bad\nname.png" (or a decoder message quoting it) must not make a multi-line error
        why = " ".join(str(reason).split()) if reason else ""
        super().__init__(f"corrupt or non-image file {self.path!r}" + (f": {why}" if why else ""))

    def __reduce__(self):
        return (type(self), (self.path, self.reason), {"field": self.field})


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
    """A registry lookup failed; the message lists the registered keys.

    Attributes:
        kind: what was looked up (``"method"``, ``"backend"``...), or ``""``.
        name: the name that is not registered (``None`` when not given).
        choices: the registered names, in registration order.
    """

    def __init__(self, message: str = "", *, kind: str = "", name: Any = None, choices: Iterable[Any] = ()):
        super().__init__(message)
        self.kind, self.name, self.choices = kind, name, tuple(choices)

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):
        return (type(self), tuple(self.args[:1]), {"kind": self.kind, "name": self.name, "choices": self.choices})


def field_and_message(exc: BaseException, default_field: str) -> tuple[str, str]:
    """``(field, message)`` of an error for a form: a :class:`ConfigError` carries both, a
    :class:`DataError` may carry the setting that fixes it (``field``); the text of other
    errors ("<array or file>: <message>" by convention) is split once, here, so pages never
    parse error strings themselves."""
    if isinstance(exc, ConfigError):
        return exc.field, exc.message
    field = getattr(exc, "field", None) if isinstance(exc, DataError) else None
    text = str(exc)
    head, sep, rest = text.partition(": ")
    if sep and head and " " not in head and len(head) <= 40:
        return field or head, rest
    return field or default_field, text
