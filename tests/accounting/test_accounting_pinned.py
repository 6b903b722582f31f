"""Pinned values from the peers' own tests and tutorials; each test cites its source."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import mixdp_core.accounting as A


def test_autodp_calibrator_tutorial_analytic_gaussian():
    # autodp, tutorials/tutorial_calibrator.ipynb, Example 1 (eps=0.1, delta=1e-6):
    #   GM {'sigma': 36.304688756269286} 0.10000000492560832
    #   Ana_GM {'sigma': 36.304691899114694} 0.09999999565548537
    sigma = A.calibrate_noise(steps=1, target_epsilon=0.1, target_delta=1e-6)
    assert sigma == pytest.approx(36.3047, abs=5e-5)
    assert A.gaussian_epsilon(1 / 36.304688756269286, delta=1e-6) == pytest.approx(0.10000000492560832, rel=1e-9)
    assert A.epsilon(A.GaussianMechanism(36.304691899114694), delta=1e-6) == pytest.approx(
        0.09999999565548537, rel=1e-9
    )


@pytest.mark.parametrize(
    "sigma, sensitivity, eps, expected",
    [
        # dp-accounting, python/dp_accounting/pld/privacy_loss_mechanism_test.py,
        # GaussianPrivacyLossTest.test_gaussian_get_delta_for_epsilon (sampling_prob = 1).
        (1.0, 1.0, 1.0, 0.12693674),
        (2.0, 2.0, 1.0, 0.12693674),
        (1.0, 3.0, 1.0, 0.78760074),
        (1.0, 1.0, 2.0, 0.02092364),
        (5.0, 5.0, 2.0, 0.02092364),
    ],
)
def test_dp_accounting_gaussian_delta(sigma, sensitivity, eps, expected):
    ev = A.GaussianMechanism(noise_multiplier=sigma, sensitivity=sensitivity)
    assert A.gdp_mu(ev) == pytest.approx(sensitivity / sigma)
    assert A.delta(ev, epsilon=eps) == pytest.approx(expected, abs=5e-9)
    assert A.gaussian_delta(sensitivity / sigma, eps) == pytest.approx(expected, abs=5e-9)


def test_dp_accounting_gaussian_delta_vectorized():
    # Same file, test_gaussian_get_delta_for_epsilon_vectorized (sigma = 1, sensitivity = 1).
    eps = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
    expected = [0.86749642, 0.67881797, 0.38292492, 0.12693674, 0.020923636]
    np.testing.assert_allclose(A.gaussian_delta(1.0, eps), expected, atol=5e-9)


def test_dp_accounting_gaussian_from_privacy_guarantee():
    # Same file, test_gaussian_from_privacy_parameters: (eps=16, delta=1e-5) -> sigma 0.344
    # (3 decimals), and (eps=1, delta=0.12693674) -> sigma 1.0.
    assert A.calibrate_noise(steps=1, target_epsilon=16.0, target_delta=1e-5) == pytest.approx(0.344, abs=5e-4)
    assert A.calibrate_noise(steps=1, target_epsilon=1.0, target_delta=0.12693674) == pytest.approx(1.0, abs=1e-6)


def test_opacus_rdp_accountant():
    # Opacus, opacus/tests/accountants_test.py, test_rdp_accountant:
    # noise 1.5, sample_rate 0.04, steps int(90 / 0.04) = 2250, delta 1e-5 -> 7.32911117143.
    ev = A.PoissonSubsampledGaussian(noise_multiplier=1.5, sample_rate=0.04, steps=int(90 / 0.04))
    assert A.epsilon(ev, delta=1e-5) == pytest.approx(7.32911117143, abs=1e-8)
    assert A.privacy_report(ev, delta=1e-5).accountant == "rdp"


def test_opacus_get_noise_multiplier():
    # Opacus, opacus/tests/accountants_test.py, test_get_noise_multiplier: eps 8, delta 1e-5,
    # sample_rate 0.04, 90 epochs -> 1.425307617 (Opacus bisects to epsilon_tolerance=0.01,
    # so its sigma is slightly above the smallest one; ours must not exceed it).
    s = A.calibrate_dpsgd_noise(sample_rate=0.04, steps=2250, target_epsilon=8.0, target_delta=1e-5)
    assert 1.40 < s <= 1.425307617 + 1e-9
    eps = A.epsilon(A.PoissonSubsampledGaussian(s, 0.04, 2250), delta=1e-5)
    assert 8.0 - 1e-6 <= eps <= 8.0


@pytest.mark.parametrize(
    "n, batch, sigma, epochs, dlt, expected",
    [
        # TF-Privacy, tensorflow_privacy/privacy/analysis/compute_dp_sgd_privacy_test.py,
        # test_compute_dp_sgd_privacy (RDP, Poisson sampling, steps = ceil(epochs*n/batch)).
        (60000, 150, 1.3, 15, 1e-5, 0.7242234026109595),
        (100000, 100, 1.0, 30, 1e-7, 1.4154988495444842),
    ],
)
def test_tf_privacy_compute_dp_sgd_privacy(n, batch, sigma, epochs, dlt, expected):
    steps = int(math.ceil(epochs * n / batch))
    ev = A.PoissonSubsampledGaussian(noise_multiplier=sigma, sample_rate=batch / n, steps=steps)
    got = A.epsilon(ev, delta=dlt)
    # Our order grid is a superset of TF-Privacy's at the optimum, so equal up to rounding.
    assert got == pytest.approx(expected, rel=1e-9)
    assert got <= expected * (1 + 1e-12)


def test_tf_privacy_example_privacy_rdp_and_pld():
    # TF-Privacy, compute_dp_sgd_privacy_test.py, test_compute_dp_sgd_example_privacy:
    # 1.2 epochs, noise 0.7, delta 1e-5, Poisson q = 1e-2, no microbatching:
    #   RDP 3.2392676, PLD 2.4612381 (steps = ceil(1.2 / 0.01) = 120).
    ev = A.PoissonSubsampledGaussian(noise_multiplier=0.7, sample_rate=1e-2, steps=120)
    rdp = A.epsilon(ev, delta=1e-5, accountant="rdp")
    assert rdp <= 3.2392676 + 1e-7  # more RDP orders than TF-Privacy: never larger
    assert rdp == pytest.approx(3.2392676, rel=1e-4)
    assert A.epsilon(ev, delta=1e-5, accountant="pld") == pytest.approx(2.4612381, abs=1e-6)


def test_autodp_exact_gaussian_mechanism_agrees():
    # autodp's analytic Gaussian (Balle & Wang 2018) for single and composed full-batch steps.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from autodp import dp_bank
        from autodp.mechanism_zoo import ExactGaussianMechanism

        for sigma, T, dlt in [(1.0, 1, 1e-5), (5.0, 30, 1e-6), (50.0, 1000, 1e-8), (0.5, 4, 1e-3)]:
            ours = A.epsilon(A.ComposedGaussian(sigma, T), delta=dlt)
            ref = ExactGaussianMechanism(sigma=sigma / math.sqrt(T)).get_approxDP(dlt)
            assert ours == pytest.approx(ref, rel=1e-7)
            assert ours == pytest.approx(dp_bank.get_eps_ana_gaussian(sigma / math.sqrt(T), dlt), rel=1e-7)


def test_autodp_ana_gaussian_calibrator_agrees_with_calibrate_noise():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from autodp.calibrator_zoo import ana_gaussian_calibrator
        from autodp.mechanism_zoo import ExactGaussianMechanism

        cal = ana_gaussian_calibrator()
        for eps, dlt, T in [(0.1, 1e-6, 1), (1.0, 1e-5, 100), (3.0, 1e-5, 1000)]:
            # T steps at sigma are one Gaussian at sigma / sqrt(T).
            ref = cal(ExactGaussianMechanism, eps, dlt, name="GM").params["sigma"] * math.sqrt(T)
            assert A.calibrate_noise(steps=T, target_epsilon=eps, target_delta=dlt) == pytest.approx(ref, rel=1e-6)


def test_dp_accounting_exact_gaussian_agrees():
    import dp_accounting

    for sigma, dlt in [(0.3, 1e-3), (1.0, 1e-10), (36.3, 1e-6), (1e4, 1e-6)]:
        assert A.gaussian_epsilon(1 / sigma, delta=dlt) == pytest.approx(
            dp_accounting.get_epsilon_gaussian(sigma, dlt), rel=1e-8, abs=1e-12
        )
        assert A.calibrate_noise(steps=1, target_epsilon=1.0, target_delta=dlt) == pytest.approx(
            dp_accounting.get_sigma_gaussian(1.0, dlt), rel=1e-8
        )


def test_autodp_bbghs_conversion_agrees_with_tight_zcdp():
    # autodp.converter.rdp_to_approxdp with BBGHS_conversion=True is the same bound
    # (Balle et al. 2020, Thm. 21 = Canonne-Kamath-Steinke 2020, Prop. 12) for RDP(α) = ρα.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from autodp.converter import rdp_to_approxdp

        for rho in [1e-4, 0.01, 0.5, 10.0]:
            ref = rdp_to_approxdp(lambda a, r=rho: r * a, BBGHS_conversion=True)(1e-6)
            assert A.zcdp_to_epsilon(rho, delta=1e-6) == pytest.approx(ref, rel=1e-8)
