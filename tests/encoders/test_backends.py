"""EfficientNet-Lite0 inference backends: selection, fallback, ORT/torch agreement, cache keys, ONNX files."""

from __future__ import annotations

import os

import numpy as np
import pytest

from mixdp_core.data.base import ArrayImageSource, CorruptImageError, FileImageSource
from mixdp_core.encoders import ENCODERS
from mixdp_core.encoders import efficientnet as eff
from mixdp_core.encoders._onnx import CALIBRATION_TAG, onnxruntime_available
from mixdp_core.errors import ConfigError

needs_ort = pytest.mark.skipif(not onnxruntime_available(), reason="onnxruntime is not installed")
E = ENCODERS.get("efficientnet_lite0")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx-models")


@pytest.fixture(scope="module")
def images():
    """Five 40x40 RGB images: smooth gradients with a disc (photo-like), and noise."""
    rng = np.random.default_rng(1)
    yy, xx = np.mgrid[0:40, 0:40]
    out = []
    for k in range(5):
        img = np.stack([xx * 6, yy * 6, 255 - xx * 3 * k], axis=-1).clip(0, 255).astype(np.uint8)
        img[(yy - 8 * k) ** 2 + (xx - 20) ** 2 < 60] = (250, 200 - 30 * k, 20)
        out.append(img)
    out[-1] = rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)
    return ArrayImageSource(np.stack(out), np.arange(5) % 2)


# ---------------------------------------------------------------------------- selection
@needs_ort
def test_auto_selects_onnxruntime_on_the_cpu():
    assert E(device="cpu").runtime == ("onnxruntime", eff.default_ort_precision())
    assert E(device="cpu", precision="fp32").runtime == ("onnxruntime", "fp32")
    assert E(device="cpu", backend="onnxruntime", precision="int8").runtime == ("onnxruntime", "int8")
    assert E(device="cpu", backend="torch").runtime == ("torch", "fp32")


def test_auto_on_a_gpu_device_uses_torch(monkeypatch):
    import mixdp_core.encoders.base as base

    monkeypatch.setattr(base, "select_device", lambda preferred=None: "cuda")
    assert E().runtime == ("torch", "fp32")
    with pytest.raises(ConfigError, match="backend"):
        E(device="cuda", backend="onnxruntime")


def test_fallback_to_torch_without_onnxruntime_warns_one_line(monkeypatch, images):
    monkeypatch.setattr(eff, "onnxruntime_available", lambda: False)
    enc = E(pretrained=None, image_size=32, device="cpu", batch_size=5)
    with pytest.warns(UserWarning, match="onnxruntime is not installed") as rec:
        assert enc.runtime == ("torch", "fp32")
    msgs = [str(w.message) for w in rec if "onnxruntime" in str(w.message)]
    assert len(msgs) == 1 and "\n" not in msgs[0] and "torch" in msgs[0].lower()
    F, kept = enc.encode_images(images)  # no second notice: the choice is made once
    assert F.shape == (5, 1280) and kept.tolist() == [0, 1, 2, 3, 4]
    assert enc.cache_key() == E(pretrained=None, image_size=32, backend="torch").cache_key()
    with pytest.raises(ConfigError, match="backend.*not installed"):
        E(backend="onnxruntime")


@pytest.mark.parametrize("field,value,allowed", [
    ("backend", "tensorrt", eff.BACKENDS),
    ("precision", "fp16", eff.PRECISIONS),
])
def test_bad_option_is_one_line_naming_field_and_allowed_values(field, value, allowed):
    with pytest.raises(ConfigError) as ei:
        E(**{field: value})
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith(f"{field}: ") and repr(value) in msg
    assert all(repr(a) in msg for a in allowed), msg
    assert ei.value.field == field and ei.value.choices == tuple(allowed)


def test_int8_needs_onnxruntime():
    with pytest.raises(ConfigError, match="precision.*int8.*onnxruntime"):
        E(backend="torch", precision="int8")


# ---------------------------------------------------------------------------- agreement
@needs_ort
@pytest.mark.parametrize("pretrained,size", [(None, 64), (None, 96), ("imagenet", 64)])
def test_onnxruntime_fp32_features_match_torch(pretrained, size, images, model_dir):
    torch_enc = E(pretrained=pretrained, image_size=size, backend="torch", num_threads=1, batch_size=2)
    ort_enc = E(pretrained=pretrained, image_size=size, backend="onnxruntime", precision="fp32",
                model_dir=model_dir, num_threads=1, batch_size=3)
    a, _ = torch_enc.encode_images(images)
    b, kept = ort_enc.encode_images(images)
    assert b.shape == (5, 1280) and b.dtype == np.float32 and kept.tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4 * np.abs(a).max())
    assert np.abs(b[0] - b[1]).max() > 1e-2 * np.abs(b).max()  # distinct images, distinct features


