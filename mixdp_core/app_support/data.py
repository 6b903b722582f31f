"""Data-page glue: the split preview (per-class counts) from cached features."""

from __future__ import annotations

import functools
from typing import Any


def split_summary(dataset: str, encoder: str, *, public_per_class: int = 5, imbalance_ratio: float = 1.0,
                  public_from: str | None = None, seed: int = 0,
                  encoder_kwargs: dict[str, Any] | None = None, cache_dir: Any = None,
                  dataset_kwargs: dict[str, Any] | None = None, labels_only: bool = False) -> dict[str, Any]:
    """Per-class public / private / test counts and minority flags of the split the runs
    would use (:meth:`mixdp_core.data.splits.Split.summary`), plus feature provenance.
    ``labels_only``: the counts alone are wanted (the ``pixels`` view stands in for the
    features), so a public domain whose pixels have another size does not refuse the split
    (a folder of 8×8 RGB images beside digits' 64 pixels did, once the pixels were cached).

    Loads the features through the cache (extracting them if absent: call it after a feature
    job has finished to stay fast).

    Raises:
        ConfigError / DataError: invalid split parameters or data (messages name the field).
    """
    from ..data.datasets import public_source
    from ..data.splits import SplitSpec, make_split
    from ..features.cache import get_features

    ekw = dict(encoder_kwargs or {}) or None
    dkw = dict(dataset_kwargs or {})
    fs = get_features(dataset, encoder, cache_dir=cache_dir, encoder_kwargs=ekw, **dkw)
    pub_spec, pub_kw = public_source(dataset, dkw, public_from)
    pub = get_features(pub_spec, encoder, cache_dir=cache_dir, encoder_kwargs=ekw, **pub_kw) if pub_spec else None
    if labels_only and pub is not None and pub.dim != fs.dim:
        import dataclasses

        import numpy as np

        # the labels decide the counts; a zero view of the private width (no memory) keeps the split's checks
        pub = dataclasses.replace(pub, X_train=np.broadcast_to(np.float32(0), (len(pub.y_train), fs.dim)),
                                  X_test=np.broadcast_to(np.float32(0), (len(pub.y_test), fs.dim)))
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


#: Datasets whose labels (and pixels) load in about a second without any download or
#: extraction: their split preview and sample images need no "Extract features" click.
INSTANT_DATASETS = ("digits", "synthetic")


def labels_known(dataset: str, ready_pixels: bool = False) -> bool:
    """Whether the split preview can be drawn without extracting the chosen encoder's
    features: the split depends only on the labels, which the ``pixels`` view of small
    offline datasets (or an already cached ``pixels`` extraction) gives at once."""
    return dataset in INSTANT_DATASETS or ready_pixels


def split_problem(dataset: str, *, public_per_class: int, imbalance_ratio: float = 1.0,
                  public_from: str | None = None, seed: int = 0, ready_pixels: bool = False,
                  cache_dir: Any = None, dataset_kwargs: dict[str, Any] | None = None) -> tuple[str, str] | None:
    """``(field, message)`` when these split settings cannot be made on ``dataset`` (e.g. 300
    public samples per class where a class holds 180), else ``None``. Checked from the labels
    (:func:`labels_known`); ``None`` when the labels are not at hand yet (the run's own
    split then says it)."""
    from ..data.datasets import parse_spec
    from ..errors import MixDPError, field_and_message

    if public_from:
        # the two domains' classes, from their listings (nothing encoded): a public domain with
        # other classes was saved and failed only at Launch
        bad = public_classes_problem(dataset, public_from, dataset_kwargs)
        if bad or not (labels_known(dataset, ready_pixels) and labels_known(parse_spec(public_from)[0])):
            return bad
    elif not labels_known(dataset, ready_pixels):
        return None
    try:
        label_summary(dataset, public_per_class=public_per_class, imbalance_ratio=imbalance_ratio, seed=seed,
                      public_from=public_from, cache_dir=cache_dir, dataset_kwargs=dataset_kwargs)
    except MixDPError as e:
        return field_and_message(e, "split")
    return None


def public_classes_problem(dataset: str, public_from: str,
                           dataset_kwargs: dict[str, Any] | None = None) -> tuple[str, str] | None:
    """``("public_from", message)`` when the public domain's classes are not ``dataset``'s, from
    the two listings (:func:`~mixdp_core.data.datasets.load_dataset`, nothing encoded), else
    ``None`` (also when either cannot be listed: the run says why)."""
    from ..data.datasets import public_classes_mismatch
    from ..errors import MixDPError, field_and_message

    try:
        bad = public_classes_mismatch(dataset, dataset_kwargs, public_from)
    except MixDPError as e:
        return field_and_message(e, "public_from")
    return ("public_from", bad) if bad else None


