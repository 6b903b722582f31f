"""The data-set privacy ledger (mixdp_core.runs.ledger): totals, references, caps, CLI.

Real runs go through the real runner on digits (pixels) into a temporary store; every total
is checked against an independent recomputation from the accounting module.
"""

from __future__ import annotations

import json
import math

import pytest

from mixdp_core import accounting as A
from mixdp_core.cli import main
from mixdp_core.errors import BudgetError, ConfigError
from mixdp_core.runs import COMPLETED, RunStore
from mixdp_core.runs import ledger as L
from mixdp_core.runs.runner import RunConfig, execute

SIGMA = 20.0


def _cfg(method, eps=1.0, seed=0, **kw):
    params = {"noise_multiplier": SIGMA} if method in ("adamix", "ngd", "fully_private") else {}
    return RunConfig(dataset="digits", encoder="pixels", method=method, seed=seed, target_epsilon=eps,
                     method_params=params, **kw)


@pytest.fixture(scope="module")
def filled(tmp_path_factory, digits_features):
    """A store with two private runs (AdaMix ε = 1, NGD ε = 0.5, other split seeds), the
    paragon and Only-Public on the same data set."""
    st = RunStore(tmp_path_factory.mktemp("ledger"))
    ids = {
        "adamix": execute(_cfg("adamix", 1.0, seed=0), store=st, features=digits_features),
        "ngd": execute(_cfg("ngd", 0.5, seed=1), store=st, features=digits_features),
        # a few private rows: the paragon fits in a second; the ledger reads only its record
        "paragon": execute(_cfg("paragon", private_per_class=10), store=st, features=digits_features),
        "only_public": execute(_cfg("only_public"), store=st, features=digits_features),
    }
    return st, ids


def _n_runs(st):
    return len(st.list_runs())


def test_ledger_totals_match_an_independent_recomputation(filled):
    st, ids = filled
    key = L.dataset_key("digits")
    s = L.dataset_ledger(st, key)
    m = {k: st.get_run(r).metrics for k, r in ids.items()}
    assert [r.run_id for r in s.runs] == [ids["adamix"], ids["ngd"]]
    # each run's stored event is the mechanism as executed: T full-batch Gaussian releases at σ
    for name, r in zip(("adamix", "ngd"), s.runs):
        assert A.event_from_dict(r.event) == A.ComposedGaussian(SIGMA, m[name]["steps"])
        assert r.epsilon == m[name]["epsilon"] and r.delta == 1e-5 and r.flags == ()
    e1, e2 = m["adamix"]["epsilon"], m["ngd"]["epsilon"]
    assert 0 < e1 <= 1.0 and 0 < e2 <= 0.5
    # basic composition: Σ ε_i at Σ δ_i
    assert s.epsilon_basic == pytest.approx(e1 + e2, rel=1e-12)
    assert s.delta_basic == pytest.approx(2e-5) and s.delta_total == pytest.approx(2e-5)
    # tight: μ² add up (one ComposedGaussian with T1 + T2 steps), at δ_total = Σ δ_i
    T = m["adamix"]["steps"] + m["ngd"]["steps"]
    expected = A.epsilon(A.ComposedGaussian(SIGMA, T), delta=2e-5)
    assert s.epsilon_tight == pytest.approx(expected, rel=1e-9)
    assert s.epsilon_tight == pytest.approx(A.gaussian_epsilon(math.sqrt(T) / SIGMA, delta=2e-5), rel=1e-9)
    assert s.accountant == "gdp" and s.epsilon_tight < s.epsilon_basic and s.n_basic_only == 0
    # another δ_total: the tight total moves with it, the basic one does not
    s4 = L.dataset_ledger(st, key, delta_total=1e-4)
    assert s4.epsilon_tight == pytest.approx(A.epsilon(A.ComposedGaussian(SIGMA, T), delta=1e-4), rel=1e-9)
    assert s4.epsilon_basic == s.epsilon_basic
    with pytest.raises(ConfigError) as ei:
        L.dataset_ledger(st, key, delta_total=2.0)
    assert ei.value.field == "delta_total"


def test_references_are_flagged_and_left_out_of_the_totals(filled):
    st, ids = filled
    s = L.dataset_ledger(st, L.dataset_key("digits"))
    refs = {r.method: r for r in s.references}
    assert set(refs) == {"paragon", "only_public"}
    assert refs["paragon"].kind == L.KIND_OWNER_VIEW and refs["paragon"].epsilon is None
    assert any("owner's view, not private" in f for f in refs["paragon"].flags)
    assert refs["only_public"].kind == L.KIND_PUBLIC_ONLY and "cost 0" in refs["only_public"].flags[0]
    assert s.n_private == 2  # neither reference counts as a private run
    json.dumps(s.to_dict(), allow_nan=False)  # JSON-ready (no ∞ in the totals)
    # split seeds 0 and 1, and the paragon's 10 private rows per class: three splits, so rows public
    # in one (read without noise) are private in another; the totals say what they cover
    assert s.n_splits == 3 and "3 different public/private splits" in s.split_note
    assert s.to_dict()["n_splits"] == 3 and s.to_dict()["unbounded"] is False
    from mixdp_core.app_support.budget import budget_sentence
    from mixdp_core.cli.budget import render

    assert "3 different splits" in budget_sentence(s) and any(ln.strip().startswith("splits:") for ln in render(s))


def test_one_split_has_no_split_note(tmp_path):
    st = RunStore(tmp_path)
    _record(st, "ngd", eps=1.0)
    (s,) = L.dataset_ledgers(st)
    assert s.n_splits == 1 and s.split_note is None


