"""AppTest of every page with small real runs (digits · pixels); jobs run synchronously."""

from __future__ import annotations

import sqlite3

import pytest

from .helpers import page_text, small_config

pytestmark = pytest.mark.timeout(600)


def _store():
    from mixdp_core.runs import RunStore

    return RunStore(recover=False)


def _launch_button(t):
    return next(b for b in t.button if "Launch" in b.label)


# ------------------------------------------------------------------ Home
def test_home_lists_every_registered_method_and_families(at):
    from mixdp_core.methods import METHODS

    text = page_text(at)
    assert at.title[0].value == "MixDP Explorer"
    assert "Mixed DP" in text
    for name in METHODS.keys():
        assert f"`{name}`" in text, name
    assert any(b.label == "Run the demo" for b in at.button)
    assert "digits" in text and "AdaMix at ε = 3" in text


def test_demo_button_reuses_a_stored_identical_run_and_opens_train(at):
    from mixdp_core.app_support.forms import demo_config
    from mixdp_core.encoders import ENCODERS

    cfg = demo_config()
    assert (cfg.dataset, cfg.method, cfg.target_epsilon) == ("digits", "adamix", 3.0)
    assert ENCODERS.get(cfg.encoder).offline  # the demo never needs a download
    # A completed run with the demo's config hash is reused (no re-training in this test).
    store = _store()
    real = store.get_run(__import__("mixdp_core.runs.runner", fromlist=["execute"]).execute(
        small_config(), store=store))
    rid = store.create_run(cfg.to_dict(), config_hash=cfg.config_hash(), split_hash=cfg.split_hash(), label="seeded")
    store.append_steps(rid, store.steps(real.run_id))
    store.finish(rid, "completed", metrics=real.metrics)
    at.button(key="demo").click().run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Train"
    text = page_text(at)
    assert "identical completed run" in text
    assert rid in text
    # the demo itself was reused; what it is read against was trained beside it
    runs = store.list_runs()
    assert sorted(r.method for r in runs) == ["adamix", "adamix", "fully_private", "only_public"], runs
    assert "Beside this run" in text and "Only-Public (public samples only, ε = 0)" in text
    assert "Fully-Private at the same ε = 3" in text


# ------------------------------------------------------------------ Data & encoder
def _charts(t) -> dict:
    import json

    return {c.proto.id.split("-")[-1] if not getattr(c, "key", None) else c.key: json.loads(c.proto.spec)
            for c in t.main.get("plotly_chart")}


def test_every_page_warms_both_chart_renderers_in_its_sidebar(at, app_env):
    """The browser loads the Vega-Lite and plotly renderers with the page, not with a run's
    first chart (resources.warm_chart_renderers)."""
    import json

    for page in ("pages/1_data.py", "pages/2_train.py", "pages/3_compare.py"):
        at.switch_page(page).run()
        assert not at.exception, at.exception
        side = at.sidebar
        assert [c.key for c in side.get("plotly_chart")] == ["final-charts-warmup"], page
        vega = side.get("vega_lite_chart")
        assert len(vega) == 1 and json.loads(vega[0].proto.spec)["width"] == 1, page


def test_data_page_draws_split_without_extraction_marks_minority_only_when_imbalanced(at, app_env):
    import json

    at.switch_page("pages/1_data.py").run()
    assert not at.exception, at.exception
    assert at.selectbox(key="data_dataset").value == "digits"  # offline default
    assert at.selectbox(key="data_encoder").value == "pixels"  # instant default
    # No extraction click: the split comes from the labels; balanced -> no minority class.
    charts = _charts(at)
    assert set(charts) == {"data_counts", "data_samples"}, set(charts)
    counts = charts["data_counts"]
    assert [tr["name"] for tr in counts["data"]] == ["public", "private"]
    assert not any("★" in str(x) for x in counts["data"][1]["x"])
    text = page_text(at)
    assert "no minority class" in text and "Owner's view, not private" in text
    assert at.button(key="data_extract").proto.type == "secondary"  # never a red "re-check"
    assert len(charts["data_samples"]["data"]) >= 10  # at least one public image per class
    at.number_input(key="data_ir").set_value(10.0).run()
    counts = _charts(at)["data_counts"]
    # the private bars: the majority trace and the minority trace (their own legend entry) together
    private = [a if a is not None else b for a, b in zip(counts["data"][1]["y"], counts["data"][2]["y"])]
    assert max(private) / min(private) > 5  # the long tail (IR = 10) is visible
    assert sum("★" in str(x) for x in counts["data"][1]["x"]) >= 2  # minority classes marked
    assert counts["data"][2]["name"] == "private, minority class ★"
    at.button(key="data_extract").click().run()
    assert not at.exception, at.exception
    assert "Features ready" in page_text(at)
    assert at.session_state["data_settings"]["imbalance_ratio"] == 10.0
    saved = json.loads((app_env / "app_settings.json").read_text())  # a new session starts from these
    assert saved["imbalance_ratio"] == 10.0 and saved["encoder"] == "pixels"


def test_data_page_refuses_a_path_outside_the_data_root(at, tmp_path, monkeypatch):
    monkeypatch.setenv("MIXDP_DATA_ROOT", str(tmp_path / "root"))
    (tmp_path / "root").mkdir()
    at.switch_page("pages/1_data.py").run()
    at.radio(key="data_source").set_value("Image folder under the data root").run()
    at.text_input(key="data_folder").input("../../etc").run()
    errs = [e.value for e in at.error]
    assert any("**path**" in e and "outside the data root" in e for e in errs), errs
    # a folder whose class folders hold no image is refused here, not saved to fail at Launch
    for c in ("a", "b"):
        (tmp_path / "root" / "mine" / c).mkdir(parents=True)
    at.text_input(key="data_folder").input("mine").run()
    errs = [e.value for e in at.error]
    assert any("contains no files" in e for e in errs), errs
    assert not any("image_folder:" in i.value and "Current settings" in i.value for i in at.info)


