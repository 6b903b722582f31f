"""Contract every registered method must satisfy (runs over all of ``METHODS``, so methods
added later by other families are covered automatically)."""

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
    return make_method(name, **kw)


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
    # same seed -> same model
    m2 = _make(name, seed=0).fit(split)
    np.testing.assert_array_equal(m2.decision_function(split.X_test), m.decision_function(split.X_test))
    if cls.private and m.noise_multiplier_ is not None:
        m3 = _make(name, seed=1).fit(split)
        assert not np.array_equal(m3.decision_function(split.X_test), m.decision_function(split.X_test))


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
