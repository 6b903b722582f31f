"""pDP for every family: bounded by the run's ε, exact where checkable, owner-only."""

from __future__ import annotations

import numpy as np
import pytest

from mixdp_core import accounting
from mixdp_core.accounting.pdp import pdp_epsilon_gaussian_steps, pdp_epsilon_subsampled_gaussian
from mixdp_core.evaluation.pdp import PDP_UNAVAILABLE, per_instance_epsilon
from mixdp_core.methods import make_method


@pytest.mark.parametrize("name", ["fully_private", "dppl_mean", "dp_linear_probe", "dpsgd_global_adapt", "dp_ls",
                                  "dppl_public", "dppl_public_topk"])
def test_every_family_has_pdp_bounded_by_the_guarantee(audit_split, name):
    m = make_method(name, target_epsilon=2.0).fit(audit_split)
    e = per_instance_epsilon(m, delta=1e-5, split=audit_split)
    assert e.shape == (len(audit_split.y_private),)
    assert np.all(e >= 0) and np.all(e <= m.privacy_.epsilon + 1e-9)
    if name == "dppl_mean":  # default one step with rows on the sphere of radius sqrt(d) = its
        # projection radius: every sample attains the worst case
        assert np.allclose(e, m.privacy_.epsilon, rtol=1e-6)
    elif name == "dp_ls":  # b's share is the worst case for every row; A's reaches √¾ only on an axis
        assert np.all(e > 0.8 * m.privacy_.epsilon) and e.max() < m.privacy_.epsilon
    else:
        assert np.median(e) < m.privacy_.epsilon  # the realised run is kinder to typical samples


def test_unavailable_families_say_why():
    for name in ("paragon", "only_public"):
        assert len(PDP_UNAVAILABLE[name]) > 20


def test_gaussian_steps_full_ratio_equals_the_run():
    sig = np.array([3.0, 2.0, 4.0])
    e = pdp_epsilon_gaussian_steps(np.ones((2, 3)), sig, delta=1e-5)
    ev = accounting.Composition([accounting.GaussianMechanism(noise_multiplier=s) for s in sig])
    assert e[0] == pytest.approx(accounting.epsilon(ev, delta=1e-5), rel=1e-6)
    assert pdp_epsilon_gaussian_steps(np.zeros((1, 3)), sig, delta=1e-5)[0] == pytest.approx(0.0, abs=1e-9)


def test_subsampled_full_ratio_matches_dpsgd_accounting_and_is_monotone():
    q, sigma, T = 0.2, 3.0, 50
    run = accounting.epsilon(accounting.PoissonSubsampledGaussian(noise_multiplier=sigma, sample_rate=q, steps=T),
                             delta=1e-5, accountant="pld")
    r = np.vstack([np.ones(T), np.full(T, 0.5), np.zeros(T)])
    e = pdp_epsilon_subsampled_gaussian(r, sample_rate=q, noise_multiplier=sigma, delta=1e-5)
    assert e[0] == run  # the run's own PLD computation, not a clip
    assert e[0] > e[1] > e[2] == 0.0
    rdp = pdp_epsilon_subsampled_gaussian(r, sample_rate=q, noise_multiplier=sigma, delta=1e-5, accountant="rdp")
    run_rdp = accounting.epsilon(accounting.PoissonSubsampledGaussian(noise_multiplier=sigma, sample_rate=q, steps=T),
                                 delta=1e-5, accountant="rdp")
    assert rdp[0] == pytest.approx(run_rdp, rel=1e-6) and rdp[0] > e[0]  # same family as an RDP run


def test_dpsgd_pdp_stays_under_the_run_without_clipping_where_rdp_did_not(audit_split):
    """The issue's finding: integer-order RDP put rows above the run's PLD ε (then clipped)."""
    m = make_method("dp_linear_probe", target_epsilon=1.0).fit(audit_split)
    e = per_instance_epsilon(m, delta=1e-5, split=audit_split)
    rdp = m.pdp_accumulator_.epsilon(delta=1e-5, also=m.count_event_, accountant="rdp")
    assert np.sum(rdp > m.privacy_.epsilon) > 10  # what the RDP analysis alone would report
    assert e.max() <= m.privacy_.epsilon and np.all(e <= rdp + 1e-12)
    assert np.sum(e >= m.privacy_.epsilon * 0.999) >= 1  # always-clipped rows reach the run's ε


