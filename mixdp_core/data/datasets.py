"""Dataset loaders, registered in :data:`DATASETS`.

A dataset *spec* is a string: a registry key (``"digits"``, ``"cifar10"``, ...), or
``"image_folder:<root>"`` / ``"features:<file.npz>"`` with the path after the colon.
:func:`load_dataset` turns it into a :class:`~mixdp_core.data.base.LoadedDataset`.

Train/test partitions are fixed per dataset (the official split where one exists, else a
stratified split with ``split_seed``), so the test set never changes with the public/private
split seed.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from .._io import real_path, stat_identity
from ..errors import ConfigError, DataError
from ..featureset import FeatureSet, check_feature_dim
from ..registry import Registry
from .base import ArrayImageSource, FileImageSource, LoadedDataset

#: name -> loader(root, **kwargs) -> LoadedDataset
DATASETS: Registry[Callable[..., LoadedDataset]] = Registry("dataset")

#: Most classes a feature file may declare through its labels.
MAX_CLASSES = 100_000

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")


def default_data_dir() -> Path:
    """Where torchvision datasets are looked for / downloaded: ``$MIXDP_DATA`` or ~/.cache."""
    return Path(os.environ.get("MIXDP_DATA", Path.home() / ".cache" / "mixdp" / "datasets")).expanduser()


def _check_test_fraction(test_fraction: Any) -> float:
    """``test_fraction`` as a float in (0, 1), else a one-line ConfigError naming it (checked
    before a folder is scanned or a data set is opened)."""
    try:
        tf = float(test_fraction)
    except (TypeError, ValueError):
        tf = float("nan")
    if isinstance(test_fraction, bool) or not 0 < tf < 1:
        raise ConfigError("test_fraction", f"must lie in (0, 1), got {test_fraction!r}")
    return tf


def _stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(train indices, test indices)``, both sorted: per class, ``round(test_fraction * m)``
    of its ``m`` rows go to test, chosen by ``seed``.

    Contract: every class keeps at least one train row. A class of one row is all train; a
    class of ``m >= 2`` rows gives test at least 1 and at most ``m - 1`` rows (the rounding
    would otherwise put a whole small class into test, e.g. 2 rows at ``test_fraction=0.8``,
    and the run would fail only after every image was encoded).
    """
    test_fraction = _check_test_fraction(test_fraction)
    rng = np.random.default_rng([seed, 0x7E57])
    tr, te = [], []
    for c in np.unique(labels):
        m = rng.permutation(np.flatnonzero(labels == c))
        n_te = min(max(1, int(round(test_fraction * m.size))), m.size - 1) if m.size > 1 else 0
        te.append(m[:n_te])
        tr.append(m[n_te:])
    return np.sort(np.concatenate(tr)), np.sort(np.concatenate(te))


# --------------------------------------------------------------------------- digits
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """``(images (1797, 8, 8) float64, target (1797,) int)`` of scikit-learn's bundled digits.

    Read straight from the package's ``datasets/data/digits.csv.gz`` (what
    ``sklearn.datasets.load_digits`` parses) so that a digits run does not pay ~1 s of CPU for
    importing scikit-learn (``benchmarks/startup.py``); falls back to ``load_digits``.
    """
    import gzip
    import importlib.util

    try:
        spec = importlib.util.find_spec("sklearn")
        locs = list(spec.submodule_search_locations or []) if spec is not None else []
        if locs:
            with gzip.open(Path(locs[0]) / "datasets" / "data" / "digits.csv.gz", "rt") as f:
                data = np.loadtxt(f, delimiter=",")
            return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)
    except (OSError, ValueError):
        pass
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images, d.target


@DATASETS.register("digits")
def load_digits_dataset(root: str | None = None, *, test_fraction: float = 0.3, split_seed: int = 0, **_: Any) -> LoadedDataset:
    """scikit-learn's bundled 8×8 handwritten digits (1,797 images, 10 classes): offline default.

    Pixel values are integers 0..16. Train/test: stratified, ``test_fraction`` (default 0.3 ->
    1,257 train / 540 test, ~126 train images per class).
    """
    images, target = _digits_arrays()
    y = target.astype(np.int64)
    tr, te = _stratified_split(y, test_fraction, split_seed)
    imgs = images.astype(np.float32)
    return LoadedDataset(
        name="digits",
        class_names=[str(i) for i in range(10)],
        train=ArrayImageSource(imgs[tr], y[tr], (0.0, 16.0)),
        test=ArrayImageSource(imgs[te], y[te], (0.0, 16.0)),
        raw_arrays=(imgs[tr], imgs[te]),
        cache_key={"dataset": "digits", "test_fraction": test_fraction, "split_seed": split_seed},
    )


# ----------------------------------------------------------------------- image folder
def _confined(f: Path, real_root: Path) -> Path:
    """``f`` resolved (symlinks followed) if it lies inside ``real_root``, else a ConfigError.

    Checked before any file is opened: an image symlink inside the root that points outside
    it (e.g. to a system file) is refused, not read.
    """
    real = Path(os.path.realpath(f))
    if real != real_root and real_root not in real.parents:
        raise ConfigError("root", f"{str(f)!r} resolves to {str(real)!r}, outside the dataset folder "
                                  f"{str(real_root)!r}; links must stay inside it")
    return real


#: Most directory entries (files and sub-folders, of all class folders together; ``train/``
#: and ``test/`` together) one image-folder load lists. The listing happens before anything is
#: decoded, and 10^5 files took 3.7 s to list; at this limit the scan stops at once with a
#: one-line DataError naming the folder (split the data set, or bring a ``features:`` file).
MAX_FOLDER_FILES = 1_000_000


def _check_cap(value: Any, field: str) -> int | None:
    """A per-class cap (``max_per_class``, ``max_test_per_class``): ``None`` or an integer >= 1,
    else a one-line ConfigError naming ``field``."""
    if value is None:
        return None
    from ..config import parse_number

    value = parse_number(field, int(value) if isinstance(value, np.integer) else value, int, "an integer >= 1 or None")
    if value < 1:
        raise ConfigError(field, f"must be an integer >= 1 or None, got {value!r}")
    return value


