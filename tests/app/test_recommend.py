"""recommend(): one line per ε from stored runs (best mean, spread, seed noise, boost)."""

from types import SimpleNamespace

import pytest

from mixdp_core.evaluation.recommend import recommend


def run(method, eps, err, *, private=True, seed=0, dataset="digits"):
    m = {"test_error": err, "private": private, "epsilon": eps * 0.99 if private else None,
         "dataset": dataset, "encoder": "pixels", "public_per_class": 5, "imbalance_ratio": 1.0,
         "target_delta": 1e-5}
    return SimpleNamespace(method=method, target_epsilon=eps, metrics=m, config={}, seed=seed)


def test_best_method_per_eps_with_spread_and_noise():
    runs = [run("adamix", 1.0, e, seed=i) for i, e in enumerate((0.10, 0.11, 0.12))]
    runs += [run("ngd", 1.0, e, seed=i) for i, e in enumerate((0.30, 0.31, 0.32))]
    runs += [run("adamix", 3.0, e, seed=i) for i, e in enumerate((0.08, 0.10))]
    runs += [run("ngd", 3.0, e, seed=i) for i, e in enumerate((0.085, 0.095))]
    recs = recommend(runs)
    assert [r.epsilon for r in recs] == [1.0, 3.0]
    r1, r3 = recs
    assert r1.best.method == "adamix" and r1.best.n == 3
    assert r1.best.mean == pytest.approx(0.11) and r1.best.std == pytest.approx(0.01)
    assert r1.runner_up.method == "ngd" and r1.within_noise is False
    assert r3.within_noise is True  # means 0.09 vs 0.09: no decision
    assert "within seed noise" in r3.sentence()
    assert "beyond seed noise" in r1.sentence()
    assert r1.best.epsilon_spent_max == pytest.approx(0.99)


def test_single_seed_is_undecidable_and_single_method_said():
    recs = recommend([run("adamix", 2.0, 0.1), run("ngd", 2.0, 0.2)])
    assert recs[0].within_noise is None and "one seed" in recs[0].sentence()
    solo = recommend([run("adamix", 2.0, 0.1)])[0]
    assert solo.runner_up is None and "only private method" in solo.sentence()


def test_performance_boost_needs_both_references_of_the_same_setting():
    base = [run("adamix", 1.0, 0.10), run("paragon", 1.0, 0.05, private=False)]
    assert recommend(base)[0].boost is None
    assert "Only-Public" in recommend(base)[0].sentence()
    other = run("only_public", 1.0, 0.30, private=False, dataset="cifar10")
    assert recommend(base + [other])[0].boost is None  # reference of another dataset
    r = recommend(base + [run("only_public", 1.0, 0.30, private=False)])[0]
    assert r.boost == pytest.approx((0.30 - 0.05) / (0.10 - 0.05))
    assert "5.00×" in r.sentence()


def test_unfinished_and_nonprivate_runs_are_not_recommended():
    unfinished = SimpleNamespace(method="ppgd", target_epsilon=1.0, metrics={}, config={})
    recs = recommend([unfinished, run("paragon", 1.0, 0.01, private=False), run("adamix", 1.0, 0.2)])
    assert len(recs) == 1 and recs[0].best.method == "adamix"
    assert recommend([]) == []
