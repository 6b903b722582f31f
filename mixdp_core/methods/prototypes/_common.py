"""Base class and config helpers shared by the DP-prototype methods and their baselines."""

from __future__ import annotations

from dataclasses import dataclass

from ...config import SEED_RANGE, param
from ..base import Method, PrivacyConfig, StepRecord


@dataclass(frozen=True, kw_only=True)
class SeededPrivacyConfig(PrivacyConfig):
    """Privacy budget plus the ``seed`` of every random draw of the mechanism."""

    seed: int = param(0, type=int, range=SEED_RANGE,
                      help="Seed of the mechanism's draws with noise='reproducible' (research only); secure noise ignores it.")


class PrototypeFamilyMethod(Method):
    """Common fitted attributes; subclasses set ``prototypes_`` or override scoring."""

    family = "prototypes"

    def _emit(self, on_step, record: StepRecord) -> bool:
        self.history_.append(record)
        return bool(on_step(record)) if on_step is not None else False

    def _check_fitted(self) -> None:
        if getattr(self, "privacy_", None) is None and self.private:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(split) first")