# ------------------------------------------------------------------ Train
def test_train_runs_adamix_and_shows_final_metrics(at):
    at.switch_page("pages/2_train.py").run()
    assert not at.exception, at.exception
    at.selectbox(key="train_dataset").select("digits").run()
    at.selectbox(key="train_encoder").select("pixels").run()
    assert at.selectbox(key="train_method").value == "adamix"
    assert at.select_slider(key="train_eps").value == 3.0
    _launch_button(at).click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    labels = {m.label: m.value for m in at.metric}
    assert {"test error", "balanced accuracy", "attack AUC (owner only)"} <= set(labels)
    assert "minority-class accuracy" not in labels  # imbalance ratio 1: no minority class
    assert float(labels["test error"].rstrip(" %")) < 30
    charts = _charts(at)
    # error, ε spent, pDP histogram of the run, τ_t: what adamix has (no minority at ratio 1)
    assert {"train-test_error", "train-epsilon", "train-pdp", "train-clip"} <= set(charts), set(charts)
    assert "train-minority" not in charts
    assert charts["train-test_error"]["layout"]["yaxis"]["range"] == [0, 1.0]
    runs = _store().list_runs()
    assert len(runs) == 1 and runs[0].status == "completed"
    r = runs[0]
    assert r.method == "adamix" and r.encoder == "pixels" and r.target_epsilon == 3.0
    assert 0 < r.metrics["epsilon"] <= 3.0 + 1e-9
    assert at.query_params["run"] in (r.run_id, [r.run_id])
    priv = at.dataframe[0].value
    assert "μ-GDP: μ" in list(priv["notion"]) and "ρ-zCDP: ρ" in list(priv["notion"])
    # the budget line above the form is drawn again after the launch (it still said "ε = 0")
    line = next(c.value for c in at.caption if "has spent ε" in c.value)
    assert "no private run yet" not in line and "in 1 private run" in line, line


@pytest.mark.parametrize("exact, field", [("0", "epsilon"), ("-1", "epsilon"), ("abc", "epsilon"),
                                          ("\uff12\uff10", "epsilon"), ("1e9", "epsilon")])
def test_train_refuses_bad_epsilon_naming_the_field(at, exact, field):
    at.switch_page("pages/2_train.py").run()
    at.selectbox(key="train_encoder").select("pixels").run()
    at.text_input(key="train_eps_exact").input(exact)
    _launch_button(at).click().run()
    errs = [e.value for e in at.error]
    # the run's declared range, not the mathematical domain of ε (> 0)
    assert any(e.startswith(f"**{field}**") and "[0.001, 1000]" in e for e in errs), errs
    assert _store().list_runs() == []


def test_train_says_the_one_epsilon_a_launch_used(at):
    at.switch_page("pages/2_train.py").run()
    at.selectbox(key="train_encoder").select("pixels").run()
    at.selectbox(key="train_method").select("only_public").run()
    at.selectbox(key="train_method").select("dp_ls").run()
    at.text_input(key="train_eps_exact").input("20")
    _launch_button(at).click().run()
    assert not at.exception, at.exception
    text = page_text(at)
    assert "Launched at ε = 20 — the typed value; the slider's 3 was not used." in text
    slider = at.select_slider(key="train_eps")
    assert not slider.disabled and "not used while the exact ε below is filled (typed: 20)" in slider.label
    (r,) = _store().list_runs()
    assert r.target_epsilon == 20.0
    assert not any("is not below 1/n" in w.value for w in at.warning)  # δ = 1e-5
    # ε = 20 launches, with the warning a weak promise deserves (it had only a collapsed note)
    assert any("ε = 20 is a weak promise" in w.value and "485,165,195 times" in w.value for w in at.warning)
    # δ above 1/n (digits' private rows): launched, with the warning beside the launch
    at.selectbox(key="train_delta").select(1e-3)
    _launch_button(at).click().run()
    assert any("is not below 1/n" in w.value for w in at.warning)
    # in the launch line's one element (an element of its own, drawn on the launch's page run
    # only, shifted the run view's nodes), and still there on the next page run
    (line,) = [w for w in at.warning if "is not below 1/n" in w.value]
    assert line.value.startswith("Launched at ε = 20") and "weak promise" in line.value
    at.run()
    assert [w.value for w in at.warning if "is not below 1/n" in w.value] == [line.value]
    assert "private rows" in at.selectbox(key="train_delta").help
    # a seed out of range: one line naming it (Launch did nothing and said nothing)
    at.number_input(key="train_seed").set_value(-3)
    _launch_button(at).click().run()
    assert any(e.value.startswith("**seed**") for e in at.error), [e.value for e in at.error]
    at.number_input(key="train_seed").set_value(0)
    # a typed value that is not a valid ε never claims to be the one used
    at.text_input(key="train_eps_exact").input("abc")
    _launch_button(at).click().run()
    assert "not used" not in at.select_slider(key="train_eps").label and len(_store().list_runs()) == 2


def test_train_refuses_text_init_without_clip(at):
    at.switch_page("pages/2_train.py").run()
    at.selectbox(key="train_encoder").select("pixels").run()
    at.selectbox(key="adv_adamix_init").select("text")
    _launch_button(at).click().run()
    errs = [e.value for e in at.error]
    assert any(e.startswith("**init**") and "CLIP" in e for e in errs), errs
    assert _store().list_runs() == []


def test_train_refuses_text_method_without_clip(at):
    from mixdp_core.methods import METHODS

    text_methods = [n for n, c in METHODS.items() if c.needs_text]
    if not text_methods:
        pytest.skip("no registered method needs text embeddings")
    at.switch_page("pages/2_train.py").run()
    at.selectbox(key="train_encoder").select("pixels").run()
    at.selectbox(key="train_method").select(text_methods[0]).run()
    _launch_button(at).click().run()
    errs = [e.value for e in at.error]
    assert any(e.startswith("**method**") and "text tower" in e for e in errs), errs


def test_train_labels_options_that_look_at_private_data(at):
    from mixdp_core.app_support.forms import method_field_specs

    at.switch_page("pages/2_train.py").run()
    leaky_all = [s for s in method_field_specs("adamix") if s.leaks_private]
    assert sorted(s.name for s in leaky_all) == ["noise", "optimistic_tuning", "subspace_diagnostics"]
    noise = next(s for s in leaky_all if s.name == "noise")  # a choice: it costs privacy for one value
    assert noise.kind == "choice" and "'reproducible'" in noise.leak_condition and "NOT private" in noise.help
    leaky = [s for s in leaky_all if s.kind == "bool"]
    keys = {f"adv_adamix_{s.name}" for s in leaky}
    for key in keys:
        box = at.checkbox(key=key)
        assert "COSTS PRIVACY" in box.label and "private data" in box.label
        assert "Costs privacy" in box.help  # the field's declared privacy_note
        spec = next(s for s in leaky if f"adv_adamix_{s.name}" == key)
        assert spec.help in box.help
    others = [c for c in at.checkbox if c.key and c.key.startswith("adv_") and c.key not in keys]
    assert all("COSTS PRIVACY" not in c.label for c in others)


