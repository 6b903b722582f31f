"""Form helpers of the app: widget specs from method configs, validation, safe uploads.

Nothing here trains anything; it turns widget values into a validated
:class:`~mixdp_core.runs.runner.RunConfig` (or a list of field errors that the page shows
next to the form), and stores uploads safely inside the cache folder.

Errors are returned as ``{field: message}`` where ``field`` is the user-visible field name
(``"epsilon"``, ``"delta"``, ``"method"``, ``"upload"``...), matching the ``field`` of
:class:`~mixdp_core.errors.ConfigError`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import math
import re
import shutil
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import ConfigError, DataError, MixDPError, UnknownNameError, field_and_message

#: ε values offered by the log-scale slider (about 0.05-20).
EPSILON_GRID: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0,
                                   6.0, 8.0, 10.0, 12.0, 15.0, 20.0)
#: δ values offered by the δ selector.
DELTA_CHOICES: tuple[float, ...] = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7)
#: RunConfig-level fields that the main form sets (never shown in "advanced").
MAIN_FIELDS = ("target_epsilon", "target_delta", "seed", "noise_multiplier")

#: Bounds of the Data page's split fields, which a shared Compare link must respect too
#: (``compare_url.from_query``): a link outside them would break the page's widgets.
MAX_PUBLIC_PER_CLASS = 500
MAX_FORM_IMBALANCE_RATIO = 1000.0
#: Upload limits (bytes / files); the server limit is in .streamlit/config.toml.
MAX_NPZ_BYTES = 200 * 2**20
MAX_ZIP_BYTES = 200 * 2**20
MAX_ZIP_UNCOMPRESSED = 1024 * 2**20
MAX_ZIP_FILES = 50_000
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")


# --------------------------------------------------------------------------- registries
def method_classes() -> dict[str, type]:
    """``{name: class}`` of every registered method (never a hard-coded list)."""
    from ..methods import METHODS

    return dict(METHODS.items())


def encoder_classes() -> dict[str, type]:
    """``{name: class}`` of every registered encoder."""
    from ..encoders import ENCODERS

    return dict(ENCODERS.items())


def dataset_names() -> list[str]:
    """Registered dataset keys."""
    from ..data import DATASETS

    return DATASETS.keys()


def families() -> dict[str, list[str]]:
    """Registered methods grouped by their ``family`` attribute (registry order)."""
    out: dict[str, list[str]] = {}
    for name, cls in method_classes().items():
        out.setdefault(getattr(cls, "family", "") or "other", []).append(name)
    return out


def demo_config() -> Any:
    """The Home page's one-click demo: digits · pixels · AdaMix · ε = 3 (seconds on a CPU, no
    feature extraction)."""
    from ..runs.runner import RunConfig

    return RunConfig(dataset="digits", encoder="pixels", method="adamix", target_epsilon=3.0,
                     target_delta=1e-5, seed=0)


#: The Data page's controls of the ``synthetic`` dataset: (option, label, kind, default, help).
SYNTHETIC_CONTROLS = (
    ("classes", "Classes", int, 100, "2 to 1000; the regimes users meet have ≥ 100"),
    ("dim", "Feature dimension D", int, 256, "2 to 4096 (EfficientNet-Lite0 features have 1280)"),
    ("train_per_class", "Train rows per class (public + private pool)", int, 64, "2 to 5000"),
    ("test_per_class", "Test rows per class", int, 20, "1 to 1000"),
    ("separation", "Class separation", float, 6.0, "0 to 100: class means ≈ separation·√2 noise stds apart"),
    ("effective_rank", "Spectrum decay scale r", float, 16.0, "covariance eigenvalues ∝ 1/(1 + j/r); larger = flatter"),
    ("shared_mean", "Shared mean", float, 0.0, "0 to 100: a nonnegative mean common to all classes (× √D), as "
                                               "encoder features have; larger = each row carries less class signal"),
    ("ambiguity", "Ambiguous rows", float, 0.0, "0 to 0.5: share of rows drawn around another class (label kept): "
                                                "an error floor no data removes"),
    ("shift", "Public → private shift", float, 0.0, "0 to 10: how far each public class mean lies from its private "
                                                     "one, in units of the class means' spread; acts when 'Public data "
                                                     "from' is synthetic (this regime's public domain)"),
    ("data_seed", "Data seed", int, 0, "seed of the generated data (the run's seed makes the split)"),
)


def synthetic_options_form(current: Mapping[str, Any]) -> dict[str, Any]:
    """Draw the ``synthetic`` options (number inputs) and return them as loader options;
    ranges are checked when a run is configured (``DATASET_ARG_SPECS``)."""
    import streamlit as st

    out: dict[str, Any] = {}
    cols = st.columns(3)
    for i, (name, label, kind, default, help_text) in enumerate(SYNTHETIC_CONTROLS):
        v = current.get(name, default)
        with cols[i % 3]:
            if kind is int:
                out[name] = int(st.number_input(label, value=int(v), step=1, key=f"syn_{name}", help=help_text))
            else:
                out[name] = float(st.number_input(label, value=float(v), key=f"syn_{name}", help=help_text,
                                                  format="%.4g"))
    return out


def demo_references(demo: Any = None) -> list[Any]:
    """What the demo's result is read against (a second each): Only-Public (public samples
    only, ε = 0) and Fully-Private at the demo's ε, on the demo's split."""
    import dataclasses

    demo = demo or demo_config()
    return [dataclasses.replace(demo, method="only_public"), dataclasses.replace(demo, method="fully_private")]


# --------------------------------------------------------------------------- field specs
@dataclass(frozen=True)
class FieldSpec:
    """How to draw one method-config field in the "advanced" expander.

    Built from the field's declaration (:func:`mixdp_core.config.describe`); nothing is
    parsed from docstrings or error messages.

    Attributes:
        name: config field name.
        kind: ``"bool"``, ``"int"``, ``"float"``, ``"choice"`` or ``"text"`` (JSON / free text).
        default: the config default.
        optional: ``None`` is allowed (an empty text field).
        none_means: what the empty field (``None``) does, for its label (``"auto"`` unless declared).
        choices: allowed values for ``"choice"``.
        leaks_private: the option looks at private data (e.g. optimistic tuning); the UI must
            say it costs privacy / leaks private information.
        leak_condition: when it does, in words (``""``: whenever set; ``"when 'public'"``).
        help: the declared help text (plus the declared privacy cost for leaky options).
    """

    name: str
    kind: str
    default: Any
    optional: bool = False
    choices: tuple[Any, ...] = ()
    leaks_private: bool = False
    help: str = ""
    none_means: str = "auto"
    leak_condition: str = ""


def leaks_private(config_cls: type, name: str) -> bool:
    """Whether field ``name`` of ``config_cls`` is declared ``leaks_private=True``."""
    from ..config import describe

    return any(s.name == name and s.leaks_private for s in describe(config_cls))


def _kind(spec: Any) -> str:
    if spec.type is bool:
        return "bool"
    if len(spec.choices) >= 2 and all(isinstance(c, str) for c in spec.choices):
        return "choice"
    if spec.type is int:
        return "int"
    if spec.type is float:
        return "float"
    return "text"


def field_spec(spec: Any) -> FieldSpec:
    """The :class:`FieldSpec` of one :class:`~mixdp_core.config.ParamSpec`."""
    from ..config import default_of

    kind = _kind(spec)
    default = default_of(spec)
    help_text = spec.help
    if spec.leaks_private:
        when = f" {spec.leak_condition()}" if spec.leaks_when else ""
        help_text = f"{help_text} Costs privacy{when}: {spec.privacy_note}".strip()
    elif spec.privacy_note:
        help_text = f"{help_text} Privacy: {spec.privacy_note}".strip()
    choices = _usable_choices(spec) if kind == "choice" else ()
    return FieldSpec(name=spec.name, kind=kind, default=default, optional=spec.optional and kind != "bool",
                     choices=choices, leaks_private=spec.leaks_private, help=help_text,
                     none_means=spec.none_means, leak_condition=spec.leak_condition())


def _usable_choices(spec: Any) -> tuple[Any, ...]:
    """The declared choices that the field's own ``check`` accepts on this machine (e.g. no
    ``device='cuda'`` where torch sees no GPU): a form offers only what it can run."""
    if spec.check is None:
        return spec.choices
    usable = []
    for c in spec.choices:
        try:
            spec.check(c)
        except ConfigError:
            continue
        usable.append(c)
    return tuple(usable)


def method_field_specs(method: str) -> list[FieldSpec]:
    """Widget specs of the method's config fields other than the main-form ones."""
    from ..config import describe

    mcls = method_classes()[method]
    # a method that releases nothing private has no noise to draw: no "noise" widget for it
    hidden = MAIN_FIELDS if mcls.private and mcls.uses_private_data else (*MAIN_FIELDS, "noise")
    return [field_spec(s) for s in describe(mcls.config_cls) if s.name not in hidden]


