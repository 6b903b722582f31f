"""The noisy count that chooses q and T: a pure release, composed basically and adaptively."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mixdp_core import accounting
from mixdp_core.errors import ConfigError
from mixdp_core.methods import make_method
from mixdp_core.randomness import geometric_count


def test_geometric_count_is_integer_with_the_two_sided_geometric_law():
    rng = np.random.default_rng(3)
    eps = 0.5
    z = np.array([geometric_count(rng, 100, eps) for _ in range(40_000)]) - 100
    assert np.all(z == np.round(z))
    a = math.exp(-eps)  # P(Z = k) = (1 - a)/(1 + a) a^|k|, independent computation
    for k in (0, 1, -1, 3):
        assert np.mean(z == k) == pytest.approx((1 - a) / (1 + a) * a ** abs(k), abs=0.006)
    assert np.var(z) == pytest.approx(2 * a / (1 - a) ** 2, rel=0.05)


def test_adaptive_composition_adds_the_pure_part_to_the_accounted_rest():
    count = accounting.PureDP(epsilon=0.06)
    steps = accounting.PoissonSubsampledGaussian(noise_multiplier=1.1, sample_rate=0.05, steps=200)
    ev = accounting.AdaptiveComposition(count, steps)
    for acc in ("pld", "rdp"):
        assert accounting.epsilon(ev, delta=1e-5, accountant=acc) == pytest.approx(
            0.06 + accounting.epsilon(steps, delta=1e-5, accountant=acc), rel=1e-12)
    e = accounting.epsilon(ev, delta=1e-5)
    assert accounting.delta(ev, epsilon=e) <= 1e-5 * 1.01
    assert accounting.delta(ev, epsilon=0.05) == 1.0  # below the pure part nothing is promised
    with pytest.raises(ConfigError, match="first"):
        accounting.AdaptiveComposition(steps, steps)


def test_dpsgd_steps_meet_the_rest_of_the_budget_whatever_the_count():
    count = accounting.noisy_count_event(target_epsilon=2.0, target_delta=1e-5, share=0.02)
    assert count.epsilon == pytest.approx(0.04)
    for q, T in ((0.02, 300), (0.1, 60)):  # q and T as two different released counts would set them
        s = accounting.calibrate_dpsgd_noise(sample_rate=q, steps=T, target_epsilon=2.0, target_delta=1e-5,
                                             accountant="pld", also=count)
        alone = accounting.epsilon(accounting.PoissonSubsampledGaussian(s, q, T), delta=1e-5, accountant="pld")
        assert alone <= 2.0 - 0.04 and alone > 2.0 - 0.04 - 0.01


def test_dp_linear_probe_reports_count_plus_steps_recomputed_with_dp_accounting(digits_features):
    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    from mixdp_core.data.splits import SplitSpec, make_split

    split = make_split(digits_features, SplitSpec(public_per_class=5, seed=0))
    m = make_method("dp_linear_probe", target_epsilon=1.0).fit(split)
    acc = PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.PoissonSampledDpEvent(m.sample_rate_, dp_accounting.GaussianDpEvent(m.noise_multiplier_)),
                m.steps_)
    indep = 0.02 * 1.0 + acc.get_epsilon(1e-5)
    assert m.privacy_.epsilon == pytest.approx(indep, rel=1e-9) and m.privacy_.epsilon <= 1.0
    assert "adaptive" in m.privacy_.mechanism and m.n_used_ == round(m.n_used_)


@pytest.mark.parametrize("accountant", ["pld", "rdp", "prv"])
def test_full_batch_with_a_count_calibrates_under_every_accountant(accountant):
    """q = 1 (the expected batch covers the released count): the exact GDP closed form, as reported."""
    count = accounting.PureDP(epsilon=0.04)
    s = accounting.calibrate_dpsgd_noise(sample_rate=1.0, steps=50, target_epsilon=2.0, target_delta=1e-5,
                                         accountant=accountant, also=count)
    exact = accounting.epsilon(accounting.AdaptiveComposition(count, accounting.PoissonSubsampledGaussian(s, 1.0, 50)),
                               delta=1e-5)
    assert 2.0 - 1e-3 < exact <= 2.0
