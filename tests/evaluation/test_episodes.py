"""N-way K-shot episodes (CD-FSL protocol): balanced and reproducible sampling, a clear error
when too few classes are large enough, the 95 % interval as the protocol computes it, and
fits on the support set as the private data."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from mixdp_core.errors import ConfigError, DataError
from mixdp_core.evaluation.episodes import (
    N_EPISODES, N_QUERY, N_WAY, SHOTS, Episode, episode_split, mean_ci95, run_episodes, sample_episodes,
)

#: 8 classes of sizes 40..75 (class c has 40 + 5c rows), shuffled
Y = np.random.default_rng(3).permutation(np.repeat(np.arange(8), [40 + 5 * c for c in range(8)]))


def test_defaults_are_the_papers_protocol():
    assert (N_WAY, SHOTS, N_QUERY, N_EPISODES) == (5, (5, 20, 50), 15, 60)


@pytest.mark.parametrize("n_way,k,q", [(5, 5, 15), (3, 20, 10), (8, 1, 1), (2, 50, 15)])
def test_every_episode_is_balanced_and_disjoint(n_way, k, q):
    eps = sample_episodes(Y, n_way, k, q, 25, seed=1)
    assert len(eps) == 25
    for ep in eps:
        assert isinstance(ep, Episode)
        assert len(set(ep.classes.tolist())) == n_way
        assert ep.support.shape == (n_way * k,) and ep.query.shape == (n_way * q,)
        assert not set(ep.support.tolist()) & set(ep.query.tolist())
        assert len(set(ep.support.tolist())) == n_way * k and len(set(ep.query.tolist())) == n_way * q
        # class by class, in the order of ep.classes: exactly k support and q query each
        assert np.array_equal(Y[ep.support], np.repeat(ep.classes, k))
        assert np.array_equal(Y[ep.query], np.repeat(ep.classes, q))


def test_only_classes_with_enough_samples_are_drawn():
    # 5-shot + 15 query = 20 rows needed: classes 0..2 have 10, classes 3..9 have 30
    y = np.repeat(np.arange(10), [10] * 3 + [30] * 7)
    drawn = {c for ep in sample_episodes(y, 5, 5, 15, 200, seed=0) for c in ep.classes.tolist()}
    assert drawn == set(range(3, 10))


def test_same_seed_same_episodes_other_seed_other_episodes():
    a, b = sample_episodes(Y, 5, 5, 15, 10, seed=7), sample_episodes(Y, 5, 5, 15, 10, seed=7)
    for x, z in zip(a, b):
        assert all(np.array_equal(u, v) for u, v in zip(x, z))
    c = sample_episodes(Y, 5, 5, 15, 10, seed=8)
    assert any(not np.array_equal(x.support, z.support) for x, z in zip(a, c))
    assert any(not np.array_equal(x.classes, z.classes) for x, z in zip(a, c))


def test_too_few_large_classes_is_a_clear_error():
    y = np.repeat(np.arange(5), [30, 30, 30, 30, 12])  # only 4 classes reach 5 + 15 = 20
    with pytest.raises(DataError) as e:
        sample_episodes(y, 5, 5, 15, 60, seed=0)
    msg = str(e.value)
    assert "\n" not in msg
    assert "need 5 classes with at least 20 samples each; 4 of 5 classes have that many" in msg
    assert "largest class: 30 samples" in msg
    # the upper bounds too: a billion episodes drew on past a minute, growing
    for bad in ({"n_way": 1}, {"k_shot": 0}, {"n_query": True}, {"n_episodes": 2.5}, {"seed": -1},
                {"n_episodes": 10**9}, {"n_way": 10**6}, {"k_shot": 10**6}, {"n_query": 10**6}):
        kw = {**dict(n_way=2, k_shot=1, n_query=1, n_episodes=1, seed=0), **bad}
        with pytest.raises(ConfigError, match=next(iter(bad))):
            sample_episodes(y, **kw)


def test_ci95_is_student_t_over_root_n():
    # by hand: mean 0.75; deviations ±0.15, ±0.05 -> sample variance (2·0.0225 + 2·0.0025)/3 = 0.0166667,
    # s = 0.1290994; t(0.975, 3) = 3.1824463; half-width 3.1824463 · 0.1290994 / √4 = 0.2054260
    mean, half = mean_ci95([0.6, 0.8, 0.7, 0.9])
    assert mean == pytest.approx(0.75) and half == pytest.approx(0.2054260, abs=1e-6)
    m1, h1 = mean_ci95([0.4])  # one episode: no spread, not "± 0"
    assert m1 == pytest.approx(0.4) and math.isnan(h1)
    with pytest.raises(DataError, match="accuracies"):
        mean_ci95([])


def test_episode_split_support_is_private_query_is_test():
    X = np.arange(len(Y), dtype=np.float32)[:, None].repeat(2, axis=1)  # row i carries its index
    Xp = np.full((16, 2), -1, np.float32)
    yp = np.repeat(np.arange(8), 2)
    ep = sample_episodes(Y, 3, 4, 2, 1, seed=0)[0]
    text = np.arange(16, dtype=np.float32).reshape(8, 2)
    s = episode_split(X, Y, ep, public=(Xp, yp), class_names=[f"c{i}" for i in range(8)], text_embeddings=text)
    assert np.array_equal(s.X_private[:, 0].astype(int), ep.support)
    assert np.array_equal(s.X_test[:, 0].astype(int), ep.query)
    assert np.array_equal(s.y_private, np.repeat([0, 1, 2], 4)) and np.array_equal(s.y_test, np.repeat([0, 1, 2], 2))
    assert sorted(s.y_public.tolist()) == [0, 0, 1, 1, 2, 2]  # the public rows of the episode's classes only
    assert s.class_names == [f"c{c}" for c in ep.classes.tolist()] and s.n_classes == 3
    assert np.array_equal(s.text_embeddings, text[ep.classes]) and s.private_counts.tolist() == [4, 4, 4]
    empty = episode_split(X, Y, ep)
    assert empty.X_public.shape == (0, 2)


def test_run_episodes_fits_on_the_support_and_scores_the_query(digits_features):
    from mixdp_core.methods import make_method

    fs = digits_features
    X, y = np.concatenate([fs.X_train, fs.X_test]), np.concatenate([fs.y_train, fs.y_test])
    pub = (fs.X_train[:50], fs.y_train[:50])  # rows also in the pool: fine for this check
    kw = dict(epsilon=2.0, n_way=5, k_shot=5, n_query=4, n_episodes=6, seed=0, public=pub)
    ref = run_episodes(functools.partial(make_method, "paragon"), X, y, **kw)
    assert ref.accuracies.shape == (6,) and ref.mean > 0.7 and ref.epsilons == [None] * 6
    assert (ref.mean, ref.ci95) == mean_ci95(ref.accuracies)
    again = run_episodes(functools.partial(make_method, "paragon"), X, y, **kw)
    assert np.array_equal(again.accuracies, ref.accuracies)  # same episodes, deterministic method
    dp = run_episodes(functools.partial(make_method, "dppl_public"), X, y, **kw)  # takes public_pool
    assert all(0 < e <= 2.0 + 1e-9 for e in dp.epsilons) and np.all((0 <= dp.accuracies) & (dp.accuracies <= 1))
    with pytest.raises(DataError, match="public"):  # needs public rows: none given
        run_episodes(functools.partial(make_method, "only_public"), X, y, **dict(kw, public=None))


def test_run_episodes_checks_every_fit_against_its_ledger(digits_features, monkeypatch):
    """An episode whose releases do not fit the plan is never reported (the runner's check)."""
    from mixdp_core.accounting import PlanExceededError
    from mixdp_core.methods import METHODS, make_method

    fs = digits_features
    X, y = np.concatenate([fs.X_train, fs.X_test]), np.concatenate([fs.y_train, fs.y_test])

    def broken(self):
        raise PlanExceededError("released more than planned")

    monkeypatch.setattr(METHODS.get("dppl_public"), "verify_privacy", broken)
    with pytest.raises(PlanExceededError):
        run_episodes(functools.partial(make_method, "dppl_public"), X, y, epsilon=2.0, n_way=5, k_shot=5,
                     n_query=4, n_episodes=2, seed=0, public=(fs.X_train[:50], fs.y_train[:50]))