def test_train_labels_what_an_empty_optional_field_means(at):
    # guard_resolution=None is one release at σ, not an automatic choice: the label says so
    at.switch_page("pages/2_train.py").run()
    labels = {t.key: t.label for t in at.text_input if t.key and t.key.startswith("adv_adamix_")}
    assert labels["adv_adamix_guard_resolution"].endswith("(empty = one release at σ)")
    assert labels["adv_adamix_weight_decay"].endswith("(empty = auto)")


def test_train_page_reopens_a_stored_run_from_the_url(at):
    from mixdp_core.runs.runner import execute

    store = _store()
    rid = execute(small_config(target_epsilon=1.0), store=store)
    at.query_params["run"] = rid
    at.switch_page("pages/2_train.py").run()
    assert not at.exception, at.exception
    assert rid in page_text(at)
    assert {m.label for m in at.metric} >= {"test error", "attack AUC (owner only)"}


def test_train_page_shows_a_missing_run_id_from_a_link_as_inert_code(at):
    at.query_params["run"] = "[verify your account](http://evil.example/login)"
    at.switch_page("pages/2_train.py").run()
    assert not at.exception, at.exception
    warning = next(w.value for w in at.warning if "is not in the store" in w.value)
    assert "`[verify your account](http://evil.example/login)`" in warning  # a code span, not a link


# ------------------------------------------------------------------ Compare
def test_compare_runs_grid_reuses_stored_runs_and_names_best(at):
    at.switch_page("pages/2_train.py").run()
    at.selectbox(key="train_encoder").select("pixels").run()  # shared settings
    at.switch_page("pages/3_compare.py").run()
    assert not at.exception, at.exception
    # before anything runs, the page says what the default grid would add to the data set's spend
    assert any("Launching adds up to ε =" in c.value and "spent ε = 0" in c.value for c in at.caption)
    assert not at.warning  # δ = 1e-5 is far below 1/n on digits
    at.selectbox(key="cmp_delta").select(1e-3).run()  # 1e-3 > 1/n: the owner is warned, nothing refused
    assert any("is not below 1/n" in w.value and "δ ≤ 1e-04" in w.value for w in at.warning)
    at.selectbox(key="cmp_delta").select(1e-5).run()
    assert not at.warning
    at.multiselect(key="cmp_methods").set_value(["adamix"])
    at.multiselect(key="cmp_eps").set_value([1.0, 3.0]).run()
    # the count and the cost shown are the selection's now, before the launch (inside a form they
    # were the last submitted selection's: 10 runs shown, 30 launched)
    assert any("4 runs in this comparison" in c.value for c in at.caption)
    at.multiselect(key="cmp_seeds").set_value([0, 1]).run()
    assert any("8 runs in this comparison" in c.value for c in at.caption)
    at.multiselect(key="cmp_seeds").set_value([0]).run()
    at.button(key="cmp_launch").click().run()
    assert not at.exception, at.exception
    store = _store()
    runs = store.list_runs()
    assert sorted((r.method, r.status) for r in runs) == [
        ("adamix", "completed"), ("adamix", "completed"), ("only_public", "completed"), ("paragon", "completed")]
    text = page_text(at)
    # one seed, one private method: Only-Public (ε = 0) is the other candidate at every ε; no
    # winner claimed with one seed, one line per ε
    for eps in ("1", "3"):
        line = next(ln for ln in text.splitlines() if ln.startswith(f"- At ε = {eps}:"))
        assert "Only-Public" in line, line
        # one seed: the spread is unknown, or AdaMix's guard returned the public model (equal at this seed)
        assert "spread across seeds is unknown" in line or "equal at this seed" in line, line
        assert "no method is better here" not in line  # not claimed from one seed
    assert "best method" not in text
    # imbalance ratio 1: no minority class, so no minority chart (test error and attack AUC)
    assert len(at.main.get("plotly_chart")) == 2
    assert "no class is a minority" in text
    # every chart has its export (CSV, SVG, PNG)
    labels = [b.label for b in at.get("download_button")]
    assert labels.count("CSV") == labels.count("SVG") == labels.count("PNG") == 2, labels
    # the runs went through the sweep engine: one sweep, every run tagged with it
    import sqlite3

    with sqlite3.connect(store.db_path) as con:
        sweep_ids = {r[0] for r in con.execute("SELECT sweep_id FROM runs")}
        assert len(sweep_ids) == 1 and con.execute("SELECT n_runs FROM sweeps").fetchone()[0] == 4
    # the comparison is now addressable by URL
    q = at.query_params
    assert (q["methods"], q["epsilons"], q["seeds"], q["encoder"]) in (("adamix", "1,3", "0", "pixels"),
                                                                       (["adamix"], ["1,3"], ["0"], ["pixels"]))
    # launching again reuses every run (config hash) instead of training again
    at.button(key="cmp_launch").click().run()
    assert len(store.list_runs()) == 4
    assert "4 runs in this comparison, 4 already stored." in page_text(at)
    # a new session on the same link (a reload, a second browser, a socket that reconnected)
    # re-attaches to the newest job of that selection, so a running comparison's progress does
    # not vanish from the page; another selection attaches to none
    from streamlit.testing.v1 import AppTest

    from .helpers import APP, TIMEOUT

    jid = at.session_state["compare_job"]
    link = {k: (v[0] if isinstance(v, list) else v) for k, v in dict(at.query_params).items()}
    for methods, attached in (("adamix", jid), ("ngd", None)):
        t = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
        for k, v in {**link, "methods": methods}.items():
            t.query_params[k] = v
        t.switch_page("pages/3_compare.py").run()
        assert not t.exception, t.exception
        assert (t.session_state["compare_job"] if "compare_job" in t.session_state else None) == attached


def test_a_links_ignored_parameters_stay_on_screen_across_reruns(app_env):
    """The "Ignored invalid link parameter(s)" notice was drawn once; a rerun (following an earlier
    comparison's job) wiped it while the URL still held the bad values."""
    from streamlit.testing.v1 import AppTest

    from .helpers import APP, TIMEOUT

    t = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    for k, v in {"dataset": "features:/etc/passwd", "seeds": "99", "methods": "adamix"}.items():
        t.query_params[k] = v
    t.switch_page("pages/3_compare.py").run()
    for _ in range(2):
        assert any("Ignored invalid link parameter(s)" in w.value and "seeds = " in w.value for w in t.warning)
        t.run()


