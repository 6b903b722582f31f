"""Training methods, registered in :data:`METHODS`.

Importing this package registers every built-in method.
"""

from .base import METHODS, Method, OnStep, PrivacyConfig, StepRecord, make_method
from . import adamix as _adamix  # noqa: F401  (registers the AdaMix-family methods)
from . import prototypes as _prototypes  # noqa: F401  (registers the DP-prototypes family)
from . import finetune as _finetune  # noqa: F401  (registers sparse DP fine-tuning)
from . import _adamix_specs as _adamix_specs  # noqa: F401  (describes the adamix.py configs)
from .base import ROLE_REFERENCE_LOWER, ROLE_REFERENCE_UPPER

# Transitional (issue 13): the reference roles belong in the class bodies of adamix.Paragon /
# adamix.OnlyPublic (``role = ROLE_REFERENCE_UPPER`` / ``ROLE_REFERENCE_LOWER``); they are set
# here until the issue-10 rewrite of adamix.py lands. OnlyPublic subclasses Paragon, so the
# order matters; ZeroShot (also a Paragon subclass) is an ordinary method.
_adamix.Paragon.role = ROLE_REFERENCE_UPPER
_adamix.OnlyPublic.role = ROLE_REFERENCE_LOWER
_adamix.ZeroShot.role = "method"

__all__ = ["METHODS", "Method", "OnStep", "PrivacyConfig", "StepRecord", "make_method"]
