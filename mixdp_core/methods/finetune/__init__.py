"""Sparse DP fine-tuning of GroupNorm networks (Luo et al., CVPR 2021).

Importing this package registers ``sparse_finetune``, ``sparse_finetune_cls``,
``sparse_finetune_cls_norm`` and ``dpsgd_full_network`` in :data:`METHODS` without
importing torch; the networks live in :mod:`.models`, the parameter selection in
:mod:`.selection` and the (Opacus) training loops in :mod:`.training`.
"""

from .method import (
    PARAM_MODES,
    DPSGDFullNetwork,
    PretrainedNetwork,
    SparseFinetune,
    SparseFinetuneCls,
    SparseFinetuneClsNorm,
    SparseFinetuneConfig,
)

__all__ = [
    "DPSGDFullNetwork",
    "PARAM_MODES",
    "PretrainedNetwork",
    "SparseFinetune",
    "SparseFinetuneCls",
    "SparseFinetuneClsNorm",
    "SparseFinetuneConfig",
]