def parse_text_value(spec: FieldSpec, text: str) -> Any:
    """Parse a free-text advanced value: JSON if it parses, else the raw string.

    Raises:
        ConfigError: empty text for a non-optional field.
    """
    import json

    t = text.strip()
    if isinstance(spec.default, str) and t.lower() == spec.default.lower():
        return spec.default  # the field's own default ("auto" of arch / device, "none" of projection), not "empty"
    if not t or t.lower() in ("none", "null", "auto"):
        if spec.optional or spec.default is None:
            return None
        raise ConfigError(spec.name, "must not be empty")
    try:
        v = json.loads(t)
    except ValueError:
        return t
    if isinstance(spec.default, tuple) and isinstance(v, list):
        return tuple(v)
    return v


def changed_params(method: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that differ from the method config's defaults (so that the
    config hash of a default run does not depend on which widgets were drawn)."""
    specs = {s.name: s for s in method_field_specs(method)}
    out = {}
    for k, v in values.items():
        s = specs.get(k)
        if s is None:
            continue
        if isinstance(s.default, tuple) and isinstance(v, list):
            v = tuple(v)
        if v != s.default:
            out[k] = v
    return out


# --------------------------------------------------------------------------- validation
def text_requirement(method: str, params: Mapping[str, Any] | None = None) -> str | None:
    """Why ``method`` with ``params`` needs CLIP text embeddings, or ``None`` if it does not.

    A method needs them if its class says ``needs_text`` or its ``init`` parameter is
    ``"text"`` (text initialization, AdaMix Sec. 3.3).
    """
    cls = method_classes()[method]
    if getattr(cls, "needs_text", False):
        return f"method {method!r} needs CLIP text embeddings"
    params = dict(params or {})
    init = params.get("init")
    if init is None:
        f = {x.name: x for x in dataclasses.fields(cls.config_cls)}.get("init")
        init = f.default if f is not None else None
    if init == "text":
        return "init='text' (text initialization) needs CLIP text embeddings"
    return None


def compatibility_error(method: str, encoder: str, params: Mapping[str, Any] | None = None,
                        dataset: str | None = None) -> dict[str, str]:
    """Field errors for a method that cannot run with this encoder / dataset.

    ``features:`` datasets carry their own text embeddings (or not), so the text check is
    skipped for them; the runner reports a missing array at run time.
    """
    errors: dict[str, str] = {}
    cls = method_classes().get(method)
    if getattr(cls, "input_kind", "rows") == "images" and encoder != "pixels":
        # it trains a network on the images themselves (it failed after the job ran, on features)
        errors["method"] = (f"trains a network on the images, but encoder {encoder!r} gives features; "
                            "choose the 'pixels' encoder or another method")
        return errors
    need = text_requirement(method, params)
    if need and not (dataset or "").startswith("features:"):
        enc = encoder_classes().get(encoder)
        if enc is not None and not getattr(enc, "has_text", False):
            texts = [n for n, c in encoder_classes().items() if getattr(c, "has_text", False)]
            field = "init" if (params or {}).get("init") == "text" and not getattr(
                method_classes()[method], "needs_text", False) else "method"
            errors[field] = (f"{need}, but encoder {encoder!r} has no text tower; choose a CLIP "
                             f"encoder ({', '.join(texts)}) or another {'init' if field == 'init' else 'method'}")
    return errors


def build_run_config(values: Mapping[str, Any]) -> tuple[Any, dict[str, str]]:
    """Validate form values and build a ``RunConfig``.

    Args:
        values: ``dataset, encoder, method, seed, target_epsilon, target_delta,
            public_per_class, imbalance_ratio, public_from, method_params, dataset_root,
            dataset_kwargs, encoder_kwargs`` (missing keys take RunConfig defaults).

    Returns:
        ``(config, {})`` on success, else ``(None, {field: message})``.
    """
    from ..config import RUN_DELTA, RUN_EPSILON, check
    from ..runs.runner import RunConfig

    v = dict(values)
    errors: dict[str, str] = {}
    for key, spec, field in (("target_epsilon", RUN_EPSILON, "epsilon"), ("target_delta", RUN_DELTA, "delta")):
        try:
            check(spec, v.get(key, getattr(RunConfig, key)), field=field)
        except ConfigError as e:  # a run's declared range, e.g. "epsilon: must be a finite number in [0.001, 1000]"
            errors[e.field] = e.message
    method = v.get("method")
    if method not in method_classes():
        errors["method"] = f"unknown method {method!r}; choose one of: {', '.join(method_classes())}"
    encoder = v.get("encoder")
    if encoder not in encoder_classes():
        errors["encoder"] = f"unknown encoder {encoder!r}; choose one of: {', '.join(encoder_classes())}"
    if "method" not in errors and "encoder" not in errors:
        errors.update(compatibility_error(method, encoder, v.get("method_params"), v.get("dataset")))
    if "method" not in errors:  # every bad field at once, each against its own declaration
        from ..config import describe

        specs = {sp.name: sp for sp in describe(method_classes()[method].config_cls)}
        for name, val in dict(v.get("method_params") or {}).items():
            if name in specs and name not in errors:
                try:
                    check(specs[name], val, field=name)
                except ConfigError as e:  # the form's words: an empty field is None there
                    msg = e.message
                    errors[e.field] = (msg.replace(" or None (", " or empty (") if " or None (" in msg
                                       else msg.replace(" or None", f" or empty ({specs[name].none_means})"))
    if errors:
        return None, errors
    names = {f.name for f in dataclasses.fields(RunConfig)}
    try:
        cfg = RunConfig(**{k: val for k, val in v.items() if k in names})
        cfg.preflight()  # the budget, once, before the launch (the runner trusts the remembered check)
    except ConfigError as e:
        return None, {e.field: e.message}
    except UnknownNameError as e:
        return None, {"config": str(e)}
    except (MixDPError, TypeError, ValueError) as e:
        return None, {"config": str(e)}
    return cfg, {}


# --------------------------------------------------------------------------- uploads
def uploads_dir(cache_dir: str | Path | None = None) -> Path:
    """Folder (inside the feature cache) that receives uploads; created if missing."""
    from ..features.cache import default_cache_dir

    from .._io import storage_error, sweep_orphans

    d = Path(cache_dir) if cache_dir else default_cache_dir()
    d = d / "_uploads"
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise storage_error(e, d, what="upload",
                            fix="set MIXDP_CACHE to a writable folder with free space") from None
    sweep_orphans(d, (".*.tmp",))  # leftovers of interrupted uploads
    return d


def save_npz_upload(data: bytes, filename: str, *, cache_dir: str | Path | None = None,
                    max_bytes: int = MAX_NPZ_BYTES) -> str:
    """Validate an uploaded feature file and store it in the cache.

    Returns:
        The dataset spec ``"features:<path>"``.

    Raises:
        ConfigError: field ``upload``: wrong extension, too large, not an ``.npz`` archive,
            or missing / malformed arrays (message from the feature loader).
    """
    from ..data.datasets import load_feature_file

    if not filename.lower().endswith(".npz"):
        raise ConfigError("upload", f"a feature file must end in .npz, got {filename!r}")
    if len(data) > max_bytes:
        raise ConfigError("upload", f"file is {len(data) / 2**20:.1f} MiB; the limit is {max_bytes / 2**20:.0f} MiB")
    if not data.startswith(b"PK"):
        raise ConfigError("upload", f"{filename!r} is not an .npz archive (no zip signature)")
    from .._io import storage_error

    digest = hashlib.sha256(data).hexdigest()[:16]
    dest = uploads_dir(cache_dir) / f"{digest}.npz"
    tmp = dest.with_name(f".{dest.name}.tmp")
    try:
        try:
            tmp.write_bytes(data)
        except OSError as e:
            raise storage_error(e, tmp, what="upload", fix="free some space or set MIXDP_CACHE") from None
        try:
            load_feature_file(tmp)  # headers and sizes checked before any array is read
        except ConfigError as e:
            if e.field.startswith("MIXDP_"):  # a bad limit variable is the setting's error, not the file's
                raise
            msg = str(e).replace(repr(str(tmp)), repr(filename)).replace(str(tmp), filename)
            raise ConfigError("upload", f"{filename!r} is not a valid feature file: {msg}") from None
        except (DataError, ValueError) as e:
            # the user's file name, not the cache's temporary path, in what the page shows
            msg = str(e).replace(repr(str(tmp)), repr(filename)).replace(str(tmp), filename)
            raise ConfigError("upload", f"{filename!r} is not a valid feature file: {msg}") from None
        tmp.replace(dest)
    finally:  # no orphan .tmp on any failure path (KeyboardInterrupt included)
        tmp.unlink(missing_ok=True)
    return f"features:{dest}"


def _is_image(data: bytes) -> bool:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.verify()
        return True
    except Exception:
        return False


def _image_problem(path: Path) -> str | None:
    """Why ``path`` cannot be used as an image (``None``: it decodes). An image past Pillow's
    decompression-bomb limit is an image, but one the loaders refuse too: said as such."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            im.verify()
        return None
    except Image.DecompressionBombError:
        return (f"has more pixels than the image loader accepts ({2 * Image.MAX_IMAGE_PIXELS:,}, Pillow's "
                "decompression-bomb limit): resize it")
    except Exception:
        return "is not an image"


