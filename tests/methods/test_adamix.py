"""Run-level checks of the AdaMix-family methods on small digits splits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mixdp_core import accounting
from mixdp_core.errors import DataError
from mixdp_core.methods import make_method
from mixdp_core.methods._linear import fit_logistic, fit_public, l2_normalize

from . import _gdp



def _last_release(m):
    """The run's last release record (the prior correction's record, post-processing, follows it)."""
    return next(r for r in reversed(m.history_) if "prior_correction" not in r.extra)

def _err(m, split):
    return float(np.mean(m.predict(split.X_test) != split.y_test))


@pytest.mark.parametrize("name", ["fully_private", "ngd", "adamix", "ppgd"])
def test_steps_and_epsilon_match_independent_accounting(small_split, name):
    m = make_method(name, target_epsilon=1.5, target_delta=1e-5, noise_multiplier=5.0).fit(small_split)
    T = accounting.calibrate_steps(noise_multiplier=5.0, target_epsilon=1.5, target_delta=1e-5)
    assert T == _gdp.max_steps(5.0, 1.5, 1e-5)
    # the first record is the noisy count (sensitivity 1, std sigma) or, where the loss is class-balanced,
    # the class histogram worth k releases (std sigma/sqrt(k)); the rest are gradient steps
    C = small_split.n_classes
    a = 0.3 * np.sqrt(10 / C)
    balanced_loss = getattr(m.config, "class_balance", "none") != "none" and m.config.schedule == "smooth"
    k = max(1, round(a / (1 + a) * T)) if balanced_loss else 1
    assert m.count_releases_ == k and m.steps_ == T and "noisy_count" in m.history_[0].extra
    assert m.privacy_.epsilon == pytest.approx(_gdp.noisygd_epsilon(5.0, T, 1e-5), rel=1e-6)
    assert m.privacy_.epsilon <= 1.5
    assert _gdp.noisygd_epsilon(5.0, T + 1, 1e-5) > 1.5  # T is the largest admissible
    eps_curve = [h.epsilon_spent for h in m.history_]
    assert eps_curve == pytest.approx([_gdp.noisygd_epsilon(5.0, t, 1e-5) for t in range(1, T + 1)], rel=1e-6)
    assert m.noise_multiplier_ == 5.0
    assert m.pdp_sq_ratio_sum_.shape == (len(small_split.y_private),)
    eps_i = accounting.pdp_epsilon(m.pdp_sq_ratio_sum_, noise_multiplier=5.0, delta=1e-5)
    assert np.all(eps_i <= m.privacy_.epsilon + 1e-9)


def test_stop_request_reports_executed_steps(small_split):
    seen = []

    def cb(rec):
        seen.append(rec.step)
        return rec.step == 3

    m = make_method("adamix", target_epsilon=2.0, histogram_share=0.0).fit(small_split, on_step=cb)
    assert seen == [1, 2, 3] and m.steps_ == 3 and len(m.history_) == 3
    assert m.privacy_.epsilon == pytest.approx(_gdp.noisygd_epsilon(20.0, 3, 1e-5), rel=1e-6)  # count + 2 steps
    assert _last_release(m).epsilon_spent == pytest.approx(m.privacy_.epsilon, rel=1e-9)
    assert m.calibrated_steps_ > 3 and m.stopped_early_


def test_always_clipped_samples_have_pdp_equal_to_run_epsilon(small_split):
    # tau far below every gradient norm: every sample is clipped at every step, r_{i,t} = 1
    m = make_method("ngd", target_epsilon=1.0, noise_multiplier=4.0, clip_norm=1e-7).fit(small_split)
    np.testing.assert_allclose(m.pdp_sq_ratio_sum_, m.steps_, rtol=1e-9)  # the count too has r = 1
    eps_i = accounting.pdp_epsilon(m.pdp_sq_ratio_sum_, noise_multiplier=4.0, delta=1e-5)
    np.testing.assert_allclose(eps_i, m.privacy_.epsilon, rtol=1e-9)


def test_adamix_pdp_below_worst_case(small_split):
    m = make_method("adamix", target_epsilon=2.0, noise_multiplier=5.0, projection="paper").fit(small_split)
    eps_i = accounting.pdp_epsilon(m.pdp_sq_ratio_sum_, noise_multiplier=5.0, delta=1e-5)
    assert np.all(eps_i <= m.privacy_.epsilon + 1e-9)
    assert np.median(eps_i) < m.privacy_.epsilon  # projection + unclipped samples lose less


def test_adaptive_clip_is_public_percentile_of_autograd_norms(small_split):
    m = make_method("adamix", target_epsilon=0.5, noise_multiplier=10.0, clip_percentile=75).fit(small_split)
    Xp = m.feature_map_(small_split.X_public)  # the head's input (public-mean centred)
    W0 = fit_public(Xp, small_split.y_public, 10, l2=m.public_l2_) * m.init_scale_  # the (rescaled) public start
    w = torch.tensor(W0.astype(np.float64), requires_grad=True)
    norms = []
    for i in range(len(Xp)):
        loss = torch.nn.functional.cross_entropy(
            torch.tensor(Xp[i : i + 1], dtype=torch.float64) @ w, torch.tensor(small_split.y_public[i : i + 1])
        )
        (g,) = torch.autograd.grad(loss, w)
        norms.append(float(g.norm()))
    assert m.history_[1].clip_norm == pytest.approx(np.percentile(norms, 75), rel=1e-4)  # record 0 = count


def test_paragon_and_baselines_beat_chance(digits_split):
    par = make_method("paragon").fit(digits_split)
    pub = make_method("only_public").fit(digits_split)
    assert _err(par, digits_split) < 0.12
    assert _err(pub, digits_split) < 0.35
    assert _err(par, digits_split) < _err(pub, digits_split)
    assert par.privacy_ is None and not pub.uses_private_data


def test_adamix_uses_private_data_at_large_epsilon(digits_split):
    pub = _err(make_method("only_public").fit(digits_split), digits_split)
    ada = _err(make_method("adamix", target_epsilon=8.0, seed=0).fit(digits_split), digits_split)
    fp1 = _err(make_method("fully_private", target_epsilon=1.0, seed=0).fit(digits_split), digits_split)
    assert ada < pub - 0.03  # private data helps at eps = 8
    assert ada < fp1


def test_zero_shot_and_text_init(digits_split):
    zs = make_method("zero_shot").fit(digits_split)
    T = digits_split.text_embeddings
    np.testing.assert_allclose(zs.W_, 100.0 * (T / np.linalg.norm(T, axis=1, keepdims=True)).T, rtol=1e-5)
    assert _err(zs, digits_split) < 0.3  # class-mean "text" embeddings classify digits
    m = make_method("adamix", init="text", target_epsilon=0.3).fit(digits_split, on_step=lambda r: True)
    assert m.steps_ == 1
    import dataclasses

    no_text = dataclasses.replace(digits_split, text_embeddings=None)
    with pytest.raises(DataError, match="text"):
        make_method("zero_shot").fit(no_text)
    with pytest.raises(DataError, match="CLIP"):
        make_method("adamix", init="text").fit(no_text)


@pytest.mark.parametrize("schedule", ["smooth", "constant"])
def test_optimistic_tuning_candidates_draw_independent_reproducible_noise(small_split, monkeypatch, schedule):
    """Every candidate drew the gradient noise of one (seed, stream): the differences of their
    releases were noise-free functions of the private data, while the ledger composed them as
    independent draws. Each has its own stream now; a single run keeps the former one."""
    from mixdp_core.methods.adamix import engine

    streams, real = [], engine.noise_rng
    monkeypatch.setattr(engine, "noise_rng", lambda src, seed, stream: streams.append(stream) or real(src, seed, stream))
    kw = dict(target_epsilon=2.0, seed=0, noise="reproducible", schedule=schedule)
    make_method("adamix", optimistic_tuning=True, **kw).fit(small_split)
    assert len(streams) >= 3 and len(set(streams)) == len(streams) and streams[0] == 0xADA  # one per candidate
    streams.clear()
    make_method("adamix", **kw).fit(small_split)
    assert streams == [0xADA]


def test_optimistic_tuning_reports_composed_privacy(small_split):
    m = make_method("ngd", target_epsilon=1.5, noise_multiplier=5.0, optimistic_tuning=True).fit(small_split)
    T = accounting.calibrate_steps(noise_multiplier=5.0, target_epsilon=1.5, target_delta=1e-5)
    # the noisy count is released once and reused by every candidate; the public-start guard
    # is released once, after the best candidate
    Tg = T - 2
    assert m.steps_ == 1 + 3 * Tg + 1
    assert m.privacy_.epsilon == pytest.approx(_gdp.noisygd_epsilon(5.0, 2 + 3 * Tg, 1e-5), rel=1e-6)
    assert m.privacy_.epsilon > 1.5
    # step records count and account cumulatively over the candidate runs
    assert [h.step for h in m.history_] == list(range(1, 3 * Tg + 3))
    assert "guard_noisy_gain" in _last_release(m).extra
    assert _last_release(m).epsilon_spent == pytest.approx(m.privacy_.epsilon, rel=1e-9)
    assert m.history_[Tg + 1].epsilon_spent == pytest.approx(_gdp.noisygd_epsilon(5.0, Tg + 2, 1e-5), rel=1e-6)
    # the runner's check passes: the plan is the composition the option declares, not the target
    assert m.verify_privacy() == pytest.approx(m.privacy_.epsilon, rel=1e-9)


def test_theorem3_output_is_weighted_average_of_iterates(small_split):
    # With the public gradient only (private part clipped to ~0, noise ~0) the iterates are
    # deterministic; recompute w_bar = 2/(T(T+1)) sum_t t w_t by hand.
    from mixdp_core.methods.adamix.engine import NoisyGDOptions, NoisyGDProblem, run_noisygd

    Xp = l2_normalize(small_split.X_public)
    yp = small_split.y_public
    Xq = l2_normalize(small_split.X_private[:20])
    prob = NoisyGDProblem(Xq, small_split.y_private[:20], Xp, yp, None, None, 10)
    W0 = np.zeros((Xp.shape[1], 10), np.float32)
    opts = NoisyGDOptions(noise_multiplier=1e-9, steps=6, target_delta=1e-5, clip="fixed", clip_norm=1e-12,
                          schedule="theorem3", weight_decay=3.0)
    res = run_noisygd(prob, W0, W0, opts)
    W, ws = W0.astype(np.float64), []
    for t in range(1, 7):
        ws.append(W.copy())
        Z = Xp @ W
        P = np.exp(Z - Z.max(1, keepdims=True)); P /= P.sum(1, keepdims=True)
        P[np.arange(len(yp)), yp] -= 1
        W = W - 2.0 / (3.0 * (t + 1)) * (Xp.T @ P + 3.0 * W)
    w_bar = sum(2 * t * w for t, w in enumerate(ws, 1)) / (6 * 7)
    np.testing.assert_allclose(res.W, w_bar, rtol=1e-4, atol=1e-5)


def test_worst_case_weight_decay_never_reads_the_exact_private_count():
    """'worst_case' balances Thm. 3's optimization term, whose Lipschitz constant on the summed
    loss is N_private τ: only the smooth schedule (mean-loss scale from the released noisy
    count) may use it; the summed-loss schedules refuse it, naming the field."""
    from mixdp_core.errors import ConfigError
    from mixdp_core.methods.adamix import AdaMixConfig

    AdaMixConfig(weight_decay_rule="worst_case")  # smooth (default): fine
    for sched in ("theorem3", "constant"):
        with pytest.raises(ConfigError, match="weight_decay_rule.*private count"):
            AdaMixConfig(schedule=sched, weight_decay_rule="worst_case")
    AdaMixConfig(schedule="theorem3", weight_decay_rule="worst_case", weight_decay=1.0)  # explicit λ: unused rule


@pytest.mark.parametrize("shape", [(300, 40), (30, 64)])  # N >= D and N < D (Gram of the rows)
def test_spectral_fit_matches_the_direct_logistic_fit(shape):
    # Independent computation: the same ridge objective minimized by L-BFGS in feature space.
    from mixdp_core.methods._linear import fit_logistic_spectral, select_l2_cv, spectral_rows

    rng = np.random.default_rng(0)
    n, d = shape
    y = np.arange(n) % 5
    X = l2_normalize(rng.normal(size=(n, d)) * (1.0 + np.arange(d)) ** -1.0 + rng.normal(size=(5, d))[y])
    sp = spectral_rows(X)
    np.testing.assert_allclose(sp.V.T @ sp.V, np.eye(sp.V.shape[1]), atol=1e-8)
    np.testing.assert_allclose(sp.Z @ sp.V.T, X, atol=1e-5)  # X lies in the span kept
    for l2 in (1e-1, 1e-3):
        W_dir = fit_logistic(X, y, 5, l2=l2, max_iter=5000, tol=1e-10)
        W_sp = sp.V @ fit_logistic_spectral(sp.Z, y, 5, sp.s, l2=l2, max_iter=5000, tol=1e-10)
        np.testing.assert_allclose(W_sp, W_dir, atol=2e-3 * max(1.0, np.abs(W_dir).max()))
    assert select_l2_cv(X, y, 5) == select_l2_cv(X, y, 5, basis=sp)


def test_select_l2_cv_agrees_with_direct_cross_validation(digits_split):
    # Independent computation: the same stratified folds, each grid value fitted from zero
    # by L-BFGS in feature space to a tight tolerance; the errors must rank the grid alike.
    from mixdp_core.methods._linear import select_l2_cv

    from .conftest import tight_cv_wrong_rows

    X = l2_normalize(np.vstack([digits_split.X_public, digits_split.X_private]))[:400]
    y = np.concatenate([digits_split.y_public, digits_split.y_private])[:400]
    errs = {l2: w / len(y) for l2, w in tight_cv_wrong_rows(X, y, 10, max_iter=3000, tol=1e-9).items()}
    best = min(errs.values())
    want = max(l2 for l2, e in errs.items() if e <= best + 1e-12)  # ties -> strongest ridge
    assert select_l2_cv(X, y, 10) == want, errs


def test_averaged_logit_noise_std_matches_a_monte_carlo_of_the_schedule():
    """The closed form (backward recursion) against 20,000 simulated noise paths of the capped
    Thm.-3 schedule with the t-weighted average (independent computation)."""
    from mixdp_core.methods.adamix.engine import averaged_logit_noise_std

    rng = np.random.default_rng(0)
    for cap, lam, T, s in ((2.0, 0.05, 60, 0.02), (1.5, 0.0, 12, 0.1), (1.0, 0.5, 40, 0.03)):
        t = np.arange(1, T + 1)
        eta = np.full(T, cap) if lam == 0 else np.minimum(cap, 2.0 / (lam * (t + 1)))
        e = np.zeros(20_000)
        avg = np.zeros(20_000)
        for i in range(T):  # iterate i+1 enters the average, then takes its noisy step
            avg += 2.0 * (i + 1) / (T * (T + 1)) * e
            e = (1.0 - eta[i] * lam) * e - eta[i] * s * rng.standard_normal(e.shape)
        want = float(avg.std())
        got = averaged_logit_noise_std(step_cap=cap, weight_decay=lam, steps=T, noise_std=s)
        assert abs(got - want) <= 0.03 * want, (cap, lam, T, got, want)
    assert averaged_logit_noise_std(step_cap=1.0, weight_decay=0.1, steps=1, noise_std=1.0) == 0.0


def test_released_noise_start_bounds_the_noise_of_the_released_model():
    """init_scale='released_noise': the start's margin is z = 3 times sqrt(2) nu with nu the
    modelled logit noise of the released average; the model ignores the loss curvature, so the
    noise measured across noise seeds (same split, guard off) must not exceed it."""
    import math

    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.methods.adamix import NOISE_MARGIN_Z

    from .conftest import digits_featureset
    from mixdp_core.methods.adamix.references import unit_rows

    sp = make_split(digits_featureset(), SplitSpec(public_per_class=2, seed=0))
    d = unit_rows(sp)  # uncentred inputs (feature_center='none' below): the rule's model is the same on either
    runs = [make_method("adamix", target_epsilon=3.0, seed=s, public_guard=False, init_scale="released_noise",
                        noise="reproducible", feature_center="none").fit(sp)  # six fixed noise draws
            for s in range(6)]
    default = make_method("adamix", target_epsilon=3.0, seed=0, public_guard=False, feature_center="none",
                          init_scale="noise").fit(sp)
    assert runs[0].steps_ > 100 and runs[0].init_scale_ != default.init_scale_  # past the burn-in: the rule differs
    noise = float(np.stack([d.public @ m.W_ for m in runs]).std(axis=0, ddof=1).mean())
    assert len({m.public_l2_ for m in runs}) == 1  # one public set, one selected ridge
    W_pub = fit_public(d.public, sp.y_public, sp.n_classes, l2=runs[0].public_l2_)
    Z = d.public @ W_pub
    idx = np.arange(len(sp.y_public))
    zy = Z[idx, sp.y_public].copy()
    Z[idx, sp.y_public] = -np.inf
    margin = float(np.median(zy - Z.max(axis=1)))
    nu = np.mean([m.init_scale_ for m in runs]) * margin / (NOISE_MARGIN_Z * math.sqrt(2.0))
    assert 0.0 < noise <= nu, (noise, nu)


@pytest.mark.parametrize("projection", ["paper", "rank", "public_span", "none", 16])
def test_every_projection_choice_fits_with_the_noise_scaled_start(small_split, projection):
    """Each projection the config accepts runs end to end with the default start rule, whose
    noise dimension is the engine's projection dimension (``public_span``: rank of X_pub;
    it used to crash there, reading the engine's ``"span"`` marker as an integer)."""
    m = make_method("adamix", target_epsilon=3.0, seed=0, projection=projection).fit(small_split)
    assert np.isfinite(m.init_scale_) and m.init_scale_ > 0  # same predictions as the public start
    assert _err(m, small_split) < 0.5
    assert m.privacy_.epsilon <= 3.0 + 1e-9


