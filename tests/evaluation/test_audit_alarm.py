"""The alarm must catch a mechanism that adds half the noise it accounts for, and only it.

``HalfNoiseFullyPrivate`` is a test-only copy of ``fully_private`` whose NoisyGD runs with
σ/2 while ``privacy_`` is still computed (by the accounting module) for σ: a privacy bug of
exactly the kind audits exist for. The white-box Dirac-canary audit runs through the real
``run_noisygd`` code path, so it sees the real noise.

DP-SGD: ``NoBiasDPSGD`` is the real ``dp_linear_probe`` training loop (Poisson sampling,
per-example clipping, Gaussian noise, momentum; accounted by the accounting module) on features
without the bias coordinate, so that each Dirac canary's row is its own (independent trials);
``HalfNoiseNoBiasDPSGD`` draws σ/2 and still reports σ.
"""

from __future__ import annotations

import dataclasses
import functools
from unittest import mock

import numpy as np
import pytest
from scipy import stats as st

from mixdp_core import accounting
from mixdp_core.evaluation.audit import run_audit
from mixdp_core.evaluation.audit.stats import epsilon_lower_bound
from mixdp_core.methods.adamix import FullyPrivate
from mixdp_core.methods.prototypes import baselines
from mixdp_core.methods.prototypes.baselines import DPLinearProbe
from mixdp_core.methods.prototypes.utilities import l2_normalize


#: The ledger's real ``release`` (the lying test methods below wrap it).
_TRUE_RELEASE = accounting.RunLedger.release


class HalfNoiseFullyPrivate(FullyPrivate):
    """fully_private with half the noise it accounts for (test only, never registered). The run
    ledger records the noise the engine draws, so the lie must reach the ledger too."""

    def _setup(self, split, d):
        setup = super()._setup(split, d)
        opts = setup.options
        return setup._replace(options=dataclasses.replace(opts, noise_multiplier=opts.noise_multiplier / 2))

    def fit(self, split, **kw):
        sigma = self.config.noise_multiplier

        def lying(ledger, event, **k):  # records a gradient step at the config's σ, not the σ/2 drawn
            if isinstance(event, accounting.GaussianMechanism) and k.get("what") == "gradient step":
                event = accounting.GaussianMechanism(noise_multiplier=sigma)
            return _TRUE_RELEASE(ledger, event, **k)

        with mock.patch.object(accounting.RunLedger, "release", lying):
            return super().fit(split, **kw)


@pytest.mark.parametrize("eps,trials", [(4.0, 1000), (1.0, 10_000)])
def test_half_noise_mechanism_raises_the_alarm(audit_split, eps, trials):
    """At ε = 1 the bug is invisible with 1,000 trials; 10,000 (10 trainings × 1,000 Dirac canaries,
    each training one matrix problem) catch it in a few seconds."""
    r = run_audit(audit_split, HalfNoiseFullyPrivate, attack="canary-whitebox", epsilon=eps, trials=trials, seed=0,
                  method_params={"noise": "reproducible"})
    s = r.summary()
    # the claim is the accounting module's (for sigma, not sigma/2)
    assert s["claimed_epsilon"] == pytest.approx(eps, abs=0.02)
    assert s["n_trials"] == trials
    assert s["alarm"] is True
    assert s["empirical_mu_lower"] > s["claimed_mu"]
    assert any(r.startswith("the empirical lower bound μ ≥") for r in s["alarm_reasons"])
    assert (s["empirical_epsilon_lower"] > s["claimed_epsilon"]) == any("ε ≥" in r for r in s["alarm_reasons"])


@pytest.mark.parametrize("method,eps,trials", [("fully_private", 4.0, 1000), ("fully_private", 1.0, 1000),
                                               ("ngd", 2.0, 1000), ("fully_private", 1.0, 10_000)])
def test_correct_mechanisms_are_not_caught_and_bound_has_power(audit_split, method, eps, trials):
    # replayed noise: the power check is a fixed function of the code at this seed, not a new
    # coin flip at every CI run (the secure default draws the same distribution)
    r = run_audit(audit_split, method, attack="canary-whitebox", epsilon=eps, trials=trials, seed=1,
                  method_params={"noise": "reproducible"})
    s = r.summary()
    assert s["alarm"] is False
    assert 0.0 <= s["empirical_epsilon_lower"] <= s["claimed_epsilon"]
    assert s["empirical_mu_lower"] <= s["claimed_mu"]
    assert s["confidence"] == 0.95 and s["n_trials"] == trials
    if method == "fully_private" and eps == 4.0:
        # the Dirac canary is nearly tight for full-batch DP-GD (Nasr et al. 2023): power check
        assert s["empirical_epsilon_lower"] >= 0.5
        assert s["empirical_mu_lower"] >= 0.3 * s["claimed_mu"]