def test_cap_refuses_a_run_before_anything_runs(filled, digits_features):
    st, ids = filled
    key = L.dataset_key("digits")
    spent = L.dataset_ledger(st, key).epsilon_basic
    L.set_cap(st, key, spent + 0.3, dataset="digits")
    try:
        before = _n_runs(st)
        seen = []
        with pytest.raises(BudgetError) as ei:
            execute(_cfg("adamix", 0.5, seed=5), store=st, features=digits_features, on_record=seen.append)
        e = ei.value
        assert e.field == "budget_cap" and len(str(e).splitlines()) == 1 and str(e).startswith("budget_cap:")
        assert f"{spent:.4g}" in str(e) and "0.5" in str(e) and f"{spent + 0.3:g}" in str(e)
        assert seen == [] and _n_runs(st) == before  # no step, no run row
        L.check_cap(st, _cfg("adamix", 0.25, seed=5))  # within the cap: accepted
        L.check_cap(st, _cfg("paragon"))  # references are not charged
        L.check_cap(st, _cfg("adamix", 1.0, seed=0), reuse=True)  # identical stored run: reused, costs nothing
        with pytest.raises(BudgetError):
            L.check_cap(st, _cfg("adamix", 1.0, seed=0))
        # a grid: its private runs add up (0.2 each, 0.4 > the 0.3 left)
        L.check_caps(st, [_cfg("adamix", 0.2, seed=7)])
        with pytest.raises(BudgetError, match="2 runs' target ε sum to 0.4"):
            L.check_caps(st, [_cfg("adamix", 0.2, seed=7), _cfg("ngd", 0.2, seed=8), _cfg("only_public")])
        # a run still running is charged at its target ε
        rid = st.create_run(_cfg("ngd", 0.2, seed=9).to_dict(), config_hash="x")
        try:
            assert [r.run_id for r in L.dataset_ledger(st, key).running] == [rid]
            with pytest.raises(BudgetError, match="running"):
                L.check_cap(st, _cfg("adamix", 0.2, seed=7))
        finally:
            st.delete_run(rid, force=True)
            # the deleted row stays charged through its tombstone: this row was never a run, so
            # the shared store is put back as it was for the other tests
            from mixdp_core.runs.store import DELETED_PREFIX

            for k in st.meta_items(DELETED_PREFIX):
                st.set_meta(k, None)
        # a δ cap
        L.set_cap(st, key, 100.0, 2.5e-5, dataset="digits")
        with pytest.raises(BudgetError, match="δ"):
            L.check_cap(st, _cfg("adamix", 0.25, seed=5))
    finally:
        assert L.clear_cap(st, key)
    L.check_cap(st, _cfg("adamix", 5.0, seed=5))  # no cap: anything goes
    assert not L.clear_cap(st, key)