def test_dppl_public_pdp_is_exact_by_brute_force(audit_split):
    """Remove a sample, recompute the exponential mechanism, compare log-probabilities."""
    from mixdp_core.methods.prototypes.utilities import em_log_probs, public_utilities

    m = make_method("dppl_public", target_epsilon=2.0).fit(audit_split)
    e = per_instance_epsilon(m, delta=1e-5, split=audit_split)
    pool = audit_split.X_public
    U = public_utilities(audit_split.X_private, audit_split.y_private, pool, n_classes=audit_split.n_classes)
    for i in (0, 17, int(np.argmax(e))):
        keep = np.arange(len(audit_split.y_private)) != i
        U2 = public_utilities(audit_split.X_private[keep], audit_split.y_private[keep], pool,
                              n_classes=audit_split.n_classes)
        c = audit_split.y_private[i]
        lp = em_log_probs(U[c], epsilon=m.epsilon_em_, sensitivity=2.0, monotone=True)
        lp2 = em_log_probs(U2[c], epsilon=m.epsilon_em_, sensitivity=2.0, monotone=True)
        assert e[i] == pytest.approx(np.max(np.abs(lp - lp2)), rel=1e-4, abs=1e-6)


def test_run_metrics_mark_pdp_owner_only(audit_split):
    from mixdp_core.evaluation import evaluate

    m = make_method("dppl_mean", target_epsilon=2.0).fit(audit_split)
    ev = evaluate(m, audit_split)
    assert ev.metrics["pdp_owner_only"] is True and "pdp_epsilon" in ev.arrays
    assert ev.metrics["pdp_epsilon_kind"] == "exact"  # grouped with the owner-only diagnostics (pdp_epsilon_*)


def _enumerated_topk_pdp(u, shares, k, *, epsilon, sensitivity, monotone=False):
    """max_S |log P_{D-z_i}[S] - log P_D[S]| over every K-subset, from the sampler's own set probabilities."""
    import itertools

    from mixdp_core.methods.prototypes.utilities import topk_set_log_prob

    sets = list(itertools.combinations(range(len(u)), k))

    def logp(uu):
        return np.array([topk_set_log_prob(uu, S, k, epsilon=epsilon, sensitivity=sensitivity, monotone=monotone)
                         for S in sets])

    base = logp(u)
    return np.array([np.max(np.abs(logp(u - v) - base)) for v in shares])


@pytest.mark.parametrize("monotone", [True, False])
@pytest.mark.parametrize("pool,k", [(1, 1), (5, 1), (6, 2), (7, 3), (7, 7), (8, 4)])
def test_topk_pdp_equals_enumeration_of_every_k_subset(pool, k, monotone):
    from mixdp_core.accounting.pdp import pdp_epsilon_topk_exponential

    rng = np.random.default_rng([pool, k])
    u = rng.uniform(0.0, 6.0, pool)
    u[: pool // 2] = np.round(u[: pool // 2])  # ties, broken by index in the sampler
    shares = rng.uniform(0.0, 2.0, (5, pool)) * (rng.random((5, pool)) < 0.7)
    shares[0] = 0.0  # a sample that changes nothing: ε_i = 0
    e = pdp_epsilon_topk_exponential(u, shares, k=k, epsilon=1.3, sensitivity=2.0, monotone=monotone)
    ref = _enumerated_topk_pdp(u, shares, k, epsilon=1.3, sensitivity=2.0, monotone=monotone)
    np.testing.assert_allclose(e, ref, rtol=1e-9, atol=1e-12)
    assert e[0] == pytest.approx(0.0, abs=1e-12)
    assert np.all(e <= 1.3 + 1e-12)  # never above the mechanism's ε (shares in [0, Δu])


@pytest.mark.parametrize("sampling", ["monotone", "paper"])
def test_dppl_public_topk_pdp_matches_enumeration_on_a_tiny_pool(audit_split, sampling):
    """The method's ε_i, from its own fitted attributes, against removing the sample and enumerating."""
    import dataclasses

    from mixdp_core.methods.prototypes.utilities import public_utilities

    tiny = dataclasses.replace(audit_split, X_public=audit_split.X_public[:7], y_public=audit_split.y_public[:7])
    m = make_method("dppl_public_topk", target_epsilon=2.0, k=3, sampling=sampling).fit(tiny)
    e = per_instance_epsilon(m, delta=1e-5, split=tiny)
    f64 = dict(n_classes=tiny.n_classes, dtype=np.float64)
    U = public_utilities(tiny.X_private, tiny.y_private, tiny.X_public, **f64)
    for i in (0, 17, int(np.argmax(e)), int(np.argmin(e))):
        keep = np.arange(len(tiny.y_private)) != i
        U2 = public_utilities(tiny.X_private[keep], tiny.y_private[keep], tiny.X_public, **f64)
        c = tiny.y_private[i]
        ref = _enumerated_topk_pdp(U[c], (U[c] - U2[c])[None, :], 3, epsilon=m.epsilon_em_, sensitivity=2.0,
                                   monotone=m.monotone)[0]
        # the method's utilities come from float32 tiles: agreement to ~1e-5 in ε_i
        assert e[i] == pytest.approx(ref, rel=1e-3, abs=1e-4)
    assert np.all(e <= m.epsilon_em_ + 1e-9) and e.max() > 0
