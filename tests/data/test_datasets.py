import numpy as np
import pytest

from mixdp_core.data import CorruptImageError, DATASETS, load_dataset, resolve_under
from mixdp_core.data.datasets import load_feature_file
from mixdp_core.errors import ConfigError, DataError, UnknownNameError

TORCHVISION_SETS = ["cifar10", "cifar100", "stl10", "food101", "flowers102", "oxford_pets", "dtd", "eurosat", "caltech101"]


def test_registry_has_all_datasets_and_unknown_lists_keys():
    for k in ["digits", "image_folder", "features", *TORCHVISION_SETS]:
        assert k in DATASETS
    with pytest.raises(UnknownNameError) as e:
        load_dataset("mnistt")
    assert "digits" in str(e.value) and "cifar10" in str(e.value)


def test_digits_fixed_split():
    d = load_dataset("digits")
    from sklearn.datasets import load_digits

    per_class = np.bincount(load_digits().target)
    n_test = int(sum(round(0.3 * n) for n in per_class))  # stratified, rounded per class
    assert (len(d.train), len(d.test)) == (1797 - n_test, n_test) == (1258, 539)
    assert np.bincount(d.train.labels).min() >= 120
    img, y = d.train[0]
    assert img.size == (8, 8) and y == d.train.labels[0]
    # 0..16 scaled to 0..255
    assert np.asarray(img).max() <= 255 and np.asarray(img).max() > 100
    assert np.array_equal(load_dataset("digits").test.labels, d.test.labels)


@pytest.mark.parametrize("name", TORCHVISION_SETS)
def test_torchvision_missing_files_clear_error(name, tmp_path):
    with pytest.raises(DataError) as e:
        load_dataset(name, root=str(tmp_path / "absent"))
    msg = str(e.value)
    assert name in msg and "download" in msg and str(tmp_path / "absent") in msg


def test_image_folder_seeded_split(png_tree):
    d = load_dataset(f"image_folder:{png_tree}", test_fraction=0.5, split_seed=1)
    assert d.class_names == ["cat", "dog", "eel"]
    assert len(d.train) + len(d.test) == 18
    assert np.bincount(d.test.labels).tolist() == [3, 3, 3]
    img, y = d.test[0]
    assert img.mode == "RGB" and img.size == (16, 16)
    d2 = load_dataset("image_folder", root=str(png_tree), test_fraction=0.5, split_seed=1)
    assert [str(p) for p in d2.train.paths] == [str(p) for p in d.train.paths]


def test_image_folder_train_test_subtrees(tmp_path):
    from tests.conftest import write_png_tree

    write_png_tree(tmp_path / "ds" / "train", per_class=4)
    write_png_tree(tmp_path / "ds" / "test", per_class=2, seed=1)
    d = load_dataset(f"image_folder:{tmp_path / 'ds'}", max_per_class=3)
    assert len(d.train) == 9 and len(d.test) == 6


def test_corrupt_file_named(png_tree):
    bad = png_tree / "dog" / "broken.png"
    bad.write_bytes(b"this is not a png")
    d = load_dataset(f"image_folder:{png_tree}", test_fraction=0.5)
    src = d.train if bad in list(d.train.paths) else d.test
    i = list(src.paths).index(bad)
    with pytest.raises(CorruptImageError) as e:
        src[i]
    assert "broken.png" in str(e.value)


def test_image_folder_errors(tmp_path):
    with pytest.raises(ConfigError, match="root"):
        load_dataset("image_folder")
    with pytest.raises(DataError, match="not a folder"):
        load_dataset(f"image_folder:{tmp_path / 'nope'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no class sub-folders"):
        load_dataset(f"image_folder:{tmp_path / 'empty'}")


def _write_npz(path, **over):
    rng = np.random.default_rng(0)
    arrs = dict(X_train=rng.normal(size=(20, 4)).astype(np.float16), y_train=np.arange(20) % 3,
                X_test=rng.normal(size=(6, 4)).astype(np.float16), y_test=np.arange(6) % 3,
                class_names=np.array(["a", "b", "c"]))
    arrs.update(over)
    arrs = {k: v for k, v in arrs.items() if v is not None}
    np.savez(path, **arrs)
    return path


