"""Contract every registered method must satisfy (runs over all of ``METHODS``, so methods
added later by other families are covered automatically).

Every method is built with its small ``test_config`` (``Method.test_config``), so the whole
contract runs in seconds per method: fit / predict / privacy / reproducibility, stopping
through ``on_step`` (the reported privacy is that of the executed steps), refitting resets
every fitted attribute, ``predict`` before ``fit`` says "not fitted", and the declared
constraints reject out-of-range values. Hypothesis properties check that the NoisyGD
release (:func:`mixdp_core.methods.adamix.engine.private_release`) has sensitivity <= τ under
every clipping rule and projection mode.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mixdp_core.data.splits import SplitSpec, make_split
from mixdp_core.errors import ConfigError
from mixdp_core.methods import METHODS, make_method

from .conftest import digits_featureset

TARGET_EPS = 2.0


@pytest.fixture(scope="module")
def contract_split():
    # small digits split; synthetic text embeddings (class means) for needs_text methods
    return make_split(digits_featureset(with_text=True, n_train=300), SplitSpec(public_per_class=3, seed=2))


def _fields(name):
    return {f.name for f in dataclasses.fields(METHODS.get(name).config_cls)}


def _make(name, **kw):
    fields = _fields(name)
    if "target_epsilon" in fields:
        kw.setdefault("target_epsilon", TARGET_EPS)
    for k, v in METHODS.get(name).test_config.items():  # the method's small config
        kw.setdefault(k, v)
    return make_method(name, **kw)


def test_test_configs_are_used_and_valid():
    # sparse fine-tuning declares a small config; the contract must run it, not the full size
    assert METHODS.get("sparse_finetune").test_config
    m = _make("sparse_finetune")
    for k, v in METHODS.get("sparse_finetune").test_config.items():
        assert getattr(m.config, k) == v
    for name, cls in METHODS.items():
        assert set(cls.test_config) <= _fields(name), name


def _split_for(name, split):
    if METHODS.get(name).needs_text:
        assert split.text_embeddings is not None
        return split
    return dataclasses.replace(split, text_embeddings=None)  # must not be needed


@pytest.mark.parametrize("name", METHODS.keys())
def test_config_has_seed_and_rejects_invalid_values(name):
    assert "seed" in _fields(name)
    with pytest.raises(ConfigError) as e:
        _make(name, seed=-1)
    assert e.value.field == "seed"
    if "target_epsilon" in _fields(name):
        with pytest.raises(ConfigError):
            _make(name, target_epsilon=-1.0)
    with pytest.raises(ConfigError):
        _make(name, no_such_parameter_xyz=1)


@pytest.mark.parametrize("name", METHODS.keys())
def test_fit_predict_privacy_and_reproducibility(name, contract_split):
    split = _split_for(name, contract_split)
    cls = METHODS.get(name)
    records = []
    m = _make(name, seed=0)
    assert m.fit(split, on_step=records.append) is m
    pred = m.predict(split.X_test)
    assert pred.shape == (len(split.y_test),)
    assert pred.min() >= 0 and pred.max() < split.n_classes
    scores = m.decision_function(split.X_test[:5])
    assert scores.shape == (5, split.n_classes)
    # fitted attributes of methods/base.py
    for attr in ("privacy_", "steps_", "history_", "noise_multiplier_", "pdp_sq_ratio_sum_"):
        assert hasattr(m, attr), attr
    assert m.steps_ >= 1 and len(m.history_) >= 1 and records == m.history_[: len(records)]
    if cls.private:
        assert m.privacy_ is not None
        assert m.privacy_.epsilon <= TARGET_EPS + 1e-9
        if m.pdp_sq_ratio_sum_ is not None:
            assert m.pdp_sq_ratio_sum_.shape == (len(split.y_private),)
    else:
        assert m.privacy_ is None
    if not cls.private or not cls.uses_private_data:
        # deterministic given the seed (no private release, no noise to keep secret)
        m2 = _make(name, seed=0).fit(split)
        np.testing.assert_array_equal(m2.decision_function(split.X_test), m.decision_function(split.X_test))
        return
    # default noise is secure: the same seed twice releases different models, so nobody who
    # knows the seed can replay the noise
    assert m.config.noise == "secure"
    m2 = _make(name, seed=0).fit(split)
    if np.array_equal(m2.decision_function(split.X_test), m.decision_function(split.X_test)):
        # only where both runs released the public start (the guard kept it), scaled alike: the
        # scale is a function of the snapped noisy count, whose integer values can coincide.
        # The guard's noisy gains, continuous, still differ
        assert getattr(m, "guard_kept_private_", None) is False and getattr(m2, "guard_kept_private_", None) is False
        gains = [[h.extra["guard_noisy_gain"] for h in r.history_ if "guard_noisy_gain" in h.extra] for r in (m, m2)]
        assert gains[0] and gains[0] != gains[1]
    # the research option replays: same seed -> same model; another seed -> another model
    r1 = _make(name, seed=0, noise="reproducible").fit(split)
    r2 = _make(name, seed=0, noise="reproducible").fit(split)
    np.testing.assert_array_equal(r1.decision_function(split.X_test), r2.decision_function(split.X_test))
    r3 = _make(name, seed=1, noise="reproducible").fit(split)
    assert not np.array_equal(r3.decision_function(split.X_test), r1.decision_function(split.X_test))


@pytest.mark.parametrize("name", sorted(METHODS.keys()))
def test_preflight_accepts_default_budget(name):
    """Every method's default config is feasible (preflight raises only for impossible budgets)."""
    METHODS.get(name)().preflight()


