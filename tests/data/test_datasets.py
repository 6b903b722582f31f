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