def test_public_span_of_full_rank_public_rows_is_no_projection(small_split):
    """``public_span`` when rank(X_pub) = D: span(X_pub^T) is all of R^D, so the run is that of
    ``projection="none"`` (same start, same noise, same released weights)."""
    import dataclasses

    from mixdp_core.methods.adamix.projection import resolve_span

    cols = np.argsort(small_split.X_public.var(0))[-16:]  # 16 varied pixels < 30 public rows
    sp = dataclasses.replace(small_split, X_public=small_split.X_public[:, cols],
                             X_private=small_split.X_private[:, cols], X_test=small_split.X_test[:, cols],
                             text_embeddings=None)
    assert resolve_span(sp.X_public) == (None, None)
    assert resolve_span(small_split.X_public)[1] == np.linalg.matrix_rank(small_split.X_public) < 64
    span = make_method("adamix", target_epsilon=3.0, seed=0, noise="reproducible", projection="public_span").fit(sp)
    none = make_method("adamix", target_epsilon=3.0, seed=0, noise="reproducible", projection="none").fit(sp)
    assert span.init_scale_ == none.init_scale_
    np.testing.assert_array_equal(span.W_, none.W_)


def test_default_ref_distance_is_the_scaled_public_guess(small_split):
    """R of the Thm.-3 rule and the trust region: REF_DISTANCE_SCALE (2) times max(||w_ref||_F,
    sqrt(C) ln C), w_ref the (rescaled) public start; lambda is inversely proportional to R
    (same tau, noise dimension and T), and a user's ref_distance replaces the guess."""
    import math

    from mixdp_core.methods.adamix.configs import REF_DISTANCE_SCALE

    assert REF_DISTANCE_SCALE == 2.0
    C = small_split.n_classes
    m = make_method("adamix", target_epsilon=3.0, seed=0, noise="reproducible").fit(small_split)
    W = fit_public(m.feature_map_(small_split.X_public), small_split.y_public, C) * np.float32(m.init_scale_)
    expected = 2.0 * max(float(np.linalg.norm(W)), math.sqrt(C) * math.log(C))
    assert m.ref_distance_ == pytest.approx(expected, rel=1e-5)
    fp = make_method("fully_private", target_epsilon=3.0, seed=0).fit(small_split)
    assert fp.ref_distance_ == pytest.approx(2.0 * math.sqrt(C) * math.log(C))
    given = make_method("adamix", target_epsilon=3.0, seed=0, noise="reproducible", ref_distance=5.0).fit(small_split)
    assert given.ref_distance_ == 5.0
    # lambda ~ 1/R at the same start: the default start's cap past the burn-in reads lambda, so
    # compare under the uncapped rule, whose start does not depend on R
    m, given = (make_method("adamix", target_epsilon=3.0, seed=0, noise="reproducible", init_scale="class_scaled",
                            **kw).fit(small_split) for kw in ({}, {"ref_distance": 5.0}))
    assert given.init_scale_ == m.init_scale_
    assert given.weight_decay_ * 5.0 == pytest.approx(m.weight_decay_ * m.ref_distance_, rel=1e-4)
    # PPGD keeps the paper's unscaled guess from its start W = 0 (the scale was not measured there)
    pp = make_method("ppgd", target_epsilon=3.0, seed=0).fit(small_split)
    assert pp.ref_distance_ == pytest.approx(math.sqrt(C) * math.log(C))
    # honest tuning reports the R of the repetition it released
    hon = make_method("adamix", target_epsilon=3.0, seed=0, honest_tuning=True).fit(small_split)
    assert hon.ref_distance_ is not None and hon.ref_distance_ >= 2.0 * math.sqrt(C) * math.log(C) - 1e-6