@needs_ort
def test_int8_features_are_close_to_fp32_and_batch_independent(images, model_dir):
    from mixdp_core.encoders._onnx import cpu_has_int8_dot

    fp = E(image_size=96, precision="fp32", model_dir=model_dir, batch_size=5)
    q = E(image_size=96, precision="int8", model_dir=model_dir, batch_size=5)
    a, _ = fp.encode_images(images)
    if cpu_has_int8_dot():
        b, _ = q.encode_images(images)
    else:  # an explicit int8 on an AVX2-only CPU says it can saturate (0.81-0.96 seen on one)
        with pytest.warns(UserWarning, match="without int8 dot-product"):
            b, _ = q.encode_images(images)
    cos = np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert (cos > (0.95 if cpu_has_int8_dot() else 0.75)).all(), cos
    assert np.abs(a - b).max() > 1e-3  # really quantized
    q.batch_size = 2
    c, _ = q.encode_images(images)
    np.testing.assert_allclose(c, b, rtol=1e-5, atol=1e-5)  # a feature never depends on its batch


# ---------------------------------------------------------------------------- cache keys
@needs_ort
def test_cache_key_unchanged_for_fp32_and_distinct_for_int8():
    torch_key = E(backend="torch", image_size=128).cache_key()
    # the key of the torch path is what it was before the onnxruntime backend existed
    assert torch_key == {
        "encoder": "efficientnet_lite0", "weights": "imagenet", "image_size": 128,
        "preprocess": "centercrop-bilinear-128px-mean[0.4980,0.4980,0.4980]-std[0.5020,0.5020,0.5020]",
    }
    assert E(backend="onnxruntime", precision="fp32", image_size=128).cache_key() == torch_key
    int8 = E(backend="onnxruntime", precision="int8", image_size=128).cache_key()
    assert int8 != torch_key and {k: int8[k] for k in torch_key} == torch_key
    assert int8["backend"] == "onnxruntime-int8" and int8["calibration"] == CALIBRATION_TAG and int8["onnxruntime"]

    from mixdp_core.features.cache import cache_key

    ds = {"dataset": "digits", "test_fraction": 0.3, "split_seed": 0}
    fp32 = E(precision="fp32", image_size=128).cache_key()
    assert cache_key(ds, torch_key, "float16") == cache_key(ds, fp32, "float16")
    assert cache_key(ds, torch_key, "float16") != cache_key(ds, int8, "float16")


# ---------------------------------------------------------------------------- ONNX files
@needs_ort
def test_onnx_file_written_once_atomically_with_weights_hash(tmp_path, images):
    d = tmp_path / "models"
    enc = E(pretrained=None, image_size=48, precision="int8", model_dir=d)
    F1, _ = enc.encode_images(images)
    names = sorted(os.listdir(d))
    assert len(names) == 2 and not any(n.startswith(".") for n in names), names  # fp32 + int8, no temp files
    fp32 = [n for n in names if n.endswith("-fp32.onnx")][0]
    int8 = [n for n in names if "-int8-" in n][0]
    digest = enc._weights_digest()
    assert len(digest) == 16 and fp32 == f"efficientnet_lite0-48px-w{digest}-fp32.onnx"
    assert int8.startswith(f"efficientnet_lite0-48px-w{digest}-int8-") and enc.onnx_path().name == int8
    mtimes = {n: (d / n).stat().st_mtime_ns for n in names}
    again = E(pretrained=None, image_size=48, precision="int8", model_dir=d)
    F2, _ = again.encode_images(images)  # reuses the files
    assert {n: (d / n).stat().st_mtime_ns for n in os.listdir(d)} == mtimes
    np.testing.assert_array_equal(F1, F2)
    # other weights, other file
    assert E(pretrained="imagenet", image_size=48, model_dir=d).onnx_path().name != int8


@needs_ort
def test_onnxruntime_backend_keeps_the_exported_model_on_the_cpu(tmp_path, monkeypatch, images):
    """On a GPU machine auto device selection says "cuda": the torch model was moved there in
    fp16 and its ONNX export failed on the half weights (an H200 run). The model that is only
    exported stays on the CPU in fp32; the device is not even asked."""
    import torch

    from mixdp_core.encoders import _torch

    def gpu_machine(preferred=None):
        if preferred in (None, "auto"):
            raise AssertionError("the onnxruntime backend asked for a device")
        return preferred

    monkeypatch.setattr(_torch, "select_device", gpu_machine)
    enc = E(pretrained=None, image_size=32, backend="onnxruntime", precision="fp32", model_dir=tmp_path)
    F, _ = enc.encode_images(images)
    p = next(enc.model.parameters())
    assert F.shape == (5, 1280) and p.device.type == "cpu" and p.dtype == torch.float32


@needs_ort
def test_failed_export_leaves_no_file(tmp_path, monkeypatch):
    from mixdp_core.encoders import _onnx

    def boom(*a, **k):
        raise RuntimeError("export failed")

    import torch

    monkeypatch.setattr(torch.onnx, "export", boom)
    with pytest.raises(RuntimeError, match="export failed"):
        _onnx.export_onnx(torch.nn.Identity(), tmp_path / "m.onnx", image_size=16, mean=(0.5,) * 3, std=(0.5,) * 3)
    assert os.listdir(tmp_path) == []


