"""pDP for every family: bounded by the run's ε, exact where checkable, owner-only."""

from __future__ import annotations

import numpy as np
import pytest

from mixdp_core import accounting
from mixdp_core.accounting.pdp import pdp_epsilon_gaussian_steps, pdp_epsilon_subsampled_gaussian
from mixdp_core.evaluation.pdp import PDP_UNAVAILABLE, per_instance_epsilon
from mixdp_core.methods import make_method


@pytest.mark.parametrize("name", ["fully_private", "dppl_mean", "dp_linear_probe", "dpsgd_global_adapt", "dp_ls",
                                  "dppl_public"])
def test_every_family_has_pdp_bounded_by_the_guarantee(audit_split, name):
    m = make_method(name, target_epsilon=2.0).fit(audit_split)
    e = per_instance_epsilon(m, delta=1e-5, split=audit_split)
    assert e.shape == (len(audit_split.y_private),)
    assert np.all(e >= 0) and np.all(e <= m.privacy_.epsilon + 1e-9)
    if name in ("dp_ls", "dppl_mean"):  # unit-norm statistics / dppl_mean's default one step with rows on
        # the sphere of radius sqrt(d) = its projection radius: every sample attains the worst case
        assert np.allclose(e, m.privacy_.epsilon, rtol=1e-6)
    else:
        assert np.median(e) < m.privacy_.epsilon  # the realised run is kinder to typical samples


def test_unavailable_families_say_why():
    for name in ("dppl_public_topk", "sparse_finetune", "paragon"):
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
                             delta=1e-5)
    r = np.vstack([np.ones(T), np.full(T, 0.5), np.zeros(T)])
    e = pdp_epsilon_subsampled_gaussian(r, sample_rate=q, noise_multiplier=sigma, delta=1e-5)
    assert e[0] == pytest.approx(run, rel=0.02)  # integer orders only
    assert e[0] > e[1] > e[2] == 0.0


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