def test_compare_link_reopens_the_comparison_in_a_new_session(app_env):
    """A shared / reloaded URL pre-fills the form and shows the stored results, no click needed."""
    from streamlit.testing.v1 import AppTest

    from mixdp_core.runs.runner import RunConfig
    from mixdp_core.runs.sweep import run_sweep

    from .helpers import APP, TIMEOUT

    cfgs = [RunConfig(dataset="digits", encoder="pixels", method=m, seed=s, target_epsilon=e)
            for s in (0, 1) for m, e in (("paragon", 1.0), ("only_public", 1.0), ("ngd", 1.0), ("ngd", 3.0))]
    run_sweep(cfgs, store=_store(), workers=1)
    t = AppTest.from_file(APP, default_timeout=TIMEOUT).run()  # a new session
    for k, v in {"dataset": "digits", "encoder": "pixels", "methods": "ngd", "epsilons": "1,3", "seeds": "0,1",
                 "delta": "1e-05", "refs": "1", "ppc": "5", "ir": "1"}.items():
        t.query_params[k] = v
    t.switch_page("pages/3_compare.py").run()
    assert not t.exception, t.exception
    assert t.multiselect(key="cmp_methods").value == ["ngd"]
    assert t.multiselect(key="cmp_eps").value == [1.0, 3.0] and t.multiselect(key="cmp_seeds").value == [0, 1]
    text = page_text(t)
    assert "8 runs in this comparison, 8 already stored." in text
    assert len(t.main.get("plotly_chart")) == 2 and not t.warning  # ratio 1: no minority chart
    # one private method (ngd) at two seeds, against Only-Public (ε = 0): one line per ε
    for eps in ("1", "3"):
        line = next(ln for ln in text.splitlines() if ln.startswith(f"- At ε = {eps}:"))
        assert "Only-Public" in line and "NGD (mixed)" in line, line
    # an invalid parameter is dropped with a note, the rest still applies
    t2 = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    t2.query_params["methods"] = "nope"
    t2.query_params["seeds"] = "1"
    t2.switch_page("pages/3_compare.py").run()
    assert not t2.exception and t2.multiselect(key="cmp_seeds").value == [1]
    # the warning names the value and what is allowed, not just the key
    assert any("methods = `nope` (must be comma-separated private methods)" in w.value for w in t2.warning)


# ------------------------------------------------------------------ Privacy audit
def test_privacy_audit_draws_theory_vs_attack_pdp_and_delta_curve(at):
    from mixdp_core.runs.runner import execute

    rid = execute(small_config(), store=_store())
    at.switch_page("pages/4_audit.py").run()
    assert not at.exception, at.exception
    assert at.selectbox(key="audit_run").value == rid
    import json

    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.main.get("plotly_chart")]
    assert titles == ["What the guarantee allows vs what the attacks achieve", "Per-instance ε, sorted",
                      "Histogram of per-instance ε", "Privacy curve δ(ε) of this run"]
    labels = [b.label for b in at.get("download_button")]  # every chart exports CSV, SVG and PNG
    assert labels.count("CSV") == labels.count("SVG") == labels.count("PNG") == 4, labels
    text = page_text(at)
    assert "no attacker can identify more than" in text
    assert "not a released guarantee" in text


def test_privacy_audit_runs_a_whitebox_audit_stores_and_reopens_it(at):
    from mixdp_core.runs.runner import execute

    rid = execute(small_config(method="fully_private", target_epsilon=4.0), store=_store())
    at.switch_page("pages/4_audit.py").run()
    at.selectbox(key="audit_attack").set_value("canary-whitebox")
    # out of range: a line naming the field, nothing trained (the widget's bounds did nothing, silently)
    at.number_input(key="audit_trials").set_value(99_999_999)
    at.button(key="FormSubmitter:audit_form-Run audit").click().run()
    assert any("trials" in e.value and "[4, 20000]" in e.value for e in at.error)
    from mixdp_core.runs.audits import AuditStore as _AS

    assert _AS(_store()).list(run_id=rid) == []
    at.number_input(key="audit_trials").set_value(400)
    at.number_input(key="audit_canaries").set_value(400)
    at.button(key="FormSubmitter:audit_form-Run audit").click().run()
    assert not at.exception, at.exception
    from mixdp_core.runs.audits import AuditStore

    (a,) = AuditStore(_store()).list(run_id=rid)
    assert a.summary["alarm"] is False and 0 <= a.summary["empirical_epsilon_lower"] <= a.summary["claimed_epsilon"]
    import json

    spec = json.loads(at.main.get("plotly_chart")[0].proto.spec)
    names = [d.get("name", "") for d in spec["data"]]
    assert any("Dirac canary" in n for n in names) and any("best possible attack" in n for n in names)
    assert "Audits of this run" in page_text(at)
    # reopening the page shows the stored audit without re-running it
    at.switch_page("pages/4_audit.py").run()
    assert "Audits of this run" in page_text(at)
    # an audit run from the CLI on the same config is listed too
    from mixdp_core.cli import main

    assert main(["audit", "--method", "fully_private", "--epsilon", "4", "--attack", "loss", "--json",
                 "--no-progress"]) == 0
    at.switch_page("pages/4_audit.py").run()
    assert len(AuditStore(_store()).list()) == 2
    assert "Loss threshold, class-matched" in list(at.dataframe[0].value["attack"])
    # a method without white-box access is refused with the reason
    rid2 = execute(small_config(method="dp_ls"), store=_store())
    at.switch_page("pages/4_audit.py").run()
    at.selectbox(key="audit_run").set_value(rid2).run()
    at.selectbox(key="audit_attack").set_value("canary-whitebox")
    at.button(key="FormSubmitter:audit_form-Run audit").click().run()
    assert "neither a NoisyGD-family method" in page_text(at)


def test_privacy_audit_keeps_its_run_in_the_session_and_the_url(at):
    """Opened from a ?run= link, the page never stored the run in the session: after a visit
    to another page (the URL loses ?run=) it showed the newest run, and a running audit of
    the linked one vanished from it; a run picked in the selector left the URL bare on return."""
    from mixdp_core.runs.runner import execute

    older = execute(small_config(method="fully_private", target_epsilon=4.0), store=_store())
    execute(small_config(method="only_public"), store=_store())  # the newest
    at.query_params["run"] = older
    at.switch_page("pages/4_audit.py").run()
    assert not at.exception, at.exception
    assert at.selectbox(key="audit_run").value == older and at.session_state["selected_run"] == older
    at.query_params.pop("run")  # another page and back: the URL lost ?run=
    at.switch_page("pages/4_audit.py").run()
    assert at.selectbox(key="audit_run").value == older and at.query_params["run"] in (older, [older])


def test_privacy_audit_without_runs_says_what_to_do(at):
    at.switch_page("pages/4_audit.py").run()
    assert not at.exception, at.exception
    assert "No finished run yet" in page_text(at)


