"""Evaluate a fitted method on its split: utility, privacy report, MIA and pDP in one call."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import randomness
from .metrics import balanced_accuracy, minority_accuracy, per_class_accuracy, test_error
from .mia import cross_entropy_losses, loss_threshold_attack
from .pdp import pdp_kind, pdp_summary, per_instance_epsilon


def _finite_or_none(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def json_safe(obj: Any) -> Any:
    """Recursively convert numpy scalars/arrays to Python and non-finite floats to ``None``."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, np.generic):
        return json_safe(obj.item())
    if isinstance(obj, float):
        return _finite_or_none(obj)
    return obj


@dataclass
class Evaluation:
    """Result of :func:`evaluate`.

    Attributes:
        metrics: JSON-safe scalars (errors and accuracies as fractions in ``[0, 1]``; ε as
            ``None`` for non-private methods, meaning ε = ∞).
        arrays: per-sample arrays for the ``.npz`` artifact: ``y_pred``, ``per_class_accuracy``,
            ``pdp_epsilon`` (if any), ``mia_member_scores``, ``mia_nonmember_scores``,
            ``mia_fpr``, ``mia_tpr``, ``mia_thresholds``, ``mia_member_index``,
            ``mia_nonmember_index``.
    """

    metrics: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def _reads_private(model: Any) -> bool:
    return bool(getattr(type(model), "uses_private_data", True))


def _epsilon_label(model: Any, pdict: dict | None) -> str:
    """ε in words for tables and exports: the number, ``0`` for a method that reads no private
    data (Only-Public, zero-shot) and ``∞`` for a non-private one (paragon)."""
    if pdict is not None and pdict.get("epsilon") is not None:
        return f"{float(pdict['epsilon']):.4g}"
    if not _reads_private(model):
        return "0 (reads no private data)"
    return "∞ (not private)"


