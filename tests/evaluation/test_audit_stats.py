"""Statistics of the audits: exact CP bounds, coverage of the ε lower bound, the one-run bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from mixdp_core.evaluation.audit.stats import (
    clopper_pearson_upper,
    epsilon_lower_bound,
    membership_metrics,
    one_run_epsilon,
    one_run_epsilon_lower_bound,
    one_run_p_value,
    tpr_at_fpr,
)
from mixdp_core.evaluation.mia import class_matched_indices


def test_clopper_pearson_upper_exact_values():
    # k = 0: closed form 1 - a^(1/n)
    assert clopper_pearson_upper(0, 100, 0.05) == pytest.approx(1 - 0.05 ** (1 / 100), rel=1e-9)
    assert clopper_pearson_upper(100, 100, 0.05) == 1.0
    # defining property: P[Binom(n, p_hi) <= k] = a
    k, n, a = 7, 250, 0.025
    p_hi = float(clopper_pearson_upper(k, n, a))
    assert st.binom.cdf(k, n, p_hi) == pytest.approx(a, rel=1e-6)


def _rr_trials(eps, n, rng):
    """Randomized response: the tight pure ε-DP mechanism (δ = 0)."""
    q = math.exp(eps) / (1 + math.exp(eps))
    pos = (rng.random(n) < q).astype(float)
    neg = (rng.random(n) < 1 - q).astype(float)
    return pos, neg


def test_epsilon_lower_bound_coverage_on_a_tight_mechanism():
    """On randomized response ε_lo may exceed the true ε at most ~5 % of the time.

    A bound computed from point estimates (no CP), or with the threshold chosen on the same
    trials it is evaluated on, exceeds the truth about half of the time and fails this test.
    """
    rng = np.random.default_rng(0)
    eps = 1.0
    over = 0
    reps = 200
    for i in range(reps):
        pos, neg = _rr_trials(eps, 400, rng)
        b = epsilon_lower_bound(pos, neg, delta=0.0, seed=i)
        over += b.epsilon_lower > eps
    assert over / reps <= 0.05  # 1 of 200 at this seed


def test_the_roc_band_is_pointwise_not_a_test():
    """Why the alarm never reads the chart's band: on a mechanism that meets its μ-GDP claim
    exactly (the optimal attack's scores, N(μ, 1) against N(0, 1)), the band's pessimistic edge
    crosses the claimed trade-off somewhere along the curve in more than 5 % of audits, while the
    held-out-threshold bound on the same scores stays within its confidence."""
    from types import SimpleNamespace

    from mixdp_core.accounting import max_tpr
    from mixdp_core.evaluation.audit.stats import roc_band
    from mixdp_core.evaluation.mia import roc_curve

    rng = np.random.default_rng(0)
    mu, n, reps = 1.0, 2000, 100
    rep = SimpleNamespace(epsilon=1.0, delta=1e-5, mu=mu)
    band_cross = bound_over = 0
    for i in range(reps):
        pos, neg = rng.normal(mu, 1, n), rng.normal(0, 1, n)
        f, t, _ = roc_curve(pos, neg)
        _, f_hi, t_lo, _ = roc_band(f, t, n, n, confidence=0.95)
        band_cross += bool(np.any(t_lo > max_tpr(rep, f_hi) + 1e-12))
        bound_over += epsilon_lower_bound(pos, neg, delta=1e-5, seed=i, gdp=True).mu_lower > mu
    assert band_cross / reps > 0.05
    assert bound_over / reps <= 0.05


def test_epsilon_lower_bound_has_power():
    rng = np.random.default_rng(1)
    pos, neg = _rr_trials(2.0, 5000, rng)
    b = epsilon_lower_bound(pos, neg, delta=0.0, seed=0)
    assert 1.4 < b.epsilon_lower <= 2.0
    assert b.confidence == 0.95 and b.n_trials == 10000


def test_gdp_bound_coverage_and_power():
    rng = np.random.default_rng(2)
    mu = 1.0
    over = 0
    for i in range(100):
        b = epsilon_lower_bound(rng.normal(mu, 1, 500), rng.normal(0, 1, 500), delta=1e-5, seed=i, gdp=True)
        over += b.mu_lower > mu
    assert over <= 6
    b = epsilon_lower_bound(rng.normal(mu, 1, 20000), rng.normal(0, 1, 20000), delta=1e-5, gdp=True)
    assert 0.8 < b.mu_lower <= 1.0


def _p_value_reference(m, r, v, eps, delta):
    """Straight transcription of the loop in Steinke et al. 2023, App. D."""
    q = 1 / (1 + math.exp(-eps))
    beta = st.binom.sf(v - 1, r, q)
    alpha, s = 0.0, 0.0
    for i in range(1, v + 1):
        s += st.binom.pmf(v - i, r, q)
        if s > i * alpha:
            alpha = s / i
    return min(beta + alpha * delta * 2 * m, 1)


@pytest.mark.parametrize("m,r,v,eps,delta", [(1000, 100, 80, 1.0, 1e-5), (1000, 100, 60, 0.5, 1e-3),
                                             (500, 20, 20, 2.0, 1e-5), (200, 50, 10, 0.1, 0.0)])
def test_one_run_p_value_matches_the_paper(m, r, v, eps, delta):
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(_p_value_reference(m, r, v, eps, delta), rel=1e-9)


def test_one_run_epsilon_is_the_largest_rejected():
    e = one_run_epsilon(1000, 100, 90, 1e-5, 0.05)
    assert one_run_p_value(1000, 100, 90, e, 1e-5) < 0.05 <= one_run_p_value(1000, 100, 90, e + 1e-6, 1e-5)
    assert one_run_epsilon(1000, 100, 50, 1e-5, 0.05) == 0.0  # chance accuracy proves nothing


def test_one_run_bound_sound_on_randomized_response():
    """m canaries through ε-randomized-response: ε_lo above ε at most ~5 % of runs."""
    rng = np.random.default_rng(3)
    eps, m = 1.0, 1000
    over = 0
    for _ in range(30):
        b = rng.random(m) < 0.5
        flip = rng.random(m) < 1 / (1 + math.exp(eps))
        score = np.where(b ^ flip, 1.0, 0.0) + 1e-3 * rng.random(m)
        over += one_run_epsilon_lower_bound(score, b, delta=0.0).epsilon_lower > eps
    assert over <= 3


def test_tpr_at_low_fpr_and_metrics():
    fpr = np.array([0, 0, 0.005, 0.01, 0.5, 1])
    tpr = np.array([0, 0.1, 0.2, 0.3, 0.8, 1])
    assert tpr_at_fpr(fpr, tpr, 1e-3) == 0.1
    assert tpr_at_fpr(fpr, tpr, 1e-2) == 0.3
    m = membership_metrics(np.array([3.0, 2, 1]), np.array([0.0, -1, 2.5]),
                           member_labels=np.array([0, 1, 1]), nonmember_labels=np.array([0, 1, 1]), n_classes=3)
    assert m["auc"] == pytest.approx(7 / 9)
    assert m["per_class_auc"][0] == 1.0 and m["per_class_auc"][2] is None


def test_class_matched_indices_balance_every_class():
    ym = np.array([0] * 50 + [1] * 5 + [2] * 10)
    yn = np.array([0] * 10 + [1] * 10 + [2] * 10)
    mi, ni = class_matched_indices(ym, yn, seed=0)
    assert np.bincount(ym[mi]).tolist() == [10, 5, 10]
    assert np.bincount(yn[ni]).tolist() == [10, 5, 10]
    assert len(set(mi.tolist())) == mi.size


def test_metrics_with_one_side_empty_are_none_not_an_error():
    m = membership_metrics(np.array([1.0, 2.0]), np.zeros(0))
    assert m["auc"] is None and m["tpr_at_fpr_0.01"] is None and m["n_members"] == 2


def test_one_run_bound_corrects_over_the_distinct_tests_only():
    """At m = 10 every guess fraction gives k = 1: one test, run four times, had its level divided
    by 4 (a weaker bound for nothing). The correction counts distinct k; at m = 1,000 the four
    fractions are four tests."""
    from mixdp_core.evaluation.audit.stats import one_run_epsilon, one_run_epsilon_lower_bound

    s = np.arange(10, dtype=float)
    inc = s >= 5
    b = one_run_epsilon_lower_bound(s, inc, delta=1e-5, confidence=0.95)
    assert b.details["bonferroni_over"] == 1
    assert b.epsilon_lower == pytest.approx(one_run_epsilon(10, 2, 2, 1e-5, 0.05))
    big = one_run_epsilon_lower_bound(np.arange(1000.0), np.arange(1000) >= 500, delta=1e-5)
    assert big.details["bonferroni_over"] == 4