@needs_ort
def test_unwritable_model_dir_falls_back_to_a_temporary_copy(tmp_path, monkeypatch, images):
    enc = E(pretrained=None, image_size=32, precision="fp32", model_dir=tmp_path / "ro")
    real = enc._ensure_onnx
    calls = []

    def first_fails(folder):
        calls.append(folder)
        if len(calls) == 1:
            raise PermissionError(13, "Permission denied")
        return real(folder)

    monkeypatch.setattr(enc, "_ensure_onnx", first_fails)
    with pytest.warns(UserWarning, match="cannot write the ONNX model"):
        F, _ = enc.encode_images(images)
    assert F.shape == (5, 1280) and calls[1] != tmp_path / "ro"


@needs_ort
def test_get_features_puts_models_in_its_cache_dir(tmp_path):
    from mixdp_core.features.cache import get_features

    # device="cpu": on a GPU machine auto-selection runs torch on the GPU, not onnxruntime
    fs = get_features("digits", "efficientnet_lite0", cache_dir=tmp_path / "c", pretrained=None,
                      encoder_kwargs={"image_size": 32, "precision": "fp32", "device": "cpu"})
    assert fs.X_train.shape[1] == 1280 and fs.meta["encoder_runtime"] == "onnxruntime-fp32"
    assert any(p.name.endswith("-fp32.onnx") for p in (tmp_path / "c" / "_models").iterdir())


# ---------------------------------------------------------------------------- decode ahead
def test_decode_ahead_gives_the_same_features_and_corrupt_handling(tmp_path, images):
    from PIL import Image

    paths = []
    for i in range(5):
        p = tmp_path / f"{i}.png"
        Image.fromarray(images.images[i]).save(p)
        paths.append(p)
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    src = FileImageSource(paths[:2] + [bad] + paths[2:], np.zeros(6, int))
    kw = dict(pretrained=None, image_size=32, backend="torch", batch_size=2)
    inline, ahead = E(**kw), E(**kw, decode_ahead=True)
    for enc in (inline, ahead):
        with pytest.raises(CorruptImageError, match="broken.jpg"):
            enc.encode_images(src)
    calls = {}
    out = {}
    for name, enc in (("inline", inline), ("ahead", ahead)):
        calls[name] = []
        with pytest.warns(UserWarning, match="broken.jpg"):
            out[name] = enc.encode_images(src, skip_corrupt=True, progress=lambda d, n, c=calls[name]: c.append(d))
    np.testing.assert_array_equal(out["inline"][0], out["ahead"][0])
    assert out["ahead"][1].tolist() == [0, 1, 3, 4, 5] and calls["ahead"] == calls["inline"] == [2, 4, 6]


def test_int8_is_the_auto_precision_only_on_cpus_with_int8_dot_products(tmp_path, monkeypatch):
    from mixdp_core.encoders import _onnx

    vnni = tmp_path / "vnni"
    vnni.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni amx_int8\n")
    avx2 = tmp_path / "avx2"
    avx2.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n")
    assert _onnx.cpu_has_int8_dot(str(vnni)) and not _onnx.cpu_has_int8_dot(str(avx2))
    assert not _onnx.cpu_has_int8_dot(str(tmp_path / "absent"))
    monkeypatch.setattr(_onnx, "cpu_has_int8_dot", lambda *a: False)
    assert eff.default_ort_precision() == "fp32"
    if onnxruntime_available():
        assert E(device="cpu").runtime == ("onnxruntime", "fp32")
        assert E(device="cpu", precision="int8").runtime == ("onnxruntime", "int8")  # explicit choice kept
    monkeypatch.setattr(_onnx, "cpu_has_int8_dot", lambda *a: True)
    assert eff.default_ort_precision() == "int8"


def test_mixdp_encode_takes_encoder_args_and_reports_the_runtime(tmp_path, capsys):
    import json

    from mixdp_core.cli import main

    argv = ["encode", "--dataset", "digits", "--encoder", "efficientnet_lite0", "--image-size", "32",
            "--cache-dir", str(tmp_path), "--no-progress"]
    assert main(argv + ["--encoder-arg", "backend=torch"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["encoder_runtime"] == "torch-fp32" and out["dim"] == 1280 and not out["cache_hit"]
    if onnxruntime_available():  # fp32 on onnxruntime: same features, so the same cache entry
        assert main(argv + ["--encoder-arg", "precision=fp32"]) == 0
        again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert again["cache_hit"] and again["cache_key"] == out["cache_key"]
    assert main(argv + ["--encoder-arg", "backend=tpu"]) == 2
    err = capsys.readouterr().err
    assert "backend" in err and "'onnxruntime'" in err and "\n" not in err.strip()
