"""Image encoders: ``ENCODERS[name](pretrained=..., device=None, batch_size=...)``.

Registered keys: ``pixels``, ``efficientnet_lite0`` (default, offline), ``resnet50``,
``clip_vit_b32``, ``clip_rn50``, ``dinov2_vits14``. Importing this package registers them all.
"""

from .base import ENCODERS, Encoder, select_device
from . import pixels, efficientnet, resnet, clip, dinov2  # noqa: F401  (registration)
from .clip import DEFAULT_TEMPLATES

#: The encoder used when none is chosen.
DEFAULT_ENCODER = "efficientnet_lite0"

__all__ = ["ENCODERS", "Encoder", "select_device", "DEFAULT_ENCODER", "DEFAULT_TEMPLATES"]