def _list_class_tree(root: Path, max_per_class: int | None, real_root: Path | None = None, *,
                     field: str = "max_per_class", budget: list[int] | None = None
                     ) -> tuple[list[Path], np.ndarray, list[str]]:
    """Files and labels of ``root/<class>/...`` (confined to the real root), first
    ``max_per_class`` per class (``field`` names it in errors). An unreadable folder is a
    one-line ``DataError`` naming it.

    ``budget`` (a one-item list, shared by the trees of one load) counts the directory
    entries still allowed (:data:`MAX_FOLDER_FILES`)."""
    max_per_class = _check_cap(max_per_class, field)
    budget = [MAX_FOLDER_FILES] if budget is None else budget
    try:
        return _scan_class_tree(root, max_per_class, real_root, budget)
    except OSError as e:  # a folder the user may not read (e.g. /proc): say which, in one line
        where = getattr(e, "filename", None) or str(root)
        raise DataError(f"root: cannot read {str(where)!r} ({e.strerror or type(e).__name__})") from None


def _count_entry(budget: list[int], top: Path) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise DataError(f"root: {str(top)!r} holds more than {MAX_FOLDER_FILES:,} files and folders, the most one "
                        f"data set may list (MAX_FOLDER_FILES); split it, or encode it into a features: file")


def _file_candidates(folder: Path, budget: list[int], top: Path) -> list[tuple[str, ...]]:
    """The name parts (relative to ``folder``) of every file or link under ``folder`` whose
    name does not start with ``.``; real sub-folders are entered, linked ones are not (what
    ``Path.rglob("*")`` lists). Every entry seen is counted against ``budget``, so a huge
    folder stops the scan while it is being listed. Uses ``os.scandir``: no stat per file."""
    out: list[tuple[str, ...]] = []
    stack: list[tuple[str, ...]] = [()]
    while stack:
        rel = stack.pop()
        with os.scandir(folder.joinpath(*rel)) as it:
            for e in it:
                _count_entry(budget, top)
                link = e.is_symlink()
                if not link and e.is_dir():
                    stack.append((*rel, e.name))
                elif not e.name.startswith(".") and (link or e.is_file()):
                    out.append((*rel, e.name))
    return out


def _in_name_order(cands: list[tuple[str, ...]], n: int | None):
    """``cands`` in sorted order (the order of sorted ``Path`` objects: part by part), lazily:
    with a cap ``n`` only the ``n`` smallest are sorted (``heapq.nsmallest``), the rest only
    if some of those turn out not to be files."""
    if n is None or n >= len(cands):
        yield from sorted(cands)
        return
    import heapq

    yield from heapq.nsmallest(n, cands)
    yield from sorted(cands)[n:]


def _scan_class_tree(root: Path, max_per_class: int | None, real_root: Path | None = None,
                     budget: list[int] | None = None) -> tuple[list[Path], np.ndarray, list[str]]:
    real_root = Path(os.path.realpath(root)) if real_root is None else real_root
    budget = [MAX_FOLDER_FILES] if budget is None else budget
    classes = []
    for p in root.iterdir():
        _count_entry(budget, root)
        if p.is_dir() and not p.name.startswith("."):
            classes.append(p.name)
    classes.sort()
    for c in classes:
        _confined(root / c, real_root)
    if not classes:
        raise DataError(f"root: {str(root)!r} has no class sub-folders (expected root/<class>/<image>)")
    paths: list[Path] = []
    labels: list[int] = []
    for ci, c in enumerate(classes):
        files: list[Path] = []
        # every kept file resolved and confined to the dataset folder before anything opens
        # it; with max_per_class, only the first n names are resolved (bounded work)
        for rel in _in_name_order(_file_candidates(root / c, budget, root), max_per_class):
            f = root.joinpath(c, *rel)
            if _confined(f, real_root).is_file():
                files.append(f)
                if max_per_class is not None and len(files) >= max_per_class:
                    break
        if not files:
            raise DataError(f"root: class folder {str(root / c)!r} contains no files")
        paths.extend(files)
        labels.extend([ci] * len(files))
    return paths, np.asarray(labels, dtype=np.int64), classes