def test_feature_file_float16_ok(tmp_path):
    fs = load_feature_file(_write_npz(tmp_path / "f.npz"))
    assert fs.X_train.dtype == np.float32 and fs.class_names == ["a", "b", "c"]
    d = load_dataset(f"features:{tmp_path / 'f.npz'}")
    assert d.features.n_classes == 3


@pytest.mark.parametrize("over,needle", [
    ({"X_test": None}, "X_test"),
    ({"X_train": np.full((20, 4), np.nan)}, "X_train: contains NaN"),
    ({"y_train": np.arange(20) % 5}, "y_train: labels must lie in"),
    ({"y_test": np.arange(5) % 3}, "y_test: must be 1-D with one label per row"),
    ({"X_test": np.zeros((6, 3))}, "X_test: has 3 features"),
    ({"X_train": np.arange(80).reshape(20, 4)}, "X_train: must be a float array"),
    # a scalar name (was "iteration over a 0-d array"), repeated or empty names, no feature columns
    ({"class_names": np.array("abc")}, "class_names: must be a 1-D array"),
    ({"class_names": np.array(["a", "a", "b"])}, "class_names: every class needs its own non-empty name"),
    ({"class_names": np.array(["", "", ""])}, "class_names: every class needs its own"),
    ({"X_train": np.zeros((20, 0), np.float32)}, "X_train: has no feature columns"),
])
def test_feature_file_validation_names_array(tmp_path, over, needle):
    with pytest.raises(DataError, match=needle.replace("(", r"\(")):
        load_feature_file(_write_npz(tmp_path / "f.npz", **over))


def test_feature_file_not_npz(tmp_path):
    p = tmp_path / "x.npz"
    p.write_text("garbage")
    with pytest.raises(DataError, match="not a readable .npz"):
        load_feature_file(p)


def test_resolve_under_refuses_escape(tmp_path):
    (tmp_path / "root" / "a").mkdir(parents=True)
    assert resolve_under(tmp_path / "root", "a") == (tmp_path / "root" / "a").resolve()
    for bad in ["../x", str(tmp_path), "/etc/passwd", "a/../../x"]:
        with pytest.raises(ConfigError, match="outside the data root"):
            resolve_under(tmp_path / "root", bad, field="upload")
    (tmp_path / "root" / "link").symlink_to(tmp_path)
    with pytest.raises(ConfigError):
        resolve_under(tmp_path / "root", "link/x")


@pytest.mark.parametrize("key,folder", [("cdfsl_cropdiseases", "cdfsl/CropDiseases"), ("cdfsl_eurosat", "cdfsl/EuroSAT"),
                                        ("cdfsl_isic", "cdfsl/ISIC")])
def test_cdfsl_targets_read_an_image_folder_under_the_data_root(key, folder, tmp_path, monkeypatch):
    from tests.conftest import write_png_tree

    monkeypatch.setenv("MIXDP_DATA_ROOT", str(tmp_path / "root"))
    with pytest.raises(DataError) as e:  # absent: one line naming the expected folder
        load_dataset(key)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{key}: no image folder at {str(tmp_path / 'root' / folder)!r}")
    write_png_tree(tmp_path / "root" / folder, per_class=5)
    d = load_dataset(key)
    assert d.name == key and d.class_names == ["cat", "dog", "eel"] and len(d.train) + len(d.test) == 15
    assert d.cache_key["cdfsl"] == key and d.cache_key["root"] == str((tmp_path / "root" / folder).resolve())
    other = write_png_tree(tmp_path / "elsewhere", per_class=4)
    assert len(load_dataset(f"{key}:{other}").train) + len(load_dataset(f"{key}:{other}").test) == 12


def test_carries_features_names_the_datasets_no_encoder_runs_on():
    from mixdp_core.data.datasets import carries_features

    assert carries_features("synthetic") and carries_features("features:/x/y.npz")
    assert not carries_features("digits") and not carries_features("image_folder:/data/x")
    assert not carries_features("featuresx")


