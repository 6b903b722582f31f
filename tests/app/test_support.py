"""Unit tests of mixdp_core.app_support: forms, uploads, charts, jobs, notes (no Streamlit runtime)."""

from __future__ import annotations

import io
import json
import sys
import zipfile

import numpy as np
import pytest

from mixdp_core.app_support import charts, forms
from mixdp_core.app_support.jobs import JobManager
from mixdp_core.app_support.notes import NOTES, word_count
from mixdp_core.errors import ConfigError

from .helpers import small_config


# ------------------------------------------------------------------ notes
def test_teaching_notes_are_short():
    assert {"epsilon", "delta", "pdp", "attack_auc"} <= set(NOTES)
    for key, text in NOTES.items():
        assert 15 <= word_count(text) < 80, (key, word_count(text))


# ------------------------------------------------------------------ field specs
def test_every_registered_method_has_drawable_field_specs():
    from mixdp_core.methods import METHODS

    for name, cls in METHODS.items():
        specs = forms.method_field_specs(name)
        for s in specs:
            assert s.kind in ("bool", "int", "float", "choice", "text"), (name, s)
            assert s.name not in forms.MAIN_FIELDS
            if s.kind == "choice":
                assert s.default in s.choices and len(s.choices) >= 2
                for c in s.choices:  # every offered choice is accepted by the config
                    cls.config_cls(**{s.name: c})
        # defaults round-trip: no changed params means the default config
        defaults = {s.name: s.default for s in specs}
        assert forms.changed_params(name, defaults) == {}


def test_leak_detection_reads_the_declaration_only():
    from dataclasses import dataclass

    from mixdp_core.config import describe, param

    @dataclass(frozen=True)
    class Cfg:
        """Test config.

        Args:
            peek: picks the best value on the test set; leaks private information.
        """

        a: int = param(1, help="plain value")
        peek: bool = False  # a docstring that says "leaks" is not a declaration
        b: float = param(0.0, leaks_private=True, privacy_note="tunes on test results")
        optimistic_x: bool = False  # neither is a name

    assert not forms.leaks_private(Cfg, "a")
    assert not forms.leaks_private(Cfg, "peek")
    assert forms.leaks_private(Cfg, "b")
    assert not forms.leaks_private(Cfg, "optimistic_x")
    spec = {s.name: s for s in map(forms.field_spec, describe(Cfg))}
    assert spec["b"].leaks_private and "tunes on test results" in spec["b"].help
    assert spec["a"].kind == "int" and spec["a"].help == "plain value"


def test_parse_text_value():
    spec = forms.FieldSpec(name="budget_split", kind="text", default=(0.1, 0.2, 0.7))
    assert forms.parse_text_value(spec, "[0.2, 0.3, 0.5]") == (0.2, 0.3, 0.5)
    assert forms.parse_text_value(forms.FieldSpec("projection", "text", "paper"), "rank") == "rank"
    assert forms.parse_text_value(forms.FieldSpec("projection", "text", "paper"), "12") == 12
    # a string default that reads like "empty" is still the field's value (AdaMix's projection "none")
    assert forms.parse_text_value(forms.FieldSpec("projection", "text", "none"), "none") == "none"
    assert forms.parse_text_value(forms.FieldSpec("projection", "text", "none"), "paper") == "paper"
    assert forms.parse_text_value(forms.FieldSpec("x", "text", None, optional=True), "") is None
    with pytest.raises(ConfigError) as e:
        forms.parse_text_value(spec, "  ")
    assert e.value.field == "budget_split"


# ------------------------------------------------------------------ validation
def test_build_run_config_valid_and_field_errors():
    cfg, err = forms.build_run_config(dict(dataset="digits", encoder="pixels", method="adamix",
                                           target_epsilon=2.0, seed=1))
    assert err == {} and cfg.target_epsilon == 2.0 and cfg.seed == 1
    assert forms.build_run_config(dict(dataset="digits", encoder="pixels", method="adamix",
                                       target_epsilon=-1))[1].keys() == {"epsilon"}
    assert forms.build_run_config(dict(dataset="digits", encoder="pixels", method="adamix",
                                       target_delta=1.5))[1].keys() == {"delta"}
    assert forms.build_run_config(dict(dataset="digits", encoder="pixels", method="nope"))[1].keys() == {"method"}
    assert forms.build_run_config(dict(dataset="digits", encoder="nope", method="adamix"))[1].keys() == {"encoder"}
    _, err = forms.build_run_config(dict(dataset="digits", encoder="pixels", method="adamix",
                                         method_params={"clip_percentile": 250}))
    assert set(err) == {"clip_percentile"}
    _, err = forms.build_run_config(dict(dataset="digits", encoder="pixels", method="adamix", public_per_class=0))
    assert set(err) == {"public_per_class"}


def test_text_requirements_follow_the_registry_and_init():
    from mixdp_core.encoders import ENCODERS

    clip = next(n for n, c in ENCODERS.items() if c.has_text)
    assert forms.compatibility_error("adamix", "pixels", {"init": "text"}).keys() == {"init"}
    assert forms.compatibility_error("adamix", clip, {"init": "text"}) == {}
    assert forms.compatibility_error("adamix", "pixels", {}) == {}
    # features files bring their own text embeddings (checked at run time)
    assert forms.compatibility_error("adamix", "pixels", {"init": "text"}, dataset="features:/x.npz") == {}