def test_release_capped_start_is_the_smaller_of_the_burn_in_and_released_noise_sizes():
    """init_scale='release_capped' (default): within the burn-in (ε = 0.5 here: T = 8 steps
    against a burn-in of ~150) the start is the class-scaled one; past it, never larger than
    'released_noise' gives, and here (D = 1280, 62 rows a class: the weight decay's contraction
    makes the released average's noise several times smaller than the burn-in model's) that
    cap binds. Same split, same noise draws, guard off."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features

    fs = get_features("synthetic", "pixels", classes=10, dim=1280, train_per_class=62, test_per_class=5,
                      effective_rank=64, separation=4.0, shared_mean=1.0)
    sp = make_split(fs, SplitSpec(public_per_class=2, seed=0))

    def alpha(eps: float, rule: str) -> float:
        m = make_method("adamix", target_epsilon=eps, seed=0, init_scale=rule, noise="reproducible",
                        public_guard=False)
        m.fit(sp, on_step=lambda r: True)  # the start is set before the first step
        return m.init_scale_

    assert make_method("adamix").config.init_scale == "release_capped"
    cs, rn, rc = (alpha(0.5, r) for r in ("class_scaled", "released_noise", "release_capped"))
    assert rc == cs and rn == cs  # within the burn-in all three are the burn-in rule
    cs, rn, rc = (alpha(8.0, r) for r in ("class_scaled", "released_noise", "release_capped"))
    assert rc == pytest.approx(min(cs, rn), rel=1e-6), (cs, rn, rc)
    assert rc < 0.5 * cs, (cs, rn, rc)  # the cap binds: the burn-in model over-states the released noise


def test_cap_relax_hook_spans_the_ungated_and_the_default_cap():
    """Research hook ``_cap_relax_power = p`` (measured, not the default: tuning_notes.md): the
    cap at every T, relaxed by (burn_in / T)^p within the burn-in. p = inf is the default's
    gated cap; p = 0 caps within the burn-in too (here it binds: a smaller start than the
    default's); p = 1 lies between; past the burn-in (ε = 8) every p is the default."""
    import math

    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features

    fs = get_features("synthetic", "pixels", classes=10, dim=1280, train_per_class=62, test_per_class=5,
                      effective_rank=64, separation=4.0, shared_mean=1.0)
    sp = make_split(fs, SplitSpec(public_per_class=2, seed=0))

    def alpha(eps: float, p: float | None) -> float:
        m = make_method("adamix", target_epsilon=eps, seed=0, noise="reproducible", public_guard=False)
        if p is not None:
            m._cap_relax_power = p
        m.fit(sp, on_step=lambda r: True)
        return m.init_scale_

    base, inf, zero, one = (alpha(0.5, p) for p in (None, math.inf, 0.0, 1.0))
    assert inf == base and zero < 0.9 * base and zero <= one <= base, (base, zero, one)
    assert len({alpha(8.0, p) for p in (None, 0.0, 1.0, math.inf)}) == 1


def test_self_pull_bound_matches_its_closed_form_and_the_hook_only_raises_the_bar():
    """``self_pull_bound`` (research hook ``_guard_self_pull``, measured, not the default:
    tuning_notes.md, "The guard's in-sample optimism"): with constant eta and tau and no weight
    decay, one row's pull on its margin in the t-weighted average is sqrt(2) eta tau / n_hat
    times sum_t c_t (t - 1) = 2 (T - 1) / 3 (each earlier update reaches iterate t). In a run,
    kappa = 0 is the default guard, and an unreachable bar counts the private model right
    nowhere, so the guard keeps the public start."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features
    from mixdp_core.methods.adamix.engine import self_pull_bound
    from mixdp_core.methods.base import StepRecord

    T, eta, tau, n_hat = 37, 0.3, 0.7, 250.0
    hist = [StepRecord(step=t, total_steps=T, clip_norm=tau, extra={"lr": eta, "weight_decay": 0.0})
            for t in range(1, T + 1)]
    assert self_pull_bound(hist, n_hat) == pytest.approx(np.sqrt(2) * eta * tau / n_hat * 2 * (T - 1) / 3, rel=1e-12)
    decayed = [StepRecord(step=h.step, total_steps=T, clip_norm=tau, extra={"lr": eta, "weight_decay": 0.5}) for h in hist]
    assert 0 < self_pull_bound(decayed, n_hat) < self_pull_bound(hist, n_hat)  # decay contracts the pull

    fs = get_features("synthetic", "pixels", classes=10, dim=64, train_per_class=80, test_per_class=10,
                      effective_rank=16, separation=4.0)
    sp = make_split(fs, SplitSpec(public_per_class=2, seed=0))

    def guard(kappa: float | None) -> tuple[bool, float]:
        m = make_method("adamix", target_epsilon=8.0, seed=0, noise="reproducible")
        if kappa is not None:
            m._guard_self_pull = kappa
        m.fit(sp)
        rec = next(h for h in reversed(m.history_) if "guard_noisy_gain" in h.extra)
        return m.guard_kept_private_, rec.extra["guard_noisy_gain"]

    kept, gain = guard(None)
    assert kept and guard(0.0) == (kept, gain)  # the private phase helps here; kappa 0 is the default
    kept_hi, gain_hi = guard(1e9)
    assert not kept_hi and gain_hi < gain  # same noise draw, fewer rows counted right


def test_paper_completion_drops_every_direction_outside_the_public_rank_alike():
    """Item 8 of the package docstring: ``G_pub`` has rank r <= C - 1, and the paper's k > r
    completes ``U_r`` with data-independent directions, so any fixed direction outside
    ``span U_r`` (a private signal or the noise) loses the same share (D - k) / (D - r) in
    expectation over the completion, and a direction inside loses nothing. Checked over 300
    completions against that closed form."""
    from mixdp_core.methods.adamix.projection import projection_basis

    rng = np.random.default_rng(0)
    D, C, n_pub, k = 40, 5, 10, 30
    X = rng.standard_normal((n_pub, D))
    P = rng.dirichlet(np.ones(C), n_pub)
    E = P - np.eye(C)[rng.integers(0, C, n_pub)]  # softmax residual: each row sums to 0
    G = X.T @ E
    U, s, _ = np.linalg.svd(G, full_matrices=False)
    r = int(np.sum(s > s[0] * 1e-6))
    assert r == C - 1
    U_r = U[:, :r]
    v_out = rng.standard_normal(D)
    v_out -= U_r @ (U_r.T @ v_out)  # a fixed direction outside span U_r
    v_in = U_r @ rng.standard_normal(r)
    shares_out, shares_in = [], []
    for t in range(300):
        B = np.random.default_rng([t, 0xB]).standard_normal((D, D - k)).astype(np.float32)
        basis = projection_basis(G, k, B)
        Q = basis.Q.astype(np.float64)
        shares_out.append(np.sum((Q.T @ v_out) ** 2) / np.sum(v_out ** 2))
        shares_in.append(np.sum((Q.T @ v_in) ** 2) / np.sum(v_in ** 2))
    assert np.mean(shares_out) == pytest.approx((D - k) / (D - r), rel=0.08)
    assert max(shares_in) < 1e-6


@pytest.mark.parametrize("ball,projection,device", [(None, None, "cpu"), (0.05, None, "cpu"), (None, 20, "cpu"),
                                                     (None, None, "torch_cpu")])
def test_tracked_self_pull_is_the_leave_one_out_change_of_the_released_average(ball, projection, device):
    """``NoisyGDOptions.track_self_pull`` (the guard's ``guard_count="leave_one_out"``): row i's tracked pull
    is the change of its own logits in the released t-weighted average when the row is left
    out and everything else (noise draws, n_hat, schedule) stays. Checked against runs without
    each row, same noise: within 3 % where rows barely interact (D >> N). A wrong recursion
    (no decay, the wrong average weights, the ball projection missed) is off by far more;
    ``ball`` makes the ball projection bind; ``projection`` releases on a public subspace (the pull
    is then ``||U^T x_i||^2`` times the clipped residual); ``device`` another kernel."""
    import dataclasses

    from mixdp_core.methods.adamix.engine import NoisyGDOptions, NoisyGDProblem, run_noisygd

    rng = np.random.default_rng(0)
    N, D, C = 40, 300, 8
    M = 0.3 * rng.standard_normal((C, D))
    y, yp = rng.integers(0, C, N), np.arange(C)
    X = l2_normalize((M[y] + rng.standard_normal((N, D))).astype(np.float32))
    Xp = l2_normalize((M[yp] + rng.standard_normal((C, D))).astype(np.float32))
    W0 = np.zeros((D, C), np.float32)
    opts = NoisyGDOptions(noise_multiplier=0.5, steps=30, target_delta=1e-5, schedule="smooth", n_hat=N + C,
                          n_hat_private=N, weight_decay=0.05, noise="reproducible",
                          ball_radius=ball, projection_dim=projection, device=device, track_self_pull=True)

    def run(keep, track):
        prob = NoisyGDProblem(X[keep], y[keep], Xp, yp, None, None, C)
        return run_noisygd(prob, W0, W0, dataclasses.replace(opts, track_self_pull=track))

    full = run(np.ones(N, bool), True)
    assert full.self_pull.shape == (N, C)
    for i in range(5):
        keep = np.ones(N, bool)
        keep[i] = False
        actual = X[i] @ full.W - X[i] @ run(keep, False).W
        assert np.linalg.norm(full.self_pull[i] - actual) < 0.03 * np.linalg.norm(actual), i
        assert actual[y[i]] > 0  # the row pulls its own class up: the in-sample count's optimism
    untracked = run(np.ones(N, bool), False)
    assert untracked.self_pull is None and np.array_equal(untracked.W, full.W)  # tracking changes nothing
    # the same recursion's iterate share: the leave-one-out change of the last iterate, which a
    # guard counting a model built on w_T would subtract (research: tuning_notes.md, "The average lags")
    assert full.last_self_pull.shape == (N, C) and untracked.last_self_pull is None
    assert np.array_equal(untracked.last_iterate, full.last_iterate)
    for i in range(5):
        keep = np.ones(N, bool)
        keep[i] = False
        actual = X[i] @ full.last_iterate - X[i] @ run(keep, False).last_iterate
        # 5 %: the binding ball's contraction moves with the row left out, which the first-order
        # pull ignores; the average smooths that, the iterate does not (3.3 % on row 0 here)
        assert np.linalg.norm(full.last_self_pull[i] - actual) < 0.05 * np.linalg.norm(actual), i
    if ball is None:  # the iterate's share is not the average's (16 % apart here; a binding ball contracts both alike)
        assert np.linalg.norm(full.last_self_pull - full.self_pull) > 0.05 * np.linalg.norm(full.self_pull)


def test_leave_one_out_guard_counts_without_each_rows_own_pull():
    """``guard_count="leave_one_out"`` (the default; tuning_notes.md, "A first-order leave-one-out
    count"): the guard counts the private model on each row's logits minus its tracked own
    pull; ``"in_sample"`` on its own logits (the earlier default). Same noise
    draw as the default guard, so the released gain differs exactly by the rows the pull had
    turned right; where rows are few against the weights (here D = 512, 6 private rows per
    class) the in-sample count is the larger."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features

    fs = get_features("synthetic", "pixels", classes=20, dim=512, train_per_class=7, test_per_class=10,
                      effective_rank=256, separation=3.0)
    sp = make_split(fs, SplitSpec(public_per_class=1, seed=0))

    def guard(loo: bool):
        # the private phase's average unshrunk (update_shrinkage="none") and one release at σ
        # (guard_resolution=None): the counts' mechanics at the resolution they were measured at
        m = make_method("adamix", target_epsilon=8.0, seed=0, noise="reproducible", update_shrinkage="none",
                        guard_count="leave_one_out" if loo else "in_sample", guard_resolution=None)
        m.fit(sp)
        rec = next(h for h in reversed(m.history_) if "guard_noisy_gain" in h.extra)
        return m, rec.extra["guard_noisy_gain"]

    assert make_method("adamix").config.guard_count == "leave_one_out"
    m_in, gain_in = guard(False)
    m_loo, gain_loo = guard(True)
    assert m_in._guard_pull_shift is None and m_loo._guard_pull_shift.shape == (len(sp.y_private), 20)
    assert np.array_equal(m_in.W_start_, m_loo.W_start_)
    # the in-sample guard released the private model (the same in both runs: tracking changes
    # no release); recompute both counts from it independently, with the one noise draw
    assert m_in.guard_kept_private_ and not m_in.checkpoint_kept_early_ and not m_loo.checkpoint_kept_early_
    Xq, yq = m_loo.feature_map_(sp.X_private), sp.y_private
    W_priv = m_in.W_
    start = ((Xq @ m_loo.W_start_).argmax(1) == yq).astype(float)
    right_in = (Xq @ W_priv).argmax(1) == yq
    right_loo = (Xq @ W_priv - m_loo._guard_pull_shift).argmax(1) == yq
    noise = gain_in - float(np.sum(right_in - start))
    assert gain_loo == pytest.approx(float(np.sum(right_loo - start)) + noise, abs=1e-6)
    # 6 private rows per class against 512 x 20 weights: the rows right only through their own
    # pull carried the in-sample count over the bar; without them the guard keeps the start,
    # which is also the better model on the test rows here
    assert gain_loo < gain_in - 20 and m_in.guard_kept_private_ and not m_loo.guard_kept_private_
    assert _err(m_loo, sp) < _err(m_in, sp)


def test_shrunk_private_update_uses_the_private_rows_where_their_noise_dominates():
    """``update_shrinkage="public_logits"`` (the default under imbalance; tuning_notes.md, "The
    private update's shrinkage"): 40 classes x 512 dimensions, 2 public + 32 private rows per class, epsilon = 3.
    The unshrunk private phase is worse than its public start on the private rows, so the guard
    keeps the start (the earlier default: Only-Public's error); released as
    ``W_start + s (W - W_start)``, the same run keeps the private signal and drops most of the
    noise, and the guard releases it. Post-processing: the same epsilon."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features

    fs = get_features("synthetic", "pixels", classes=40, dim=512, train_per_class=34, test_per_class=10,
                      effective_rank=100, separation=10.0, ambiguity=0.06, shared_mean=2.5)
    sp = make_split(fs, SplitSpec(public_per_class=2, seed=0))
    op = make_method("only_public").fit(sp)
    assert make_method("adamix").config.update_shrinkage == "checked_when_imbalanced"
    new = make_method("adamix", target_epsilon=3.0, seed=0, noise="reproducible",
                      update_shrinkage="public_logits").fit(sp)
    old = make_method("adamix", target_epsilon=3.0, seed=0, noise="reproducible", update_shrinkage="none").fit(sp)
    assert old.update_shrinkage_ is None and not old.guard_kept_private_ and _err(old, sp) == _err(op, sp)
    assert 0.0 < new.update_shrinkage_ < 1.0 and new.guard_kept_private_
    assert _err(new, sp) < _err(op, sp) - 0.03
    rec = next(h for h in reversed(new.history_) if "guard_noisy_gain" in h.extra)
    assert rec.extra["update_shrinkage"] == new.update_shrinkage_
    assert new.privacy_.epsilon == old.privacy_.epsilon and new.steps_ == old.steps_
    # without the guard: the released model is the start plus s times the private phase's
    # average (same noise draws, same steps)
    kw = dict(target_epsilon=3.0, seed=0, noise="reproducible", public_guard=False)
    shrunk = make_method("adamix", update_shrinkage="public_logits", **kw).fit(sp)
    whole = make_method("adamix", update_shrinkage="none", **kw).fit(sp)
    s = shrunk.update_shrinkage_
    np.testing.assert_allclose(shrunk.W_, whole.W_start_ + s * (whole.W_ - whole.W_start_), atol=1e-5)


def test_guard_whole_hook_spends_one_more_accounted_count():
    """Research hook ``_guard_whole`` (measured, not the default): the guard also asks the
    unshrunk update with a second noisy count; that count is one more Gaussian release of the
    run's T (the gradient phase gives up a step), so epsilon is the same plan's."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features

    fs = get_features("synthetic", "pixels", classes=10, dim=32, train_per_class=40, test_per_class=5,
                      effective_rank=8, separation=4.0)
    sp = make_split(fs, SplitSpec(public_per_class=2, seed=0))
    runs = []
    for hook in (False, True):
        m = make_method("adamix", target_epsilon=3.0, seed=0, noise="reproducible", guard_resolution=None)
        m._guard_whole = hook
        runs.append(m.fit(sp))
    plain, whole = runs
    guard = [r.count for r in whole.ledger_.releases if r.what == "public-start guard"]
    assert guard == [2] and [r.count for r in plain.ledger_.releases if r.what == "public-start guard"] == [1]
    assert whole.steps_ == plain.steps_ and whole.privacy_.epsilon == pytest.approx(plain.privacy_.epsilon)
    rec = next(h for h in reversed(whole.history_) if "guard_noisy_gain" in h.extra)
    assert rec.extra["guard_releases"] == 2.0 and "guard_noisy_gain_whole" in rec.extra
    grads = [sum(r.count for r in m.ledger_.releases if r.what == "gradient step") for m in runs]
    assert grads[1] == grads[0] - 1


def test_public_likelihood_shrinkage_is_the_stacking_ratio_of_the_public_rows_left_out():
    """``update_shrinkage="public_likelihood"`` (measured, not the default; tuning_notes.md,
    "Shrinkage by the public likelihood"): the released model is ``W_start + s (W - W_start)``
    with ``s`` the stacking ratio of the public rows' leave-one-out logits: the start's from
    ``loo_public_logits`` times the start's scale, the update's minus each row's tracked own
    pull (recomputed here from the unshrunk run, same noise). At one public row per class
    nothing can be left out and the squared-logit rule is used. Post-processing: same ε."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features
    from mixdp_core.methods._linear import loo_public_logits
    from mixdp_core.methods.adamix.engine import stacking_shrinkage

    fs = get_features("synthetic", "pixels", classes=10, dim=256, train_per_class=20, test_per_class=20,
                      effective_rank=64, separation=6.0)
    sp = make_split(fs, SplitSpec(public_per_class=2, seed=0))
    kw = dict(target_epsilon=3.0, seed=0, noise="reproducible", public_guard=False)
    lik = make_method("adamix", update_shrinkage="public_likelihood", **kw).fit(sp)
    js = make_method("adamix", update_shrinkage="public_logits", **kw).fit(sp)
    whole = make_method("adamix", update_shrinkage="none", **kw)
    whole._track_public_pull = True
    whole.fit(sp)
    assert lik.update_shrinkage_rule_ == "public_likelihood" and js.update_shrinkage_rule_ == "public_logits"
    assert lik.privacy_.epsilon == js.privacy_.epsilon and lik.steps_ == js.steps_
    Xp = lik.feature_map_(sp.X_public).astype(np.float64)
    A, scored = loo_public_logits(Xp, sp.y_public, sp.n_classes, lik.public_l2_)
    delta = (whole.W_ - whole.W_start_).astype(np.float64)
    U = Xp[scored] @ delta - whole._public_pull[scored]
    s = stacking_shrinkage(lik.init_scale_ * A, U, sp.y_public[scored])
    assert lik.update_shrinkage_ == pytest.approx(s, rel=1e-4) and s != pytest.approx(js.update_shrinkage_, abs=0.05)
    np.testing.assert_allclose(lik.W_, whole.W_start_ + s * delta, atol=1e-4)
    one = make_split(fs, SplitSpec(public_per_class=1, seed=0))
    m1 = make_method("adamix", update_shrinkage="public_likelihood", **kw).fit(one)
    m2 = make_method("adamix", update_shrinkage="public_logits", **kw).fit(one)
    assert m1.update_shrinkage_rule_ == "public_logits" and m1.update_shrinkage_ == m2.update_shrinkage_


def _imbalanced_many_class_split():
    """50 classes x 256 dimensions, 2 public rows per class, private rows at imbalance ratio 10
    (about 900 rows): at σ = 5 the guard's vector count resolves the shrinkage path
    (σ sqrt(3) <= 0.02 n̂_lo). Split seed 3: since the tail order has its own stream
    (2026-11-30), the split where the single count releases a model worse than Only-Public
    (seeds 3, 8 and 10 of 0-11; seed 0 was it before)."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features

    fs = get_features("synthetic", "pixels", classes=50, dim=256, train_per_class=50, test_per_class=10,
                      effective_rank=40, separation=8.0, ambiguity=0.02, shared_mean=2.0)
    return make_split(fs, SplitSpec(public_per_class=2, seed=3, imbalance_ratio=10.0))


def test_guard_path_is_one_vector_release_of_the_single_counts_mu():
    """``guard_candidates="shrinkage_path"`` (tuning_notes.md, "The guard's path"): the guard
    releases the K = 3 paired counts of ``W_start + t (W - W_start)``, t in
    ``GUARD_PATH_FACTORS``, with noise ``σ_g sqrt(K)`` each (L2 sensitivity sqrt(K): the μ of the
    single count), and releases the largest noisy gain above the Šidák bar. Recomputed here
    independently from the single-count run (same noise stream, same private phase): the
    counts on each row's leave-one-out logits, the noise vector, the argmax and the bar; the
    ledger and ε are the single count's."""
    from scipy.stats import norm

    from mixdp_core.methods.adamix.configs import GUARD_PATH_FACTORS, GUARD_Z
    from mixdp_core.randomness import noise_rng

    sp = _imbalanced_many_class_split()
    kw = dict(target_epsilon=8.0, seed=0, noise="reproducible", noise_multiplier=5.0)
    one = make_method("adamix", guard_candidates="single", **kw).fit(sp)
    path = make_method("adamix", guard_candidates="shrinkage_path", **kw).fit(sp)
    assert make_method("adamix").config.guard_candidates == "shrinkage_path"
    assert path.privacy_.epsilon == one.privacy_.epsilon and path.steps_ == one.steps_
    assert [(r.what, r.count) for r in path.ledger_.releases] == [(r.what, r.count) for r in one.ledger_.releases]
    assert one.guard_path_factor_ is None and path.guard_path_factor_ in GUARD_PATH_FACTORS
    # the candidate the single count asked: the shrunk model (the guard released it: t = 1)
    assert one.guard_kept_private_ and not one.checkpoint_kept_early_ and not path.checkpoint_kept_early_
    W0, W1 = one.W_start_.astype(np.float64), one.W_.astype(np.float64)
    Xq, yq = one.feature_map_(sp.X_private).astype(np.float64), sp.y_private
    pull = one._guard_pull_shift
    start = ((Xq @ W0).argmax(1) == yq).astype(float)
    gains = np.array([np.sum(((Xq @ (W0 + t * (W1 - W0)) - t * pull).argmax(1) == yq) - start)
                      for t in GUARD_PATH_FACTORS])
    K = len(GUARD_PATH_FACTORS)
    sigma_g = 5.0 / np.sqrt(one.guard_releases_)
    noisy = _snapped(gains + sigma_g * np.sqrt(K) * noise_rng("reproducible", 0, 0x6A4D).standard_normal(K),
                     sigma_g * np.sqrt(K))
    j = int(np.argmax(noisy))
    z_k = norm.ppf(norm.cdf(GUARD_Z) ** (1 / K))
    assert z_k == pytest.approx(1.5896, abs=1e-3)  # Φ(1) = 0.84134, 0.84134^(1/3) = 0.94404
    rec = next(h for h in reversed(path.history_) if "guard_noisy_gain" in h.extra)
    assert rec.extra["guard_noisy_gain"] == noisy[j]  # snapped to the grid: an exact float
    assert path.guard_path_factor_ == GUARD_PATH_FACTORS[j]
    assert path.guard_kept_private_ == bool(noisy[j] > z_k * sigma_g * np.sqrt(K))
    t = GUARD_PATH_FACTORS[j]
    np.testing.assert_allclose(path.W_, W0 + t * (W1 - W0), atol=1e-5)
    assert path.update_shrinkage_ == pytest.approx(t * one.update_shrinkage_)
    assert rec.extra["guard_path_factor"] == t and "guard_path_factor" not in next(
        h for h in reversed(one.history_) if "guard_noisy_gain" in h.extra).extra


def test_guard_path_mends_the_imbalanced_many_class_release_and_stays_off_where_unresolved():
    """On 50 imbalanced classes at ε = 8 (σ = 5) the single count releases a shrunk private
    model worse than Only-Public (its count on the imbalanced private rows still clears the bar); the path's
    count releases the update halved, better than both. At the default σ = 20 the same ~900
    rows cannot resolve three candidates (20 sqrt(3) > 0.02 n̂_lo): the guard asks the single
    count, with the same release as ``guard_candidates="single"``."""
    sp = _imbalanced_many_class_split()
    op = make_method("only_public").fit(sp)
    kw = dict(target_epsilon=8.0, seed=0, noise="reproducible", noise_multiplier=5.0)
    one = make_method("adamix", guard_candidates="single", **kw).fit(sp)
    path = make_method("adamix", **kw).fit(sp)
    assert one.guard_kept_private_ and _err(one, sp) > _err(op, sp) + 0.05
    assert path.guard_path_factor_ == 0.5 and path.guard_kept_private_
    assert _err(path, sp) < _err(one, sp) - 0.05
    kw20 = dict(target_epsilon=8.0, seed=0, noise="reproducible")
    a = make_method("adamix", **kw20).fit(sp)
    b = make_method("adamix", guard_candidates="single", **kw20).fit(sp)
    assert a.guard_path_factor_ is None
    np.testing.assert_array_equal(a.W_, b.W_)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("margins", [False, True])
def test_paired_count_is_the_guards_count_and_one_row_moves_it_by_at_most_one(weighted, margins):
    """``_paired_count``, the count the single guard, the checkpoint test and the path's vector
    all release before their noise: against a row-by-row recomputation (argmax right, or the
    logit margin above ``margin_min``; class weights <= 1), and its sensitivity: removing any one
    row moves it by at most 1 (add/remove), the bound the callers' noise is calibrated to."""
    from mixdp_core.methods.adamix.private import _paired_count

    rng = np.random.default_rng(7)
    N, C = 60, 5
    Z = rng.standard_normal((N, C))
    y = rng.integers(0, C, N)
    base = rng.random(N) < 0.5
    w = rng.uniform(0.1, 1.0, C) if weighted else None
    mm = rng.uniform(0.0, 1.0, N) if margins else None
    expect = 0.0
    for i in range(N):
        other = np.max(np.delete(Z[i], y[i]))
        right = (Z[i, y[i]] - other > mm[i]) if margins else (int(np.argmax(Z[i])) == y[i])
        expect += (1.0 if w is None else w[y[i]]) * (float(right) - float(base[i]))
    got = _paired_count(Z, y, base, weights=w, margin_min=mm)
    assert got == pytest.approx(expect, abs=1e-9)
    assert got != pytest.approx(_paired_count(Z, y, ~base, weights=w, margin_min=mm))
    for i in range(N):
        keep = np.arange(N) != i
        less = _paired_count(Z[keep], y[keep], base[keep], weights=w, margin_min=None if mm is None else mm[keep])
        assert abs(got - less) <= 1.0 + 1e-12


def test_two_iterate_release_on_balanced_classes_and_the_rule_under_imbalance():
    """``update_shrinkage="two_iterate_when_balanced"`` (tuning_notes.md, "The average lags"):
    where the histogram's pilot test finds the private classes balanced the run releases
    ``W_start + u Delta + v L`` (the average's and the last iterate's updates, ``(u, v)`` of
    :func:`.engine.two_iterate_combination` on the run's own step records), recomputed here from
    the unshrunk run with the same noise; under imbalance ratio 10 the test rejects and the run
    is the one-factor rule's. Post-processing: the same releases and ε as the rule's."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features
    from mixdp_core.methods.adamix.engine import iterate_noise_covariance, two_iterate_combination

    fs = get_features("synthetic", "pixels", classes=20, dim=256, train_per_class=40, test_per_class=10,
                      effective_rank=64, separation=6.0)
    sp = make_split(fs, SplitSpec(public_per_class=2, seed=0))
    kw = dict(target_epsilon=3.0, seed=1, noise="reproducible", public_guard=False)  # seed 0's pilot rejects (p = 0.003)
    ti = make_method("adamix", update_shrinkage="two_iterate_when_balanced", **kw).fit(sp)
    rule = make_method("adamix", update_shrinkage="public_logits", **kw).fit(sp)
    whole = make_method("adamix", update_shrinkage="none", **kw).fit(sp)
    assert not ti.histogram_test_["imbalanced"] and ti.update_shrinkage_rule_ == "two_iterate"
    assert ti.update_shrinkage_ is None and rule.update_combination_ is None
    assert ti.privacy_.epsilon == rule.privacy_.epsilon and ti.steps_ == rule.steps_
    W0 = whole.W_start_.astype(np.float64)
    Xp = whole.feature_map_(sp.X_public).astype(np.float64)
    delta, last = whole.W_.astype(np.float64) - W0, whole._last_iterate.astype(np.float64) - W0
    cov = iterate_noise_covariance(whole.history_, float(whole.n_hat_), whole.noise_multiplier_)
    u, v = two_iterate_combination(Xp, delta, last, cov)
    assert ti.update_combination_ == pytest.approx((u, v), rel=1e-5)
    assert v > 0 and abs(u) + abs(v) > 0.05  # both iterates carry weight here
    np.testing.assert_allclose(ti.W_, W0 + u * delta + v * last, atol=1e-5)
    imb = make_split(fs, SplitSpec(public_per_class=2, seed=0, imbalance_ratio=10.0))
    ti_imb = make_method("adamix", update_shrinkage="two_iterate_when_balanced", **kw).fit(imb)
    rule_imb = make_method("adamix", update_shrinkage="public_logits", **kw).fit(imb)
    assert ti_imb.histogram_test_["imbalanced"] and ti_imb.update_combination_ is None
    assert ti_imb.update_shrinkage_ == rule_imb.update_shrinkage_ and np.array_equal(ti_imb.W_, rule_imb.W_)


def test_checked_when_imbalanced_checks_the_rule_on_the_public_likelihood_under_imbalance():
    """``update_shrinkage="checked_when_imbalanced"`` (class_balance.md, "A steep tail"): where
    the histogram's pilot finds the private classes imbalanced, the squared-logit rule's factor
    ``s`` is kept when its model's profile likelihood of the public labels (the start's
    leave-one-out logits, the update's less each row's tracked pull) is at least the start's, and
    replaced by :func:`stacking_shrinkage`'s otherwise, recomputed here from the unshrunk run
    with the same noise. The split here keeps the rule; the same split with every private label
    moved to the next class (an update with real energy in a wrong direction, which no
    noise-based rule can see) fails the check and takes the likelihood's factor.
    Where the pilot finds the classes balanced: the two-iterate release. Same ε throughout."""
    import dataclasses

    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features
    from mixdp_core.methods._linear import loo_public_logits
    from mixdp_core.methods.adamix.engine import (PROFILE_LL_TOL, profile_log_likelihood, released_noise_std,
                                                  stacking_shrinkage, update_shrinkage)

    fs = get_features("synthetic", "pixels", classes=20, dim=256, train_per_class=40, test_per_class=10,
                      effective_rank=64, separation=6.0)
    kw = dict(target_epsilon=3.0, seed=1, noise="reproducible", public_guard=False)
    imb = make_split(fs, SplitSpec(public_per_class=2, seed=0, imbalance_ratio=10.0))
    wrong = dataclasses.replace(imb, y_private=(imb.y_private + 1) % imb.n_classes)
    outcomes = []
    for sp in (imb, wrong):
        gated = make_method("adamix", update_shrinkage="checked_when_imbalanced", **kw).fit(sp)
        rule = make_method("adamix", update_shrinkage="public_logits", **kw).fit(sp)
        whole = make_method("adamix", update_shrinkage="none", **kw)
        whole._track_public_pull = True
        whole.fit(sp)
        assert gated.histogram_test_["imbalanced"]
        assert gated.privacy_.epsilon == rule.privacy_.epsilon and gated.steps_ == rule.steps_
        Xp = whole.feature_map_(sp.X_public).astype(np.float64)
        A, scored = loo_public_logits(Xp, sp.y_public, sp.n_classes, gated.public_l2_)
        A = gated.init_scale_ * A
        delta = (whole.W_ - whole.W_start_).astype(np.float64)
        U = Xp[scored] @ delta - whole._public_pull[scored]
        yp = sp.y_public[scored]
        nu = released_noise_std(whole.history_, float(whole.n_hat_), whole.noise_multiplier_)
        s_rule = update_shrinkage(Xp, delta, nu)
        assert s_rule == pytest.approx(rule.update_shrinkage_, rel=1e-5)
        rejects = profile_log_likelihood(A, U, yp, s_rule) < profile_log_likelihood(A, U, yp, 0.0) - PROFILE_LL_TOL
        s = min(s_rule, stacking_shrinkage(A, U, yp)) if rejects else s_rule
        assert gated.update_check_rejected_ == rejects
        assert gated.update_shrinkage_rule_ == ("public_likelihood" if rejects else "public_logits")
        assert gated.update_shrinkage_ == pytest.approx(s, rel=1e-4, abs=1e-6)
        np.testing.assert_allclose(gated.W_, whole.W_start_ + np.float32(s) * delta, atol=1e-4)
        outcomes.append(rejects)
    assert outcomes == [False, True]
    # one public shot per class: no leave-one-out start, so the check cannot run; the record says so
    one = make_split(fs, SplitSpec(public_per_class=1, seed=0, imbalance_ratio=10.0))
    unchecked = make_method("adamix", update_shrinkage="checked_when_imbalanced", **kw).fit(one)
    plain = make_method("adamix", update_shrinkage="public_logits", **kw).fit(one)
    assert unchecked.histogram_test_["imbalanced"] and unchecked.update_shrinkage_rule_ == "public_logits_unchecked"
    assert unchecked.update_check_rejected_ is None and unchecked.update_shrinkage_ == plain.update_shrinkage_
    # and the public sizes said so before the run: the update's public pull was not tracked
    assert unchecked._public_pull is None and gated._public_pull is not None
    guarded = make_method("adamix", update_shrinkage="checked_when_imbalanced", target_epsilon=3.0, seed=1,
                          noise="reproducible").fit(wrong)
    rec = next(h for h in reversed(guarded.history_) if "guard_noisy_gain" in h.extra)
    assert rec.extra["update_check_rejected"] == float(guarded.update_check_rejected_)  # in the run's record
    bal = make_split(fs, SplitSpec(public_per_class=2, seed=0))
    g_bal = make_method("adamix", update_shrinkage="checked_when_imbalanced", **kw).fit(bal)
    ti = make_method("adamix", update_shrinkage="two_iterate_when_balanced", **kw).fit(bal)
    assert not g_bal.histogram_test_["imbalanced"] and g_bal.update_shrinkage_rule_ == "two_iterate"
    assert g_bal.update_check_rejected_ is None
    assert g_bal.update_combination_ == ti.update_combination_ and np.array_equal(g_bal.W_, ti.W_)


def test_kept_early_checkpoint_reports_its_own_factor_and_check():
    """Where the early-checkpoint test keeps the early average, the release is that average
    shrunk by its own factor, so ``update_shrinkage_``, ``update_shrinkage_rule_`` and
    ``update_check_rejected_`` are the early average's (the second of the two factor
    computations), not the final one's, and the guard's path is capped by the early one's
    rejected factor (none here). Digits pixels at imbalance 100, ε = 3, split and noise seed 0:
    the check rejects the final average's rule and keeps the early one's."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features

    sp = make_split(get_features("digits", "pixels"), SplitSpec(public_per_class=5, imbalance_ratio=100.0, seed=0))
    m = make_method("adamix", target_epsilon=3.0, seed=0, noise="reproducible")
    calls = []
    factor = m._shrinkage_factor

    def recording(*a, **k):
        calls.append(factor(*a, **k))
        return calls[-1]

    m._shrinkage_factor = recording
    m.fit(sp)
    assert m.checkpoint_kept_early_ and len(calls) == 2
    (s_fin, rule_fin, rej_fin, _), (s_e, rule_e, rej_e, cap_e) = calls
    assert rej_fin is True and rule_fin == "public_likelihood"  # the final average: rejected
    assert (m.update_shrinkage_, m.update_shrinkage_rule_, m.update_check_rejected_) == (s_e, rule_e, rej_e)
    assert rej_e is False and s_e != s_fin and m._factor_cap is cap_e is None
    rec = next(h for h in reversed(m.history_) if "guard_noisy_gain" in h.extra)
    assert rec.extra["update_check_rejected"] == 0.0


def test_guard_counts_the_two_iterate_release_on_its_leave_one_out_logits():
    """With the guard, the combined release is counted on each private row's logits less its own
    pull in that model, ``u q_avg + v q_last`` (the engine's tracked pulls, each tested against
    retraining without the row), and the guard's path extrapolates it only while its total
    weight on the two iterates stays at most 1 (t (u + v) <= 1, as the rule's t s <= 1). The
    record carries the weights; ε and the releases are the rule's."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features
    from mixdp_core.methods.adamix.configs import GUARD_PATH_FACTORS

    fs = get_features("synthetic", "pixels", classes=20, dim=256, train_per_class=80, test_per_class=10,
                      effective_rank=64, separation=6.0)
    sp = make_split(fs, SplitSpec(public_per_class=2, seed=0))
    kw = dict(target_epsilon=8.0, seed=1, noise="reproducible", noise_multiplier=5.0, early_checkpoint=False)
    ti = make_method("adamix", update_shrinkage="two_iterate_when_balanced", guard_candidates="single", **kw)
    ti._track_self_pull = True
    ti.fit(sp)
    rule = make_method("adamix", update_shrinkage="public_logits", guard_candidates="single", **kw).fit(sp)
    assert ti.update_combination_ is not None and ti.privacy_.epsilon == rule.privacy_.epsilon
    assert [(r.what, r.count) for r in ti.ledger_.releases] == [(r.what, r.count) for r in rule.ledger_.releases]
    # the pulls of the unshrunk run (same noise), combined with the released weights
    whole = make_method("adamix", update_shrinkage="none", guard_candidates="single", **kw)
    whole._track_self_pull = True
    whole.fit(sp)
    u, v = ti.update_combination_
    rec = next(h for h in reversed(ti.history_) if "guard_noisy_gain" in h.extra)
    assert (rec.extra["update_weight_average"], rec.extra["update_weight_last"]) == pytest.approx((u, v))
    expected = u * whole._guard_pull_shift + v * whole._last_self_pull
    np.testing.assert_allclose(ti._guard_pull_shift, expected, rtol=1e-5, atol=1e-7)
    # the path extrapolates the combination only while t (u + v) <= 1 (GUARD_PATH_FACTORS = 0.5, 1, 2)
    assert GUARD_PATH_FACTORS == (0.5, 1.0, 2.0)
    path = make_method("adamix", update_shrinkage="two_iterate_when_balanced", **kw).fit(sp)
    for (up, vp), expected in (((0.2, 0.2), (0.5, 1.0, 2.0)), ((0.3, 0.4), (0.5, 1.0, 1.0 / 0.7)),
                               ((0.7, 0.4), (0.5, 1.0)), ((-0.1, 0.05), (0.5, 1.0))):
        path.update_combination_ = (up, vp)
        assert path._guard_path_factors(1e-9, None) == pytest.approx(expected), (up, vp)


def test_early_checkpoint_compares_two_combinations_like_with_like():
    """With the combination, the early-checkpoint test compares the early average combined with
    its own last iterate, by its own ``(u, v)`` from the first ``early_step`` step records, with
    the final combination (not a rule-shrunk early average). Checked on the inputs the run
    hands the combination: the early average is the unshrunk run's snapshot (same noise), the
    records are the first ``early_step``, and the candidate passed to the test is
    ``W_start + u_e Delta_e + v_e L_e``."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features

    fs = get_features("synthetic", "pixels", classes=20, dim=256, train_per_class=80, test_per_class=10,
                      effective_rank=64, separation=6.0)
    sp = make_split(fs, SplitSpec(public_per_class=2, seed=0))
    kw = dict(target_epsilon=8.0, seed=1, noise="reproducible", guard_candidates="single")

    def spied(m):
        calls, tests, orig_comb, orig_test = [], [], m._iterate_combination, m._checkpoint_test

        def comb(problem, delta_avg, last, W_init, history, n_hat):
            out = orig_comb(problem, delta_avg, last, W_init, history, n_hat)
            calls.append((delta_avg.copy(), None if last is None else last.copy(), len(history), out))
            return out

        def test(problem, W_final, W_early, **k):
            tests.append((W_final.copy(), W_early.copy(), k["early_step"]))
            return orig_test(problem, W_final, W_early, **k)

        m._iterate_combination, m._checkpoint_test = comb, test
        return m, calls, tests

    ti, calls, tests = spied(make_method("adamix", **kw))
    ti.fit(sp)
    none, _, none_tests = spied(make_method("adamix", update_shrinkage="none", **kw))
    none.fit(sp)
    assert ti.update_shrinkage_rule_ == "two_iterate" and len(calls) == 2 and len(tests) == 1
    (_, _, n_final, (u, v)), (d_early, last_early, n_early, comb_e) = calls
    W_final, W_early, early_step = tests[0]
    W0 = ti.W_start_
    gradient_steps = sum(r.count for r in ti.ledger_.releases if r.what == "gradient step")
    assert n_early == early_step < n_final == gradient_steps and comb_e is not None
    np.testing.assert_allclose(d_early, none_tests[0][1] - W0, atol=1e-6)  # the raw early average
    ue, ve = comb_e
    np.testing.assert_allclose(W_early, W0 + ue * d_early + ve * (last_early - W0), atol=1e-5)
    assert (ue, ve) != pytest.approx((u, v), abs=1e-3)  # its own weights, not the final run's


def _snapped(v, sd):
    """A released noisy scalar as the library snaps it (randomness.snap_release), recomputed
    here: the largest power of two <= min(1, sd / 4) as the grid."""
    grid = 2.0 ** np.floor(np.log2(min(1.0, sd / 4.0)))
    return np.rint(np.asarray(v, dtype=float) / grid) * grid


def test_blas_threads_is_bounded_and_capped_at_the_cpu_count(monkeypatch, small_split):
    import os

    import threadpoolctl

    from mixdp_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"blas_threads.*\[1, 1024\]"):
        make_method("adamix", blas_threads=100_000)
    seen = []
    real = threadpoolctl.threadpool_limits
    monkeypatch.setattr(threadpoolctl, "threadpool_limits", lambda n: seen.append(n) or real(n))
    make_method("ngd", target_epsilon=1.0, blas_threads=1000).fit(small_split)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert seen == [cpus]