def test_confinement_reads_what_it_checked(tmp_path, monkeypatch):
    """A relative spec is relative to the data root only: never to the app's upload folder
    (where nothing is outside) nor to the working directory the loader would read it from.
    The config that runs carries the resolved path that was checked."""
    from types import SimpleNamespace

    from mixdp_core.data.paths import confine_run_paths
    from mixdp_core.errors import ConfigError

    root, uploads, cwd = tmp_path / "root", tmp_path / "uploads", tmp_path / "cwd"
    for d in (root / "PACS" / "photo", uploads, cwd / "secret"):
        d.mkdir(parents=True)
    monkeypatch.setenv("MIXDP_DATA_ROOT", str(root))
    monkeypatch.chdir(cwd)

    def cfg(spec, **kw):
        return SimpleNamespace(**dict(dict(dataset=spec, public_from=None, dataset_root=None, dataset_kwargs={}), **kw))

    for spec in ("image_folder:secret", "image_folder:."):
        out = confine_run_paths(cfg(spec), also=[uploads])
        assert out.dataset != spec and out.dataset.startswith(f"image_folder:{root}")  # never the cwd
    with pytest.raises(ConfigError, match="dataset: '../cwd/secret' is outside the data root"):
        confine_run_paths(cfg("image_folder:../cwd/secret"), also=[uploads])
    shared = confine_run_paths(cfg("image_folder:PACS/photo"), also=[uploads])
    assert shared.dataset == f"image_folder:{root / 'PACS' / 'photo'}"  # a shared link's relative path
    with pytest.raises(ConfigError, match="dataset"):
        confine_run_paths(cfg(f"image_folder:{cwd / 'secret'}"), also=[uploads])  # absolute, outside
    got = confine_run_paths(cfg(f"image_folder:{uploads}", dataset_kwargs={"root": "PACS"}), also=[uploads])
    assert got.dataset_kwargs["root"] == str(root / "PACS")
    with pytest.raises(ConfigError, match="dataset.*cannot be resolved"):
        confine_run_paths(cfg("image_folder:x\x00y"), also=[uploads])
    loop = root / "loop"
    loop.symlink_to(loop)
    with pytest.raises(ConfigError, match="dataset"):
        confine_run_paths(cfg(f"image_folder:{loop}/a"), also=[uploads])
    # DPPL-Public's pool file is a path the run reads too (a free-text field of the Train page)
    with pytest.raises(ConfigError, match="public_pool: .* is outside the data root"):
        confine_run_paths(cfg("digits", method_params={"public_pool": str(cwd / "secret" / "p.npz")}), also=[uploads])
    pooled = confine_run_paths(cfg("digits", method_params={"public_pool": "pool.npz"}), also=[uploads])
    assert pooled.method_params["public_pool"] == str(root / "pool.npz")
    assert confine_run_paths(cfg("digits", method_params={"public_pool": "split"}), also=[uploads]).method_params == {
        "public_pool": "split"}


# ------------------------------------------------------------------ review fixes (data layer)
def _fake_eurosat(base, per_class=10):
    """A torchvision EuroSAT layout (``<base>/eurosat/2750/<class>/*.png``) of tiny PNGs."""
    from tests.conftest import write_png_tree

    write_png_tree(base / "eurosat" / "2750", classes=("A", "B", "C"), per_class=per_class)
    return base


