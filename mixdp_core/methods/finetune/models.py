"""Trainable GroupNorm networks for sparse DP fine-tuning (Luo et al., Sec. 4.3 / 5.4).

Batch normalization mixes samples of a batch, so per-sample gradients (DP-SGD) are not
defined for it; following the paper every network here uses ``nn.GroupNorm`` instead.
These are *trainable* networks built with ``torch.nn`` only (no torchvision model code), so
they live beside the method rather than under ``mixdp_core.encoders``.

Every model exposes the same layout, which the parameter selection relies on:

* ``model.features(x)``: ``(N, C_in, H, W)`` images -> ``(N, feature_dim)`` vectors;
* ``model.classifier``: the final ``nn.Linear`` (θ_cls in the paper's notation);
* ``model.feature_dim``: input width of the classifier;
* every convolution is an ``nn.Conv2d`` without bias (θ_conv), every normalization an
  ``nn.GroupNorm`` with affine weight and bias (θ_norm).

Registry :data:`ARCHITECTURES` maps names to builders
``builder(in_channels, num_classes, *, width, gn_groups) -> nn.Module``.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from ...registry import Registry


def group_norm(channels: int, groups: int) -> nn.GroupNorm:
    """GroupNorm with ``gcd(groups, channels)`` groups (so any width is valid), affine."""
    return nn.GroupNorm(math.gcd(int(groups), int(channels)), channels, affine=True)


class SmallCNN(nn.Module):
    """A small VGG-style GroupNorm CNN for tiny images (8×8 digits up to 32×32 CIFAR).

    ``stages`` blocks of ``[conv3×3 -> GN -> ReLU] × 2 -> 2×2 max-pool`` with widths
    ``width · 2^s``, then global average pooling and a linear classifier.

    Args:
        in_channels: image channels (1 for digits, 3 for RGB).
        num_classes: outputs of the classifier.
        width: channels of the first stage.
        gn_groups: GroupNorm groups (reduced to ``gcd(gn_groups, channels)``).
        stages: number of pooling stages; 2 suits 8×8 inputs, 3 suits 32×32.
    """

    def __init__(self, in_channels: int, num_classes: int, *, width: int = 32, gn_groups: int = 8, stages: int = 2):
        super().__init__()
        layers: list[nn.Module] = []
        c_in = in_channels
        for s in range(stages):
            c_out = width * 2**s
            for _ in range(2):
                layers += [
                    nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
                    group_norm(c_out, gn_groups),
                    nn.ReLU(),
                ]
                c_in = c_out
            layers.append(nn.MaxPool2d(2))
        self.body = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.feature_dim = c_in
        self.classifier = nn.Linear(c_in, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.pool(self.body(x)), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class BasicBlock(nn.Module):
    """ResNet basic block (He et al. 2016) with GroupNorm; 1×1 conv shortcut on shape change."""

    def __init__(self, c_in: int, c_out: int, stride: int, gn_groups: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.norm1 = group_norm(c_out, gn_groups)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, stride=1, padding=1, bias=False)
        self.norm2 = group_norm(c_out, gn_groups)
        self.relu = nn.ReLU()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), group_norm(c_out, gn_groups)
            )
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet18GN(nn.Module):
    """ResNet-18 with GroupNorm in place of BatchNorm (the paper's backbone, Sec. 5.4).

    Args:
        in_channels: image channels.
        num_classes: outputs of the classifier.
        width: channels of the first stage (64 in the standard ResNet-18; stages use
            ``width·{1,2,4,8}``).
        gn_groups: GroupNorm groups (32 in the GN paper's default).
        stem: ``"cifar"`` (3×3 stride-1 conv, no max-pool: 32×32 inputs) or ``"imagenet"``
            (7×7 stride-2 conv + 3×3 max-pool: 224×224 inputs).
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        *,
        width: int = 64,
        gn_groups: int = 32,
        stem: str = "cifar",
    ):
        super().__init__()
        if stem == "cifar":
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, width, 3, stride=1, padding=1, bias=False),
                group_norm(width, gn_groups),
                nn.ReLU(),
            )
        elif stem == "imagenet":
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, width, 7, stride=2, padding=3, bias=False),
                group_norm(width, gn_groups),
                nn.ReLU(),
                nn.MaxPool2d(3, stride=2, padding=1),
            )
        else:  # pragma: no cover - guarded by the config
            raise ValueError(f"stem must be 'cifar' or 'imagenet', got {stem!r}")
        blocks: list[nn.Module] = []
        c_in = width
        for i, mult in enumerate((1, 2, 4, 8)):
            c_out = width * mult
            stride = 1 if i == 0 else 2
            blocks += [BasicBlock(c_in, c_out, stride, gn_groups), BasicBlock(c_out, c_out, 1, gn_groups)]
            c_in = c_out
        self.layers = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.feature_dim = c_in
        self.classifier = nn.Linear(c_in, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.pool(self.layers(self.stem(x))), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


Builder = Callable[..., nn.Module]

#: Architecture name -> builder ``(in_channels, num_classes, *, width, gn_groups, image_size)``.
ARCHITECTURES: Registry[Builder] = Registry("architecture")


@ARCHITECTURES.register("small_cnn")
def _small_cnn(in_channels: int, num_classes: int, *, width: int, gn_groups: int, image_size: int) -> nn.Module:
    # 2 pooling stages for <= 16 px (8x8 digits -> 2x2), 3 for larger inputs (32 -> 4).
    stages = 2 if image_size <= 16 else 3
    return SmallCNN(in_channels, num_classes, width=width, gn_groups=gn_groups, stages=stages)


@ARCHITECTURES.register("resnet18_32")
def _resnet18_32(in_channels: int, num_classes: int, *, width: int, gn_groups: int, image_size: int) -> nn.Module:
    return ResNet18GN(in_channels, num_classes, width=width, gn_groups=gn_groups, stem="cifar")


@ARCHITECTURES.register("resnet18_224")
def _resnet18_224(in_channels: int, num_classes: int, *, width: int, gn_groups: int, image_size: int) -> nn.Module:
    return ResNet18GN(in_channels, num_classes, width=width, gn_groups=gn_groups, stem="imagenet")


def build_model(
    arch: str, in_channels: int, num_classes: int, *, width: int, gn_groups: int, image_size: int
) -> nn.Module:
    """Build the architecture registered as ``arch`` (``"auto"`` picks by ``image_size``:
    ``small_cnn`` below 32 px, ``resnet18_32`` below 64 px, else ``resnet18_224``).

    Raises:
        UnknownNameError: ``arch`` is not registered.
    """
    if arch == "auto":
        arch = "small_cnn" if image_size < 32 else ("resnet18_32" if image_size < 64 else "resnet18_224")
    return ARCHITECTURES.get(arch)(in_channels, num_classes, width=width, gn_groups=gn_groups, image_size=image_size)


def replace_classifier(model: nn.Module, num_classes: int) -> nn.Module:
    """Give ``model`` a fresh, zero-initialised classifier θ_cls^prv with ``num_classes`` outputs.

    The paper transfers θ_conv and θ_norm and trains a *fresh* classifier (Sec. 4.4). Zero
    initialisation makes the initial private model data-independent and deterministic and
    starts DP-SGD at uniform predictions, a common choice for DP transfer learning.
    """
    head = nn.Linear(model.feature_dim, num_classes)
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    model.classifier = head.to(next(model.parameters()).device)
    return model
