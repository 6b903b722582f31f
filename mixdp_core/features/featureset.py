"""Re-export of :class:`mixdp_core.featureset.FeatureSet` (its old import path)."""

from ..featureset import FeatureSet

__all__ = ["FeatureSet"]
