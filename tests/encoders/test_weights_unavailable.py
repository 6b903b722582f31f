"""Offline behaviour: a clear WeightsUnavailableError, no download attempt, no hang."""

import socket

import numpy as np
import pytest
import torch

from mixdp_core.data.base import ArrayImageSource
from mixdp_core.encoders import ENCODERS
from mixdp_core.encoders import _weights
from mixdp_core.errors import WeightsUnavailableError


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """Empty caches + forced offline; any socket connect fails the test."""
    monkeypatch.setenv("MIXDP_OFFLINE", "1")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))

    def no_connect(*a, **k):
        raise AssertionError("network access attempted while offline")

    monkeypatch.setattr(socket, "create_connection", no_connect)
    return tmp_path


def test_network_check_respects_forced_offline(offline):
    assert _weights.network_available("huggingface.co") is False


def test_network_check_false_when_connect_fails(monkeypatch):
    monkeypatch.delenv("MIXDP_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def refuse(*a, **k):
        raise OSError("unreachable")

    monkeypatch.setattr(socket, "create_connection", refuse)
    assert _weights.network_available("example.invalid") is False


def _encode_one(enc):
    return enc.encode_images(ArrayImageSource(np.zeros((1, 8, 8, 3), np.uint8), np.array([0])))


def test_resnet50_says_which_file_where(offline):
    with pytest.raises(WeightsUnavailableError) as ei:
        _encode_one(ENCODERS.get("resnet50")())
    msg = str(ei.value)
    assert "IMAGENET1K_V2" in msg and "resnet50-11ad3fa6.pth" in msg
    assert "download.pytorch.org" in msg and str(offline / "torch" / "hub" / "checkpoints") in msg
    assert "Traceback" not in msg and "efficientnet_lite0" in msg


@pytest.mark.parametrize("name,repo", [("clip_vit_b32", "timm/vit_base_patch32_clip_224.openai"),
                                       ("clip_rn50", "timm/resnet50_clip.openai")])
def test_clip_says_which_repo_and_cache_path(offline, name, repo):
    with pytest.raises(WeightsUnavailableError) as ei:
        _encode_one(ENCODERS.get(name)())
    msg = str(ei.value)
    assert "'openai'" in msg and f"https://huggingface.co/{repo}" in msg
    assert str(offline / "hf" / ("models--" + repo.replace("/", "--"))) in msg


def test_clip_text_also_fails_cleanly(offline):
    with pytest.raises(WeightsUnavailableError):
        ENCODERS.get("clip_vit_b32")().encode_text(["cat"])


def test_dinov2_error_then_loads_from_placed_cache_file(offline):
    enc = ENCODERS.get("dinov2_vits14")()
    with pytest.raises(WeightsUnavailableError) as ei:
        _encode_one(enc)
    assert "timm/vit_small_patch14_dinov2.lvd142m" in str(ei.value) and "model.safetensors" in str(ei.value)

    # Place a checkpoint where the message says (HF cache layout) -> it loads offline.
    from safetensors.torch import save_file

    ref = ENCODERS.get("dinov2_vits14")(pretrained=None)
    snap = offline / "hf" / "models--timm--vit_small_patch14_dinov2.lvd142m" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text("abc123")
    save_file({k: v.contiguous() for k, v in ref.model.state_dict().items()}, str(snap / "model.safetensors"))
    F, _ = _encode_one(ENCODERS.get("dinov2_vits14")())
    G, _ = _encode_one(ref)
    np.testing.assert_allclose(F, G, rtol=1e-4, atol=1e-5)


def test_resnet50_loads_from_explicit_file(tmp_path):
    ref = ENCODERS.get("resnet50")(pretrained=None)
    sd = {k: v for k, v in ref.model.state_dict().items()}
    sd["fc.weight"] = torch.zeros(1000, 2048)
    sd["fc.bias"] = torch.zeros(1000)
    path = tmp_path / "r50.pth"
    torch.save(sd, path)
    enc = ENCODERS.get("resnet50")(pretrained=str(path))
    assert enc.weights_tag.startswith("file:")
    np.testing.assert_allclose(_encode_one(enc)[0], _encode_one(ref)[0], rtol=1e-4, atol=1e-5)
