"""Table-driven bad inputs of ``mixdp train``: each gives one clear line naming the field
(or a documented behaviour), within 10 s, with nothing lost in the store or cache."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from . import _faults as F
from .conftest import Outcome, assert_ok, run_inprocess, run_subprocess

BASE = ["train", "--encoder", "pixels", "--no-progress", "--json"]
FEAT = ["--method", "only_public", "--public-per-class", "1"]


def _feat(files: Path, name: str, mutate) -> str:
    arrs = F.feature_arrays()
    arrs = mutate(arrs) or arrs
    p = files / f"{name}.npz"
    np.savez(p, **arrs)
    return f"features:{p}"


def _obj(a):
    a["y_train"] = np.array([{"x": 1}] * len(a["y_train"]), dtype=object)


def _strlabels(a):
    a["y_train"] = np.array([f"c{v}" for v in a["y_train"]])


def _empty(a):
    a["X_train"] = np.zeros((0, 6), np.float32)
    a["y_train"] = np.zeros(0, np.int64)


def _huge(a):
    a["X_train"][0, 0] = 1e38


def _nan(a):
    a["X_train"][1, 2] = np.nan


def _missing_train_class(a):
    keep = a["y_train"] != 3
    a["X_train"], a["y_train"] = a["X_train"][keep], a["y_train"][keep]


def _missing_test_class(a):
    keep = a["y_test"] != 3
    a["X_test"], a["y_test"] = a["X_test"][keep], a["y_test"][keep]


def _range(a):
    a["y_test"] = a["y_test"] + 100


def _dims(a):
    a["X_test"] = a["X_test"][:, :3]


def _floatlabels(a):
    a["y_train"] = a["y_train"] + 0.5


def _missing_array(a):
    del a["y_test"]


CONFIG_CASES = [
    # (case, argv tail, expected field)
    ("epsilon 1e3 (T = 661,962 steps)", ["--dataset", "digits", "--method", "fully_private", "--epsilon", "1e3"], "epsilon"),
    ("epsilon -1", ["--epsilon", "-1"], "epsilon"),
    ("epsilon nan", ["--epsilon", "nan"], "epsilon"),
    ("epsilon inf", ["--epsilon", "inf"], "epsilon"),
    ("epsilon text", ["--epsilon", "three"], "epsilon"),
    ("delta 0", ["--delta", "0"], "delta"),
    ("delta 1", ["--delta", "1"], "delta"),
    ("seed 1e30", ["--seed", "1e30"], "seed"),
    ("seed -1", ["--seed", "-1"], "seed"),
    ("seed 2**32", ["--seed", str(2**32)], "seed"),
    ("seed 1.5", ["--seed", "1.5"], "seed"),
    ("public-per-class 0", ["--public-per-class", "0"], "public_per_class"),
    ("imbalance-ratio 0.5", ["--imbalance-ratio", "0.5"], "imbalance_ratio"),
    ("imbalance-ratio 1e308", ["--imbalance-ratio", "1e308"], "imbalance_ratio"),
    ("dppl_mean k_pool 100000 > D", ["--method", "dppl_mean", "--param", "k_pool=100000"], "k_pool"),
    ("unknown method", ["--method", "nope"], "method"),
    ("unknown encoder", ["--encoder", "nope"], "encoder"),
    ("unknown dataset", ["--dataset", "nope"], "dataset"),
    ("noise-multiplier 0", ["--noise-multiplier", "0"], "noise_multiplier"),
    ("noise-multiplier inf", ["--noise-multiplier", "inf"], "noise_multiplier"),
    ("unknown method param", ["--param", "nope=1"], "nope"),
    ("negative lr", ["--method", "dp_linear_probe", "--param", "lr=-1"], "lr"),
    ("DP-SGD steps over the ceiling (public bound)",
     ["--method", "dp_linear_probe", "--param", "epochs=10000", "--param", "expected_batch_size=1",
      "--param", "dataset_size=public_bound", "--param", "size_bound=100000"], "epochs"),
    ("public_bound without size_bound", ["--method", "dp_linear_probe", "--param", "dataset_size=public_bound"],
     "size_bound"),
    ("weights file missing", ["--encoder", "resnet50", "--weights", "/nonexistent/w.pt"], "weights"),
]


@pytest.mark.parametrize("case,tail,fld", CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_config_errors(case, tail, fld, env, baseline_run):
    o = run_inprocess(Outcome(case, "config", "clear", fld), BASE + tail, env)
    assert_ok(o)


FILE_CASES = [
    # (case, builder(files) -> dataset spec, expected field, expect)
    ("features: file missing", lambda d: f"features:{d / 'missing.npz'}", "features", "clear"),
    ("features: a folder", lambda d: f"features:{d}", "features", "clear"),
    ("features: text file named .npz", lambda d: (d.joinpath("text.npz").write_text("hello\n"),
                                                  f"features:{d / 'text.npz'}")[1], "features", "clear"),
    ("features: header without data", lambda d: f"features:{F.header_without_data(d / 'hdr.npz')}", "X_train", "clear"),
    ("features: object labels", lambda d: _feat(d, "obj", _obj), "y_train", "clear"),
    ("features: string labels", lambda d: _feat(d, "str", _strlabels), "y_train", "clear"),
    ("features: float non-integer labels", lambda d: _feat(d, "flt", _floatlabels), "y_train", "clear"),
    ("features: empty arrays", lambda d: _feat(d, "empty", _empty), "X_train", "clear"),
    ("features: values 1e38", lambda d: _feat(d, "huge", _huge), "X_train", "clear"),
    ("features: NaN", lambda d: _feat(d, "nan", _nan), "X_train", "clear"),
    ("features: train lacks a class", lambda d: _feat(d, "notrain", _missing_train_class), "y_train", "clear"),
    ("features: labels out of range", lambda d: _feat(d, "range", _range), "y_test", "clear"),
    ("features: feature dims differ", lambda d: _feat(d, "dims", _dims), "X_test", "clear"),
    ("features: array missing", lambda d: _feat(d, "miss", _missing_array), "features", "clear"),
    ("features: test lacks a class (warning, run completes)", lambda d: _feat(d, "notest", _missing_test_class),
     "y_test", "documented"),
]


@pytest.mark.parametrize("case,build,fld,expect", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_feature_file_errors(case, build, fld, expect, env, baseline_run):
    spec = build(env["files"])

    def warned(rc, out, err):
        if expect == "documented":
            return [] if "y_test" in err and "no test samples" in err else ["no warning about the missing test class"]
        return []

    o = run_inprocess(Outcome(case, "data", expect, fld), BASE + FEAT + ["--dataset", spec], env, warned)
    assert_ok(o)


def _image_root(env, name):
    return F.image_tree(env["data_root"] / name)


def test_image_symlink_outside_root_is_refused_before_opening(env, baseline_run):
    root = _image_root(env, "linkout")
    outside = env["files"] / "outside.png"
    outside.write_bytes(F.tiny_png_bytes(7))
    os.symlink(outside, root / "a" / "escape.png")
    o = run_inprocess(Outcome("image symlink pointing outside the root", "paths", "clear", "root"),
                      BASE + FEAT + ["--dataset", f"image_folder:{root}"], env)
    assert_ok(o)
    assert "escape.png" in o.message


def test_jpg_symlink_to_system_file_is_never_opened(env, baseline_run, monkeypatch):
    root = _image_root(env, "linksys")
    os.symlink("/etc/hostname" if os.path.exists("/etc/hostname") else "/etc/passwd", root / "b" / "sys.jpg")
    opened = []
    import PIL.Image

    real_open = PIL.Image.open

    def spy(fp, *a, **k):
        opened.append(os.path.realpath(fp) if isinstance(fp, (str, os.PathLike)) else str(fp))
        return real_open(fp, *a, **k)

    monkeypatch.setattr(PIL.Image, "open", spy)
    o = run_inprocess(Outcome(".jpg symlink to a system file", "paths", "clear", "root"),
                      BASE + FEAT + ["--dataset", f"image_folder:{root}"], env,
                      lambda rc, out, err: [f"opened {p}" for p in opened if p.startswith("/etc")])
    assert_ok(o)


def test_app_data_root_path_with_outside_symlink(env, baseline_run):
    """The app's folder field: the folder is confined, and so is every file in it."""
    from mixdp_core.app_support.forms import dataset_spec_from_path
    from mixdp_core.errors import ConfigError
    from mixdp_core.features.cache import get_features

    root = _image_root(env, "applink")
    outside = env["files"] / "outside2.png"
    outside.write_bytes(F.tiny_png_bytes(9))
    os.symlink(outside, root / "b" / "escape.png")
    import time

    t0 = time.perf_counter()
    o = Outcome("app folder with a file symlink outside the data root", "paths", "clear", "root")
    with pytest.raises(ConfigError) as e:
        get_features(dataset_spec_from_path("image_folder", "applink"), "pixels")
    o.seconds = time.perf_counter() - t0
    o.outcome, o.message = ("clear", str(e.value)) if e.value.field == "root" else ("unclear", str(e.value))
    from .conftest import record

    record(o)
    assert_ok(o)
    with pytest.raises(ConfigError) as e2:
        dataset_spec_from_path("image_folder", "../..")
    assert e2.value.field == "path"


