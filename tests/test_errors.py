"""Errors carry their parts (field, allowed, got, choices), so that pages and forms read
them instead of parsing the one-line text, which stays what the CLI prints."""

from __future__ import annotations

import pickle

import pytest

from mixdp_core.errors import BudgetError, ConfigError, CorruptImageError, DataError, field_and_message


def test_a_number_out_of_range_names_field_allowed_and_value():
    from mixdp_core.runs.runner import RunConfig

    with pytest.raises(ConfigError) as e:
        RunConfig(dataset="digits", encoder="pixels", method="adamix", target_epsilon=5000)
    err = e.value
    assert err.field == "epsilon" and err.got == 5000
    assert err.allowed == "a finite number in [0.001, 1000]"
    assert err.message == "must be a finite number in [0.001, 1000], got 5000.0"
    assert str(err) == "epsilon: must be a finite number in [0.001, 1000], got 5000.0"
    assert err.choices == ()


def test_typed_text_that_is_no_number_keeps_what_was_typed():
    from mixdp_core.config import parse_number

    with pytest.raises(ConfigError) as e:
        parse_number("epsilon", "１", float, "a number in [0.001, 1000]")  # a full-width digit
    assert (e.value.field, e.value.allowed, e.value.got) == ("epsilon", "a number in [0.001, 1000]", "１")
    assert str(e.value) == "epsilon: must be a number in [0.001, 1000], got '１'"


def test_an_unknown_method_lists_the_registered_names():
    from mixdp_core.methods import METHODS
    from mixdp_core.runs.runner import RunConfig

    with pytest.raises(ConfigError) as e:
        RunConfig(dataset="digits", encoder="pixels", method="adamixx")
    err = e.value
    assert err.field == "method" and err.got == "adamixx" and err.allowed == "a registered method"
    assert err.choices == tuple(METHODS.keys()) and "adamix" in err.choices
    assert str(err) == f"method: unknown method 'adamixx'; choose one of: {', '.join(METHODS.keys())}"


def test_an_unknown_choice_of_a_declared_field():
    from mixdp_core.methods import METHODS

    cfg_cls = METHODS.get("adamix").config_cls
    with pytest.raises(ConfigError) as e:
        cfg_cls(schedule="nope")
    err = e.value
    assert err.field == "schedule" and err.got == "nope"
    assert err.choices == ("smooth", "theorem3", "constant")
    assert err.allowed == "one of 'smooth', 'theorem3', 'constant'"
    assert str(err) == "schedule: must be one of 'smooth', 'theorem3', 'constant', got 'nope'"


def test_an_unknown_sweep_backend_and_method():
    from mixdp_core.runs.sweep import EXECUTORS, SweepSpec, make_executor

    with pytest.raises(ConfigError) as e:
        make_executor("threads")
    assert e.value.field == "backend" and e.value.got == "threads" and e.value.choices == tuple(EXECUTORS.keys())
    assert str(e.value) == "backend: unknown backend 'threads'; choose one of: local, ray"
    with pytest.raises(ConfigError) as e:
        SweepSpec(methods=("adamix", "nope"))
    assert e.value.field == "methods" and e.value.got == "nope" and "adamix" in e.value.choices


def test_message_from_allowed_and_the_one_line_text():
    e = ConfigError("k", allowed="an integer >= 1", got=0)
    assert str(e) == "k: must be an integer >= 1, got 0" and e.message == "must be an integer >= 1, got 0"
    plain = ConfigError("config", "cannot read grid.toml")
    assert str(plain) == "config: cannot read grid.toml"
    assert plain.allowed is None and plain.got is None and plain.choices == ()
    with pytest.raises(TypeError):
        ConfigError("k")


@pytest.mark.parametrize("err", [
    ConfigError("epsilon", "must be > 0, got -1", allowed="> 0", got=-1),
    BudgetError("epsilon", "target_epsilon=0.001 is too small"),
    DataError("y_train: class 3 has 2 samples, fewer than public_per_class=5", field="public_per_class"),
    CorruptImageError("/data/x.png", "truncated"),
])
def test_errors_cross_process_boundaries_whole(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err)
    assert {k: v for k, v in vars(back).items()} == {k: v for k, v in vars(err).items()}


