import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score, roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from mixdp_core.errors import DataError
from mixdp_core.evaluation import (
    auc_score,
    balanced_accuracy,
    cross_entropy_losses,
    loss_threshold_attack,
    minority_accuracy,
    per_class_accuracy,
    performance_boost,
    roc_curve,
    test_error,
)
from mixdp_core.evaluation.mia import balanced_indices
from mixdp_core.evaluation.pdp import pdp_summary


def test_error_and_accuracies_hand_computed():
    y = np.array([0, 0, 0, 1, 1, 2])
    p = np.array([0, 1, 0, 1, 1, 0])
    assert test_error(y, p) == pytest.approx(2 / 6)
    pca = per_class_accuracy(y, p, 4)
    assert pca[:3] == pytest.approx([2 / 3, 1.0, 0.0])
    assert np.isnan(pca[3])  # class 3 absent from the test labels
    assert balanced_accuracy(y, p, 4) == pytest.approx((2 / 3 + 1 + 0) / 3)
    assert balanced_accuracy(y, p, 4) == pytest.approx(balanced_accuracy_score(y, p))
    # minority = classes {1, 2}: 3 test samples, 2 correct
    assert minority_accuracy(y, p, np.array([1, 2])) == pytest.approx(2 / 3)
    assert np.isnan(minority_accuracy(y, p, np.array([3])))
    assert minority_accuracy(y, p, np.array([], dtype=np.int64)) is None  # balanced split: no minority class


def test_balanced_accuracy_matches_sklearn_random():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 7, 300)
    p = np.where(rng.random(300) < 0.6, y, rng.integers(0, 7, 300))
    assert balanced_accuracy(y, p, 7) == pytest.approx(balanced_accuracy_score(y, p))
    assert test_error(y, p) == pytest.approx(1 - np.mean(y == p))


def test_shape_mismatch_raises():
    with pytest.raises(DataError, match="y_pred"):
        test_error(np.array([0, 1]), np.array([0]))


def test_performance_boost_definition():
    # PB = (err_public - err_paragon) / (err_DP - err_paragon)
    assert performance_boost(0.3, err_public=0.5, err_paragon=0.1) == pytest.approx(0.4 / 0.2)
    assert performance_boost(0.5, err_public=0.5, err_paragon=0.1) == pytest.approx(1.0)
    assert performance_boost(0.1, err_public=0.5, err_paragon=0.1) == np.inf
    # both below the paragon: the ratio of two negatives read "2.00×" beside "use no private
    # method", and Only-Public below it turned a better private method into "0.67×": undefined
    assert performance_boost(0.09, err_public=0.08, err_paragon=0.10) == -np.inf
    assert performance_boost(0.07, err_public=0.08, err_paragon=0.10) == -np.inf
    assert performance_boost(0.12, err_public=0.08, err_paragon=0.10) == -np.inf


def test_a_negative_boost_is_never_shown_as_worse_than_only_public():
    """PB < 0 (or −∞) means an error below the paragon's, not a model worse than Only-Public:
    every view shows it as undefined; the recommendation says why."""
    from types import SimpleNamespace as NS

    from mixdp_core.evaluation.metrics import BOOST_UNDEFINED, format_boost
    from mixdp_core.evaluation.recommend import recommend

    beyond = performance_boost(0.091, err_public=0.505, err_paragon=0.1005)  # DP below the paragon
    assert beyond < 0 and format_boost(beyond) == BOOST_UNDEFINED
    assert format_boost(performance_boost(0.2, err_public=0.1, err_paragon=0.2)) == BOOST_UNDEFINED  # −∞
    assert format_boost(0.5) == "0.50×" and format_boost(np.inf) == "∞" and format_boost(np.nan) == "—"

    def run(method, seed, err, eps, private):
        m = {"test_error": err, "dataset": "d", "encoder": "e", "public_per_class": 5, "imbalance_ratio": 1.0,
             "target_delta": 1e-5, "private": private, "epsilon": eps}
        return NS(method=method, seed=seed, target_epsilon=eps if eps is not None else 3.0, metrics=m)

    runs = ([run("adamix", s, e, 8.0, True) for s, e in [(0, 0.090), (1, 0.092)]]
            + [run("paragon", s, e, None, False) for s, e in [(0, 0.100), (1, 0.101)]]
            + [run("only_public", s, e, 0.0, False) for s, e in [(0, 0.50), (1, 0.51)]])
    rec = recommend(runs)[0]
    assert rec.boost < 0
    sentence = rec.sentence()
    assert BOOST_UNDEFINED in sentence and "higher is better" not in sentence and "×" not in sentence


