"""Encoder interface: images -> feature matrices.

Only modules under ``mixdp_core.encoders`` import open_clip / torchvision models / timm.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from ..errors import ConfigError, DataError
from ..registry import Registry


def check_device_name(preferred: str | None) -> str | None:
    """``preferred`` normalized (``None`` for auto), checked for its form only (no torch import):
    ``cpu``, ``cuda``, ``cuda:N``, ``mps``, ``auto`` or empty.

    Raises:
        ConfigError: field ``device``, naming the allowed forms.
    """
    import re

    if preferred is None:
        return None
    dev = str(preferred).strip().lower()
    if dev in ("", "auto"):
        return None
    if not re.fullmatch(r"cpu|mps|cuda(:[0-9]+)?", dev):
        raise ConfigError("device", f"must be auto, cpu, cuda, cuda:N or mps, got {preferred!r}")
    return dev


def select_device(preferred: str | None = None) -> str:
    """Pick the compute device: explicit choice, else cuda -> mps -> cpu.

    Raises:
        ConfigError: field ``device``: not one of :func:`check_device_name`'s forms, or a device
            torch does not see on this machine (one line, when the device is first needed).
    """
    import torch

    dev = check_device_name(preferred)
    if dev:
        if dev.startswith("cuda"):
            n = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if n == 0:
                raise ConfigError("device", f"{preferred!r} asked but torch sees no CUDA device; use cpu or auto")
            if ":" in dev and int(dev.split(":")[1]) >= n:
                raise ConfigError("device", f"{preferred!r} asked but torch sees {n} CUDA device(s): cuda:0 to "
                                            f"cuda:{n - 1}")
        if dev == "mps" and not (getattr(torch.backends, "mps", None) is not None
                                 and torch.backends.mps.is_available()):
            raise ConfigError("device", "'mps' asked but torch sees no MPS device; use cpu or auto")
        return dev
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def integer_option(field: str, value: Any, allowed: str) -> int:
    """An encoder's integer option: a typed value ("abc", 1.5, a bool) fails naming ``field`` and
    ``allowed`` (:func:`mixdp_core.config.parse_number`); a numpy integer is an integer too."""
    from ..config import parse_number

    return parse_number(field, int(value) if isinstance(value, np.integer) else value, int, allowed)


#: Options every encoder takes from its caller (``get_features``) and that a user may also set.
CALLER_OPTIONS = ("pretrained", "weights", "device", "batch_size")


def encoder_options(cls: type) -> list[str] | None:
    """The option names ``cls(...)`` accepts (``weights`` an alias of ``pretrained``), sorted.

    A constructor's ``**kwargs`` is followed up the class hierarchy (the encoders forward it to
    ``super().__init__``); ``None`` when the chain ends in ``**kwargs`` (anything goes).
    """
    import inspect

    names = set(CALLER_OPTIONS)
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        params = list(inspect.signature(vars(klass)["__init__"]).parameters.values())[1:]  # no self
        names.update(p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                          inspect.Parameter.KEYWORD_ONLY))
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return sorted(names)
    return None


def check_encoder_kwargs(encoder: str, kwargs: dict[str, Any]) -> None:
    """Refuse an option the encoder does not take, naming the encoder's real options, before any
    run row, step or feature extraction exists (a typo would otherwise fail at construction).

    Raises:
        ConfigError: field ``encoder_kwargs``, one line listing the accepted names.
        UnknownNameError: ``encoder`` is not registered.
    """
    allowed = encoder_options(ENCODERS.get(encoder))
    if allowed is None:
        return
    unknown = sorted(k for k in kwargs if k not in allowed)
    if unknown:
        raise ConfigError("encoder_kwargs", f"{encoder} takes no option {', '.join(map(repr, unknown))}; "
                                            f"its options: {', '.join(allowed)}")


class Encoder(ABC):
    """Maps images to ``(N, D)`` float32 feature vectors.

    Class attributes:
        name: registry key.
        has_text: whether :meth:`encode_text` is available (CLIP).
        offline: whether the weights ship with an installed package (work offline).
        description: one line for the UI.

    Args:
        pretrained: weights tag (encoder-specific; ``None`` = random init, used in tests).
        device: ``None`` for auto (cuda -> mps -> cpu).
        batch_size: images per forward pass.
    """

    name: ClassVar[str] = ""
    has_text: ClassVar[bool] = False
    offline: ClassVar[bool] = False
    description: ClassVar[str] = ""

    def __init__(self, pretrained: str | None = "default", device: str | None = None, batch_size: int = 64):
        self.pretrained = pretrained
        # the form is checked here (one line); whether this machine has the device, when it is
        # first needed (select_device): a cached run or the pixels encoder never needs one
        self.device = check_device_name(device)
        self.batch_size = integer_option("batch_size", batch_size, "an integer >= 1")

    @property
    def weights_tag(self) -> str:
        return str(self.pretrained)

    def cache_key(self) -> dict[str, Any]:
        """What identifies the features this encoder produces (for the feature cache)."""
        return {"encoder": self.name, "weights": self.weights_tag, "preprocess": self.preprocess_tag()}

    def preprocess_tag(self) -> str:
        return ""

    @abstractmethod
    def encode_images(
        self,
        source: Any,
        *,
        progress: Callable[[int, int], None] | None = None,
        skip_corrupt: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Encode every image of ``source`` (an :class:`~mixdp_core.data.base.ImageSource`).

        Args:
            progress: called as ``progress(done, total)`` after each batch.
            skip_corrupt: skip undecodable files with a warning instead of raising.

        Returns:
            ``(features (N_kept, D) float32, kept_indices (N_kept,))``.

        Raises:
            CorruptImageError: an image cannot be decoded and ``skip_corrupt`` is False.
        """

    def encode_arrays(self, X: np.ndarray, value_range: tuple[float, float] | None = None, *,
                      source_range: tuple[float, float] | None = None) -> np.ndarray:
        """Encode an in-memory pixel array (only encoders that support it; the others raise
        NotImplementedError and callers use :meth:`encode_images` on an image source).

        Args:
            value_range: the caller's ``(min, max)`` of ``X``.
            source_range: the range the data set declares for ``X`` (digits: ``(0, 16)``),
                for encoders that fall back on it when no range was given.
        """
        raise NotImplementedError

    def encode_text(self, class_names: Sequence[str], templates: Sequence[str] | None = None) -> np.ndarray:
        """Zero-shot class embeddings ``(C, D)`` (CLIP encoders only)."""
        raise DataError(
            f"encoder {self.name!r} has no text tower; zero-shot and text initialization need a "
            f"CLIP encoder (clip_vit_b32 or clip_rn50)"
        )


ENCODERS: Registry[type[Encoder]] = Registry("encoder")
