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