def test_split_less_torchvision_key_carries_split_options_and_file_identity(tmp_path):
    """eurosat/caltech101 are split here: two split seeds are two row selections and must be
    two cache keys (the key left split_seed out: seed 1 got the seed-0 features)."""
    import os

    base = _fake_eurosat(tmp_path / "tv")
    d0 = load_dataset("eurosat", root=str(base), split_seed=0)
    d1 = load_dataset("eurosat", root=str(base), split_seed=1)
    assert list(d0.test.paths) != list(d1.test.paths) and len(d0.test) == len(d1.test) == 6
    assert d0.cache_key["split_seed"] == 0 and d1.cache_key["split_seed"] == 1
    assert d0.cache_key != d1.cache_key
    assert load_dataset("eurosat", root=str(base), split_seed=0).cache_key == d0.cache_key  # stable
    # content identity: a file rewritten in place with its old mtime put back changes the key
    f = base / "eurosat" / "2750" / "A" / "000.png"
    st = f.stat()
    import time

    time.sleep(0.02)  # ctime granularity (a clock tick)
    f.write_bytes(f.read_bytes())
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert load_dataset("eurosat", root=str(base), split_seed=0).cache_key["files"] != d0.cache_key["files"]


def test_torchvision_corrupt_file_is_named_and_pixel_limit_applies(tmp_path, monkeypatch):
    """A torchvision set decodes like an image folder: a bad file is a one-line
    CorruptImageError naming it (so skip_corrupt can skip it), the pixel limit is checked."""
    from mixdp_core.features import get_features

    base = _fake_eurosat(tmp_path / "tv", per_class=5)
    bad = base / "eurosat" / "2750" / "B" / "zz_bad.png"
    bad.write_bytes(b"")
    d = load_dataset("eurosat", root=str(base), test_fraction=0.2)
    src = d.train if str(bad) in d.train.paths else d.test
    with pytest.raises(CorruptImageError) as e:
        src[src.paths.index(str(bad))]
    assert "zz_bad.png" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(CorruptImageError, match="zz_bad.png"):
        get_features("eurosat", "pixels", root=str(base), cache_dir=tmp_path / "c")
    with pytest.warns(UserWarning, match="skipped 1"):
        fs = get_features("eurosat", "pixels", root=str(base), cache_dir=tmp_path / "c", skip_corrupt=True)
    assert fs.X_train.shape[0] + fs.X_test.shape[0] == 15 and fs.dim == 16 * 16 * 3
    monkeypatch.setenv("MIXDP_MAX_IMAGE_PIXELS", "100")  # the 16 x 16 images are 256 pixels
    ok = next(i for i, p in enumerate(d.train.paths) if p != str(bad))
    with pytest.raises(DataError, match="16 x 16 pixels.*MIXDP_MAX_IMAGE_PIXELS"):
        d.train[ok]