def test_a_projection_dropping_more_than_the_bound_is_refused_naming_the_field():
    """projection=8 at D = 2,048 factorised a 2,040-dimensional complement at every step (58 s
    for 18 steps against 1.3 s, 417 MB): refused with the k that fits; one within it runs."""
    from mixdp_core.data.splits import Split, SplitSpec
    from mixdp_core.errors import ConfigError
    from mixdp_core.methods.adamix.engine import MAX_COMPLEMENT_DIM

    rng = np.random.default_rng(0)
    D = MAX_COMPLEMENT_DIM + 40

    def part(n):
        return rng.normal(size=(n, D)).astype(np.float32), np.arange(n) % 3

    (Xp, yp), (Xq, yq), (Xt, yt) = part(9), part(60), part(9)
    split = Split(Xp, yp, Xq, yq, Xt, yt, ["a", "b", "c"], np.array([], int), np.bincount(yq, minlength=3),
                  spec=SplitSpec(public_per_class=3))
    m = make_method("adamix", target_epsilon=1.0, projection=8)
    with pytest.raises(ConfigError, match=rf"^projection: projection=8 keeps 8 of D = {D} directions"):
        m.fit(split)
    assert len(m.ledger_) == 0  # refused before the count: nothing released (it was charged before)
    from mixdp_core.randomness import tracking_noise

    with tracking_noise() as drawn, pytest.raises(ConfigError):
        make_method("adamix", target_epsilon=1.0, projection=8).fit(split)
    assert drawn == [False]  # no release's generator made: the runner does not charge it
    with tracking_noise() as drawn:
        make_method("adamix", target_epsilon=1.0, projection=D - 8).fit(split)
    assert drawn == [True]
    make_method("adamix", target_epsilon=1.0, projection=D - 8).fit(split)


def test_a_tiny_guard_resolution_inside_its_range_takes_the_cap_instead_of_overflowing(digits_split):
    """guard_resolution = 1e-200 lies in its declared (0, 0.5]; (σ / (r n))² overflowed a float
    (OverflowError with a traceback). The share of releases is capped at 1/16 of the gradient
    releases anyway: a resolution past what the cap affords takes the cap."""
    from mixdp_core.methods import make_method

    tiny = make_method("adamix", target_epsilon=3.0, guard_resolution=1e-200).fit(digits_split)
    fine = make_method("adamix", target_epsilon=3.0, guard_resolution=1e-6).fit(digits_split)
    assert tiny.privacy_.epsilon <= 3.0 and np.isfinite(tiny.decision_function(digits_split.X_test)).all()
    assert tiny.privacy_.epsilon == pytest.approx(fine.privacy_.epsilon)  # both at the cap: one release plan
