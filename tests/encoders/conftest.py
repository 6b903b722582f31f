"""Shared fixtures for the encoder tests: tiny real images extracted from ../shared/data."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
CIFAR_TGZ = SHARED / "cifar10_images_jpg.tar.gz"
PACS_TGZ = SHARED / "pacs_jpg.tar.gz"


def extract_members(tgz: Path, wanted: list[str], dest: Path) -> list[Path]:
    """Extract the named members of ``tgz`` into ``dest`` (stops reading once all are found)."""
    out, todo = [], set(wanted)
    with tarfile.open(tgz, "r:gz") as tf:
        for m in tf:
            if m.name in todo:
                tf.extract(m, dest, filter="data")
                out.append(dest / m.name)
                todo.discard(m.name)
                if not todo:
                    break
    assert not todo, f"missing from {tgz.name}: {sorted(todo)}"
    return sorted(out, key=lambda p: wanted.index(str(p.relative_to(dest))))


@pytest.fixture(scope="session")
def cifar_files(tmp_path_factory) -> list[Path]:
    """Four CIFAR-10 test JPEGs: airplane 0000, airplane 0001, automobile 0000, bird 0000."""
    if not CIFAR_TGZ.is_file():
        pytest.skip(f"CIFAR-10 JPEG archive not found at {CIFAR_TGZ} (shared data folder absent)")
    names = ["test/airplane/0000.jpg", "test/airplane/0001.jpg", "test/automobile/0000.jpg", "test/bird/0000.jpg"]
    return extract_members(CIFAR_TGZ, names, tmp_path_factory.mktemp("cifar"))


@pytest.fixture(scope="session")
def pacs_photo_files(tmp_path_factory) -> dict[str, list[Path]]:
    """Two PACS photo-domain JPEGs each of elephant and guitar (227 px real photos)."""
    if not PACS_TGZ.is_file():
        pytest.skip(f"PACS JPEG archive not found at {PACS_TGZ} (shared data folder absent)")
    dest = tmp_path_factory.mktemp("pacs")
    with tarfile.open(PACS_TGZ, "r:gz") as tf:
        picked: dict[str, list[str]] = {"elephant": [], "guitar": []}
        for m in tf:
            parts = m.name.split("/")
            if m.isfile() and len(parts) == 4 and parts[1] == "photo" and parts[2] in picked and len(picked[parts[2]]) < 2:
                tf.extract(m, dest, filter="data")
                picked[parts[2]].append(m.name)
            if all(len(v) == 2 for v in picked.values()):
                break
    return {c: [dest / n for n in v] for c, v in picked.items()}


@pytest.fixture
def rng_images():
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(3, 32, 32, 3), dtype=np.uint8)
