"""Exports keep the owner's view apart; the seed-replay audit alarms on reproducible noise only."""

from __future__ import annotations

import csv
import io
import json

import pytest

from mixdp_core.runs.owner_view import OWNER_NOTE, is_owner_only


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    from mixdp_core.runs.runner import RunConfig, execute
    from mixdp_core.runs.store import RunStore

    tmp = tmp_path_factory.mktemp("exports")
    store = RunStore(tmp / "store")
    cfg = RunConfig(dataset="digits", encoder="pixels", method="fully_private", target_epsilon=2.0,
                    imbalance_ratio=10.0, method_params={"noise_multiplier": 30.0})
    rid = execute(cfg, store=store, cache_dir=tmp / "cache")
    return store, rid


OWNER_SAMPLES = ("mia_auc", "pdp_epsilon_max", "n_private", "split", "minority_classes")


def test_json_export_leaves_the_owners_view_out_by_default(stored):
    store, rid = stored
    rec = store.get_run(rid)
    assert all(k in rec.metrics for k in OWNER_SAMPLES)  # the store keeps them (charts need them)
    d = json.loads(store.export(run_ids=[rid], fmt="json"))[0]
    assert not [k for k in d["metrics"] if is_owner_only(k)]
    assert all(k not in d["metrics"] for k in OWNER_SAMPLES)
    assert "owner_only" not in d
    assert d["steps"] and all("train_loss" not in s for s in d["steps"])
    # a private run's times give its duration, which grows with the exact private count: owner's
    assert d["created_at"] is None and d["finished_at"] is None and "wall_seconds" not in d["metrics"]


def test_json_export_groups_the_owners_view_under_the_note_when_asked(stored):
    store, rid = stored
    d = json.loads(store.export(run_ids=[rid], fmt="json", owner_view=True))[0]
    o = d["owner_only"]
    assert isinstance(o["created_at"], str) and o["created_at"].endswith("+00:00")  # ISO 8601, not epochs
    assert o["wall_seconds"] > 0
    assert o["note"] == OWNER_NOTE
    assert all(k in o for k in OWNER_SAMPLES)
    assert len(o["step_train_loss"]) == len(d["steps"])
    assert not [k for k in d["metrics"] if is_owner_only(k)]  # still never flat


def test_csv_export_public_by_default_and_prefixed_when_asked(stored):
    store, rid = stored
    rows = list(csv.DictReader(io.StringIO(store.export(run_ids=[rid], fmt="csv"))))
    cols = set(rows[0])
    # nested config and the privacy report one level down (runs differing only there looked identical)
    assert rows[0]["config.method_params.noise_multiplier"] == "30.0"
    assert rows[0]["metric.privacy.accountant"] and rows[0]["metric.privacy.mechanism"]
    assert not [c for c in cols if c.startswith("metric.") and is_owner_only(c[len("metric."):])]
    assert "metric.test_error" in cols and "metric.noise" in cols
    rows = list(csv.DictReader(io.StringIO(store.export(run_ids=[rid], fmt="csv", owner_view=True))))
    assert rows[0]["owner_only.note"] == OWNER_NOTE and rows[0]["owner_only.mia_auc"]
    assert not rows[0]["created_at"].replace(".", "").isdigit()


def _replay(noise: str):
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.evaluation.audit import run_audit
    from tests.methods.conftest import digits_featureset

    split = make_split(digits_featureset(n_train=200), SplitSpec(public_per_class=3, seed=2))
    return run_audit(split, "dp_ls", attack="seed-replay", epsilon=1.0, seed=0,
                     method_params={"noise": noise}, trials=60)


def test_seed_replay_alarms_on_reproducible_noise():
    r = _replay("reproducible")
    assert r.alarm
    s = r.summary()
    assert s["exact_replays_with_canary"] == s["trials_with_canary"] >= 2
    assert s["exact_replays_without_canary"] == 0
    assert s["empirical_epsilon_lower"] > 0.5 and s["auc"] == 1.0
    # the alarm says what refuted the claim: the bit-for-bit replays, and the ε bound only where it does
    from mixdp_core.app_support.audit import alarm_message

    assert "bit for bit from its published seed" in s["alarm_reasons"][0]
    assert (f"{s['exact_replays_with_canary']} of {s['trials_with_canary']} trials with the canary and 0 of "
            f"{s['trials_without_canary']} without it") in s["alarm_reasons"][0]
    refuted = s["empirical_epsilon_lower"] > s["claimed_epsilon"]
    assert len(s["alarm_reasons"]) == 1 + refuted
    assert ("exceeds the claimed ε" in alarm_message(s)) == refuted
    assert alarm_message(s).startswith("ALARM (seed-replay): the release was reproduced")
    short = dict(s, empirical_epsilon_lower=0.9, alarm_reasons=s["alarm_reasons"][:1])  # fewer trials: no ε bound
    assert "exceeds" not in alarm_message(short)


