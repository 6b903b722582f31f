import json

import numpy as np
import pytest

from mixdp_core.features import cache as cache_mod
from mixdp_core.features import get_features, load_cached


def test_digits_pixels_extract_then_hit(tmp_path):
    a = get_features("digits", "pixels", cache_dir=tmp_path)
    assert a.meta["cache_hit"] is False
    assert a.X_train.shape == (1258, 64) and a.X_test.shape == (539, 64)
    b = get_features("digits", "pixels", cache_dir=tmp_path)
    assert b.meta["cache_hit"] is True
    # float16 storage: equal up to half precision
    np.testing.assert_allclose(a.X_train, b.X_train, rtol=1e-3, atol=1e-3)
    assert np.array_equal(a.y_train, b.y_train) and b.class_names == a.class_names
    entries = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(entries) == 1
    meta = json.loads((entries[0] / "meta.json").read_text())
    assert meta["encoder"] == "pixels" and meta["dtype"] == "float16" and meta["dataset"] == "digits"


def test_float32_storage_is_exact_and_separate_entry(tmp_path):
    a = get_features("digits", "pixels", cache_dir=tmp_path, dtype="float32")
    b = get_features("digits", "pixels", cache_dir=tmp_path, dtype="float32")
    assert np.array_equal(a.X_train, b.X_train)
    get_features("digits", "pixels", cache_dir=tmp_path, dtype="float16")
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2


def test_key_depends_on_encoder_settings_and_dataset(png_tree, tmp_path):
    keys = set()
    keys.add(get_features(f"image_folder:{png_tree}", "pixels", cache_dir=tmp_path).meta["cache_key"])
    keys.add(get_features(f"image_folder:{png_tree}", "pixels", cache_dir=tmp_path, test_fraction=0.5).meta["cache_key"])
    keys.add(get_features("digits", "pixels", cache_dir=tmp_path).meta["cache_key"])
    assert len(keys) == 3


