"""open_clip / torchvision / timm encoders run for real with random weights (pretrained=None)."""

import numpy as np
import pytest

from mixdp_core.data.base import ArrayImageSource
from mixdp_core.encoders import DEFAULT_TEMPLATES, ENCODERS, Encoder, select_device
from mixdp_core.errors import ConfigError, DataError

DIMS = {"resnet50": 2048, "clip_vit_b32": 512, "clip_rn50": 1024, "dinov2_vits14": 384}


def test_registry_lists_all_encoders_with_metadata():
    assert set(ENCODERS.keys()) == {"pixels", "efficientnet_lite0", *DIMS}
    for name, cls in ENCODERS.items():
        assert issubclass(cls, Encoder) and cls.name == name and cls.description
    assert {n for n, c in ENCODERS.items() if c.has_text} == {"clip_vit_b32", "clip_rn50"}
    assert {n for n, c in ENCODERS.items() if c.offline} == {"pixels", "efficientnet_lite0"}


def test_select_device_auto_and_explicit():
    assert select_device("cpu") == "cpu"
    assert select_device(None) in {"cuda", "mps", "cpu"}


@pytest.mark.parametrize("name", sorted(DIMS))
def test_random_weights_forward(name, rng_images):
    src = ArrayImageSource(rng_images[:2], np.array([0, 1]))
    enc = ENCODERS.get(name)(pretrained=None, batch_size=1, num_threads=1)
    F, kept = enc.encode_images(src)
    assert F.shape == (2, DIMS[name]) and F.dtype == np.float32 and kept.tolist() == [0, 1]
    assert np.isfinite(F).all() and not np.allclose(F[0], F[1])
    key = enc.cache_key()
    assert key["encoder"] == name and key["weights"] == "random(seed=0)" and key["image_size"] == 224
    if name.startswith("clip_"):  # image features are L2-normalized, in float32 on every device
        np.testing.assert_allclose(np.linalg.norm(F, axis=1), 1.0, rtol=1e-6)


def test_random_init_is_seeded_and_batch_independent(rng_images):
    src = ArrayImageSource(rng_images[:2], np.array([0, 1]))
    a, _ = ENCODERS.get("dinov2_vits14")(pretrained=None, batch_size=2).encode_images(src)
    b, _ = ENCODERS.get("dinov2_vits14")(pretrained=None, batch_size=1).encode_images(src)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def clip_rn50():
    return ENCODERS.get("clip_rn50")(pretrained=None, num_threads=1)


def test_encode_text_zero_shot_embeddings(clip_rn50):
    T = clip_rn50.encode_text(["cat", "dog", "airplane"], ["a photo of a {}.", "a drawing of a {}."])
    assert T.shape == (3, 1024) and T.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(T, axis=1), 1.0, rtol=1e-6)
    assert not np.allclose(T[0], T[1])
    T1 = clip_rn50.encode_text(["cat"], ["a photo of a {}."])
    T2 = clip_rn50.encode_text(["cat"], ["a drawing of a {}."])
    # template ensemble = renormalized mean of the per-template embeddings
    mean = T1[0] + T2[0]
    np.testing.assert_allclose(T[0], mean / np.linalg.norm(mean), atol=1e-4)
    Td = clip_rn50.encode_text(["cat"])
    assert Td.shape == (1, 1024) and len(DEFAULT_TEMPLATES) >= 7


