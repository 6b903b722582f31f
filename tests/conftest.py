"""Shared fixtures: tiny real data, shared-data locations, isolated cache/run folders."""

from __future__ import annotations

import os
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory, monkeypatch):
    """Never touch the user's cache or run store from tests.

    The feature cache (and the encoders' exported and quantized models in it) is shared by
    the xdist workers of one test session, as a user's cache is shared by the app, the CLI
    and sweep workers: each model is then exported and quantized once per session instead of
    once per worker (seconds each), and the cache's concurrency is exercised on the way. A
    test that needs an empty cache sets its own ``MIXDP_CACHE``."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    monkeypatch.setenv("MIXDP_CACHE", str(shared / "feature-cache"))
    monkeypatch.setenv("MIXDP_HOME", str(base / "mixdp-home"))
    yield


@pytest.fixture(autouse=True)
def _keep_main_module():
    """Put back the ``__main__`` module a test replaced.

    Why: Streamlit's AppTest installs the page script it ran as ``__main__`` and leaves it
    there. Once any thread is alive (a test's job threads), the sweep engine's local pools use
    a forkserver, and its workers re-import ``__main__``: every later pool of the session
    re-ran app.py (streamlit and the page) in each worker, 3-10 s per pool."""
    main = sys.modules.get("__main__")
    yield
    if main is not None and sys.modules.get("__main__") is not main:
        sys.modules["__main__"] = main


@pytest.fixture(autouse=True)
def _scan_installed_components_once():
    """Keep the result of Streamlit's scan for installed components for the test session.

    Why: every new ``AppTest`` (Streamlit 1.67) reads the metadata of every installed
    distribution to look for custom components, 0.1-0.2 s each time: a quarter of the app
    page tests' CPU. Nothing is installed while the suite runs, so after the first real scan
    in a worker (once Streamlit's scanner module is imported) the same list is returned."""
    scanner = sys.modules.get("streamlit.components.v2.manifest_scanner")
    if scanner is not None and not hasattr(scanner.scan_component_manifests, "cache_info"):
        import functools

        real = scanner.scan_component_manifests
        cached = functools.lru_cache(maxsize=1)(lambda: tuple(real()))
        scanner.scan_component_manifests = functools.wraps(real)(lambda *a, **k: list(cached()))
        scanner.scan_component_manifests.cache_info = cached.cache_info
    yield


@pytest.fixture(scope="session")
def digits_features():
    """Digits as a FeatureSet of raw pixels (0..16 scaled to 0..1), fixed train/test split."""
    from mixdp_core.data.datasets import load_digits_dataset
    from mixdp_core.features.featureset import FeatureSet

    d = load_digits_dataset()
    Xtr, Xte = d.raw_arrays
    return FeatureSet(
        X_train=Xtr.reshape(len(Xtr), -1) / 16.0,
        y_train=d.train.labels,
        X_test=Xte.reshape(len(Xte), -1) / 16.0,
        y_test=d.test.labels,
        class_names=d.class_names,
        meta={"dataset": "digits", "encoder": "pixels"},
    )


def _extract_members(archive: Path, dest: Path, predicate) -> None:
    with tarfile.open(archive) as tf:
        members = [m for m in tf.getmembers() if m.isfile() and predicate(m.name)]
        tf.extractall(dest, members=members, filter="data")


@pytest.fixture(scope="session")
def cifar10_subset(tmp_path_factory):
    """A small CIFAR-10 image tree (20 train / 10 test per class) from ../shared/data."""
    archive = SHARED_DATA / "cifar10_images_jpg.tar.gz"
    if not archive.is_file():
        pytest.skip(f"CIFAR-10 archive not found at {archive} (shared data is absent on a fresh clone)")
    dest = tmp_path_factory.mktemp("cifar10")

    def keep(name: str) -> bool:
        parts = Path(name).parts
        if len(parts) < 3:
            return False
        split, stem = parts[-3], Path(parts[-1]).stem
        if not stem.isdigit():
            return False
        return (split == "train" and int(stem) < 20) or (split == "test" and int(stem) < 10)

    _extract_members(archive, dest, keep)
    roots = [p.parent for p in dest.rglob("train") if p.is_dir()]
    assert roots, "archive layout changed: no train/ folder"
    return roots[0]


def write_png_tree(root: Path, classes=("cat", "dog", "eel"), per_class: int = 6, size: int = 16, seed: int = 0) -> Path:
    """Generate a root/<class>/*.png tree of random images with a class-dependent mean."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for ci, c in enumerate(classes):
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            arr = np.clip(rng.normal(60 + 60 * ci, 30, size=(size, size, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(arr).save(root / c / f"{i:03d}.png")
    return root


@pytest.fixture
def png_tree(tmp_path):
    return write_png_tree(tmp_path / "imgs")


def pytest_collection_modifyitems(session, config, items):
    """Run the end-to-end browser walk first: it is the suite's longest test (~2 min alone),
    and with two xdist workers (``make test``) starting it first lets the other worker run the
    rest meanwhile instead of leaving it for last. Serial runs are unaffected in what they
    check (tests are independent; only the order changes)."""
    first = [it for it in items if it.nodeid.startswith("tests/app/test_e2e_browser.py")]
    if first:
        items[:] = first + [it for it in items if it not in first]
