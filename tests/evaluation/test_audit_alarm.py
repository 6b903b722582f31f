"""The alarm must catch a mechanism that adds half the noise it accounts for, and only it.

``HalfNoiseFullyPrivate`` is a test-only copy of ``fully_private`` whose NoisyGD runs with
σ/2 while ``privacy_`` is still computed (by the accounting module) for σ: a privacy bug of
exactly the kind audits exist for. The white-box Dirac-canary audit runs through the real
``run_noisygd`` code path, so it sees the real noise.
"""

from __future__ import annotations

import dataclasses

import pytest

from mixdp_core.evaluation.audit import run_audit
from mixdp_core.methods.adamix import FullyPrivate


class HalfNoiseFullyPrivate(FullyPrivate):
    """fully_private with half the noise it accounts for (test only, never registered)."""

    def _setup(self, split, d):
        problem, W_init, W_ref, opts, n = super()._setup(split, d)
        return problem, W_init, W_ref, dataclasses.replace(opts, noise_multiplier=opts.noise_multiplier / 2), n


@pytest.mark.parametrize("eps,trials", [(4.0, 1000), (1.0, 10_000)])
def test_half_noise_mechanism_raises_the_alarm(audit_split, eps, trials):
    """At ε = 1 the bug is invisible with 1,000 trials; 10,000 (10 trainings × 1,000 Dirac canaries,
    each training one matrix problem) catch it in a few seconds."""
    r = run_audit(audit_split, HalfNoiseFullyPrivate, attack="canary-whitebox", epsilon=eps, trials=trials, seed=0)
    s = r.summary()
    # the claim is the accounting module's (for sigma, not sigma/2)
    assert s["claimed_epsilon"] == pytest.approx(eps, abs=0.02)
    assert s["n_trials"] == trials
    assert s["alarm"] is True
    assert s["empirical_mu_lower"] > s["claimed_mu"]


@pytest.mark.parametrize("method,eps,trials", [("fully_private", 4.0, 1000), ("fully_private", 1.0, 1000),
                                               ("ngd", 2.0, 1000), ("fully_private", 1.0, 10_000)])
def test_correct_mechanisms_are_not_caught_and_bound_has_power(audit_split, method, eps, trials):
    r = run_audit(audit_split, method, attack="canary-whitebox", epsilon=eps, trials=trials, seed=1)
    s = r.summary()
    assert s["alarm"] is False
    assert 0.0 <= s["empirical_epsilon_lower"] <= s["claimed_epsilon"]
    assert s["empirical_mu_lower"] <= s["claimed_mu"]
    assert s["confidence"] == 0.95 and s["n_trials"] == trials
    if method == "fully_private" and eps == 4.0:
        # the Dirac canary is nearly tight for full-batch DP-GD (Nasr et al. 2023): power check
        assert s["empirical_epsilon_lower"] >= 0.5
        assert s["empirical_mu_lower"] >= 0.3 * s["claimed_mu"]


@pytest.mark.parametrize("method", ["dp_linear_probe", "dpsgd_global_adapt", "adamix"])
def test_dependent_canary_rows_canaries_use_the_one_run_bound_and_stay_below_the_claim(audit_split, method):
    s = run_audit(audit_split, method, attack="canary-whitebox", epsilon=4.0, trials=400, seed=2).summary()
    assert s["bound_method"] == "one_run"  # bias row / projection couple canaries: not independent trials
    assert s["alarm"] is False and 0.0 <= s["empirical_epsilon_lower"] <= s["claimed_epsilon"]
    assert s["auc"] > 0.55  # the white-box statistic sees the canaries
