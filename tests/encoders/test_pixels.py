import numpy as np
import pytest
from PIL import Image
from sklearn.datasets import load_digits

from mixdp_core.data.base import ArrayImageSource, CorruptImageError, FileImageSource
from mixdp_core.encoders import ENCODERS
from mixdp_core.encoders.pixels import standardize_per_image
from mixdp_core.errors import ConfigError, DataError


@pytest.fixture(scope="module")
def digits():
    d = load_digits()
    return d.images[:40], d.target[:40]


def test_per_image_standardization_is_zero_mean_unit_std(digits):
    X, _ = digits
    Z = ENCODERS.get("pixels")().encode_arrays(X)
    assert Z.shape == (40, 64) and Z.dtype == np.float32
    np.testing.assert_allclose(Z.mean(axis=1), 0.0, atol=1e-5)
    np.testing.assert_allclose(Z.std(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), np.sqrt(64), rtol=1e-5)


def test_features_of_one_image_do_not_depend_on_the_others(digits):
    """DP property: no dataset statistic, so changing other rows never changes row 0."""
    X, _ = digits
    enc = ENCODERS.get("pixels")()
    base = enc.encode_arrays(X)[0]
    X2 = X.copy()
    X2[1:] = 16 - X2[1:]  # change every other image
    np.testing.assert_array_equal(enc.encode_arrays(X2)[0], base)
    np.testing.assert_array_equal(enc.encode_arrays(X[:1])[0], base)


def test_constant_image_maps_to_zero():
    Z = standardize_per_image(np.array([[3.0, 3.0, 3.0], [0.0, 1.0, 2.0]]))
    np.testing.assert_array_equal(Z[0], 0.0)
    np.testing.assert_allclose(Z[1], [-1.2247449, 0.0, 1.2247449], rtol=1e-6)


def test_range_mode_maps_fixed_range_to_minus_one_one(digits):
    X, _ = digits
    enc = ENCODERS.get("pixels")(standardize="range", value_range=(0, 16))
    Z = enc.encode_arrays(X)
    np.testing.assert_allclose(Z, X.reshape(40, -1) / 8.0 - 1.0, atol=1e-6)
    with pytest.raises(ConfigError, match="value_range"):
        ENCODERS.get("pixels")(standardize="range").encode_arrays(X)  # float digits, no range
    u8 = ENCODERS.get("pixels")(standardize="range").encode_arrays(np.array([[[0, 255]]], dtype=np.uint8))
    np.testing.assert_allclose(u8, [[-1.0, 1.0]])


def test_bad_config_names_field():
    with pytest.raises(ConfigError, match="standardize"):
        ENCODERS.get("pixels")(standardize="dataset_mean")
    with pytest.raises(ConfigError, match="value_range"):
        ENCODERS.get("pixels")(value_range=(1, 1))


def test_images_path_matches_arrays_path(digits):
    """encode_images on an 8-bit ArrayImageSource ~= encode_arrays on raw digits (quantization only)."""
    X, y = digits
    enc = ENCODERS.get("pixels")()
    A = enc.encode_arrays(X)
    calls = []
    B, kept = enc.encode_images(ArrayImageSource(X, y, value_range=(0, 16)), progress=lambda d, n: calls.append((d, n)))
    assert B.shape == (40, 64) and kept.tolist() == list(range(40))
    assert np.abs(A - B).max() < 0.05
    assert calls[-1] == (40, 40)


def test_size_mismatch_and_resize(tmp_path):
    paths = []
    for i, size in enumerate([(8, 8), (10, 10)]):
        p = tmp_path / f"{i}.png"
        Image.fromarray(np.full(size, 40 * (i + 1), dtype=np.uint8) + np.eye(*size, dtype=np.uint8)).save(p)
        paths.append(p)
    src = FileImageSource(paths, np.array([0, 1]))
    with pytest.raises(DataError, match="image_size"):
        ENCODERS.get("pixels")().encode_images(src)
    Z, kept = ENCODERS.get("pixels")(image_size=8).encode_images(src)
    assert Z.shape == (2, 8 * 8 * 3) and kept.tolist() == [0, 1]


