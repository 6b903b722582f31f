"""Raw pixels as features: flatten, then standardize WITHOUT any dataset statistic.

DP note. Standardizing with the training set's per-pixel mean and std would make every
feature vector depend on all private images (a data-dependent preprocessing step whose privacy
cost nobody accounts for). This encoder therefore uses only per-image quantities or fixed
constants, so the feature vector of image ``i`` is a function of image ``i`` alone and the
add/remove-one-sample neighbouring relation of the downstream DP method is preserved at no
privacy cost:

* ``standardize="per_image"`` (default): ``z = (x - mean(x)) / std(x)`` over the pixels of
  that one image (``z = 0`` for a constant image). Scale-free, so it needs no value range,
  and every non-constant image gets ``||z||_2 = sqrt(D)``.
* ``standardize="range"``: the fixed affine map of the known value range ``[lo, hi]`` onto
  ``[-1, 1]``: ``z = 2 (x - lo) / (hi - lo) - 1``.

Images from an :class:`~mixdp_core.data.base.ImageSource` are 8-bit (range ``(0, 255)``);
grayscale (``L``) images give ``H*W`` features, colour ones ``H*W*3``.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, ClassVar

import numpy as np

from ..errors import ConfigError, DataError
from .base import ENCODERS, Encoder, integer_option

_MODES = ("per_image", "range")


def standardize_per_image(X: np.ndarray) -> np.ndarray:
    """Row-wise ``(x - mean) / std`` of a ``(N, D)`` array; constant rows map to 0."""
    X = np.asarray(X, dtype=np.float64)
    mu = X.mean(axis=1, keepdims=True)
    sd = X.std(axis=1, keepdims=True)
    Z = np.divide(X - mu, sd, out=np.zeros_like(X), where=sd > 0)
    return Z.astype(np.float32)


def check_value_range(value: Any) -> tuple[float, float]:
    """``value`` as ``(lo, hi)``: two finite numbers with ``lo < hi`` (and a finite ``hi - lo``),
    given as a pair or as text ``"lo,hi"`` / ``"[lo, hi]"`` / ``"(lo, hi)"`` (what a CLI
    ``--encoder-arg value_range=0,16`` brings).

    Raises:
        ConfigError: field ``value_range``, one line with the allowed form.
    """
    allowed = "two finite numbers [lo, hi] with lo < hi, e.g. [0, 16]"
    items = value
    if isinstance(value, str):
        items = [t for t in value.strip().strip("()[]").split(",")]
    try:
        if isinstance(items, (str, bytes, dict)) or len(items) != 2:
            raise TypeError
        if any(isinstance(v, (bool, np.bool_)) for v in items):
            raise TypeError
        lo, hi = (float(v) for v in items)
    except (TypeError, ValueError):
        raise ConfigError("value_range", allowed=allowed, got=value) from None
    if not (np.isfinite(lo) and np.isfinite(hi) and np.isfinite(hi - lo) and lo < hi):
        raise ConfigError("value_range", allowed=allowed, got=value)
    return lo, hi


#: Largest side of a resized pixel image: 128 x 128 x 3 = 49,152 features, under the
#: feature-dimension limit of the methods (MIXDP_MAX_FEATURE_DIM).
MAX_PIXEL_SIDE = 128


@ENCODERS.register("pixels")
class PixelsEncoder(Encoder):
    """Flattened pixels, standardized per image or by a fixed value range (no data statistics).

    Args:
        pretrained: ignored (no weights); accepted for the common constructor signature.
        device, batch_size: accepted for the common signature (the work is numpy).
        standardize: ``"per_image"`` (default) or ``"range"``; see the module docstring.
        value_range: ``(lo, hi)`` of arrays given to :meth:`encode_arrays`: in ``"range"``
            mode the affine map, and when ``image_size`` resizes an array the 8-bit
            quantization and clipping (``None`` = the data set's declared range, else
            ``(0, 255)`` for uint8 arrays; required otherwise). Two finite numbers, lo < hi.
        image_size: resize every image to ``image_size`` x ``image_size`` pixels
            (bilinear) before flattening; ``None`` keeps the native size, which must then be
            the same for all images.
    """

    name: ClassVar[str] = "pixels"
    offline: ClassVar[bool] = True
    description: ClassVar[str] = "Raw pixels, flattened; per-image standardization (no data statistics)"

    def __init__(
        self,
        pretrained: str | None = None,
        device: str | None = None,
        batch_size: int = 256,
        *,
        standardize: str = "per_image",
        value_range: tuple[float, float] | None = None,
        image_size: int | None = None,
    ):
        super().__init__(pretrained=None, device=device, batch_size=batch_size)
        if standardize not in _MODES:
            raise ConfigError("standardize", f"must be one of {', '.join(_MODES)}, got {standardize!r}")
        if value_range is not None:
            value_range = check_value_range(value_range)
        if image_size is not None:
            image_size = integer_option("image_size", image_size, f"an integer in [1, {MAX_PIXEL_SIDE}] or None")
        if image_size is not None and not 1 <= image_size <= MAX_PIXEL_SIDE:
            raise ConfigError("image_size", f"must be an integer in [1, {MAX_PIXEL_SIDE}] or None, got {image_size} "
                                            f"(features are side x side x channels numbers per image)")
        self.standardize = standardize
        self.value_range = value_range
        self.image_size = None if image_size is None else int(image_size)

    @property
    def weights_tag(self) -> str:
        return "none"

    def preprocess_tag(self) -> str:
        """The preprocessing in the cache key. ``value_range`` enters wherever it changes the
        numbers: always in ``"range"`` mode, and in ``"per_image"`` mode when ``image_size``
        is set (a resized array is quantized to 8 bits and clipped by that range). Without a
        resize, per-image standardization is scale-free and the range is left out."""
        size = "native" if self.image_size is None else f"{self.image_size}px"
        if self.standardize == "range":
            vr = f"-{self.value_range}"
        elif self.value_range is not None and self.image_size is not None:
            vr = f"-vr{self.value_range}"
        else:
            vr = ""
        return f"flatten-{size}-{self.standardize}{vr}"

    def _scale(self, X: np.ndarray, value_range: tuple[float, float]) -> np.ndarray:
        if self.standardize == "per_image":
            return standardize_per_image(X)
        lo, hi = value_range
        return (2.0 * (np.asarray(X, dtype=np.float64) - lo) / (hi - lo) - 1.0).astype(np.float32)

    def encode_arrays(self, X: np.ndarray, value_range: tuple[float, float] | None = None, *,
                      source_range: tuple[float, float] | None = None) -> np.ndarray:
        """Encode an in-memory ``(N, ...)`` pixel array -> ``(N, prod(...))`` float32.

        Args:
            X: pixels, e.g. ``(N, 8, 8)`` digits in 0..16 or ``(N, 32, 32, 3)`` uint8.
            value_range: overrides the constructor's ``value_range``.
            source_range: the range the data set declares for ``X`` (``get_features`` passes
                the ArrayImageSource's, digits ``(0, 16)``); used when neither
                ``value_range`` nor the constructor gives one. Never estimated from ``X``.

        Raises:
            DataError: ``X`` is not ``(N, ...)``, not finite, or has more feature columns
                than :func:`~mixdp_core.featureset.max_feature_dim` (before any work on it).
            ConfigError: ``value_range`` needed and not known.
        """
        from ..featureset import check_feature_dim

        X = np.asarray(X)
        if X.ndim < 2:
            raise DataError(f"pixel array must have shape (N, ...), got {X.shape}")
        if value_range is not None:
            value_range = check_value_range(value_range)
        if value_range is None and self.value_range is None and source_range is not None:
            value_range = check_value_range(source_range)
        resize = self.image_size is not None and X.ndim >= 3 and X.shape[1:3] != (self.image_size,) * 2
        if resize:
            chans = int(np.prod(X.shape[3:])) if X.ndim > 3 else 1
            check_feature_dim(self.image_size**2 * (1 if chans == 1 else 3), "pixels")
        else:
            check_feature_dim(int(np.prod(X.shape[1:])), "pixels")
        if not np.all(np.isfinite(X)):
            raise DataError("pixel array contains NaN or infinite values")
        if resize:
            from ..data.base import ArrayImageSource

            vr = value_range or self.value_range or ((0.0, 255.0) if X.dtype == np.uint8 else None)
            if vr is None:
                raise ConfigError("value_range", "must be given to resize a non-uint8 array (image_size set)")
            feats, _ = self.encode_images(ArrayImageSource(X, np.zeros(len(X), dtype=np.int64), value_range=vr))
            return feats
        flat = X.reshape(len(X), -1)
        vr = value_range or self.value_range
        if self.standardize == "range" and vr is None:
            if X.dtype != np.uint8:
                raise ConfigError(
                    "value_range", f"must be given for {X.dtype} arrays when standardize='range' "
                    f"(e.g. (0, 16) for digits); it is not estimated from the data (DP)"
                )
            vr = (0.0, 255.0)
        return self._scale(flat, vr or (0.0, 255.0))

    def _to_array(self, img, mode: str) -> np.ndarray:
        from PIL import Image

        if img.mode != mode:
            img = img.convert(mode)
        if self.image_size is not None and img.size != (self.image_size, self.image_size):
            img = img.resize((self.image_size, self.image_size), Image.BILINEAR)
        return np.asarray(img, dtype=np.uint8)

    def encode_images(
        self,
        source: Any,
        *,
        progress: Callable[[int, int], None] | None = None,
        skip_corrupt: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Flatten + standardize every image of ``source`` (8-bit, range ``(0, 255)``).

        The first decodable image fixes the colour mode (``L`` or ``RGB``; others are
        converted) and, when ``image_size`` is None, the size; an image of another size then
        raises :class:`~mixdp_core.errors.DataError` suggesting ``image_size``. Its feature
        count is checked against :func:`~mixdp_core.featureset.max_feature_dim` before the
        next image is decoded (DataError naming ``pixels``).
        """
        from ..errors import CorruptImageError
        from ..featureset import check_feature_dim

        n = len(source)
        rows: list[np.ndarray] = []
        kept: list[int] = []
        mode: str | None = None
        shape: tuple[int, ...] | None = None
        for i in range(n):
            if progress is not None and i and i % self.batch_size == 0:
                progress(i, n)
            try:
                img, _ = source[i]
            except CorruptImageError as e:
                if not skip_corrupt:
                    raise
                warnings.warn(f"skipping corrupt image {e.path!r} (index {i}): {e}", UserWarning, stacklevel=2)
                continue
            if mode is None:
                mode = "L" if img.mode in ("L", "1", "I", "F", "I;16") else "RGB"
            arr = self._to_array(img, mode)
            if shape is None:
                shape = arr.shape
                # the first image fixes the dimension: refuse it now, not after decoding every
                # image (six 3000 x 3000 PNGs held 3.2 GB before the FeatureSet refused them)
                check_feature_dim(arr.size, "pixels")
            elif arr.shape != shape:
                raise DataError(
                    f"image {i} has size {arr.shape} but the first image has {shape}; the pixels "
                    f"encoder needs equal sizes: set image_size (e.g. image_size=32) to resize"
                )
            rows.append(arr.reshape(-1))
            kept.append(i)
        if progress is not None:
            progress(n, n)
        if not rows:
            dim = 0 if self.image_size is None else self.image_size**2 * (1 if mode == "L" else 3)
            return np.zeros((0, dim), dtype=np.float32), np.zeros(0, dtype=np.int64)
        X = np.stack(rows).astype(np.float32)
        return self._scale(X, (0.0, 255.0)), np.asarray(kept, dtype=np.int64)
