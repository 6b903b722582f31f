"""Datasets (:data:`DATASETS`), image sources and public/private/test splits."""

from .base import ArrayImageSource, CorruptImageError, FileImageSource, ImageSource, LoadedDataset
from .datasets import DATASETS, load_dataset, load_feature_file, parse_spec
from .paths import data_root, resolve_under
from .splits import Split, SplitSpec, make_split, minority_classes

__all__ = [
    "ArrayImageSource", "CorruptImageError", "DATASETS", "FileImageSource", "ImageSource",
    "LoadedDataset", "Split", "SplitSpec", "data_root", "load_dataset", "load_feature_file",
    "make_split", "minority_classes", "parse_spec", "resolve_under",
]
