"""Base class and config helpers shared by the DP-prototype methods and their baselines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ConfigError
from ..base import Method, PrivacyConfig, StepRecord


def check_int(field: str, value: Any, lo: int, hi: int | None = None) -> None:
    """Raise ConfigError unless ``value`` is an integer in ``[lo, hi]``."""
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= lo
    if ok and hi is not None:
        ok = value <= hi
    if not ok:
        rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ConfigError(field, f"must be an integer {rng}, got {value!r}")


def check_float(field: str, value: Any, lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> None:
    """Raise ConfigError unless ``value`` is a finite number in the given interval."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = float("nan")
    ok = np.isfinite(v) and (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
    if not ok:
        lb = "(" if lo_open else "["
        rb = ")" if hi_open else "]"
        raise ConfigError(field, f"must lie in {lb}{lo}, {hi}{rb}, got {value!r}")


def check_choice(field: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(field, f"must be one of {', '.join(map(repr, choices))}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class SeededPrivacyConfig(PrivacyConfig):
    """Privacy budget plus the ``seed`` of every random draw of the mechanism (>= 0)."""

    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("seed", self.seed, 0)


class PrototypeFamilyMethod(Method):
    """Common fitted attributes; subclasses set ``prototypes_`` or override scoring."""

    family = "prototypes"

    def _reset(self) -> None:
        self.privacy_ = None
        self.steps_ = 0
        self.history_: list[StepRecord] = []
        self.noise_multiplier_ = None
        self.pdp_sq_ratio_sum_ = None

    def _emit(self, on_step, record: StepRecord) -> bool:
        self.history_.append(record)
        return bool(on_step(record)) if on_step is not None else False

    def _check_fitted(self) -> None:
        if getattr(self, "privacy_", None) is None and self.private:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(split) first")
