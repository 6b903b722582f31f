r"""Statistics of privacy audits: ROC summaries, exact binomial bounds, empirical ε lower bounds.

Everything here works on attack *scores* (higher = "member" / "canary included") and is
independent of how the scores were produced.

* :func:`membership_metrics`: AUC, TPR at FPR = 10⁻³ and 10⁻² (the low-FPR convention of
  Carlini et al. 2022, "Membership Inference Attacks From First Principles", Sec. III-B: the
  largest TPR of an ROC point whose FPR does not exceed the target), membership advantage
  ``max_t |TPR - FPR|`` (Yeom et al. 2018) and per-class AUC slices.
* :func:`clopper_pearson_upper`: exact one-sided upper confidence bound of a binomial rate
  (Clopper & Pearson 1934): the ``1 - a`` quantile of ``Beta(k + 1, n - k)``.
* :func:`epsilon_lower_bound`: the hypothesis-testing lower bound of Kairouz et al. 2015 /
  Jagielski et al. 2020 (Sec. 4 and Alg. 2) / Nasr et al. 2021 (Eq. (2)). If a mechanism is
  (ε, δ)-DP, every test of "canary in" vs "canary out" satisfies
  ``FPR + e^ε FNR >= 1 - δ`` and ``FNR + e^ε FPR >= 1 - δ``, so with probability ``>= 1 - α``
  (both rates below their Clopper–Pearson upper bounds, one-sided at ``α/2`` each: Bonferroni
  over the two rates)

  .. math:: ε >= \max\Big(\log\frac{1 - δ - \overline{FPR}}{\overline{FNR}},\;
                          \log\frac{1 - δ - \overline{FNR}}{\overline{FPR}}\Big).

  The threshold is chosen on one random half of the trials and the bound is evaluated on the
  other half, so the choice costs no multiplicity correction (an honest single test).
* :func:`one_run_p_value` / :func:`one_run_epsilon_lower_bound`: the exact bound of Steinke,
  Nasr & Jagielski 2023 ("Privacy Auditing with One (1) Training Run"), Theorem 5.2 computed as
  in their Algorithm 2 / App. D (``p_value_DP_audit``, ``get_eps_audit``): with ``m`` canaries
  each included independently with probability 1/2, ``r`` guesses and ``v`` correct ones, the
  p-value of "the mechanism is (ε, δ)-DP" is
  ``P[Binom(r, q) >= v] + 2 m δ max_{1<=i<=v} P[v - i <= Binom(r, q) < v] / i`` with
  ``q = e^ε/(1 + e^ε)``; ε_lo is the largest ε rejected at level ``1 - confidence``. Several
  guess counts ``k`` are tried with a Bonferroni correction over them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from ..mia import auc_score, roc_curve


class _LazyScipyStats:
    """``scipy.stats`` imported on first use: it costs ~0.5 s of CPU and every training run
    imports this module for the class-matched MIA (``benchmarks/startup.py``)."""

    def __getattr__(self, name: str) -> Any:
        from scipy import stats

        return getattr(stats, name)


_st = _LazyScipyStats()

#: FPR levels reported by every attack (Carlini et al. 2022 report 10⁻³ and lower).
FPR_LEVELS: tuple[float, ...] = (1e-3, 1e-2)


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, target: float) -> float:
    """Largest TPR among ROC points with FPR <= ``target`` (no interpolation, conservative).

    With ``n`` non-members an FPR below ``1/n`` can only be the point FPR = 0; the reported
    value is then the TPR reached with no false positive at all.
    """
    fpr = np.asarray(fpr, dtype=np.float64)
    tpr = np.asarray(tpr, dtype=np.float64)
    ok = fpr <= target + 1e-15
    return float(tpr[ok].max()) if ok.any() else 0.0


def membership_metrics(
    member_scores: np.ndarray,
    nonmember_scores: np.ndarray,
    *,
    member_labels: Optional[np.ndarray] = None,
    nonmember_labels: Optional[np.ndarray] = None,
    n_classes: Optional[int] = None,
) -> dict[str, Any]:
    """ROC summary of an attack (scores: higher = member).

    Returns:
        ``{"auc", "advantage", "tpr_at_fpr_0.001", "tpr_at_fpr_0.01", "n_members",
        "n_nonmembers", "fpr", "tpr", "per_class_auc"}`` (the last is ``None`` without
        labels; a class with no member or no non-member gets ``None``).
    """
    m = np.asarray(member_scores, dtype=np.float64).ravel()
    n = np.asarray(nonmember_scores, dtype=np.float64).ravel()
    if m.size == 0 or n.size == 0:  # e.g. every coin of a short canary audit fell the same way
        out = {"auc": None, "advantage": None, "n_members": int(m.size), "n_nonmembers": int(n.size),
               "fpr": np.zeros(0), "tpr": np.zeros(0), "per_class_auc": None}
        out.update({f"tpr_at_fpr_{a:g}": None for a in FPR_LEVELS})
        return out
    fpr, tpr, _ = roc_curve(m, n)
    out: dict[str, Any] = {
        "auc": auc_score(m, n),
        "advantage": float(np.max(np.abs(tpr - fpr))),
        "n_members": int(m.size),
        "n_nonmembers": int(n.size),
        "fpr": fpr,
        "tpr": tpr,
    }
    for a in FPR_LEVELS:
        out[f"tpr_at_fpr_{a:g}"] = tpr_at_fpr(fpr, tpr, a)
    per_class = None
    if member_labels is not None and nonmember_labels is not None:
        ml = np.asarray(member_labels)
        nl = np.asarray(nonmember_labels)
        C = int(n_classes if n_classes is not None else max(ml.max(initial=-1), nl.max(initial=-1)) + 1)
        per_class = []
        for c in range(C):
            a, b = m[ml == c], n[nl == c]
            per_class.append(auc_score(a, b) if a.size and b.size else None)
    out["per_class_auc"] = per_class
    return out


# --------------------------------------------------------------------------- CP bounds


def clopper_pearson_upper(k: Any, n: Any, a: float) -> np.ndarray:
    """Exact one-sided ``1 - a`` upper confidence bound of a binomial rate (vectorized).

    ``P[p <= bound] >= 1 - a`` for ``k ~ Binom(n, p)``; equals 1 when ``k = n``.
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        b = _st.beta.ppf(1.0 - a, k + 1.0, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, b)


