"""Builders of hostile inputs for the fault-injection suite (no big allocations: a 2 GiB
array or a 900 MiB zip member is produced from one repeated deflate block)."""

from __future__ import annotations

import io
import os
import struct
import zlib
from pathlib import Path

import numpy as np

_CHUNK = 16 * 2**20


def _repeated_zero_deflate(n_chunks: int) -> bytes:
    """Raw deflate stream of ``n_chunks * 16 MiB`` zero bytes, built from one block
    (after a full flush the compressor has no history, so every chunk compresses the same)."""
    z = bytes(_CHUNK)
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = co.compress(z) + co.flush(zlib.Z_FULL_FLUSH)
    last = co.compress(b"") + co.flush(zlib.Z_FINISH)
    return block * n_chunks + last


def write_zip(path: Path, members: list[tuple[str, bytes, int, int, int]]) -> Path:
    """Write a zip by hand: ``(name, raw_deflate_data, crc, declared_uncompressed, method)``.

    Lets a test declare any uncompressed size (to make a header that lies).
    """
    out = io.BytesIO()
    central = []
    for name, data, crc, usize, method in members:
        nb = name.encode()
        off = out.tell()
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data), usize, len(nb), 0))
        out.write(nb)
        out.write(data)
        central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21, crc, len(data),
                                   usize, len(nb), 0, 0, 0, 0, 0o100644 << 16, off) + nb)
    cd_off = out.tell()
    for c in central:
        out.write(c)
    cd_len = out.tell() - cd_off
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(central), len(central), cd_len, cd_off, 0))
    Path(path).write_bytes(out.getvalue())
    return Path(path)


def npz_bomb(path: Path) -> Path:
    """A ~10 MB ``.npz`` whose ``X_train`` is a 2 GiB float64 array of zeros (plus valid
    small y/test arrays), like the 1.96 MB file of the issue."""
    n = 2**28
    h = io.BytesIO()
    np.lib.format.write_array_header_1_0(h, {"descr": "<f8", "fortran_order": False, "shape": (n, 1)})
    hb = h.getvalue()
    co = zlib.compressobj(1, zlib.DEFLATED, -15)
    head = co.compress(hb) + co.flush(zlib.Z_FULL_FLUSH)
    data = head + _repeated_zero_deflate(128)
    crc = 0xE269C806  # crc32 of header + 2 GiB zeros (precomputed; irrelevant to the refusal)
    small = _npz_members({"y_train": np.zeros(4, np.int64), "X_test": np.zeros((4, 1), np.float32),
                          "y_test": np.zeros(4, np.int64)})
    return write_zip(path, [("X_train.npy", data, crc, len(hb) + 8 * n, 8)] + small)


def _npz_members(arrays: dict) -> list:
    out = []
    for k, a in arrays.items():
        b = io.BytesIO()
        np.lib.format.write_array(b, np.asarray(a), allow_pickle=True)
        raw = b.getvalue()
        co = zlib.compressobj(6, zlib.DEFLATED, -15)
        out.append((f"{k}.npy", co.compress(raw) + co.flush(), zlib.crc32(raw), len(raw), 8))
    return out


def zip_big_member(path: Path, mib: int = 900) -> Path:
    """A ~1 MB zip of class folders whose one member unpacks to ``mib`` MiB of zeros."""
    n = mib // 16
    data = _repeated_zero_deflate(n)
    png = tiny_png_bytes()
    co = zlib.compressobj(6, zlib.DEFLATED, -15)
    pd = co.compress(png) + co.flush()
    return write_zip(path, [("a/big.png", data, 0, n * _CHUNK, 8),
                            ("b/ok.png", pd, zlib.crc32(png), len(png), 8)])


def zip_lying_header(path: Path) -> Path:
    """A zip whose member claims 100 bytes but holds a 200 kB image-named blob."""
    raw = os.urandom(1000) * 200
    co = zlib.compressobj(6, zlib.DEFLATED, -15)
    data = co.compress(raw) + co.flush()
    png = tiny_png_bytes()
    co2 = zlib.compressobj(6, zlib.DEFLATED, -15)
    return write_zip(path, [("a/x.png", data, zlib.crc32(raw), 100, 8),
                            ("b/ok.png", co2.compress(png) + co2.flush(), zlib.crc32(png), len(png), 8)])


def tiny_png_bytes(seed: int = 0) -> bytes:
    from PIL import Image

    arr = np.random.default_rng(seed).integers(0, 255, size=(8, 8, 3), dtype=np.uint8)
    b = io.BytesIO()
    Image.fromarray(arr).save(b, format="PNG")
    return b.getvalue()


def feature_arrays(n_classes: int = 4, per_class: int = 10, dim: int = 6, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    y_tr = np.repeat(np.arange(n_classes), per_class)
    y_te = np.repeat(np.arange(n_classes), 5)
    return {
        "X_train": (rng.normal(size=(len(y_tr), dim)) + y_tr[:, None]).astype(np.float32),
        "y_train": y_tr.astype(np.int64),
        "X_test": (rng.normal(size=(len(y_te), dim)) + y_te[:, None]).astype(np.float32),
        "y_test": y_te.astype(np.int64),
    }


def save_npz(path: Path, arrays: dict) -> Path:
    np.savez(path, **arrays)
    return Path(path)


def header_without_data(path: Path) -> Path:
    """A valid zip whose ``X_train.npy`` member has a header announcing 10x6 float32 and no data."""
    arrs = feature_arrays()
    members = _npz_members({k: v for k, v in arrs.items() if k != "X_train"})
    h = io.BytesIO()
    np.lib.format.write_array_header_1_0(h, {"descr": "<f4", "fortran_order": False, "shape": (40, 6)})
    hb = h.getvalue()
    co = zlib.compressobj(6, zlib.DEFLATED, -15)
    members.append(("X_train.npy", co.compress(hb) + co.flush(), zlib.crc32(hb), len(hb), 8))
    return write_zip(path, members)


def image_tree(root: Path, classes=("a", "b"), per_class: int = 6) -> Path:
    for ci, c in enumerate(classes):
        d = root / c
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            (d / f"{i}.png").write_bytes(tiny_png_bytes(ci * 100 + i))
    return root