def test_image_folder_key_sees_a_file_replaced_with_its_old_mtime(tmp_path):
    """New pixels, same size, old mtime put back (what cp -p / rsync -t / tar x do): the key was
    path:size:int(mtime) and hit the old features; the ctime still changes."""
    import os
    import time

    from PIL import Image

    for c in ("a", "b"):
        (tmp_path / "bmp" / c).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(np.full((8, 8, 3), 40 * i, dtype=np.uint8)).save(tmp_path / "bmp" / c / f"{i}.bmp")
    spec = f"image_folder:{tmp_path / 'bmp'}"
    key = load_dataset(spec).cache_key["files"]
    assert load_dataset(spec).cache_key["files"] == key  # stable while nothing changes
    f = tmp_path / "bmp" / "a" / "0.bmp"
    st = f.stat()
    time.sleep(0.02)  # ctime granularity (a clock tick)
    Image.fromarray(np.full((8, 8, 3), 200, dtype=np.uint8)).save(f)  # BMP: same byte size
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (f.stat().st_size, f.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert load_dataset(spec).cache_key["files"] != key


def test_a_test_image_linked_to_a_train_image_is_refused(tmp_path):
    import os

    from tests.conftest import write_png_tree

    root = tmp_path / "tt"
    write_png_tree(root / "train", classes=("a", "b"), per_class=3)
    write_png_tree(root / "test", classes=("a", "b"), per_class=2, seed=1)
    assert len(load_dataset(f"image_folder:{root}").test) == 4
    (root / "test" / "a" / "t0.png").symlink_to(os.path.relpath(root / "train" / "a" / "000.png", root / "test" / "a"))
    with pytest.raises(DataError) as e:
        load_dataset(f"image_folder:{root}")
    msg = str(e.value)
    assert "\n" not in msg and "same file" in msg and str(root) in msg and "t0.png" in msg
    # stratified: two names for one file in one class (here a hard link) could land on both sides
    flat = write_png_tree(tmp_path / "flat", classes=("a", "b"), per_class=4)
    os.link(flat / "a" / "000.png", flat / "a" / "zz.png")
    with pytest.raises(DataError, match="same file"):
        load_dataset(f"image_folder:{flat}", test_fraction=0.5)


def test_stratified_split_leaves_every_class_a_train_row(tmp_path):
    from mixdp_core.data.datasets import _stratified_split
    from tests.conftest import write_png_tree

    y = np.array([0, 0, 1, 1, 1, 1, 1])
    tr, te = _stratified_split(y, 0.8, 0)
    assert np.bincount(y[tr]).tolist() == [1, 1] and np.bincount(y[te]).tolist() == [1, 4]
    two = write_png_tree(tmp_path / "two", classes=("a", "b"), per_class=2)
    d = load_dataset(f"image_folder:{two}", test_fraction=0.8)
    assert np.bincount(d.train.labels).tolist() == [1, 1] and np.bincount(d.test.labels).tolist() == [1, 1]
    with pytest.raises(ConfigError, match=r"test_fraction: must lie in \(0, 1\)"):
        load_dataset(f"image_folder:{two}", test_fraction=1.0)


def test_max_test_per_class_caps_the_stratified_test_rows(tmp_path):
    from tests.conftest import write_png_tree

    mid = write_png_tree(tmp_path / "mid", classes=("a", "b"), per_class=20)
    full = load_dataset(f"image_folder:{mid}")
    capped = load_dataset(f"image_folder:{mid}", max_test_per_class=1)
    assert len(full.test) == 8 and len(capped.test) == 2 and np.bincount(capped.test.labels).tolist() == [1, 1]
    assert list(capped.train.paths) == list(full.train.paths)  # dropped, not moved to train
    assert set(capped.test.paths) <= set(full.test.paths)
    assert capped.cache_key != full.cache_key and capped.cache_key["max_test_per_class"] == 1
    with pytest.raises(ConfigError, match="max_test_per_class"):
        load_dataset(f"image_folder:{mid}", max_test_per_class=0)


def test_folder_scan_is_bounded(tmp_path, monkeypatch):
    """max_per_class resolves only the first n names per class; a file-count limit stops the
    listing of a huge folder with one line naming it."""
    from mixdp_core.data import datasets as dmod
    from tests.conftest import write_png_tree

    root = write_png_tree(tmp_path / "many", classes=("a", "b", "c"), per_class=30, size=4)
    calls = []
    real = dmod._confined
    monkeypatch.setattr(dmod, "_confined", lambda f, r: calls.append(f) or real(f, r))
    d = load_dataset(f"image_folder:{root}", max_per_class=2, test_fraction=0.5)
    assert [p.name for p in d.train.paths + d.test.paths if p.parent.name == "a"] != []
    assert sorted(p.name for p in list(d.train.paths) + list(d.test.paths)) == ["000.png", "000.png", "000.png",
                                                                               "001.png", "001.png", "001.png"]
    assert len(calls) == 3 + 3 * 2  # the class folders, then 2 files per class (was 3 + 90)
    monkeypatch.setattr(dmod, "MAX_FOLDER_FILES", 50)
    with pytest.raises(DataError) as e:
        load_dataset(f"image_folder:{root}", max_per_class=2)
    msg = str(e.value)
    assert "\n" not in msg and str(root) in msg and "more than 50 files" in msg


def test_scan_keeps_the_sorted_path_order_with_sub_folders(tmp_path):
    """Sorted as Path objects sort (part by part: 'x/0.png' before 'x.png'), as before."""
    from PIL import Image

    for rel in ["a/x.png", "a/x/0.png", "a/b.png", "b/0.png", "b/.hidden.png"]:
        (tmp_path / "r" / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.zeros((4, 4, 3), dtype=np.uint8) + len(rel)).save(tmp_path / "r" / rel)
    from mixdp_core.data.datasets import _list_class_tree

    paths, y, classes = _list_class_tree(tmp_path / "r", None)
    assert [str(p.relative_to(tmp_path / "r")) for p in paths] == ["a/b.png", "a/x/0.png", "a/x.png", "b/0.png"]
    assert sorted((tmp_path / "r" / "a").rglob("*.png"))[1:] == paths[1:3]
    paths, _, _ = _list_class_tree(tmp_path / "r", 2)
    assert [p.name for p in paths] == ["b.png", "0.png", "0.png"]


@pytest.mark.parametrize("te,needle", [
    (np.full((3, 4), np.nan, dtype=np.float32), "text_embeddings: must be a finite float array; 3 of 3"),
    (np.array([["a"] * 4] * 3), "text_embeddings: must be a finite float array, got dtype <U1"),
])
def test_feature_file_text_embeddings_must_be_finite_floats(tmp_path, te, needle):
    with pytest.raises(DataError, match=needle.replace("(", r"\(")):
        load_feature_file(_write_npz(tmp_path / "f.npz", text_embeddings=te))
    fs = load_feature_file(_write_npz(tmp_path / "g.npz", text_embeddings=np.eye(3, 4, dtype=np.float16)))
    assert fs.text_embeddings.dtype == np.float32 and fs.text_embeddings.shape == (3, 4)
    from mixdp_core.featureset import FeatureSet

    with pytest.raises(DataError, match="text_embeddings: must be a finite float array"):
        FeatureSet(fs.X_train, fs.y_train, fs.X_test, fs.y_test, fs.class_names,
                   text_embeddings=np.where(np.eye(3, 4) > 0, np.inf, 0.0))


def test_corrupt_image_error_is_one_line_for_a_name_with_a_newline(tmp_path):
    from tests.conftest import write_png_tree

    root = write_png_tree(tmp_path / "odd", classes=("a", "b"), per_class=2)
    bad = root / "a" / "bad\nname.png"
    bad.write_bytes(b"")
    d = load_dataset(f"image_folder:{root}", test_fraction=0.5)
    src = d.train if bad in list(d.train.paths) else d.test
    with pytest.raises(CorruptImageError) as e:
        src[list(src.paths).index(bad)]
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"corrupt or non-image file {str(bad)!r}")
    assert "\n" not in str(CorruptImageError("x.png", "line one\nline two"))


