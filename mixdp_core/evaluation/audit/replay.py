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

from ...config import AUDIT_DEFAULT_REPLAY_TRIALS as MAX_DEFAULT_TRIALS  # most trials the default picks (two trainings each)


def default_trials(epsilon: float, *, confidence: float = 0.95, delta: float = 1e-5) -> int:
    """Fewest trials at which a perfect attack refutes ``epsilon`` at ``confidence``.

    Computed from the bound itself (:func:`~.stats.epsilon_lower_bound`), not from an
    approximation of it: a perfect attack (no false positive or negative) on ``e`` evaluation
    trials per side has Clopper–Pearson upper bounds ``1 − (α/2)^(1/e)`` on FPR and FNR (one-sided,
    ``α/2`` each), and refutes ``epsilon`` once ``ln((1 − δ − FNR_hi) / FPR_hi) > epsilon``. The
    coins split the trials between the sides at random, and the bound evaluates on half of each
    side: the count returned leaves the smaller side two binomial standard deviations short of
    ``n/2``. Capped at :data:`MAX_DEFAULT_TRIALS` (about ε = 3.3 at 95 %): above the cap the
    bound can refute only smaller ε; the exact-replay count still shows the leak."""
    from .stats import _eps_from_rates, clopper_pearson_upper

    alpha = 1.0 - float(confidence)
    for n in range(20, MAX_DEFAULT_TRIALS + 1, 2):
        side = int(math.floor(n / 2 - math.sqrt(n)))  # 2 s.d. of Bin(n, 1/2) below n/2
        e = side - side // 2  # the evaluation half (stats.epsilon_lower_bound)
        if e < 1:
            continue
        hi = clopper_pearson_upper(0, e, alpha / 2)
        if float(_eps_from_rates(np.array([hi]), np.array([hi]), delta)[0]) > float(epsilon):
            return n
    return MAX_DEFAULT_TRIALS


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
    n = int(trials) if trials is not None else default_trials(eps_claim, confidence=confidence, delta=delta)
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
