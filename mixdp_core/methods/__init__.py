"""Training methods, registered in :data:`METHODS`.

Importing this package registers every built-in method.
"""

from .base import METHODS, Method, OnStep, PrivacyConfig, StepRecord, make_method
from . import adamix as _adamix  # noqa: F401  (registers the AdaMix-family methods)
from . import prototypes as _prototypes  # noqa: F401  (registers the DP-prototypes family)
from . import finetune as _finetune  # noqa: F401  (registers sparse DP fine-tuning)
__all__ = ["METHODS", "Method", "OnStep", "PrivacyConfig", "StepRecord", "make_method"]
