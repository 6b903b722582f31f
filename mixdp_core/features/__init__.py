"""Feature matrices (:class:`FeatureSet`) and their on-disk cache."""

from .cache import default_cache_dir, get_features, load_cached, save_features
from ..featureset import FeatureSet

__all__ = ["FeatureSet", "default_cache_dir", "get_features", "load_cached", "save_features"]