@pytest.mark.parametrize("name", ["fully_private", "ngd", "adamix", "ppgd"])
def test_noisygd_preflight_matches_accountant(name):
    from mixdp_core.accounting import BudgetError, ComposedGaussian, epsilon

    one_step = epsilon(ComposedGaussian(20.0, 1), delta=1e-5)
    with pytest.raises(BudgetError, match="noise_multiplier"):
        make_method(name, target_epsilon=0.9 * one_step, noise_multiplier=20.0).preflight()
    make_method(name, target_epsilon=1.01 * one_step, noise_multiplier=20.0).preflight()


# ------------------------------------------------------------------ stopping, refit, not fitted
def _stop_at_first(records):
    def cb(rec):
        records.append(rec)
        return True

    return cb


@pytest.mark.parametrize("name", METHODS.keys())
def test_on_step_true_stops_and_privacy_reflects_executed_steps(name, contract_split):
    split = _split_for(name, contract_split)
    cls = METHODS.get(name)
    full = _make(name, seed=0).fit(split)
    records = []
    m = _make(name, seed=0).fit(split, on_step=_stop_at_first(records))
    assert len(records) == 1, "on_step was called again after it returned True"
    first = records[0]
    assert m.history_ == records
    assert m.steps_ == first.step, (m.steps_, first.step)
    if not cls.private:
        assert m.privacy_ is None
        return
    assert m.privacy_ is not None
    assert m.privacy_.epsilon <= full.privacy_.epsilon + 1e-12
    if first.step < first.total_steps:  # stopped early: strictly less privacy spent
        assert m.steps_ < full.steps_
        assert m.privacy_.epsilon < full.privacy_.epsilon
    if first.epsilon_spent is not None:
        # The streamed ε may come from a coarser pessimistic grid (DP-SGD PLD progress
        # curves): never below the reported ε, and within 0.1 % of it.
        assert m.privacy_.epsilon <= first.epsilon_spent * (1 + 1e-9)
        assert m.privacy_.epsilon == pytest.approx(first.epsilon_spent, rel=1e-3)


def _stop_at(k, records):
    def cb(rec):
        records.append(rec)
        return len(records) >= k

    return cb


