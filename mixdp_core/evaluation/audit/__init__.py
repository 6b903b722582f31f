"""Privacy audits: class-matched MIA, LiRA / RMIA, canary ε lower bounds, one-run audits.

:func:`run_audit` is the single entry point used by ``mixdp audit`` and the *Privacy audit*
page; it returns an :class:`AuditResult` whose :meth:`~AuditResult.summary` is the JSON line.

Rules every result follows:

* the claimed ε, δ come from the accounting module (``privacy_`` of the audited runs), never
  from the request;
* an empirical lower bound always comes with its confidence and number of trials, and
  ``alarm`` is true iff it exceeds the claimed ε at a confidence of at least
  :data:`ALARM_MIN_CONFIDENCE` (a privacy bug: the mechanism or its accounting is wrong; below
  it ``alarm_note`` says the bound exceeds the claim at too low a confidence to call);
* attacks without randomized inclusion (the loss attack on the released run) give no ε lower
  bound (``None``) rather than an invalid one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from ..mia import class_matched_indices
from .canary import (blackbox_canary_audit, is_dpsgd_linear, is_noisygd_family, one_run_audit, whitebox_available,
                     whitebox_canary_audit)
from .executor import DEFAULT_EXECUTOR, map_jobs
from .membership import lira_attack, lira_scores, loss_attack, rmia_scores
from .stats import (
    EpsilonBound,
    clopper_pearson_upper,
    epsilon_lower_bound,
    membership_metrics,
    one_run_epsilon,
    one_run_epsilon_lower_bound,
    one_run_p_value,
    tpr_at_fpr,
)

#: The least confidence at which a lower bound above the claim raises the alarm ("privacy bug"):
#: at confidence 0.001 a correct run's bound exceeded its ε (1.12 against 0.986) and was called a
#: bug. Below it the bound is still reported, without the alarm. A convention (the usual 90 % of
#: an interval's one side), not a measurement.
ALARM_MIN_CONFIDENCE = 0.9

#: Attacks of ``mixdp audit --attack``.
ATTACKS: tuple[str, ...] = ("loss", "lira", "rmia", "canary", "canary-whitebox", "one-run", "seed-replay")


@dataclass
class AuditResult:
    """Outcome of one audit.

    Attributes:
        attack, method: what was run against what.
        claimed_epsilon, claimed_delta, claimed_mu: the accounting module's guarantee of the
            audited runs (``None``: non-private method, ε = ∞).
        metrics: AUC, TPR at low FPR, advantage, per-class AUC, ...
        bound: the empirical ε lower bound (``None`` where the attack gives none).
        rocs: ``{name: (fpr, tpr)}`` of the attack (and its variants).
        extra: attack-specific scalars (JSON-safe).
        wall_seconds: time of the audit.
    """

    attack: str
    method: str
    claimed_epsilon: Optional[float]
    claimed_delta: Optional[float]
    claimed_mu: Optional[float]
    metrics: dict[str, Any]
    bound: Optional[EpsilonBound]
    rocs: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    wall_seconds: float = 0.0

    @property
    def alarm_reasons(self) -> list[str]:
        """Why the audit refutes the claim, one sentence per refuting statement (empty: no alarm).

        Each statement refutes on its own: ε_lo > ε; for μ-GDP claims μ_lo > μ; for claims with
        a privacy profile (DP-SGD) the profile refuted at some ε (the statements hold jointly at
        the bound's confidence, at least :data:`ALARM_MIN_CONFIDENCE`); for seed replay, releases reproduced bit for bit from their
        published seed (replay.py), which needs no ε bound."""
        out: list[str] = []
        if self.extra.get("replay_refutes"):
            out.append(f"the release was reproduced bit for bit from its published seed in "
                       f"{self.extra.get('exact_replays_with_canary')} of {self.extra.get('trials_with_canary')} "
                       f"trials with the canary and {self.extra.get('exact_replays_without_canary')} of "
                       f"{self.extra.get('trials_without_canary')} without it: its noise is a known function of "
                       "the seed")
        b = self.bound
        if b is not None and b.confidence >= ALARM_MIN_CONFIDENCE:
            out += self._bound_above_claim()
        return out

    def _bound_above_claim(self) -> list[str]:
        """The statements of the bound that exceed the claim, whatever its confidence: ε_lo > ε,
        the claimed privacy profile refuted, μ_lo > μ."""
        b, eps = self.bound, self.claimed_epsilon
        if b is None or eps is None:
            return []
        out = []
        if b.epsilon_lower > eps:
            out.append(f"the empirical lower bound ε ≥ {b.epsilon_lower:.3g} exceeds the claimed ε = {eps:.3g} "
                       f"(confidence {b.confidence:.6g})")
        if b.profile_violation is not None and b.profile_violation > 0.0:
            out.append(f"the claimed privacy profile δ(ε) is refuted at some ε by {b.profile_violation:.3g} "
                       f"(TPR above e^ε·FPR + δ(ε); confidence {b.confidence:.6g})")
        if b.mu_lower is not None and self.claimed_mu is not None and b.mu_lower > self.claimed_mu:
            out.append(f"the empirical lower bound μ ≥ {b.mu_lower:.3g} exceeds the claimed μ = "
                       f"{self.claimed_mu:.3g} (confidence {b.confidence:.6g})")
        return out

    @property
    def alarm_note(self) -> Optional[str]:
        """Why a bound above the claim raised no alarm (its confidence is below
        :data:`ALARM_MIN_CONFIDENCE`), or ``None``."""
        b = self.bound
        if b is None or b.confidence >= ALARM_MIN_CONFIDENCE or not self._bound_above_claim():
            return None
        return (f"the bound exceeds the claim at confidence {b.confidence:.6g}, below the {ALARM_MIN_CONFIDENCE:g} "
                "an alarm needs: what so little confidence allows, not evidence of a bug")

    @property
    def alarm(self) -> bool:
        """True iff some statement refutes the claim (a privacy bug): see :attr:`alarm_reasons`."""
        return bool(self.alarm_reasons)

    def report(self):
        """A :class:`~mixdp_core.accounting.PrivacyReport`-like object for the theory curve."""
        if self.claimed_epsilon is None:
            return None
        from types import SimpleNamespace

        return SimpleNamespace(epsilon=self.claimed_epsilon, delta=self.claimed_delta, mu=self.claimed_mu)

    def summary(self) -> dict[str, Any]:
        """The one-line JSON object of ``mixdp audit --json`` (its ``note``: :data:`AUDIT_NOTE`)."""
        from ..report import json_safe

        b = self.bound
        m = self.metrics
        out = {
            "note": AUDIT_NOTE,
            "attack": self.attack,
            "method": self.method,
            "claimed_epsilon": self.claimed_epsilon,
            "claimed_delta": self.claimed_delta,
            "claimed_mu": self.claimed_mu,
            "auc": m.get("auc"),
            "tpr_at_fpr_0.001": m.get("tpr_at_fpr_0.001"),
            "tpr_at_fpr_0.01": m.get("tpr_at_fpr_0.01"),
            "advantage": m.get("advantage"),
            "n_members": m.get("n_members"),
            "n_nonmembers": m.get("n_nonmembers"),
            # LiRA / RMIA pool the scores of K + 1 target models that reuse the same rows: the
            # pairs are not independent, and an interval reads one model's worth of them
            "n_models": m.get("n_models"),
            "empirical_epsilon_lower": None if b is None else b.epsilon_lower,
            "confidence": None if b is None else b.confidence,
            "n_trials": None if b is None else b.n_trials,
            "bound_method": None if b is None else b.method,
            "bound_details": None if b is None else b.details,
            "empirical_mu_lower": None if b is None else b.mu_lower,
            "profile_violation": None if b is None else b.profile_violation,
            "alarm": self.alarm,
            "alarm_reasons": self.alarm_reasons,
            "alarm_note": self.alarm_note,
            "per_class_auc": m.get("per_class_auc"),
            "wall_seconds": self.wall_seconds,
        }
        out.update(self.extra)
        return json_safe(out)


#: What every audit's output is: the owner's diagnostic, computed on the private rows (member
#: scores, ROC, AUC, the empirical ε lower bound), not a release covered by the claimed ε.
AUDIT_NOTE = ("Owner-only diagnostic: the attack's scores, AUC, TPRs and empirical epsilon lower bound are "
              "computed on the private data without a privacy guarantee and are not covered by the claimed "
              "epsilon; do not publish them.")


#: Bounds on an audit's size, checked before any training (every entry point: CLI, app,
#: library); declared in :mod:`mixdp_core.config` (why these sizes: there).
from ...config import AUDIT_MAX_CANARIES as MAX_CANARIES  # noqa: E402
from ...config import AUDIT_MAX_REFERENCE_MODELS as MAX_REFERENCE_MODELS  # noqa: E402
from ...config import AUDIT_MAX_TRIALS as MAX_TRIALS  # noqa: E402


from ...config import AUDIT_MAX_REPLAY_TRIALS as MAX_REPLAY_TRIALS  # noqa: E402


def check_audit_size(*, reference_models: Any = 16, canaries: Any = 1000, trials: Any = None,
                     attack: str | None = None) -> None:
    """Raise ``ConfigError`` naming the field and its range unless every size is an integer in
    its range: ``reference_models`` in [2, MAX_REFERENCE_MODELS], ``canaries`` in [10,
    MAX_CANARIES], ``trials`` ``None`` or in [4, MAX_TRIALS] (``attack="seed-replay"``: at most
    :data:`MAX_REPLAY_TRIALS`, two trainings each)."""
    from ...errors import ConfigError

    for name, v, lo, hi in (("reference_models", reference_models, 2, MAX_REFERENCE_MODELS),
                            ("canaries", canaries, 10, MAX_CANARIES), ("trials", trials, 4, MAX_TRIALS)):
        if v is None and name == "trials":
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= int(v) <= hi:
            raise ConfigError(name, f"must be an integer in [{lo}, {hi:,}], got {v!r}")
    if attack == "seed-replay" and trials is not None and int(trials) > MAX_REPLAY_TRIALS:
        raise ConfigError("trials", f"seed-replay runs two trainings per trial: at most {MAX_REPLAY_TRIALS:,} "
                                    f"trials, got {int(trials):,}")


def _params(method: Any, epsilon: float, delta: float, seed: int, method_params: Optional[dict]) -> dict[str, Any]:
    p = dict(method_params or {})
    p.update(target_epsilon=float(epsilon), target_delta=float(delta), seed=int(seed))
    return p


def run_audit(
    split: Any,
    method: Any,
    *,
    attack: str,
    epsilon: float = 3.0,
    delta: float = 1e-5,
    seed: int = 0,
    method_params: Optional[dict[str, Any]] = None,
    reference_models: int = 16,
    canaries: int = 1000,
    trials: Optional[int] = None,
    confidence: float = 0.95,
    executor: Any = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> AuditResult:
    """Run one audit of ``method`` (name or Method subclass) on ``split``.

    Args:
        attack: one of :data:`ATTACKS`.
        epsilon, delta: the target budget the audited method is configured with.
        seed: seed of the trainings and of the audit's coins.
        method_params: other config fields of the method.
        reference_models: K for ``lira`` / ``rmia``.
        canaries: canaries per run (``canary-whitebox``) or in the single run (``one-run``).
        trials: independent trials (``canary``: trainings, default 100; ``canary-whitebox``:
            canaries over all runs, default 1000).
        confidence: of the ε lower bound.
        executor: how trainings run (:mod:`.executor`; the sweep-engine hook).
        progress: ``progress(done, total)`` over trainings.
    """
    if attack not in ATTACKS:
        raise ValueError(f"attack: must be one of {', '.join(ATTACKS)}, got {attack!r}")
    check_audit_size(reference_models=reference_models, canaries=canaries, trials=trials, attack=attack)
    from .stats import check_statement

    check_statement(confidence, delta)  # before any training
    t0 = time.perf_counter()
    params = _params(method, epsilon, delta, seed, method_params)
    name = method if isinstance(method, str) else getattr(method, "__name__", str(method))
    kw = dict(seed=seed, delta=delta, confidence=confidence, executor=executor, progress=progress)
    rocs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    extra: dict[str, Any] = {}
    bound: Optional[EpsilonBound] = None
    if attack == "loss":
        from .jobs import TrainJob, run_train_job

        (o,) = map_jobs(run_train_job, [TrainJob(method, params, split, (split.X_private, split.X_test))],
                        executor=executor, progress=progress)
        from ..mia import auc_score, balanced_indices, cross_entropy_losses

        lp = cross_entropy_losses(o.scores[0], split.y_private)
        lt = cross_entropy_losses(o.scores[1], split.y_test)
        mi, ni = class_matched_indices(split.y_private, split.y_test, seed=seed)
        metrics = membership_metrics(-lp[mi], -lt[ni], member_labels=split.y_private[mi],
                                     nonmember_labels=split.y_test[ni], n_classes=split.n_classes)
        bm, bn = balanced_indices(lp.size, lt.size, seed=seed)
        extra["auc_unmatched"] = auc_score(-lp[bm], -lt[bn])
        extra["class_matched"] = True
        extra["bound_note"] = ("no ε lower bound: members were not chosen by a coin flip before training, "
                               "so no hypothesis test of the DP inequality applies")
        rocs["loss (class-matched)"] = (metrics["fpr"], metrics["tpr"])
        rep = o
    elif attack in ("lira", "rmia"):
        res = lira_attack(method, params, split, reference_models=reference_models, **kw)
        main = "rmia" if attack == "rmia" else "lira_online"
        metrics = res["variants"][main]
        for k, v in res["variants"].items():
            rocs[k] = (v["fpr"], v["tpr"])
            extra[f"{k}_auc"] = v["auc"]
            extra[f"{k}_tpr_at_fpr_0.001"] = v["tpr_at_fpr_0.001"]
            extra[f"{k}_tpr_at_fpr_0.01"] = v["tpr_at_fpr_0.01"]
        extra["reference_models"] = int(reference_models)
        extra["class_matched"] = True
        bound = res["epsilon_bound"] if attack == "lira" else None
        if attack == "rmia":
            extra["bound_note"] = "the ε lower bound is reported by --attack lira (same trainings)"
        rep = res["report"]
    elif attack == "canary":
        res = blackbox_canary_audit(method, params, split, trials=trials or 100, **kw)
        metrics, bound, rep = res, res["epsilon_bound"], res["report"]
        rocs["canary (black-box)"] = (res["fpr"], res["tpr"])
        extra["canary_type"] = res["canary_type"]
    elif attack == "canary-whitebox":
        res = whitebox_canary_audit(method, params, split, trials=trials or 1000,
                                    canaries_per_run=canaries, **kw)
        metrics, bound, rep = res, res["epsilon_bound"], res["report"]
        rocs["Dirac canary (white-box)"] = (res["fpr"], res["tpr"])
        ob = res["one_run_bound"]
        extra.update(canary_type=res["canary_type"], canary_mean_ratio=res["canary_mean_ratio"],
                     steps=res["steps"], n_runs=res["n_runs"], one_run_epsilon_lower=ob.epsilon_lower,
                     one_run_n_canaries=ob.n_trials)
        # why a bound may sit below the claim (releases the canary's observer does not see): the
        # audit computed them, the summary dropped them
        extra.update({k: res[k] for k in ("releases", "releases_recorded", "releases_observed") if k in res})
    elif attack == "seed-replay":
        from .replay import seed_replay_audit

        res = seed_replay_audit(method, params, split, trials=trials, **kw)
        metrics, bound, rep = res, res["epsilon_bound"], res["report"]
        rocs["seed replay"] = (res["fpr"], res["tpr"])
        extra.update(exact_replays_with_canary=res["exact_in"], exact_replays_without_canary=res["exact_out"],
                     trials_with_canary=res["n_in"], trials_without_canary=res["n_out"],
                     replay_refutes=res["replay_refutes"], noise=res["noise"],
                     bound_note=("the adversary knows each run's seed and replays its training on the data with "
                                 "the canary; a release reproduced bit for bit refutes any finite ε"))
    else:  # one-run
        res = one_run_audit(method, params, split, canaries=canaries, **kw)
        metrics, bound, rep = res, res["epsilon_bound"], res["report"]
        rocs["one run"] = (res["fpr"], res["tpr"])
        extra["canary_type"] = res["canary_type"]
    metrics = dict(metrics)
    return AuditResult(
        attack=attack, method=name, claimed_epsilon=rep.epsilon, claimed_delta=rep.delta if rep.epsilon is not None else None,
        claimed_mu=rep.mu, metrics={k: v for k, v in metrics.items() if k not in ("report", "epsilon_bound", "variants", "one_run_bound")},
        bound=bound, rocs=rocs, extra=extra, wall_seconds=time.perf_counter() - t0,
    )


__all__ = [
    "ATTACKS", "AuditResult", "is_dpsgd_linear", "whitebox_available", "DEFAULT_EXECUTOR", "EpsilonBound", "blackbox_canary_audit", "class_matched_indices",
    "clopper_pearson_upper", "epsilon_lower_bound", "is_noisygd_family", "lira_attack", "lira_scores", "loss_attack",
    "map_jobs", "membership_metrics", "one_run_audit", "one_run_epsilon", "one_run_epsilon_lower_bound",
    "one_run_p_value", "rmia_scores", "run_audit", "tpr_at_fpr", "whitebox_canary_audit",
]