def test_public_from_the_runs_own_data_set_is_refused(tmp_path):
    """Reloaded with its own defaults, the same data set's train rows are not the run's: with
    another split_seed some of the run's test rows became public rows (60 of 200 on digits)."""
    from mixdp_core.data.datasets import public_source
    from mixdp_core.errors import ConfigError

    (tmp_path / "a").mkdir()
    for ds, pf in (("digits", "digits"), (f"image_folder:{tmp_path / 'a'}", f"image_folder:{tmp_path}/./a")):
        with pytest.raises(ConfigError, match="public_from: .*the run's own data set"):
            public_source(ds, {"split_seed": 1}, pf)
    assert public_source("digits", {}, f"image_folder:{tmp_path / 'a'}") == (f"image_folder:{tmp_path / 'a'}", {})
    # the folder given as a root, or another copy of a named set, is the same data too
    for ds, kw, root, pf in (("image_folder", {}, str(tmp_path / "a"), f"image_folder:{tmp_path / 'a'}"),
                             ("image_folder", {"root": str(tmp_path / "a")}, None, f"image_folder:{tmp_path / 'a'}"),
                             ("cifar10", {}, None, "cifar10:/elsewhere")):
        with pytest.raises(ConfigError, match="public_from"):
            public_source(ds, kw, pf, root)


