"""Glue of the *Privacy audit* page: run an audit for a stored run, table rows, explanations.

No streamlit here and no algorithm: audits come from :mod:`mixdp_core.evaluation.audit`.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Mapping, Optional

ATTACK_LABELS: dict[str, str] = {
    "canary-whitebox": "White-box Dirac canaries (NoisyGD family)",
    "lira": "LiRA (reference models)",
    "rmia": "RMIA (reference models)",
    "loss": "Loss threshold, class-matched",
    "one-run": "One-run canary audit (Steinke et al.)",
    "canary": "Black-box canary trials",
    "seed-replay": "Seed replay (the adversary knows the run's published seed)",
}


#: How to read the theory-vs-attack chart (the Privacy audit page's caption).
AUDIT_CHART_CAPTION = (
    "Black line: the best trade-off *any* attack can reach under this run's guarantee (accounting.max_tpr). "
    "Coloured lines: measured attacks, each an *estimate* from a finite number of members and non-members; the "
    "shaded band around it is the 95 % Clopper–Pearson range of each point on its own (pointwise), as if the "
    "rows were independent trials. It shows how uncertain each point is; it is not a test. A curve has hundreds "
    "of points, read after the data are seen, so some band can cross the black line by chance even when the "
    "guarantee holds, and rows scored by one trained model are not independent trials. The test is the lower "
    "bound in the table below: one threshold chosen on half of the independent trials, its rates bounded on "
    "the other half, at the stated confidence; the alarm fires only on it.")


def run_report(metrics: Mapping[str, Any]) -> Optional[Any]:
    """The run's privacy report (ε, δ, μ from the accounting module, as stored), or ``None``."""
    if metrics.get("epsilon") is None:
        return None
    return SimpleNamespace(epsilon=float(metrics["epsilon"]), delta=float(metrics["delta"]),
                           mu=None if metrics.get("mu") is None else float(metrics["mu"]))


def attack_available(rec: Any, attack: str) -> tuple[bool, str]:
    """Whether ``attack`` applies to the run's method, and why not."""
    from ..evaluation.audit import whitebox_available
    from ..methods import METHODS

    cls = METHODS.get(rec.method)
    if not cls.uses_private_data:
        return False, f"{rec.method} never reads private data: there is no membership to infer."
    if cls.family == "finetune" and attack in ("lira", "rmia", "canary", "seed-replay"):
        return False, ("network fine-tuning takes minutes per training; use the one-run audit "
                       "(one training) or the CLI with a process pool")
    if attack == "canary-whitebox" and not whitebox_available(rec.method):
        return False, (f"white-box Dirac canaries observe NoisyGD's released gradients; {rec.method} is neither a "
                       "NoisyGD-family method nor a DP-SGD linear probe: use the one-run or black-box canary audit.")
    return True, ""


def audit_trainings(attack: str, *, reference_models: int, trials: int | None, canaries: int,
                    method: str | None = None, params: dict | None = None) -> str:
    """How many trainings of the method an audit runs, said before it starts (the page runs it
    in the session: a review's black-box canary audit at the former page default of 1,000 trials
    was about 5 minutes of trainings, with no word before): ``trials=None`` is the attack's own
    default (canary 100 trainings, white-box 1,000 canaries, seed replay enough to refute ε)."""
    import math

    from ..config import AUDIT_DEFAULT_REPLAY_TRIALS as MAX_DEFAULT_TRIALS

    if attack in ("loss", "one-run"):
        return "1 training"
    if attack in ("lira", "rmia"):
        return f"{int(reference_models) + 1} trainings (the target and {int(reference_models)} reference models)"
    if attack == "canary":
        return f"{int(trials or 100):,} trainings (one per trial)"
    if attack == "canary-whitebox":
        n = int(trials or 1000)
        if method is not None:
            from ..evaluation.audit.canary import independent_canary_rows

            if not independent_canary_rows(method, dict(params or {})):  # DP-SGD, a projection: one training
                return f"1 training ({n:,} canaries in it: its canaries are not independent trials)"
        runs = math.ceil(n / max(1, min(int(canaries), n)))
        return f"{runs:,} training(s) ({n:,} canaries, {min(int(canaries), n):,} per training)"
    if attack == "seed-replay":
        return (f"{2 * int(trials):,} trainings (two per trial)" if trials else
                f"up to {2 * MAX_DEFAULT_TRIALS:,} trainings (two per trial, as many as refuting ε needs)")
    return "its trainings"


def run_stored_audit(store: Any, rec: Any, *, attack: str, reference_models: int = 8, trials: int | None = None,
                     canaries: int = 1000, progress: Optional[Callable[[int, int], None]] = None,
                     executor: Any = None) -> str:
    """Run ``attack`` on the stored run's config and save it (linked to the run); returns the id.
    ``trials=None``: the attack's own default (:func:`audit_trainings`)."""
    from ..data.splits import make_split
    from ..evaluation.audit import run_audit
    from ..runs.audits import AuditStore
    from ..runs.runner import RunConfig, _load_features

    config = RunConfig.from_dict(rec.config)
    feats, pub = _load_features(config, cache_dir=None, progress=None)
    split = make_split(feats, config.split_spec(), public_features=pub)
    kw = config.method_kwargs()
    for k in ("target_epsilon", "target_delta", "seed"):
        kw.pop(k, None)
    res = run_audit(split, config.method, attack=attack, epsilon=config.target_epsilon, delta=config.target_delta,
                    seed=config.seed, method_params=kw, reference_models=reference_models,
                    trials=trials if attack in ("canary", "canary-whitebox", "seed-replay") else None,
                    canaries=canaries, executor=executor, progress=progress)
    out = res.summary()
    out.update(dataset=config.dataset, encoder=config.encoder, seed=config.seed)
    return AuditStore(store).save(out, config=config.to_dict(), run_id=rec.run_id, rocs=res.rocs)