def _cap_per_class(idx: np.ndarray, labels: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` of ``idx`` (sorted row indices) in each class of ``labels[idx]``."""
    keep = [idx[labels[idx] == c][:n] for c in np.unique(labels[idx])]
    return np.sort(np.concatenate(keep)) if keep else idx


def _file_identity(paths: list[Path], folder: Path) -> str:
    """16 hex digits identifying the listed files and their contents, and a check that no
    file is listed twice.

    Identity per file: path, size, ``st_mtime_ns``, ``st_ctime_ns`` and ``st_ino`` of the
    file read (links followed). One stat per file, no reading: a file replaced in place with
    its old mtime put back (``cp -p``, ``rsync -t``, ``tar x``) still changes its ctime, which
    no user tool sets back, and a file swapped by rename changes its inode.

    Raises:
        DataError: two listed paths are the same file (same device and inode: a symbolic or
            hard link), one line naming both and ``folder``. Refused, not deduplicated: a
            test image that is also a train image (or one image in two classes) would leak
            test data into training, and a duplicated train image counts one person twice
            under the DP guarantee; which copy to keep is the user's choice.
    """
    import hashlib

    h = hashlib.sha256()
    seen: dict[tuple[int, Any], Path] = {}
    for p in paths:
        try:
            st = p.stat()
        except OSError as e:  # removed or made unreadable since the scan
            raise DataError(f"root: cannot read {str(p)!r} ({e.strerror or type(e).__name__})") from None
        # a file system without inode numbers (st_ino 0) falls back to the resolved path
        ident = (st.st_dev, st.st_ino) if st.st_ino else (-1, os.path.realpath(p))
        if ident in seen:
            raise DataError(f"root: {str(seen[ident])!r} and {str(p)!r} in {str(folder)!r} are the same file "
                            f"(a link); each image may be listed once, else a test image could also be a train "
                            f"image: remove the link or copy the file")
        seen[ident] = p
        h.update((":".join(map(str, (p, *stat_identity(st)))) + "\n").encode())
    return h.hexdigest()[:16]


@DATASETS.register("image_folder")
def load_image_folder(
    root: str | None = None,
    *,
    test_fraction: float = 0.2,
    split_seed: int = 0,
    max_per_class: int | None = None,
    max_test_per_class: int | None = None,
    **_: Any,
) -> LoadedDataset:
    """Any ``root/<class>/*`` image tree (CUB, Stanford Dogs, MIT-67, a PACS domain, photos).

    If ``root/train`` and ``root/test`` exist they are the split (classes from ``train``;
    ``test`` must have the same class folders); otherwise a stratified split with
    ``test_fraction`` and ``split_seed``. Every file under a class folder is an image
    candidate; one that cannot be decoded raises
    :class:`~mixdp_core.data.base.CorruptImageError` naming it at encoding time (or is
    skipped with a warning if the encoder is asked to ``skip_corrupt``).

    Every listed file must be a different file: two paths that are the same file (links, e.g.
    ``test/a/t0.bmp`` -> ``train/a/0.bmp``) are refused with a one-line DataError, since a test
    image would otherwise also be a train image. At most :data:`MAX_FOLDER_FILES` directory
    entries are listed.

    Args:
        max_per_class: keep only the first n files (sorted by name) per class of the train
            tree, or of the whole tree before the stratified split (for documented subsets);
            only those n are resolved and checked, so the cost is bounded by the listing.
        max_test_per_class: keep only the first n files (sorted by name) per class of the
            ``test`` tree; without ``train``/``test`` folders, the first n test rows per class
            of the stratified split (the others are dropped, not moved to train, so the train
            rows are those of the uncapped split).
    """
    check_dataset_source("image_folder", root)  # a folder given, and there
    max_per_class = _check_cap(max_per_class, "max_per_class")  # every option before the scan
    max_test_per_class = _check_cap(max_test_per_class, "max_test_per_class")
    r = Path(root).expanduser()
    key = {"dataset": "image_folder", "root": str(r.resolve()), "max_per_class": max_per_class,
           "max_test_per_class": max_test_per_class}
    real_root = Path(os.path.realpath(r))
    budget = [MAX_FOLDER_FILES]  # one listing limit for the whole load
    if (r / "train").is_dir() and (r / "test").is_dir():
        p_tr, y_tr, classes = _list_class_tree(r / "train", max_per_class, real_root, budget=budget)
        p_te, y_te, classes_te = _list_class_tree(r / "test", max_test_per_class, real_root,
                                                  field="max_test_per_class", budget=budget)
        if classes_te != classes:
            raise DataError(f"root: test classes {classes_te} differ from train classes {classes}")
    else:
        _check_test_fraction(test_fraction)
        paths, y, classes = _list_class_tree(r, max_per_class, real_root, budget=budget)
        tr, te = _stratified_split(y, test_fraction, split_seed)
        if max_test_per_class is not None:
            te = _cap_per_class(te, y, max_test_per_class)
        p_tr, y_tr = [paths[i] for i in tr], y[tr]
        p_te, y_te = [paths[i] for i in te], y[te]
        key.update(test_fraction=test_fraction, split_seed=split_seed)
    # The content identity (stat only, never the bytes) and the no-duplicate check.
    key["files"] = _file_identity(list(p_tr) + list(p_te), r)
    return LoadedDataset(
        name=f"image_folder:{r}",
        class_names=classes,
        train=FileImageSource(p_tr, y_tr, root=real_root),
        test=FileImageSource(p_te, y_te, root=real_root),
        cache_key=key,
    )


# ------------------------------------------------------- CD-FSL targets (image folders)
#: The CD-FSL target data sets (Guo et al., ECCV 2020; the few-shot protocol of Luo et al.,
#: CVPR 2021, Table 2) as ``image_folder`` trees at fixed places under the data root
#: (:func:`~mixdp_core.data.paths.data_root`: ``$MIXDP_DATA_ROOT`` or ``~/mixdp-data``):
#: key -> (folder under the data root, what to place there). Nothing is downloaded.
CDFSL_FOLDERS: dict[str, tuple[str, str]] = {
    "cdfsl_cropdiseases": ("cdfsl/CropDiseases", "the CropDiseases (PlantVillage) images of the CD-FSL benchmark, one "
                                                 "folder per class (its dataset/train/<class>/ tree, 38 classes)"),
    "cdfsl_eurosat": ("cdfsl/EuroSAT", "the EuroSAT RGB images, one folder per class (the release's 2750/<class>/ "
                                       "tree, 10 classes)"),
    "cdfsl_isic": ("cdfsl/ISIC", "the ISIC 2018 task-3 training images sorted into one folder per diagnosis by "
                                 "the ground-truth CSV (MEL, NV, BCC, AKIEC, BKL, DF, VASC)"),
}


def _make_cdfsl_loader(key: str, rel: str, what: str) -> Callable[..., LoadedDataset]:
    def loader(root: str | None = None, *, test_fraction: float = 0.2, split_seed: int = 0,
               max_per_class: int | None = None, max_test_per_class: int | None = None, **_: Any) -> LoadedDataset:
        from .roots import data_root

        folder = Path(root).expanduser() if root else data_root() / rel
        if not folder.is_dir():
            raise DataError(f"{key}: no image folder at {str(folder)!r}; put {what} there, or give "
                            f"{key}:<folder>")
        ds = load_image_folder(str(folder), test_fraction=test_fraction, split_seed=split_seed,
                               max_per_class=max_per_class, max_test_per_class=max_test_per_class)
        return LoadedDataset(name=key, class_names=ds.class_names, train=ds.train, test=ds.test,
                             cache_key={**ds.cache_key, "cdfsl": key})

    loader.__doc__ = (f"CD-FSL target: an image folder at <data root>/{rel} (or {key}:<folder>): {what}; "
                      "train/test as image_folder.")
    return loader


for _key, (_rel, _what) in CDFSL_FOLDERS.items():
    DATASETS.add(_key, _make_cdfsl_loader(_key, _rel, _what))


# -------------------------------------------------------------------- feature files
def load_feature_file(path: str | Path) -> FeatureSet:
    """Load bring-your-own features from ``.npz``.

    Required arrays: ``X_train, y_train, X_test, y_test``; optional ``class_names`` (else
    ``"0".."C-1"``) and ``text_embeddings`` (a finite float ``(C, D)`` array). float16
    features are accepted (kept as float32 in memory). Validated on load: shapes, finite
    values, labels in range; errors name the array.
    """
    from ..safe_npz import npz_headers, load_npz

    p = Path(path).expanduser()
    heads = npz_headers(p, field="features")  # sizes, dtypes, truncation: before reading any array
    missing = [k for k in ("X_train", "y_train", "X_test", "y_test") if k not in heads]
    if missing:
        raise DataError(f"features: {str(p)!r} lacks array(s) {', '.join(missing)} (has {', '.join(heads) or 'none'})")
    for k in ("y_train", "y_test"):
        if heads[k][1].kind not in "iuf":
            raise DataError(f"{k}: labels must be integer class indices 0..C-1, got dtype {heads[k][1]} "
                            f"(map class names to integers and put the names in class_names)")
    for k in ("X_train", "X_test"):
        if heads[k][1].kind not in "f":
            raise DataError(f"{k}: must be a float array, got dtype {heads[k][1]}")
        if len(heads[k][0]) == 2:
            check_feature_dim(heads[k][0][1], k)  # from the header, before any array is read
    if "text_embeddings" in heads and heads["text_embeddings"][1].kind != "f":  # from the header
        raise DataError(f"text_embeddings: must be a finite float array, got dtype "
                        f"{heads['text_embeddings'][1]}")
    arrs = load_npz(p, field="features")
    for k in ("X_train", "X_test"):
        if not np.issubdtype(arrs[k].dtype, np.floating):
            raise DataError(f"{k}: must be a float array, got dtype {arrs[k].dtype}")
    for xk, yk in (("X_train", "y_train"), ("X_test", "y_test")):
        if arrs[xk].ndim == 2 and arrs[xk].shape[0] > 0 and arrs[xk].shape[1] == 0:
            raise DataError(f"{xk}: has no feature columns (shape {arrs[xk].shape})")
        if arrs[xk].size == 0 or arrs[yk].size == 0:
            raise DataError(f"{xk}: has no samples (shape {arrs[xk].shape}, {yk} shape {arrs[yk].shape})")
    for k in ("y_train", "y_test"):
        y = arrs[k]
        if y.ndim != 1:
            raise DataError(f"{k}: must be 1-D (one label per sample), got shape {y.shape}")
        if y.dtype.kind == "f" and not (np.all(np.isfinite(y)) and np.all(np.equal(np.mod(y, 1), 0))):
            raise DataError(f"{k}: labels must be integer class indices 0..C-1")
        if y.size and (y.min() < 0 or y.max() >= 2**31):
            raise DataError(f"{k}: labels must lie in [0, C-1], got range [{y.min():g}, {y.max():g}]")
    y_max = int(arrs["y_train"].max(initial=0))
    if "class_names" not in arrs and arrs["y_test"].size and int(arrs["y_test"].max()) > y_max:
        raise DataError(f"y_test: labels must lie in [0, {y_max}] (the classes of y_train; no class_names "
                        f"given), got up to {arrs['y_test'].max():g}")
    if "class_names" not in arrs and y_max >= MAX_CLASSES:
        raise DataError(f"y_train: labels go up to {y_max}; at most {MAX_CLASSES:,} classes are supported")
    if "class_names" in arrs:
        cn = arrs["class_names"]
        if cn.ndim != 1:  # a scalar string failed with "iteration over a 0-d array"
            raise DataError(f"class_names: must be a 1-D array of names, one per class, got shape {cn.shape}")
        names = [str(c) for c in cn]
        if any(not n.strip() for n in names) or len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1 or not n.strip()})
            raise DataError(f"class_names: every class needs its own non-empty name (charts and tables tell "
                            f"classes apart by it), got repeated or empty {dup[:5]!r}")
    else:
        names = [str(i) for i in range(y_max + 1)]
    return FeatureSet(
        X_train=arrs["X_train"].astype(np.float32),
        y_train=arrs["y_train"],
        X_test=arrs["X_test"].astype(np.float32),
        y_test=arrs["y_test"],
        class_names=names,
        text_embeddings=(None if arrs.get("text_embeddings") is None  # checked finite in FeatureSet
                         else arrs["text_embeddings"].astype(np.float32)),
        meta={"dataset": f"features:{p}", "encoder": "precomputed", "source_file": str(p.resolve())},
    )


#: The one error of a ``features`` spec without its file (the loader and the early check say it alike).
FEATURES_PATH_NEEDED = "give the file as features:<path.npz>"


@DATASETS.register("features")
def load_features_dataset(root: str | None = None, **_: Any) -> LoadedDataset:
    """``features:<file.npz>``: pre-computed features (no encoder is run)."""
    if not root:
        raise ConfigError("features", FEATURES_PATH_NEEDED)
    fs = load_feature_file(root)
    p = Path(root).expanduser().resolve()
    st = p.stat()
    return LoadedDataset(
        name=f"features:{p}",
        class_names=fs.class_names,
        features=fs,
        cache_key={"dataset": "features", "path": str(p), "size": st.st_size, "mtime": int(st.st_mtime)},
    )


@DATASETS.register("synthetic")
def load_synthetic_dataset(root: str | None = None, *, classes: int = 10, dim: int = 64, train_per_class: int = 200,
                           test_per_class: int = 50, effective_rank: float = 16.0, separation: float = 1.0,
                           data_seed: int = 0, shared_mean: float = 0.0, ambiguity: float = 0.0,
                           shift: float = 0.0, domain: str = "private") -> LoadedDataset:
    """``synthetic``: Gaussian class features with controllable classes, dimension, counts,
    spectrum, separation and public → private shift, deterministic from the options
    (:mod:`.synthetic`); set them with ``--dataset-arg`` / ``dataset_kwargs``. No encoder is run
    (the rows are the features). ``domain`` is set by :func:`public_source`, not by users."""
    from .synthetic import check_shift, synthetic_features

    if root:
        raise ConfigError("dataset", "synthetic takes no path; set its options with --dataset-arg "
                                     "(classes, dim, train_per_class, test_per_class, effective_rank, separation, "
                                     "data_seed, shared_mean, ambiguity, shift)")
    opts = dict(classes=classes, dim=dim, train_per_class=train_per_class, test_per_class=test_per_class,
                effective_rank=effective_rank, separation=separation, data_seed=data_seed)
    # the later options enter the cache key only when set, so earlier caches stay valid; the
    # shift moves the public domain only, so the private domain's key leaves it out
    later = [("shared_mean", shared_mean), ("ambiguity", ambiguity)]
    if domain == "public":
        later.append(("shift", shift))
    else:  # unused by the private domain, but a bad value is still a bad option, said as one
        check_shift(shift)
    # compared as numbers only once they are numbers: float("abc") raised a bare ValueError here
    # before the generator's own check could name the option
    opts.update({k: v for k, v in later if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0)})
    X_tr, y_tr, X_te, y_te = synthetic_features(**opts, domain=domain)
    names = [f"class {c}" for c in range(int(classes))]
    fs = FeatureSet(X_train=X_tr, y_train=y_tr, X_test=X_te, y_test=y_te, class_names=names,
                    meta={"dataset": "synthetic", "encoder": "precomputed", "synthetic": {**opts, "domain": domain}})
    key = {"dataset": "synthetic", **{k: float(v) for k, v in opts.items()}}
    if domain != "private":
        key["domain"] = domain
    return LoadedDataset(name="synthetic", class_names=names, features=fs, cache_key=key)


#: Loader options a run never sets itself: :func:`public_source` sets them.
_INTERNAL_DATASET_ARGS = frozenset({"domain"})
#: Loader options that change only the *public* rows a run may draw (the ``synthetic`` public
#: domain): the private rows, and so their privacy ledger, are the same at every value.
PUBLIC_DOMAIN_OPTIONS = frozenset({"shift"}) | _INTERNAL_DATASET_ARGS


def public_classes_mismatch(dataset: str, dataset_kwargs: Mapping[str, Any] | None, public_from: str,
                            dataset_root: str | None = None) -> str | None:
    """The message when the public domain's classes are not ``dataset``'s, from the two listings
    (:func:`load_dataset`, nothing encoded), else ``None``: the check :func:`.splits.make_split`
    makes on the features, answered before anything is extracted.

    Raises:
        MixDPError: either data set cannot be listed (its own message).
    """
    kw = dict(dataset_kwargs or {})
    pub_spec, pub_kw = public_source(dataset, kw, public_from, dataset_root)
    if pub_spec is None:
        return None
    a = load_dataset(dataset, root=dataset_root, **kw).class_names
    b = load_dataset(pub_spec, **pub_kw).class_names
    if list(a) != list(b):
        return f"{public_from!r} has classes {list(b)[:12]}, but the private dataset has {list(a)[:12]}; they must be equal"
    return None


def public_source(dataset: str, dataset_kwargs: dict[str, Any], public_from: str | None,
                  dataset_root: str | None = None) -> tuple[str | None, dict[str, Any]]:
    """The dataset spec and loader options of a run's public rows.

    ``public_from=None``: ``(None, {})`` (the public rows come from the dataset's own training
    rows). ``public_from="synthetic"`` with ``dataset="synthetic"``: the same options in the
    public domain (``domain="public"``, :mod:`.synthetic`: class means moved by ``shift``).
    Any other spec: ``(public_from, {})``, loaded with its own defaults (a real second domain,
    e.g. ``image_folder:PACS/photo``).

    Raises:
        ConfigError: ``shift`` set where no public domain uses it (``public_from`` is not
            ``"synthetic"``), or ``public_from="synthetic"`` for another dataset.
    """
    key, _ = parse_spec(dataset)
    if public_from is not None and parse_spec(public_from)[0] == "synthetic":
        if public_from != "synthetic":
            raise ConfigError("public_from", f"the synthetic public domain is named 'synthetic' alone (it takes no "
                                             f"path), got {public_from!r}")
        if key != "synthetic":
            raise ConfigError("public_from", f"'synthetic' is the public domain of dataset 'synthetic' only, "
                                             f"not of {dataset!r}")
        return "synthetic", {**dataset_kwargs, "domain": "public"}
    if key == "synthetic" and float(dataset_kwargs.get("shift") or 0.0) != 0.0:
        raise ConfigError("shift", "moves the public domain only: set public_from='synthetic' with it "
                                   "(without it the public rows are the private domain's)")
    if public_from is not None and _same_data(dataset, public_from,
                                              dataset_root or (dataset_kwargs or {}).get("root")):
        # loaded again with its own defaults, its train rows would not be this run's: with
        # another split_seed or test_fraction some of the run's test rows would be public
        raise ConfigError("public_from", f"{public_from!r} is the run's own data set; leave public_from unset: the "
                                         f"public rows then come from its training rows (public_per_class)")
    return public_from, {}


def data_location(dataset: str, root: str | None = None) -> tuple[str, str | None]:
    """``(kind, path)`` of the data a spec reads: a CD-FSL target is the ``image_folder`` it loads
    (at the given folder, else at ``<data root>/<its folder>``); a data set named by its path
    (``PATH_NAMED_DATASETS``) has its resolved path (the spec's, else ``root``); any other has
    ``None`` (any copy of a named set, CIFAR-10 in another folder, is the same data). The privacy
    ledger's identity and the public-data check both read it. No file is read."""
    name, arg = parse_spec(dataset)
    folder = arg or root
    if name in CDFSL_FOLDERS:
        if not folder:
            from .roots import data_root

            folder = str(data_root() / CDFSL_FOLDERS[name][0])
        name = "image_folder"
    return name, (real_path(folder) if folder and name in PATH_NAMED_DATASETS else None)


def _same_data(a: str, b: str, root_a: str | None = None) -> bool:
    """Whether two dataset specs read the same data (:func:`data_location`), or the same file or
    folder under two names (a hard link, a bind mount: the same device and inode). A review fed a
    folder as its own public data under a second spelling (``cdfsl_eurosat:<f>`` beside
    ``image_folder:<f>``, a hard-linked feature file): the public rows were the private ones, and
    the ε bounded nothing."""
    (ka, pa), (kb, pb) = data_location(a, root_a), data_location(b)
    if ka != kb:
        return False
    return pa == pb or same_file(pa, pb)


def same_file(a: str | None, b: str | None) -> bool:
    """Whether two paths are one file or folder on disk (the same device and inode: a hard link,
    another name of it); ``False`` where either is ``None`` or cannot be read."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except (OSError, TypeError):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


# ------------------------------------------------------------------ torchvision sets
class _TorchvisionSource:
    """Adapts a torchvision dataset (PIL image, label) to the ImageSource protocol.

    Where the data set reads one file per item (``paths``: EuroSAT, Caltech101, Food101, ...)
    the file is decoded here, as an image folder's is: the pixel limit is checked from the
    header before decoding, and a file that cannot be decoded raises
    :class:`~mixdp_core.errors.CorruptImageError` naming it (so ``skip_corrupt`` skips it).
    Items held in memory (CIFAR, STL10) come from the data set; a failure there is a
    CorruptImageError naming ``<name>[i]``, and the pixel limit is checked after it.
    """

    def __init__(self, ds: Any, labels: np.ndarray, paths: list[str] | None = None, name: str = "dataset"):
        self.ds = ds
        self.labels = np.asarray(labels, dtype=np.int64)
        self.paths = paths
        self.name = name

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        from .base import check_image_pixels, decode_image_file

        if self.paths is not None:
            return decode_image_file(self.paths[i]), int(self.labels[i])
        from PIL import UnidentifiedImageError

        from ..errors import CorruptImageError

        where = f"{self.name}[{i}]"
        try:
            img, _ = self.ds[i]
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
            raise CorruptImageError(where, str(e)) from None
        check_image_pixels(where, *img.size)
        return img.convert("RGB"), int(self.labels[i])


def _tv_paths(ds: Any) -> list[str] | None:
    """The file each item of the torchvision data set ``ds`` is read from (item order), or
    ``None`` where its items are not one file each (CIFAR, STL10: arrays in memory)."""
    n = len(ds)
    samples = getattr(ds, "samples", None)  # ImageFolder-based: EuroSAT
    if isinstance(samples, list) and len(samples) == n:
        return [str(s[0]) for s in samples]
    for attr in ("_image_files", "_images"):  # Flowers102, DTD, Food101 / OxfordIIITPet
        files = getattr(ds, attr, None)
        if isinstance(files, list) and len(files) == n:
            return [str(f) for f in files]
    if type(ds).__name__ == "Caltech101" and len(getattr(ds, "index", ())) == n:
        # the file Caltech101.__getitem__ opens for item k
        return [os.path.join(ds.root, "101_ObjectCategories", ds.categories[y], f"image_{k:04d}.jpg")
                for y, k in zip(ds.y, ds.index)]
    return None


def _own_folder(ds: Any, base: Path) -> Path:
    """The folder of ``base`` that holds this torchvision set's files (``base_folder``, e.g.
    ``cifar-10-batches-py``): its identity is read there, not over a shared data root whose
    other files would change the key (and, past MAX_FOLDER_FILES entries, refuse the load)."""
    sub = getattr(ds, "base_folder", None)
    own = base / sub if isinstance(sub, str) and sub else base
    return own if own.is_dir() else base


def _tv_identity(paths: list[str] | None, base: Path) -> str:
    """16 hex digits identifying the files of a torchvision data set: path, size,
    ``st_mtime_ns``, ``st_ctime_ns`` and ``st_ino`` of each item's file (stat only), or of
    every file under ``base`` where items are not files (CIFAR's batches; at most
    :data:`MAX_FOLDER_FILES` of them). A file that cannot be stat'ed enters as missing (it
    fails, or is skipped, when it is decoded)."""
    import hashlib

    if paths is None:
        paths, budget = [], [MAX_FOLDER_FILES]
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for f in sorted(filenames):
                _count_entry(budget, base)
                paths.append(os.path.join(dirpath, f))
    h = hashlib.sha256()
    for p in paths:
        try:
            h.update((":".join(map(str, (p, *stat_identity(os.stat(p))))) + "\n").encode())
        except OSError:
            h.update(f"{p}:missing\n".encode())
    return h.hexdigest()[:16]


def _labels_of(ds: Any) -> np.ndarray:
    for attr in ("targets", "labels", "_labels", "y"):
        v = getattr(ds, attr, None)
        if v is not None:
            return np.asarray(v, dtype=np.int64)
    return np.asarray([ds[i][1] for i in range(len(ds))], dtype=np.int64)


def _names_of(ds: Any, n: int) -> list[str]:
    for attr in ("classes", "categories"):
        v = getattr(ds, attr, None)
        if v:
            return [str(c) for c in v]
    return [str(i) for i in range(n)]


def _make_tv_loader(name: str, cls_name: str, train_kw: dict | None, test_kw: dict | None, url_hint: str):
    def loader(root: str | None = None, *, download: bool = False, test_fraction: float = 0.2, split_seed: int = 0, **_: Any) -> LoadedDataset:
        import torchvision.datasets as tvd

        if train_kw is None:
            _check_test_fraction(test_fraction)  # before the data set is opened
        base = Path(root).expanduser() if root else default_data_dir() / name
        cls = getattr(tvd, cls_name)
        try:
            if train_kw is not None:
                tr_ds = cls(str(base), download=download, **train_kw)
                te_ds = cls(str(base), download=download, **test_kw)
                y_tr, y_te = _labels_of(tr_ds), _labels_of(te_ds)
                f_tr, f_te = _tv_paths(tr_ds), _tv_paths(te_ds)
                tr_src = _TorchvisionSource(tr_ds, y_tr, f_tr, name)
                te_src = _TorchvisionSource(te_ds, y_te, f_te, name)
                names = _names_of(tr_ds, int(y_tr.max()) + 1)
                files = None if f_tr is None or f_te is None else f_tr + f_te
                own = _own_folder(tr_ds, base)
            else:  # no official split: stratified split of the whole set
                ds = cls(str(base), download=download)
                y = _labels_of(ds)
                tr, te = _stratified_split(y, test_fraction, split_seed)
                import torch.utils.data as tud

                files = _tv_paths(ds)
                own = _own_folder(ds, base)
                tr_src = _TorchvisionSource(tud.Subset(ds, tr.tolist()), y[tr],
                                            None if files is None else [files[i] for i in tr], name)
                te_src = _TorchvisionSource(tud.Subset(ds, te.tolist()), y[te],
                                            None if files is None else [files[i] for i in te], name)
                names = _names_of(ds, int(y.max()) + 1)
        except (RuntimeError, FileNotFoundError, OSError) as e:
            if download:
                raise DataError(f"{name}: download into {str(base)!r} failed ({e}); check your network or place the files there by hand") from None
            raise DataError(
                f"{name}: dataset files not found under {str(base)!r}. Pass download=True "
                f"(CLI: `mixdp encode --download`, or `--dataset-arg download=true` for the other commands) to fetch them from {url_hint} when online, or place the "
                f"extracted files there (torchvision.datasets.{cls_name} layout), or set MIXDP_DATA."
            ) from None
        return LoadedDataset(
            name=name,
            class_names=names,
            train=tr_src,
            test=te_src,
            # what selects the rows (the split options of a split-less set) and the files' identity
            cache_key={"dataset": name, "root": str(base.resolve()),
                       "test_fraction": test_fraction if train_kw is None else None,
                       "split_seed": split_seed if train_kw is None else None,
                       "files": _tv_identity(files, own)},
        )

    loader.__doc__ = f"torchvision ``{cls_name}`` ({url_hint}); needs the files or ``download=True``."
    return loader


for _name, _cls, _tr, _te, _url in [
    ("cifar10", "CIFAR10", {"train": True}, {"train": False}, "https://www.cs.toronto.edu/~kriz/"),
    ("cifar100", "CIFAR100", {"train": True}, {"train": False}, "https://www.cs.toronto.edu/~kriz/"),
    ("stl10", "STL10", {"split": "train"}, {"split": "test"}, "https://cs.stanford.edu/~acoates/stl10/"),
    ("food101", "Food101", {"split": "train"}, {"split": "test"}, "https://data.vision.ee.ethz.ch/cvl/datasets_extra/food-101/"),
    ("flowers102", "Flowers102", {"split": "train"}, {"split": "test"}, "https://www.robots.ox.ac.uk/~vgg/data/flowers/102/"),
    ("oxford_pets", "OxfordIIITPet", {"split": "trainval"}, {"split": "test"}, "https://www.robots.ox.ac.uk/~vgg/data/pets/"),
    ("dtd", "DTD", {"split": "train"}, {"split": "test"}, "https://www.robots.ox.ac.uk/~vgg/data/dtd/"),
    ("eurosat", "EuroSAT", None, None, "https://github.com/phelber/EuroSAT"),
    ("caltech101", "Caltech101", None, None, "https://data.caltech.edu/records/mzrjq-6wc02"),
]:
    DATASETS.add(_name, _make_tv_loader(_name, _cls, _tr, _te, _url))


def parse_spec(spec: str) -> tuple[str, str | None]:
    """Split ``"image_folder:/x"`` into ``("image_folder", "/x")``; plain keys give ``(key, None)``."""
    if ":" in spec:
        key, _, arg = spec.partition(":")
        return key, (arg or None)
    return spec, None


#: Registered datasets whose rows are already features: no encoder runs on them.
FEATURE_DATASETS = frozenset({"features", "synthetic"})
#: Datasets whose data are named by the path they read (any other registered dataset is named
#: by its key: digits and synthetic read no path, a torchvision set or a CD-FSL target is the
#: same data in whichever folder it was extracted; a CD-FSL target given a folder of its own is
#: keyed by the ledger as that ``image_folder``). The privacy ledger keys on this.
PATH_NAMED_DATASETS = frozenset({"image_folder", "features"})

#: ``data_fingerprint``'s memo: ``{args: (monotonic time, fingerprint)}``, kept this many
#: seconds (a sweep hashes its configs within seconds; a folder is scanned once for them).
_FINGERPRINT_TTL_S = 5.0
_FINGERPRINTS: dict[str, tuple[float, Any]] = {}


def data_fingerprint(dataset: str, dataset_root: str | None = None,
                     dataset_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """What the data of a path-named data set (:data:`PATH_NAMED_DATASETS`) are *now*, for
    run identity (:meth:`~mixdp_core.runs.runner.RunConfig.config_hash`): ``None`` for the
    others (their name and options are the data).

    The path resolved against the working directory (the CLI reads a relative path there;
    the app resolves paths to absolute ones before), and for a file its stat identity
    (:func:`~mixdp_core._io.stat_identity`), for a folder the loader's content key (its bounded
    scan: file list and each file's stat identity). Two folders with the same relative spec,
    or a feature file replaced in place, are then different runs, not one reused for the other.
    """
    name, arg = parse_spec(str(dataset).strip())
    kwargs = dict(dataset_kwargs or {})
    path = arg or dataset_root or kwargs.get("root")
    if name not in PATH_NAMED_DATASETS or not path:
        return None
    real = real_path(path)
    memo_key = json.dumps([name, real, {k: v for k, v in kwargs.items() if k != "root"}], sort_keys=True,
                          default=str)
    now = time.monotonic()
    hit = _FINGERPRINTS.get(memo_key)
    if hit is not None and now - hit[0] < _FINGERPRINT_TTL_S:
        return hit[1]
    out: dict[str, Any] = {"path": real}
    try:
        if os.path.isfile(real):
            out["stat"] = list(stat_identity(os.stat(real)))
        elif os.path.isdir(real):
            opts = {k: v for k, v in kwargs.items() if k != "root"}
            out["content"] = load_dataset(f"{name}:{real}", **opts).cache_key
        else:
            out["missing"] = True
    except (OSError, DataError, ConfigError) as e:  # the run itself reports it; the identity says so
        out["unreadable"] = type(e).__name__
    if len(_FINGERPRINTS) > 256:
        _FINGERPRINTS.clear()
    _FINGERPRINTS[memo_key] = (time.monotonic(), out)  # from the scan's end: a long scan is reused
    return out


def carries_features(spec: str) -> bool:
    """Whether the dataset ``spec`` brings its own features (``synthetic``, ``features:<npz>``),
    so that the run's encoder is not used (the UI says so instead of showing one)."""
    return parse_spec(str(spec))[0] in FEATURE_DATASETS


#: The loader options a user may set (``--dataset-arg``, ``RunConfig.dataset_kwargs``), with
#: their ranges; each loader takes the subset in its signature.
DATASET_ARG_SPECS: dict[str, Any] = {}


def _dataset_arg_specs() -> dict[str, Any]:
    from ..config import SEED_RANGE, Interval, ParamSpec

    if not DATASET_ARG_SPECS:
        DATASET_ARG_SPECS.update(
            max_per_class=ParamSpec(name="max_per_class", type=int, default=None, optional=True,
                                    range=Interval(1, 10**7), help="keep the first n files per class"),
            max_test_per_class=ParamSpec(name="max_test_per_class", type=int, default=None, optional=True,
                                         range=Interval(1, 10**7), help="keep the first n test files per class"),
            test_fraction=ParamSpec(name="test_fraction", type=float, default=0.2,
                                    range=Interval(0, 1, closed="neither"), help="share of a split-less set for test"),
            split_seed=ParamSpec(name="split_seed", type=int, default=0, range=SEED_RANGE,
                                 help="seed of the train/test split of a split-less set"),
            download=ParamSpec(name="download", type=bool, default=False, help="download if missing"),
            # synthetic (checked here, before a run is created, with the loader's own ranges)
            classes=ParamSpec(name="classes", type=int, default=10, range=Interval(2, 1000), help="classes"),
            dim=ParamSpec(name="dim", type=int, default=64, range=Interval(2, 4096), help="feature dimension"),
            train_per_class=ParamSpec(name="train_per_class", type=int, default=200, range=Interval(2, 5000),
                                      help="train rows per class (public + private pool)"),
            test_per_class=ParamSpec(name="test_per_class", type=int, default=50, range=Interval(1, 1000),
                                     help="test rows per class"),
            effective_rank=ParamSpec(name="effective_rank", type=float, default=16.0, range=Interval(0.5, 1e6),
                                     help="decay scale r of the covariance spectrum 1/(1 + j/r)"),
            separation=ParamSpec(name="separation", type=float, default=1.0, range=Interval(0, 100),
                                 help="class-mean scale against the within-class noise"),
            data_seed=ParamSpec(name="data_seed", type=int, default=0, range=SEED_RANGE,
                                help="seed of the generated data (the run's seed makes the split)"),
            shared_mean=ParamSpec(name="shared_mean", type=float, default=0.0, range=Interval(0, 100),
                                  help="norm of a nonnegative mean shared by all classes, in units of sqrt(dim)"),
            ambiguity=ParamSpec(name="ambiguity", type=float, default=0.0, range=Interval(0, 0.5),
                                help="share of rows drawn around another class's mean, label kept"),
            shift=ParamSpec(name="shift", type=float, default=0.0, range=Interval(0, 10),
                            help="public -> private domain shift: how far each public class mean moves, in units "
                                 "of the class means' spread (with public_from='synthetic')"),
        )
    return DATASET_ARG_SPECS


def check_dataset_kwargs(spec: str, kwargs: dict[str, Any]) -> None:
    """Refuse a loader option the dataset does not take, or a value out of its range.

    Loaders accept ``**_`` (so that internal callers may pass options uniformly); a user's
    unknown key would then be ignored in silence, so the options a user sets are checked
    here against the loader's own keyword parameters and :data:`DATASET_ARG_SPECS`.

    Raises:
        ConfigError: naming the key and what the dataset takes.
    """
    import inspect

    from ..config import check

    key, _ = parse_spec(spec)
    loader = DATASETS.get(key)
    takes = [p.name for p in inspect.signature(loader).parameters.values()
             if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
             and p.name not in _INTERNAL_DATASET_ARGS]
    specs = _dataset_arg_specs()
    for k, v in kwargs.items():
        if k not in takes:
            raise ConfigError(k, f"not an option of dataset {key!r}; it takes: {', '.join(takes) or 'none'}")
        if k in specs and (v is not None or not getattr(specs[k], "optional", False)):
            check(specs[k], v, field=k)  # None only where the option means "none" (max_per_class)


def check_dataset_source(spec: str, root: str | None = None) -> None:
    """The cheap checks of where a dataset's rows come from, before any run row exists: an
    ``image_folder`` needs an existing folder, ``features`` a readable ``.npz`` (its headers
    only: type, dtypes, size limit). The loaders run the same checks again when they load.

    Raises:
        ConfigError: no folder / file given. DataError: it does not exist or is not usable.
    """
    key, arg = parse_spec(spec)
    path = arg or root
    if key == "image_folder":
        if not path:
            raise ConfigError("root", "image_folder needs --root <folder with one sub-folder per class>")
        try:
            is_dir = Path(path).expanduser().is_dir()
        except OSError as e:  # e.g. a folder above it the user may not enter
            raise DataError(f"root: cannot read {str(Path(path).expanduser())!r} ({e.strerror or e})") from None
        if not is_dir:
            raise DataError(f"root: {str(Path(path).expanduser())!r} is not a folder")
    elif key == "features":
        if not path:
            raise ConfigError("features", FEATURES_PATH_NEEDED)
        from ..safe_npz import npz_headers

        npz_headers(Path(path).expanduser())


def load_dataset(spec: str, *, root: str | None = None, **kwargs: Any) -> LoadedDataset:
    """Load the dataset named by ``spec`` (see module docstring).

    Args:
        spec: registry key, or ``key:<path>``.
        root: folder (or file) of the dataset; the path in the spec wins if both are given.
        **kwargs: loader options (``download``, ``test_fraction``, ``split_seed``,
            ``max_per_class``, ...).

    Raises:
        UnknownNameError: unknown key (the message lists the datasets).
        DataError / ConfigError: missing files, bad folder, bad feature file.
    """
    key, arg = parse_spec(spec)
    loader = DATASETS.get(key)
    return loader(arg or root, **kwargs)