# ------------------------------------------------------------------ Runs
def _failed_and_cancelled(store):
    from mixdp_core.app_support.jobs import JobManager

    # a cancelled run: cancel after 3 step records through the manager (history kept; the first
    # record is the class histogram, worth several releases)
    seen = []

    def stop_at_3(job, rec):
        seen.append(rec.step)
        if len(seen) == 3:
            mgr.cancel(job.job_id)

    mgr = JobManager(store.root, sync=True, on_record=stop_at_3)
    job = mgr.submit_run(small_config(target_epsilon=2.0))
    cancelled = job.run_ids[0]
    # a failed run: an unknown dataset file fails while loading features
    from mixdp_core.data import data_root

    # a feature file inside the root, readable, but without its labels: the run row exists, then
    # loading fails (a missing file is refused before any row)
    import numpy as np

    bad = data_root() / "no_labels.npz"
    bad.parent.mkdir(parents=True, exist_ok=True)
    np.savez(bad, X_train=np.zeros((4, 3), np.float32))
    cfg = small_config(dataset=f"features:{bad}")
    job2 = mgr.submit_run(cfg)
    return cancelled, job2.run_ids[0], job2


def test_the_paragons_error_beside_its_references_is_the_owners_view(at):
    """The public view hid the paragon's cards but said "Beside this run (7.1 % test error) …
    63.9 points better than using no private data" under them, unlabelled."""
    from mixdp_core.runs.runner import execute

    store = _store()
    execute(small_config(method="only_public"), store=store)
    par = execute(small_config(method="paragon"), store=store)
    at.switch_page("pages/5_runs.py").run()
    at.selectbox(key="runs_pick").set_value(par).run()
    assert not at.exception, at.exception
    assert not any("Beside this run" in m.value for m in at.markdown)
    at.toggle(key="runs_owner").set_value(True).run()
    (line,) = [m.value for m in at.markdown if "Beside this run" in m.value]
    assert "Only-Public" in line and line.endswith("*(Owner's view, not private.)*")


def test_runs_page_lists_statuses_filters_exports_and_deletes(at):
    from mixdp_core.runs.runner import execute

    store = _store()
    ok = execute(small_config(), store=store)
    cancelled, failed, _ = _failed_and_cancelled(store)
    at.switch_page("pages/5_runs.py").run()
    assert not at.exception, at.exception
    df = at.dataframe[0].value
    assert set(df["run_id"]) == {ok, cancelled, failed}
    statuses = dict(zip(df["run_id"], df["status"]))
    assert "completed" in statuses[ok] and "cancelled" in statuses[cancelled] and "failed" in statuses[failed]
    assert len(at.get("download_button")) == 2
    assert "test error (%)" in df.columns and df.set_index("run_id").loc[ok, "test error (%)"] > 1  # in %
    # the completed run's details: owner-only diagnostics only with the owner switch on
    from mixdp_core.app_support import charts

    at.selectbox(key="runs_pick").set_value(ok).run()
    assert charts.OWNER_AUC_LABEL not in [m.label for m in at.metric]
    assert not any("exact count" in c.value for c in at.caption)
    assert any("95 % interval" in c.value for c in at.caption)
    # a private run's duration grows with its private rows: owner-only in the table and the card
    # (a review found both shown with the switch off)
    assert df.set_index("run_id").loc[ok, "duration (s)"] is None or df.set_index("run_id")["duration (s)"].isna()[ok]
    assert not any(" s fit" in c.value for c in at.caption)
    at.toggle(key="runs_owner").set_value(True).run()
    assert charts.OWNER_AUC_LABEL in [m.label for m in at.metric]
    assert any("exact count" in c.value for c in at.caption)
    assert any("s fit (owner's view, not private)" in c.value for c in at.caption)
    assert at.dataframe[0].value.set_index("run_id").loc[ok, "duration (s)"] >= 0
    at.toggle(key="runs_owner").set_value(False).run()
    # failed run: error and history shown
    at.selectbox(key="runs_pick").set_value(failed).run()
    assert any("Run failed" in e.value and "features" in e.value for e in at.error)
    # cancelled run: warning + its history (3 records) + metrics of the steps executed
    at.selectbox(key="runs_pick").set_value(cancelled).run()
    assert any("cancelled" in w.value for w in at.warning)
    # filter by status
    at.multiselect(key="runs_status").set_value(["failed"]).run()
    assert list(at.dataframe[0].value["run_id"]) == [failed]
    at.multiselect(key="runs_status").set_value(["running", "completed", "failed", "cancelled"]).run()
    # delete needs the confirmation tick
    at.selectbox(key="runs_pick").set_value(failed).run()
    assert at.button(key="runs_delete").disabled
    at.checkbox(key="runs_confirm").check().run()
    at.button(key="runs_delete").click().run()
    assert failed not in {r.run_id for r in store.list_runs()}


def test_runs_page_says_when_a_link_names_a_missing_run(at):
    """A link to a deleted or unknown run showed the newest run with no word (the URL still
    named the other id); the audit page already warned."""
    from mixdp_core.runs.runner import execute

    ok = execute(small_config(), store=_store())
    at.query_params["run"] = "20991231-000000-deadbeef"
    at.switch_page("pages/5_runs.py").run()
    assert not at.exception, at.exception
    assert any("20991231-000000-deadbeef" in w.value and "not in this store" in w.value for w in at.warning)
    assert at.selectbox(key="runs_pick").value == ok


def test_runs_page_reopens_a_run_in_train_and_audit(at):
    from mixdp_core.runs.runner import execute

    rid = execute(small_config(), store=_store())
    at.switch_page("pages/5_runs.py").run()
    at.button(key="runs_open_audit").click().run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Privacy audit"
    assert at.selectbox(key="audit_run").value == rid
    at.switch_page("pages/5_runs.py").run()
    at.button(key="runs_open_train").click().run()
    assert at.title[0].value == "Train"
    assert rid in page_text(at)


def test_cancelled_run_keeps_history_and_reports_privacy_of_steps_run(app_env):
    from mixdp_core.accounting import ComposedGaussian, epsilon

    store = _store()
    cancelled, _, _ = _failed_and_cancelled(store)
    rec = store.get_run(cancelled)
    steps = store.steps(cancelled)
    assert rec.status == "cancelled"
    assert 3 <= len(steps) < steps[0]["total_steps"]
    # ε reported for the steps actually executed, checked against the accountant directly
    n = rec.metrics["steps"]  # releases executed: the histogram's share, then one per record
    assert n == steps[-1]["step"] == steps[0]["step"] + len(steps) - 1
    expected = epsilon(ComposedGaussian(rec.metrics["noise_multiplier"], n), delta=rec.metrics["delta"])
    assert rec.metrics["epsilon"] == pytest.approx(expected, rel=1e-6)
    assert rec.metrics["epsilon"] < 2.0