def audits_for_run(audits: Any, rec: Any, limit: int = 500) -> list:
    """Stored audits of a run: linked to it (page) or run from the CLI on the same config."""
    out = []
    for a in audits.list(limit=limit):
        if a.run_id == rec.run_id or (a.run_id is None and a.config == rec.config):
            out.append(a)
    return out


def _f(x: Any, fmt: str = "{:.3g}") -> str:
    return "—" if x is None else fmt.format(x)


def guarantee_caveat(metrics: Mapping[str, Any], summaries: Any = ()) -> Optional[str]:
    """What voids the run's stated guarantee on the audit page, or ``None``: noise reproducible
    from the published seed, or a stored audit of the run that refutes the claim. The page
    shows it above the guarantee and qualifies the guarantee's headline with it."""
    from ..evaluation.audit import ALARM_MIN_CONFIDENCE
    from ..randomness import REPRODUCIBLE, REPRODUCIBLE_WARNING

    why = []
    if metrics.get("noise") == REPRODUCIBLE:
        why.append(f"this run's {REPRODUCIBLE_WARNING}")
    # audits stored before the alarm needed ALARM_MIN_CONFIDENCE: a low-confidence one refutes nothing
    n_alarm = sum(bool(s.get("alarm")) and (s.get("confidence") is None or s.get("replay_refutes")
                                             or float(s["confidence"]) >= ALARM_MIN_CONFIDENCE) for s in summaries)
    if n_alarm:
        why.append(f"{n_alarm} audit(s) below refute the claim")
    return "; ".join(why) if why else None


def alarm_message(summary: dict[str, Any]) -> str:
    """The page's alarm for one stored audit: each statement that refutes the claim, as the audit
    made it (``AuditResult.alarm_reasons``; audits stored before it: the ε bound's wording)."""
    reasons = summary.get("alarm_reasons") or [
        f"the empirical lower bound ε ≥ {summary.get('empirical_epsilon_lower') or 0:.3g} exceeds the claimed "
        f"ε = {summary.get('claimed_epsilon') or 0:.3g}"]
    return (f"ALARM ({summary.get('attack')}): " + "; ".join(reasons)
            + ". The mechanism or its accounting is wrong.")


def _measurable(summary: Mapping[str, Any], fpr: float) -> bool:
    """Whether a TPR at false-positive rate ``fpr`` was measured: the smallest non-zero rate
    the non-members can show is 1 / their number (40 trials cannot show 0.1 %)."""
    n = summary.get("n_nonmembers")
    return bool(n) and int(n) * fpr >= 1.0


def _auc_interval(s: dict) -> str:
    """An audit's AUC with its 95 % half-width over its members and non-members (Hanley &
    McNeil), or the AUC alone where the counts were not stored."""
    from ..evaluation.mia import auc_standard_error

    a, n_pos, n_neg = s.get("auc"), s.get("n_members"), s.get("n_nonmembers")
    if a is None:
        return "—"
    k = int(s.get("n_models") or 1)
    try:
        # scores pooled over k target models that reuse the same rows are not k times the
        # independent pairs: the interval of one model's rows (it was too narrow by about √k)
        half = 1.96 * auc_standard_error(float(a), max(1, int(n_pos) // k), max(1, int(n_neg) // k))
    except (TypeError, ValueError, ZeroDivisionError):
        return f"{float(a):.3f}"
    return f"{float(a):.3f} ± {half:.3f}" + (f" (one of {k} pooled models' rows)" if k > 1 else "")


def default_attack(rec: Any) -> str:
    """The first attack of :data:`ATTACK_LABELS` that applies to the run's method (the page
    opened on white-box canaries, which refuse the paragon and the prototype methods)."""
    for a in ATTACK_LABELS:
        if attack_available(rec, a)[0]:
            return a
    return next(iter(ATTACK_LABELS))


def audit_rows(audits: list) -> list[dict[str, str]]:
    """One table row per stored audit: claim next to the lower bound, alarm first."""
    rows = []
    for a in audits:
        s = a.summary
        rows.append({
            "alarm": "🚨 ALARM" if s.get("alarm") else "ok",
            "attack": ATTACK_LABELS.get(a.attack, a.attack),
            "claimed ε": _f(s.get("claimed_epsilon")),
            "empirical ε ≥": _f(s.get("empirical_epsilon_lower")),
            "confidence": _f(s.get("confidence"), "{:.6g}"),
            "trials": _f(s.get("n_trials"), "{}"),
            # an estimate over the trials: two identical 50-trial audits gave 0.721 and 0.607
            "AUC (± 95 %)": _auc_interval(s),
            # a TPR at a false-positive rate below 1 / (non-members) is not measured: "—"
            "TPR @ FPR 0.1 %": _f(s.get("tpr_at_fpr_0.001") if _measurable(s, 0.001) else None, "{:.3f}"),
            "TPR @ FPR 1 %": _f(s.get("tpr_at_fpr_0.01") if _measurable(s, 0.01) else None, "{:.3f}"),
            "members / non-members": f"{s.get('n_members', '?')} / {s.get('n_nonmembers', '?')}",
            "id": a.audit_id,
        })
    return rows


def pdp_unavailable_reason(method: str) -> str:
    """Why a method has no per-instance ε (page text)."""
    from ..evaluation.pdp import PDP_UNAVAILABLE

    return PDP_UNAVAILABLE.get(method, "this run predates per-instance accounting for its family; "
                                       "train it again to get εᵢ.")