def test_seed_replay_is_silent_on_secure_noise():
    r = _replay("secure")
    s = r.summary()
    assert not r.alarm
    assert s["exact_replays_with_canary"] == 0 and s["exact_replays_without_canary"] == 0
    assert s["empirical_epsilon_lower"] <= 1.0


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 3.0])
def test_default_trials_can_refute_the_claim(eps):
    """A perfect attack with the default count refutes the claim on every coin draw (the
    audit's own coins, seeds 0-19), up to the default ε = 3 of the CLI and the page."""
    from mixdp_core.evaluation.audit.replay import MAX_DEFAULT_TRIALS, default_trials
    from mixdp_core.evaluation.audit.stats import epsilon_lower_bound
    import numpy as np

    n = default_trials(eps)
    assert n < MAX_DEFAULT_TRIALS
    for seed in range(20):
        coins = np.random.default_rng([seed, 0x5EED]).random(n) < 0.5  # as seed_replay_audit draws them
        score = np.where(coins, 0.0, -1.0)  # the replay reproduces the release iff the canary is in
        assert epsilon_lower_bound(score[coins], score[~coins], delta=1e-5, seed=seed).epsilon_lower > eps
    assert default_trials(eps * 1.2) > n  # more trials for a larger claim


def test_default_trials_is_capped():
    from mixdp_core.evaluation.audit.replay import MAX_DEFAULT_TRIALS, default_trials

    assert default_trials(50.0) == MAX_DEFAULT_TRIALS


def test_exports_give_no_budget_to_non_private_references(tmp_path):
    from mixdp_core.runs.runner import RunConfig, execute
    from mixdp_core.runs.store import RunStore

    store = RunStore(tmp_path / "s")
    rid = execute(RunConfig(dataset="digits", encoder="pixels", method="paragon"), store=store,
                  cache_dir=tmp_path / "c")
    assert store.get_run(rid).target_epsilon == 3.0  # the placeholder it is filed under (RunConfig default)
    row = next(csv.DictReader(io.StringIO(store.export(run_ids=[rid], fmt="csv"))))
    assert row["target_epsilon"] == "" and row["metric.epsilon_label"].startswith("∞")
    from mixdp_core.cli.train import summary

    assert summary(store.get_run(rid), store_root=str(store.root), reused=False)["target_epsilon"] is None  # --json
    assert json.loads(store.export(run_ids=[rid], fmt="json"))[0]["target_epsilon"] is None


def test_a_failed_runs_error_text_is_owners_view(tmp_path, capsys):
    """The error of a run whose public shots do not fit quotes a class's exact count: the
    export shows its type and field only; the owner's view has the full text."""
    from mixdp_core.cli import main
    from mixdp_core.runs.store import RunStore

    st = tmp_path / "s"
    assert main(["train", "--dataset", "digits", "--encoder", "pixels", "--method", "adamix", "--public-per-class",
                 "100000", "--store", str(st), "--no-progress", "--cache-dir", str(tmp_path / "c")]) != 0
    capsys.readouterr()
    store = RunStore(st)
    (rec,) = store.list_runs()
    assert "samples" in rec.error and any(ch.isdigit() for ch in rec.error.split("public_per_class")[0])
    row = next(csv.DictReader(io.StringIO(store.export(fmt="csv"))))
    assert row["error"] == "DataError: y_train (details: owner's view)"
    (d,) = json.loads(store.export(fmt="json"))
    assert d["error"] == row["error"] and "owner_only" not in d
    (o,) = json.loads(store.export(fmt="json", owner_view=True))
    assert o["owner_only"]["error"] == rec.error