def test_app_start_marks_dead_runs_failed(app_env):
    """A run left 'running' by a dead server is marked failed when the app starts."""
    from streamlit.testing.v1 import AppTest

    from .helpers import APP, TIMEOUT

    store = _store()
    cfg = small_config()
    rid = store.create_run(cfg.to_dict(), config_hash=cfg.config_hash())
    store.append_steps(rid, [{"step": 1, "total_steps": 10, "epsilon_spent": 0.1}])
    with sqlite3.connect(store.db_path) as con:  # pretend its writer process died
        con.execute("UPDATE runs SET pid=?, pid_token=? WHERE run_id=?", (2**22 + 12345, "x", rid))
    t = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not t.exception, t.exception
    rec = store.get_run(rid)
    assert rec.status == "failed" and "interrupted" in rec.error
    assert len(store.steps(rid)) == 1  # history kept
    assert "interrupted by a previous server stop" in page_text(t)


def _npz_bytes(**over):
    import io

    import numpy as np

    rng = np.random.default_rng(0)
    arrs = dict(X_train=rng.normal(size=(40, 6)).astype(np.float16), y_train=np.arange(40) % 4,
                X_test=rng.normal(size=(12, 6)).astype(np.float16), y_test=np.arange(12) % 4)
    arrs.update(over)
    buf = io.BytesIO()
    np.savez(buf, **arrs)
    return buf.getvalue()


def test_data_page_upload_features_stores_a_valid_npz(at):
    at.switch_page("pages/1_data.py").run()
    at.radio(key="data_source").set_value("Upload features (.npz)").run()
    at.file_uploader(key="data_npz").upload("mine.npz", _npz_bytes()).run()
    assert not at.exception, at.exception
    ok = [s.value for s in at.success]
    assert any("Stored as `features:" in s for s in ok), ok
    stored = ok[0].split("`features:", 1)[1].split("`", 1)[0]
    from mixdp_core.features.cache import default_cache_dir

    assert stored.startswith(str(default_cache_dir()))  # inside the cache, nowhere else
    # coming back to the page keeps the uploaded data set (it opened on 'Registered dataset'
    # and saved digits over it on every visit)
    at.switch_page("pages/2_train.py").run()
    at.switch_page("pages/1_data.py").run()
    assert not at.exception, at.exception
    assert at.radio(key="data_source").value == "Upload features (.npz)"
    assert any(f"features:{stored}" in i.value and "Current settings" in i.value for i in at.info)


def test_data_page_upload_refuses_what_is_not_what_it_claims(at):
    import numpy as np

    at.switch_page("pages/1_data.py").run()
    at.radio(key="data_source").set_value("Upload features (.npz)").run()
    at.file_uploader(key="data_npz").upload("fake.npz", b"just text, not a zip archive").run()
    errs = [e.value for e in at.error]
    assert any("**upload**" in e and "not an .npz archive" in e for e in errs), errs
    bad = _npz_bytes(X_train=np.full((40, 6), np.nan, dtype=np.float32))
    at.file_uploader(key="data_npz").upload("nan.npz", bad).run()
    errs = [e.value for e in at.error]
    assert any("X_train" in e and "NaN" in e for e in errs), errs


def test_data_page_upload_zip_refuses_path_escape(at):
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("cat/../../evil.png", b"\x89PNG")
    at.switch_page("pages/1_data.py").run()
    at.radio(key="data_source").set_value("Upload images (.zip of class folders)").run()
    at.file_uploader(key="data_zip").upload("imgs.zip", buf.getvalue(), "application/zip").run()
    errs = [e.value for e in at.error]
    assert any("**upload**" in e and "outside the archive folder" in e for e in errs), errs


# ------------------------------------------------------------------ Classroom
def test_classroom_walks_five_steps_from_one_slider(at):
    import json

    from mixdp_core.app_support.classroom import LESSON_EPSILONS

    at.switch_page("pages/6_classroom.py").run()
    assert not at.exception, at.exception
    assert at.select_slider(key="class_eps").value == 1.0
    assert "Step 1 — The noise added" in page_text(at)
    # The background lesson cache fills in; wait for it (synchronously) so every step draws.
    from mixdp_core.app_support.classroom import LessonCache

    cache = next(v for v in __import__("gc").get_objects() if isinstance(v, LessonCache))
    cache._thread.join(timeout=300)
    assert cache.done and not cache.errors, cache.errors
    heads = {2: "The accuracy lost", 3: "The best possible attack", 4: "Each person's privacy loss",
             5: "What a few public samples change"}
    for k, head in heads.items():
        at.button(key="class_next").click().run()
        assert not at.exception, at.exception
        assert head in page_text(at), (k, page_text(at)[:500])
        specs = [json.loads(c.proto.spec) for c in at.main.get("plotly_chart")]
        assert specs, k
    # Step 5: one curve per method over the whole grid, fixed 0-100 % axis.
    names = {tr["name"] for tr in specs[0]["data"]}
    assert {"AdaMix", "Fully-Private"} <= names
    assert specs[0]["layout"]["xaxis"]["tickvals"] == list(LESSON_EPSILONS)
    # the browser's Back: the URL goes to step 4 and the page follows it (it wrote step 5 back)
    at.query_params["step"] = "4"
    at.run()
    assert at.session_state["class_step"].startswith("4") or "Each person's privacy loss" in page_text(at)
    assert at.query_params["step"] in ("4", ["4"])


def test_train_launches_sparse_finetune_with_its_auto_defaults(at):
    from mixdp_core.app_support import forms

    arch = next(s for s in forms.method_field_specs("sparse_finetune") if s.name == "arch")
    assert forms.parse_text_value(arch, "auto") == "auto"  # a value, not "empty"
    with pytest.raises(Exception):
        forms.parse_text_value(arch, "")
    at.switch_page("pages/2_train.py").run()
    at.selectbox(key="train_method").select("sparse_finetune").run()
    assert not at.exception, at.exception
    assert not next(b for b in at.button if "Launch" in b.label).disabled
    cfg, errors = forms.build_run_config(dict(dataset="digits", encoder="pixels", method="sparse_finetune",
                                              target_epsilon=3.0, method_params=forms.changed_params(
                                                  "sparse_finetune", {"arch": "auto", "device": "auto"})))
    assert errors == {} and cfg.method_params == {}