@pytest.mark.parametrize("method,params", [("dp_linear_probe", {}), ("dpsgd_global_adapt", {}),
                                           ("adamix", {"projection": "paper"})])
def test_dependent_canary_rows_canaries_use_the_one_run_bound_and_stay_below_the_claim(audit_split, method, params):
    s = run_audit(audit_split, method, attack="canary-whitebox", epsilon=4.0, trials=400, seed=2,
                  method_params={"noise": "reproducible", **params}).summary()
    assert s["bound_method"] == "one_run"  # bias row / projection couple canaries: not independent trials
    assert s["alarm"] is False and 0.0 <= s["empirical_epsilon_lower"] <= s["claimed_epsilon"]
    assert s["auc"] > 0.55  # the white-box statistic sees the canaries


# ----------------------------------------------------------------------------- DP-SGD


def _no_bias(X):
    return l2_normalize(np.asarray(X, dtype=np.float64))


class NoBiasDPSGD(DPLinearProbe):
    """dp_linear_probe without the bias coordinate (test only, never registered)."""

    audit_bias_row = False

    def fit(self, split, **kw):
        with mock.patch.object(baselines, "_augment", _no_bias):
            return super().fit(split, **kw)

    def decision_function(self, X):
        with mock.patch.object(baselines, "_augment", _no_bias):
            return super().decision_function(X)


_calibrate = accounting.calibrate_dpsgd_noise  # the real solver (patched below)


@functools.lru_cache(maxsize=None)
def _half_sigma(**kw):
    return _calibrate(**kw) / 2


def _lying_release(self, event, **kw):
    """Records a DP-SGD step as if its noise were twice what was drawn (test only)."""
    if isinstance(event, accounting.PoissonSubsampledGaussian):
        event = accounting.PoissonSubsampledGaussian(2 * event.noise_multiplier, event.sample_rate, event.steps)
    return _TRUE_RELEASE(self, event, **kw)



class HalfNoiseNoBiasDPSGD(NoBiasDPSGD):
    """Draws noise σ/2 while its ledger records, and ``privacy_`` reports, σ (test only: the run
    ledger records the noise actually used, so the lie must reach the ledger too)."""

    def fit(self, split, **kw):
        with mock.patch.object(accounting, "calibrate_dpsgd_noise", _half_sigma), \
                mock.patch.object(accounting.RunLedger, "release", _lying_release):
            return super().fit(split, **kw)

    def _event(self, sigma, q, t):
        return super()._event(2 * sigma, q, t)

    def _epsilon_spent(self, sigma, q, t, T, delta):  # the progress curve claims σ too
        return super()._epsilon_spent(2 * sigma, q, t, T, delta)


#: q = 500/2000 = 0.25, T = ceil(3/q) = 12 steps; a public size bound so the step size does not
#: depend on how many canaries were included.
DPSGD_PARAMS = dict(dataset_size="public_bound", size_bound=2000, expected_batch_size=500, epochs=3, clip_norm=0.5)


def test_dpsgd_half_noise_mechanism_raises_the_alarm(audit_split):
    s = run_audit(audit_split, HalfNoiseNoBiasDPSGD, attack="canary-whitebox", epsilon=4.0, trials=5000, seed=0,
                  method_params=dict(DPSGD_PARAMS, noise="reproducible")).summary()
    assert s["claimed_epsilon"] == pytest.approx(4.0, abs=0.02)  # the accounting module's, for σ
    assert s["bound_method"] == "clopper_pearson_split" and s["n_trials"] == 5000  # independent trials
    assert s["empirical_mu_lower"] is None  # q < 1: not a Gaussian claim, its privacy profile is tested
    assert s["empirical_epsilon_lower"] < s["claimed_epsilon"]  # the single (ε, δ) point alone misses it ...
    assert s["profile_violation"] > 0 and s["alarm"] is True  # ... the claimed curve δ(ε) does not
    assert len(s["alarm_reasons"]) == 1 and "privacy profile" in s["alarm_reasons"][0]  # and the alarm says so


@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_dpsgd_correct_mechanism_is_not_caught(audit_split, eps):
    s = run_audit(audit_split, NoBiasDPSGD, attack="canary-whitebox", epsilon=eps, trials=5000, seed=0,
                  method_params=dict(DPSGD_PARAMS, noise="reproducible")).summary()
    assert s["bound_method"] == "clopper_pearson_split"
    assert s["alarm"] is False and s["profile_violation"] <= 0
    assert 0.0 <= s["empirical_epsilon_lower"] <= s["claimed_epsilon"]
    assert s["auc"] > 0.55  # the canaries are seen


