"""User weights files work for every downloadable encoder, through the real load path of
each library (torchvision state_dict for resnet50, open_clip checkpoint for CLIP, timm
safetensors and torch.hub-style files for dinov2), from ``get_features`` — what the CLI
(``--weights`` / ``--encoder-arg pretrained=FILE``) and the Data page's weights field call.
The models are shrunk (a tiny module / one block / a tiny open_clip config) so the test is
fast; loading, key matching (``strict``) and the forward pass are the libraries' own."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from . import _faults as F

torch = pytest.importorskip("torch")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXDP_OFFLINE", "1")
    root = F.image_tree(tmp_path / "imgs", per_class=3)
    return f"image_folder:{root}"


def _features(spec, encoder, weights, cache):
    from mixdp_core.features.cache import get_features

    return get_features(spec, encoder, cache_dir=cache, encoder_kwargs={"pretrained": str(weights)}, batch_size=4)


def test_resnet50_torchvision_state_dict(folder, tmp_path, monkeypatch):
    import torchvision.models as tvm
    from torch import nn

    class Tiny(nn.Module):  # stands in for the 25M-parameter ResNet-50; same load calls
        def __init__(self, weights=None):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 7, stride=16)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(4, 10)

        def forward(self, x):
            return self.fc(self.pool(self.conv(x)).flatten(1))

    monkeypatch.setattr(tvm, "resnet50", Tiny)
    ref = Tiny()
    path = tmp_path / "resnet50-random.pth"
    torch.save(ref.state_dict(), path)  # torchvision's format: a plain state_dict
    fs = _features(folder, "resnet50", path, tmp_path / "c")
    assert fs.X_train.shape[1] == 4 and np.isfinite(fs.X_train).all()
    assert "file:" in fs.meta["encoder_weights"]
    # a file for another architecture: one line naming the field
    torch.save({"nope": torch.zeros(1)}, tmp_path / "bad.pth")
    from mixdp_core.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        _features(folder, "resnet50", tmp_path / "bad.pth", tmp_path / "c2")
    assert e.value.field == "pretrained" and "\n" not in str(e.value)


def test_clip_open_clip_checkpoint(folder, tmp_path, monkeypatch):
    import open_clip

    from mixdp_core.encoders import ENCODERS

    cfg = {"embed_dim": 16, "vision_cfg": {"image_size": 224, "layers": 1, "width": 32, "patch_size": 32,
                                           "head_width": 16},
           "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 16, "heads": 1, "layers": 1}}
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "mixdp-tiny-ViT.json").write_text(json.dumps(cfg))
    open_clip.add_model_config(tmp_path / "cfg")
    monkeypatch.setattr(ENCODERS.get("clip_vit_b32"), "model_name", "mixdp-tiny-ViT")
    ref = open_clip.create_model("mixdp-tiny-ViT", pretrained=None)
    path = tmp_path / "open_clip_pytorch_model.bin"
    torch.save({"state_dict": ref.state_dict()}, path)  # open_clip's checkpoint layout
    fs = _features(folder, "clip_vit_b32", path, tmp_path / "c")
    assert fs.X_train.shape[1] == 16 and fs.text_embeddings.shape == (2, 16)
    np.testing.assert_allclose(np.linalg.norm(fs.X_train, axis=1), 1.0, rtol=1e-3)


@pytest.mark.parametrize("fmt", ["timm_safetensors", "torch_hub"])
def test_dinov2_timm_and_torch_hub_files(fmt, folder, tmp_path, monkeypatch):
    import timm

    real = timm.create_model

    def one_block(name, **kw):  # ViT-S/14 with 1 block instead of 12; same loader
        kw.setdefault("depth", 1)
        return real(name, **kw)

    monkeypatch.setattr(timm, "create_model", one_block)
    if fmt == "timm_safetensors":
        from safetensors.torch import save_file

        sd = real("vit_small_patch14_dinov2", pretrained=False, num_classes=0, img_size=224, depth=1).state_dict()
        path = tmp_path / "model.safetensors"
        save_file({k: v.contiguous() for k, v in sd.items()}, str(path))
    else:  # facebookresearch/dinov2 torch.hub layout: mask_token, 518-px (37x37) position grid
        sd = real("vit_small_patch14_dinov2", pretrained=False, num_classes=0, img_size=518, depth=1).state_dict()
        sd["mask_token"] = torch.zeros(1, 384)
        path = tmp_path / "dinov2_vits14_pretrain.pth"
        torch.save(sd, path)
    fs = _features(folder, "dinov2_vits14", path, tmp_path / "c")
    assert fs.X_train.shape[1] == 384 and np.isfinite(fs.X_train).all()


def test_cli_weights_flag_reaches_the_encoder(tmp_path, monkeypatch):
    """``--encoder-arg pretrained=FILE`` used to raise TypeError (duplicate keyword)."""
    from mixdp_core.cli import build_parser
    from mixdp_core.cli.train import build_config

    w = tmp_path / "w.pth"
    w.write_bytes(b"x")
    for argv in (["train", "--encoder", "resnet50", "--encoder-arg", f"pretrained={w}"],
                 ["train", "--encoder", "resnet50", "--weights", str(w)]):
        cfg = build_config(build_parser().parse_args(argv))
        assert cfg.encoder_kwargs == {"pretrained": str(w.resolve())}


def test_data_page_weights_field(tmp_path, monkeypatch):
    """The Data page's weights field: a file under the data root is accepted and passed to
    extraction; a path outside the root, or missing, is a red message naming ``weights``."""
    from streamlit.testing.v1 import AppTest

    root = tmp_path / "data_root"
    root.mkdir()
    (root / "w.pth").write_bytes(b"x")
    monkeypatch.setenv("MIXDP_DATA_ROOT", str(root))
    monkeypatch.setenv("MIXDP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MIXDP_APP_SYNC_JOBS", "1")
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/1_data.py").run()
    at.selectbox(key="data_encoder").select("resnet50").run()
    at.text_input(key="data_weights").input("../outside.pth").run()
    assert not at.exception, at.exception
    assert any("weights" in str(e.value) and "outside the data root" in str(e.value) for e in at.error)
    at.text_input(key="data_weights").input("w.pth").run()
    assert not at.exception and not any("weights" in str(e.value) for e in at.error)
    assert at.session_state["data_settings"]["encoder_kwargs"] == {"pretrained": str((root / "w.pth").resolve())}