@pytest.mark.parametrize("name", METHODS.keys())
def test_a_stop_at_any_record_is_honoured(name, contract_split):
    """Stopping at the first record alone never reaches a NoisyGD engine (the count's record
    is handled before it): stop at the second, a middle one and the last two records before
    the end too (a stop on the last gradient step used to release the checkpoint test and the
    guard after it). Replayable noise, so every fit streams the same records."""
    split = _split_for(name, contract_split)
    full_records = []
    full = _make(name, seed=0, noise="reproducible").fit(split, on_step=_stop_at(10 ** 9, full_records))
    R = len(full_records)
    for k in sorted({2, R // 2, R - 2, R - 1} & set(range(1, R))):
        records = []
        m = _make(name, seed=0, noise="reproducible").fit(split, on_step=_stop_at(k, records))
        assert len(records) == k, f"{name}: on_step called {len(records)} times after a stop at record {k}"
        assert m.steps_ == records[-1].step == full_records[k - 1].step, (name, k)
        if m.privacy_ is not None and records[-1].epsilon_spent is not None:
            assert m.privacy_.epsilon <= records[-1].epsilon_spent * (1 + 1e-9), (name, k)
            assert m.privacy_.epsilon == pytest.approx(records[-1].epsilon_spent, rel=1e-3), (name, k)
            assert m.privacy_.epsilon <= full.privacy_.epsilon + 1e-12


@pytest.mark.parametrize("name", METHODS.keys())
def test_refit_resets_state(name, contract_split):
    split = _split_for(name, contract_split)
    # replayable noise, so the two fits can be compared value for value
    fresh = _make(name, seed=0, noise="reproducible").fit(split)
    m = _make(name, seed=0, noise="reproducible")
    m.fit(split, on_step=_stop_at_first([]))
    m.fit(split)  # a second fit starts from scratch: nothing of the stopped run remains
    assert m.steps_ == fresh.steps_
    assert len(m.history_) == len(fresh.history_)
    assert [r.step for r in m.history_] == [r.step for r in fresh.history_]
    if fresh.privacy_ is None:
        assert m.privacy_ is None
    else:
        assert m.privacy_.epsilon == fresh.privacy_.epsilon
    np.testing.assert_array_equal(m.decision_function(split.X_test), fresh.decision_function(split.X_test))


@pytest.mark.parametrize("name", METHODS.keys())
def test_predict_before_fit_says_not_fitted(name, contract_split):
    m = _make(name)
    X = contract_split.X_test[:3]
    with pytest.raises(RuntimeError, match="not fitted"):
        m.predict(X)
    with pytest.raises(RuntimeError, match="not fitted"):
        m.decision_function(X)


@pytest.mark.parametrize("name", METHODS.keys())
def test_predict_on_malformed_rows_names_X(name, contract_split):
    """A wrong number of columns gave numpy's broadcast errors, a 1-D row an AxisError, and
    all-NaN rows were predicted as class 0 without a word: every method names X instead."""
    from mixdp_core.errors import DataError

    split = _split_for(name, contract_split)
    m = _make(name).fit(split)
    X = np.asarray(split.X_test[:4], dtype=np.float32)
    for bad in (X[:, :-1], X[0], np.full_like(X, np.nan)):
        with pytest.raises(DataError, match="^X: |X:"):
            m.predict(bad)
    assert m.predict(X).shape == (4,)


# ------------------------------------------------------------------ declared constraints
@pytest.mark.parametrize("name", METHODS.keys())
def test_declared_ranges_are_enforced(name):
    """Every declared range / choice rejects a value just outside it, naming the field."""
    from mixdp_core.config import SPEC_KEY, describe

    cls = METHODS.get(name).config_cls
    declared = {f.name for f in dataclasses.fields(cls) if SPEC_KEY in f.metadata}
    undeclared = [spec.name for spec in describe(cls) if spec.name not in declared]
    assert not undeclared, f"{name}: fields without a param(...) declaration: {undeclared}"
    for spec in describe(cls):
        bad = []
        if spec.choices:
            bad.append("\x00not-a-choice")
        if spec.range is not None and spec.type in (int, float):
            r = spec.range
            step = 1 if spec.type is int else 1e-9 * max(1.0, abs(r.lo or 0), abs(r.hi or 0))
            if r.lo is not None:
                bad.append(spec.type(r.lo - step) if r.lo_closed else spec.type(r.lo))
            if r.hi is not None:
                bad.append(spec.type(r.hi + step) if r.hi_closed else spec.type(r.hi))
        if spec.type is bool:
            bad.append("yes")
        for v in bad:
            with pytest.raises(ConfigError) as e:
                cls(**{spec.name: v})
            assert e.value.field == spec.field, (name, spec.name, v)


# ------------------------------------------------------------------ sensitivity of the release
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mixdp_core.methods.adamix import engine as noisygd  # noqa: E402
from mixdp_core.methods.adamix.projection import projection_basis  # noqa: E402

CLIP_RULES = ("fixed", "percentile", "public_mean")
PROJECTIONS = ("none", "sub", "complement")


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 12),
    D=st.integers(2, 9),
    C=st.integers(2, 4),
    rule=st.sampled_from(CLIP_RULES),
    projection=st.sampled_from(PROJECTIONS),
    clip_norm=st.floats(1e-3, 10.0),
    w_scale=st.floats(0.0, 20.0),
)
def test_release_sensitivity_never_exceeds_the_clip(seed, n, D, C, rule, projection, clip_norm, w_scale):
    """Adding one row changes the released (noise-free) sum by at most τ, for every clipping
    rule (τ from public data as the method computes it) and every projection mode."""
    rng = np.random.default_rng(seed)

    def rows(k):
        X = rng.normal(size=(k, D))
        return X / np.linalg.norm(X, axis=1, keepdims=True)  # methods normalize rows

    X, y = rows(n + 1), rng.integers(0, C, size=n + 1)
    W = w_scale * rng.normal(size=(D, C))
    X_pub = rows(4)
    pub_norms = np.linalg.norm(X_pub, axis=1) * rng.uniform(0.1, 1.5, size=4)
    tau = noisygd.clip_threshold(rule, pub_norms, float(pub_norms.mean()), clip_norm=clip_norm, percentile=90.0)
    basis = None
    if projection != "none":
        G_pub = X_pub.T @ rng.normal(size=(4, C))
        k = "rank" if projection == "sub" else D - 1
        B = rng.normal(size=(D, D - k)) if k != "rank" else None
        basis = projection_basis(G_pub, k, B)
    with_row, ratio, _ = noisygd.private_release(X, y, W, tau, basis)
    without, _, _ = noisygd.private_release(X[:n], y[:n], W, tau, basis)
    change = float(np.linalg.norm(np.asarray(with_row, np.float64) - np.asarray(without, np.float64)))
    assert change <= tau * (1 + 1e-4) + 1e-6, (change, tau)
    assert np.all(ratio <= 1.0 + 1e-9)


