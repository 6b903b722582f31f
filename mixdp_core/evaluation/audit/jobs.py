"""The picklable training job every audit is made of, and the scores computed from a model.

A job trains the audited method *itself* (same ε, δ and hyper-parameters, a job-specific
seed, which sets its noise only with ``noise="reproducible"``) on a given split and returns class scores on the rows it is asked about; white-box
jobs also observe the mechanism's releases (see :mod:`.canary`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np
from scipy.special import logsumexp


def make_audited_method(method: Any, params: dict[str, Any]):
    """A fresh method: ``method`` is a registered name or a :class:`Method` subclass.

    ``params`` are config fields; keys the config does not have (e.g. ``seed`` for a
    deterministic method) are dropped.
    """
    from ...methods import METHODS

    cls = METHODS.get(method) if isinstance(method, str) else method
    fields = {f.name for f in dataclasses.fields(cls.config_cls)}
    return cls(cls.config_cls(**{k: v for k, v in params.items() if k in fields}))


def with_private(split: Any, X: np.ndarray, y: np.ndarray, **other: Any) -> Any:
    """``split`` with its private rows replaced (counts recomputed; the minority classes are the
    seed's plan, not the rows', so a neighbouring data set keeps them); ``other``: further fields
    replaced in the same step (a split is checked whole when it is built, so parts that change
    dimension together must change together)."""
    y = np.asarray(y, dtype=np.int64)
    counts = np.bincount(y, minlength=split.n_classes)
    return dataclasses.replace(split, X_private=np.ascontiguousarray(X, dtype=np.float32), y_private=y,
                               private_counts=counts, **other)


@dataclass
class TrainJob:
    """One training of the audited method (picklable).

    Attributes:
        method: registered name or Method subclass.
        params: config fields (``target_epsilon``, ``target_delta``, ``seed``, ...).
        split: the split to train on.
        score: matrices whose class scores ``decision_function(X)`` are returned.
    """

    method: Any
    params: dict[str, Any]
    split: Any
    score: Sequence[np.ndarray] = field(default_factory=tuple)


@dataclass
class TrainOutput:
    """Scores of one job plus the privacy report the accounting module gave the run."""

    scores: list[np.ndarray]
    epsilon: Optional[float]
    delta: Optional[float]
    mu: Optional[float]


def run_train_job(job: TrainJob) -> TrainOutput:
    """Fit and score (top-level so that process pools can pickle it)."""
    model = make_audited_method(job.method, job.params).fit(job.split)
    rep = getattr(model, "privacy_", None)
    return TrainOutput(
        scores=[np.asarray(model.decision_function(X), dtype=np.float64) for X in job.score],
        epsilon=None if rep is None else float(rep.epsilon),
        delta=None if rep is None else float(rep.delta),
        mu=None if rep is None or rep.mu is None else float(rep.mu),
    )


def logit_confidence(scores: np.ndarray, y: np.ndarray) -> np.ndarray:
    """φ = log(p_y / (1 - p_y)) of the softmax of ``scores`` (Carlini et al. 2022, Sec. IV-B).

    Computed stably as ``z_y - logsumexp_{j != y} z_j``; ``(N,)``.
    """
    z = np.asarray(scores, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    idx = np.arange(len(y))
    zy = z[idx, y].copy()
    zo = z.copy()
    zo[idx, y] = -np.inf
    return zy - logsumexp(zo, axis=1)


def true_class_prob(scores: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Softmax probability of the true class, ``(N,)`` (used by RMIA)."""
    z = np.asarray(scores, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    return np.exp(z[np.arange(len(y)), y] - logsumexp(z, axis=1))
