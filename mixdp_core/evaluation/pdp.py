"""Per-instance DP (pDP) losses of NoisyGD-type methods (AdaMix paper, App. C, Prop. 14).

For a full-batch noisy gradient method with noise ``N(0, σ² τ_t² I)`` and a per-sample
gradient clipped to ``τ_t`` (sensitivity ``τ_t`` under add/remove-one-sample), the step-t
contribution of sample ``i`` has norm ``r_{i,t} τ_t`` with ratio ``r_{i,t} ∈ [0, 1]`` (after
clipping and projection). Composing the T Gaussian steps gives sample ``i`` a per-instance
Gaussian-DP parameter ``μ_i = sqrt(Σ_t r_{i,t}²) / σ``, turned into ``ε_i`` at the run's δ
with the Gaussian-mechanism formula. The method provides ``Σ_t r_{i,t}²``
(``pdp_sq_ratio_sum_``); the conversion is :func:`mixdp_core.accounting.pdp_epsilon`.

pDP values depend on the private data and must not be released without further care; they
are shown only to the data owner.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Quantiles reported in run metrics (``pdp_epsilon_q05`` ... ).
PDP_QUANTILES: dict[str, float] = {
    "min": 0.0,
    "q05": 0.05,
    "q25": 0.25,
    "median": 0.5,
    "q75": 0.75,
    "q95": 0.95,
    "max": 1.0,
}


def per_instance_epsilon(model: Any, *, delta: float) -> np.ndarray | None:
    """ε_i of every private sample for a fitted model, or ``None`` if it does not apply.

    Args:
        model: a fitted :class:`~mixdp_core.methods.base.Method` with ``pdp_sq_ratio_sum_``
            and ``noise_multiplier_``.
        delta: δ of the (ε_i, δ)-pDP statements (the run's target δ).

    Returns:
        ``(N_private,)`` array of ε_i in the order of ``split.X_private``.
    """
    sq = getattr(model, "pdp_sq_ratio_sum_", None)
    sigma = getattr(model, "noise_multiplier_", None)
    if sq is None or sigma is None:
        return None
    from ..accounting import pdp_epsilon

    return np.asarray(pdp_epsilon(np.asarray(sq, dtype=np.float64), noise_multiplier=float(sigma), delta=float(delta)))


def pdp_summary(eps_i: np.ndarray | None) -> dict[str, float | None]:
    """Quantiles and mean of ε_i as ``{"pdp_epsilon_min": ..., "pdp_epsilon_mean": ...}``."""
    keys = [f"pdp_epsilon_{k}" for k in PDP_QUANTILES] + ["pdp_epsilon_mean"]
    if eps_i is None or len(eps_i) == 0:
        return {k: None for k in keys}
    e = np.asarray(eps_i, dtype=np.float64)
    out: dict[str, float | None] = {
        f"pdp_epsilon_{k}": float(np.quantile(e, q)) for k, q in PDP_QUANTILES.items()
    }
    out["pdp_epsilon_mean"] = float(e.mean())
    return out