def extract_zip_upload(data: bytes, filename: str, *, cache_dir: str | Path | None = None,
                       max_bytes: int = MAX_ZIP_BYTES, max_uncompressed: int = MAX_ZIP_UNCOMPRESSED,
                       max_files: int = MAX_ZIP_FILES) -> str:
    """Extract an uploaded zip of class folders (``<class>/<image>``) into the cache.

    Every member path is checked with :func:`mixdp_core.data.resolve_under` against the
    destination folder (zip-slip guard: ``..``, absolute paths and links are refused), the
    uncompressed size and file count are limited, and every file must decode as an image.
    A single top-level folder wrapping the class folders is stripped. Extraction goes to a
    temporary folder that is renamed into place only when complete.

    Returns:
        The dataset spec ``"image_folder:<folder>"``.

    Raises:
        ConfigError: field ``upload``, naming what is wrong.
    """
    from ..data.paths import resolve_under

    if not filename.lower().endswith(".zip"):
        raise ConfigError("upload", f"an image archive must end in .zip, got {filename!r}")
    if len(data) > max_bytes:
        raise ConfigError("upload", f"archive is {len(data) / 2**20:.1f} MiB; the limit is {max_bytes / 2**20:.0f} MiB")
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise ConfigError("upload", f"{filename!r} is not a zip archive") from None
    with zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        for i in infos:  # zip-slip: refuse, do not silently skip, entries escaping the folder
            name = i.filename.replace("\\", "/")
            if name.startswith("/") or ".." in PurePosixPath(name).parts or re.match(r"^[A-Za-z]:", name):
                raise ConfigError("upload", f"{i.filename!r} points outside the archive folder")
        infos = [i for i in infos if not any(p.startswith(".") or p == "__MACOSX"
                                             for p in PurePosixPath(i.filename).parts)]
        if not infos:
            raise ConfigError("upload", f"{filename!r} contains no files")
        if len(infos) > max_files:
            raise ConfigError("upload", f"{filename!r} has {len(infos)} files; the limit is {max_files}")
        total = sum(i.file_size for i in infos)
        if total > max_uncompressed:
            raise ConfigError("upload", f"{filename!r} unpacks to {total / 2**20:.0f} MiB; the limit is "
                                        f"{max_uncompressed / 2**20:.0f} MiB")
        for i in infos:
            if stat.S_ISLNK(i.external_attr >> 16):
                raise ConfigError("upload", f"{i.filename!r} is a symbolic link; links are not allowed")
        parts = [PurePosixPath(i.filename.replace("\\", "/")).parts for i in infos]
        # strip one common top-level folder (zip of the folder itself)
        if all(len(p) >= 3 for p in parts) and len({p[0] for p in parts}) == 1:
            parts = [p[1:] for p in parts]
        if any(len(p) != 2 for p in parts):
            bad = next(infos[k].filename for k, p in enumerate(parts) if len(p) != 2)
            raise ConfigError("upload", f"expected <class>/<image> entries, found {bad!r}")
        classes = sorted({p[0] for p in parts})
        if len(classes) < 2:
            raise ConfigError("upload", f"need at least 2 class folders, found {len(classes)}")
        digest = hashlib.sha256(data).hexdigest()[:16]
        base = uploads_dir(cache_dir)
        dest = base / f"images-{digest}"
        if dest.is_dir():
            return f"image_folder:{dest}"
        tmp = base / f".images-{digest}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir()
        except OSError as e:
            from .._io import storage_error

            raise storage_error(e, tmp, what="upload", fix="set MIXDP_CACHE to a writable folder") from None
        try:
            from .._io import storage_error
            from ..safe_npz import copy_member

            budget = [max_uncompressed]  # running count over the bytes actually unpacked
            for info, p in zip(infos, parts):
                target = resolve_under(tmp, Path(*p), field="upload")  # defence in depth
                if Path(p[-1]).suffix.lower() not in IMAGE_SUFFIXES:
                    raise ConfigError("upload", f"{info.filename!r} is not an image")
                target.parent.mkdir(parents=True, exist_ok=True)
                try:  # streamed in chunks: a member lying about its size stops at the limit
                    with open(target, "wb") as out:
                        copy_member(zf, info, out, field="upload", budget=budget)
                except DataError as e:
                    raise ConfigError("upload", field_and_message(e, "upload")[1]) from None
                except OSError as e:
                    raise storage_error(e, target, what="upload", fix="free some space or set MIXDP_CACHE") from None
                problem = _image_problem(target)
                if problem:
                    raise ConfigError("upload", f"{info.filename!r} {problem}")
            tmp.rename(dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return f"image_folder:{dest}"


def dataset_spec_from_path(key: str, path: str) -> str:
    """``"<key>:<path>"`` for a path typed in the app, which must lie under the data root
    (:func:`mixdp_core.data.data_root`, ``$MIXDP_DATA_ROOT``).

    Raises:
        ConfigError: field ``path``: empty, outside the data root, or (checked here, before the
            settings are saved) not an existing folder for ``image_folder`` / not a readable
            ``.npz`` for ``features`` (:func:`mixdp_core.data.datasets.check_dataset_source`).
    """
    from ..data.datasets import check_dataset_source
    from ..data.paths import data_root, resolve_under
    from ..errors import DataError

    if not path.strip():
        raise ConfigError("path", f"dataset {key!r} needs a path under {data_root()}")
    full = resolve_under(data_root(), path.strip(), field="path")
    try:
        check_dataset_source(f"{key}:{full}")
    except DataError as e:  # named as the form's field, its message without the loader's field name
        raise ConfigError("path", str(e).split(": ", 1)[-1]) from None
    return f"{key}:{full}"


def range_error(value: float, lo: float, hi: float, *, integer: bool = True) -> str | None:
    """The one-line message of a number field outside ``[lo, hi]`` (or not an integer where one
    is needed), else ``None``: :func:`mixdp_core.config.check` on a declaration of that range.
    The pages check their number fields with it instead of giving the widget a min / max: out of
    range, Streamlit only outlines the box in red, keeps the old value, and its button silently
    does nothing."""
    from ..config import Interval, ParamSpec, check

    try:
        check(ParamSpec(name="value", type=int if integer else float, default=None, range=Interval(lo, hi)), value)
    except ConfigError as e:
        return e.message
    return None


def delta_advice(delta: float, n_private: int | None) -> str | None:
    """The warning a δ selector shows when ``delta`` is not below ``1 / n_private``, else ``None``.

    Why 1/n: a mechanism that publishes one private row, drawn at random, in the clear meets
    (0, 1/n)-DP, so a δ at or above 1/n permits exactly that failure; δ should be much smaller
    (docs/privacy.md, the notes' "delta"). ``n_private`` is the split's private row count, the
    owner's view (``None`` where it is not at hand: no warning, never a guess). Reading it is not
    a release: the warning is shown to the data owner in their own session and goes nowhere else.
    """
    if not n_private or n_private <= 0 or not delta or delta <= 0:
        return None
    if float(delta) * int(n_private) < 1.0:
        return None
    return (f"δ = {float(delta):.0e} is not below 1/n = 1/{int(n_private):,} ≈ {1.0 / int(n_private):.1e} "
            "(n: this split's private rows, owner's view): at this δ a mechanism could publish one private "
            f"row in the clear and still meet the guarantee. Choose δ ≤ {_largest_below(1.0 / int(n_private))}.")


#: Above this ε a launch is warned (the notes' "epsilon": "ε above about 10 is a weak promise").
WEAK_EPSILON = 10.0


def epsilon_advice(epsilon: float | None) -> str | None:
    """The warning a launch at a private ``epsilon`` above :data:`WEAK_EPSILON` shows, else ``None``:
    an (ε, δ) guarantee bounds how much more likely any outcome becomes with one person's data by a
    factor e^ε, which at ε = 10 is already 22,026 (a review launched ε = 60 with no word but a
    collapsed note)."""
    if epsilon is None or not float(epsilon) > WEAK_EPSILON:
        return None
    e = float(epsilon)
    factor = f"{math.exp(e):,.0f}" if e < 30 else f"about 10^{e / math.log(10):.0f}"
    return (f"ε = {e:g} is a weak promise: any outcome may become up to e^ε = {factor} times more likely "
            f"with one person's data in the training set. Values above about {WEAK_EPSILON:g} protect little; "
            "the figures of the papers use ε ≤ 8.")


def _largest_below(bound: float) -> str:
    """The largest offered δ (:data:`DELTA_CHOICES`) strictly below ``bound``, formatted."""
    ok = [d for d in DELTA_CHOICES if d < bound]
    return f"{max(ok):.0e}" if ok else f"{min(DELTA_CHOICES):.0e}"


def format_epsilon(eps: float | None) -> str:
    """``"∞"`` for ``None`` / non-finite, else a short number."""
    if eps is None or not np.isfinite(eps):
        return "∞"
    return f"{eps:.3g}"


def compare_configs(settings: Mapping[str, Any], *, methods: list[str], epsilons: list[float],
                    seeds: list[int], delta: float, references: list[str]) -> tuple[list[Any], dict[str, str]]:
    """The Compare page's grid, expanded by :class:`~mixdp_core.runs.sweep.SweepSpec` (the same
    expansion as ``mixdp sweep``: non-private references first, at the sweep's canonical ε,
    which they ignore, so they are reused across comparisons).

    Args:
        settings: the Data & encoder settings (``dataset``, ``encoder``, ``public_per_class``,
            ``imbalance_ratio``, ``public_from``, ``dataset_kwargs``, ``encoder_kwargs``).
        methods: private methods chosen; epsilons, seeds: the grid's axes; delta: δ.
        references: non-private reference methods to add (empty: none).

    Returns:
        ``(configs, {})``, or ``([], {field: message})``: nothing chosen on an axis, a split the
        data set cannot give, or a point no run can meet (named by its method).
    """
    from .data import split_problem
    from ..runs.sweep import SweepSpec

    errors: dict[str, str] = {}
    if not methods:
        errors["methods"] = "choose at least one method"
    if not epsilons:
        errors["epsilon"] = "choose at least one ε value"
    if not seeds:
        errors["seed"] = "choose at least one seed"
    bad = split_problem(settings["dataset"], public_per_class=int(settings["public_per_class"]),
                        imbalance_ratio=float(settings["imbalance_ratio"]), public_from=settings.get("public_from"),
                        dataset_kwargs=dict(settings.get("dataset_kwargs") or {}))
    if bad:
        errors[bad[0]] = bad[1] + " (change it on Data & encoder)"
    for m in list(references) + list(methods):  # e.g. a fine-tuning method on pre-extracted features
        errors.update({k: f"{m}: {v}" for k, v in compatibility_error(m, settings["encoder"], None,
                                                                      settings["dataset"]).items()})
    if errors:
        return [], errors
    try:
        spec = SweepSpec(dataset=settings["dataset"], encoders=(settings["encoder"],),
                         methods=tuple(references) + tuple(methods), epsilons=tuple(sorted(epsilons)),
                         seeds=tuple(sorted(seeds)), public_per_class=(int(settings["public_per_class"]),),
                         imbalance_ratios=(float(settings["imbalance_ratio"]),), delta=float(delta),
                         public_from=settings.get("public_from"),
                         dataset_kwargs=dict(settings.get("dataset_kwargs") or {}),
                         encoder_kwargs=dict(settings.get("encoder_kwargs") or {}))
        return spec.configs(), {}
    except ConfigError as e:  # e.g. "adamix: target_epsilon: ..." (the sweep names the variant)
        return [], {e.field: e.message}
    except (MixDPError, TypeError, ValueError) as e:
        return [], {"config": str(e)}


#: The Compare page's episodes evaluation: allowed shots, and the bounds of its other fields
#: (the paper's protocol is 5-way, 5/20/50 shots, 15 query, 60 episodes; the bounds keep one
#: evaluation to minutes on a laptop).
EPISODE_SHOTS = (1, 5, 10, 20, 50)
#: ``episodes`` from 2: one episode has no spread, and its "± 0.0" read as a certain result.
EPISODE_BOUNDS = {"n_way": (2, 20), "episodes": (2, 60), "n_query": (1, 30), "public_per_class": (0, 50)}


def episodes_request(settings: Mapping[str, Any], *, methods: list[str], epsilon: float, n_way: int,
                     shots: list[int], episodes: int, n_query: int = 15, seed: int = 0,
                     delta: float = 1e-5) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """Validate the Compare page's episodes choice; returns ``(request, {})`` for
    :meth:`~.jobs.JobManager.submit_episodes`, or ``(None, {field: message})``.

    Each episode's support set is the private data of one fit at target ``epsilon``; the
    data set's public split (``settings["public_per_class"]`` rows per class, held out of the
    episodes) or ``settings["public_from"]`` gives the public rows.
    """
    errors: dict[str, str] = {}
    if not methods:
        errors["methods"] = "choose at least one method"
    for name, value in (("n_way", n_way), ("episodes", episodes), ("n_query", n_query),
                        ("public_per_class", settings.get("public_per_class", 5))):
        lo, hi = EPISODE_BOUNDS[name]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            errors[name] = f"must be an integer in [{lo}, {hi}], got {value!r}"
    if not shots or any(k not in EPISODE_SHOTS for k in shots):
        errors["shots"] = f"choose one or more of {', '.join(map(str, EPISODE_SHOTS))}, got {list(shots)!r}"
    for m in methods:  # refused before the job (sparse_finetune on features failed only after running)
        bad = compatibility_error(m, settings["encoder"], dataset=settings.get("dataset"))
        if bad:
            errors["methods"] = f"{m}: {next(iter(bad.values()))}"
            break
    try:
        from ..config import RUN_EPSILON, check

        check(RUN_EPSILON, epsilon, field="epsilon")  # the run's declared range of ε
    except ConfigError as e:
        errors["epsilon"] = e.message
    if errors:
        return None, errors
    params = {"n_way": int(n_way), "shots": sorted(int(k) for k in shots), "n_query": int(n_query),
              "episodes": int(episodes), "epsilon": float(epsilon), "delta": float(delta), "seed": int(seed),
              "public_per_class": int(settings.get("public_per_class", 5)), "methods": list(methods)}
    return ({**episodes_data(settings), "params": params}, {})


def episodes_data(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The data an episodes request reads (dataset, encoder, their options, the public domain),
    from the Data page's settings: the request's keys, and what finds a running job again."""
    return {"dataset": settings["dataset"], "encoder": settings["encoder"],
            "dataset_kwargs": dict(settings.get("dataset_kwargs") or {}),
            "encoder_kwargs": dict(settings.get("encoder_kwargs") or {}),
            "public_from": settings.get("public_from")}


def episodes_rows(path: str) -> list[dict[str, Any]]:
    """The rows (method × shots: ``mean``, ``ci95``, ``epsilon_spent_max``, or ``error``) of an
    episodes evaluation's JSON (:meth:`~.jobs.JobManager.submit_episodes`)."""
    import json

    return list(json.loads(Path(path).read_text(encoding="utf-8")).get("rows", []))


#: Horizontal inset, in px, of a Streamlit slider's track inside its element (measured in
#: Chromium: the thumb's centre runs from 6 px to width − 6 px).
SLIDER_TRACK_INSET_PX = 6


def slider_tick_row(values: Sequence[Any], *, testid: str, font_size: str = "0.75rem",
                    margin: str = "-0.6rem 0 0.4rem 0") -> str:
    """HTML of a row of labels, one centred under each stop of a ``select_slider`` over
    ``values`` (its own labels name only the ends). Each label sits at ``i / (n − 1)`` of the
    track, the same fraction the slider puts its thumb at; spacing the labels with flexbox
    instead put them up to a stop off (the thumb at ε = 3 sat over the "2")."""
    n = len(values)
    spans = "".join(
        f"<span style='position:absolute;left:{100 * i / max(n - 1, 1):.4f}%;transform:translateX(-50%);"
        f"white-space:nowrap'>{v:g}</span>" for i, v in enumerate(values))
    return (f"<div data-testid='{testid}' style='position:relative;height:1.3em;font-size:{font_size};color:#666;"
            f"margin:{margin};padding:0;left:{SLIDER_TRACK_INSET_PX}px;width:calc(100% - "
            f"{2 * SLIDER_TRACK_INSET_PX}px)'>{spans}</div>")
