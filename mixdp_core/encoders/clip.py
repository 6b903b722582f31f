"""CLIP encoders (Radford et al. 2021) via open_clip, with zero-shot text embeddings.

Registry keys: ``clip_vit_b32`` (ViT-B-32, 512-d) and ``clip_rn50`` (RN50, 1024-d); the
``pretrained`` tag selects among open_clip's published weights for that architecture
(default ``"openai"``; e.g. ``"laion2b_s34b_b79k"`` for ViT-B-32, ``"yfcc15m"`` for RN50).

Image features are L2-normalized per image, in float32 after the tower (fp16 on CUDA), so no
cross-sample statistic is involved; :meth:`OpenCLIPEncoder.encode_text` returns
L2-normalized class embeddings built by open_clip's zero-shot builder (mean of the normalized
prompt embeddings over templates, renormalized), so zero-shot logits are
``100 * features @ text.T``.

Weights live in the Hugging Face cache (``$HF_HUB_CACHE``, default ``$HF_HOME/hub`` =
``~/.cache/huggingface/hub``) or in ``cache_dir`` when given; offline, place them there or pass
``pretrained=<path to the checkpoint file>``.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Sequence

import numpy as np

from ..errors import ConfigError, DataError
from .base import ENCODERS
from ._torch import TorchImageEncoder
from ._weights import hf_cache_path_hint, hf_cached_file, host_of, network_available, weights_error

#: OpenAI CLIP normalization (used by all open_clip 'openai' and LAION weights).
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)

#: A subset of the 80 CLIP ImageNet prompt templates: the 7 that Radford et al.'s prompt
#: engineering notebook selected as the best ensemble, plus the plain "a photo of a {}.".
DEFAULT_TEMPLATES: tuple[str, ...] = (
    "a photo of a {}.",
    "itap of a {}.",
    "a bad photo of the {}.",
    "a origami {}.",
    "a photo of the large {}.",
    "a {} in a video game.",
    "art of the {}.",
    "a photo of the small {}.",
)

_HF_WEIGHTS_NAMES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")


class OpenCLIPEncoder(TorchImageEncoder):
    """An open_clip model; image tower for features, text tower for :meth:`encode_text`.

    Args:
        pretrained: open_clip pretrained tag for ``model_name`` (default ``"openai"``),
            ``None`` (random init) or a path to a checkpoint file.
        cache_dir: open_clip / Hugging Face cache folder (``None`` = the HF default).
        image_size: must be the model's native 224 (positional embeddings are fixed).
        Other arguments: see :class:`~mixdp_core.encoders._torch.TorchImageEncoder`.
    """

    has_text: ClassVar[bool] = True
    offline: ClassVar[bool] = False
    model_name: ClassVar[str] = ""
    default_weights: ClassVar[str] = "openai"
    mean: ClassVar[tuple[float, float, float]] = OPENAI_MEAN
    std: ClassVar[tuple[float, float, float]] = OPENAI_STD
    interpolation: ClassVar[str] = "bicubic"
    _weights_format: ClassVar[str] = "expected an open_clip checkpoint (torch.save({'state_dict': model.state_dict()}, path) or a raw state_dict) for this architecture"

    def __init__(self, pretrained: str | None = "default", device: str | None = None, batch_size: int = 64,
                 *, cache_dir: str | None = None, **kwargs):
        super().__init__(pretrained=pretrained, device=device, batch_size=batch_size, **kwargs)
        if self.image_size != self.default_image_size:
            raise ConfigError(
                "image_size", f"must be {self.default_image_size} for {self.name} (fixed positional "
                f"embeddings), got {self.image_size}"
            )
        self.cache_dir = cache_dir
        self._clip = None
        if self.pretrained is not None and not os.path.isfile(str(self.pretrained)):
            import open_clip

            cfg = open_clip.get_pretrained_cfg(self.model_name, str(self.pretrained)) or {}
            self.mean = tuple(cfg.get("mean") or OPENAI_MEAN)  # type: ignore[misc]
            self.std = tuple(cfg.get("std") or OPENAI_STD)  # type: ignore[misc]

    def cache_key(self) -> dict[str, Any]:
        key = super().cache_key()
        if self.pretrained is not None and os.path.isfile(str(self.pretrained)):
            import open_clip

            # the activation the file is built with (QuickGELU for the 'openai' weights): entries
            # of the GELU build it had before are other features
            key["quick_gelu"] = bool((open_clip.get_pretrained_cfg(self.model_name, self.default_weights) or {})
                                     .get("quick_gelu", False))
        return key

    def _weights_known(self, tag: str) -> bool:
        import open_clip

        return tag in open_clip.list_pretrained_tags_by_model(self.model_name)

    def _weights_help(self) -> str:
        import open_clip

        tags = open_clip.list_pretrained_tags_by_model(self.model_name)
        return f"open_clip tags for {self.model_name}: {', '.join(tags)}; or None (random init) or a file path"

    # ------------------------------------------------------------------ weights
    def _local_checkpoint(self) -> tuple[str | None, dict]:
        """``(local file or None, open_clip pretrained cfg)`` for the configured tag."""
        import open_clip

        tag = str(self.pretrained)
        if os.path.isfile(tag):
            # a file is the offline route to the architecture's published weights: build it as
            # those were (ViT-B-32 / RN50 'openai' use QuickGELU; with {} the file was loaded into a
            # GELU model, other features than the weights give)
            return tag, open_clip.get_pretrained_cfg(self.model_name, self.default_weights) or {}
        cfg = open_clip.get_pretrained_cfg(self.model_name, tag)
        hub = cfg.get("hf_hub", "")
        if hub:
            repo, fname = os.path.split(hub.rstrip("/")) if not hub.endswith("/") else (hub.rstrip("/"), "")
            names = ((fname,) if fname else ()) + _HF_WEIGHTS_NAMES
            hit = hf_cached_file(repo, names, cache_dir=self.cache_dir)
            if hit:
                return hit, cfg
        url = cfg.get("url", "")
        if url:
            folder = self.cache_dir or os.path.expanduser("~/.cache/clip")
            path = os.path.join(folder, os.path.basename(url))
            if os.path.isfile(path):
                return path, cfg
        return None, cfg

    def _unavailable(self, cfg: dict, cause: BaseException | None = None):
        hub = cfg.get("hf_hub", "").rstrip("/")
        url = cfg.get("url", "")
        if hub:
            repo = hub if hub.count("/") == 1 else os.path.split(hub)[0]
            source = f"https://huggingface.co/{repo}"
            place = (
                f"copy the Hugging Face cache entry so that {hf_cache_path_hint(repo, _HF_WEIGHTS_NAMES[1], self.cache_dir)} "
                f"exists (download once with `huggingface-cli download {repo}` on a connected machine, "
                f"then copy {self.cache_dir or '$HF_HOME/hub'}), or pass pretrained=<path to the checkpoint file>"
            )
        else:
            source = url or "the open_clip download host"
            place = (
                f"save {os.path.basename(url)} into {self.cache_dir or '~/.cache/clip'} "
                f"or pass pretrained=<path to the checkpoint file>"
            )
        return weights_error(what=f"open_clip {self.model_name} {self.pretrained!r}", source=source,
                             place=place, cause=cause)

    def _create(self):
        import open_clip

        if self.pretrained is None:
            return open_clip.create_model(self.model_name, pretrained=None, device="cpu")
        path, cfg = self._local_checkpoint()
        if path is not None:
            return open_clip.create_model(
                self.model_name, pretrained=path, device="cpu",
                force_quick_gelu=bool(cfg.get("quick_gelu", False)),
            )
        host = "huggingface.co" if cfg.get("hf_hub") else host_of(cfg.get("url", ""))
        if not network_available(host):
            raise self._unavailable(cfg)
        try:
            return open_clip.create_model(self.model_name, pretrained=str(self.pretrained), device="cpu",
                                          cache_dir=self.cache_dir)
        except Exception as e:
            raise self._unavailable(cfg, cause=e) from None

    def _build_model(self):
        from torch import nn

        clip = self._create()
        self._clip = clip

        class ImageTower(nn.Module):
            def __init__(self, clip_model):
                super().__init__()
                self.clip = clip_model

            def forward(self, x):
                return unit_rows_fp32(self.clip.encode_image(x))

        return ImageTower(clip)

    # ------------------------------------------------------------------ text
    def encode_text(self, class_names: Sequence[str], templates: Sequence[str] | None = None) -> np.ndarray:
        """Zero-shot class embeddings, ``(C, D)`` float32, unit L2 norm per row.

        Args:
            class_names: the ``C`` class names (e.g. ``["airplane", "automobile", ...]``).
            templates: prompt templates with one ``{}`` placeholder for the class name;
                ``None`` = :data:`DEFAULT_TEMPLATES`.
        """
        import open_clip
        import torch

        names = [str(c) for c in class_names]
        if not names:
            raise DataError("class_names is empty: zero-shot needs at least one class name")
        templates = list(DEFAULT_TEMPLATES if templates is None else templates)
        if not templates:
            raise ConfigError("templates", "must contain at least one template, got []")
        for t in templates:
            if not isinstance(t, str) or "{}" not in t:
                raise ConfigError("templates", f"each template must be a string with one '{{}}', got {t!r}")
        tower = self.model  # loads weights, moves to device
        tokenizer = open_clip.get_tokenizer(self.model_name)
        with self._threads(), torch.inference_mode():
            w = open_clip.build_zero_shot_classifier(
                tower.clip, tokenizer, names, templates, num_classes_per_batch=10,
                device=self._device_str, use_tqdm=False,
            )
        # build_zero_shot_classifier normalizes in the tower's dtype (fp16 on CUDA: norms off by
        # ~1e-4); renormalize in float32 so zero-shot logits are cosines on every device
        return unit_rows_fp32(w.T).cpu().numpy().astype(np.float32, copy=False)


def unit_rows_fp32(f):
    """Rows of ``f`` (any float dtype) scaled to unit L2 norm, in float32: on CUDA the tower runs
    fp16, where normalizing leaves norms off by about 1e-4 (seen on an H200); in float32 they
    are 1 to float32 rounding on every device. All-zero rows stay zero (torch's ``normalize``,
    norms clamped at 1e-12)."""
    from torch.nn import functional as F

    return F.normalize(f.float(), dim=-1)


@ENCODERS.register("clip_vit_b32")
class ClipViTB32Encoder(OpenCLIPEncoder):
    """open_clip ViT-B-32, 512-d L2-normalized image features, text tower for zero-shot."""

    name: ClassVar[str] = "clip_vit_b32"
    model_name: ClassVar[str] = "ViT-B-32"
    description: ClassVar[str] = "CLIP ViT-B/32 via open_clip (download), 512-d, zero-shot text"
    feature_dim: ClassVar[int] = 512


@ENCODERS.register("clip_rn50")
class ClipRN50Encoder(OpenCLIPEncoder):
    """open_clip RN50 (modified ResNet-50), 1024-d L2-normalized image features, text tower."""

    name: ClassVar[str] = "clip_rn50"
    model_name: ClassVar[str] = "RN50"
    description: ClassVar[str] = "CLIP RN50 via open_clip (download), 1024-d, zero-shot text"
    feature_dim: ClassVar[int] = 1024