def test_the_audit_page_qualifies_a_guarantee_that_does_not_hold():
    """A run with reproducible noise, or one an audit refuted, had its ε and "no attacker can
    identify more than …" headline shown unqualified beside the ALARM; a TPR at 0.1 % false
    positives was shown from 22 non-members (the smallest rate they can show is 4.5 %)."""
    from mixdp_core.app_support.audit import audit_rows, guarantee_caveat
    from types import SimpleNamespace

    assert guarantee_caveat({"noise": "secure"}, [{"alarm": False}]) is None
    assert "NOT private against anyone who knows the seed" in guarantee_caveat({"noise": "reproducible"})
    assert guarantee_caveat({}, [{"alarm": True}, {"alarm": False}]) == "1 audit(s) below refute the claim"
    summ = {"attack": "canary-whitebox", "n_members": 18, "n_nonmembers": 22, "tpr_at_fpr_0.001": 0.167,
            "tpr_at_fpr_0.01": 0.2, "auc": 0.7, "claimed_epsilon": 1.0}
    (row,) = audit_rows([SimpleNamespace(summary=summ, attack="canary-whitebox", audit_id="a1", created_at=0.0)])
    assert row["TPR @ FPR 0.1 %"] == "—" and row["TPR @ FPR 1 %"] == "—" and row["members / non-members"] == "18 / 22"
    summ["n_nonmembers"] = 1000
    (row,) = audit_rows([SimpleNamespace(summary=summ, attack="canary-whitebox", audit_id="a1", created_at=0.0)])
    assert row["TPR @ FPR 0.1 %"] == "0.167"


def test_a_failed_reproducible_runs_export_carries_the_not_private_label(tmp_path):
    """A run on reproducible noise that fails after some steps has stored released values
    (its noisy count) that anyone with the seed can replay: its exports say so, as a completed
    run's do; a secure run's failure says it is secure."""
    from mixdp_core import randomness
    from mixdp_core.runs.runner import RunConfig, execute
    from mixdp_core.runs.store import RunStore

    store = RunStore(tmp_path / "s")
    for noise in ("reproducible", "secure"):
        calls = []

        def boom(rec, calls=calls):
            calls.append(rec)
            if len(calls) == 3:
                raise RuntimeError("stopped by the test")

        cfg = RunConfig(dataset="digits", encoder="pixels", method="adamix", target_epsilon=2.0,
                        method_params={"noise": noise})
        with pytest.raises(RuntimeError):
            execute(cfg, store=store, cache_dir=tmp_path / "c", on_record=boom)
    rows = {r["config_hash"]: r for r in csv.DictReader(io.StringIO(store.export(fmt="csv")))}
    labels = sorted(r["metric.noise_label"] for r in rows.values())
    assert labels == sorted([randomness.REPRODUCIBLE_WARNING, randomness.SECURE_LABEL])
    assert all(r["status"] == "failed" for r in rows.values())
    recs = json.loads(store.export(fmt="json"))
    assert {d["metrics"]["noise"] for d in recs} == {"reproducible", "secure"}


def test_a_hidden_repetition_counts_timings_are_owners_view(tmp_path):
    """Honest tuning's duration grows with its hidden number of repetitions K, and every private
    run's with the exact private count: the public export leaves out their timings and times, the
    owner's view keeps them; a run that never reads the private rows (Only-Public) keeps its
    timings public."""
    from mixdp_core.runs.runner import RunConfig, execute
    from mixdp_core.runs.store import RunStore

    store = RunStore(tmp_path / "s")
    hon = execute(RunConfig(dataset="digits", encoder="pixels", method="adamix", target_epsilon=3.0,
                            method_params={"honest_tuning": True, "tuning_gamma": 0.5}),
                  store=store, cache_dir=tmp_path / "c")
    plain = execute(RunConfig(dataset="digits", encoder="pixels", method="only_public"),
                    store=store, cache_dir=tmp_path / "c")
    private = execute(RunConfig(dataset="digits", encoder="pixels", method="adamix", target_epsilon=3.0),
                      store=store, cache_dir=tmp_path / "c")
    assert store.get_run(hon).metrics["timing_owner_only"] is True
    pub = {d["run_id"]: d for d in json.loads(store.export(fmt="json", include_steps=False))}
    assert not {"fit_seconds", "wall_seconds"} & set(pub[hon]["metrics"]) and pub[hon]["finished_at"] is None
    assert pub[hon]["updated_at"] is None and pub[hon]["heartbeat_at"] is None  # nor any later time
    # nor its creation time: with the start in its run id it gave the duration (a run trained, then stored)
    assert pub[hon]["created_at"] is None and pub[plain]["created_at"]
    assert pub[plain]["updated_at"]
    assert {"fit_seconds", "wall_seconds"} <= set(pub[plain]["metrics"]) and pub[plain]["finished_at"]
    own = {d["run_id"]: d for d in json.loads(store.export(fmt="json", include_steps=False, owner_view=True))}
    assert own[hon]["owner_only"]["wall_seconds"] > 0 and own[hon]["owner_only"]["finished_at"]
    assert own[hon]["owner_only"]["created_at"]
    assert pub[private]["created_at"] is None and not {"fit_seconds", "wall_seconds"} & set(pub[private]["metrics"])
    assert own[private]["owner_only"]["wall_seconds"] > 0
    rows = {r["run_id"]: r for r in csv.DictReader(io.StringIO(store.export(fmt="csv")))}
    assert rows[hon]["finished_at"] == "" and "metric.wall_seconds" in rows[plain] and not rows[hon].get(
        "metric.wall_seconds")