def test_train_disables_sparse_finetune_on_feature_only_data_with_the_reason(app_env):
    from streamlit.testing.v1 import AppTest

    from .helpers import APP, TIMEOUT

    t = AppTest.from_file(APP, default_timeout=TIMEOUT)
    t.session_state["data_settings"] = {"dataset": "features:/tmp/x.npz"}
    t.switch_page("pages/2_train.py").run()
    t.selectbox(key="train_method").select("sparse_finetune").run()
    assert not t.exception, t.exception
    assert "pre-extracted features only" in page_text(t)
    assert next(b for b in t.button if "Launch" in b.label).disabled


def test_a_running_run_has_its_cancel_button_in_the_page_body_on_train_and_runs(at):
    """While a run trains, Train (opened from its URL) and Runs show "Cancel run" outside the
    live fragment (a click inside the fragment would wait for its pushed redraws); the click
    asks the run to stop. The progress and live charts are drawn from the store."""
    store = _store()
    cfg = small_config().to_dict()
    rid = store.create_run(cfg, config_hash="running")  # this process: alive, so "running"
    store.append_steps(rid, [{"step": i, "total_steps": 500, "epsilon_spent": 0.01 * i, "clip_norm": 1.0,
                              "test_error": 0.3 if i % 5 == 0 else None} for i in range(1, 21)])
    at.query_params["run"] = rid
    at.switch_page("pages/2_train.py").run()
    assert not at.exception, at.exception
    assert "step 20 / 500" in at.get("progress")[0].proto.text
    assert not store.is_cancel_requested(rid)
    at.button(key="train-cancel").click().run()
    assert not at.exception, at.exception
    assert store.is_cancel_requested(rid)

    rid2 = store.create_run(cfg, config_hash="running-2")
    at.switch_page("pages/5_runs.py").run()
    at.selectbox(key="runs_pick").set_value(rid2).run()
    assert not at.exception, at.exception
    at.button(key="runs-cancel").click().run()
    assert store.is_cancel_requested(rid2) and not at.exception, at.exception


def test_out_of_range_split_numbers_are_named_with_their_range(at):
    """IR 0.5 or 0 public shots left a red box ('Press Enter to apply') and the last settings
    on screen: the field and its range are said, and nothing is saved."""
    from mixdp_core.app_support import forms

    at.switch_page("pages/1_data.py").run()
    at.number_input(key="data_ir").set_value(0.5).run()
    assert any("imbalance_ratio" in e.value and f"[1, {forms.MAX_FORM_IMBALANCE_RATIO:g}]" in e.value
               for e in at.error), [e.value for e in at.error]
    at.number_input(key="data_ir").set_value(1.0).run()
    at.number_input(key="data_ppc").set_value(0).run()
    assert any("public_per_class" in e.value and "got 0" in e.value for e in at.error)
    assert at.session_state["data_settings"]["public_per_class"] == 5


def test_invalid_split_settings_are_not_saved_and_block_launch(at, app_env):
    """300 public samples per class on digits (classes hold ~125): the Data page names the
    field and does not save it; a session that carries such settings gets Launch disabled on
    Train with the reason, and Compare refuses to run."""
    import json

    at.switch_page("pages/1_data.py").run()
    at.number_input(key="data_ppc").set_value(300).run()
    assert not at.exception, at.exception
    text = page_text(at)
    assert "public_per_class" in text and "not saved" in text
    assert at.session_state["data_settings"]["public_per_class"] == 5
    assert json.loads((app_env / "app_settings.json").read_text())["public_per_class"] == 5
    # settings that arrive invalid (an older session file, a typed URL) block Launch
    at.session_state["data_settings"] = dict(at.session_state["data_settings"], public_per_class=300)
    at.switch_page("pages/2_train.py").run()
    assert not at.exception, at.exception
    assert next(b for b in at.button if "Launch" in b.label).disabled
    assert "cannot be made on `digits`" in page_text(at)
    before = len(_store().list_runs())
    at.switch_page("pages/3_compare.py").run()
    assert at.button(key="cmp_launch").disabled  # the grid's error is shown and nothing can launch
    assert not at.exception, at.exception
    assert "public_per_class" in page_text(at) and len(_store().list_runs()) == before


def test_synthetic_regime_is_dialled_on_the_data_page_and_trained_from_train(at, app_env):
    """Many classes without a download: the Data page's synthetic options (100 classes here)
    reach the split preview, are saved with the settings, and a Train launch runs on them."""
    at.switch_page("pages/1_data.py").run()
    assert not at.selectbox(key="data_encoder").proto.disabled  # digits: its images need an encoder
    at.selectbox(key="data_dataset").select("synthetic").run()
    assert not at.exception, at.exception
    # the rows are the features: the encoder is shown as not used, not offered as a choice
    assert at.selectbox(key="data_encoder").proto.disabled
    assert "Not used: this dataset's rows are already features" in page_text(at)
    assert "features as given (no encoder)" in page_text(at) and "uses the raw pixel values" not in page_text(at)
    at.number_input(key="syn_classes").set_value(120).run()
    at.number_input(key="syn_dim").set_value(32).run()
    at.number_input(key="syn_train_per_class").set_value(12).run()
    at.number_input(key="data_ppc").set_value(2).run()
    assert not at.exception, at.exception
    s = at.session_state["data_settings"]
    assert s["dataset"] == "synthetic" and s["dataset_kwargs"]["classes"] == 120
    counts = _charts(at)["data_counts"]
    assert len(counts["data"][0]["x"]) == 120  # one bar per class: the options reached the preview
    # a shift without the public domain would change nothing: refused, naming the field, not saved
    at.number_input(key="syn_shift").set_value(1.5).run()
    assert not at.exception, at.exception
    assert "moves the public domain only" in page_text(at)
    assert float(at.session_state["data_settings"]["dataset_kwargs"].get("shift", 0.0)) == 0.0
    at.selectbox(key="data_public_from").select("synthetic").run()
    assert not at.exception, at.exception
    s = at.session_state["data_settings"]
    assert s["public_from"] == "synthetic" and s["dataset_kwargs"]["shift"] == 1.5
    # nothing to extract here: the split's counts wait for the button there is (it said "Extract")
    assert "Click *Load the rows now* above to see the per-class counts" in page_text(at)
    # "Load the rows now" loads the dialled data, both domains, each named (it loaded and reported
    # the loader's defaults, 2000 / 500 rows of dimension 64, twice under the same name)
    at.button(key="data_extract").click().run()
    assert not at.exception, at.exception
    text = page_text(at)
    assert text.count("1440 train") == 2 and "dimension 32" in text and "dimension 64" not in text, text
    assert "synthetic (public domain)" in text
    assert at.button(key="data_extract").label.startswith("Features ready")
    at.number_input(key="syn_dim").set_value(16).run()  # another dial: not ready any more
    assert not at.button(key="data_extract").label.startswith("Features ready")
    at.switch_page("pages/2_train.py").run()
    assert at.selectbox(key="train_encoder").proto.disabled  # no encoder runs on synthetic rows
    # fully_private: no public fit, whose leave-one-out ridge selection takes ~6 s at 120 classes
    # (what is checked here is that the dialled data reach the run)
    at.selectbox(key="train_method").select("fully_private").run()
    _launch_button(at).click().run()
    assert not at.exception, at.exception
    (r,) = _store().list_runs()
    assert r.config["dataset_kwargs"]["classes"] == 120 and r.metrics["n_classes"] == 120
    assert r.config["public_from"] == "synthetic" and r.config["dataset_kwargs"]["shift"] == 1.5
    at.switch_page("pages/5_runs.py").run()
    assert not at.exception, at.exception
    assert list(at.dataframe[0].value["encoder"]) == ["— (rows are features)"]  # no encoder ran


