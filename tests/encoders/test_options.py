"""Encoder options: refused by name before any run exists; a user's batch size overrides the default."""

import json
import subprocess
import sys

import numpy as np
import pytest

from mixdp_core.encoders import ENCODERS
from mixdp_core.encoders.base import check_encoder_kwargs, encoder_options
from mixdp_core.errors import ConfigError
from mixdp_core.runs.runner import RunConfig


def test_options_follow_kwargs_up_the_class_chain():
    # efficientnet_lite0's constructor takes **kwargs and forwards them to the image-encoder base:
    # its own options and the base's (image_size, num_threads) are both accepted.
    opts = encoder_options(ENCODERS.get("efficientnet_lite0"))
    assert {"precision", "backend", "image_size", "num_threads", "batch_size", "weights"} <= set(opts)
    assert "foo" not in opts
    assert encoder_options(ENCODERS.get("pixels")) == sorted(
        ["batch_size", "device", "image_size", "pretrained", "standardize", "value_range", "weights"])


def test_a_constructor_ending_in_kwargs_accepts_anything():
    class Open:
        def __init__(self, **kwargs):
            pass

    assert encoder_options(Open) is None


def test_unknown_option_names_the_field_and_the_real_options():
    with pytest.raises(ConfigError) as e:
        check_encoder_kwargs("pixels", {"image_size": 8, "imagesize": 8})
    msg = str(e.value)
    assert msg.startswith("encoder_kwargs:") and "'imagesize'" in msg and "image_size" in msg
    assert "\n" not in msg
    with pytest.raises(ConfigError, match="encoder_kwargs"):
        RunConfig(dataset="digits", encoder="pixels", method="only_public", encoder_kwargs={"foo": 1})
    check_encoder_kwargs("pixels", {"weights": None, "batch_size": 3})  # aliases and caller options pass


def test_cli_refuses_a_typo_before_a_run_row_exists(tmp_path):
    store = tmp_path / "store"
    p = subprocess.run([sys.executable, "-m", "mixdp_core.cli", "train", "--store", str(store), "--encoder",
                        "pixels", "--method", "only_public", "--encoder-arg", "foo=1", "--no-progress"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "mixdp train: error: encoder_kwargs: pixels takes no option 'foo'; its options: batch_size, device, "
        "image_size, pretrained, standardize, value_range, weights"]
    from mixdp_core.runs.store import RunStore

    assert RunStore(str(store)).list_runs() == []


def test_batch_size_option_overrides_the_default_instead_of_colliding(tmp_path):
    from mixdp_core.features.cache import get_features

    a = get_features("digits", "pixels", cache_dir=tmp_path / "a", encoder_kwargs={"batch_size": 7})
    b = get_features("digits", "pixels", cache_dir=tmp_path / "b")
    np.testing.assert_array_equal(a.X_train, b.X_train)
    assert json.dumps(a.meta.get("cache_key")) == json.dumps(b.meta.get("cache_key"))  # batching is not identity


def test_get_features_names_the_real_options_for_every_caller(tmp_path):
    # mixdp encode and the app's feature jobs call get_features directly, not through RunConfig
    from mixdp_core.features.cache import get_features

    with pytest.raises(ConfigError, match=r"^encoder_kwargs: pixels takes no option 'foo'; its options: batch_size"):
        get_features("digits", "pixels", cache_dir=tmp_path, encoder_kwargs={"foo": 1})
    assert not any(tmp_path.iterdir())  # refused before anything was loaded or cached


def test_a_weights_file_is_keyed_on_its_content(tmp_path):
    """Weights rewritten in place with the same size and the old mtime put back (cp -p,
    rsync -t) must change the cache key; it was path:size:int(mtime)."""
    import os
    import time

    w = tmp_path / "w.pth"
    w.write_bytes(b"\x01" * 4096)
    st = w.stat()
    enc = ENCODERS.get("efficientnet_lite0")
    before = enc(pretrained=str(w)).weights_tag
    time.sleep(0.02)  # ctime granularity
    w.write_bytes(b"\x03" * 4096)
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = enc(pretrained=str(w)).weights_tag
    assert w.stat().st_size == st.st_size and w.stat().st_mtime_ns == st.st_mtime_ns
    assert after != before and before.startswith("file:") and after.endswith(
        "sha256=" + __import__("hashlib").sha256(b"\x03" * 4096).hexdigest()[:16])
    os.utime(w)  # a touch alone (same bytes) keeps the key
    assert enc(pretrained=str(w)).weights_tag == after
    assert enc(pretrained=str(w)).cache_key()["weights"] == after