def test_a_split_error_names_the_setting_that_fixes_it():
    import numpy as np

    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.featureset import FeatureSet

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 4)
    fs = FeatureSet(X_train=rng.normal(size=(12, 2)), y_train=y, X_test=rng.normal(size=(3, 2)),
                    y_test=np.arange(3), class_names=("a", "b", "c"))
    with pytest.raises(DataError) as e:
        make_split(fs, SplitSpec(public_per_class=5))
    assert e.value.field == "public_per_class"
    assert str(e.value) == "y_train: class 0 has 4 samples, fewer than public_per_class=5"
    assert field_and_message(e.value, "split") == ("public_per_class", "class 0 has 4 samples, fewer than "
                                                                       "public_per_class=5")
    # an error without a field: the array it names, once, in field_and_message
    assert field_and_message(DataError("root: has no class sub-folders"), "path") == ("root", "has no class sub-folders")


@pytest.mark.parametrize("value", ["abc", "-1", "0", "2.5", "inf"])
def test_a_bad_limit_variable_is_a_one_line_error_not_the_default(value, monkeypatch):
    """MIXDP_MAX_GRID_POINTS=1e9 (or abc, -1, 0) quietly became 2000, and the refusal that
    followed cited the variable as if it had been applied."""
    from mixdp_core.errors import ConfigError
    from mixdp_core.runs.sweep.spec import max_grid_points

    monkeypatch.setenv("MIXDP_MAX_GRID_POINTS", value)
    with pytest.raises(ConfigError, match="^MIXDP_MAX_GRID_POINTS: must be an integer >= 1"):
        max_grid_points()
    monkeypatch.setenv("MIXDP_MAX_GRID_POINTS", "5e1")  # an integer written as the other limits accept
    assert max_grid_points() == 50
    monkeypatch.delenv("MIXDP_MAX_GRID_POINTS")
    assert max_grid_points() == 2000


def test_a_bad_image_pixel_limit_is_named_not_every_image_called_corrupt(tmp_path, monkeypatch):
    """ConfigError is a ValueError: a bad MIXDP_MAX_IMAGE_PIXELS came out as 'corrupt or
    non-image file' for every image (and --skip-corrupt skipped them all)."""
    from PIL import Image

    from mixdp_core.data.base import decode_image_file
    from mixdp_core.errors import ConfigError

    p = tmp_path / "a.png"
    Image.new("RGB", (4, 4)).save(p)
    monkeypatch.setenv("MIXDP_MAX_IMAGE_PIXELS", "lots")
    with pytest.raises(ConfigError, match="^MIXDP_MAX_IMAGE_PIXELS: must be an integer"):
        decode_image_file(p)


def test_images_are_decoded_as_viewers_show_them_and_only_as_rasters(tmp_path):
    """Three decoding faults found by a review: a 16-bit PNG was clipped at 255 (99.6 % white);
    a phone photo's EXIF orientation was ignored (encoded sideways); an EPS named .jpg went to
    Ghostscript, an external interpreter, on an uploaded file."""
    import numpy as np
    from PIL import Image

    from mixdp_core.data.base import decode_image_file
    from mixdp_core.errors import CorruptImageError

    a = np.linspace(164, 65504, 32 * 32).reshape(32, 32).astype(np.uint16)
    Image.fromarray(a).save(tmp_path / "i16.png")
    x = np.asarray(decode_image_file(tmp_path / "i16.png"))
    assert x.max() > 250 and (x == 255).mean() < 0.01 and x.min() < 5  # the ramp kept, not saturated
    rgb = np.zeros((20, 40, 3), np.uint8)
    rgb[:, :20] = 255
    img = Image.fromarray(rgb)
    exif = img.getexif()
    exif[0x0112] = 6  # "rotate 90° clockwise to view"
    img.save(tmp_path / "rot.jpg", exif=exif.tobytes())
    assert decode_image_file(tmp_path / "rot.jpg").size == (20, 40)  # upright: 20 wide, 40 high
    (tmp_path / "eps.jpg").write_text("%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n")
    with pytest.raises(CorruptImageError, match="eps.jpg"):
        decode_image_file(tmp_path / "eps.jpg")
