"""The linear head's input map (public-mean centering, ``feature_center``) and the
``init_scale="grow_only"`` start: what they read, what they compute, and who may use them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mixdp_core.data.splits import SplitSpec, make_split
from mixdp_core.errors import ConfigError
from mixdp_core.methods import make_method
from mixdp_core.methods._linear import l2_normalize
from mixdp_core.methods.adamix.references import UNIT_MAP, FeatureMap, feature_map_for

from .conftest import digits_featureset


@pytest.fixture(scope="module")
def split():
    return make_split(digits_featureset(), SplitSpec(public_per_class=3, seed=0))


def test_map_centres_on_the_unit_public_mean_and_returns_unit_rows():
    rng = np.random.default_rng(0)
    Xp = rng.random((30, 8)).astype(np.float32) * 5
    X = rng.random((50, 8)).astype(np.float32)
    fm = FeatureMap.from_public(Xp)
    want_center = (Xp / np.linalg.norm(Xp, axis=1, keepdims=True)).mean(axis=0)
    np.testing.assert_allclose(fm.center, want_center, rtol=1e-6)
    Z = fm(X)
    U = X / np.linalg.norm(X, axis=1, keepdims=True) - want_center
    np.testing.assert_allclose(Z, U / np.linalg.norm(U, axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0, rtol=1e-5)
    # a row whose direction is the centre (all public rows alike) maps to 0: norm <= 1 still
    # holds for the sensitivity bounds
    same = FeatureMap.from_public(np.repeat(Xp[:1], 4, axis=0))
    assert np.linalg.norm(same(2 * Xp[:1])) < 1e-6
    # scale of a row does not matter (the rows are normalized first)
    np.testing.assert_allclose(fm(3 * X), Z, rtol=1e-5, atol=1e-6)
    assert FeatureMap.from_public(np.zeros((0, 8), np.float32)).center is None
    np.testing.assert_allclose(UNIT_MAP(X), l2_normalize(X))


def test_feature_map_for_choices(split):
    assert feature_map_for("none", split, public_start=True) is UNIT_MAP
    assert feature_map_for("auto", split, public_start=False) is UNIT_MAP
    for choice in ("auto", "public_mean"):
        fm = feature_map_for(choice, split, public_start=True)
        np.testing.assert_allclose(fm.center, l2_normalize(split.X_public).mean(axis=0), rtol=1e-6)


@pytest.mark.parametrize("method", ["only_public", "paragon", "adamix", "ngd"])
def test_centre_reads_public_rows_only_and_prediction_uses_it(method, split):
    """Changing every private row leaves the map unchanged; predict = argmax(map(X) W)."""
    kw = {} if method in ("only_public", "paragon") else {"target_epsilon": 1.0, "noise": "reproducible"}
    m = make_method(method, **kw).fit(split)
    np.testing.assert_allclose(m.feature_map_.center, l2_normalize(split.X_public).mean(axis=0), rtol=1e-6)
    other = dataclasses.replace(split, X_private=split.X_private[::-1] * 2 + 1)
    m2 = make_method(method, **kw).fit(other)
    np.testing.assert_array_equal(m2.feature_map_.center, m.feature_map_.center)
    np.testing.assert_array_equal(m.predict(split.X_test), (m.feature_map_(split.X_test) @ m.W_).argmax(1))
    assert not np.array_equal(m.feature_map_(split.X_test), l2_normalize(split.X_test))


def test_feature_center_none_and_fully_private(split):
    m = make_method("adamix", target_epsilon=1.0, feature_center="none", noise="reproducible").fit(split)
    assert m.feature_map_ is UNIT_MAP
    fp = make_method("fully_private", target_epsilon=1.0, noise="reproducible").fit(split)
    assert fp.feature_map_ is UNIT_MAP  # public rows are private there: their mean is not free
    with pytest.raises(ConfigError, match="feature_center"):
        make_method("fully_private", feature_center="public_mean")
    # adamix from the text or zero init does not start from the public rows: 'auto' -> none
    z = make_method("adamix", target_epsilon=1.0, init="zero", noise="reproducible").fit(split)
    assert z.feature_map_ is UNIT_MAP


def test_only_public_is_adamix_start_on_the_same_map(split):
    """Only-Public is the public start of adamix (same map, same ridge): a run stopped after
    its first release predicts like Only-Public once its start is scaled back."""
    pub = make_method("only_public").fit(split)
    m = make_method("adamix", target_epsilon=1.0, noise="reproducible")
    m.fit(split, on_step=lambda r: True)  # stopped after the noisy count: W_ = the scaled start
    np.testing.assert_array_equal(m.predict(split.X_test), pub.predict(split.X_test))


def test_grow_only_never_shrinks_the_start(split):
    """'noise' may shrink the public start (alpha < 1); 'grow_only' takes max(alpha, 1)."""
    noise = make_method("adamix", target_epsilon=8.0, init_scale="noise", noise="reproducible")
    noise.fit(split, on_step=lambda r: True)
    grow = make_method("adamix", target_epsilon=8.0, init_scale="grow_only", noise="reproducible")
    grow.fit(split, on_step=lambda r: True)
    assert noise.init_scale_ < 1.0  # here the rule shrinks (else this test checks nothing)
    assert grow.init_scale_ == 1.0
    small = make_method("adamix", target_epsilon=0.3, init_scale="noise", noise="reproducible")
    small.fit(split, on_step=lambda r: True)
    big = make_method("adamix", target_epsilon=0.3, init_scale="grow_only", noise="reproducible")
    big.fit(split, on_step=lambda r: True)
    if small.init_scale_ > 1.0:  # where the rule enlarges, both agree
        assert big.init_scale_ == pytest.approx(small.init_scale_, rel=1e-6)


def test_hundred_classes_private_phase_beats_only_public_where_the_former_defaults_lost():
    """100 classes, 2 public + 28 private per class, features with a large shared mean (as
    post-ReLU encoder features), epsilon = 3, guard off so the private phase alone is judged.
    The former defaults (plain unit rows, a start the noise rule shrinks) end *worse* than
    Only-Public (measured 73.3 / 75.1 vs 55.5 % on seeds 0 / 1); centring on the public mean
    and a start that is never shrunk cut Only-Public's error by 40 % (30.8 / 30.0 %)."""
    from mixdp_core.features.cache import get_features

    fs = get_features("synthetic", "pixels", classes=100, dim=128, train_per_class=30, test_per_class=10,
                      effective_rank=32, separation=5.5, shared_mean=2.5)
    sp = make_split(fs, SplitSpec(public_per_class=2, seed=0))

    def err(m):
        return float(np.mean(m.predict(sp.X_test) != sp.y_test))

    run = dict(target_epsilon=3.0, public_guard=False, noise="reproducible", seed=0)
    # the former defaults also fixed the public ridge at PUBLIC_L2
    op_old = err(make_method("only_public", feature_center="none", l2_rule="fixed").fit(sp))
    op = err(make_method("only_public").fit(sp))
    old = err(make_method("adamix", feature_center="none", init_scale="noise", public_l2_rule="fixed",
                          update_shrinkage="none", **run).fit(sp))
    new = err(make_method("adamix", **run).fit(sp))
    assert old > op_old, (old, op_old)  # the former defaults: the private phase hurts
    assert new <= 0.7 * op, (new, op)
    assert op <= op_old + 0.01  # centring does not cost Only-Public here


