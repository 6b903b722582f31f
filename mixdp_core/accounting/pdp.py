r"""Per-instance DP of full-batch NoisyGD / AdaMix (Wang 2019; AdaMix App. C, Prop. 14).

Per-instance DP (Wang 2019, "Per-instance differential privacy") measures the privacy loss
of one concrete sample z_i in one concrete dataset. For a composition of T Gaussian steps
with noise σ·τ_t at step t, sample i's contribution at step t has norm
``r_{i,t} · τ_t`` with r_{i,t} = ‖contribution_{i,t}‖/τ_t ≤ 1 after clipping, and the run is
μ_i-per-instance-GDP with (AdaMix Prop. 14; the composition of pGDP follows from GDP
composition restricted to {D, D ∪ {z_i}})

.. math:: μ_i = \frac{1}{σ}\sqrt{\sum_t r_{i,t}^2},

hence (ε_i, δ)-pDP with ε_i = ``gaussian_epsilon(μ_i, δ)``. A sample clipped at every step
has r_{i,t} = 1, μ_i = √T/σ and ε_i equals the run's ε; samples whose gradients are below
the clip norm get a smaller ε_i. pDP values are data-dependent diagnostics, not a DP
guarantee: releasing them is not private.
"""

from __future__ import annotations

import numpy as np

from . import _validate as V
from .gaussian import gaussian_epsilon


def pdp_ratio_sq(contribution_norms: np.ndarray, *, clip_norm: float) -> np.ndarray:
    """r² for one step: ``(min(‖g_i‖, τ)/τ)²`` for per-sample norms ``‖g_i‖`` (vectorized).

    Accumulate it over steps (``sum_sq += pdp_ratio_sq(norms_t, clip_norm=tau_t)``) and pass
    the sum to :func:`pdp_epsilon`.
    """
    n = V.array_nonnegative("contribution_norms", contribution_norms)
    tau = V.positive("clip_norm", clip_norm)
    r = np.minimum(n / tau, 1.0)
    return r * r


def pdp_epsilon(sum_sq_ratios: np.ndarray, *, noise_multiplier: float, delta: float) -> np.ndarray:
    """Per-instance ε_i at δ from Σ_t r_{i,t}² (AdaMix Prop. 14), vectorized.

    Args:
        sum_sq_ratios: array of Σ_t r_{i,t}² ≥ 0, any shape (one entry per sample).
        noise_multiplier: σ > 0 (noise std / clip norm, the same at every step).
        delta: δ in (0, 1).

    Returns:
        ε_i ≥ 0, same shape as ``sum_sq_ratios`` (10⁵ samples take ~0.2 s).
    """
    s = V.array_nonnegative("sum_sq_ratios", sum_sq_ratios)
    sig = V.positive("noise_multiplier", noise_multiplier)
    d = V.open_unit("delta", delta)
    mu = np.sqrt(s) / sig
    return np.asarray(gaussian_epsilon(mu, delta=d), dtype=np.float64).reshape(s.shape)
