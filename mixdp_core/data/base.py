"""Dataset sources: what a dataset loader returns before encoding."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from ..errors import ConfigError, CorruptImageError, DataError  # noqa: F401  (CorruptImageError re-exported)


class ImageSource(Protocol):
    """A sized, indexable collection of labelled images.

    ``source[i]`` returns ``(PIL.Image.Image in RGB or L mode, int label)``; a file that cannot
    be decoded raises :class:`CorruptImageError` naming the file. ``labels`` gives all labels
    without decoding any image.
    """

    labels: np.ndarray

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> tuple[Any, int]: ...


#: Largest image (width x height) decoded (``$MIXDP_MAX_IMAGE_PIXELS`` overrides): 40
#: megapixels decode to 120 MB of RGB; encoders resize every image to at most 1024 px anyway.
DEFAULT_MAX_IMAGE_PIXELS = 40_000_000


def max_image_pixels() -> int:
    from .._io import env_limit

    return int(env_limit("MIXDP_MAX_IMAGE_PIXELS", DEFAULT_MAX_IMAGE_PIXELS))


def check_image_pixels(path: Any, width: int, height: int) -> None:
    """Refuse, from the header, an image larger than :func:`max_image_pixels`."""
    lim = max_image_pixels()
    if int(width) * int(height) > lim:
        raise DataError(f"image: {str(path)!r} is {width} x {height} pixels ({width * height / 1e6:.0f} megapixels), "
                        f"above the limit of {lim / 1e6:.0f} megapixels (MIXDP_MAX_IMAGE_PIXELS); resize it")


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
    """Images stored as files. ``paths[i]`` has label ``labels[i]``.

    With ``root`` set, each path is resolved (symlinks followed) and must lie inside
    ``root`` *before* it is opened; one that does not raises ConfigError(``root``).
    """

    paths: Sequence[Path]
    labels: np.ndarray
    root: Path | None = None

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        path = self.paths[i]
        if self.root is not None:
            import os

            from ..errors import ConfigError

            real = Path(os.path.realpath(path))
            root = Path(self.root)
            if real != root and root not in real.parents:
                raise ConfigError("root", f"{str(path)!r} resolves to {str(real)!r}, outside the dataset "
                                          f"folder {str(root)!r}")
            open_path = real
        else:
            open_path = path
        return decode_image_file(path, open_path), int(self.labels[i])


#: The image formats decoded (Pillow's names): rasters only, never a vector format handed to an
#: external interpreter (EPS / PostScript via Ghostscript).
RASTER_FORMATS = ("JPEG", "PNG", "BMP", "GIF", "WEBP", "TIFF", "PPM", "MPO")


def _to_rgb(im: Any) -> Any:
    """RGB with 8 bits per channel. 16-bit and float images are rescaled from their own range
    (``convert("RGB")`` clipped them at 255: a 16-bit PNG came out 99.6 % white)."""
    from PIL import Image

    if im.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        a = np.asarray(im, dtype=np.float64)
        hi = 65535.0 if im.mode.startswith("I;16") else max(float(np.nanmax(a)) if a.size else 1.0, 1.0)
        a = np.clip(np.nan_to_num(a) / hi * 255.0, 0, 255).astype(np.uint8)
        im = Image.fromarray(a, mode="L")
    return im.convert("RGB")


def decode_image_file(path: Any, open_path: Any = None):
    """The image file ``path`` (read from ``open_path`` when given) decoded to an RGB PIL image.

    The pixel count is checked from the header against :func:`max_image_pixels` before any
    pixel is decoded; every image source that reads files (folders, torchvision sets) decodes
    through here, so the limit and the corrupt-file contract hold for all of them.

    Raises:
        DataError: the image is above the pixel limit (one line naming the file).
        CorruptImageError: the file cannot be decoded (one line naming the file).
    """
    import warnings

    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with warnings.catch_warnings():  # the size is checked here, against our own limit
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            # raster formats only: by default Pillow opens whatever it recognises, and an EPS named
            # photo.jpg went to Ghostscript (an external interpreter, on an uploaded file)
            Image.init()  # every plugin registered, so the list below names the ones this Pillow has
            im = Image.open(path if open_path is None else open_path,
                            formats=[f for f in RASTER_FORMATS if f in Image.OPEN])  # reads the header only
        with im:
            check_image_pixels(path, *im.size)  # before decoding: a 13000 x 13000 PNG took 1.35 GB
            im.load()
            im = ImageOps.exif_transpose(im)  # upright as viewers show it (a phone photo was encoded sideways)
            return _to_rgb(im)
    except (DataError, ConfigError):  # the size check's own one-line errors (both are ValueErrors; a bad
        raise                          # MIXDP_MAX_IMAGE_PIXELS made every image "corrupt")
    except Image.DecompressionBombError as e:  # above Pillow's own limit, raised at open
        raise DataError(f"image: {str(path)!r} is too large to decode safely ({e})") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise CorruptImageError(path, str(e)) from None


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
