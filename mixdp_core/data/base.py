"""Dataset sources: what a dataset loader returns before encoding."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from ..errors import CorruptImageError, DataError  # noqa: F401  (CorruptImageError re-exported)


class ImageSource(Protocol):
    """A sized, indexable collection of labelled images.

    ``source[i]`` returns ``(PIL.Image.Image in RGB or L mode, int label)``; a file that cannot
    be decoded raises :class:`CorruptImageError` naming the file. ``labels`` gives all labels
    without decoding any image.
    """

    labels: np.ndarray

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> tuple[Any, int]: ...


@dataclass
class ArrayImageSource:
    """Images held in memory as an ``(N, H, W)`` or ``(N, H, W, 3)`` array.

    Args:
        images: pixel array; ``value_range`` gives its (min, max) for conversion to 8-bit.
        labels: ``(N,)`` int labels.
        value_range: e.g. ``(0, 16)`` for scikit-learn digits, ``(0, 255)`` for uint8.
    """

    images: np.ndarray
    labels: np.ndarray
    value_range: tuple[float, float] = (0.0, 255.0)

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def __getitem__(self, i: int):
        from PIL import Image

        lo, hi = self.value_range
        arr = np.clip((self.images[i] - lo) * (255.0 / (hi - lo)), 0, 255).astype(np.uint8)
        return Image.fromarray(arr), int(self.labels[i])


@dataclass
class FileImageSource:
    """Images stored as files. ``paths[i]`` has label ``labels[i]``."""

    paths: Sequence[Path]
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        from PIL import Image, UnidentifiedImageError

        path = self.paths[i]
        try:
            with Image.open(path) as im:
                im.load()
                img = im.convert("RGB")
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
            raise CorruptImageError(path, str(e)) from None
        return img, int(self.labels[i])


@dataclass
class LoadedDataset:
    """A dataset ready for encoding.

    Attributes:
        name: the dataset spec it came from (e.g. ``"digits"``, ``"image_folder:/x"``).
        train, test: :class:`ImageSource` objects (``None`` for feature datasets).
        class_names: the ``C`` class names.
        features: for ``features:<path>`` datasets, the pre-computed
            :class:`~mixdp_core.features.featureset.FeatureSet` (no encoder is run).
        raw_arrays: for small array datasets (digits), ``(X_train, X_test)`` pixel arrays so
            the ``pixels`` encoder can skip the image round trip.
        cache_key: everything that identifies the content (root, split seed, ...).
    """

    name: str
    class_names: list[str]
    train: Any = None
    test: Any = None
    features: Any = None
    raw_arrays: tuple[np.ndarray, np.ndarray] | None = None
    cache_key: dict[str, Any] = field(default_factory=dict)