def test_cross_entropy_losses():
    s = np.array([[0.0, 0.0], [2.0, 0.0]])
    ce = cross_entropy_losses(s, np.array([0, 1]))
    assert ce == pytest.approx([np.log(2), -np.log(np.exp(0) / (np.exp(2) + 1))])


def test_auc_and_roc_match_sklearn_with_ties():
    rng = np.random.default_rng(1)
    m = np.round(rng.normal(0.5, 1, 200), 1)  # rounding creates ties
    n = np.round(rng.normal(0.0, 1, 200), 1)
    y = np.r_[np.ones(200), np.zeros(200)]
    s = np.r_[m, n]
    assert auc_score(m, n) == pytest.approx(roc_auc_score(y, s))
    fpr, tpr, thr = roc_curve(m, n)
    sfpr, stpr, _ = sk_roc_curve(y, s, drop_intermediate=False)
    assert fpr == pytest.approx(sfpr)
    assert tpr == pytest.approx(stpr)
    assert np.trapezoid(tpr, fpr) == pytest.approx(roc_auc_score(y, s))


def test_auc_hand_computed():
    # members {3, 1}, non-members {2, 0}: pairs won 3>2, 3>0, 1>0; lost 1<2 -> 3/4
    assert auc_score(np.array([3.0, 1.0]), np.array([2.0, 0.0])) == pytest.approx(0.75)
    assert auc_score(np.array([1.0]), np.array([1.0])) == pytest.approx(0.5)


def test_loss_threshold_attack_balanced_and_advantage():
    rng = np.random.default_rng(2)
    member_losses = rng.exponential(0.5, 500)  # members: lower loss
    nonmember_losses = rng.exponential(1.0, 120)
    res = loss_threshold_attack(member_losses, nonmember_losses, seed=3)
    assert res.member_index.size == res.nonmember_index.size == 120
    assert len(np.unique(res.member_index)) == 120
    y = np.r_[np.ones(120), np.zeros(120)]
    s = np.r_[-member_losses[res.member_index], -nonmember_losses]
    assert res.auc == pytest.approx(roc_auc_score(y, s))
    assert 0.5 < res.auc <= 1.0
    assert res.advantage == pytest.approx(np.max(np.abs(res.tpr - res.fpr)))
    # seeded: the same seed gives the same subsample, another seed another one
    again = loss_threshold_attack(member_losses, nonmember_losses, seed=3)
    assert np.array_equal(again.member_index, res.member_index)
    other = loss_threshold_attack(member_losses, nonmember_losses, seed=4)
    assert not np.array_equal(other.member_index, res.member_index)


def test_advantage_hand_computed():
    # perfectly separated -> TPR=1 at FPR=0 -> advantage 1, AUC 1
    res = loss_threshold_attack(np.array([0.1, 0.2]), np.array([1.0, 2.0]))
    assert res.auc == 1.0 and res.advantage == 1.0
    # identical distributions -> AUC 0.5, advantage 0
    res = loss_threshold_attack(np.array([1.0, 1.0]), np.array([1.0, 1.0]))
    assert res.auc == 0.5 and res.advantage == 0.0


def test_balanced_indices_smaller_side_untouched():
    mi, ni = balanced_indices(5, 9, seed=0)
    assert np.array_equal(mi, np.arange(5)) and ni.size == 5 and np.all(np.diff(ni) > 0)