def roc_band(fpr: Any, tpr: Any, n_neg: int, n_pos: int, *, confidence: float = 0.95
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pointwise Clopper–Pearson band of a measured ROC curve.

    Each point's FPR is a rate over ``n_neg`` non-members and its TPR over ``n_pos``
    members; each gets its exact two-sided ``confidence`` interval (``α/2`` per side, the
    same intervals the ε lower bound uses). Returns ``(fpr_lo, fpr_hi, tpr_lo, tpr_hi)``:
    the pessimistic ``(fpr_hi, tpr_lo)`` and optimistic ``(fpr_lo, tpr_hi)`` edges. Descriptive
    only: the coverage is per point, not simultaneous over the curve (a band crossing a claimed
    trade-off somewhere is no test at ``confidence``), and it assumes independent Bernoulli
    trials. The test of a claim is :func:`epsilon_lower_bound` (one threshold, chosen on a
    separate half).
    """
    a = (1.0 - float(confidence)) / 2.0
    f = np.clip(np.asarray(fpr, dtype=np.float64), 0.0, 1.0)
    t = np.clip(np.asarray(tpr, dtype=np.float64), 0.0, 1.0)
    kf, kt = np.rint(f * n_neg), np.rint(t * n_pos)
    f_hi = clopper_pearson_upper(kf, n_neg, a)
    f_lo = 1.0 - clopper_pearson_upper(n_neg - kf, n_neg, a)
    t_hi = clopper_pearson_upper(kt, n_pos, a)
    t_lo = 1.0 - clopper_pearson_upper(n_pos - kt, n_pos, a)
    return f_lo, f_hi, t_lo, t_hi


def _eps_from_rates(fpr_hi: np.ndarray, fnr_hi: np.ndarray, delta: float) -> np.ndarray:
    """max of the two Kairouz/Jagielski inequalities, floored at 0 (vectorized)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        e1 = np.log(np.maximum(1.0 - delta - fpr_hi, 0.0) / fnr_hi)
        e2 = np.log(np.maximum(1.0 - delta - fnr_hi, 0.0) / fpr_hi)
    e = np.fmax(e1, e2)
    return np.maximum(np.nan_to_num(e, nan=0.0, neginf=0.0, posinf=0.0), 0.0)


@dataclass
class EpsilonBound:
    """An empirical lower bound on ε with its confidence.

    Attributes:
        epsilon_lower: ε_lo >= 0; with probability >= ``confidence`` over the trials the
            mechanism is not (ε, δ)-DP for any ε < ε_lo.
        confidence: e.g. 0.95.
        delta: the δ of the statement.
        n_trials: trials used (selection + evaluation halves, or the ``m`` canaries).
        method: ``"clopper_pearson_split"`` or ``"one_run"``.
        details: threshold, counts and rate bounds (JSON-safe scalars).
        mu_lower: where asked for (claims that are μ-GDP), the lower bound on μ of the same
            kind (see :func:`epsilon_lower_bound`); ``None`` otherwise.
        profile_violation: where asked for (a claimed privacy profile δ(ε)), the largest
            ``TPR_lo − (e^ε FPR_hi + δ(ε))`` over the profile's ε (either direction); > 0
            refutes the claimed profile at ``confidence``. ``None`` otherwise.
    """

    epsilon_lower: float
    confidence: float
    delta: float
    n_trials: int
    method: str
    details: dict[str, Any] = field(default_factory=dict)
    mu_lower: Optional[float] = None
    profile_violation: Optional[float] = None


def _profile_violation(fpr_hi: np.ndarray, fnr_hi: np.ndarray, eps: np.ndarray, deltas: np.ndarray):
    """``max_k max(1 − FNR − e^{ε_k} FPR − δ_k, 1 − FPR − e^{ε_k} FNR − δ_k)`` and its argmax k (vectorized)."""
    e = np.exp(np.asarray(eps, dtype=np.float64))[None, :]
    d = np.asarray(deltas, dtype=np.float64)[None, :]
    f, n = np.asarray(fpr_hi, dtype=np.float64)[:, None], np.asarray(fnr_hi, dtype=np.float64)[:, None]
    v = np.maximum(1.0 - n - e * f - d, 1.0 - f - e * n - d)
    return v.max(axis=1), v.argmax(axis=1)


def _mu_from_rates(fpr_hi: np.ndarray, fnr_hi: np.ndarray) -> np.ndarray:
    """μ-GDP lower bound ``Φ⁻¹(1 - FPR) - Φ⁻¹(FNR)`` at rate upper bounds, floored at 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        m = _st.norm.isf(fpr_hi) - _st.norm.ppf(fnr_hi)
    return np.maximum(np.nan_to_num(m, nan=0.0, neginf=0.0, posinf=0.0), 0.0)


def check_statement(confidence: Any, delta: Any) -> tuple[float, float]:
    """``(confidence, delta)`` of a lower-bound statement, checked: ``confidence`` in (0, 1)
    (``95`` is not 95 %: it would state a bound of 0 "at confidence 95"), ``delta`` in [0, 1).

    Raises:
        ConfigError: naming the field and its range."""
    from ...errors import ConfigError

    for name, v, ok, rng in (("confidence", confidence, lambda x: 0.0 < x < 1.0, "(0, 1), e.g. 0.95"),
                             ("delta", delta, lambda x: 0.0 <= x < 1.0, "[0, 1)")):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not (
                math.isfinite(float(v)) and ok(float(v))):
            raise ConfigError(name, f"must be a number in {rng}, got {v!r}")
    return float(confidence), float(delta)


def epsilon_lower_bound(
    pos_scores: np.ndarray,
    neg_scores: np.ndarray,
    *,
    delta: float,
    confidence: float = 0.95,
    seed: int = 0,
    gdp: bool = False,
    profile: Optional[tuple[np.ndarray, np.ndarray]] = None,
) -> EpsilonBound:
    """Empirical ε lower bound from independent trials (Jagielski et al. 2020, Alg. 2).

    Args:
        pos_scores: statistic of the trials where the canary was included (higher = in).
        neg_scores: statistic of the trials where it was not.
        delta: δ of the claimed guarantee.
        confidence: 1 - α of the statement (default 95 %).
        seed: seed of the selection / evaluation split of the trials.

    Every trial must be an independent run of the mechanism (the Clopper–Pearson intervals
    assume independent Bernoulli outcomes). The threshold (guess "in" iff score >= t) is chosen
    on a random half of each set, maximizing the same bound; ε_lo is computed on the other half
    with one-sided ``α/2`` Clopper–Pearson upper bounds of FPR and FNR.

    ``gdp=True`` (claims that are μ-GDP, e.g. composed Gaussian mechanisms) also bounds μ as
    Nasr et al. 2023 (Sec. 5) audit DP-GD: a μ-GDP test obeys ``FNR >= Φ(Φ⁻¹(1 - FPR) - μ)``
    (Dong, Roth & Su 2022, Eq. (2.2)), so ``μ >= Φ⁻¹(1 - FPR_hi) - Φ⁻¹(FNR_hi)``. Both statements
    are then made at level ``α/2`` each (Bonferroni), so that they hold *jointly* with
    probability ``>= confidence``. The μ bound refutes the μ-GDP claim; it is not an (ε, δ)
    bound (a mechanism can be (ε(μ'), δ)-DP without being μ'-GDP), so ``epsilon_lower`` stays
    the (ε, δ) bound.
    """
    confidence, delta = check_statement(confidence, delta)
    p = np.asarray(pos_scores, dtype=np.float64).ravel()
    n = np.asarray(neg_scores, dtype=np.float64).ravel()
    if gdp and profile is not None:
        raise ValueError("epsilon_lower_bound: pass gdp=True or profile=..., not both")
    alpha = (1.0 - float(confidence)) / (2.0 if (gdp or profile is not None) else 1.0)
    if p.size < 2 or n.size < 2:
        return EpsilonBound(0.0, confidence, delta, int(p.size + n.size), "clopper_pearson_split",
                            {"reason": "need at least 2 trials of each kind"})
    rng = np.random.default_rng([seed, 0xE95])
    pp, nn = rng.permutation(p), rng.permutation(n)
    ps, pe = pp[: p.size // 2], pp[p.size // 2:]
    ns, ne = nn[: n.size // 2], nn[n.size // 2:]

    def bound_at(thr: np.ndarray, pos: np.ndarray, neg: np.ndarray):
        pos_s, neg_s = np.sort(pos), np.sort(neg)
        fn = np.searchsorted(pos_s, thr, side="left")  # pos below thr -> guessed "out"
        fp = neg.size - np.searchsorted(neg_s, thr, side="left")  # neg >= thr -> guessed "in"
        fpr_hi = clopper_pearson_upper(fp, neg.size, alpha / 2)
        fnr_hi = clopper_pearson_upper(fn, pos.size, alpha / 2)
        return _eps_from_rates(fpr_hi, fnr_hi, delta), fp, fn, fpr_hi, fnr_hi

    cand = np.unique(np.concatenate([ps, ns]))
    eps_sel, _, _, fh_s, nh_s = bound_at(cand, ps, ns)
    j = int(np.argmax(eps_sel))
    t = float(cand[j])
    eps, fp, fn, fh, nh = bound_at(np.array([t]), pe, ne)
    details = {"threshold": t, "eval_pos": int(pe.size), "eval_neg": int(ne.size), "false_pos": int(fp[0]),
               "false_neg": int(fn[0]), "fpr_upper": float(fh[0]), "fnr_upper": float(nh[0]),
               "selection_epsilon": float(eps_sel[j]), "alpha_per_statement": alpha}
    mu_lo = None
    if gdp:
        mu_sel = _mu_from_rates(fh_s, nh_s)
        jm = int(np.argmax(mu_sel))
        _, fpm, fnm, fhm, nhm = bound_at(np.array([cand[jm]]), pe, ne)
        mu_lo = float(_mu_from_rates(fhm, nhm)[0])
        details.update(mu_threshold=float(cand[jm]), mu_false_pos=int(fpm[0]), mu_false_neg=int(fnm[0]))
    viol = None
    if profile is not None:
        pe_grid, pd_grid = (np.asarray(x, dtype=np.float64).ravel() for x in profile)
        v_sel, _ = _profile_violation(fh_s, nh_s, pe_grid, pd_grid)
        jp = int(np.argmax(v_sel))
        _, fpp, fnp, fhp, nhp = bound_at(np.array([cand[jp]]), pe, ne)
        v, k = _profile_violation(fhp, nhp, pe_grid, pd_grid)
        viol = float(v[0])
        details.update(profile_threshold=float(cand[jp]), profile_false_pos=int(fpp[0]),
                       profile_false_neg=int(fnp[0]), profile_epsilon=float(pe_grid[k[0]]),
                       profile_delta=float(pd_grid[k[0]]))
    return EpsilonBound(float(eps[0]), float(confidence), float(delta), int(p.size + n.size),
                        "clopper_pearson_split", details, mu_lower=mu_lo, profile_violation=viol)


# --------------------------------------------------------------------------- one run


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """p-value of ">= v correct of r guesses" under (ε, δ)-DP (Steinke et al. 2023, Thm. 5.2).

    Their Algorithm 2 / App. D ``p_value_DP_audit``:
    ``q = 1/(1 + e^{-ε})``, ``β = P[Binom(r, q) >= v]``,
    ``α = max_{1<=i<=v} P[v - i <= Binom(r, q) < v] / i``, p = ``min(1, β + 2 m δ α)``.
    """
    if not (0 <= v <= r <= m):
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = 1.0 / (1.0 + math.exp(-float(epsilon)))
    beta = float(_st.binom.sf(v - 1, r, q))
    if v == 0:
        return min(1.0, beta)
    i = np.arange(1, v + 1)
    cums = np.cumsum(_st.binom.pmf(v - i, r, q))  # P[v - i <= B < v]
    alpha = float(np.max(cums / i))
    return min(1.0, beta + alpha * float(delta) * 2.0 * m)


def one_run_epsilon(m: int, r: int, v: int, delta: float, p: float) -> float:
    """Largest ε with p-value < ``p`` (binary search, as ``get_eps_audit`` of App. D)."""
    if one_run_p_value(m, r, v, 0.0, delta) >= p:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(m, r, v, hi, delta) < p:
        lo, hi = hi, hi + 1.0
        if hi > 100:
            return lo
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if one_run_p_value(m, r, v, mid, delta) < p:
            lo = mid
        else:
            hi = mid
    return lo


def one_run_epsilon_lower_bound(
    scores: np.ndarray,
    included: np.ndarray,
    *,
    delta: float,
    confidence: float = 0.95,
    guess_fractions: Sequence[float] = (0.02, 0.05, 0.1, 0.2),
) -> EpsilonBound:
    """One-run audit (Steinke, Nasr & Jagielski 2023, Alg. 1 + Thm. 5.2).

    Args:
        scores: ``(m,)`` statistic of each canary (higher = included).
        included: ``(m,)`` bool, each drawn independently with probability 1/2 *before*
            training (the theorem needs it).
        delta: δ of the claim.
        confidence: 1 - p.
        guess_fractions: for each fraction f, the auditor guesses "in" for the top
            ``k = round(f m / 2)`` scores and "out" for the bottom k. The bound is computed for
            each and the best is kept, with a Bonferroni correction over the distinct k (level
            ``p / #distinct k``).
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    b = np.asarray(included, dtype=bool).ravel()
    m = int(s.size)
    confidence, delta = check_statement(confidence, delta)
    # the distinct tests only: at small m several fractions give the same k (all four k = 1 at
    # m = 10), and the correction was divided over copies of one test
    ks: dict[int, float] = {}
    for f in guess_fractions:
        k = max(1, int(round(f * m / 2)))
        if 2 * k <= m:
            ks.setdefault(k, f)
    p = (1.0 - float(confidence)) / max(1, len(ks))
    order = np.argsort(-s, kind="mergesort")
    best = (0.0, None)
    for k, f in ks.items():
        top, bot = order[:k], order[m - k:]
        v = int(b[top].sum() + (~b[bot]).sum())
        e = one_run_epsilon(m, 2 * k, v, delta, p)
        if best[1] is None or e > best[0]:
            best = (e, {"guesses": 2 * k, "correct": v, "fraction": f})
    return EpsilonBound(float(best[0]), float(confidence), float(delta), m, "one_run",
                        dict(best[1] or {}, bonferroni_over=max(1, len(ks))))
