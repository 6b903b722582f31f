"""Shared machinery of the neural encoders: decoding, preprocessing, batching, inference.

Pipeline of :meth:`TorchImageEncoder.encode_images` (in the calling process, no DataLoader
workers, so a corrupt file raises :class:`~mixdp_core.errors.CorruptImageError` naming it):

1. ``source[i]`` decodes image ``i`` (PIL, RGB or L); with ``decode_ahead=True`` one
   background thread decodes and resizes the next batch (steps 1-2) while the network runs on
   the current one;
2. :meth:`TorchImageEncoder.preprocess_image`: convert to RGB, centre-crop the largest square,
   resize to ``image_size`` x ``image_size`` pixels with the encoder's interpolation
   (PIL; per image, so a feature never depends on which other images share its batch);
3. a batch of ``uint8`` ``(B, S, S, 3)`` arrays becomes a float tensor
   ``(x / 255 - mean) / std`` in channels-last memory layout;
4. the model runs under :func:`torch.inference_mode`, in fp16 on CUDA, fp32 elsewhere, and
   returns ``(B, D)`` float32 features. Steps 3-4 are :meth:`TorchImageEncoder.forward_uint8`,
   which a subclass may route to another runtime (EfficientNet-Lite0: ONNX Runtime).

Random-weight models (``pretrained=None``) are initialized under a fixed seed (0) in a forked
RNG, so they are reproducible and do not disturb the caller's random state.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from abc import abstractmethod
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from ..errors import ConfigError, MixDPError
from .._io import usable_cores
from .base import Encoder, integer_option, select_device

#: ImageNet RGB statistics on the [0, 1] scale (torchvision / timm convention).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: Seed used to initialize random-weight models (``pretrained=None``).
RANDOM_INIT_SEED = 0


def default_num_threads() -> int:
    """Half the CPU cores usable by this process, at least 1.

    Measured with ``benchmarks/extract.py`` on a 2-core machine shared with other jobs:
    EfficientNet-Lite0 at 128 px ran at 26 images/s with 1 thread vs 5 images/s with 2
    (oversubscription: both cores were already busy), so one thread per two cores is the
    safe default; pass ``num_threads`` explicitly on an idle many-core machine.
    """
    return max(1, usable_cores() // 2)


def _pil_resample(name: str):
    from PIL import Image

    return {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}[name]


#: Largest input side a network encoder takes: 1024 px is 4.6x the largest resolution any
#: shipped network was trained at; an image_size of 100,000 held 9.4 GB before this bound.
MAX_IMAGE_SIZE = 1024


class TorchImageEncoder(Encoder):
    """Base class of the PyTorch encoders.

    Subclasses set the class attributes ``default_weights``, ``feature_dim``,
    ``default_image_size``, ``mean``, ``std``, ``interpolation`` and implement
    :meth:`_build_model` (returning a module mapping a normalized ``(B, 3, S, S)`` batch to
    ``(B, D)`` features) and :meth:`_weights_known`.

    Args:
        pretrained: weights tag; ``"default"`` = ``default_weights``; ``None`` = random
            initialization (seeded, for tests); a path to an existing file loads that file.
        device: ``None`` = auto (cuda -> mps -> cpu).
        batch_size: images per forward pass (>= 1).
        image_size: side in pixels of the square network input (>= 16). Small images
            (CIFAR 32 px, digits 8 px) are upscaled to it; larger means slower (cost grows about
            quadratically) and usually more accurate features.
        num_threads: torch intra-op threads while encoding; ``"auto"`` (default) =
            :func:`default_num_threads` (half the usable cores, at least 1); ``None`` = leave
            torch's global setting.
        channels_last: run convolutions in channels-last memory layout (faster on CPU for
            convnets).
        decode_ahead: decode and resize the next batch in one background thread while the
            network runs on the current one (same features, same order, same corrupt-file
            handling). Pays where decoding is a large share of the time and a core is free:
            1.29x on 1600 x 1200 px JPEGs with a 1-thread network; 0.82-1.29x on CIFAR-10
            JPEGs, where decode + resize is ~15-20 % of the time
            (docs/results/extract_backends.md).
    """

    #: What a user weights file must contain (shown when loading one fails).
    _weights_format: ClassVar[str] = "expected a checkpoint saved in the format the encoder's library loads"
    default_weights: ClassVar[str] = ""
    feature_dim: ClassVar[int] = 0
    default_image_size: ClassVar[int] = 224
    mean: ClassVar[tuple[float, float, float]] = IMAGENET_MEAN
    std: ClassVar[tuple[float, float, float]] = IMAGENET_STD
    interpolation: ClassVar[str] = "bilinear"

    def __init__(
        self,
        pretrained: str | None = "default",
        device: str | None = None,
        batch_size: int = 64,
        *,
        image_size: int | None = None,
        num_threads: int | str | None = "auto",
        channels_last: bool = True,
        decode_ahead: bool = False,
    ):
        if pretrained == "default":
            pretrained = self.default_weights
        super().__init__(pretrained=pretrained, device=device, batch_size=batch_size)
        if self.batch_size < 1:
            raise ConfigError("batch_size", f"must be >= 1, got {batch_size}")
        self.image_size = integer_option("image_size", image_size if image_size is not None else self.default_image_size,
                                         f"an integer in [16, {MAX_IMAGE_SIZE}] pixels")
        if not 16 <= self.image_size <= MAX_IMAGE_SIZE:
            raise ConfigError("image_size", f"must be an integer in [16, {MAX_IMAGE_SIZE}] pixels, got {image_size} "
                                            "(one 3 x size x size float image and its activations are held per batch row)")
        if num_threads not in (None, "auto"):
            try:
                ok = int(num_threads) >= 1
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ConfigError("num_threads", f"must be an integer >= 1, 'auto' or None, got {num_threads!r}")
        self.num_threads = default_num_threads() if num_threads == "auto" else (
            None if num_threads is None else int(num_threads))
        self.channels_last = bool(channels_last)
        self.decode_ahead = bool(decode_ahead)
        if (
            pretrained is not None
            and not os.path.isfile(str(pretrained))
            and not self._weights_known(str(pretrained))
        ):
            raise ConfigError(
                "pretrained", f"unknown weights {pretrained!r} for encoder {self.name!r}; "
                f"{self._weights_help()}"
            )
        self._model = None
        self._device_str: str | None = None

    # ------------------------------------------------------------------ subclass hooks
    @abstractmethod
    def _build_model(self):
        """Return the ``torch.nn.Module`` (weights loaded, eval mode, on CPU)."""

    def _weights_known(self, tag: str) -> bool:
        """Whether ``tag`` names weights this encoder can load."""
        return tag == self.default_weights

    def _weights_help(self) -> str:
        return f"use {self.default_weights!r}, None (random init) or a path to a weights file"

    # ------------------------------------------------------------------ identity
    @property
    def weights_tag(self) -> str:
        """What identifies the weights in the feature cache key: a named tag, the random-init
        seed, or for a weights file ``file:<path>:sha256=<16 hex digits of its bytes>``.

        A file is keyed on its content, not its size and mtime: weights rewritten in place
        with the same size and the old mtime put back gave cached features of the old weights.
        The digest is memoized per stat identity (:func:`._onnx.cached_file_digest`)."""
        if self.pretrained is None:
            return f"random(seed={RANDOM_INIT_SEED})"
        p = str(self.pretrained)
        if os.path.isfile(p):
            from ._onnx import cached_file_digest

            return f"file:{os.path.abspath(p)}:sha256={cached_file_digest(p)}"
        return p

    def preprocess_tag(self) -> str:
        mean = ",".join(f"{m:.4f}" for m in self.mean)
        std = ",".join(f"{s:.4f}" for s in self.std)
        return f"centercrop-{self.interpolation}-{self.image_size}px-mean[{mean}]-std[{std}]"

    def cache_key(self) -> dict[str, Any]:
        key = super().cache_key()
        key["image_size"] = self.image_size
        return key

    # ------------------------------------------------------------------ model
    @property
    def model(self):
        """The loaded module (built on first use, moved to the device, fp16 on CUDA)."""
        if self._model is None:
            import torch

            if self.pretrained is None:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(RANDOM_INIT_SEED)
                    model = self._build_model()
            elif os.path.isfile(str(self.pretrained)):
                try:
                    model = self._build_model()
                except MixDPError:
                    raise
                except Exception as e:  # wrong format / architecture: one line naming the field
                    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
                    raise ConfigError(
                        "pretrained", f"weights file {str(self.pretrained)!r} cannot be loaded into "
                        f"{self.name} ({type(e).__name__}: {first}); {self._weights_format}"
                    ) from None
            else:
                model = self._build_model()
            model.eval()
            dev = self._model_device()
            model = model.to(dev)
            if dev == "cuda":
                model = model.half()
            if self.channels_last:
                model = model.to(memory_format=torch.channels_last)
            self._device_str = dev
            self._model = model
        return self._model

    def _model_device(self) -> str:
        """Where :attr:`model` lives: the selected device (``device``, else cuda -> mps -> cpu).
        Subclasses whose model only feeds a CPU runtime override it."""
        return select_device(self.device)

    @property
    def dtype(self):
        import torch

        _ = self.model
        return torch.float16 if self._device_str == "cuda" else torch.float32

    # ------------------------------------------------------------------ preprocessing
    def preprocess_image(self, img) -> np.ndarray:
        """PIL image -> ``(S, S, 3)`` uint8 array: RGB, centre square crop, resize to ``S``."""
        if img.mode != "RGB":
            img = img.convert("RGB")
        w, h = img.size
        if w != h:
            side = min(w, h)
            left, top = (w - side) // 2, (h - side) // 2
            img = img.crop((left, top, left + side, top + side))
        if img.size != (self.image_size, self.image_size):
            img = img.resize((self.image_size, self.image_size), _pil_resample(self.interpolation))
        return np.asarray(img, dtype=np.uint8)

    def to_tensor(self, batch_u8: np.ndarray):
        """``(B, S, S, 3)`` uint8 -> normalized ``(B, 3, S, S)`` tensor on the device.

        The NHWC -> NCHW permute yields channels-last memory layout without a copy.
        """
        import torch

        dev = self._device_str or select_device(self.device)
        # uint8 travels to the device (4x less than float32), then one fused affine pass:
        # (x / 255 - mean) / std = x * scale + shift.
        x = torch.from_numpy(np.ascontiguousarray(batch_u8)).to(dev).permute(0, 3, 1, 2)
        x = x.to(torch.float32)  # keeps the channels-last strides of the permuted view
        scale = torch.tensor([1.0 / (255.0 * s) for s in self.std], device=x.device).view(1, 3, 1, 1)
        shift = torch.tensor([-m / s for m, s in zip(self.mean, self.std)], device=x.device).view(1, 3, 1, 1)
        x = torch.addcmul(shift, x, scale)  # one pass; faster than mul_/add_ on channels-last
        if self.channels_last:
            return x.contiguous(memory_format=torch.channels_last)
        return x.contiguous()

    # ------------------------------------------------------------------ inference
    @contextlib.contextmanager
    def _threads(self):
        import torch

        if self.num_threads is None:
            yield
            return
        old = torch.get_num_threads()
        torch.set_num_threads(self.num_threads)
        try:
            yield
        finally:
            torch.set_num_threads(old)

    def forward_tensor(self, x) -> np.ndarray:
        """Bare forward pass on a preprocessed batch (``to_tensor`` output) -> ``(B, D)`` float32."""
        import torch

        model = self.model
        with self._threads(), torch.inference_mode():
            out = model(x.to(device=self._device_str, dtype=self.dtype))
            out = self._postprocess(out)
        return out.float().cpu().numpy().astype(np.float32, copy=False)

    def _postprocess(self, out):
        """Hook applied to the raw ``(B, D)`` model output (e.g. L2 normalization for CLIP)."""
        return out

    def load(self) -> None:
        """Load what :meth:`forward_uint8` needs (weights; fails fast when unavailable)."""
        _ = self.model

    def forward_uint8(self, batch_u8: np.ndarray) -> np.ndarray:
        """Network on a ``(B, S, S, 3)`` uint8 batch (``preprocess_image`` outputs, stacked)
        -> ``(B, D)`` float32 features. Default: :meth:`to_tensor` then :meth:`forward_tensor`."""
        return self.forward_tensor(self.to_tensor(batch_u8))

    def encode_pil(self, images: Sequence[Any]) -> np.ndarray:
        """Encode a list of PIL images -> ``(N, D)`` float32 (batched)."""
        feats = []
        for start in range(0, len(images), self.batch_size):
            chunk = [self.preprocess_image(im) for im in images[start : start + self.batch_size]]
            feats.append(self.forward_uint8(np.stack(chunk)))
        if not feats:
            return np.zeros((0, self.feature_dim), dtype=np.float32)
        return np.concatenate(feats, axis=0)

    def _decode_batch(self, source: Any, start: int, stop: int):
        """Decode + preprocess images ``start..stop-1``: ``(arrays, indices, [(i, CorruptImageError)])``."""
        from ..errors import CorruptImageError

        arrays, idx, bad = [], [], []
        for i in range(start, stop):
            try:
                img, _label = source[i]
            except CorruptImageError as e:
                bad.append((i, e))
                continue
            arrays.append(self.preprocess_image(img))
            idx.append(i)
        return arrays, idx, bad

    def _decoded_batches(self, source: Any):
        """Yield ``(stop, arrays, indices, corrupt)`` per batch, in order; with
        ``decode_ahead`` the next batch is decoded in a background thread meanwhile."""
        n, bs = len(source), self.batch_size
        bounds = [(s, min(s + bs, n)) for s in range(0, n, bs)]
        if not self.decode_ahead or len(bounds) < 2:
            for start, stop in bounds:
                yield (stop, *self._decode_batch(source, start, stop))
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1, thread_name_prefix="mixdp-decode") as pool:
            fut = pool.submit(self._decode_batch, source, *bounds[0])
            for k, (start, stop) in enumerate(bounds):
                done = fut.result()
                if k + 1 < len(bounds):
                    fut = pool.submit(self._decode_batch, source, *bounds[k + 1])
                yield (stop, *done)

    def encode_images(
        self,
        source: Any,
        *,
        progress: Callable[[int, int], None] | None = None,
        skip_corrupt: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Encode every image of ``source``; see :meth:`Encoder.encode_images`.

        Decoding happens in the calling process, one batch at a time (peak memory is one
        batch of decoded images, two with ``decode_ahead``). A file that cannot be decoded
        raises :class:`~mixdp_core.errors.CorruptImageError` naming it, or with
        ``skip_corrupt=True`` is skipped with a :class:`UserWarning` and left out of
        ``kept_indices``.
        """
        n = len(source)
        feats: list[np.ndarray] = []
        kept: list[int] = []
        self.load()  # load weights before the first decode (fail fast when unavailable)
        for stop, arrays, idx, bad in self._decoded_batches(source):
            for i, e in bad:
                if not skip_corrupt:
                    raise e
                warnings.warn(f"skipping corrupt image {e.path!r} (index {i}): {e}", UserWarning, stacklevel=2)
            if arrays:
                feats.append(self.forward_uint8(np.stack(arrays)))
                kept.extend(idx)
            if progress is not None:
                progress(stop, n)
        if feats:
            X = np.concatenate(feats, axis=0)
        else:
            X = np.zeros((0, self.feature_dim), dtype=np.float32)
        return X, np.asarray(kept, dtype=np.int64)

    def encode_arrays(self, X: np.ndarray, value_range: tuple[float, float] | None = None, *,
                      source_range: tuple[float, float] | None = None) -> np.ndarray:
        """Encode an in-memory ``(N, H, W)`` or ``(N, H, W, 3)`` pixel array.

        Args:
            X: pixel values in ``value_range``.
            value_range: ``(min, max)`` mapped to 8-bit ``(0, 255)`` before preprocessing,
                e.g. ``(0, 16)`` for scikit-learn digits. Required: a network needs to know
                the pixel scale, and guessing it from the data would be a data-dependent step.
            source_range: not used: without ``value_range`` the caller encodes its
                ArrayImageSource (which carries the same range) with :meth:`encode_images`,
                which reports progress per batch.

        Raises:
            NotImplementedError: ``value_range`` is None; callers then fall back to
                :meth:`encode_images` on an ``ArrayImageSource`` (which carries its range).
        """
        from ..data.base import ArrayImageSource

        if value_range is None:
            raise NotImplementedError(
                f"{self.name}.encode_arrays needs value_range=(lo, hi); or use encode_images on an "
                f"ArrayImageSource, which knows its value range"
            )

        src = ArrayImageSource(np.asarray(X), np.zeros(len(X), dtype=np.int64), value_range=value_range)
        feats, _ = self.encode_images(src)
        return feats
