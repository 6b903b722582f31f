"""Selection of the transfer parameters τ (Luo et al., Sec. 4.4).

The model's parameters are partitioned into θ_conv (convolution weights), θ_norm
(GroupNorm weight and bias) and θ_cls (the classifier). A selection mode picks τ:

* ``"cls"``: τ = θ_cls^prv (vanilla transfer learning, classifier only);
* ``"cls_norm"``: τ = θ_norm ∪ θ_cls^prv (Procedure 1, normalization transfer);
* ``"all"``: τ = θ_norm ∪ θ_cls^prv ∪ m_conv ⊙ θ_conv (Procedure 2), where the mask m_conv
  keeps the fraction ``p`` of convolution weights of largest magnitude,
  θ̂_conv = {θ ∈ θ_conv : |θ| > t} with t such that |θ̂_conv| = p·|θ_conv|;
* ``"full"``: every parameter (whole-network DP-SGD, the paper's comparison baseline).

The mask is computed from the *public* (pre-trained) model only; it never looks at private
data, so choosing it costs no privacy (the paper's remark on [19], Sec. 4.4).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

#: The allowed values of the ``params`` config field.
PARAM_MODES = ("cls", "cls_norm", "all", "full")


def conv_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """Name -> weight of every ``nn.Conv2d`` (θ_conv), in module order."""
    return {
        f"{name}.weight": m.weight for name, m in model.named_modules() if isinstance(m, nn.Conv2d)
    }


def norm_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """Name -> parameter of every GroupNorm / LayerNorm affine (θ_norm)."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, (nn.GroupNorm, nn.LayerNorm)):
            for pname, p in m.named_parameters(recurse=False):
                out[f"{name}.{pname}"] = p
    return out


def classifier_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """Name -> parameter of ``model.classifier`` (θ_cls)."""
    return {f"classifier.{n}": p for n, p in model.classifier.named_parameters()}


def magnitude_mask(model: nn.Module, fraction: float) -> dict[str, torch.Tensor]:
    """Boolean masks m_conv keeping the ``fraction`` of conv weights of largest |θ|.

    The threshold t is global over all convolution layers (Sec. 4.4, Procedure 2): exactly
    ``k = round(fraction · |θ_conv|)`` weights are kept (at least 1 when ``fraction > 0``);
    ties at the threshold are broken by position (lower flat index first), so the result is
    deterministic and has exactly ``k`` ones.

    Args:
        model: the *public* pre-trained model (its weights alone determine the mask).
        fraction: p in ``[0, 1]`` (0.01 = 1 %, the paper's setting).

    Returns:
        Conv weight name -> bool tensor of the weight's shape (True = trainable).
    """
    weights = conv_weights(model)
    flat = torch.cat([w.detach().abs().reshape(-1).cpu() for w in weights.values()])
    k = _kept(fraction, flat.numel())
    keep = torch.zeros(flat.numel(), dtype=torch.bool)
    if k > 0:
        # Stable descending sort: equal magnitudes keep their index order.
        order = torch.sort(flat, descending=True, stable=True).indices
        keep[order[:k]] = True
    return _per_layer(keep, weights)


def _kept(fraction: float, total: int) -> int:
    """Entries a mask of ``fraction`` keeps: ``round(fraction · total)``, at least 1 when > 0."""
    k = int(round(fraction * total))
    return max(k, 1) if fraction > 0 else k


def _per_layer(keep: torch.Tensor, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Cut a flat keep-vector over all conv weights into one mask per layer."""
    masks, start = {}, 0
    for name, w in weights.items():
        n = w.numel()
        masks[name] = keep[start : start + n].reshape(w.shape).to(w.device)
        start += n
    return masks


#: ``mask`` options of sparse fine-tuning: the paper's magnitude mask, or the random-mask
#: ablation at the same sparsity (the paper's claim is that magnitude matters: this tests it).
MASK_KINDS = ("magnitude", "random")


def random_mask(model: nn.Module, fraction: float, *, seed: int) -> dict[str, torch.Tensor]:
    """Boolean masks keeping exactly as many conv weights as :func:`magnitude_mask` (``k =
    round(fraction · |θ_conv|)``, at least 1 when ``fraction > 0``), chosen uniformly at random
    over all convolution layers by ``seed`` — data-independent, so it costs no privacy."""
    weights = conv_weights(model)
    total = sum(w.numel() for w in weights.values())
    k = _kept(fraction, total)
    keep = torch.zeros(total, dtype=torch.bool)
    if k > 0:
        g = torch.Generator().manual_seed(int(seed))
        keep[torch.randperm(total, generator=g)[:k]] = True
    return _per_layer(keep, weights)


@dataclass
class Selection:
    """The transfer parameters τ of one run.

    Attributes:
        mode: one of :data:`PARAM_MODES`.
        trainable: parameter name -> parameter receiving DP-SGD updates (whole tensors
            whose some or all entries are in τ).
        masks: parameter name -> bool mask for tensors only partly in τ (conv weights in
            ``"all"`` mode); entries outside the mask get no update and do not enter the
            clipped per-sample norm.
        n_trainable: number of scalar entries in τ.
        n_total: number of scalar parameters of the model.
    """

    mode: str
    trainable: dict[str, torch.Tensor]
    masks: dict[str, torch.Tensor] = field(default_factory=dict)
    n_trainable: int = 0
    n_total: int = 0


def select_parameters(model: nn.Module, mode: str, *, conv_fraction: float = 0.01, mask: str = "magnitude",
                      mask_seed: int = 0) -> Selection:
    """Choose τ for ``mode`` and set ``requires_grad`` accordingly on ``model``.

    Parameters not in τ get ``requires_grad=False`` (no per-sample gradient is even
    computed for them); conv weights in ``"all"`` mode keep ``requires_grad=True`` and are
    masked entry-wise by the training loop.

    Args:
        model: the transfer model f^prv (public weights + fresh classifier).
        mode: ``"cls"``, ``"cls_norm"``, ``"all"`` or ``"full"``.
        conv_fraction: p for ``"all"`` mode.
        mask: ``"magnitude"`` (the paper's, from the public weights) or ``"random"`` (the
            ablation: same number of entries, uniformly at random by ``mask_seed``).

    Returns:
        The :class:`Selection`.
    """
    if mode not in PARAM_MODES:
        raise ValueError(f"mode must be one of {PARAM_MODES}, got {mode!r}")
    named = dict(model.named_parameters())
    chosen: dict[str, torch.Tensor] = dict(classifier_parameters(model))
    masks: dict[str, torch.Tensor] = {}
    if mode in ("cls_norm", "all"):
        chosen.update(norm_parameters(model))
    if mask not in MASK_KINDS:
        raise ValueError(f"mask must be one of {MASK_KINDS}, got {mask!r}")
    if mode == "all":
        masks = (magnitude_mask(model, conv_fraction) if mask == "magnitude"
                 else random_mask(model, conv_fraction, seed=mask_seed))
        chosen.update(conv_weights(model))
    if mode == "full":
        chosen = dict(named)
    for name, p in named.items():
        p.requires_grad_(name in chosen)
    n_trainable = sum(
        int(masks[n].sum()) if n in masks else p.numel() for n, p in chosen.items()
    )
    return Selection(
        mode=mode,
        trainable={n: named[n] for n in named if n in chosen},
        masks=masks,
        n_trainable=n_trainable,
        n_total=sum(p.numel() for p in named.values()),
    )