def test_class_scaled_start_keeps_ten_classes_and_grows_with_sqrt_c():
    """'class_scaled' (the default's burn-in rule): at C = 10 the same start as 'noise'; at C = 40 the burn-in
    alignment is halved, so (when the horizon is not capped by T) the horizon is 4x and the
    noise std, hence the start's scale, 2x that of 'noise'."""
    from mixdp_core.features.cache import get_features

    assert make_method("adamix").config.init_scale == "release_capped"  # class_scaled, capped past the burn-in
    ten = make_split(digits_featureset(), SplitSpec(public_per_class=3, seed=0))
    a, b = (make_method("adamix", target_epsilon=3.0, init_scale=r, noise="reproducible") for r in ("noise", "class_scaled"))
    for m in (a, b):
        m.fit(ten, on_step=lambda r: True)
    assert b.init_scale_ == pytest.approx(a.init_scale_, rel=1e-6)
    fs = get_features("synthetic", "pixels", classes=40, dim=64, train_per_class=40, test_per_class=5,
                      effective_rank=16, separation=6.0, shared_mean=1.0)
    forty = make_split(fs, SplitSpec(public_per_class=2, seed=0))
    a, b = (make_method("adamix", target_epsilon=8.0, init_scale=r, noise="reproducible") for r in ("noise", "class_scaled"))
    for m in (a, b):
        m.fit(forty, on_step=lambda r: True)
    # the fixed point over tau moves the ratio a little off 2 (tau depends on the start's scale)
    assert 1.7 < b.init_scale_ / a.init_scale_ < 2.3, (a.init_scale_, b.init_scale_)