def test_cli_budget_lists_sets_and_enforces_the_cap(filled, capsys, tmp_path, monkeypatch):
    st, ids = filled
    monkeypatch.setenv("MIXDP_CACHE", str(tmp_path / "cache"))
    s = L.dataset_ledger(st, L.dataset_key("digits"))
    assert main(["budget", "--store", str(st.root), "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(rows) == 1 and rows[0]["dataset"] == "digits" and rows[0]["n_private_runs"] == 2
    assert rows[0]["epsilon_basic"] == pytest.approx(s.epsilon_basic)
    assert rows[0]["epsilon_tight"] == pytest.approx(s.epsilon_tight) and rows[0]["cap"] is None
    try:
        assert main(["budget", "--store", str(st.root), "--dataset", "digits", "--cap", f"{s.epsilon_basic + 0.1}"]) == 0
        out = capsys.readouterr().out
        assert "spent (basic)" in out and "spent (tight)" in out and "owner's view, not private" in out
        assert L.get_cap(st, s.dataset_key).epsilon == pytest.approx(s.epsilon_basic + 0.1)
        before = _n_runs(st)
        rc = main(["train", "--store", str(st.root), "--method", "adamix", "--epsilon", "0.5",
                   "--noise-multiplier", "20", "--no-progress", "--json"])
        out, err = capsys.readouterr()
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and "budget_cap" in err
        assert _n_runs(st) == before
        # a sweep is checked as a whole: two runs that each fit, but not together
        rc = main(["sweep", "--store", str(st.root), "--methods", "adamix,paragon", "--epsilons", "0.05,0.06",
                   "--param", "noise_multiplier=200", "--workers", "1", "--no-progress"])
        err = capsys.readouterr().err
        assert rc == 2 and "budget_cap" in err and "sum to 0.11" in err and _n_runs(st) == before
    finally:
        assert main(["budget", "--store", str(st.root), "--dataset", "digits", "--clear-cap"]) == 0
    assert L.get_cap(st, s.dataset_key) is None
    capsys.readouterr()
    for argv, field in ((["--cap", "2"], "dataset"), (["--dataset", "digits", "--cap", "-1"], "budget_cap"),
                        (["--dataset", "digits", "--cap", "1", "--delta", "3"], "budget_cap_delta"),
                        (["--dataset", "digits", "--delta", "1e-5"], "delta"),
                        (["--dataset", "digitz", "--cap", "1"], "dataset")):
        assert main(["budget", "--store", str(st.root), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"error: {field}:" in err, err


# --------------------------------------------------------------------------- stored records
def _record(st, method, *, eps, delta=1e-5, event=None, mechanism="m", status=COMPLETED, **extra):
    cfg = {"dataset": "synthetic", "encoder": "pixels", "method": method, "seed": 0, "target_epsilon": eps,
           "target_delta": delta, "dataset_kwargs": {"classes": 4}}
    rid = st.create_run(cfg, config_hash=f"h-{method}-{eps}")
    privacy = {"epsilon": eps, "delta": delta, "mechanism": mechanism,
               "event": A.event_to_dict(event) if event is not None else None}
    st.finish(rid, status, metrics={"private": True, "epsilon": eps, "delta": delta, "privacy": privacy, **extra})
    return rid


def test_old_runs_adaptive_parts_and_replace_one(tmp_path):
    st = RunStore(tmp_path)
    g = A.ComposedGaussian(10.0, 30)
    ad = A.AdaptiveComposition(A.PureDP(0.1), A.PoissonSubsampledGaussian(10.0, 1.0, 20))  # q = 1: exact GDP
    e_g, e_ad = A.epsilon(g, delta=1e-5), A.epsilon(ad, delta=1e-5)
    _record(st, "ngd", eps=e_g, event=g)
    _record(st, "dp_sgd", eps=e_ad, event=ad)
    _record(st, "adamix", eps=0.7)  # an old run: no stored event
    _record(st, "dppl_mean", eps=0.4, event=A.ZCDP(0.01), mechanism="zCDP [neighbouring: replace-one (...)]")
    _record(st, "ngd", eps=9.0, event=g, status="failed")  # failed: released nothing, not counted
    _record(st, "ngd", eps=0.3, event=g, noise="reproducible")
    s = L.dataset_ledger(st, L.dataset_key("synthetic", dataset_kwargs={"classes": 4.0}))
    assert s.n_private == 5 and s.n_basic_only == 2
    flags = {r.method: r.flags for r in s.runs}
    assert L.FLAG_NO_EVENT in flags["adamix"] and L.FLAG_REPLACE_ONE in flags["dppl_mean"]
    assert any("reproducible" in f for r in s.runs for f in r.flags)
    assert s.epsilon_basic == pytest.approx(e_g + e_ad + 0.7 + 0.4 + 0.3)
    assert s.delta_basic == pytest.approx(5e-5)
    # tight: the basic-only runs keep their own (ε, δ); the events share the rest of δ_total;
    # the adaptive run's pure ε adds; its Gaussian part composes with the others (μ² add up)
    mu2 = 30 / 100 + 20 / 100 + 30 / 100
    expected = 0.1 + A.gaussian_epsilon(math.sqrt(mu2), delta=3e-5) + 0.7 + 0.4
    assert s.epsilon_tight == pytest.approx(expected, rel=1e-9)
    assert s.epsilon_tight < s.epsilon_basic
    with pytest.raises(ConfigError) as ei:  # no δ left for the events
        L.dataset_ledger(st, s.dataset_key, delta_total=2e-5)
    assert ei.value.field == "delta_total"


def test_tight_is_never_reported_above_basic(tmp_path):
    """One DP-SGD run reported with a tighter accountant than the default one (PLD vs RDP):
    the basic total, also valid at that δ, is reported instead of the looser composition."""
    st = RunStore(tmp_path)
    ev = A.PoissonSubsampledGaussian(1.0, 0.01, 1000)
    eps_pld = A.epsilon(ev, delta=1e-5, accountant="pld")
    assert eps_pld < A.epsilon(ev, delta=1e-5)
    _record(st, "dp_sgd", eps=eps_pld, event=ev)
    s = L.dataset_ledger(st, L.dataset_key("synthetic", dataset_kwargs={"classes": 4}))
    assert s.epsilon_tight == pytest.approx(eps_pld) and s.accountant == "basic"


def test_dataset_identity(tmp_path, monkeypatch):
    k = L.dataset_key
    # partition and subset options, the encoder: the same people
    assert k("digits") == k("digits", dataset_kwargs={"test_fraction": 0.2, "split_seed": 3})
    assert L.config_dataset_key(_cfg("adamix")) == L.config_dataset_key(
        RunConfig(dataset="digits", encoder="efficientnet_lite0", method="paragon", seed=4))
    # content options count, with the loader's defaults filled in
    assert k("synthetic") == k("synthetic", dataset_kwargs={"classes": 10, "dim": 64.0})
    assert k("synthetic") != k("synthetic", dataset_kwargs={"classes": 12})
    assert k("synthetic") != k("synthetic", dataset_kwargs={"data_seed": 1})
    assert k("digits") != k("synthetic")
    # folders by real path, whatever the working directory or the subset read
    (tmp_path / "imgs").mkdir()
    monkeypatch.chdir(tmp_path)
    assert k("image_folder:imgs") == k(f"image_folder:{tmp_path / 'imgs'}") == k(
        "image_folder", dataset_root=str(tmp_path / "imgs"), dataset_kwargs={"max_per_class": 5})
    assert k("image_folder:imgs") != k(f"image_folder:{tmp_path}")
    # a root a loader ignores, or another copy of a named set, does not open a second ledger
    assert k("digits", dataset_root=str(tmp_path)) == k("digits")
    assert k("cifar10", dataset_root=str(tmp_path / "imgs")) == k("cifar10") == k("cifar10:/elsewhere")
    assert k("digits").startswith("digits-")
    # a CD-FSL target given a folder is that image folder (one budget, whichever name reads it);
    # at its fixed place under the data root too (a review spent a second budget under the same
    # cap through image_folder:<that folder>)
    assert k(f"cdfsl_eurosat:{tmp_path / 'imgs'}") == k("image_folder:imgs") == k(
        "cdfsl_isic", dataset_root=str(tmp_path / "imgs"))
    assert k("cdfsl_eurosat") != k("cdfsl_isic") and k("cdfsl_eurosat") != k("image_folder:imgs")
    # at its fixed place it keeps its name's key: a key from the data root moved with
    # $MIXDP_DATA_ROOT and a cap stopped applying (a review); the same folder under image_folder
    # is refused at launch instead (test_a_cdfsl_set_at_its_place_and_its_folder_share_a_cap)
    assert k("cdfsl_eurosat").startswith("cdfsl_eurosat-")


def test_a_config_file_cap_sets_or_lowers_never_raises(tmp_path):
    st = RunStore(tmp_path / "s")
    key = L.dataset_key("digits")
    assert "set" in L.apply_config_cap(st, key, 8.0, dataset="digits")
    assert L.get_cap(st, key).epsilon == 8.0
    assert "kept" in L.apply_config_cap(st, key, 12.0)  # a file never loosens the owner's cap
    assert L.get_cap(st, key).epsilon == 8.0
    assert "lowered" in L.apply_config_cap(st, key, 5.0, 1e-6)
    cap = L.get_cap(st, key)
    assert (cap.epsilon, cap.delta) == (5.0, 1e-6)
    L.apply_config_cap(st, key, 6.0, 1e-7)  # δ lowered, ε kept
    cap = L.get_cap(st, key)
    assert (cap.epsilon, cap.delta) == (5.0, 1e-7)
    with pytest.raises(ConfigError, match="budget_cap"):
        L.apply_config_cap(st, key, -1.0)


def test_sweep_file_cap_is_applied_before_the_grid_and_refuses_it(tmp_path, capsys):
    from mixdp_core.runs.sweep import SweepSpec

    toml = tmp_path / "grid.toml"
    toml.write_text('dataset = "digits"\nmethods = ["adamix"]\nepsilons = [1.0]\nbudget_cap = 0.5\n'
                    'params = {noise_multiplier = 20}\n')
    spec = SweepSpec.from_toml(toml)
    assert spec.budget_cap == 0.5 and "budget_cap" in spec.to_dict()
    assert "budget_cap" not in SweepSpec(dataset="digits").to_dict()  # unset: the stored spec is unchanged
    with pytest.raises(ConfigError, match="budget_cap"):
        SweepSpec(dataset="digits", budget_cap=0.0)
    with pytest.raises(ConfigError, match="budget_cap_delta"):
        SweepSpec(dataset="digits", budget_cap_delta=1e-6)
    st = RunStore(tmp_path / "s")
    rc = main(["sweep", "--store", str(st.root), "--config", str(toml), "--workers", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "cap set from the configuration file: ε = 0.5" in err and "budget_cap" in err
    assert L.get_cap(st, L.dataset_key("digits")).epsilon == 0.5 and st.list_runs() == []


def test_a_failed_run_that_wrote_step_records_is_charged(tmp_path, digits_features, monkeypatch):
    """A private run that fails after its steps were stored has released them (test error per
    step, noisy counts): the ledger charges it at max(target ε, the largest ε its records state);
    a failed run without a record is not charged."""
    import mixdp_core.evaluation.report as report

    st = RunStore(tmp_path)

    def boom(*a, **k):
        raise RuntimeError("evaluation failed")

    monkeypatch.setattr(report, "evaluate", boom)  # fails after the fit: its steps are in the store
    with pytest.raises(RuntimeError):
        execute(_cfg("ngd", 0.5), store=st, features=digits_features)
    rec = st.list_runs()[0]
    assert rec.status == "failed" and rec.metrics["n_step_records"] > 0
    steps_eps = max(s["epsilon_spent"] for s in st.steps(rec.run_id))
    assert rec.metrics["epsilon_released"] == pytest.approx(steps_eps) and 0 < steps_eps <= 0.5
    s = L.dataset_ledger(st, L.dataset_key("digits"))
    assert [r.run_id for r in s.runs] == [rec.run_id]
    assert s.runs[0].epsilon == pytest.approx(0.5) and L.FLAG_FAILED in s.runs[0].flags
    assert s.epsilon_basic == pytest.approx(0.5) and s.epsilon_tight == pytest.approx(0.5)
    # a record stating more than the target (a run that broke its plan) is charged that
    _record(st, "ngd", eps=1.0, status="failed", n_step_records=3, epsilon_released=1.7)
    _record(st, "ngd", eps=2.0, status="failed", n_step_records=0)  # released nothing
    s2 = L.dataset_ledger(st, L.dataset_key("synthetic", dataset_kwargs={"classes": 4.0}))
    assert [r.epsilon for r in s2.runs] == [pytest.approx(1.7)]
    # the cap counts it
    L.set_cap(st, L.dataset_key("digits"), 0.8)
    with pytest.raises(BudgetError):
        L.check_cap(st, _cfg("ngd", 0.5, seed=3))


def test_a_run_that_treated_the_exact_count_as_public_is_flagged(tmp_path):
    st = RunStore(tmp_path)
    _record(st, "dp_linear_probe", eps=1.0, mechanism="PLD [N_private treated as public: q and T ...]")
    _record(st, "dp_linear_probe", eps=1.0, seed_note=1)
    s = L.dataset_ledger(st, L.dataset_key("synthetic", dataset_kwargs={"classes": 4.0}))
    flagged = [r for r in s.runs if L.FLAG_EXACT_COUNT in r.flags]
    assert len(s.runs) == 2 and len(flagged) == 1



def test_a_killed_run_with_stored_steps_is_charged_from_its_records(tmp_path):
    """A process killed mid-run (SIGKILL, OOM) leaves its row 'running' with no metrics; the
    next store open marks it failed. Its stored step records still count."""
    st = RunStore(tmp_path)
    cfg = {"dataset": "synthetic", "encoder": "pixels", "method": "ngd", "seed": 0, "target_epsilon": 1.0,
           "target_delta": 1e-5, "dataset_kwargs": {"classes": 4}}
    rid = st.create_run(cfg, config_hash="h-killed")
    st.append_steps(rid, [{"step": i, "total_steps": 9, "epsilon_spent": 0.2 * i} for i in range(1, 6)])
    st.finish(rid, "failed", error="died")  # what recovery writes: no metrics
    s = L.dataset_ledger(st, L.dataset_key("synthetic", dataset_kwargs={"classes": 4.0}))
    assert [r.run_id for r in s.runs] == [rid] and s.runs[0].epsilon == pytest.approx(1.0)
    assert L.FLAG_FAILED in s.runs[0].flags


def test_a_run_that_composes_several_fits_is_charged_their_total(tmp_path, digits_features):
    """optimistic_tuning reports the composition of one fit per grid value (above its target):
    the cap is checked against budget_multiple × target, before anything runs."""
    st = RunStore(tmp_path / "s")
    cfg = RunConfig(dataset="digits", encoder="pixels", method="fully_private", target_epsilon=1.0,
                    method_params={"optimistic_tuning": True})
    k = cfg.make_method().budget_multiple()
    assert k == 3 and L.planned_charge(cfg) == pytest.approx((3.0, 3e-5))
    assert L.planned_charge(cfg.to_dict()) == pytest.approx((3.0, 3e-5))  # a stored running run's config
    assert L.planned_charge(_cfg("adamix", 1.0)) == pytest.approx((1.0, 1e-5))
    L.set_cap(st, L.dataset_key("digits"), 1.5)
    with pytest.raises(BudgetError, match="charge ε = 3 .*composes several fits"):
        execute(cfg, store=st, features=digits_features)
    assert _n_runs(st) == 0
    L.set_cap(st, L.dataset_key("digits"), 3.0)
    rid = execute(cfg, store=st, features=digits_features)
    spent = st.get_run(rid).metrics["epsilon"]
    assert 1.0 < spent <= 3.0  # what it reported lies within what the cap charged


def test_run_sweep_holds_every_caller_to_the_cap(tmp_path, digits_features):
    """The papers' figures run through run_sweep: it checks the grid before any feature is
    loaded or any row is written."""
    from mixdp_core.runs.sweep.driver import run_sweep

    st = RunStore(tmp_path / "s")
    L.set_cap(st, L.dataset_key("digits"), 1.0)
    grid = [_cfg("ngd", 0.5, seed=s) for s in range(3)]
    with pytest.raises(BudgetError, match="3 runs' target ε sum to 1.5"):
        run_sweep(grid, store=st, workers=1, cache_dir=tmp_path / "no-cache")
    assert _n_runs(st) == 0 and not (tmp_path / "no-cache").exists()
    assert st.meta_items(L.RESERVE_PREFIX) == {}


def test_a_reservation_holds_the_budget_until_its_runs_are_stored(tmp_path, digits_features, monkeypatch):
    """A launch still training (a sweep's runs have no row until they land) holds its charge:
    a second launch on the same store sees it; a stored run replaces it; a reservation left by
    a dead process is ignored; the block's exit removes it."""
    import json as _json

    st = RunStore(tmp_path / "s")
    key = L.dataset_key("digits")
    L.set_cap(st, key, 1.0)
    a, b = _cfg("ngd", 0.6, seed=0), _cfg("ngd", 0.6, seed=1)
    with L.reserve_budget(st, [a]) as res:
        (raw,) = st.meta_items(L.RESERVE_PREFIX).values()
        assert _json.loads(raw)["charges"][0]["epsilon"] == pytest.approx(0.6)
        s = L.dataset_ledger(st, key)
        assert s.epsilon_running == pytest.approx(0.6) and [r.status for r in s.running] == ["reserved"]
        with pytest.raises(BudgetError, match=r"0\.6 running"):
            L.check_cap(st, b)  # 0.6 reserved + 0.6 > 1
        with pytest.raises(BudgetError):
            with L.reserve_budget(st, [b]):
                pass
        # another launch of the same process (the app's jobs are threads) sees the reservation, even of
        # the same config: it is a second fit of it
        import threading

        seen = []
        t = threading.Thread(target=lambda: seen.append(_refused(lambda: L.check_cap(st, a))))
        t.start()
        t.join()
        assert seen == [True]
        rid = execute(a, store=st, features=digits_features)  # the launch's own run: not charged twice
        s = L.dataset_ledger(st, key)
        assert [r.status for r in s.running] == ["reserved"]  # another row of the config does not release it
        res.land(a.config_hash())  # the launch stored its run: the row counts it now
        s = L.dataset_ledger(st, key)
        assert s.running == () and s.epsilon_basic == pytest.approx(st.get_run(rid).metrics["epsilon"])
    assert st.meta_items(L.RESERVE_PREFIX) == {}
    # a reservation of a process that died is ignored
    st.set_meta(L.RESERVE_PREFIX + "dead", _json.dumps({"pid": 2 ** 22 + 12345, "token": None, "created_at": 0.0,
                                                        "charges": [{"key": key, "config_hash": "x", "method": "ngd",
                                                                     "epsilon": 5.0, "delta": 1e-5}]}))
    assert L.dataset_ledger(st, key).running == ()
    # another machine's reservation: its pid means nothing here; it counts until it ends, or a day
    import time as _time

    for age, counted in ((60.0, True), (L.REMOTE_RESERVATION_S + 60.0, False)):
        st.set_meta(L.RESERVE_PREFIX + "remote", _json.dumps({
            "pid": 2 ** 22 + 12345, "token": None, "host": "another-host", "created_at": _time.time() - age,
            "charges": [{"key": key, "config_hash": "y", "method": "ngd", "epsilon": 0.25, "delta": 1e-5}]}))
        assert (L.dataset_ledger(st, key).epsilon_running == pytest.approx(0.25)) is counted


def test_a_figures_fits_without_run_rows_are_charged(tmp_path):
    """The papers' figures that train on feature matrices write no run row: their private fits
    are checked against the cap before any starts and charged at their target when they end;
    non-private fits are not charged."""
    from mixdp_core.runs.figures.base import Context

    st = RunStore(tmp_path / "s")
    key = L.dataset_key("digits")
    ctx = Context(dataset="digits", store=st, workers=1)
    items = [("dppl_mean", 0.5), ("adamix", 0.25), ("only_public", 3.0)]
    out = ctx.trainings(_echo, items, {}, charge=lambda it: it)
    assert out == items
    s = L.dataset_ledger(st, key)
    assert s.epsilon_basic == pytest.approx(0.75) and s.delta_basic == pytest.approx(2e-5)
    assert sorted(r.method for r in s.runs) == ["adamix", "dppl_mean"] and all(L.FLAG_FIT in r.flags for r in s.runs)
    # the key `mixdp budget` lists for such a data set is one it accepts back (it was "unknown dataset")
    assert L.find_dataset(st, key) == key
    L.set_cap(st, key, 1.0)
    with pytest.raises(BudgetError, match="budget_cap"):
        ctx.trainings(_echo, items, {}, charge=lambda it: it)
    assert L.dataset_ledger(st, key).epsilon_basic == pytest.approx(0.75)  # refused: nothing charged
    assert ctx.trainings(_echo, items, {}, charge=None) == items  # a figure that declares it releases nothing


def _echo(item, shared):
    return item


def _interrupt_at_third(item, shared):
    if item[2] == 2:
        raise KeyboardInterrupt
    return item


def test_an_interrupted_figure_charges_the_fits_that_may_have_run(tmp_path):
    """Interrupted, a figure charged every fit it had planned (700 after 6 s; 1.4 M once, past
    any cap, with no way to remove them): it charges the fits the executor started (finished or
    not), not the ones it never began. Figures are bounded before anything is reserved."""
    from mixdp_core.errors import ConfigError
    from mixdp_core.runs.figures.base import Context

    st = RunStore(tmp_path / "s")
    key = L.dataset_key("digits")
    ctx = Context(dataset="digits", store=st, workers=1)
    items = [("adamix", 0.5, i) for i in range(5)] + [("adamix", 2.0, 5)]
    with pytest.raises(KeyboardInterrupt):
        ctx.trainings(_interrupt_at_third, items, {}, charge=lambda it: it[:2])
    s = L.dataset_ledger(st, key)
    # fits 0 and 1 finished, the third started and raised: those three (0.5 each); 3-5 never began
    assert len(s.runs) == 3 and s.epsilon_basic == pytest.approx(1.5)
    with pytest.raises(ConfigError, match="seeds: this figure asks 2,001 trainings"):
        ctx.trainings(_echo, [("adamix", 0.5, i) for i in range(2001)], {}, charge=lambda it: it[:2])
    assert len(L.dataset_ledger(st, key).runs) == 3


def _refused(fn):
    try:
        fn()
    except BudgetError:
        return True
    return False


def test_a_cap_stored_under_a_datasets_earlier_key_still_applies(tmp_path, digits_features):
    """Before a root stopped naming digits or CIFAR-10, their key held the root: a cap stored
    then sits under that key. It must keep applying to the data set (it silently stopped)."""
    st = RunStore(tmp_path / "s")
    root = str(tmp_path / "anydir")
    old_key = L.dataset_key("digits", root, legacy=True)
    assert old_key != L.dataset_key("digits", root) == L.dataset_key("digits")
    cfg_root = _cfg("ngd", 0.5, dataset_root=root)
    execute(cfg_root, store=st, features=digits_features)  # a run from then, with its root
    L.set_cap(st, old_key, 0.8, dataset="digits")
    for c in (_cfg("ngd", 0.5, seed=1), _cfg("ngd", 0.5, seed=2, dataset_root=root)):
        with pytest.raises(BudgetError, match="cap ε = 0.8"):
            L.check_cap(st, c)
    (s,) = L.dataset_ledgers(st)  # one ledger, with the cap, not an orphan cap beside it
    assert s.dataset_key == L.dataset_key("digits") and s.cap.epsilon == 0.8
    assert L.dataset_ledger(st, s.dataset_key).cap.epsilon == 0.8


def test_a_failed_run_that_released_a_count_before_any_step_is_charged(tmp_path):
    """The DP linear probe releases its noisy private count, then finds no σ for the steps
    that count implies: the run fails with no step record, but its count was released (and
    its error quotes the steps it implies, a function of the count). The ledger charges it."""
    from mixdp_core.runs.ledger import dataset_ledgers
    from mixdp_core.runs.runner import RunConfig, execute
    from mixdp_core.runs.store import RunStore

    store = RunStore(tmp_path / "s")
    cfg = RunConfig(dataset="digits", encoder="pixels", method="dp_linear_probe", target_epsilon=1.0,
                    method_params={"epochs": 100, "expected_batch_size": 1})
    with pytest.raises(Exception):
        execute(cfg, store=store, cache_dir=tmp_path / "c")
    (rec,) = store.list_runs()
    assert rec.status == "failed" and rec.metrics["n_step_records"] == 0 and rec.metrics["released"] is True
    (summary,) = dataset_ledgers(store)
    assert len(summary.runs) == 1 and summary.runs[0].epsilon >= 1.0


def test_an_unreadable_figure_charge_fails_closed(tmp_path):
    """A corrupt budget_charge entry was skipped: its charges left the ledger (ε 36.7 → 1.7)
    and a cap let runs through. The ledger now refuses to compute, naming the entry."""
    from mixdp_core.errors import StorageError

    st = RunStore(tmp_path / "s")
    st.set_meta(L.CHARGE_PREFIX + "abc", '{"created_at": 1, "charges": [{"key": "digits-')
    with pytest.raises(StorageError, match="budget_charge: the store's entry 'budget_charge:abc' is unreadable"):
        L.dataset_ledgers(st)
    L.set_cap(st, L.dataset_key("digits"), 5.0)
    with pytest.raises(StorageError):  # a capped data set refuses launches until it is repaired
        L.check_cap(st, _cfg("ngd", 0.5))


def test_deleting_a_run_keeps_what_it_spent(tmp_path, digits_features):
    """Deleting a run gave its ε back to the data set's budget and re-opened a capped data set
    (a browser walk-through: ε 245 → 211 after one delete). The spend stays, with its event
    for tight composition; a reference run's delete charges nothing."""
    st = RunStore(tmp_path / "s")
    rid = execute(_cfg("ngd", 0.5), store=st, features=digits_features)
    ref = execute(_cfg("only_public"), store=st, features=digits_features)
    (before,) = L.dataset_ledgers(st)
    L.set_cap(st, before.dataset_key, before.epsilon_basic + 0.1)
    with pytest.raises(BudgetError):
        L.check_cap(st, _cfg("ngd", 0.5, seed=1))
    st.delete_run(rid)
    st.delete_run(ref)
    (after,) = L.dataset_ledgers(st)
    assert after.epsilon_basic == pytest.approx(before.epsilon_basic)
    assert after.epsilon_tight == pytest.approx(before.epsilon_tight)  # the stored event is kept
    assert [L.FLAG_DELETED] == [f for r in after.runs for f in r.flags if f == L.FLAG_DELETED]
    with pytest.raises(BudgetError):  # the cap still holds
        L.check_cap(st, _cfg("ngd", 0.5, seed=1))
    from mixdp_core.errors import StorageError
    from mixdp_core.runs.store import DELETED_PREFIX

    st.set_meta(DELETED_PREFIX + rid, "{half")  # a damaged tombstone: the ledger fails closed
    with pytest.raises(StorageError, match=f"run {rid}: the record kept of this deleted run is unreadable"):
        L.dataset_ledgers(st)


def test_a_private_fit_that_fails_midway_is_charged_even_before_its_ledger(tmp_path, monkeypatch):
    """Honest tuning's hidden repetitions (and the held-out guard's inner run) release before the
    fit's ledger exists: a failure there left the run uncharged. A private fit that started is
    taken to have released (fail closed); a failure before the fit (the data) is not charged."""
    from mixdp_core.methods.adamix.private import NoisyGDMethod
    from mixdp_core.runs.ledger import dataset_ledgers

    real = NoisyGDMethod._fit_once
    calls = []

    def once_then_fail(self, split, on_step):
        calls.append(1)
        if len(calls) == 2:  # the second hidden repetition
            raise RuntimeError("stopped by the test")
        return real(self, split, on_step)

    monkeypatch.setattr(NoisyGDMethod, "_fit_once", once_then_fail)
    st = RunStore(tmp_path / "s")
    cfg = RunConfig(dataset="digits", encoder="pixels", method="adamix", target_epsilon=3.0,
                    method_params={"honest_tuning": True, "tuning_gamma": 0.001, "noise": "reproducible"})
    with pytest.raises(RuntimeError):
        execute(cfg, store=st, cache_dir=tmp_path / "c")
    (rec,) = st.list_runs()
    assert rec.metrics["n_step_records"] == 0 and rec.metrics["released"] is True
    (s,) = dataset_ledgers(st)
    assert len(s.runs) == 1 and s.runs[0].epsilon >= 3.0


def test_a_refusal_from_public_values_inside_the_fit_is_not_charged(tmp_path):
    """A projection too large for D is refused inside the fit but before any noise generator is
    made: the failed run released nothing and is not charged (fail closed only where the
    mechanism had started)."""
    import numpy as np

    from mixdp_core.methods.adamix.engine import MAX_COMPLEMENT_DIM
    from mixdp_core.runs.ledger import dataset_ledgers

    rng = np.random.default_rng(0)
    D = MAX_COMPLEMENT_DIM + 40
    f = tmp_path / "wide.npz"
    np.savez(f, X_train=rng.normal(size=(90, D)).astype(np.float32), y_train=np.arange(90) % 3,
             X_test=rng.normal(size=(9, D)).astype(np.float32), y_test=np.arange(9) % 3)
    st = RunStore(tmp_path / "s")
    cfg = RunConfig(dataset=f"features:{f}", encoder="pixels", method="adamix", target_epsilon=2.0,
                    public_per_class=3, method_params={"projection": 8})
    with pytest.raises(ConfigError, match="^projection"):
        execute(cfg, store=st, cache_dir=tmp_path / "c")
    (rec,) = st.list_runs()
    assert rec.status == "failed" and "released" not in rec.metrics
    assert all(not s.runs for s in dataset_ledgers(st))


def test_a_failed_run_on_a_relative_path_is_charged_where_it_ran_not_where_the_ledger_is_read(
        tmp_path, monkeypatch):
    """A failed (or running) run has no feature metadata recording its file's absolute path: its
    relative `features:f.npz` was resolved in the folder `mixdp budget` ran from, so read from
    another folder its spend moved to another, uncapped data set and the cap was exceeded. The
    run records the folder it started in, and the ledger resolves the path there."""
    from mixdp_core.runs.runner import run_versions

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    st = RunStore(tmp_path / "store")
    monkeypatch.chdir(a)
    cfg = {"dataset": "features:f.npz", "encoder": "pixels", "method": "ngd", "seed": 0, "target_epsilon": 1.0,
           "target_delta": 1e-5}
    rid = st.create_run(cfg, config_hash="h-rel", versions=run_versions())
    assert st.get_run(rid).versions["cwd"] == str(a)
    st.append_steps(rid, [{"step": 1, "total_steps": 9, "epsilon_spent": 0.4}])
    st.finish(rid, "failed", error="died")
    abs_key = L.dataset_key(f"features:{a / 'f.npz'}")
    L.set_cap(st, abs_key, 1.5)
    for where in (a, b):
        monkeypatch.chdir(where)
        (s,) = [x for x in L.dataset_ledgers(st) if x.runs]
        assert s.dataset_key == abs_key and [r.run_id for r in s.runs] == [rid]
        assert s.epsilon_basic == pytest.approx(1.0)  # charged its target: failed after a step record
    # a run without the record (older code) still resolves in the reader's folder, as before
    old = st.create_run(dict(cfg, seed=1), config_hash="h-old")
    st.append_steps(old, [{"step": 1, "total_steps": 9, "epsilon_spent": 0.4}])
    st.finish(old, "failed", error="died")
    assert L.config_dataset_key(st.get_run(old).config, {}, cwd=None) == L.dataset_key(f"features:{b / 'f.npz'}")


def test_a_cap_on_a_cdfsl_folder_under_its_name_still_applies(tmp_path):
    """A cap set on `cdfsl_eurosat:<folder>` was stored under the name's key; the data set is now
    keyed as that image folder, and the cap must keep applying (to either spelling)."""
    st = RunStore(tmp_path / "s")
    folder = tmp_path / "imgs"
    for c in ("a", "b"):
        (folder / c).mkdir(parents=True)
    spec = f"cdfsl_eurosat:{folder}"
    named = L.dataset_key(spec, legacy="named")
    assert named == L.dataset_key("cdfsl_eurosat") != L.dataset_key(spec)
    L.set_cap(st, named, 0.3, dataset=spec)
    for ds in (spec, "cdfsl_eurosat"):
        with pytest.raises(BudgetError, match="cap ε = 0.3"):
            L.check_cap(st, RunConfig(dataset=ds, encoder="pixels", method="ngd", target_epsilon=0.5))


def test_a_replace_one_run_is_refused_on_a_capped_data_set(tmp_path):
    """A DPPL-Mean run with neighbouring='replace' treats the class sizes as public: under the
    cap's add/remove relation it has no bound, yet it was charged its ε (cap 2, one such run at
    ε = 1 left 1 "available"). On a capped data set it is refused; an add/remove run is not."""
    st = RunStore(tmp_path / "s")
    L.set_cap(st, L.dataset_key("digits"), 2.0)
    rep = RunConfig(dataset="digits", encoder="pixels", method="dppl_mean", target_epsilon=1.0,
                    method_params={"neighbouring": "replace"})
    with pytest.raises(BudgetError, match="budget_cap.*neighbouring='replace'.*no add/remove bound"):
        L.check_cap(st, rep)
    L.check_cap(st, RunConfig(dataset="digits", encoder="pixels", method="dppl_mean", target_epsilon=1.0))
    L.check_cap(st, RunConfig(dataset="synthetic", encoder="pixels", method="dppl_mean", target_epsilon=1.0,
                              method_params={"neighbouring": "replace"}))  # no cap there: allowed, flagged
    # the exact private count taken as public (dataset_size='public') is refused alike (a review
    # charged such a run 1.0 under a cap, "a cost the ε does not cover")
    exact = RunConfig(dataset="digits", encoder="pixels", method="dp_linear_probe", target_epsilon=1.0,
                      method_params={"dataset_size": "public"})
    with pytest.raises(BudgetError, match="budget_cap.*dataset_size='public'.*exact private count.*'noisy_count'"):
        L.check_cap(st, exact)
    L.check_cap(st, RunConfig(dataset="digits", encoder="pixels", method="dp_linear_probe", target_epsilon=1.0))


def test_a_hard_link_of_a_capped_file_is_refused_not_a_second_budget(tmp_path):
    """The ledger keys a data set by its path (it must read old runs after their files are gone):
    a hard link of a capped feature file spent a budget of its own (a review: ε = 1 past a cap of
    1.5 spent). A launch on the same inode as a capped file is refused, naming the capped spec."""
    import os

    import numpy as np

    st = RunStore(tmp_path / "s")
    f = tmp_path / "f.npz"
    np.savez(f, X_train=np.zeros((4, 2), np.float32))
    os.link(f, tmp_path / "f_hard.npz")
    L.set_cap(st, L.dataset_key(f"features:{f}"), 1.5, dataset=f"features:{f}")
    hard = RunConfig(dataset=f"features:{tmp_path / 'f_hard.npz'}", encoder="pixels", method="dp_ls",
                     target_epsilon=1.0)
    with pytest.raises(BudgetError, match=r"budget_cap: .*same file or folder as .*f\.npz.*has a cap"):
        L.check_cap(st, hard)
    import shutil

    shutil.copy(f, tmp_path / "f_copy.npz")  # other bytes on disk: another data set, as documented
    L.check_cap(st, RunConfig(dataset=f"features:{tmp_path / 'f_copy.npz'}", encoder="pixels", method="dp_ls",
                              target_epsilon=1.0))


def test_a_cdfsl_set_at_its_place_and_its_folder_share_a_cap(tmp_path, monkeypatch):
    """The CD-FSL set at its fixed place keeps its name's key (a key from the data root moved with
    $MIXDP_DATA_ROOT: a cap set under one root did not apply under another); its folder named
    through image_folder is caught at launch as the same folder, both ways."""
    data = tmp_path / "data"
    folder = data / "cdfsl" / "EuroSAT"
    folder.mkdir(parents=True)
    monkeypatch.setenv("MIXDP_DATA_ROOT", str(data))
    st = RunStore(tmp_path / "s")
    L.set_cap(st, L.dataset_key("cdfsl_eurosat"), 1.0, dataset="cdfsl_eurosat")
    as_folder = RunConfig(dataset=f"image_folder:{folder}", encoder="pixels", method="dp_ls", target_epsilon=0.5)
    with pytest.raises(BudgetError, match="same file or folder as 'cdfsl_eurosat'"):
        L.check_cap(st, as_folder)
    key = L.dataset_key("cdfsl_eurosat")
    monkeypatch.setenv("MIXDP_DATA_ROOT", str(tmp_path / "elsewhere"))
    assert L.dataset_key("cdfsl_eurosat") == key  # the key does not move with the root
    monkeypatch.setenv("MIXDP_DATA_ROOT", str(data))
    st2 = RunStore(tmp_path / "s2")
    L.set_cap(st2, L.dataset_key(f"image_folder:{folder}"), 1.0, dataset=f"image_folder:{folder}")
    with pytest.raises(BudgetError, match="same file or folder as 'image_folder:"):
        L.check_cap(st2, RunConfig(dataset="cdfsl_eurosat", encoder="pixels", method="dp_ls", target_epsilon=0.5))