def test_pdp_summary():
    s = pdp_summary(np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert s["pdp_epsilon_min"] == 1.0 and s["pdp_epsilon_max"] == 5.0
    assert s["pdp_epsilon_median"] == 3.0 and s["pdp_epsilon_mean"] == 3.0
    assert pdp_summary(None)["pdp_epsilon_max"] is None


def test_bad_labels_and_scores_are_refused_not_reinterpreted():
    """Labels outside [0, C), non-integer labels and NaN scores would silently change a metric
    (a dropped class, a truncated label, a NaN ranked as a sure member): one-line errors."""
    y, p = np.array([0, 1, 2, 2]), np.array([0, 1, 2, 0])
    assert balanced_accuracy(y, p) == pytest.approx(balanced_accuracy_score(y, p))
    assert balanced_accuracy(y, np.array([0, 1, 2, 7])) == pytest.approx(
        balanced_accuracy_score(y, np.array([0, 1, 2, 7])))  # a predicted label no class has: a miss
    with pytest.raises(DataError, match=r"y_true: labels must lie in \[0, 2\)"):
        balanced_accuracy(y, p, n_classes=2)  # was 1.0 (class 2 dropped); sklearn: 0.833
    with pytest.raises(DataError, match="y_pred: labels must be integers"):
        test_error([0, 1], [0.9, 1.2])  # was 0.0 (truncated)
    with pytest.raises(DataError, match="y_pred: labels must lie"):
        per_class_accuracy([0, 1], [0, 2 ** 40], 2)  # was an 8 TiB allocation
    with pytest.raises(DataError, match=r"y: labels must be integers in \[0, 2\)"):
        cross_entropy_losses(np.zeros((2, 2)), np.array([0, -1]))  # was the last class's loss
    with pytest.raises(DataError, match="NaN scores"):
        auc_score(np.array([np.nan, 1.0]), np.array([0.0, 0.5]))  # was 1.0


def test_auc_standard_error_matches_the_spread_of_simulated_aucs():
    """Hanley & McNeil's s.e. against the standard deviation of 300 simulated AUCs (binormal
    scores, 200 members and 200 non-members); and the Train card shows the estimate with it."""
    from mixdp_core.app_support.charts import OWNER_AUC_LABEL, metric_cards
    from mixdp_core.evaluation.mia import auc_standard_error

    rng = np.random.default_rng(0)
    for shift in (0.0, 1.0):
        aucs = [auc_score(rng.normal(shift, 1, 200), rng.normal(0, 1, 200)) for _ in range(300)]
        se = auc_standard_error(float(np.mean(aucs)), 200, 200)
        assert se == pytest.approx(np.std(aucs), rel=0.2)
    card = dict(metric_cards({"test_error": 0.1, "mia_auc": 0.5, "mia_n_per_side": 200}))[OWNER_AUC_LABEL]
    assert card == f"0.500 ± {1.96 * auc_standard_error(0.5, 200, 200):.3f}" and card.endswith("0.057")


def test_a_perfect_separation_still_has_an_interval_that_covers_the_truth():
    """Hanley–McNeil's s.e. is 0 at AUC = 1: "1.000 ± 0.000" for a perfect separation on 50 rows
    per side, whose 95 % interval covered a true AUC of 0.998 in 76 % of samples. Evaluated half
    a sample inside the boundary it is ± 0.02, and covers at least 95 % near the edge."""
    from scipy.stats import norm

    from mixdp_core.evaluation.mia import auc_standard_error

    assert 1.96 * auc_standard_error(1.0, 50, 50) == pytest.approx(0.02, abs=0.002)
    assert auc_standard_error(0.0, 50, 50) == pytest.approx(auc_standard_error(1.0, 50, 50)) and auc_standard_error(0.0, 50, 50) > 0
    assert auc_standard_error(0.5, 1, 1) > 0  # one row per side: the middle, never 0
    rng = np.random.default_rng(1)
    for shift in (4.0, 3.5):
        true = norm.cdf(shift / np.sqrt(2))
        hits = 0
        for _ in range(400):
            a = auc_score(rng.normal(shift, 1, 50), rng.normal(0, 1, 50))
            h = 1.96 * auc_standard_error(a, 50, 50)
            hits += a - h <= true <= a + h
        assert hits / 400 >= 0.95
