"""The Compare page's grid: expanded by SweepSpec (app_support.forms.compare_configs)."""

from __future__ import annotations

from mixdp_core.app_support import forms
from mixdp_core.runs.runner import RunConfig

SETTINGS = dict(dataset="digits", encoder="pixels", public_per_class=5, imbalance_ratio=1.0, public_from=None,
                dataset_kwargs={}, encoder_kwargs={})


def test_grid_is_the_sweep_expansion_with_references_at_a_canonical_epsilon():
    cfgs, errors = forms.compare_configs(SETTINGS, methods=["adamix", "ngd"], epsilons=[3.0, 1.0], seeds=[1, 0],
                                         delta=1e-5, references=["paragon", "only_public"])
    assert errors == {}
    got = {(c.method, c.seed, c.target_epsilon) for c in cfgs}
    want = {(m, s, 1.0) for m in ("paragon", "only_public") for s in (0, 1)}
    want |= {(m, s, e) for m in ("adamix", "ngd") for s in (0, 1) for e in (1.0, 3.0)}
    assert got == want and len(cfgs) == len(want)
    assert {c.method for c in cfgs[:4]} == {"paragon", "only_public"}  # references first (the boost finds them)
    # the same config (hash) as one built by hand: stored runs are reused across pages
    hand = RunConfig(dataset="digits", encoder="pixels", method="adamix", seed=0, target_epsilon=1.0)
    assert hand.config_hash() in {c.config_hash() for c in cfgs}


def test_grid_errors_name_the_field():
    assert forms.compare_configs(SETTINGS, methods=[], epsilons=[], seeds=[], delta=1e-5, references=[])[1].keys() \
        == {"methods", "epsilon", "seed"}
    cfgs, errors = forms.compare_configs(dict(SETTINGS, public_per_class=10_000), methods=["adamix"],
                                         epsilons=[1.0], seeds=[0], delta=1e-5, references=[])
    assert cfgs == [] and "public_per_class" in errors
    # a point no run can meet: refused before anything runs, named by its method
    cfgs, errors = forms.compare_configs(SETTINGS, methods=["adamix"], epsilons=[0.001], seeds=[0], delta=1e-5,
                                         references=[])
    assert cfgs == [] and any(v.startswith("adamix: ") for v in errors.values()), errors


def test_episode_request_bounds_name_the_field():
    req, errs = forms.episodes_request(SETTINGS, methods=["adamix"], epsilon=1.0, n_way=5, shots=[5, 20],
                                       episodes=10)
    assert errs == {} and req["params"]["shots"] == [5, 20] and req["params"]["methods"] == ["adamix"]
    _, errs = forms.episodes_request(SETTINGS, methods=[], epsilon=0.0, n_way=1, shots=[3], episodes=61)
    assert set(errs) == {"methods", "epsilon", "n_way", "shots", "episodes"}


def test_episodes_chart_and_table_from_rows():
    from mixdp_core.app_support import charts

    rows = [{"method": "adamix", "k_shot": 5, "mean": 0.8, "ci95": 0.05, "epsilon_spent_max": 0.99},
            {"method": "adamix", "k_shot": 20, "mean": 0.9, "ci95": 0.02, "epsilon_spent_max": 1.0},
            {"method": "dppl_public", "k_shot": 5, "error": "needs a public pool"}]
    fig = charts.episodes_figure(rows, n_way=5, epsilon=1.0)
    names = [t.name for t in fig.data]
    assert len(names) == 2 and "chance (1/5)" in names  # dppl_public had no result: no curve
    assert list(fig.data[0].error_y.array) == [0.05, 0.02] and fig.layout.yaxis.range == (0, 1.0)
    table = charts.episodes_table(rows)
    assert table[0]["5-shot accuracy (%)"] == "80.0 ± 5.0" and table[0]["ε spent per fit (max)"] == 1.0
    assert table[1]["5-shot accuracy (%)"] == "–" and "public pool" in table[1]["note"]
    # one episode (the library allows it): no interval, never "± 0.0" or "± nan"
    for ci in (None, float("nan")):
        one = charts.episodes_table([dict(rows[0], ci95=ci)])
        assert one[0]["5-shot accuracy (%)"] == "80.0 (—)"
    assert charts.episodes_figure(rows[2:], n_way=5, epsilon=1.0) is None
    # two methods with equal results: side by side around each shot count, not one under the other
    same = [dict(r, method=m) for m in ("only_public", "adamix") for r in rows[:2]]
    a, b = charts.episodes_figure(same, n_way=5, epsilon=1.0).data[:2]
    assert list(a.y) == list(b.y) and all(xa < xb for xa, xb in zip(a.x, b.x))
    assert list(a.customdata) == list(b.customdata) == [5, 20] and a.marker.symbol != b.marker.symbol


def test_compare_page_runs_episodes(at):
    from .helpers import page_text

    at.switch_page("pages/3_compare.py").run()
    at.radio(key="cmp_mode").set_value("few-shot episodes (N-way K-shot)").run()
    assert not at.exception, at.exception
    at.multiselect(key="ep_methods").set_value(["adamix", "only_public"])
    at.multiselect(key="ep_shots").set_value([5])
    at.number_input(key="ep_n").set_value(2)
    at.button(key="FormSubmitter:episodes_form-Run episodes").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    table = at.dataframe[0].value
    assert len(table) == 2
    assert all("±" in v for v in table["5-shot accuracy (%)"])
    assert "2 episodes per cell" in page_text(at)


def test_episodes_refuse_a_method_the_encoder_cannot_run():
    """sparse_finetune trains a network on images: offered on pixel features, it failed only after
    the job had run (a review)."""
    feats = dict(SETTINGS, encoder="efficientnet_lite0")
    _, errs = forms.episodes_request(feats, methods=["adamix", "sparse_finetune"], epsilon=1.0, n_way=5,
                                     shots=[5], episodes=2)
    assert set(errs) == {"methods"} and errs["methods"].startswith("sparse_finetune: trains a network on the images")
    assert forms.episodes_request(SETTINGS, methods=["sparse_finetune"], epsilon=1.0, n_way=5, shots=[5],
                                  episodes=2)[1] == {}  # on pixels it runs


def test_an_episodes_job_can_be_cancelled_and_found_again(app_env):
    """The job had no Cancel (nothing checked its event) and lived only in the launching
    session: a reload said "Choose methods…" while it ran on, holding one of the two workers."""
    import time

    from mixdp_core.app_support.jobs import CANCELLED, JobManager

    mgr = JobManager(app_env, max_workers=1)
    req, errs = forms.episodes_request(SETTINGS, methods=["adamix", "fully_private"], epsilon=1.0, n_way=5,
                                       shots=[5, 20], episodes=30)
    assert errs == {}
    job = mgr.submit_episodes(req)
    t0 = time.time()
    while job.progress.get("cells") is None and time.time() - t0 < 60:  # started its grid
        time.sleep(0.05)
    assert mgr.find_episodes(dict(req, params=None)) is job  # a reload finds it by its data
    assert mgr.cancel(job.job_id)
    assert job.wait(timeout=120) and job.state == CANCELLED and "result" not in job.progress
    assert job.progress.get("cells_done", 0) < job.progress["cells"]
    assert mgr.find_episodes(dict(req, dataset="synthetic")) is None
