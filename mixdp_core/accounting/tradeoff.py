"""What a guarantee means for an attacker: the best membership-inference trade-off it allows.

A membership test (guess "member" or "non-member" of one private sample) has a false-positive
rate FPR and a true-positive rate TPR. A DP guarantee bounds TPR for every FPR, whatever the
attacker knows or computes (hypothesis-testing view of DP, Kairouz et al. 2015; Dong, Roth &
Su 2022, "Gaussian Differential Privacy", Def. 2.1-2.3):

* μ-GDP: ``TPR <= Φ(Φ⁻¹(FPR) + μ)`` (Dong et al., Eq. (2.2): the trade-off function
  ``G_μ(α) = Φ(Φ⁻¹(1 - α) - μ)`` of type-II error, rewritten for TPR = 1 - type-II error);
* (ε, δ)-DP: ``TPR <= min(e^ε FPR + δ, 1 - e^{-ε} (1 - δ - FPR))`` (Kairouz et al. 2015,
  Thm. 2.1; Dong et al., Eq. (2.4)), and ``TPR <= 1``.

Where a run's report has μ (the Gaussian family), the μ-GDP curve is used: it is the exact
trade-off of the composed Gaussian mechanism, tighter than any single (ε, δ) pair.
These curves are the "theory" line that audits draw beside the measured ROC of each attack;
no attack can lie above it unless the mechanism or its accounting is wrong.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
from scipy.special import ndtr, ndtri

from . import _validate as V


def gdp_max_tpr(mu: float, fpr: Any) -> np.ndarray:
    """Largest TPR any test can reach at ``fpr`` against a μ-GDP mechanism.

    Args:
        mu: μ >= 0 (``inf`` allowed: then TPR = 1 for every FPR > 0).
        fpr: false-positive rate(s) in [0, 1].

    Returns:
        ``Φ(Φ⁻¹(FPR) + μ)``, same shape as ``fpr``.
    """
    mu = V.nonnegative("mu", mu) if math.isfinite(float(mu)) else float("inf")
    a = np.clip(np.asarray(fpr, dtype=np.float64), 0.0, 1.0)
    if math.isinf(mu):
        return np.where(a > 0, 1.0, 0.0)
    with np.errstate(divide="ignore"):
        return ndtr(ndtri(a) + mu)


def approx_dp_max_tpr(epsilon: float, delta: float, fpr: Any) -> np.ndarray:
    """Largest TPR any test can reach at ``fpr`` against an (ε, δ)-DP mechanism.

    Args:
        epsilon: ε >= 0.
        delta: δ in [0, 1).
        fpr: false-positive rate(s) in [0, 1].

    Returns:
        ``min(e^ε FPR + δ, 1 - e^{-ε}(1 - δ - FPR), 1)``, same shape as ``fpr``.
    """
    e = V.nonnegative("epsilon", epsilon)
    d = V.nonnegative("delta", delta)
    a = np.clip(np.asarray(fpr, dtype=np.float64), 0.0, 1.0)
    upper = np.minimum(math.exp(min(e, 700.0)) * a + d, 1.0 - math.exp(-e) * (1.0 - d - a))
    return np.clip(upper, 0.0, 1.0)


def max_tpr(report: Any, fpr: Any) -> np.ndarray:
    """The guarantee's bound on TPR at ``fpr``: μ-GDP where the report has μ, else (ε, δ).

    Args:
        report: a :class:`~mixdp_core.accounting.PrivacyReport` (or anything with
            ``epsilon``, ``delta`` and optionally ``mu``); ``None`` means no guarantee
            (non-private): TPR = 1.
        fpr: false-positive rate(s).
    """
    a = np.asarray(fpr, dtype=np.float64)
    if report is None:
        return np.ones_like(a)
    mu: Optional[float] = getattr(report, "mu", None)
    if mu is not None:
        return gdp_max_tpr(mu, a)
    return approx_dp_max_tpr(report.epsilon, report.delta, a)


def tradeoff_sentence(report: Any, fpr: float = 0.01) -> str:
    """One sentence a class can read: what the guarantee means for an attacker at ``fpr``."""
    if report is None:
        return "Without a privacy guarantee, nothing bounds what an attacker can identify."
    tpr = float(max_tpr(report, fpr))
    return (f"At {100 * fpr:g} % false positives, no attacker can identify more than "
            f"{100 * tpr:.1f} % of the members (random guessing: {100 * fpr:g} %).")
