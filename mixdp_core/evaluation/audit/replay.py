"""Seed-replay attack: what an adversary who knows a run's seed learns from its release.

The run's seed is published (run store, ``--json``, exports). If the mechanism's noise is a
function of that seed (``noise="reproducible"``), an adversary who suspects a row is in the
private data retrains with the same seed on the data *with* that row: if the release is
reproduced bit for bit, the row was in. The default source (``noise="secure"``,
:mod:`mixdp_core.randomness`) keys a cryptographic generator from the OS at every run, so the
replay reproduces nothing and the attack is no better than any other.

Trials (each an independent run, as the Clopper–Pearson bound requires): a coin picks whether
a canary row (a test row, so the private data are untouched) is added to the private data;
the "owner" trains with seed ``seed + t`` (published); the adversary replays the training with
the same seed and config on the data *with* the canary and scores ``−max|released − replay|``
over the test-set scores (0 = reproduced exactly). ε lower bound:
:func:`~.stats.epsilon_lower_bound` on those scores. Beside it, the deterministic evidence:
how many releases the replay reproduced bit for bit with and without the canary.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

import numpy as np

from .executor import map_jobs
from .jobs import TrainJob, run_train_job
from .stats import epsilon_lower_bound

#: Most trials the default picks (each costs two trainings).
MAX_DEFAULT_TRIALS = 400


def default_trials(epsilon: float, *, confidence: float = 0.95) -> int:
    """Trials at which a perfect attack can refute ``epsilon`` at ``confidence``.

    With ``m`` trials per side, half of them used to evaluate, zero false positives give a
    Clopper–Pearson FPR upper bound of about ``ln(1/α)/(m/2)``; a perfect TPR beats
    ``e^ε`` times that once ``m ≳ 2 ln(1/α)(e^ε + 1)``. Capped at :data:`MAX_DEFAULT_TRIALS`
    (then the bound can refute only smaller ε; the exact-replay count still shows the leak)."""
    alpha = 1.0 - float(confidence)
    per_side = 2.0 * math.log(1.0 / alpha) * (math.exp(min(float(epsilon), 20.0)) + 1.0) + 4.0
    return int(min(MAX_DEFAULT_TRIALS, max(20, 2 * math.ceil(per_side))))


def _with_row(split: Any, x: np.ndarray, y: int) -> Any:
    return dataclasses.replace(split, X_private=np.vstack([split.X_private, x[None, :]]),
                               y_private=np.append(split.y_private, y).astype(split.y_private.dtype))


def seed_replay_audit(
    method: Any, params: dict[str, Any], split: Any, *, trials: Optional[int] = None, seed: int = 0,
    delta: float = 1e-5, confidence: float = 0.95, executor: Any = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> dict[str, Any]:
    """Replay each trial's training from its published seed (module docstring).

    Returns a dict with ``auc``, ``fpr``/``tpr`` of the replay score, ``epsilon_bound``,
    ``report`` (the audited runs' claim), ``exact_in`` / ``exact_out`` (releases reproduced bit
    for bit with / without the canary), ``n_in`` / ``n_out``, ``replay_refutes`` and ``trials``.
    """
    from ..mia import auc_score

    rng = np.random.default_rng([seed, 0x5EED])  # the audit's own coins: public by design
    eps_claim = float(params.get("target_epsilon", 3.0))
    n = int(trials) if trials is not None else default_trials(eps_claim, confidence=confidence)
    coins = rng.random(n) < 0.5
    if coins.all() or not coins.any():
        coins[0] = not coins[0]
    j = int(rng.integers(len(split.y_test)))
    split_in = _with_row(split, np.asarray(split.X_test[j]), int(split.y_test[j]))
    jobs = []
    for t in range(n):
        p = dict(params, seed=int(seed) + t)
        jobs.append(TrainJob(method, p, split_in if coins[t] else split, (split.X_test,)))  # the owner's release
        jobs.append(TrainJob(method, p, split_in, (split.X_test,)))  # the adversary's replay
    outs = map_jobs(run_train_job, jobs, executor=executor, progress=progress)
    dist = np.array([float(np.max(np.abs(outs[2 * t].scores[0] - outs[2 * t + 1].scores[0]))) for t in range(n)])
    score = -dist
    pos, neg = score[coins], score[~coins]
    bound = epsilon_lower_bound(pos, neg, delta=delta, confidence=confidence, seed=seed)
    exact_in, exact_out = int(np.sum(dist[coins] == 0.0)), int(np.sum(dist[~coins] == 0.0))
    # A release of continuous noise reproduced bit for bit from public information, with the
    # canary in and never without it: the noise is a known function of the seed.
    refutes = bool(exact_in >= 2 and exact_out == 0 and exact_in >= 0.5 * pos.size)
    thr = np.unique(score)[::-1]
    fpr = np.array([0.0] + [float(np.mean(neg >= t)) for t in thr] + [1.0])
    tpr = np.array([0.0] + [float(np.mean(pos >= t)) for t in thr] + [1.0])
    o = outs[0]
    from types import SimpleNamespace

    return {
        "auc": auc_score(pos, neg), "fpr": fpr, "tpr": tpr, "epsilon_bound": bound,
        "report": SimpleNamespace(epsilon=o.epsilon, delta=o.delta, mu=o.mu),
        "exact_in": exact_in, "exact_out": exact_out, "n_in": int(pos.size), "n_out": int(neg.size),
        "replay_refutes": refutes, "trials": n, "n_members": int(pos.size), "n_nonmembers": int(neg.size),
        "noise": str(params.get("noise", "secure")),
    }
