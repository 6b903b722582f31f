"""DINOv2 ViT-S/14 (Oquab et al. 2023), self-supervised, via timm: 384-d CLS features.

timm model ``vit_small_patch14_dinov2.lvd142m``; weights come from the Hugging Face repo
``timm/vit_small_patch14_dinov2.lvd142m`` (``model.safetensors``) into the Hugging Face cache
(``$HF_HUB_CACHE``, default ``$HF_HOME/hub`` = ``~/.cache/huggingface/hub``) or ``cache_dir``.

The model is built for ``image_size`` (default 224 = 16 x 16 patches of 14 px; DINOv2 was
trained at 518 px but its position embeddings are interpolated by timm when loading), which
must be a multiple of 14. Preprocessing: centre square crop, bicubic resize, ImageNet
mean/std. Features: the final-norm CLS token (timm ``num_classes=0`` head).
"""

from __future__ import annotations

import os
from typing import ClassVar

from ..errors import ConfigError
from .base import ENCODERS
from ._torch import TorchImageEncoder
from ._weights import hf_cache_path_hint, hf_cached_file, network_available, weights_error

_TIMM_NAME = "vit_small_patch14_dinov2"
_TAGS = ("lvd142m",)


@ENCODERS.register("dinov2_vits14")
class DinoV2ViTS14Encoder(TorchImageEncoder):
    """Self-supervised DINOv2 ViT-S/14 (timm), 384-d CLS features.

    Args:
        pretrained: ``"lvd142m"`` (default), ``None`` (random init) or a path to a timm
            checkpoint file (``model.safetensors`` / ``pytorch_model.bin``).
        image_size: input side in pixels, a multiple of 14 (default 224).
        cache_dir: Hugging Face cache folder (``None`` = the default).
        Other arguments: see :class:`~mixdp_core.encoders._torch.TorchImageEncoder`.
    """

    name: ClassVar[str] = "dinov2_vits14"
    offline: ClassVar[bool] = False
    description: ClassVar[str] = "DINOv2 ViT-S/14 self-supervised, via timm (download), 384-d"
    default_weights: ClassVar[str] = "lvd142m"
    feature_dim: ClassVar[int] = 384
    interpolation: ClassVar[str] = "bicubic"
    _weights_format: ClassVar[str] = "expected timm / torch.hub DINOv2 ViT-S/14 weights (model.safetensors or a torch state_dict)"

    def __init__(self, pretrained: str | None = "default", device: str | None = None, batch_size: int = 64,
                 *, cache_dir: str | None = None, **kwargs):
        super().__init__(pretrained=pretrained, device=device, batch_size=batch_size, **kwargs)
        if self.image_size % 14:
            raise ConfigError("image_size", f"must be a multiple of 14 (patch size), got {self.image_size}")
        self.cache_dir = cache_dir

    def _weights_known(self, tag: str) -> bool:
        return tag in _TAGS

    def _build_model(self):
        import timm

        kw = dict(num_classes=0, img_size=self.image_size)
        if self.pretrained is None:
            return timm.create_model(_TIMM_NAME, pretrained=False, **kw)
        tag = str(self.pretrained)
        if os.path.isfile(tag):
            return timm.create_model(f"{_TIMM_NAME}.{_TAGS[0]}", pretrained=True,
                                     pretrained_cfg_overlay=dict(file=tag), **kw)
        full = f"{_TIMM_NAME}.{tag}"
        repo = f"timm/{full}"
        names = ("model.safetensors", "pytorch_model.bin")
        hit = hf_cached_file(repo, names, cache_dir=self.cache_dir)
        if hit:
            return timm.create_model(full, pretrained=True, pretrained_cfg_overlay=dict(file=hit), **kw)
        place = (
            f"copy the Hugging Face cache entry so that {hf_cache_path_hint(repo, names[0], self.cache_dir)} exists "
            f"(`huggingface-cli download {repo}` on a connected machine, then copy the cache folder), "
            f"or pass pretrained=<path to model.safetensors>"
        )
        if not network_available("huggingface.co"):
            raise weights_error(what=f"dinov2_vits14 {tag!r} (timm {full})",
                                source=f"https://huggingface.co/{repo}", place=place)
        try:
            return timm.create_model(full, pretrained=True, cache_dir=self.cache_dir, **kw)
        except Exception as e:
            raise weights_error(what=f"dinov2_vits14 {tag!r} (timm {full})",
                                source=f"https://huggingface.co/{repo}", place=place, cause=e) from None