def evaluate(model: Any, split: Any, *, delta: float | None = None, seed: int = 0) -> Evaluation:
    """Evaluate a fitted method on ``split``.

    Args:
        model: fitted :class:`~mixdp_core.methods.base.Method`.
        split: the :class:`~mixdp_core.data.splits.Split` it was trained on.
        delta: δ for the pDP losses; default the model's reported δ, else its target δ.
        seed: seed of the MIA balancing subsample.

    Returns:
        :class:`Evaluation` with metrics ``test_error, balanced_accuracy,
        minority_accuracy (``None`` without minority classes: imbalance ratio 1),
        per_class_accuracy, mia_auc, mia_advantage, pdp_epsilon_*,
        privacy (dict or None), epsilon, delta, mu, rho, steps, noise_multiplier``.
    """
    C = split.n_classes
    scores_test = np.asarray(model.decision_function(split.X_test))
    y_pred = scores_test.argmax(axis=1)
    pca = per_class_accuracy(split.y_test, y_pred, C)

    scores_priv = np.asarray(model.decision_function(split.X_private))
    l_priv = cross_entropy_losses(scores_priv, split.y_private)
    l_test = cross_entropy_losses(scores_test, split.y_test)
    mia = loss_threshold_attack(l_priv, l_test, seed=seed, member_labels=split.y_private,
                                nonmember_labels=split.y_test)  # class-matched
    mia_unmatched = loss_threshold_attack(l_priv, l_test, seed=seed)

    privacy = getattr(model, "privacy_", None)
    pdict = privacy.to_dict() if privacy is not None else None
    if delta is None:
        delta = (
            pdict.get("delta")
            if pdict is not None and pdict.get("delta") is not None
            else getattr(model.config, "target_delta", None)
        )
    eps_i = per_instance_epsilon(model, delta=delta, split=split) if delta is not None else None

    metrics: dict[str, Any] = {
        "test_error": test_error(split.y_test, y_pred),
        "balanced_accuracy": balanced_accuracy(split.y_test, y_pred, C),
        # None (not a number) for a balanced split: it has no minority class.
        "minority_accuracy": minority_accuracy(split.y_test, y_pred, split.minority_classes),
        "per_class_accuracy": pca.tolist(),
        "minority_classes": np.asarray(split.minority_classes).tolist(),
        "mia_auc": mia.auc,
        "mia_advantage": mia.advantage,
        "mia_n_per_side": int(mia.member_index.size),
        "mia_class_matched": True,
        "mia_auc_unmatched": mia_unmatched.auc,
        "privacy": pdict,
        # Only-Public reads no private row: ε = 0 is its guarantee, a number; paragon is not
        # private: ε = ∞, which JSON cannot hold, so it stays null and the label says ∞.
        "epsilon": pdict.get("epsilon") if pdict else (0.0 if not _reads_private(model) else None),
        "epsilon_label": _epsilon_label(model, pdict),
        "delta": pdict.get("delta") if pdict else delta,
        "mu": pdict.get("mu") if pdict else None,
        "rho": pdict.get("rho") if pdict else None,
        "private": privacy is not None,
        # Where the released noise came from; "reproducible" runs are not private against
        # anyone who knows the seed, and every view of the run says so.
        "noise": randomness.noise_source_of(model.config) if privacy is not None else None,
        "noise_label": randomness.label(randomness.noise_source_of(model.config)) if privacy is not None else None,
        "steps": getattr(model, "steps_", None),
        # AdaMix / NGD's public-start guard: True if it released the private model, False if it
        # fell back to the public start, None without a guard (post-processing of its
        # accounted noisy count: public like the model itself).
        "guard_released_private": getattr(model, "guard_kept_private_", None),
        # AdaMix / NGD's share s of the private update kept in the released model
        # (update_shrinkage; post-processing of releases and public rows), None without it
        "update_shrinkage": getattr(model, "update_shrinkage_", None),
        # under imbalance (update_shrinkage="checked_when_imbalanced"): True where the public
        # labels rejected the noise rule's share and the likelihood's was released, False where
        # they kept it, None where no check ran (post-processing of releases and public rows)
        "update_check_rejected": getattr(model, "update_check_rejected_", None),
        # its weights (u, v) on the average's and the last iterate's updates where it combines
        # the two (update_shrinkage="two_iterate_when_balanced"), None otherwise
        "update_combination": (None if (comb := getattr(model, "update_combination_", None)) is None
                               else [float(comb[0]), float(comb[1])]),
        "noise_multiplier": getattr(model, "noise_multiplier_", None),
        "n_public": int(len(split.y_public)),
        "n_private": int(len(split.y_private)),
        "n_test": int(len(split.y_test)),
        "n_classes": int(C),
        "dim": int(split.dim),
    }
    layers = getattr(model, "layer_stats_", None)
    if layers:  # DP fine-tuning: per-tensor noise vs clipped-gradient norms (owner's view, runs/owner_view.py)
        metrics["layer_stats"] = [dict(r) for r in layers]
    metrics.update(pdp_summary(eps_i))
    if eps_i is not None:
        metrics["pdp_owner_only"] = True  # data-dependent diagnostic, never a released guarantee
        metrics["pdp_epsilon_kind"] = pdp_kind(model)  # "exact" or "estimate (...)": travels with the diagnostics
    arrays: dict[str, np.ndarray] = {
        "y_pred": y_pred.astype(np.int64),
        "per_class_accuracy": pca,
        "mia_member_scores": mia.member_scores,
        "mia_nonmember_scores": mia.nonmember_scores,
        "mia_fpr": mia.fpr,
        "mia_tpr": mia.tpr,
        "mia_thresholds": mia.thresholds,
        "mia_member_index": mia.member_index,
        "mia_nonmember_index": mia.nonmember_index,
    }
    if eps_i is not None:
        arrays["pdp_epsilon"] = np.asarray(eps_i, dtype=np.float64)
    return Evaluation(metrics=json_safe(metrics), arrays=arrays)
