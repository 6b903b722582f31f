"""Mechanisms checked against independent computations: DP-LS's sensitivity, the classroom's
class means, honest tuning's hidden K, and the labels of ε = 0 / ε = ∞."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from mixdp_core.data.splits import SplitSpec, make_split
from mixdp_core.methods import make_method
from mixdp_core.methods.prototypes.baselines import DPLS, DPLS_COV_SENSITIVITY
from tests.methods.conftest import digits_featureset


def _gaussian_delta(eps: float, mu: float) -> float:
    """δ(ε) of μ-GDP (Dong, Roth & Su 2022, Cor. 2.13), written out here independently."""
    return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2))


@pytest.fixture(scope="module")
def split():
    return make_split(digits_featureset(n_train=300), SplitSpec(public_per_class=3, seed=2))


def _upper_triangle_norm(v: np.ndarray) -> float:
    M = np.outer(v, v)
    return float(np.linalg.norm(M[np.triu_indices(len(v))]))


def test_dpls_released_upper_triangle_has_sensitivity_sqrt_three_quarters():
    rng = np.random.default_rng(0)
    D = 9
    worst = 0.0
    for _ in range(2000):  # random rows and every axis-aligned row
        x = rng.standard_normal(D - 1) * rng.random(D - 1) ** 4
        worst = max(worst, _upper_triangle_norm(DPLS._stats(x[None, :])[0]))
    for i in range(D - 1):
        e = np.zeros(D - 1)
        e[i] = 1.0
        worst = max(worst, _upper_triangle_norm(DPLS._stats(e[None, :])[0]))
    assert worst == pytest.approx(math.sqrt(0.75), abs=1e-12)  # attained on an axis
    assert DPLS_COV_SENSITIVITY == pytest.approx(math.sqrt(0.75))


def test_dpls_noise_is_calibrated_at_its_true_sensitivity(split):
    m = make_method("dp_ls", target_epsilon=1.0, noise="reproducible").fit(split)
    sA, sb = m.noise_multiplier_
    # μ of the two Gaussians in units of their sensitivities, composed: independent formula
    mu = math.sqrt((DPLS_COV_SENSITIVITY / sA) ** 2 + (1.0 / sb) ** 2)
    assert _gaussian_delta(1.0, mu) == pytest.approx(1e-5, rel=1e-3)
    assert m.privacy_.epsilon == pytest.approx(1.0, abs=1e-6)
    # the noise on A is the unit-sensitivity noise scaled by √¾ (it was 1 before: ε overstated)
    assert sA == pytest.approx(DPLS_COV_SENSITIVITY / math.sqrt(2 * m.rho_ * m.config.cov_fraction))


def test_classroom_class_means_release_sum_and_count_at_the_target(tmp_path):
    from mixdp_core.app_support.classroom import CLASS_MEAN_MECHANISM, noisy_class_means

    noisy_class_means(1.0, cache_dir=tmp_path)  # warm the feature cache: every call below reads it
    d = noisy_class_means(1.0, cache_dir=tmp_path, noise="reproducible")
    mu = math.sqrt(2.0) / d["sigma"]  # two unit-sensitivity Gaussian releases per class
    assert _gaussian_delta(1.0, mu) == pytest.approx(1e-5, rel=1e-3)
    assert "add or remove one image" in CLASS_MEAN_MECHANISM and "sensitivity 1" in CLASS_MEAN_MECHANISM
    assert all(float(c).is_integer() for c in d["noisy_counts"])
    # the shown average is noisy sum / noisy count: far from clean divided by the exact n
    # would only happen with much smaller noise; check the per-pixel error is of size σ/n
    err = np.abs(d["noisy"] - d["clean"]).mean()
    assert 0.2 * d["noise_std"] < err < 5 * d["noise_std"]
    d2 = noisy_class_means(1.0, cache_dir=tmp_path, noise="reproducible")
    np.testing.assert_array_equal(d["noisy"], d2["noisy"])
    d3 = noisy_class_means(1.0, cache_dir=tmp_path)  # secure by default
    assert not np.array_equal(d["noisy"], d3["noisy"])


def test_honest_tuning_releases_the_selected_run_only(split):
    m = make_method("adamix", target_epsilon=3.0, honest_tuning=True, tuning_gamma=0.2).fit(split)
    assert not hasattr(m, "tuning_repetitions_")
    # the selection's one record, and a record of the corrected model where the released run's
    # noisy pilot found imbalance (post-processing; the same step and ε)
    assert len(m.history_) == 1 + m.prior_corrected_ and m.history_[0].total_steps == 1
    assert all(h.step == 1 and h.total_steps == 1 for h in m.history_)
    assert m.steps_ == m.calibrated_steps_  # one repetition's releases, whatever K was
    mech = m.privacy_.mechanism
    assert "expected" in mech and "hidden" in mech and " K = " not in mech
    # the repetition's releases are described as what they are (not "count + T − 1 NoisyGD steps")
    assert f"{m.steps_} Gaussian releases" in mech and "NoisyGD steps" not in mech
    from mixdp_core.accounting import tnb_expected_count

    assert m.expected_repetitions_ == pytest.approx(tnb_expected_count(m.config.tuning_eta, 0.2))
    assert m.privacy_.epsilon <= 3.0 + 1e-9


def test_epsilon_labels_of_the_references(split):
    from mixdp_core.evaluation.report import evaluate

    op = evaluate(make_method("only_public").fit(split), split).metrics
    assert op["epsilon"] == 0.0 and op["epsilon_label"].startswith("0")
    pg = evaluate(make_method("paragon").fit(split), split).metrics
    assert pg["epsilon"] is None and pg["epsilon_label"].startswith("∞")
    fp = evaluate(make_method("fully_private", target_epsilon=2.0).fit(split), split).metrics
    assert fp["noise"] == "secure" and float(fp["epsilon_label"]) == pytest.approx(fp["epsilon"], rel=1e-3)
    fr = evaluate(make_method("fully_private", target_epsilon=2.0, noise="reproducible").fit(split), split).metrics
    assert fr["noise"] == "reproducible" and "NOT private" in fr["noise_label"]