def test_public_from_the_same_data_under_another_name_is_refused(tmp_path, monkeypatch):
    """A review used a folder as its own public data under a second spelling (a CD-FSL name and
    image_folder, the CD-FSL set at its fixed place, a hard-linked feature file): the public rows
    were private rows and the run reported an ε that bounded nothing."""
    import os

    from mixdp_core.data.datasets import public_source
    from mixdp_core.errors import ConfigError

    monkeypatch.setenv("MIXDP_DATA_ROOT", str(tmp_path))
    f = tmp_path / "cdfsl" / "EuroSAT"
    f.mkdir(parents=True)
    (tmp_path / "x.npz").write_bytes(b"")
    os.link(tmp_path / "x.npz", tmp_path / "x_hard.npz")
    for ds, pf in ((f"cdfsl_eurosat:{f}", f"image_folder:{f}"), (f"image_folder:{f}", "cdfsl_eurosat"),
                   ("cdfsl_eurosat", f"image_folder:{f}"), (f"features:{tmp_path / 'x_hard.npz'}",
                                                            f"features:{tmp_path / 'x.npz'}")):
        with pytest.raises(ConfigError, match="public_from: .*the run's own data set"):
            public_source(ds, {}, pf)
    # other data stay allowed: another folder, another file (same bytes, another inode)
    (tmp_path / "other").mkdir()
    (tmp_path / "x_copy.npz").write_bytes(b"")
    assert public_source("cdfsl_eurosat", {}, f"image_folder:{tmp_path / 'other'}")[0].endswith("other")
    assert public_source(f"features:{tmp_path / 'x_copy.npz'}", {}, f"features:{tmp_path / 'x.npz'}")[0]


def test_a_torchvision_sets_identity_reads_its_own_folder_only(tmp_path, monkeypatch):
    """CIFAR-10's root is often a shared data folder: its identity walked all of it (an
    unrelated file re-encoded the features; 10^6 entries refused the load)."""
    import torchvision.datasets as tvd

    from mixdp_core.data import datasets as D

    class FakeCIFAR:  # torchvision's CIFAR10 as the loader sees it: items in memory, one batches folder
        base_folder = "cifar-10-batches-py"

        def __init__(self, root, download=False, train=True):
            self.targets, self.classes = [0, 1] * 5, ["a", "b"]

        def __len__(self):
            return 10

    monkeypatch.setattr(tvd, "CIFAR10", FakeCIFAR)
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_text("x")
    (tmp_path / "other_project").mkdir()
    k1 = D.load_dataset("cifar10", root=str(tmp_path)).cache_key["files"]
    (tmp_path / "other_project" / "notes.txt").write_text("unrelated")
    assert D.load_dataset("cifar10", root=str(tmp_path)).cache_key["files"] == k1
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_text("changed")
    assert D.load_dataset("cifar10", root=str(tmp_path)).cache_key["files"] != k1


@pytest.mark.parametrize("spec, key", [("synthetic", "classes"), ("synthetic", "dim"), ("digits", "split_seed"),
                                       ("synthetic", "data_seed")])
def test_a_null_option_is_refused_naming_it_before_a_run_exists(spec, key):
    """`--dataset-arg classes=null` skipped the check (None meant "unset" for every option) and
    crashed the loader with a TypeError after a run row existed; None is allowed only where the
    option declares it (max_per_class: no limit)."""
    from mixdp_core.data.datasets import check_dataset_kwargs
    from mixdp_core.errors import ConfigError

    with pytest.raises(ConfigError, match=f"{key}: must be"):
        check_dataset_kwargs(spec, {key: None})
    check_dataset_kwargs("image_folder", {"max_per_class": None})  # optional: "no limit"


def test_the_synthetic_spectrums_participation_ratio_is_the_one_documented():
    """The docstring said r·ln(D/r) (89 at D = 4096, r = 16); the spectrum spans r·ln²(D/r)
    (485): five times more directions than documented."""
    import math

    from mixdp_core.data.synthetic import spectrum

    for D, r in ((4096, 16), (4096, 64)):
        lam = spectrum(D, r)
        pr = lam.sum() ** 2 / (lam ** 2).sum()
        assert pr == pytest.approx(r * math.log(D / r) ** 2, rel=0.05)