# ------------------------------------------------------------------ memory-bounded (subprocess)
CLI = ["-m", "mixdp_core.cli"]


@pytest.mark.parametrize("case,tail,fld", [
    ("epsilon 1e9 (was 22.9 GB)", ["--method", "fully_private", "--epsilon", "1e9"], "epsilon"),
    ("epsilon 1e5 (was MemoryError)", ["--method", "fully_private", "--epsilon", "1e5"], "epsilon"),
    ("noise-multiplier 1e9 (was MemoryError)", ["--method", "fully_private", "--noise-multiplier", "1e9"], "epsilon"),
])
def test_step_ceiling_memory_bounded(case, tail, fld, env, baseline_run):
    o = run_subprocess(Outcome(case, "budget", "clear", fld), CLI + BASE + ["--dataset", "digits"] + tail, env)
    assert_ok(o)
    if "--epsilon" in tail:  # above the largest ε a run may ask for: refused by its range, in plain words
        assert "[0.001, 1000]" in o.message
    else:
        assert "limit of 100,000 steps" in o.message and "noise_multiplier <=" in o.message


def test_npz_bomb_cli_memory_bounded(env, baseline_run):
    bomb = F.npz_bomb(env["files"] / "bomb.npz")
    assert bomb.stat().st_size < 20 * 2**20
    o = run_subprocess(Outcome("npz bomb: 2 GiB array in a ~10 MB file (was 4 GB, 53 s)", "data", "clear",
                               "features"), CLI + BASE + FEAT + ["--dataset", f"features:{bomb}"], env)
    assert_ok(o)
    assert "MIXDP_MAX_NPZ_BYTES" in o.message
