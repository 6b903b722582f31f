"""On-disk feature cache: extract once, load in milliseconds.

Layout: ``<cache_dir>/<key>/features.npz`` + ``<key>/meta.json`` (and ``<cache_dir>/_models/``:
ONNX graphs exported by encoders with an onnxruntime backend), where ``key`` is a hash of
everything that determines the numbers: the dataset's content key (name, root, split seed,
file list), the encoder's key (name, weights tag, preprocessing, image size), the storage
dtype, the package version and a format version.

Writes are atomic: each file is written to a temporary name in the same folder and renamed
(``os.replace``); ``meta.json`` is written last and is the validity marker, so an
interrupted extraction never leaves a half file that is later read as valid.

Features are stored *unnormalized*; methods decide whether to L2-normalize at use.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .. import __version__
from .._io import atomic_write, storage_error, sweep_orphans
from ..errors import ConfigError, DataError
from ..featureset import FeatureSet
from ..data.roots import default_cache_dir  # noqa: F401  (re-exported: the features API)

#: Part of every key. 2: keys whose meaning changed without their text changing (pixels
#: ``per_image`` at an ``image_size`` now resizes digits with their declared 0..16 range; such
#: an entry of version 1 could only come from a run with some other ``value_range``).
FORMAT_VERSION = 3  # 3: images are decoded upright (EXIF orientation) and 16-bit images rescaled


def cache_key(dataset_key: dict[str, Any], encoder_key: dict[str, Any], dtype: str) -> str:
    """Stable hash of the inputs that determine the cached arrays."""
    blob = json.dumps(
        {"dataset": dataset_key, "encoder": encoder_key, "dtype": dtype, "version": __version__, "format": FORMAT_VERSION},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def save_features(directory: Path, fs: FeatureSet, *, dtype: str = "float16") -> None:
    """Atomically store ``fs`` in ``directory`` (npz first, then meta.json as the marker)."""
    if dtype not in ("float16", "float32"):
        raise ConfigError("dtype", f"must be 'float16' or 'float32', got {dtype!r}")
    directory.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {
        "X_train": fs.X_train.astype(dtype),
        "y_train": fs.y_train.astype(np.int64),
        "X_test": fs.X_test.astype(dtype),
        "y_test": fs.y_test.astype(np.int64),
        "class_names": np.asarray(fs.class_names, dtype=str),
    }
    if fs.text_embeddings is not None:
        arrays["text_embeddings"] = fs.text_embeddings.astype(np.float32)
    meta_path = directory / "meta.json"
    # invalidate first: a crash below must not leave old meta + new npz. missing_ok: another
    # process writing the same entry may remove it between a check and the unlink
    meta_path.unlink(missing_ok=True)
    atomic_write(directory / "features.npz", lambda f: np.savez(f, **arrays), suffix=".npz")
    meta = dict(fs.meta, dtype=dtype, n_train=int(fs.X_train.shape[0]), n_test=int(fs.X_test.shape[0]),
                dim=fs.dim, created=time.strftime("%Y-%m-%dT%H:%M:%S"), mixdp_version=__version__)
    atomic_write(meta_path, lambda f: f.write(json.dumps(meta, indent=2, default=str).encode()), suffix=".json")


def load_cached(directory: Path) -> FeatureSet | None:
    """Load a cache entry, or ``None`` if it is absent or incomplete (no meta.json)."""
    meta_path = directory / "meta.json"
    npz_path = directory / "features.npz"
    if not (meta_path.is_file() and npz_path.is_file()):
        return None
    sweep_orphans(directory)  # temp files of an interrupted write of this entry
    try:
        meta = json.loads(meta_path.read_text())
        with np.load(npz_path, allow_pickle=False) as z:
            te = z["text_embeddings"] if "text_embeddings" in z.files else None
            return FeatureSet(
                X_train=z["X_train"].astype(np.float32),
                y_train=z["y_train"],
                X_test=z["X_test"].astype(np.float32),
                y_test=z["y_test"],
                class_names=[str(c) for c in z["class_names"]],
                text_embeddings=te,
                meta=meta,
            )
    except (OSError, ValueError, KeyError, EOFError, DataError, zipfile.BadZipFile, zlib.error) as e:
        # A corrupt entry (disk error, edited by hand; a flipped byte raised BadZipFile's bad CRC
        # on every later run) is a cache miss, not a failure.
        warnings.warn(f"feature cache entry {str(directory)!r} is unreadable ({type(e).__name__}); re-extracting")
        return None


def _as_stored(X: np.ndarray, dtype: str) -> np.ndarray:
    """``X`` as float32 after a round trip through the storage ``dtype`` (what
    :func:`load_cached` returns for it).

    Raises:
        ConfigError: field ``dtype``: a value overflows float16 (|x| > 65504); such an entry
            would be stored as inf and refused on every later load.
    """
    if dtype not in ("float16", "float32"):
        raise ConfigError("dtype", f"must be 'float16' or 'float32', got {dtype!r}")
    with np.errstate(over="ignore"):  # an overflow is reported below, as a ConfigError
        R = np.asarray(X).astype(dtype).astype(np.float32)
    if not np.all(np.isfinite(R)) and np.all(np.isfinite(X)):
        raise ConfigError("dtype", f"features reach |x| = {float(np.max(np.abs(X))):.3g}, above float16's 65504; "
                                   f"use dtype='float32'")
    return R


def _looks_like_path(s: str) -> bool:
    return os.sep in s or "/" in s or s.endswith((".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npz"))


def get_features(
    dataset: str,
    encoder: str = "efficientnet_lite0",
    *,
    root: str | None = None,
    cache_dir: str | Path | None = None,
    pretrained: str | None = "default",
    dtype: str = "float16",
    batch_size: int = 64,
    device: str | None = None,
    skip_corrupt: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    refresh: bool = False,
    encoder_kwargs: dict[str, Any] | None = None,
    **dataset_kwargs: Any,
) -> FeatureSet:
    """Features of ``dataset`` under ``encoder``: from the cache, else extracted and cached.

    Args:
        dataset: dataset spec (``"digits"``, ``"image_folder:<root>"``, ``"features:<npz>"``...).
        encoder: registry key in :data:`~mixdp_core.encoders.ENCODERS` (ignored for
            ``features:`` datasets).
        root: dataset root folder if not in the spec.
        cache_dir: defaults to :func:`default_cache_dir`.
        pretrained: encoder weights tag (``None`` = random weights, for tests).
        dtype: storage dtype, ``"float16"`` (half the disk) or ``"float32"``.
        skip_corrupt: skip undecodable images with a warning instead of failing.
        progress: ``progress(split_name, done, total)`` during extraction.
        refresh: re-extract even if cached.
        encoder_kwargs: extra encoder constructor arguments (e.g. ``image_size``).
        **dataset_kwargs: passed to the dataset loader.

    Returns:
        The :class:`FeatureSet` (float32 in memory), with ``meta`` describing provenance and
        ``meta["cache_hit"]``. Its arrays are the same on a miss as on a later hit: a miss
        returns the features rounded to the storage ``dtype``.
    """
    from ..data.datasets import load_dataset
    from ..encoders import ENCODERS
    from ..encoders.base import check_encoder_kwargs

    if dtype not in ("float16", "float32"):  # before any loading or encoding
        raise ConfigError("dtype", f"must be 'float16' or 'float32', got {dtype!r}")
    if encoder_kwargs:  # a typo names the encoder's real options, before any loading
        check_encoder_kwargs(encoder, encoder_kwargs)
    ds = load_dataset(dataset, root=root, **dataset_kwargs)
    if ds.features is not None:
        fs = ds.features
        fs.meta["cache_hit"] = True
        return fs
    enc_cls = ENCODERS.get(encoder)
    ekw = dict(encoder_kwargs or {})
    # A weights file given as an encoder option (CLI --encoder-arg pretrained=<file> / --weights,
    # the app's weights field) replaces the ``pretrained`` tag instead of clashing with it.
    for alias in ("pretrained", "weights"):
        if alias in ekw:
            pretrained = ekw.pop(alias)
    if isinstance(pretrained, str) and pretrained not in ("default",) and _looks_like_path(pretrained):
        wp = Path(pretrained).expanduser()
        if not wp.is_file():
            raise ConfigError("pretrained", f"weights file {str(wp)!r} does not exist"
                                            + (" (it is a folder)" if wp.is_dir() else ""))
        pretrained = str(wp.resolve())
    # An option the user set (e.g. --encoder-arg batch_size=16) overrides the caller's default
    # instead of arriving twice.
    opts = {"pretrained": pretrained, "device": device, "batch_size": batch_size, **ekw}
    try:
        enc = enc_cls(**opts)
    except TypeError as e:  # an option the encoder does not take
        raise ConfigError("encoder_kwargs", f"{e}".replace("__init__()", encoder)) from None
    # skip_corrupt is part of the key: a strict call served a lenient call's entry, one image short
    key = cache_key(dict(ds.cache_key, **({"skip_corrupt": True} if skip_corrupt else {})), enc.cache_key(), dtype)
    directory = Path(cache_dir) if cache_dir else default_cache_dir()
    if cache_dir and getattr(enc, "model_dir", False) is None:
        enc.model_dir = directory / "_models"  # exported inference graphs live beside the features
    entry = directory / key
    if not refresh:
        fs = load_cached(entry)
        if fs is not None:
            fs.meta["cache_hit"] = True
            return fs

    t0 = time.perf_counter()
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for split_name, src, raw in (("train", ds.train, ds.raw_arrays[0] if ds.raw_arrays else None),
                                 ("test", ds.test, ds.raw_arrays[1] if ds.raw_arrays else None)):
        cb = (lambda done, total, s=split_name: progress(s, done, total)) if progress else None
        X = None
        if raw is not None:
            try:
                # the dataset's declared value range (digits: 0..16), for an encoder that must
                # resize the array and was given no range of its own
                X = enc.encode_arrays(raw, source_range=getattr(src, "value_range", None))
                if cb:
                    cb(len(raw), len(raw))
            except NotImplementedError:
                X = None
        if X is not None:
            out[split_name] = (np.asarray(X, dtype=np.float32), np.asarray(src.labels))
            continue
        X, kept = enc.encode_images(src, progress=cb, skip_corrupt=skip_corrupt)
        if len(kept) < len(src):
            warnings.warn(f"{split_name}: skipped {len(src) - len(kept)} undecodable image(s)")
        out[split_name] = (np.asarray(X, dtype=np.float32), np.asarray(src.labels)[kept])
    text = enc.encode_text(ds.class_names) if enc.has_text else None
    meta = {
        "dataset": ds.name,
        "dataset_key": ds.cache_key,
        **{f"encoder_{k}" if k != "encoder" else k: v for k, v in enc.cache_key().items()},
        "cache_key": key,
        "extract_seconds": round(time.perf_counter() - t0, 3),
    }
    if hasattr(enc, "runtime"):  # provenance only (not in the key: fp32 runtimes agree)
        meta["encoder_runtime"] = "-".join(enc.runtime)
    # A miss returns exactly what a hit will load: the arrays rounded to the storage dtype
    # (float16 rounding moved test error 0.0761 -> 0.0779 between a cold and a warm run).
    X_tr, X_te = (_as_stored(out[k][0], dtype) for k in ("train", "test"))
    fs = FeatureSet(X_tr, out["train"][1].astype(np.int64), X_te, out["test"][1].astype(np.int64),
                    list(ds.class_names),
                    text_embeddings=None if text is None else np.asarray(text, dtype=np.float32), meta=meta)
    try:
        save_features(entry, fs, dtype=dtype)
    except OSError as e:
        # Documented behaviour: a read-only or full cache does not fail the run; the features
        # are used from memory and not cached (atomic_write removed its temp file).
        err = storage_error(e, entry, what="cache",
                            fix="features not cached; set MIXDP_CACHE (CLI: --cache-dir) to a writable folder")
        warnings.warn(str(err))
        fs.meta["cache_error"] = str(err)
    fs.meta["cache_hit"] = False
    return fs