def test_release_sensitivity_check_can_fail():
    """The bound above is tight: an unclipped row with a large gradient reaches τ exactly."""
    X = np.array([[1.0, 0.0]])
    W = np.array([[50.0, -50.0], [0.0, 0.0]])
    released, ratio, _ = noisygd.private_release(X, np.array([1]), W, 0.5, None)
    assert float(np.linalg.norm(released)) == pytest.approx(0.5, rel=1e-5)
    assert ratio[0] == pytest.approx(1.0)


@pytest.mark.parametrize("name", METHODS.keys())
def test_ledger_plan_and_report_agree(name, contract_split):
    """Every private method records its releases in a run ledger: privacy_ is the ledger's
    composition, within the declared plan and budget; a full run spends its plan (up to the
    calibration's rounding) and a stopped one strictly less."""
    split = _split_for(name, contract_split)
    cls = METHODS.get(name)
    m = _make(name, seed=0).fit(split)
    if not (cls.private and cls.uses_private_data):
        assert m.ledger_ is None and m.verify_privacy() == 0.0
        return
    spent = m.verify_privacy()
    led = m.ledger_
    assert len(led) >= 1 and spent == pytest.approx(m.privacy_.epsilon, rel=1e-12)
    assert spent <= TARGET_EPS * (1 + 1e-9)
    if led.plan is not None:
        from mixdp_core.accounting import epsilon

        plan_eps = epsilon(led.plan, delta=led.delta, accountant=led.accountant)
        assert spent <= plan_eps * (1 + 1e-9)
    # the report names the event the ledger composed (the data-set ledger composes it later)
    from mixdp_core.accounting import event_from_dict

    assert event_from_dict(m.privacy_.event) == led.event()
    # one record per kind of release, each with a positive count, JSON-ready
    import json

    json.dumps(led.to_dicts())
    assert all(r.count >= 1 and r.what for r in led.releases)