def test_clip_normalizes_in_float32_whatever_the_tower_dtype():
    """On CUDA the CLIP towers run fp16; normalizing there left norms 1 +- 1e-4 (an H200 run of
    the two tests above). The features are normalized in float32 instead."""
    import torch

    from mixdp_core.encoders.clip import unit_rows_fp32

    f = (torch.from_numpy(np.random.default_rng(0).standard_normal((64, 512))) * 7).half()
    f[3] = 0
    half_norms = torch.linalg.vector_norm((f / torch.linalg.vector_norm(f, dim=-1, keepdim=True)).float(), dim=-1)
    assert (half_norms[np.r_[0:3, 4:64]] - 1).abs().max() > 1e-5  # what normalizing in fp16 gives
    u = unit_rows_fp32(f)
    assert u.dtype == torch.float32 and torch.all(u[3] == 0)
    np.testing.assert_allclose(torch.linalg.vector_norm(u, dim=-1).numpy()[np.r_[0:3, 4:64]], 1.0, rtol=1e-6)
    np.testing.assert_allclose(u.numpy(), (f.float() / torch.linalg.vector_norm(f.float(), dim=-1, keepdim=True)
                                           .clamp_min(1e-12)).numpy(), rtol=1e-6, atol=1e-7)


def test_encode_text_validates_templates(clip_rn50):
    with pytest.raises(ConfigError, match="templates"):
        clip_rn50.encode_text(["cat"], ["no placeholder"])
    with pytest.raises(DataError):
        clip_rn50.encode_text([], None)


def test_non_clip_encoder_has_no_text():
    with pytest.raises(DataError, match="text"):
        ENCODERS.get("resnet50")(pretrained=None).encode_text(["cat"])


def test_constructor_validation():
    with pytest.raises(ConfigError, match="pretrained"):
        ENCODERS.get("resnet50")(pretrained="IMAGENET22K")
    with pytest.raises(ConfigError, match="pretrained"):
        ENCODERS.get("clip_vit_b32")(pretrained="not_a_tag")
    with pytest.raises(ConfigError, match="image_size"):
        ENCODERS.get("clip_vit_b32")(pretrained=None, image_size=96)
    with pytest.raises(ConfigError, match="image_size"):
        ENCODERS.get("dinov2_vits14")(pretrained=None, image_size=100)
    with pytest.raises(ConfigError, match="batch_size"):
        ENCODERS.get("efficientnet_lite0")(batch_size=0)
    # a typed option (CLI --encoder-arg, a link) that is not an integer names its field, not int()'s message
    with pytest.raises(ConfigError, match=r"^image_size: must be an integer in \[16, \d+\] pixels, got 'abc'$"):
        ENCODERS.get("efficientnet_lite0")(image_size="abc")
    for bad in ("abc", 1.5, True):
        with pytest.raises(ConfigError, match="^batch_size: must be an integer >= 1"):
            ENCODERS.get("pixels")(batch_size=bad)
    assert ENCODERS.get("pixels")(batch_size=np.int64(8)).batch_size == 8  # numpy counts stay accepted
    assert ENCODERS.get("efficientnet_lite0")(image_size=np.int32(96)).image_size == 96
    with pytest.raises(ConfigError, match="num_threads"):
        ENCODERS.get("efficientnet_lite0")(num_threads=0)
    with pytest.raises(ConfigError, match="num_threads"):
        ENCODERS.get("efficientnet_lite0")(num_threads="many")
    assert ENCODERS.get("efficientnet_lite0")(num_threads="2").num_threads == 2
    # selectable open_clip tags are accepted without loading anything
    assert ENCODERS.get("clip_vit_b32")(pretrained="laion2b_s34b_b79k").weights_tag == "laion2b_s34b_b79k"
    assert ENCODERS.get("clip_rn50")(pretrained="yfcc15m").weights_tag == "yfcc15m"


def test_a_clip_weights_file_is_built_as_the_published_weights_are(tmp_path):
    """A checkpoint file (the offline route to the 'openai' weights) was loaded into a GELU
    model; those weights were trained with QuickGELU, so the features were not the weights'."""
    import open_clip
    import torch

    m = open_clip.create_model("ViT-B-32", pretrained=None, force_quick_gelu=True)
    p = tmp_path / "w.pt"
    torch.save(m.state_dict(), p)
    enc = ENCODERS.get("clip_vit_b32")(pretrained=str(p), num_threads=1)
    acts = {type(x).__name__ for x in enc.model.modules() if "GELU" in type(x).__name__}
    assert acts == {"QuickGELU"} and enc.cache_key()["quick_gelu"] is True
