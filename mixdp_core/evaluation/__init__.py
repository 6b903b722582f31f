"""Evaluation of trained methods: utility metrics, membership inference, per-instance DP.

Everything returns fractions in ``[0, 1]`` for errors/accuracies and plain floats for ε.
"""

from .metrics import (
    balanced_accuracy,
    minority_accuracy,
    per_class_accuracy,
    performance_boost,
    test_error,
)
from .mia import MIAResult, auc_score, cross_entropy_losses, loss_threshold_attack, roc_curve
from .pdp import pdp_summary, per_instance_epsilon
from .report import Evaluation, evaluate, json_safe

__all__ = [
    "Evaluation",
    "MIAResult",
    "auc_score",
    "balanced_accuracy",
    "cross_entropy_losses",
    "evaluate",
    "json_safe",
    "loss_threshold_attack",
    "minority_accuracy",
    "pdp_summary",
    "per_class_accuracy",
    "per_instance_epsilon",
    "performance_boost",
    "roc_curve",
    "test_error",
]
