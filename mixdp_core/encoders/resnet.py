"""ResNet-50 (He et al. 2016) with torchvision ImageNet weights, 2048-d pooled features.

Weights are torchvision's ``IMAGENET1K_V2`` (default) or ``IMAGENET1K_V1``; torchvision keeps
them in ``$TORCH_HOME/hub/checkpoints/`` (default ``~/.cache/torch/hub/checkpoints``) under the
file name of their URL (``resnet50-11ad3fa6.pth`` / ``resnet50-0676ba61.pth``). Offline, place
that file there (or pass ``pretrained=<path>``).

Preprocessing: centre square crop, bilinear resize to ``image_size`` (default 224; the
standard 256-resize + 224-crop would discard the border of already tiny images), torchvision's
ImageNet mean/std.
"""

from __future__ import annotations

import os
from typing import ClassVar

from .base import ENCODERS
from ._torch import TorchImageEncoder
from ._weights import host_of, network_available, torch_hub_checkpoint_dir, weights_error

_TAGS = ("IMAGENET1K_V2", "IMAGENET1K_V1")


@ENCODERS.register("resnet50")
class ResNet50Encoder(TorchImageEncoder):
    """torchvision ResNet-50 without its classifier: ``(B, 2048)`` pooled features.

    Args:
        pretrained: ``"IMAGENET1K_V2"`` (default), ``"IMAGENET1K_V1"``, ``None`` (random init)
            or a path to a ``state_dict`` file.
        Other arguments: see :class:`~mixdp_core.encoders._torch.TorchImageEncoder`.
    """

    name: ClassVar[str] = "resnet50"
    offline: ClassVar[bool] = False
    description: ClassVar[str] = "ResNet-50, torchvision ImageNet weights (download), 2048-d"
    _weights_format: ClassVar[str] = "expected a torchvision ResNet-50 state_dict saved with torch.save(model.state_dict(), path)"
    default_weights: ClassVar[str] = "IMAGENET1K_V2"
    feature_dim: ClassVar[int] = 2048

    def _weights_known(self, tag: str) -> bool:
        return tag in _TAGS

    def _weights_help(self) -> str:
        return f"use one of {', '.join(_TAGS)}, None (random init) or a path to a weights file"

    def _state_dict(self):
        import torch
        from torchvision.models import ResNet50_Weights

        tag = str(self.pretrained)
        if os.path.isfile(tag):
            return torch.load(tag, map_location="cpu", weights_only=True)
        weights = ResNet50_Weights[tag]
        fname = os.path.basename(weights.url)
        ckpt_dir = torch_hub_checkpoint_dir()
        cached = ckpt_dir / fname
        if not cached.is_file() and not network_available(host_of(weights.url)):
            raise weights_error(
                what=f"resnet50 {tag!r}",
                source=weights.url,
                place=f"download that file and save it as {cached} (the folder is "
                f"$TORCH_HOME/hub/checkpoints; TORCH_HOME defaults to ~/.cache/torch), or pass "
                f"pretrained=<path to {fname}>",
            )
        try:
            return weights.get_state_dict(progress=False, check_hash=False)
        except Exception as e:  # network errors, truncated downloads...
            raise weights_error(
                what=f"resnet50 {tag!r}",
                source=weights.url,
                place=f"save the file as {cached}",
                cause=e,
            ) from None

    def _build_model(self):
        from torch import nn
        from torchvision.models import resnet50

        net = resnet50(weights=None)
        if self.pretrained is not None:
            net.load_state_dict(self._state_dict(), strict=True)
        net.fc = nn.Identity()
        return net
