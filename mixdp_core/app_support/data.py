"""Data-page glue: the split preview (per-class counts) from cached features."""

from __future__ import annotations

from typing import Any


def split_summary(dataset: str, encoder: str, *, public_per_class: int = 5, imbalance_ratio: float = 1.0,
                  public_from: str | None = None, seed: int = 0,
                  encoder_kwargs: dict[str, Any] | None = None, cache_dir: Any = None) -> dict[str, Any]:
    """Per-class public / private / test counts and minority flags of the split the runs
    would use (:meth:`mixdp_core.data.splits.Split.summary`), plus feature provenance.

    Loads the features through the cache (extracting them if absent: call it after a feature
    job has finished to stay fast).

    Raises:
        ConfigError / DataError: invalid split parameters or data (messages name the field).
    """
    from ..data.splits import SplitSpec, make_split
    from ..features.cache import get_features

    ekw = dict(encoder_kwargs or {}) or None
    fs = get_features(dataset, encoder, cache_dir=cache_dir, encoder_kwargs=ekw)
    pub = get_features(public_from, encoder, cache_dir=cache_dir, encoder_kwargs=ekw) if public_from else None
    spec = SplitSpec(public_per_class=int(public_per_class), imbalance_ratio=float(imbalance_ratio),
                     seed=int(seed), public_from=public_from)
    split = make_split(fs, spec, public_features=pub)
    out = split.summary()
    out.update(dim=split.dim, n_train=int(len(fs.y_train)), n_test=int(len(fs.y_test)),
               has_text=fs.text_embeddings is not None, encoder_meta={k: v for k, v in fs.meta.items()
                                                                     if isinstance(v, (str, int, float, bool))})
    return out


def weights_file_from_path(path: str) -> str:
    """Absolute path of a user weights file typed on the Data page.

    The file must lie under the data root (:func:`mixdp_core.data.data_root`,
    ``$MIXDP_DATA_ROOT``; symlinks resolved first) and be a regular file. Formats: a
    torchvision ``state_dict`` for ``resnet50``, an open_clip checkpoint for the CLIP
    encoders, timm (``model.safetensors``) or torch.hub weights for ``dinov2_vits14``.

    Raises:
        ConfigError: field ``weights``: outside the data root, missing, or a folder.
    """
    from ..data.paths import data_root, resolve_under
    from ..errors import ConfigError

    full = resolve_under(data_root(), path.strip(), field="weights")
    if full.is_dir():
        raise ConfigError("weights", f"{path!r} is a folder; give the weights file itself")
    if not full.is_file():
        raise ConfigError("weights", f"no file {path!r} under the data root {str(data_root())!r}")
    return str(full)