def test_classroom_runs_on_a_many_class_synthetic_regime(at):
    """The lesson's data can be the synthetic many-class regime: step 1 then compares the noise
    on each class average with the distance between classes (no images to draw), and the
    choice travels in the URL; a link with the former name still opens it."""
    import json

    at.switch_page("pages/6_classroom.py").run()
    at.radio(key="class_data").set_value("many classes (synthetic)").run()
    assert not at.exception, at.exception
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.main.get("plotly_chart")]
    assert any(t.startswith("How far the noise moves each class average") and t.endswith("(owner's view, not private)")
               for t in titles), titles
    text = page_text(at)
    assert "100 classes" in text and "apart" in text and "noisy count" in text.lower()
    assert at.query_params["data"] in ("many classes (synthetic)", ["many classes (synthetic)"])
    from mixdp_core.app_support.classroom import as_lesson

    assert as_lesson("100 classes (synthetic)").data == "many classes (synthetic)"  # links from before the rename


def test_classroom_dials_classes_rows_and_imbalance_and_shows_the_minority(at):
    """The teacher dials the synthetic lesson (classes, rows per class) and the private data's
    imbalance: the dials reach the data (step 1 counts the rows of the long-tailed private
    part), travel in the URL, and an imbalanced lesson reports balanced and minority-class
    accuracy where it reports the error (steps 2 and 5)."""
    import json

    from mixdp_core.app_support.classroom import LessonCache

    at.switch_page("pages/6_classroom.py").run()
    at.radio(key="class_data").set_value("many classes (synthetic)").run()
    at.slider(key="class_classes").set_value(20).run()
    at.slider(key="class_train_per_class").set_value(60).run()
    at.select_slider(key="class_ir").set_value(10).run()
    assert not at.exception, at.exception
    text = page_text(at)
    assert "20 classes, 60 training rows each" in text and "long-tailed" in text
    # 60 rows - 5 public = 55 private in the largest class, 55 / 10 -> 5 or 6 in the smallest
    assert "**55** for the largest" in text and ("has **5** rows" in text or "has **6** rows" in text), text
    assert {k: at.query_params[k] for k in ("classes", "train_per_class", "imbalance_ratio")} in (
        {"classes": "20", "train_per_class": "60", "imbalance_ratio": "10"},
        {"classes": ["20"], "train_per_class": ["60"], "imbalance_ratio": ["10"]})
    cache = next(v for v in __import__("gc").get_objects() if isinstance(v, LessonCache)
                 and v.lesson.classes == 20 and v.lesson.imbalance_ratio == 10)
    left = [v for v in __import__("gc").get_objects() if isinstance(v, LessonCache) and v is not cache
            and v.lesson.classes == 20]  # (20, 40, 1) and (20, 60, 1), passed on the way
    assert left and all(v._halt.is_set() for v in left)  # the lessons dialled past stop training
    cache._thread.join(timeout=300)
    assert cache.done and not cache.errors, cache.errors
    run = cache.get("adamix", 1.0)
    assert 0 <= run["minority_accuracy"] <= 1 and 0 <= run["balanced_accuracy"] <= 1
    titles, notes = [], []
    for _ in range(4):  # steps 2 to 5
        at.button(key="class_next").click().run()
        assert not at.exception, at.exception
        specs = [json.loads(c.proto.spec) for c in at.main.get("plotly_chart")]
        titles += [f["layout"]["title"]["text"] for f in specs]
        for f in specs:  # paragon has no ε: one dashed reference line, never a curve over the grid
            assert sum(t.get("name", "").startswith("Paragon") for t in f["data"]) <= 1, f["layout"]["title"]
        notes.append(page_text(at))
    assert any(t.startswith("Balanced accuracy vs ε") for t in titles), titles
    assert any(t.startswith("Balanced accuracy: no public data") for t in titles), titles
    assert "on the minority classes (the tail's last quarter)" in notes[0]  # step 2's words
    assert "Balanced accuracy **" in notes[-1]  # step 5's words


def test_runs_page_owner_switch_hides_the_per_instance_epsilon_chart(at):
    from mixdp_core.runs.runner import execute

    rid = execute(small_config(), store=_store())
    at.switch_page("pages/5_runs.py").run()
    at.selectbox(key="runs_pick").set_value(rid).run()
    keys = {c.key for c in at.main.get("plotly_chart")}
    assert "runs-pdp" not in keys and "runs-test_error" in keys
    at.toggle(key="runs_owner").set_value(True).run()
    assert "runs-pdp" in {c.key for c in at.main.get("plotly_chart")}


def test_the_data_page_reports_each_feature_job_under_its_data_sets_name(at):
    """With a public domain two feature jobs run; the page showed only the last one's counts,
    under no name (the private upload's line read digits' counts)."""
    from mixdp_core.app_support.resources import get_manager

    mgr = get_manager()
    a = mgr.submit_features("digits", "pixels")
    b = mgr.submit_features("synthetic", "pixels", dataset_kwargs={"classes": 3, "dim": 8, "train_per_class": 12,
                                                                   "test_per_class": 4})
    for j in (a, b):
        j.wait(timeout=120)
    at.session_state["feature_jobs"] = [("digits", a.job_id), ("synthetic", b.job_id)]
    at.switch_page("pages/1_data.py").run()
    assert not at.exception, at.exception
    ok = [s.value for s in at.success if "Features ready" in s.value]
    assert any(v.startswith("`digits`: Features ready: 1258 train") for v in ok), ok
    assert any(v.startswith("`synthetic`: Features ready") for v in ok), ok