def test_interrupted_write_is_never_read_as_valid(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = np.savez

    def exploding_savez(f, **arrays):
        calls["n"] += 1
        f.write(b"PK\x03\x04 half written")
        raise KeyboardInterrupt  # e.g. Ctrl-C in the middle of the write

    monkeypatch.setattr(cache_mod.np, "savez", exploding_savez)
    with pytest.raises(KeyboardInterrupt):
        get_features("digits", "pixels", cache_dir=tmp_path)
    (entry,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert load_cached(entry) is None
    assert sorted(p.name for p in entry.iterdir()) == []  # temp file cleaned up, nothing left
    assert not (entry / "features.npz").exists()
    monkeypatch.setattr(cache_mod.np, "savez", real)
    fs = get_features("digits", "pixels", cache_dir=tmp_path)
    assert fs.meta["cache_hit"] is False and calls["n"] == 1


def test_missing_meta_means_reextract(tmp_path):
    get_features("digits", "pixels", cache_dir=tmp_path)
    (entry,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    (entry / "meta.json").unlink()
    assert get_features("digits", "pixels", cache_dir=tmp_path).meta["cache_hit"] is False


def test_a_damaged_entry_is_re_extracted_not_a_crash(tmp_path):
    """One flipped byte (bad CRC) or a file cut in half raised BadZipFile on every later run; the
    docstring's contract is a cache miss."""
    get_features("digits", "pixels", cache_dir=tmp_path)
    (entry,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    npz = entry / "features.npz"
    data = bytearray(npz.read_bytes())
    data[len(data) // 2] ^= 0xFF
    npz.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="unreadable"):
        assert get_features("digits", "pixels", cache_dir=tmp_path).meta["cache_hit"] is False
    npz.write_bytes(npz.read_bytes()[: len(data) // 2])
    with pytest.warns(UserWarning, match="unreadable"):
        assert get_features("digits", "pixels", cache_dir=tmp_path).meta["cache_hit"] is False


def test_feature_file_dataset_bypasses_encoder(tmp_path):
    rng = np.random.default_rng(0)
    p = tmp_path / "mine.npz"
    np.savez(p, X_train=rng.normal(size=(30, 5)).astype(np.float16), y_train=np.arange(30) % 3,
             X_test=rng.normal(size=(9, 5)), y_test=np.arange(9) % 3)
    fs = get_features(f"features:{p}", "efficientnet_lite0", cache_dir=tmp_path)
    assert fs.dim == 5 and fs.class_names == ["0", "1", "2"]


def test_image_folder_corrupt_file_skip_or_fail(png_tree, tmp_path):
    from mixdp_core.data import CorruptImageError

    (png_tree / "cat" / "zz_bad.jpg").write_bytes(b"\x00\x01not an image")
    with pytest.raises(CorruptImageError, match="zz_bad.jpg"):
        get_features(f"image_folder:{png_tree}", "pixels", cache_dir=tmp_path, test_fraction=0.5)
    with pytest.warns(UserWarning, match="skipped 1"):
        fs = get_features(f"image_folder:{png_tree}", "pixels", cache_dir=tmp_path, test_fraction=0.5, skip_corrupt=True)
    assert fs.X_train.shape[0] + fs.X_test.shape[0] == 18
    # a strict call afterwards is not served the lenient entry, one image short: it still refuses
    with pytest.raises(CorruptImageError, match="zz_bad.jpg"):
        get_features(f"image_folder:{png_tree}", "pixels", cache_dir=tmp_path, test_fraction=0.5)


def test_efficientnet_real_weights_on_image_folder(png_tree, tmp_path):
    fs = get_features(f"image_folder:{png_tree}", "efficientnet_lite0", cache_dir=tmp_path,
                      test_fraction=0.5, encoder_kwargs={"image_size": 64}, batch_size=8)
    assert fs.dim == 1280 and fs.X_train.shape[0] == 9
    assert np.all(np.isfinite(fs.X_train)) and fs.X_train.std() > 0


def test_atomic_write_leaves_old_file_or_new_file(tmp_path):
    from mixdp_core._io import atomic_write

    target = tmp_path / "f.bin"
    atomic_write(target, lambda f: f.write(b"old"))

    def boom(f):
        f.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]
    atomic_write(target, lambda f: f.write(b"new"))
    assert target.read_bytes() == b"new"


def test_a_miss_returns_exactly_what_a_hit_returns(tmp_path):
    """Cold and warm cache give the same arrays (the miss returned float32 features, the hit
    their float16 rounding: max diff 0.00098, another test error)."""
    a = get_features("digits", "pixels", cache_dir=tmp_path)
    b = get_features("digits", "pixels", cache_dir=tmp_path)
    assert a.meta["cache_hit"] is False and b.meta["cache_hit"] is True
    for k in ("X_train", "X_test", "y_train", "y_test"):
        assert getattr(a, k).dtype == getattr(b, k).dtype
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k))
    np.testing.assert_array_equal(a.X_train, a.X_train.astype(np.float16).astype(np.float32))
    with pytest.raises(cache_mod.ConfigError, match="dtype: must be 'float16' or 'float32'"):
        get_features("digits", "pixels", cache_dir=tmp_path, dtype="float64")


def test_float16_overflow_is_refused_naming_dtype():
    with pytest.raises(cache_mod.ConfigError, match="dtype: features reach .* use dtype='float32'"):
        cache_mod._as_stored(np.array([[7e4, 1.0]], dtype=np.float32), "float16")
    np.testing.assert_array_equal(cache_mod._as_stored(np.array([[7e4]], dtype=np.float32), "float32"), [[7e4]])


def test_digits_resize_uses_the_dataset_range_and_value_range_is_in_the_key(tmp_path):
    """digits could not be resized (value_range needed although digits declare 0..16), and a
    changed value_range got the other range's cached features."""
    from mixdp_core.data.datasets import load_dataset
    from mixdp_core.encoders import ENCODERS

    a = get_features("digits", "pixels", cache_dir=tmp_path, encoder_kwargs={"image_size": 16})
    assert a.dim == 256 and a.meta["cache_hit"] is False
    ref, _ = ENCODERS.get("pixels")(image_size=16).encode_images(load_dataset("digits").train)
    np.testing.assert_array_equal(a.X_train, ref.astype(np.float16).astype(np.float32))
    b = get_features("digits", "pixels", cache_dir=tmp_path, encoder_kwargs={"image_size": 16, "value_range": [0, 16]})
    c = get_features("digits", "pixels", cache_dir=tmp_path, encoder_kwargs={"image_size": 16, "value_range": [0, 2]})
    assert b.meta["cache_key"] != c.meta["cache_key"] and c.meta["cache_hit"] is False
    np.testing.assert_array_equal(a.X_train, b.X_train)  # the declared range is the given one
    assert np.abs(b.X_train - c.X_train).max() > 0.5


def test_save_tolerates_meta_removed_by_a_concurrent_writer(tmp_path, monkeypatch):
    """Two processes writing one entry: meta.json vanished between exists() and unlink()
    (FileNotFoundError, the features then went uncached)."""
    import os
    import pathlib

    from mixdp_core.featureset import FeatureSet

    y = np.repeat(np.arange(2), 5)
    fs = FeatureSet(np.ones((10, 3), np.float32), y, np.ones((10, 3), np.float32), y, ["a", "b"])
    cache_mod.save_features(tmp_path / "e", fs)
    real_exists = pathlib.Path.exists

    def racing_exists(self, *a, **k):
        out = real_exists(self, *a, **k)
        if self.name == "meta.json" and out:
            os.remove(self)  # the other writer's unlink lands here
        return out

    monkeypatch.setattr(pathlib.Path, "exists", racing_exists)
    cache_mod.save_features(tmp_path / "e", fs)  # no FileNotFoundError
    monkeypatch.setattr(pathlib.Path, "exists", real_exists)
    assert load_cached(tmp_path / "e") is not None
