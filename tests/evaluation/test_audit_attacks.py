"""Membership attacks: class matching removes the imbalance bias; LiRA tells private from non-private."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mixdp_core.evaluation.audit import lira_scores, rmia_scores, run_audit


def test_class_matched_loss_attack_removes_the_imbalance_bias(audit_split_ir10):
    # replayed noise throughout this module: statistical thresholds at fixed draws
    r = run_audit(audit_split_ir10, "dp_ls", attack="loss", epsilon=3.0, method_params={"noise": "reproducible"})
    s = r.summary()
    assert s["auc"] <= 0.6  # class-matched: chance level for a DP model
    assert s["auc_unmatched"] > s["auc"] + 0.1  # the legacy pairing measured the class prior
    assert s["empirical_epsilon_lower"] is None and "coin" in s["bound_note"]
    assert s["n_members"] == s["n_nonmembers"]


def test_lira_tells_private_from_non_private(audit_split):
    t0 = time.perf_counter()
    dp = run_audit(audit_split, "fully_private", attack="lira", epsilon=1.0, reference_models=8,
                   method_params={"noise": "reproducible"}).summary()
    np_ = run_audit(audit_split, "paragon", attack="lira", method_params={"l2": 1e-5}, reference_models=8).summary()
    assert np_["auc"] > dp["auc"] + 0.05
    assert np_["rmia_auc"] > 0.58
    assert np_["claimed_epsilon"] is None and np_["alarm"] is False  # no claim, no alarm
    assert dp["alarm"] is False and dp["empirical_epsilon_lower"] <= dp["claimed_epsilon"]
    assert dp["n_members"] == dp["n_nonmembers"]  # class-matched per target
    assert time.perf_counter() - t0 < 60


def test_lira_scores_rank_members_first_on_synthetic_gaussians():
    rng = np.random.default_rng(0)
    K, N = 32, 400
    inm = rng.random((K, N)) < 0.5
    shift = rng.normal(1.0, 0.2, N)
    phi = rng.normal(0, 1, (K, N)) + inm * shift
    tin = rng.random(N) < 0.5
    target = rng.normal(0, 1, N) + tin * shift
    for online in (True, False):
        s = lira_scores(target, phi, inm, online=online)
        assert s[tin].mean() > s[~tin].mean() + 0.5
    p_t = 1 / (1 + np.exp(-target))
    p_r = 1 / (1 + np.exp(-phi))
    z = rng.normal(0, 1, (K + 1, 300))
    sr = rmia_scores(p_t, p_r, 1 / (1 + np.exp(-z[0])), 1 / (1 + np.exp(-z[1:])))
    assert sr[tin].mean() > sr[~tin].mean()


@pytest.mark.parametrize("method", ["dppl_mean", "dppl_public", "dp_linear_probe", "adamix"])
def test_black_box_audits_run_on_every_family_and_never_exceed_the_claim(audit_split, method):
    for attack, kw in (("canary", dict(trials=6)), ("one-run", dict(canaries=100))):
        s = run_audit(audit_split, method, attack=attack, epsilon=2.0, method_params={"noise": "reproducible"},
                      **kw).summary()
        assert 1.95 <= s["claimed_epsilon"] <= 2.0 + 1e-9  # from the accounting module (integer T)
        assert 0.0 <= s["empirical_epsilon_lower"] <= s["claimed_epsilon"]
        assert s["alarm"] is False and s["confidence"] == 0.95


def test_run_evaluation_uses_the_class_matched_loss_attack(audit_split_ir10):
    from mixdp_core.evaluation import evaluate
    from mixdp_core.methods import make_method

    m = make_method("dp_ls", target_epsilon=3.0).fit(audit_split_ir10)
    ev = evaluate(m, audit_split_ir10)
    assert ev.metrics["mia_class_matched"] is True
    assert ev.metrics["mia_auc"] <= 0.6 < ev.metrics["mia_auc_unmatched"]
    mi, ni = ev.arrays["mia_member_index"], ev.arrays["mia_nonmember_index"]
    assert np.array_equal(np.bincount(audit_split_ir10.y_private[mi], minlength=10),
                          np.bincount(audit_split_ir10.y_test[ni], minlength=10))


def test_the_white_box_claimed_profile_is_the_one_the_run_reports(audit_split):
    """The white-box audit tests δ(ε) of the run's own accountant (its ledger's: PLD for DP-SGD),
    not the module's default for subsampled Gaussians (RDP, up to 3× looser: a wrong PLD claim
    could never have been refuted); at the reported ε it is the reported δ."""
    import mixdp_core.accounting as A
    from mixdp_core.evaluation.audit.canary import claimed_profile
    from mixdp_core.methods import make_method

    m = make_method("dp_linear_probe", target_epsilon=2.0, noise="reproducible", epochs=2).fit(audit_split)
    assert m.ledger_.accountant == "pld"
    eps, dl = claimed_profile(m, points=5)
    ev = m.ledger_.event()
    pld = np.array([A.delta(ev, epsilon=float(e), accountant="pld") for e in eps])
    rdp = np.array([A.delta(ev, epsilon=float(e), accountant="rdp") for e in eps])
    np.testing.assert_allclose(dl, np.minimum(pld, rdp))  # both bound δ(ε): the claim is the smaller
    assert np.any(dl < 0.9 * rdp)  # the run's PLD claim, tighter than RDP where it matters
    assert A.delta(ev, epsilon=m.privacy_.epsilon, accountant="pld") <= m.privacy_.delta * (1 + 1e-6)