def label_summary(dataset: str, *, public_per_class: int = 5, imbalance_ratio: float = 1.0,
                  public_from: str | None = None, seed: int = 0, cache_dir: Any = None,
                  dataset_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`split_summary` from the labels alone (through the instant ``pixels`` view); the
    split (which samples are public/private) depends only on the labels and the seed, so the
    counts are those of every encoder. ``dim`` is dropped (it is the encoder's).

    The data sets whose labels are instant (:data:`INSTANT_DATASETS`: deterministic from their
    options) are remembered per settings: a page asks the same split's check and private count
    on every rerun (0.9 s each for a 100-class synthetic regime, asked twice per Train rerun)."""
    import copy
    import json

    key = json.dumps([dataset, int(public_per_class), float(imbalance_ratio), public_from, int(seed),
                      None if cache_dir is None else str(cache_dir), dict(dataset_kwargs or {})],
                     sort_keys=True, default=str)
    if dataset in INSTANT_DATASETS:
        return copy.deepcopy(_instant_label_summary(key))
    return _label_summary_of(key)


def _label_summary_of(key: str) -> dict[str, Any]:
    import json

    dataset, ppc, ir, public_from, seed, cache_dir, dkw = json.loads(key)
    out = split_summary(dataset, "pixels", public_per_class=ppc, imbalance_ratio=ir, public_from=public_from,
                        seed=seed, cache_dir=cache_dir, dataset_kwargs=dkw, labels_only=True)
    out["dim"] = None
    out["labels_only"] = True
    return out


@functools.lru_cache(maxsize=32)
def _instant_label_summary(key: str) -> dict[str, Any]:
    """:func:`_label_summary_of` of an instant data set, remembered (errors are not: each call
    raises again)."""
    return _label_summary_of(key)


def private_row_count(dataset: str, *, public_per_class: int, imbalance_ratio: float = 1.0,
                      public_from: str | None = None, seed: int = 0, ready_pixels: bool = False,
                      cache_dir: Any = None, dataset_kwargs: dict[str, Any] | None = None) -> int | None:
    """The split's number of private rows (owner's view, not a DP release: it feeds the δ
    advice shown to the data owner, :func:`..forms.delta_advice`), from the labels alone;
    ``None`` when the labels are not at hand or the split cannot be made."""
    from ..errors import MixDPError

    if not labels_known(dataset, ready_pixels):
        return None
    try:
        s = label_summary(dataset, public_per_class=public_per_class, imbalance_ratio=imbalance_ratio,
                          public_from=public_from, seed=seed, cache_dir=cache_dir, dataset_kwargs=dataset_kwargs)
    except MixDPError:
        return None
    return int(sum(s["private"]))


def public_sample_images(dataset: str, *, per_class: int = 4, public_per_class: int = 5, seed: int = 0,
                         cache_dir: Any = None, public_from: str | None = None) -> dict[str, list]:
    """Up to ``per_class`` images per class from the split's *public* samples (no privacy
    cost), as 2-D arrays scaled to ``[0, 1]``, from the ``pixels`` view of the data; with
    ``public_from``, from that public domain's rows (they showed the private data set's own rows
    under the title "public samples").

    Returns ``{class_name: [H×W array, ...]}``; ``{}`` if the rows are not square grayscale
    images (e.g. colour: ``H*W*3`` values are reshaped to ``H×W×3``)."""
    import math

    import numpy as np

    from ..data.splits import SplitSpec, make_split
    from ..features.cache import get_features

    if public_from:
        from ..data.datasets import public_source

        pub_spec, pub_kw = public_source(dataset, {}, public_from)
        fs = get_features(pub_spec, "pixels", cache_dir=cache_dir, **pub_kw)  # the public domain's rows only
    else:
        fs = get_features(dataset, "pixels", cache_dir=cache_dir)
    split = make_split(fs, SplitSpec(public_per_class=int(public_per_class), imbalance_ratio=1.0, seed=int(seed)))
    D = split.X_public.shape[1]
    s = int(round(math.sqrt(D)))
    s3 = int(round(math.sqrt(D / 3)))
    if s * s == D:
        shape: tuple[int, ...] = (s, s)
    elif 3 * s3 * s3 == D:
        shape = (s3, s3, 3)
    else:
        return {}
    out: dict[str, list] = {}
    for c, name in enumerate(fs.class_names):
        rows = split.X_public[split.y_public == c][:per_class]
        imgs = []
        for r in rows:
            a = np.asarray(r, dtype=np.float64)
            lo, hi = float(a.min()), float(a.max())
            imgs.append(((a - lo) / (hi - lo if hi > lo else 1.0)).reshape(shape))
        out[str(name)] = imgs
    return out