def test_public_signal_share_is_unbiased_at_two_shots_where_class_means_are_not():
    """The cross-term estimate of rms ||mu_c|| / rms ||x|| from 2 rows per class: the naive
    estimate from the 2-row class means is inflated by the within-class spread (here 3x the
    signal), the estimator is not; 1 shot has no estimate (0)."""
    from mixdp_core.methods.adamix.references import public_signal_share

    rng = np.random.default_rng(0)
    C, D, s_true = 400, 256, 0.5
    mu = rng.normal(size=(C, D))
    mu *= s_true / np.linalg.norm(mu, axis=1, keepdims=True)  # ||mu_c|| = 0.5
    y = np.repeat(np.arange(C), 2)
    X = mu[y] + rng.normal(scale=1.0 / np.sqrt(D), size=(2 * C, D)) * np.sqrt(1 - s_true ** 2)
    rms_x = np.sqrt(np.mean(np.sum(X ** 2, axis=1)))
    est = public_signal_share(X, y, C)
    assert est == pytest.approx(s_true / rms_x, rel=0.05)
    naive = np.sqrt(np.mean([np.sum(X[y == c].mean(0) ** 2) for c in range(C)])) / rms_x
    assert naive > 1.3 * est  # what the estimator removes
    assert public_signal_share(X[::2], y[::2], C) == 0.0
    # a shift of every row, even by their own mean (the head's centring), changes nothing
    for shift in (np.full(D, 0.3), X.mean(axis=0)):
        assert public_signal_share(X - shift, y, C) == pytest.approx(est, rel=1e-9)


def test_signal_share_start_takes_its_alignment_from_the_public_rows():
    """init_scale='signal_share': the burn-in alignment is s_pub / sqrt(C - 1) instead of the
    assumed 0.3 sqrt(10 / C). Where the run outlasts the burn-in (here ε = 8) a smaller share
    (weaker rows) means a longer horizon, so a larger start; where T caps the horizon (ε = 0.5)
    both rules give the same start; at 1 shot the rule is 'class_scaled'."""
    from mixdp_core.features.cache import get_features
    from mixdp_core.methods.adamix.references import public_signal_share

    fs = get_features("synthetic", "pixels", classes=40, dim=64, train_per_class=40, test_per_class=5,
                      effective_rank=16, separation=6.0, shared_mean=1.0)

    def alpha(split, eps, rule):
        return make_method("adamix", target_epsilon=eps, init_scale=rule, noise="reproducible").fit(
            split, on_step=lambda r: True).init_scale_

    sp = make_split(fs, SplitSpec(public_per_class=3, seed=0))
    m = make_method("adamix").fit(sp, on_step=lambda r: True)
    Xp = m.feature_map_(sp.X_public)
    s = public_signal_share(Xp, sp.y_public, 40)
    assert 0.05 < s < 1.0
    # assumed alignment 0.3 sqrt(10/40) = 0.15 against s / sqrt(39): horizon ratio (0.15 sqrt(39) / s)^2,
    # the start's scale its square root (the noise std grows like sqrt(H)), up to the fixed point over tau
    expect = 0.15 * np.sqrt(39) / s
    ratio = alpha(sp, 8.0, "signal_share") / alpha(sp, 8.0, "class_scaled")
    assert 0.8 * expect < ratio < 1.25 * expect, (ratio, expect)
    assert alpha(sp, 0.5, "signal_share") == pytest.approx(alpha(sp, 0.5, "class_scaled"), rel=1e-6)
    one = make_split(fs, SplitSpec(public_per_class=1, seed=0))
    assert alpha(one, 8.0, "signal_share") == pytest.approx(alpha(one, 8.0, "class_scaled"), rel=1e-6)