# ------------------------------------------------------------------ uploads
def _png_bytes(value: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _zip(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_zip_of_class_folders_is_extracted_inside_the_cache(tmp_path):
    data = _zip({f"tree/{c}/{i}.png": _png_bytes(40 * k + i) for k, c in enumerate(["cat", "dog"]) for i in range(3)})
    spec = forms.extract_zip_upload(data, "tree.zip", cache_dir=tmp_path)
    assert spec.startswith("image_folder:")
    root = tmp_path / "_uploads"
    folder = __import__("pathlib").Path(spec.split(":", 1)[1])
    assert root in folder.parents
    assert sorted(p.name for p in folder.iterdir()) == ["cat", "dog"]
    assert len(list(folder.rglob("*.png"))) == 6
    from mixdp_core.data import load_dataset

    ds = load_dataset(spec)
    assert ds.class_names == ["cat", "dog"]


@pytest.mark.parametrize("entries, message", [
    ({"../evil/a.png": b"x", "cat/b.png": b"y"}, "outside"),
    ({"/abs/a.png": b"x", "cat/b.png": b"y"}, "outside"),
    ({"cat/../../b.png": b"x", "dog/b.png": b"y"}, "outside"),
    ({"cat/a.png": b"not an image", "dog/b.png": b"nope"}, "not an image"),
    ({"cat/a.png": None}, "at least 2 class folders"),
    ({"a.png": None, "b.png": None}, "expected <class>/<image>"),
])
def test_bad_zip_uploads_are_refused_and_nothing_escapes(tmp_path, entries, message):
    entries = {k: (_png_bytes(1) if v is None else v) for k, v in entries.items()}
    with pytest.raises(ConfigError) as e:
        forms.extract_zip_upload(_zip(entries), "up.zip", cache_dir=tmp_path / "cache")
    assert e.value.field == "upload"
    assert message in str(e.value)
    assert not (tmp_path / "evil").exists() and not (tmp_path / "cache" / "evil").exists()
    leftovers = [p for p in (tmp_path / "cache" / "_uploads").iterdir()] if (tmp_path / "cache" / "_uploads").exists() else []
    assert leftovers == []  # a refused archive leaves nothing behind


def test_an_image_past_the_decompression_bomb_limit_is_refused_as_too_large_not_as_no_image(tmp_path, monkeypatch):
    from PIL import Image

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 20)  # an 8 x 8 image (64 pixels) is past twice 20
    with pytest.raises(ConfigError, match=r"'cat/a.png' has more pixels than the image loader accepts \(40,"):
        forms.extract_zip_upload(_zip({"cat/a.png": _png_bytes(1), "dog/b.png": _png_bytes(2)}), "big.zip",
                                 cache_dir=tmp_path)


def test_symlink_and_size_limits_in_zip(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        info = zipfile.ZipInfo("cat/link.png")
        info.external_attr = (0o120777 << 16)
        z.writestr(info, "/etc/passwd")
        z.writestr("dog/a.png", _png_bytes(3))
    with pytest.raises(ConfigError, match="symbolic link"):
        forms.extract_zip_upload(buf.getvalue(), "l.zip", cache_dir=tmp_path)
    data = _zip({"cat/a.png": _png_bytes(1), "dog/b.png": _png_bytes(2)})
    with pytest.raises(ConfigError, match="limit"):
        forms.extract_zip_upload(data, "s.zip", cache_dir=tmp_path, max_uncompressed=10)
    with pytest.raises(ConfigError, match="not a zip"):
        forms.extract_zip_upload(b"PK-but-not-really", "f.zip", cache_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"\.zip"):
        forms.extract_zip_upload(data, "f.tar", cache_dir=tmp_path)


def test_npz_upload_is_validated(tmp_path, digits_features):
    fs = digits_features
    buf = io.BytesIO()
    np.savez(buf, X_train=fs.X_train, y_train=fs.y_train, X_test=fs.X_test, y_test=fs.y_test,
             class_names=np.array(fs.class_names))
    spec = forms.save_npz_upload(buf.getvalue(), "feats.npz", cache_dir=tmp_path)
    from mixdp_core.features import get_features

    assert get_features(spec).X_train.shape == fs.X_train.shape
    bad = io.BytesIO()
    np.savez(bad, X_train=fs.X_train, y_train=fs.y_train)
    with pytest.raises(ConfigError, match="X_test"):
        forms.save_npz_upload(bad.getvalue(), "feats.npz", cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="not an .npz"):
        forms.save_npz_upload(b"hello", "feats.npz", cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="end in .npz"):
        forms.save_npz_upload(buf.getvalue(), "feats.csv", cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="limit"):
        forms.save_npz_upload(buf.getvalue(), "feats.npz", cache_dir=tmp_path, max_bytes=100)


# ------------------------------------------------------------------ charts
def _rec(method, eps, err, auc, minority, private=True, seed=0):
    from types import SimpleNamespace

    return SimpleNamespace(method=method, target_epsilon=eps, metrics={
        "test_error": err, "mia_auc": auc, "minority_accuracy": minority, "private": private,
        "epsilon": eps if private else None}, seed=seed)


def test_aggregate_runs_and_compare_figures():
    runs = [_rec("adamix", 1.0, 0.2, 0.51, 0.7), _rec("adamix", 1.0, 0.3, 0.53, 0.6, seed=1),
            _rec("ngd", 1.0, 0.35, 0.5, 0.5), _rec("ngd", 3.0, 0.1, 0.52, 0.8), _rec("adamix", 3.0, 0.15, 0.5, 0.8),
            _rec("paragon", 1.0, 0.05, 0.6, 0.9, private=False)]
    rows = charts.aggregate_runs(runs)
    ad1 = next(r for r in rows if r["method"] == "adamix" and r["epsilon"] == 1.0)
    assert ad1["n"] == 2 and ad1["test_error_mean"] == pytest.approx(0.25)
    assert ad1["test_error_std"] == pytest.approx(np.std([0.2, 0.3], ddof=1))
    assert next(r for r in rows if r["method"] == "paragon")["epsilon"] is None
    fig = charts.metric_vs_epsilon(rows, "test_error", "t", "y")
    names = [t.name for t in fig.data]
    assert "Paragon (non-private)" in names and "AdaMix" in names
    auc = charts.auc_vs_error_figure(rows)
    ad = next(t for t in auc.data if t.name == "AdaMix")
    assert list(ad.text) == ["ε=1", "ε=3"]


def test_live_figures_from_step_records():
    steps = [{"step": i, "total_steps": 10, "test_error": 0.5 / i if i % 2 == 0 else None,
              "clip_norm": 1.0, "epsilon_spent": 0.1 * i, "extra": {"lr": 0.1}} for i in range(1, 6)]
    figs = charts.live_figures(steps, target_epsilon=3.0)
    assert list(figs["test_error"].data[0].x) == [2, 4]
    assert list(figs["epsilon"].data[0].y) == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    budget = next(t for t in figs["epsilon"].data if t.name == "target ε")
    assert list(budget.y) == [3.0, 3.0]  # budget line, in the legend
    assert figs["test_error"].layout.yaxis.range == (0, 1.0)  # errors on a fixed 0-100 % axis
    assert figs["test_error"].layout.showlegend is True
    assert "minority" not in figs  # not recorded: not drawn
    waiting = charts.live_figures([], target_epsilon=None, running=True)
    assert set(waiting) == {"test_error"} and len(waiting["test_error"].data) == 0
    assert charts.live_figures([], target_epsilon=None) == {}
    live = [dict(s, extra={"minority_accuracy": 0.5}) for s in steps]
    assert list(charts.live_figures(live)["minority"].data[0].y) == [0.5] * 5
    # a finished run: the released model's values end the curves, marked (the minority curve
    # stopped at the public start's 82.1 % beside a final 78.3 %)
    done = charts.live_figures(live, final={"minority_accuracy": 0.783, "test_error": 0.12})
    star = next(t for t in done["minority"].data if t.name == "released model (final metrics)")
    assert list(star.x) == [10.0] and list(star.y) == [0.783]
    assert any(t.name == "released model (final metrics)" and list(t.y) == [0.12] for t in done["test_error"].data)
    # One-shot methods (prototypes, paragon): no curves at all, not empty 0-4 axes.
    one = [{"step": 1, "total_steps": 1, "test_error": 0.2, "clip_norm": None, "epsilon_spent": 1.0, "extra": {}}]
    assert charts.is_one_shot(one) and charts.live_figures(one, target_epsilon=1.0) == {}
    no_clip = [dict(s, clip_norm=None) for s in steps]
    assert "clip" not in charts.live_figures(no_clip)


def _records(n: int, *, total: int = 1000, minority_from: int = 0) -> list[dict]:
    return [{"step": i, "total_steps": total, "test_error": 0.5 / i if i % 3 == 0 else None, "clip_norm": 1.0 + i,
             "epsilon_spent": 0.01 * i, "train_loss": 1.0,
             "extra": {"minority_accuracy": 0.25} if minority_from and i >= minority_from else {}}
            for i in range(1, n + 1)]


def test_store_reads_only_the_step_records_after_the_cursor(tmp_path):
    from mixdp_core.runs.store import RunStore

    store = RunStore(tmp_path, recover=False)
    rid = store.create_run({"method": "adamix"}, config_hash="h")
    other = store.create_run({"method": "ngd"}, config_hash="g")
    recs = _records(7)
    store.append_steps(rid, recs[:4])
    store.append_steps(other, recs[:2])  # interleaved rows of another run are not read
    first, cursor = store.steps_after(rid)
    assert first == recs[:4] and cursor > 0
    assert store.steps_after(rid, cursor) == ([], cursor)  # nothing new: same cursor
    store.append_steps(rid, recs[4:])
    more, cursor2 = store.steps_after(rid, cursor)
    assert more == recs[4:] and cursor2 > cursor
    assert first + more == store.steps(rid)


def test_live_series_grows_incrementally_like_a_full_read(tmp_path):
    from mixdp_core.app_support import live
    from mixdp_core.runs.store import RunStore

    store = RunStore(tmp_path, recover=False)
    rid = store.create_run({"method": "adamix"}, config_hash="h")
    recs = _records(50, minority_from=20)
    series = None
    for lo in range(0, 50, 7):  # the run flushes batches while the page polls
        store.append_steps(rid, recs[lo:lo + 7])
        series = live.run_series(store, rid)
    full = live.RunSeries(rid)
    full.add(store.steps(rid))
    assert series is live.run_series(store, rid)  # one series per run and store, shared by sessions
    assert series.version == 50 and series.last_step == 50 and series.total_steps == 1000
    for name in live.COLUMNS:
        for a, b in zip(series.arrays(name), full.arrays(name)):
            assert np.array_equal(a, b)
    x, y = series.arrays("minority")
    assert x[0] == 20 and len(x) == 31 and set(y) == {0.25}
    x, y = series.arrays("test_error")
    assert list(x[:3]) == [3, 6, 9] and y[0] == pytest.approx(0.5 / 3)
    # charts keep their places: one that appears later is appended, never inserted before
    assert series.chart_order(["test_error", "epsilon", "clip"]) == ["test_error", "epsilon", "clip"]
    assert series.chart_order(["test_error", "epsilon", "minority", "clip"]) == [
        "test_error", "epsilon", "clip", "minority"]


def test_live_pdp_is_reread_only_when_the_artifact_changes(tmp_path):
    from mixdp_core.app_support import live
    from mixdp_core.runs.store import RunStore

    store = RunStore(tmp_path, recover=False)
    rid = store.create_run({"method": "adamix"}, config_hash="h")
    assert live.live_pdp(store, rid) == (None, None)
    store.save_artifacts(rid, {"live_pdp_epsilon": np.array([0.5, 1.0]), "live_step": np.asarray(3)})
    e1, step = live.live_pdp(store, rid)
    assert step == 3 and list(e1) == [0.5, 1.0]
    assert live.live_pdp(store, rid)[0] is e1  # unchanged file: the cached array
    store.save_artifacts(rid, {"pdp_epsilon": np.array([0.7, 0.9, 1.1])})  # the run's final artifact
    e2, step = live.live_pdp(store, rid)
    assert step is None and list(e2) == [0.7, 0.9, 1.1]


def _vega_valid(spec: dict, frame) -> None:
    """Validate a live chart against the Vega-Lite schema (Altair's validator)."""
    import altair as alt

    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
    alt.LayerChart.from_dict(dict(spec, data={"values": rows}))


def test_live_charts_are_valid_vega_lite_whose_spec_does_not_depend_on_the_points():
    from mixdp_core.app_support import live

    early, late = live.RunSeries("r"), live.RunSeries("r")
    early.add(_records(30, minority_from=10))
    late.add(_records(900, minority_from=10))
    a = charts.live_charts(early, target_epsilon=3.0)
    b = charts.live_charts(late, target_epsilon=3.0)
    assert set(a) == set(b) == {"test_error", "epsilon", "minority", "clip"}
    for name in a:
        _vega_valid(*b[name])
        # the same spec for 30 and 900 records: a redraw only swaps the chart's data
        assert a[name][0] == b[name][0], name
        # a legend on every live chart, also those with a single line
        assert b[name][0]["layer"][0]["encoding"]["color"]["legend"] is not None, name
    spec, frame = b["epsilon"]
    assert spec["title"] == "ε spent vs step" and spec["encoding"]["x"]["scale"]["domain"] == [0, 1020.0]
    curve = frame[frame.series == "ε spent"]
    assert len(curve) <= charts.MAX_LIVE_POINTS + 1 and curve.step.iloc[0] == 1
    assert curve.step.iloc[-1] == 900 and curve.newest.sum() == 1 and curve.newest.iloc[-1]  # newest marked
    assert list(frame[frame.series == "target ε"].value) == [3.0, 3.0]  # the budget line, in the legend
    assert b["test_error"][0]["encoding"]["y"]["scale"]["domain"] == [0, 1]  # fixed 0-100 % axis
    waiting = live.RunSeries("w")
    assert set(charts.live_charts(waiting)) == {"test_error"}  # empty until the first record
    one = live.RunSeries("o")
    one.add([{"step": 1, "total_steps": 1, "test_error": 0.2, "epsilon_spent": 1.0, "extra": {}}])
    assert charts.live_charts(one, target_epsilon=1.0) == {}  # one-shot: no curves


def test_live_pdp_histogram_counts_every_sample_and_names_its_steps():
    eps = np.array([0.1, 0.2, 0.2, 2.9, 3.0])
    spec, frame = charts.live_pdp_chart(eps, 3.0, step=40, total_steps=100, bins=10)
    _vega_valid(spec, frame)
    bars = frame[frame.label == ""]
    assert bars["count"].sum() == len(eps) and bars.lo.min() == 0 and bars.hi.max() == pytest.approx(3.0)
    assert bars["count"].tolist() == np.histogram(eps, bins=10, range=(0, 3.0))[0].tolist()
    assert frame[frame.label != ""].label.tolist() == ["steps 1–40 of 100"]
    spec2, _ = charts.live_pdp_chart(eps * 0.5, 3.0, step=80, total_steps=100, bins=10)
    assert spec2 == spec  # the steps covered are data, not spec: the chart is not drawn anew
    # a legend names the bars and the budget rule (one shared colour scale)
    colors = [layer["encoding"]["color"] for layer in spec["layer"] if "color" in layer.get("encoding", {})]
    assert len(colors) == 2 and all(c["field"] == "series" and c["legend"] for c in colors)
    assert colors[0]["scale"]["domain"] == ["private samples (εᵢ)", "target ε"]
    assert set(frame[frame.label == ""].series) == {"private samples (εᵢ)"}


def test_compare_axes_legend_and_reference_lines():
    rows = [{"method": "adamix", "epsilon": 3.0, "n": 1, "test_error_mean": 0.08, "test_error_std": 0.0,
             "minority_accuracy_mean": 0.9, "minority_accuracy_std": 0.0}]
    fig = charts.metric_vs_epsilon(rows, "test_error", "t", "test error")
    assert fig.layout.showlegend is True  # a legend even with one method
    assert fig.layout.yaxis.range == (0, 1.0) and fig.layout.yaxis.tickformat == ".0%"
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == [3.0]
    lo, hi = fig.layout.xaxis.range
    assert lo < 0.4771 < hi  # log10(3) inside, with room
    rows += [{"method": "adamix", "epsilon": e, "n": 3, "test_error_mean": 0.1, "test_error_std": 0.02}
             for e in (0.5, 1.0)]
    rows += [{"method": "paragon", "epsilon": None, "n": 2, "test_error_mean": 0.02, "test_error_std": 0.01},
             {"method": "only_public", "epsilon": None, "n": 2, "test_error_mean": 0.4, "test_error_std": 0.0}]
    fig = charts.metric_vs_epsilon(rows, "test_error", "t", "test error")
    assert list(fig.layout.xaxis.tickvals) == [0.5, 1.0, 3.0]  # every ε labelled
    names = [t.name for t in fig.data if t.showlegend is not False]
    assert "Paragon (non-private)" in names and "Only-Public (ε = 0)" in names  # it reads no private row: ε = 0, not non-private
    curve = next(t for t in fig.data if t.name == "AdaMix")
    assert list(curve.error_y.array) == [0.02, 0.02, 0.0]  # error bars over seeds
    band = next(t for t in fig.data if t.fill == "toself")  # the paragon's shaded ± std has its legend entry
    assert band.showlegend is not False and "± std over seeds" in band.name
    mfig = charts.metric_vs_epsilon(rows, "minority_accuracy", "m", "minority accuracy")
    assert mfig.layout.yaxis.range == (0, 1.0)  # never up to 1.5
    # the table speaks the charts' units: %, ε 0 / ∞ for the references, "—" where n/a
    table = {r["method"]: r for r in charts.compare_table(rows)}
    assert table["adamix"]["test error"] == "10.0 %" and table["adamix"]["± std"] == "2.0 %"
    assert table["only_public"]["ε"] == "0" and table["paragon"]["ε"] == "∞"
    assert table["adamix"]["minority acc."] == "—"
    # the attack AUC with its spread over seeds, as the AUC chart draws it
    auc_rows = [dict(r, mia_auc_mean=0.52, mia_auc_std=0.011) for r in rows]
    for src, shown in zip(auc_rows, charts.compare_table(auc_rows)):
        assert shown[charts.OWNER_AUC_LABEL] == ("0.520 ± 0.011 (std, seeds)" if src.get("n", 1) > 1 else "0.520")
    assert any(src.get("n", 1) > 1 for src in auc_rows)
    # one seed with its scored rows recorded: the interval over the rows (it showed 0.483 beside 0.515 bare)
    from mixdp_core.evaluation.mia import auc_standard_error

    one = dict(auc_rows[0], n=1, mia_n_per_side=200)
    h = 1.96 * auc_standard_error(0.52, 200, 200)
    assert charts.compare_table([one])[0][charts.OWNER_AUC_LABEL] == f"0.520 ± {h:.3f} (95 %, rows)"


def test_delta_figure_is_clipped_and_marks_the_run():
    m = {"mu": 0.9246621004453465, "epsilon": 3.9986612085668307, "delta": 1e-5}
    fig = charts.delta_curve_figure(m)
    lo, hi = fig.layout.yaxis.range
    assert hi == 0.0 and -12 <= lo <= -8  # not 10^-310
    assert min(fig.data[0].y) >= 10 ** lo
    point = fig.data[1]
    assert list(point.x) == [m["epsilon"]] and list(point.y) == [1e-5]


def test_exports_csv_svg_png():
    rows = [{"method": "adamix", "epsilon": e, "n": 2, "test_error_mean": 0.1 * e, "test_error_std": 0.01}
            for e in (0.5, 1.0)]
    fig = charts.metric_vs_epsilon(rows, "test_error", "t", "test error")
    csv = charts.figure_csv(fig).splitlines()
    assert csv[0] == "trace,x,y,std_over_seeds" and csv[1].startswith("AdaMix,0.5,0.05,0.01")
    assert charts.figure_image(fig, "svg").lstrip().startswith(b"<?xml")
    assert charts.figure_image(fig, "png")[:8] == b"\x89PNG\r\n\x1a\n"


def test_theory_tradeoff_curve_is_the_accounting_bound():
    from types import SimpleNamespace

    from mixdp_core.accounting import max_tpr

    rep = SimpleNamespace(epsilon=1.0, delta=1e-5, mu=0.3)
    fig = charts.tradeoff_figure([("ε = 1", rep)], fpr_mark=0.01)
    curve = fig.data[0]
    assert list(curve.y) == pytest.approx(list(max_tpr(rep, list(curve.x))))
    mark = fig.data[1]
    assert float(mark.y[0]) == pytest.approx(float(max_tpr(rep, 0.01)))
    assert fig.layout.xaxis.range == (0, 1) and fig.layout.yaxis.range == (0, 1)


def test_delta_curve_passes_through_the_runs_epsilon_delta(app_env):
    from mixdp_core.accounting import gaussian_delta
    from mixdp_core.runs import RunStore
    from mixdp_core.runs.runner import execute

    store = RunStore()
    m = store.get_run(execute(small_config(), store=store)).metrics
    eps, d, src = charts.delta_curve(m, eps_grid=np.array([m["epsilon"]]))
    assert "μ-GDP" in src
    assert d[0] == pytest.approx(float(gaussian_delta(m["mu"], m["epsilon"])))
    assert d[0] == pytest.approx(m["delta"], rel=1e-3)
    assert charts.delta_curve({"mu": None, "rho": None, "epsilon": None}) is None
    table = {r["notion"]: r["value"] for r in charts.privacy_table(m)}
    assert float(table["(ε, δ)-DP: ε"]) == pytest.approx(m["epsilon"], rel=1e-3)
    nonpriv = {r["notion"]: r["value"] for r in charts.privacy_table({"private": False, "method": "paragon"})}
    assert nonpriv["(ε, δ)-DP: ε"] == "∞" and nonpriv["μ-GDP: μ"] == "∞"
    para = {r["notion"]: r["value"] for r in charts.privacy_table({"private": False, "method": "paragon",
                                                                     "delta": 1e-5})}
    assert para["(ε, δ)-DP: δ"] == "—"  # the target δ it ignored is not its δ
    # Only-Public never reads the private rows: 0 in every unit (it showed ε 0 beside μ ∞, ρ ∞)
    op = {r["notion"]: r["value"] for r in charts.privacy_table({"private": False, "method": "only_public",
                                                                   "epsilon": 0.0})}
    assert op["(ε, δ)-DP: ε"] == op["μ-GDP: μ"] == op["ρ-zCDP: ρ"] == "0" and "never read" in op["note"]


def test_metric_cards_have_no_minority_card_without_a_minority_class():
    base = {"test_error": 0.1, "balanced_accuracy": 0.9, "mia_auc": 0.5}
    assert "minority-class accuracy" in dict(charts.metric_cards(dict(base, minority_accuracy=0.8, imbalance_ratio=10)))
    assert "minority-class accuracy" not in dict(charts.metric_cards(dict(base, minority_accuracy=None)))
    # an older run stored a value at ratio 1 (a quarter of near-equal classes): not shown
    assert "minority-class accuracy" not in dict(charts.metric_cards(dict(base, minority_accuracy=0.8,
                                                                          imbalance_ratio=1.0)))


def test_noise_vs_separation_figure_marks_the_minority_classes():
    fig = charts.noise_vs_separation_figure([0.5, 0.1, 0.9, 0.3], 0.4, epsilon=1.0, minority=[2])
    bars = [t for t in fig.data if t.type == "bar"]
    assert [t.name.startswith("minority") for t in bars] == [False, True]
    assert list(bars[0].x) == [1, 2, 3] and list(bars[0].y) == [0.1, 0.3, 0.5]  # sorted by error
    assert list(bars[1].x) == [4] and list(bars[1].y) == [0.9]  # class 2 has the largest error
    plain = charts.noise_vs_separation_figure([0.5, 0.1], 0.4, epsilon=1.0)
    assert [t.name for t in plain.data if t.type == "bar"] == ["‖published − true average‖ per class"]


def test_metric_vs_epsilon_says_what_a_point_is():
    one = [{"method": "adamix", "epsilon": e, "test_error_mean": 0.3, "test_error_std": 0.0, "n": 1} for e in (1, 3)]
    fig = charts.metric_vs_epsilon(one, "test_error", "t", "y")
    assert fig.layout.title.subtitle.text == "one training per point (no spread to show: run several seeds)"
    # at one seed with the test rows known, the bars are that training's 95 % Wilson interval
    # (a review found every one-seed bar at 0)
    known = [dict(r, n_test=539) for r in one]
    fig = charts.metric_vs_epsilon(known, "test_error", "t", "y")
    assert "95 % interval over the test rows" in fig.layout.title.subtitle.text
    up, down = fig.data[0].error_y.array[0], fig.data[0].error_y.arrayminus[0]
    from scipy.stats import binomtest

    ci = binomtest(round(0.3 * 539), 539).proportion_ci(0.95, method="wilson")
    assert abs((0.3 + up) - ci.high) < 2e-3 and abs((0.3 - down) - ci.low) < 2e-3
    auc = [{"method": "adamix", "epsilon": 1.0, "mia_auc_mean": 0.52, "n": 1, "mia_n_per_side": 400}]
    bar = charts.metric_vs_epsilon(auc, "mia_auc", "t", "y").data[0].error_y.array[0]
    from mixdp_core.evaluation.mia import auc_standard_error

    assert bar == pytest.approx(1.96 * auc_standard_error(0.52, 400, 400))
    # seeds mixed (3 for one method, 1 for another): the caption names both kinds of bar
    mixed = [dict(r, n=3, test_error_std=0.01) for r in known] + [dict(r, method="ngd") for r in known]
    assert "(one-seed points: 95 % interval over the rows)" in \
        charts.metric_vs_epsilon(mixed, "test_error", "t", "y").layout.title.subtitle.text
    seeds = [dict(r, n=3, test_error_std=0.02) for r in one]
    ref = [{"method": "only_public", "epsilon": None, "test_error_mean": 0.4, "test_error_std": 0.0, "n": 3}]
    fig = charts.metric_vs_epsilon(seeds + ref, "test_error", "t", "y")
    assert fig.layout.title.subtitle.text == "mean ± std over seeds · dashed: reference methods (flat in ε)"
    # the legend under the plot (beside it, it took half of a half-width chart), the figure taller by
    # its rows so the plot area keeps its height: 2 entries (adamix, Only-Public) → 1 row
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.yref == "container"
    h1, b1 = fig.layout.height, fig.layout.margin.b
    more = [dict(r, method=m) for m in ("ngd", "ppgd", "fully_private") for r in seeds]
    fig5 = charts.metric_vs_epsilon(seeds + more + ref, "test_error", "t", "y")  # 5 entries → 3 rows
    assert fig5.layout.height - h1 == fig5.layout.margin.b - b1 == 2 * charts.LEGEND_ROW_PX


def test_auc_vs_error_shows_the_seed_spread_on_both_axes():
    rows = [{"method": "adamix", "epsilon": e, "test_error_mean": 0.4 - 0.04 * e, "test_error_std": 0.01,
             "mia_auc_mean": 0.55, "mia_auc_std": 0.02, "n": 3} for e in (1, 3)]
    fig = charts.auc_vs_error_figure(rows)
    tr = fig.data[0]
    assert list(tr.error_y.array) == [0.02, 0.02] and list(tr.error_x.array) == [0.01, 0.01]
    assert list(tr.textposition) == ["top center", "bottom center"]
    assert list(tr.text) == ["ε=1", "ε=3"] and list(tr.hovertext) == ["ε=1", "ε=3"]
    four = [dict(rows[0], epsilon=e, test_error_mean=0.4 - 0.04 * e) for e in (0.5, 1, 3, 8)]
    assert list(charts.auc_vs_error_figure(four).data[0].text) == ["ε=0.5", "", "", "ε=8"]  # ends labelled
    assert "std over seeds" in fig.layout.title.subtitle.text


def test_auc_vs_error_merges_labels_of_coinciding_points():
    """AdaMix whose guard kept the public start sits on Only-Public's point: one label naming
    both, not two texts drawn on top of each other; distant points keep their own labels."""
    op = [{"method": "only_public", "epsilon": None, "test_error_mean": 0.30, "mia_auc_mean": 0.52, "n": 1}]
    ada = [{"method": "adamix", "epsilon": e, "test_error_mean": err, "mia_auc_mean": auc, "n": 1}
           for e, err, auc in ((0.5, 0.305, 0.521), (1, 0.28, 0.53), (8, 0.12, 0.60))]
    fig = charts.auc_vs_error_figure(op + ada)
    text = {tr.name: list(tr.text) for tr in fig.data if tr.text is not None}
    merged = [t for ts in text.values() for t in ts if "·" in t]
    assert len(merged) == 1 and "Only-Public ε=0" in merged[0] and "ε=0.5" in merged[0]  # it reads no private row
    assert sum(t != "" for ts in text.values() for t in ts) == 2  # the merged label and AdaMix's ε=8
    assert any(t == "ε=8" for ts in text.values() for t in ts)
    lo, hi = fig.layout.xaxis.range  # the points' span with room for labels, not 0-100 %
    assert -0.06 <= lo < 0.12 and 0.305 < hi < 0.5
    wide = [dict(ada[2], test_error_std=0.3, n=4)]  # a seed spread wider than the pad: inside the axis
    assert charts.auc_vs_error_figure(wide).layout.xaxis.range[1] >= 0.12 + 0.3
    # a curve whose two ends meet: one label "ε=0.5 · ε=8", the other end blank
    flat = [dict(ada[0], epsilon=e) for e in (0.5, 8)]
    assert list(charts.auc_vs_error_figure(flat).data[0].text) == ["ε=0.5 · ε=8", ""]


def test_class_counts_figure_marks_minorities():
    s = {"class_names": ["a", "b", "c"], "public": [2, 2, 2], "private": [10, 5, 1], "test": [3, 3, 3],
         "minority": [0, 0, 1]}
    fig = charts.class_counts_figure(s)
    # the minority bars are their own trace (legend entry) in the private bars' slot
    assert [t.name for t in fig.data] == ["public", "private", "private, minority class ★"]
    assert list(fig.data[1].x) == ["a", "b", "c ★"] and list(fig.data[1].y) == [10, 5, None]
    assert list(fig.data[2].y) == [None, None, 1] and fig.data[1].offsetgroup == fig.data[2].offsetgroup
    first_minor = charts.class_counts_figure(dict(s, minority=[1, 0, 0]))  # class 0 a minority
    assert first_minor.data[1].marker.color == charts.PRIVATE_COLOR  # the "private" swatch stays blue
    # the exact private counts are the owner's view, and the exports carry the title, not the caption
    assert "owner's view, not private" in fig.layout.title.text
    assert fig.layout.xaxis.tickvals is None  # a few classes: plotly's own ticks
    # digits' class names are numbers: the axis is declared categorical, not left to plotly.js's
    # guess (a linear axis would drop the "7 ★" bars)
    digits = charts.class_counts_figure({"class_names": [str(c) for c in range(10)], "public": [5] * 10,
                                         "private": [90] * 10, "test": [50] * 10,
                                         "minority": [0] * 7 + [1, 0, 1]}, imbalance_ratio=10)
    assert digits.layout.xaxis.type == "category" and "7 ★" in list(digits.data[2].x)


def test_exported_bars_keep_their_numeric_order_across_traces():
    """The classroom's noise chart draws its minority classes as a second bar trace; the
    matplotlib export placed those bars after all the others (a review), plotly by their x."""
    fig = charts.noise_vs_separation_figure([0.5, 0.1, 0.9, 0.3], 0.4, epsilon=1.0, minority=[1])
    bars = [t for t in fig.data if t.type == "bar"]
    assert len(bars) == 2 and charts._bar_categories(bars) == ["1", "2", "3", "4"]
    named = [t for t in charts.class_counts_figure({"class_names": ["b", "a", "c"], "public": [1] * 3,
                                                      "private": [3, 2, 1], "test": [1] * 3,
                                                      "minority": [0, 0, 1]}, imbalance_ratio=10).data]
    assert charts._bar_categories(named) == ["b", "a", "c ★"]  # names keep the chart's own order


def test_class_counts_figure_labels_every_class_at_100_classes():
    """At 100 classes plotly labelled every second category (half the ★ marks missing) and the
    legend below the plot covered the labels (a newcomer's browser walk)."""
    C = 100
    minority = [1 if c % 4 == 1 else 0 for c in range(C)]
    s = {"class_names": [f"class_{c}" for c in range(C)], "public": [2] * C,
         "private": [60 - c // 2 for c in range(C)], "test": [20] * C, "minority": minority}
    fig = charts.class_counts_figure(s, imbalance_ratio=10)
    ax = fig.layout.xaxis
    assert list(ax.tickvals) == list(fig.data[0].x) and len(ax.tickvals) == C and ax.tickangle == -90
    assert sum("★" in str(t) for t in ax.ticktext) == sum(minority) == 25
    # the legend sits below the turned labels: further down than the labels reach
    plot_h = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    label_px = 6 * max(len(str(t)) for t in ax.ticktext)
    assert fig.layout.legend.y < -label_px / plot_h and fig.layout.margin.b > label_px
    png = charts.figure_image(fig, "png")  # the export draws every label too (matplotlib without kaleido)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ jobs
def test_job_manager_threaded_run_completes_and_is_found_by_label(app_env):
    mgr = JobManager(app_env, max_workers=1)
    job = mgr.submit_run(small_config(target_epsilon=1.0))
    assert job.wait(timeout=300), "job did not finish"
    assert job.state == "done" and job.error is None
    rid = mgr.run_id(job)
    rec = mgr.store.get_run(rid)
    assert rec.status == "completed" and rec.label == job.label(0)
    assert mgr.store.steps(rid)
    assert ("digits", "pixels", "{}", "{}") in mgr.features_ready


def test_an_audit_is_a_job_that_outlives_the_page_stops_on_cancel_and_is_found_again(app_env):
    """Audits ran in the page's session: leaving the page stopped hundreds of trainings with
    nothing stored, and a reload lost their progress. They are jobs of the manager now."""
    import time

    from mixdp_core.app_support.jobs import CANCELLED
    from mixdp_core.errors import ConfigError
    from mixdp_core.runs.audits import AuditStore
    from mixdp_core.runs.runner import execute

    mgr = JobManager(app_env, max_workers=1, processes=False)
    rid = execute(small_config(method="fully_private", target_epsilon=4.0), store=mgr.store)
    with pytest.raises(ConfigError, match="run_id: no finished run 'nope'"):
        mgr.submit_audit("nope", attack="loss")
    assert mgr.find_audit(rid) is None
    job = mgr.submit_audit(rid, attack="canary-whitebox", trials=400, canaries=400)
    assert job.wait(timeout=300) and job.state == "done", job.error
    (a,) = AuditStore(mgr.store).list(run_id=rid)
    assert job.progress["result"] == a.audit_id and job.progress["done"] == job.progress["total"] >= 1
    assert mgr.find_audit(rid) is job  # a reload or a return to the page finds it
    # many black-box trainings: a second click is the same job, and the audit holds no worker
    # slot (two long audits there queued every Train launch behind them)
    big = mgr.submit_audit(rid, attack="canary", trials=2000)
    assert mgr.submit_audit(rid, attack="canary", trials=2000) is big
    t0 = time.time()
    while not big.progress.get("done") and not big.finished and time.time() - t0 < 120:
        time.sleep(0.02)
    assert mgr.find_audit(rid) is big  # the unfinished one first
    train = mgr.submit_run(small_config(method="only_public"))  # the one worker slot is free
    assert train.wait(timeout=120) and train.state == "done" and not big.finished
    # a second audit waits for its turn; the running one is still the one found, and a Cancel
    # of the waiting one ends it at once (it waited for the other's last training)
    waiting = mgr.submit_audit(rid, attack="loss")
    time.sleep(0.3)
    assert waiting.state == "queued" and mgr.find_audit(rid) is big
    assert mgr.cancel(waiting.job_id)
    assert waiting.wait(timeout=5) and waiting.state == CANCELLED and not big.finished
    # cancelled: stops at its next training and stores nothing
    assert mgr.cancel(big.job_id)
    assert big.wait(timeout=120) and big.state == CANCELLED and "result" not in big.progress
    assert 1 <= big.progress["done"] < big.progress["total"]
    assert len(AuditStore(mgr.store).list(run_id=rid)) == 1


def test_a_double_click_on_launch_is_one_run(app_env):
    """Two clicks on Launch 0.3 s apart trained twice and charged ε twice: the second launch
    of the same config while the first is queued or running is that job. Once it has
    finished, the same config is a new run (another draw of the noise)."""
    mgr = JobManager(app_env, max_workers=1)
    try:
        cfg = small_config(target_epsilon=1.0)
        a = mgr.submit_run(cfg)
        b = mgr.submit_run(cfg)
        assert b is a
        other = mgr.submit_run(small_config(target_epsilon=1.0, seed=3))  # another config: its own run
        assert other is not a
        assert a.wait(300) and other.wait(300)
        c = mgr.submit_run(cfg)
        assert c is not a and c.wait(300)
        assert len({mgr.run_id(j) for j in (a, other, c)}) == 3
        # the same for a comparison's grid (a double click on Run comparison)
        grid = [small_config(target_epsilon=e, seed=5) for e in (1.0, 2.0)]
        s1 = mgr.submit_sweep(grid)
        assert mgr.submit_sweep(list(reversed(grid))) is s1 and s1.wait(300)
    finally:
        mgr.close()


def _wait(cond, timeout=120.0):
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_run_process_crash_fails_the_run_not_the_app_and_cancel_works(app_env):
    """Runs execute in pre-warmed worker processes: a killed worker fails its run (marked
    failed in the store), the slot gets a fresh process that runs the next job; a cancel
    reaches a run in a worker process; two runs at once both complete."""
    import os
    import signal

    mgr = JobManager(app_env, max_workers=2)
    try:
        assert len(mgr.run_processes) == 2 and all(p.alive() for p in mgr.run_processes)
        long_cfg = small_config(target_epsilon=12.0)  # thousands of steps: seconds
        job = mgr.submit_run(long_cfg)
        rid = mgr.wait_run_id(job, timeout=120)
        assert rid is not None and mgr.wait_first_step(rid, timeout=120)
        victim = next(p for p in mgr.run_processes if p.alive() and p.pid in {mgr.store.get_run(rid).pid})
        os.kill(victim.pid, signal.SIGKILL)
        assert job.wait(120)
        assert job.state == "failed" and "worker process ended unexpectedly" in job.error
        rec = mgr.store.get_run(rid)
        assert rec.status == "failed" and "worker process" in rec.error
        assert victim.restarts == 1 and victim.alive()
        # the app (this process) and both slots still work: two runs at once, one cancelled
        a = mgr.submit_run(small_config(target_epsilon=12.0, seed=1))
        b = mgr.submit_run(small_config(target_epsilon=2.0, seed=2))
        ra = mgr.wait_run_id(a, timeout=120)
        assert mgr.wait_first_step(ra, timeout=120)
        mgr.cancel(a.job_id)
        assert a.wait(120) and b.wait(300)
        assert a.state == "cancelled" and mgr.store.get_run(ra).status == "cancelled"
        assert mgr.store.steps(ra)  # its history is kept
        assert b.state == "done" and mgr.store.get_run(mgr.run_id(b)).status == "completed"
    finally:
        mgr.close()


def test_run_process_reports_a_failing_config(app_env):
    from mixdp_core.data import data_root
    mgr = JobManager(app_env, max_workers=1)
    try:
        job = mgr.submit_run(small_config(dataset=f"features:{data_root()}/nonexistent.npz"))
        assert job.wait(120) and job.state == "failed"
        assert job.error.count("Error:") == 1 and "nonexistent" in job.error  # "Type: message", once
        # refused before its run row existed: the job carries the error, the store has no failed row
        assert job.run_ids == [None] and mgr.store.list_runs() == []
        assert mgr.run_processes[0].restarts == 0  # an error in a run is not a crash
    finally:
        mgr.close()


def test_job_manager_sweep_reuses_and_cancel_before_start(app_env):
    mgr = JobManager(app_env, sync=True)
    cfgs = [small_config(method="only_public"), small_config(method="only_public")]
    job = mgr.submit_sweep(cfgs)
    assert job.state == "done" and job.reused == [False, True] and job.run_ids[0] == job.run_ids[1]
    assert len(mgr.store.list_runs()) == 1
    # a job cancelled while queued never starts
    mgr2 = JobManager(app_env, max_workers=1)
    gate = mgr2.submit_features("digits", "pixels")
    queued = mgr2.submit_run(small_config(method="paragon"))
    mgr2.cancel(queued.job_id)
    assert gate.wait(120) and queued.wait(120)
    assert queued.state == "cancelled" or mgr2.store.get_run(mgr2.run_id(queued)).status in ("cancelled", "completed")


def test_job_manager_records_failures(app_env):
    from mixdp_core.data import data_root
    mgr = JobManager(app_env, sync=True)
    job = mgr.submit_run(small_config(dataset=f"features:{data_root()}/nonexistent.npz"))
    assert job.state == "failed" and "nonexistent" in job.error
    assert job.run_ids == [None] and mgr.store.list_runs() == []  # refused before a row existed
    # a run that fails after its row exists is recorded as failed, with its error
    import mixdp_core.evaluation.report as report

    def boom(*a, **k):
        raise RuntimeError("evaluation broke")

    mp = pytest.MonkeyPatch()
    mp.setattr(report, "evaluate", boom)
    try:
        job = mgr.submit_run(small_config())
    finally:
        mp.undo()
    assert job.state == "failed" and "evaluation broke" in job.error
    rec = mgr.store.get_run(job.run_ids[0])
    assert rec.status == "failed" and "evaluation broke" in rec.error
    fj = mgr.submit_features(f"features:{data_root()}/nonexistent.npz", "pixels")
    assert fj.state == "failed" and fj.error


# ------------------------------------------------------------------ server config
def test_streamlit_config_is_locked_down():
    import tomllib

    from .helpers import ROOT

    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert cfg["server"]["address"] == "127.0.0.1"
    assert cfg["server"]["headless"] is True
    assert cfg["server"]["enableXsrfProtection"] is True
    assert 0 < cfg["server"]["maxUploadSize"] <= 1024
    assert cfg["browser"]["gatherUsageStats"] is False
    # the app-side per-upload limits never exceed what the server accepts
    assert forms.MAX_ZIP_BYTES <= cfg["server"]["maxUploadSize"] * 2**20
    assert forms.MAX_NPZ_BYTES <= cfg["server"]["maxUploadSize"] * 2**20


def test_logo_asset_ships_and_is_valid_svg():
    """assets/logo.svg is the page icon and sidebar logo of every page."""
    import xml.etree.ElementTree as ET

    from mixdp_core.app_support.resources import LOGO

    assert LOGO.is_file(), LOGO
    root = ET.parse(LOGO).getroot()
    assert root.tag.endswith("svg") and root.get("viewBox") == "0 0 64 64"


def test_form_refuses_budget_too_small_for_sigma():
    """The Train form names the field instead of launching a job that would fail."""
    from mixdp_core.accounting import ComposedGaussian, epsilon
    from mixdp_core.app_support.forms import build_run_config

    base = {"dataset": "digits", "encoder": "pixels", "method": "adamix", "target_delta": 1e-5,
            "method_params": {"noise_multiplier": 20.0}}
    one_step = epsilon(ComposedGaussian(20.0, 1), delta=1e-5)  # ≈ 0.16
    cfg, errors = build_run_config({**base, "target_epsilon": one_step * 0.9})
    assert cfg is None and "epsilon" in errors and "noise_multiplier" in errors["epsilon"]
    cfg, errors = build_run_config({**base, "target_epsilon": one_step * 1.01})
    assert errors == {} and cfg is not None


def test_runner_streams_minority_accuracy_and_pdp_of_the_steps_so_far(app_env, monkeypatch):
    """Live view of a NoisyGD run: minority accuracy in the step extras, per-instance ε of the
    steps so far in the artifact while it trains (never above the final ε_i), final artifact
    without the live arrays. (The pDP rewrite period, 0.5 s in the app, is set to 0 here so
    that every step writes it.)"""
    from mixdp_core.runs import RunStore
    from mixdp_core.runs.runner import _LiveView, execute

    monkeypatch.setattr(_LiveView, "PDP_EVERY_S", 0.0)

    store = RunStore()
    seen = []

    first = []

    def on_record(rec):
        first.append(rec.step)  # the first record is the class histogram (several releases)
        if rec.step in (first[0] + 5, first[0] + 40):
            arr = store.load_artifacts(store.list_runs(limit=1)[0].run_id)
            if "live_pdp_epsilon" in arr:
                seen.append((int(arr["live_step"]), arr["live_pdp_epsilon"].copy()))

    rid = execute(small_config(imbalance_ratio=10.0), store=store, on_record=on_record, flush_every_s=0.0)
    steps = store.steps(rid)
    # every gradient step carries it; the smooth schedule's first release is the noisy count
    # of the private rows and its last two the early-checkpoint test and the public-start
    # guard (no gradient step)
    tests_ = ("noisy_count", "checkpoint_noisy_gain", "guard_noisy_gain")
    releases = [s for s in steps if any(k in s["extra"] for k in tests_)]
    # the prior correction's record (post-processing, no release) follows the guard's where it applied
    corrected = [s for s in steps if "prior_correction" in s["extra"]]
    grad_steps = [s for s in steps if s not in releases and s not in corrected]
    assert len(releases) == 3 and len(corrected) <= 1 and len(grad_steps) == len(steps) - 3 - len(corrected)
    if corrected:  # the live minority curve ends at the corrected model, as the final metrics do
        assert corrected[0]["extra"]["minority_accuracy"] == pytest.approx(
            store.get_run(rid).metrics["minority_accuracy"])
    mins = [s["extra"]["minority_accuracy"] for s in grad_steps if "minority_accuracy" in s["extra"]]
    assert len(mins) == len(grad_steps) and all(0.0 <= m <= 1.0 for m in mins)
    final = store.load_artifacts(rid)
    assert "live_pdp_epsilon" not in final and "pdp_epsilon" in final
    assert [k for k, _ in seen] == [first[0] + 5, first[0] + 40]  # the view of step t is written before record t is streamed
    for _, e in seen:
        assert e.shape == final["pdp_epsilon"].shape
        assert np.all(e <= final["pdp_epsilon"] + 1e-9)
    assert np.mean(seen[0][1]) < np.mean(seen[1][1])  # privacy loss grows with the steps


def test_live_series_arrays_stay_consistent_while_another_session_appends():
    """Several sessions share one RunSeries: arrays() read while add() appends (steps first,
    values after) must never pair steps with a shorter value list (it raised IndexError)."""
    import sys
    import threading

    from mixdp_core.app_support import live

    s = live.RunSeries("r")
    stop = threading.Event()

    def writer():
        for i in range(1, 20_001):
            if stop.is_set():
                return
            s.add([{"step": i, "total_steps": 20_000, "test_error": 0.5, "epsilon_spent": 1e-4 * i}])

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    t = threading.Thread(target=writer)
    t.start()
    try:
        reads = 0
        while t.is_alive() and reads < 3000:
            for name in ("test_error", "epsilon"):
                x, y = s.arrays(name)
                assert len(x) == len(y)
            reads += 1
        charts.live_charts(s, target_epsilon=1.0)
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
    assert s.version > 0


def test_live_view_rewrites_the_pdp_artifact_at_most_every_half_second(monkeypatch):
    """The live view adds minority accuracy at every call (every_s = 0) but rewrites the costly
    per-instance ε artifact only every PDP_EVERY_S seconds, and at the last step."""
    from types import SimpleNamespace

    from mixdp_core.runs import runner

    clock = [100.0]
    monkeypatch.setattr(runner.time, "monotonic", lambda: clock[0])
    saved = []
    store = SimpleNamespace(save_artifacts=lambda rid, arr: saved.append(int(arr["live_step"])))
    split = SimpleNamespace(minority_classes=[0], y_private=np.zeros(4, np.int64))
    view = runner._LiveView(store, "r", split, 1e-5, every_s=0.0)
    problem = SimpleNamespace(X_test=np.eye(2, dtype=np.float32), y_test=np.array([0, 1]))
    W = np.eye(2, dtype=np.float32)
    for t in range(1, 11):
        rec = SimpleNamespace(step=t, total_steps=10, extra={})
        view(rec=rec, W=W, pdp_sq=np.full(4, 0.01 * t), problem=problem, noise_multiplier=20.0)
        assert rec.extra["minority_accuracy"] == 1.0
        clock[0] += 0.2
    # calls at 0, 0.2, ..., 1.8 s: written at 0, 0.6 and 1.2 s (>= 0.5 s apart) and at the last step
    assert saved == [1, 4, 7, 10], saved


def _live_loop_script():
    """AppTest script: draw a running run with ``live_s`` = 10 s while a thread appends its
    records and then finishes it (the store and run id come through ``st.session_state``)."""
    import time

    import streamlit as st

    from mixdp_core.app_support import resources

    store, rid = st.session_state["store"], st.session_state["rid"]

    class Manager:  # render_run reads only the store
        pass

    from streamlit.delta_generator import DeltaGenerator

    m = Manager()
    m.store = store
    sends, progress = [], DeltaGenerator.progress

    def counted(self, *a, **k):  # when the live view sent its progress bar
        sends.append(time.monotonic())
        return progress(self, *a, **k)

    DeltaGenerator.progress = counted
    try:
        st.session_state["start"].start()  # the run's writer, from here: the AppTest's start-up is not timed
        t0 = time.monotonic()
        status = resources.render_run(m, rid, key="t", live_s=st.session_state["live_s"])
        st.session_state["result"] = (status, time.monotonic() - t0)
    finally:
        DeltaGenerator.progress = progress
    st.session_state["sends"] = [t - t0 for t in sends]


def test_live_redraws_are_pushed_in_place_until_the_run_ends(tmp_path, monkeypatch):
    """render_run with live_s > 0 keeps redrawing the progress and the charts in their slots
    while records arrive, and returns as soon as the run ended (not at its deadline)."""
    import threading
    import time

    from streamlit.testing.v1 import AppTest

    from mixdp_core.runs.store import RunStore

    # AppTest leaves its script as sys.modules["__main__"]: later process pools (forkserver,
    # spawn) would re-run this function's script in their children
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    store = RunStore(tmp_path, recover=False)
    cfg = {"method": "adamix", "dataset": "digits", "encoder": "pixels", "seed": 0, "target_epsilon": 3.0}
    rid = store.create_run(cfg, config_hash="h")
    recs = _records(60)
    store.append_steps(rid, recs[:3])
    from mixdp_core.app_support import live

    charts.live_charts(live.RunSeries("warm-up"))  # imports (pandas) outside the timed part

    def train():  # 57 more records in batches over ~1 s, then the run's end
        for lo in range(3, 60, 6):
            time.sleep(0.1)
            store.append_steps(rid, recs[lo:lo + 6])
        store.finish(rid, "completed", metrics={"test_error": 0.1})

    at = AppTest.from_function(_live_loop_script, default_timeout=30)
    at.session_state["store"], at.session_state["rid"], at.session_state["live_s"] = store, rid, 10.0
    at.session_state["start"] = th = threading.Thread(target=train)
    at.run()
    th.join()
    assert not at.exception, at.exception
    status, elapsed = at.session_state["result"]
    assert status == "completed"
    assert 0.8 <= elapsed < 4.0  # pushed while the run trained; returned at its end, long before 10 s
    # the progress bar was redrawn in place up to the last record (one bar, not one per redraw)
    bars = at.get("progress")
    assert len(bars) == 1 and "step 60 / 1000" in bars[0].proto.text
    # three live charts (the records carry test error, ε spent, clip; one set up per redraw),
    # each in its one slot, with the last record
    vega = at.get("vega_lite_chart")
    titles = sorted(json.loads(c.proto.spec)["title"] for c in vega)
    assert titles == ["Clip threshold τ_t vs step", "Test error vs step", "ε spent vs step"], titles
    from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

    eps = next(c for c in vega if json.loads(c.proto.spec)["title"] == "ε spent vs step")
    frame = convert_arrow_bytes_to_pandas_df(eps.proto.data.data)
    assert frame.loc[frame["newest"], "step"].tolist() == [60.0]

    # live_s = 0: one draw of what is there, no waiting
    rid2 = store.create_run(cfg, config_hash="g")
    store.append_steps(rid2, recs[:3])
    at2 = AppTest.from_function(_live_loop_script, default_timeout=30)
    at2.session_state["store"], at2.session_state["rid"], at2.session_state["live_s"] = store, rid2, 0.0
    at2.session_state["start"] = threading.Thread(target=lambda: None)
    at2.run()
    status, elapsed = at2.session_state["result"]
    assert status == "running" and elapsed < 1.0
    assert "step 3 / 1000" in at2.get("progress")[0].proto.text


def test_live_view_keeps_sending_while_a_run_writes_no_records(tmp_path, monkeypatch):
    """A run can go seconds without a record (public pre-training): the pushed view still
    sends something every LIVE_YIELD_S, because Streamlit stops a superseded script run (a
    click elsewhere started a new one, the tab closed) only when the script sends."""
    import threading
    import time

    from streamlit.testing.v1 import AppTest

    from mixdp_core.app_support.resources import LIVE_YIELD_S
    from mixdp_core.runs.store import RunStore

    # AppTest leaves its script as sys.modules["__main__"]: later process pools (forkserver,
    # spawn) would re-run this function's script in their children
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    store = RunStore(tmp_path, recover=False)
    cfg = {"method": "adamix", "dataset": "digits", "encoder": "pixels", "seed": 0, "target_epsilon": 3.0}
    rid = store.create_run(cfg, config_hash="h")
    store.append_steps(rid, _records(3))
    th = threading.Thread(target=lambda: (time.sleep(1.5), store.finish(rid, "completed")))
    at = AppTest.from_function(_live_loop_script, default_timeout=30)
    at.session_state["store"], at.session_state["rid"], at.session_state["live_s"] = store, rid, 10.0
    at.session_state["start"] = th
    at.run()
    th.join()
    assert not at.exception, at.exception
    sends = at.session_state["sends"]
    assert at.session_state["result"][0] == "completed"
    gaps = [b - a for a, b in zip([0.0] + sends, sends + [at.session_state["result"][1]])]
    # 1.5 s without records: a send every LIVE_YIELD_S (+ up to one 0.1 s tick), with slack for a
    # busy machine; without the re-send there would be one
    assert len(sends) >= 4 and max(gaps) <= LIVE_YIELD_S + 0.5, gaps


def test_layer_chart_draws_each_trained_tensor_on_a_log_axis_and_stays_owner_only():
    from mixdp_core.app_support.charts import LAYER_CHART_CAPTION, layer_stats_figure
    from mixdp_core.runs.owner_view import is_owner_only, public_metrics

    rows = [{"layer": "body.0.weight", "trainable": 40, "total": 72, "share_kept": 40 / 72,
             "noise_norm_per_step": 6.3, "gradient_norm_rms": 0.9, "noise_to_gradient": 7.0, "owner_only": True},
            {"layer": "body.3.weight", "trainable": 0, "total": 576, "share_kept": 0.0,
             "noise_norm_per_step": 0.0, "gradient_norm_rms": None, "noise_to_gradient": None, "owner_only": True},
            {"layer": "classifier.weight", "trainable": 160, "total": 160, "share_kept": 1.0,
             "noise_norm_per_step": 12.6, "gradient_norm_rms": 11.0, "noise_to_gradient": 1.15, "owner_only": True}]
    fig = layer_stats_figure(rows)
    bar = fig.data[0]
    assert list(bar.x) == ["body.0.weight", "classifier.weight"]  # frozen tensors are left out
    assert list(bar.y) == [7.0, 1.15] and bar.text[0] == "55.6 % kept"
    assert fig.layout.yaxis.type == "log" and "owner" in fig.layout.title.text
    assert "not covered by ε" in LAYER_CHART_CAPTION
    assert is_owner_only("layer_stats") and "layer_stats" not in public_metrics({"layer_stats": rows, "epsilon": 1})


def test_lesson_cache_stops_after_the_training_in_progress_and_resumes():
    """stop() ends the background thread (a page's lesson must not train on after its server
    or test is done); start() afterwards resumes the grid where it stopped."""
    import threading

    from mixdp_core.app_support.classroom import LessonCache

    def running() -> bool:
        return any(t.name == "mixdp-classroom" and t.is_alive() for t in threading.enumerate())

    cache = LessonCache()
    cache.start(priority_epsilon=1.0)
    cache.stop(timeout=120)
    assert not running()
    n = len(cache.results)
    assert n < len(cache.keys()) and not cache.errors  # it stopped after at most the training in progress
    cache.start(priority_epsilon=1.0)
    assert running()
    cache.stop(timeout=120)
    assert not running() and n <= len(cache.results) < len(cache.keys())


def test_lesson_dials_are_declared_checked_and_reach_the_data(tmp_path):
    """A lesson's dials: out-of-range values give a one-line error naming the field; digits
    ignores the synthetic dials (one cache per real lesson); the dials reach the data and the
    imbalance reaches the private part that step 1 releases (its smallest class ~1/10 of its
    largest, flagged minority)."""
    from mixdp_core.app_support.classroom import Lesson, as_lesson, noisy_class_means
    from mixdp_core.config import describe
    from mixdp_core.errors import ConfigError

    assert {s.name for s in describe(Lesson)} == {"data", "imbalance_ratio", "classes", "train_per_class"}
    for bad in ({"classes": 5000}, {"imbalance_ratio": 0.5}, {"train_per_class": 3}, {"data": "cifar"}):
        with pytest.raises(ConfigError) as e:
            Lesson(**bad)
        assert next(iter(bad)) in str(e.value) and "\n" not in str(e.value)
    assert Lesson(data="digits", classes=20) == Lesson(data="digits")
    les = Lesson(data="many classes (synthetic)", classes=12, train_per_class=35, imbalance_ratio=10)
    assert les.source()[2]["classes"] == 12 and les != as_lesson("many classes (synthetic)")
    d = noisy_class_means(2.0, lesson=les, cache_dir=tmp_path, noise="reproducible")
    counts = np.asarray(d["counts"])
    assert len(counts) == 12 and counts.max() == 30  # 35 rows - 5 public
    assert counts.min() == pytest.approx(3, abs=1) and d["minority"]
    assert set(np.argsort(counts)[:len(d["minority"])]) == set(d["minority"])
    balanced = noisy_class_means(2.0, lesson=Lesson(data="many classes (synthetic)", classes=12, train_per_class=35),
                                 cache_dir=tmp_path, noise="reproducible")
    assert balanced["minority"] == [] and set(balanced["counts"]) == {30}
    # rows, not images, on the synthetic lesson: the mechanism's caption says so
    assert "row" in d["mechanism"] and "image" not in d["mechanism"]
    digits = noisy_class_means(2.0, cache_dir=tmp_path, noise="reproducible")
    assert "image" in digits["mechanism"]


def test_release_caption_says_what_the_run_kept_of_its_private_phase():
    assert charts.release_caption({"guard_released_private": None, "update_shrinkage": None}) is None
    line = charts.release_caption({"guard_released_private": False, "update_shrinkage": 0.2})
    assert "kept: 20 %" in line and "kept the public start" in line
    assert "released the private model" in charts.release_caption({"guard_released_private": True})
    both = charts.release_caption({"guard_released_private": True, "update_shrinkage": None,
                                   "update_combination": [0.31, 0.125]})
    assert "kept: 0.31 × the averaged update + 0.12 × the last iterate's" in both
    rejected = charts.release_caption({"update_shrinkage": 0.07, "update_check_rejected": True})
    assert "kept: 7 %" in rejected and "worse than the public start" in rejected
    kept = charts.release_caption({"update_shrinkage": 0.9, "update_check_rejected": False})
    assert "mostly noise; the public labels confirmed it" in kept and "worse than" not in kept
    assert "confirmed" not in line  # no check ran (balanced classes, or another rule)


def test_single_run_test_error_carries_its_wilson_interval():
    from scipy.stats import binomtest

    from mixdp_core.app_support import charts

    cap = charts.test_error_interval_caption({"test_error": 68 / 539, "n_test": 539})
    ci = binomtest(68, 539).proportion_ci(confidence_level=0.95, method="wilson")
    assert f"{100 * ci.low:.1f}–{100 * ci.high:.1f} %" in cap and "539 test samples" in cap
    assert charts.test_error_interval_caption({"test_error": 0.1}) is None


def test_owner_only_cards_follow_the_owner_switch():
    from mixdp_core.app_support import charts

    m = {"test_error": 0.1, "balanced_accuracy": 0.9, "mia_auc": 0.6}
    assert charts.OWNER_AUC_LABEL in [c[0] for c in charts.metric_cards(m)]
    assert charts.OWNER_AUC_LABEL not in [c[0] for c in charts.metric_cards(m, owner=False)]


def test_slider_tick_labels_sit_at_the_stops_fractions():
    """Each label at i / (n − 1) of the track (where the slider puts its thumb), inside the
    track's inset; flexbox spacing had put the "3" a stop off."""
    import re

    html = forms.slider_tick_row([0.5, 1, 3, 8], testid="t")
    lefts = [float(x) for x in re.findall(r"left:([0-9.]+)%", html)]
    assert lefts == pytest.approx([0.0, 100 / 3, 200 / 3, 100.0], abs=1e-3)
    assert re.findall(r">([0-9.]+)</span>", html) == ["0.5", "1", "3", "8"]
    assert f"left:{forms.SLIDER_TRACK_INSET_PX}px" in html and "translateX(-50%)" in html


def test_compare_says_what_a_launch_adds_to_the_data_sets_spend(app_env):
    from mixdp_core.app_support import budget
    from mixdp_core.runs import RunStore
    from mixdp_core.runs.runner import execute

    store = RunStore(app_env / "home")
    cfgs = [small_config(target_epsilon=e, seed=s) for e in (1.0, 3.0) for s in (0, 1)]
    cfgs.append(small_config(method="only_public"))  # reads no private row: no cost
    line = budget.grid_cost_line(store, cfgs)
    assert "adds up to ε = 8 " in line and "4 private runs" in line and "spent ε = 0" in line
    execute(cfgs[0], store=store)  # stored: reused, costs nothing again
    line = budget.grid_cost_line(store, cfgs)
    assert "adds up to ε = 7 " in line and "3 private runs" in line


def test_data_page_folder_that_does_not_exist_is_refused_before_it_is_saved(app_env):
    from mixdp_core.data import data_root
    from mixdp_core.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        forms.dataset_spec_from_path("image_folder", "nonexistent_folder")
    assert e.value.field == "path" and "is not a folder" in e.value.message
    (data_root() / "real").mkdir(parents=True, exist_ok=True)
    assert forms.dataset_spec_from_path("image_folder", "real").startswith("image_folder:")


def test_upload_errors_name_the_users_file_not_the_cache_path(tmp_path):
    import io

    import numpy as np

    from mixdp_core.errors import ConfigError

    b = io.BytesIO()
    np.savez(b, X_train=np.zeros((3, 2), np.float32), y_train=np.zeros(3, int))
    with pytest.raises(ConfigError) as e:
        forms.save_npz_upload(b.getvalue(), "mine.npz", cache_dir=tmp_path)
    assert "'mine.npz' lacks array(s) X_test, y_test" in str(e.value) and ".tmp" not in str(e.value)


def test_wilson_interval_never_prints_below_zero():
    from mixdp_core.app_support import charts

    assert "interval 0.0–" in charts.test_error_interval_caption({"test_error": 0.0, "n_test": 21})


def test_classroom_says_when_a_gap_between_two_single_trainings_is_noise():
    """Step 5 read "12.1 % with private data only, 12.6 % when public samples guide it": the
    public samples looked harmful from a 0.5-point gap on 539 test samples (±4.0 points)."""
    from mixdp_core.app_support.classroom import difference_note

    small = difference_note(0.121, 0.126, 539)
    assert "within the test set's spread (±4.0 points" in small and "not a verdict" in small
    big = difference_note(0.126, 0.037, 539)
    assert "exceeds the test set's spread" in big
    assert difference_note(0.1, 0.2, 0) == ""  # no test count known: no spread stated


def test_the_run_form_reports_every_bad_field_at_once():
    """Five bad advanced fields took five clicks, one message each; "or None" where the form
    says "(empty = auto)"."""
    from mixdp_core.app_support.forms import build_run_config

    cfg, err = build_run_config({"dataset": "digits", "encoder": "pixels", "method": "adamix", "method_params": {
        "learning_rate": -1, "weight_decay": "abc", "tuning_gamma": 0, "clip_percentile": 150}})
    assert cfg is None and set(err) == {"learning_rate", "weight_decay", "tuning_gamma", "clip_percentile"}
    assert err["weight_decay"].endswith("or empty (auto), got 'abc'")
    _, err = build_run_config({"dataset": "digits", "encoder": "pixels", "method": "adamix",
                               "method_params": {"guard_resolution": 0.9}})
    assert err["guard_resolution"].count("(one release at σ)") == 1 and " None" not in err["guard_resolution"]


def test_audit_page_opens_on_an_attack_the_method_takes_and_shows_auc_intervals():
    """White-box canaries were the default for every method and refused the paragon and the
    prototypes on click; stored audits showed an AUC without its spread (two identical
    50-trial audits: 0.721 and 0.607, both 'ok')."""
    from types import SimpleNamespace

    from mixdp_core.app_support.audit import attack_available, audit_rows, default_attack

    for method in ("adamix", "paragon", "dppl_public", "dp_ls"):
        rec = SimpleNamespace(method=method)
        assert attack_available(rec, default_attack(rec))[0], method
    assert default_attack(SimpleNamespace(method="adamix")) == "canary-whitebox"
    a = SimpleNamespace(attack="canary-whitebox", audit_id="x", summary={
        "auc": 0.721, "n_members": 22, "n_nonmembers": 28, "alarm": False})
    (row,) = audit_rows([a])
    value, half = row["AUC (± 95 %)"].split(" ± ")
    assert value == "0.721" and 0.1 < float(half) < 0.2  # ~0.14 at 22 / 28: the two audits agree
    # LiRA pools K + 1 models' scores on the same rows: one model's rows set the interval (a review
    # found 0.510 ± 0.015 at 2,777 / 2,777 pooled pairs from 5 models)
    from mixdp_core.evaluation.mia import auc_standard_error

    lira = SimpleNamespace(attack="lira", audit_id="y", summary={
        "auc": 0.51, "n_members": 2777, "n_nonmembers": 2777, "n_models": 5, "alarm": False})
    (row,) = audit_rows([lira])
    half = float(row["AUC (± 95 %)"].split(" ± ")[1].split()[0])
    assert half == pytest.approx(1.96 * auc_standard_error(0.51, 555, 555), abs=1e-3) and half > 0.03
    assert "one of 5 pooled models' rows" in row["AUC (± 95 %)"]


def test_classroom_says_when_the_guard_kept_the_public_model_and_reads_a_flat_pdp_honestly():
    """A flat AdaMix curve at Only-Public's error (the guard kept the public start) read as
    'ε costs nothing'; a 0.2 % pDP spread was read as 'samples the model fits well cost less'."""
    from mixdp_core.app_support.classroom import guard_note, pdp_spread_note

    note = guard_note({"guard_kept_private": False})
    assert "Only-Public's" in note and "ε is still spent" in note and "not used" not in note
    assert guard_note({"guard_kept_private": True}) == guard_note({"guard_kept_private": None}) == ""
    assert "nearly the whole budget" in pdp_spread_note([0.984, 0.985, 0.986], 1.0)
    assert "cost less" in pdp_spread_note([0.2, 0.6, 1.0], 1.0)


def test_the_epsilon_chart_shows_what_the_first_record_spent():
    """The first record is the noisy count / class histogram, charged as many releases: the ε
    curve began at step 3,019 with 37 % of the budget spent and no word why."""
    steps = [{"step": 3019, "total_steps": 9000, "epsilon_spent": 14.9, "extra": {"count_releases": 3019}},
             {"step": 3500, "total_steps": 9000, "epsilon_spent": 16.0, "test_error": 0.2, "extra": {}},
             {"step": 9000, "total_steps": 9000, "epsilon_spent": 40.0, "test_error": 0.1, "extra": {}}]
    fig = charts.live_figures(steps, target_epsilon=40)["epsilon"]
    (count,) = [t for t in fig.data if "histogram" in (t.name or "")]
    assert list(count.x) == [0, 3019] and list(count.y) == [0.0, 14.9] and "3,019" in count.name
    one = [dict(steps[0], step=1, extra={"count_releases": 1}), *steps[1:]]
    assert not [t for t in charts.live_figures(one, target_epsilon=40)["epsilon"].data if "histogram" in (t.name or "")]


def test_the_delta_curve_of_a_pure_dp_run_is_its_own():
    """DPPL-Public is pure ε-DP: its δ(ε) chart drew the loose zCDP curve (δ = 0.055 at its own
    ε = 2), far above the reported point (δ = 0 there)."""
    m = {"epsilon": 2.0, "delta": 1e-5, "mu": None, "rho": 0.5, "privacy": {"pure_epsilon": 2.0}}
    eps, d, src = charts.delta_curve(m, eps_grid=np.array([0.5, 1.0, 2.0, 3.0]))
    assert "pure" in src and d[2] == 0.0 and d[3] == 0.0 and 0 < d[0] < 1
    from mixdp_core.accounting import pure_dp_delta, zcdp_to_delta

    # both bounds hold: the smaller one, at every ε
    assert d[1] == pytest.approx(min(pure_dp_delta(2.0, epsilon=1.0), zcdp_to_delta(0.5, epsilon=1.0)))


def test_run_labels_give_a_references_epsilon():
    """Only-Public was labelled ε=∞ and a running paragon ε=1 (the sweep's placeholder)."""
    from types import SimpleNamespace as NS

    from mixdp_core.app_support.resources import run_eps_label

    assert run_eps_label(NS(method="only_public", metrics={"private": False, "epsilon": 0.0}, target_epsilon=1.0)) == "ε=0"
    assert run_eps_label(NS(method="paragon", metrics={}, target_epsilon=1.0)) == "ε=∞"
    assert run_eps_label(NS(method="adamix", metrics={}, target_epsilon=3.0)) == "ε=3"


def test_percentages_never_round_a_nonzero_value_to_zero_or_a_full_hundred():
    assert charts.percent(0.0004) == "<0.1 %" and charts.percent(0.0) == "0.0 %"
    assert charts.percent(0.9996) == ">99.9 %" and charts.percent(1.0) == "100.0 %"
    assert charts.percent(0.1234) == "12.3 %"


def test_delta_advice_warns_exactly_when_delta_is_not_below_one_over_n():
    # 1/n = 1/1,000 = 1e-3: δ = 1e-3 permits publishing one row in the clear, 1e-4 does not
    warn = forms.delta_advice(1e-3, 1000)
    assert warn is not None and "1/1,000" in warn and "δ ≤ 1e-04" in warn
    assert forms.delta_advice(1e-4, 1000) is None
    assert forms.delta_advice(1e-3, 999) is None  # 1e-3 · 999 < 1
    # the largest offered δ below 1/n is the advice (1/1,437 ≈ 7.0e-4 → 1e-4)
    assert "δ ≤ 1e-04" in forms.delta_advice(1e-3, 1437)
    assert "δ ≤ 1e-07" in forms.delta_advice(1e-3, 10**9)  # nothing offered below 1e-9: the smallest
    assert forms.delta_advice(1e-5, None) is None and forms.delta_advice(1e-5, 0) is None


def test_private_row_count_is_the_splits_private_rows_and_none_when_it_cannot_be_made():
    from mixdp_core.app_support.data import label_summary, private_row_count

    n = private_row_count("digits", public_per_class=5, imbalance_ratio=10.0)
    s = label_summary("digits", public_per_class=5, imbalance_ratio=10.0)
    assert n == sum(s["private"]) and 100 < n < 1797 - 50
    # imbalance removes private rows: fewer than the balanced split's
    assert n < private_row_count("digits", public_per_class=5, imbalance_ratio=1.0)
    # a split that cannot be made (more public rows per class than a class holds): no count, no guess
    assert private_row_count("digits", public_per_class=400, imbalance_ratio=1.0) is None
    assert forms.delta_advice(1e-3, private_row_count("digits", public_per_class=5)) is not None


def test_the_encoder_is_not_named_where_none_runs():
    """"adamix on synthetic · pixels" named an encoder that never ran (the rows are the features)."""
    from types import SimpleNamespace

    from mixdp_core.app_support.resources import NO_ENCODER, encoder_label, run_label

    assert encoder_label("synthetic", "pixels") == NO_ENCODER == encoder_label("features:/x.npz", "pixels")
    assert encoder_label("digits", "pixels") == "pixels"
    rec = SimpleNamespace(run_id="r", method="adamix", dataset="synthetic", encoder="pixels", seed=0,
                          status="completed", target_epsilon=1.0, metrics={"private": True, "epsilon": 1.0})
    assert f"synthetic/{NO_ENCODER}" in run_label(rec)


def test_the_pdp_histogram_of_equal_epsilons_is_one_bar_not_a_crash():
    """DPPL-Mean gives every row the whole budget: εᵢ within a few ulps of each other left numpy
    no 40 finite bins ("Too many bins") and the Train, Runs and Audit pages crashed."""
    e = np.full(100, 0.9999999999999537)
    e[0] = 0.9999999999999554
    fig = charts.pdp_hist_figure(e, 1.0)
    assert list(fig.data[1].y) == [0, 100.0]  # the target line as tall as the one bar
    assert charts.pdp_hist_figure(np.linspace(0.1, 1.0, 50), 1.0).data[1].y[1] < 50  # spread: its own bins


def test_the_paragons_outcomes_are_labelled_as_the_owners_view():
    """Its test error and accuracies are a function of the private rows with no guarantee; the
    run card showed them unlabelled with the owner toggle off."""
    par = {"private": False, "epsilon": None, "test_error": 0.05, "balanced_accuracy": 0.95}
    labels = dict(charts.metric_cards(par, owner=True))
    assert "test error (owner's view, not private)" in labels and "test error" not in labels
    # with the owner's view off they are not shown at all (a review found them on the Runs page)
    assert charts.metric_cards(par, owner=False) == []
    op = dict(par, epsilon=0.0)  # Only-Public reads no private row: its outcomes are public
    assert "test error" in dict(charts.metric_cards(op, owner=False))


def test_the_long_tail_sentence_follows_its_own_numbers():
    """Step 1 said "the same noise on a smaller sum moves its average further" beside a minority
    median of 72 against 130, and "1 rows"."""
    from mixdp_core.app_support.classroom import long_tail_note

    further = long_tail_note([1, 10, 50, 100], [3.0, 1.0, 0.5, 0.4], [0])
    assert "moves its average further" in further and "**1** row against" in further
    not_further = long_tail_note([1, 10, 50, 100], [72.0, 130.0, 120.0, 140.0], [0])
    assert "did not move further" in not_further and "moves its average further" not in not_further


def test_a_chart_of_the_owners_view_exports_its_csv_with_the_owners_note():
    """The Data page's class counts (exact private counts per class) and the per-instance ε
    histogram downloaded as CSV with no label; the page said "owner's view", the file did not."""
    from mixdp_core.runs.owner_view import OWNER_NOTE

    counts = charts.class_counts_figure({"class_names": ["a", "b"], "public": [2, 2], "private": [40, 4],
                                         "test": [5, 5], "minority": [0, 1]}, imbalance_ratio=10)
    for fig in (counts, charts.pdp_hist_figure(np.linspace(0.1, 1.0, 20), 1.0)):
        assert charts.figure_csv(fig).startswith(f"# {OWNER_NOTE}\n")
    public = charts.metric_vs_epsilon([{"method": "adamix", "epsilon": 1.0, "test_error_mean": 0.2,
                                        "test_error_std": 0.0, "n": 1}], "test_error", "t", "y")
    assert not charts.figure_csv(public).startswith("#")


def test_the_data_page_checks_a_public_domain_before_saving(tmp_path):
    """With "Public data from" set the split checks were skipped: a public domain with other
    classes, or a synthetic size past its limit, was saved and failed only at Launch."""
    from mixdp_core.app_support.data import split_problem

    rng = np.random.default_rng(0)
    p = tmp_path / "f.npz"
    np.savez(p, X_train=rng.normal(size=(40, 16)).astype(np.float32), y_train=np.arange(40) % 4,
             X_test=rng.normal(size=(8, 16)).astype(np.float32), y_test=np.arange(8) % 4,
             class_names=np.array(["cat", "dog", "fox", "owl"]))
    field, msg = split_problem(f"features:{p}", public_per_class=2, public_from="digits")
    assert field == "public_from" and "they must be equal" in msg
    field, msg = split_problem("synthetic", public_per_class=2, public_from="synthetic",
                               dataset_kwargs={"classes": 1000, "dim": 4096})
    assert field == "dim" and "at most" in msg
    assert split_problem("synthetic", public_per_class=2, public_from="synthetic",
                         dataset_kwargs={"classes": 5, "dim": 8, "train_per_class": 20, "shift": 0.5}) is None


def test_the_png_fallback_draws_grouped_bars_side_by_side_in_their_colours(monkeypatch):
    """Without kaleido the PNG export drew the public bars under the private ones and the minority
    bars in the private colour."""
    from matplotlib.axes import Axes

    calls = []
    real = Axes.bar
    monkeypatch.setattr(Axes, "bar", lambda self, x, h, **kw: calls.append((list(x), kw.get("color"))) or real(
        self, x, h, **kw))
    monkeypatch.setattr(type(charts.class_counts_figure({"class_names": ["a"], "public": [1], "private": [1],
                                                           "test": [1], "minority": [0]})), "to_image",
                        lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no kaleido")))
    s = {"class_names": ["a", "b", "c"], "public": [2, 2, 2], "private": [10, 5, 1], "test": [3, 3, 3],
         "minority": [0, 0, 1]}
    png = charts.figure_image(charts.class_counts_figure(s, imbalance_ratio=10), "png")
    assert png[:4] == b"\x89PNG"
    (pub_x, _), (priv_x, priv_c), (min_x, min_c) = calls
    assert all(p < q for p, q in zip(pub_x, priv_x)) and priv_x == min_x  # side by side; one private slot
    assert priv_c == charts.PRIVATE_COLOR and min_c == charts.MINORITY_COLOR


def test_an_instant_data_sets_label_summary_is_remembered_per_settings(monkeypatch):
    """The Train and Compare pages ask the same split's check and private count on every rerun:
    0.9 s each for a 100-class synthetic regime, twice per Train rerun."""
    from mixdp_core.app_support import data

    calls = []
    real = data.split_summary
    monkeypatch.setattr(data, "split_summary", lambda *a, **k: calls.append(1) or real(*a, **k))
    data._instant_label_summary.cache_clear()
    kw = {"classes": 4, "dim": 8, "train_per_class": 12, "test_per_class": 3}
    a = data.label_summary("synthetic", public_per_class=2, dataset_kwargs=kw)
    a["private"][0] = -1  # a caller's change stays its own
    b = data.label_summary("synthetic", public_per_class=2, dataset_kwargs=dict(kw))
    assert len(calls) == 1 and b["private"][0] > 0
    data.label_summary("synthetic", public_per_class=3, dataset_kwargs=kw)  # other settings: computed
    assert len(calls) == 2
    data._instant_label_summary.cache_clear()


def test_epsilon_advice_warns_above_ten_only():
    from mixdp_core.app_support.forms import WEAK_EPSILON, epsilon_advice

    assert epsilon_advice(8.0) is None and epsilon_advice(WEAK_EPSILON) is None and epsilon_advice(None) is None
    assert "e^ε = 36,316 times" in epsilon_advice(10.5)
    assert "about 10^26" in epsilon_advice(60.0)


def test_a_public_domain_of_another_width_is_counted_from_the_labels_and_shown_as_itself(tmp_path, monkeypatch):
    """The Data page counts a split from its labels on the pixels view: a public domain whose
    pixels have another width refused the split ("X_private: has 12 columns, the other parts 64")
    and blocked Extract, and its sample grid showed the private set's own rows as "public"."""
    import numpy as np

    from mixdp_core.app_support.data import public_sample_images, split_summary

    rng = np.random.default_rng(0)
    f = tmp_path / "f.npz"
    np.savez(f, X_train=rng.normal(size=(300, 12)).astype("float32"), y_train=np.repeat(np.arange(10), 30),
             X_test=rng.normal(size=(50, 12)).astype("float32"), y_test=np.repeat(np.arange(10), 5),
             class_names=np.array([str(i) for i in range(10)]))
    s = split_summary(f"features:{f}", "pixels", public_from="digits", labels_only=True, cache_dir=tmp_path / "c")
    assert (sum(s["public"]), sum(s["private"])) == (50, 300)
    with pytest.raises(Exception, match="columns"):  # a real split still needs one width
        split_summary(f"features:{f}", "pixels", public_from="digits", cache_dir=tmp_path / "c")
    # digits' grid from another data set named as its public domain: that domain's 8x8 images
    from mixdp_core.features.cache import get_features

    own = public_sample_images("digits", per_class=2, public_per_class=5, cache_dir=tmp_path / "c")
    other = public_sample_images(f"features:{f}", per_class=2, public_per_class=5, cache_dir=tmp_path / "c",
                                 public_from="digits")
    assert set(other) == set(own) and all(len(v) == 2 for v in other.values())
    X = get_features("digits", "pixels", cache_dir=tmp_path / "c").X_train
    img = other["0"][0].ravel()
    assert any(np.allclose(img, (r - r.min()) / max(r.max() - r.min(), 1e-12), atol=1e-6) for r in X)


def test_audit_trainings_says_what_each_attack_trains():
    from mixdp_core.app_support.audit import audit_trainings

    kw = dict(reference_models=8, canaries=1000)
    assert audit_trainings("canary", trials=None, **kw) == "100 trainings (one per trial)"  # the library's default
    assert audit_trainings("lira", trials=None, **kw).startswith("9 trainings")
    assert audit_trainings("canary-whitebox", trials=2500, **kw).startswith("3 training(s) (2,500 canaries")
    assert audit_trainings("seed-replay", trials=None, **kw) == "up to 800 trainings (two per trial, as many as refuting ε needs)"
    assert audit_trainings("loss", trials=None, **kw) == "1 training"
    # a DP-SGD probe's white-box canaries all go into one training (not independent trials)
    assert audit_trainings("canary-whitebox", trials=1000, reference_models=8, canaries=100,
                           method="dp_linear_probe", params={}).startswith("1 training (1,000 canaries")
    assert audit_trainings("canary-whitebox", trials=1000, reference_models=8, canaries=100,
                           method="fully_private", params={}).startswith("10 training(s)")