def test_ledger_catches_a_release_beyond_the_plan(contract_split, monkeypatch):
    """verify_privacy fails loudly when a method releases more than it planned: here AdaMix's
    noisy class histogram (its noisy count) is recorded twice (a release the calibration never paid for)."""
    from mixdp_core.accounting import PlanExceededError, RunLedger

    orig = RunLedger.release

    def twice(self, event, *, what, **kw):
        orig(self, event, what=what, **kw)
        if what == "noisy class histogram":
            orig(self, event, what=what, **kw)

    monkeypatch.setattr(RunLedger, "release", twice)
    m = _make("adamix", seed=0).fit(_split_for("adamix", contract_split))
    with pytest.raises(PlanExceededError, match="more than its plan"):
        m.verify_privacy()


def test_noisygd_ledger_counts_every_release(contract_split):
    """AdaMix's ledger holds exactly the releases executed: the class histogram (in place of
    the count), each gradient step,
    the checkpoint test and the guard (steps_), all Gaussian with the run's σ."""
    m = _make("adamix", seed=0).fit(_split_for("adamix", contract_split))
    led = m.ledger_
    assert len(led) == m.steps_
    kinds = [r.what for r in led.releases]
    assert kinds[0] == "noisy class histogram" and "gradient step" in kinds
    assert {r.event.noise_multiplier for r in led.releases} == {m.noise_multiplier_}


def test_step_record_to_dict_is_asdict_and_a_copy():
    import dataclasses

    import numpy as np

    from mixdp_core.methods.base import StepRecord

    for rec in (StepRecord(3, 10), StepRecord(1, 2, 0.5, np.float64(0.25), np.float32(1.5), 0.1, {"lr": 0.1, "k": 3}),
                StepRecord(2, 2, extra={"nested": {"a": [1, 2]}, "arr": np.arange(2)})):
        got, want = rec.to_dict(), dataclasses.asdict(rec)
        assert list(got) == list(want)
        assert {k: v for k, v in got.items() if k != "extra"} == {k: v for k, v in want.items() if k != "extra"}
        assert got["extra"].keys() == want["extra"].keys()
        got["extra"]["added"] = 1.0  # the dict is the caller's: the frozen record keeps its own
        assert "added" not in rec.extra
    nested = StepRecord(2, 2, extra={"nested": {"a": [1, 2]}}).to_dict()
    assert nested["extra"]["nested"] == {"a": [1, 2]}


@pytest.mark.parametrize("kw,field", [({"width": 20_000}, "width"), ({"pretrain_epochs": 10 ** 9}, "pretrain_epochs"),
                                      ({"device": "bogus"}, "device"), ({"gn_groups": 10 ** 9}, "gn_groups")])
def test_sparse_finetuning_bounds_its_sizes_at_construction(kw, field):
    """width = 20,000 asked for 14 GB, pretrain_epochs = 1e9 ran unbounded, a bogus device was
    a torch traceback after the data were loaded: one-line errors before any work."""
    with pytest.raises(ConfigError) as ei:
        make_method("sparse_finetune", **kw)
    assert ei.value.field == field


@pytest.mark.parametrize("name", [n for n, c in METHODS.items() if c.private])
def test_every_private_method_states_its_sensitivity_and_neighbouring_relation(name):
    """The brief: every mechanism's docstring states its sensitivity and neighbouring relation
    (a review found eight registered classes whose docstrings stated neither or one)."""
    import inspect
    import re

    doc = inspect.getdoc(METHODS.get(name)) or ""
    assert "sensitiv" in doc.lower(), name
    assert re.search(r"add/remove|add or remove|neighbour", doc), name