def test_corrupt_file_raises_naming_it_or_is_skipped(tmp_path, rng_images):
    good = []
    for i in range(2):
        p = tmp_path / f"ok{i}.png"
        Image.fromarray(rng_images[i]).save(p)
        good.append(p)
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    src = FileImageSource([good[0], bad, good[1]], np.array([0, 1, 0]))
    enc = ENCODERS.get("pixels")()
    with pytest.raises(CorruptImageError, match="broken.jpg"):
        enc.encode_images(src)
    with pytest.warns(UserWarning, match="broken.jpg"):
        Z, kept = enc.encode_images(src, skip_corrupt=True)
    assert kept.tolist() == [0, 2]
    ref, _ = enc.encode_images(FileImageSource(good, np.array([0, 0])))
    np.testing.assert_array_equal(Z, ref)


def test_value_range_enters_the_key_when_it_changes_the_numbers(digits):
    """With image_size, a resized array is quantized and clipped by value_range: two ranges are
    two feature sets and must be two cache keys (they shared one: a stale hit)."""
    X, _ = digits
    P = ENCODERS.get("pixels")
    a, b = P(value_range=(0, 16), image_size=16), P(value_range=(0, 2), image_size=16)
    assert a.cache_key() != b.cache_key()
    assert np.abs(a.encode_arrays(X) - b.encode_arrays(X)).max() > 0.5
    # without a resize per-image standardization is scale-free: the range is left out
    assert P(value_range=(0, 16)).cache_key() == P(value_range=(0, 2)).cache_key() == P().cache_key()
    np.testing.assert_array_equal(P(value_range=(0, 16)).encode_arrays(X), P(value_range=(0, 2)).encode_arrays(X))


def test_feature_dimension_is_refused_after_the_first_image(monkeypatch):
    """The dimension is known from the first image: the rest are not decoded (six 3000 px PNGs
    held 3.2 GB before the FeatureSet refused them)."""
    monkeypatch.setenv("MIXDP_MAX_FEATURE_DIM", "100")
    imgs = np.zeros((5, 16, 16, 3), dtype=np.uint8)

    class Counting(ArrayImageSource):
        decoded = 0

        def __getitem__(self, i):
            Counting.decoded += 1
            return super().__getitem__(i)

    with pytest.raises(DataError) as e:
        ENCODERS.get("pixels")().encode_images(Counting(imgs, np.zeros(5, dtype=np.int64)))
    assert Counting.decoded == 1 and str(e.value).startswith("pixels: 768 feature columns; the methods take at most 100")
    with pytest.raises(DataError, match="pixels: 768 feature columns"):
        ENCODERS.get("pixels")().encode_arrays(imgs)
    assert ENCODERS.get("pixels")(image_size=5).encode_images(Counting(imgs, np.zeros(5, dtype=np.int64)))[0].shape == (5, 75)


@pytest.mark.parametrize("given,expected", [([0, 16], (0.0, 16.0)), ("0,16", (0.0, 16.0)),
                                            ("(0, 16)", (0.0, 16.0)), ("[-1,1]", (-1.0, 1.0)),
                                            (np.array([0, 255]), (0.0, 255.0))])
def test_value_range_accepts_two_numbers(given, expected):
    assert ENCODERS.get("pixels")(value_range=given).value_range == expected


@pytest.mark.parametrize("bad", [5, "5", "0,1,2", [0, 1, 2], (1, 1), (3, 1), (0, float("nan")),
                                 (0, float("inf")), ("a", "b"), (True, 2), (-1e308, 1e308), {"lo": 0}])
def test_value_range_refused_in_one_line(bad):
    with pytest.raises(ConfigError) as e:
        ENCODERS.get("pixels")(value_range=bad)
    assert e.value.field == "value_range" and "\n" not in str(e.value)
    assert str(e.value).startswith("value_range: must be two finite numbers [lo, hi] with lo < hi")


def test_resize_uses_the_declared_source_range(digits):
    """get_features passes the data set's declared range (digits 0..16) to resize an array."""
    X, y = digits
    enc = ENCODERS.get("pixels")(image_size=16)
    with pytest.raises(ConfigError, match="value_range"):
        enc.encode_arrays(X)  # no range anywhere: not guessed from the data
    Z = enc.encode_arrays(X, source_range=(0, 16))
    ref, _ = enc.encode_images(ArrayImageSource(X, y, value_range=(0, 16)))
    assert Z.shape == (40, 256)
    np.testing.assert_array_equal(Z, ref)
    # the encoder's own value_range wins over the declared one
    own = ENCODERS.get("pixels")(image_size=16, value_range=(0, 2)).encode_arrays(X, source_range=(0, 16))
    np.testing.assert_array_equal(own, ENCODERS.get("pixels")(image_size=16).encode_arrays(X, source_range=(0, 2)))