def test_real_dpsgd_probe_keeps_the_one_run_bound_without_a_size_bound(audit_split):
    """With the bias row (or a count that includes the canaries) the canaries are not independent."""
    from mixdp_core.evaluation.audit.canary import independent_canary_rows

    assert not independent_canary_rows("dp_linear_probe", DPSGD_PARAMS)
    assert not independent_canary_rows(NoBiasDPSGD, dict(DPSGD_PARAMS, dataset_size="noisy_count"))
    assert independent_canary_rows(NoBiasDPSGD, DPSGD_PARAMS)


def test_adamix_canaries_are_independent_exactly_without_its_projection():
    """AdaMix's default keeps every direction (each canary's release row is its own); the
    paper's projection couples them. Read from the config's default, not a literal."""
    from mixdp_core.evaluation.audit.canary import independent_canary_rows

    assert independent_canary_rows("adamix", {}) and independent_canary_rows("adamix", {"projection": "none"})
    assert not independent_canary_rows("adamix", {"projection": "paper"})
    assert not independent_canary_rows("adamix", {"projection": "rank"})


@pytest.mark.parametrize("shift,refuted", [(2.0, True), (1.0, False)])
def test_profile_test_against_the_gaussian_closed_form(shift, refuted):
    """Trials of N(shift·μ, 1) vs N(0, 1) against the μ-GDP profile, written in closed form
    (Balle & Wang 2018: δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)), not by the accounting module."""
    mu = 1.0
    eps = np.linspace(0.0, 8.0, 49)
    prof = st.norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * st.norm.cdf(-eps / mu - mu / 2)
    rng = np.random.default_rng(3)
    b = epsilon_lower_bound(rng.normal(shift * mu, 1.0, 5000), rng.normal(0.0, 1.0, 5000), delta=1e-5,
                            profile=(eps, prof), seed=0)
    assert (b.profile_violation > 0) is refuted
    assert prof[0] == pytest.approx(accounting.delta(accounting.GaussianMechanism(noise_multiplier=1 / mu),
                                                     epsilon=0.0), abs=1e-3)


def test_the_ledger_records_the_noise_drawn_not_the_noise_configured(audit_split):
    """Without the lie in the ledger, half the noise is caught before any audit: the ledger
    records the engine's σ/2, privacy_ reports its true (larger) ε, and verify_privacy fails
    the run because the releases exceed the calibrated plan."""
    class HonestLedgerHalfNoise(FullyPrivate):
        def _setup(self, split, d):
            setup = super()._setup(split, d)
            opts = setup.options
            return setup._replace(options=dataclasses.replace(opts, noise_multiplier=opts.noise_multiplier / 2))

    m = HonestLedgerHalfNoise(target_epsilon=2.0, noise="reproducible").fit(audit_split)
    full = FullyPrivate(target_epsilon=2.0, noise="reproducible").fit(audit_split)
    assert m.privacy_.epsilon > 1.5 * full.privacy_.epsilon
    with pytest.raises(accounting.PlanExceededError, match="more than its plan"):
        m.verify_privacy()


def test_a_low_confidence_bound_above_the_claim_is_not_called_a_bug(audit_split):
    """At confidence 0.001 a correct run's bound sat above its ε (1.12 against 0.986, a review's
    `mixdp audit --confidence 0.001`) and the audit cried "privacy bug"; an alarm now needs
    ALARM_MIN_CONFIDENCE, and the confidence is printed as given (0.999 read "100%"). The
    white-box summary carries the ledger's release counts it computed (why a bound may sit
    below the claim)."""
    from mixdp_core.evaluation.audit import ALARM_MIN_CONFIDENCE

    r = run_audit(audit_split, "fully_private", attack="canary-whitebox", epsilon=1.0, trials=1000, seed=1,
                  method_params={"noise": "reproducible"})
    s = r.summary()
    assert s["alarm"] is False and s["releases_recorded"] >= s["releases_observed"] >= 1
    above = dict(epsilon_lower=1.5 * s["claimed_epsilon"], mu_lower=None, profile_violation=None)
    quiet = dataclasses.replace(r, bound=dataclasses.replace(r.bound, confidence=0.001, **above))
    assert 0.001 < ALARM_MIN_CONFIDENCE and not quiet.alarm and not quiet.alarm_reasons
    assert "confidence 0.001, below the 0.9" in quiet.summary()["alarm_note"]
    assert r.summary()["alarm_note"] is None  # nothing above the claim: nothing to explain
    loud = dataclasses.replace(r, bound=dataclasses.replace(r.bound, confidence=0.999, **above))
    assert loud.alarm and any("(confidence 0.999)" in x for x in loud.alarm_reasons) and loud.alarm_note is None
    # an audit stored before the floor, alarmed at 0.001, refutes nothing on the audit page
    from mixdp_core.app_support.audit import guarantee_caveat

    stored = {**quiet.summary(), "alarm": True}
    assert guarantee_caveat({}, [stored]) is None and guarantee_caveat({}, [loud.summary()])