def test_the_private_count_the_boost_and_the_paragons_outcomes_are_owners_view(tmp_path):
    """The feature cache's n_train minus the public count was the exact private count; two runs'
    performance boosts solved for the paragon's error; the paragon's own outcomes were exported:
    all three are the owner's view. Only-Public (ε = 0) keeps its outcomes public."""
    from mixdp_core.cli.train import summary
    from mixdp_core.runs.runner import RunConfig, execute
    from mixdp_core.runs.store import RunStore
    from mixdp_core.runs.sweep.driver import SweepResult

    store = RunStore(tmp_path / "s")
    rid = {m: execute(RunConfig(dataset="digits", encoder="pixels", method=m, target_epsilon=3.0),
                      store=store, cache_dir=tmp_path / "c") for m in ("paragon", "only_public", "adamix")}
    ada = store.get_run(rid["adamix"])
    assert ada.metrics["features_meta"]["n_train"] - ada.metrics["n_public"] == ada.metrics["n_private"]
    assert ada.metrics["performance_boost"] is not None
    pub = {d["method"]: d for d in json.loads(store.export(fmt="json", include_steps=False))}
    assert "features_meta" not in pub["adamix"]["metrics"] and "performance_boost" not in pub["adamix"]["metrics"]
    assert "test_error" in pub["adamix"]["metrics"] and "test_error" in pub["only_public"]["metrics"]
    par = pub["paragon"]["metrics"]
    assert "test_error" not in par and "balanced_accuracy" not in par and par["method"] == "paragon"
    # nor its step records, which held its test error at each step
    full = {d["method"]: d for d in json.loads(store.export(fmt="json"))}
    assert full["paragon"]["steps"] == [] and full["adamix"]["steps"]
    assert store.steps(rid["paragon"])  # the store keeps them (the owner's charts)
    own_steps = {d["method"]: d for d in json.loads(store.export(fmt="json", owner_view=True))}
    assert own_steps["paragon"]["owner_only"]["steps"]
    own = {d["method"]: d for d in json.loads(store.export(fmt="json", include_steps=False, owner_view=True))}
    assert own["paragon"]["owner_only"]["test_error"] == store.get_run(rid["paragon"]).metrics["test_error"]
    assert own["adamix"]["owner_only"]["features_meta"]["n_train"] == ada.metrics["features_meta"]["n_train"]
    csv_rows = {r["method"]: r for r in csv.DictReader(io.StringIO(store.export(fmt="csv")))}
    assert not csv_rows["paragon"].get("metric.test_error") and csv_rows["adamix"]["metric.test_error"]
    # the CLI's --json and a sweep's line keep them under diagnostics, never flat
    for m in ("paragon", "adamix"):
        rec = store.get_run(rid[m])
        out = summary(rec, store_root=str(store.root), reused=False)
        assert "performance_boost" not in out and "performance_boost" in out["diagnostics"]
        assert "diagnostics" not in out["diagnostics"]  # one block, not the stored one nested in it
        line = SweepResult(index=0, config=RunConfig.from_dict(rec.config), run_id=rec.run_id, status=rec.status,
                           reused=False, metrics=rec.metrics).summary()
        assert "performance_boost" not in line and "performance_boost" in line["diagnostics"]
    out = summary(store.get_run(rid["paragon"]), store_root=str(store.root), reused=False)
    assert "test_error" not in out and out["diagnostics"]["test_error"] is not None
