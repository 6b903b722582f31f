"""DP prototypes family (Wahdany et al., "Beyond the Mean: DP Prototypes") and its baselines.

Importing this package registers in :data:`mixdp_core.methods.METHODS`:

* ``dppl_mean`` — per-class CoinPress means (ρ-zCDP), :mod:`.dppl_mean`;
* ``dppl_public`` — exponential mechanism over a public pool (pure ε-DP), :mod:`.dppl_public`;
* ``dppl_public_topk`` — joint EM for K public prototypes per class, :mod:`.dppl_public_topk`;
* ``dp_linear_probe``, ``dpsgd_global_adapt``, ``dp_ls`` — baselines, :mod:`.baselines`.
"""

from .baselines import DPLS, DPLinearProbe, DPSGDGlobalAdapt
from .dppl_mean import DPPLMean, coinpress_mean
from .dppl_public import DPPLPublic
from .dppl_public_topk import DPPLPublicTopK
from .utilities import public_utilities

__all__ = [
    "DPLS",
    "DPLinearProbe",
    "DPPLMean",
    "DPPLPublic",
    "DPPLPublicTopK",
    "DPSGDGlobalAdapt",
    "coinpress_mean",
    "public_utilities",
]
