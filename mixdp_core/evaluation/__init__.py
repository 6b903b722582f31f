"""Evaluation of trained methods: utility metrics, membership inference, per-instance DP, and
N-way K-shot episodes (:mod:`.episodes`, the CD-FSL protocol for any method).

Everything returns fractions in ``[0, 1]`` for errors/accuracies and plain floats for ε.
"""

from .metrics import (
    balanced_accuracy,
    minority_accuracy,
    per_class_accuracy,
    performance_boost,
    test_error,
)
from .episodes import Episode, EpisodeResult, mean_ci95, run_episodes, sample_episodes
from .mia import MIAResult, auc_score, cross_entropy_losses, loss_threshold_attack, roc_curve
from .pdp import pdp_summary, per_instance_epsilon
from .report import Evaluation, evaluate, json_safe

__all__ = [
    "Episode",
    "EpisodeResult",
    "Evaluation",
    "MIAResult",
    "auc_score",
    "balanced_accuracy",
    "cross_entropy_losses",
    "evaluate",
    "json_safe",
    "loss_threshold_attack",
    "mean_ci95",
    "minority_accuracy",
    "pdp_summary",
    "per_class_accuracy",
    "per_instance_epsilon",
    "performance_boost",
    "roc_curve",
    "run_episodes",
    "sample_episodes",
    "test_error",
]
