"""CoinPress (DPPL-Mean) never releases an un-noised mean; its noise has the stated variance."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mixdp_core.methods.prototypes import dppl_mean
from mixdp_core.methods.prototypes.dppl_mean import coinpress_mean, gaussian_tailbound


def noise_variance_consistent(samples: np.ndarray, centre: np.ndarray, sd: float, alpha: float = 1e-4) -> bool:
    """Two-sided chi-square test that ``samples − centre`` are i.i.d. N(0, sd²) entries."""
    z = ((samples - centre) / sd).ravel()
    df = z.size
    q = float(np.sum(z**2))
    return stats.chi2.ppf(alpha / 2, df) <= q <= stats.chi2.ppf(1 - alpha / 2, df)


def _points_inside_ball(n=40, d=5, seed=0):
    rng = np.random.default_rng(seed)
    # all points well inside B(0, sqrt(d) + γ): no clipping in the first step
    return rng.normal(0.0, 0.2, size=(n, d))


@pytest.mark.parametrize("neighbouring", ["replace", "add_remove"])
def test_single_step_noise_has_stated_variance(neighbouring):
    X = _points_inside_ball()
    n, d = X.shape
    rho = 0.3
    R = math.sqrt(d) + gaussian_tailbound(d, 0.01)
    outs, sds = [], []
    for s in range(300):
        rng = np.random.default_rng(s)
        c, hist = coinpress_mean(X, rhos=(rho,), rng=rng, neighbouring=neighbouring, count_rho=1e6)
        outs.append(c)
        sds.append(hist[0]["noise_sd"])
        assert hist[0]["clip_radius"] == pytest.approx(R)
    outs = np.array(outs)
    if neighbouring == "replace":
        sd = (2 * R / n) / math.sqrt(2 * rho)
        assert np.allclose(sds, sd)
        assert noise_variance_consistent(outs, X.mean(axis=0), sd)
    else:  # count noise at count_rho=1e6 is negligible (sd 7e-4 on n = 40)
        sd = (R / math.sqrt(2 * rho)) / n
        assert np.allclose(sds, sd, rtol=1e-3)
        assert noise_variance_consistent(outs, X.mean(axis=0), sd)


def test_zero_noise_is_detected(monkeypatch):
    """With the noise patched to zero the variance check fails: the test has teeth."""
    X = _points_inside_ball()
    n, d = X.shape
    R = math.sqrt(d) + gaussian_tailbound(d, 0.01)
    sd = (2 * R / n) / math.sqrt(2 * 0.3)
    monkeypatch.setattr(dppl_mean, "_gaussian_noise", lambda rng, sd, size: np.zeros(size))
    outs = np.array([coinpress_mean(X, rhos=(0.3,), rng=np.random.default_rng(s))[0] for s in range(50)])
    np.testing.assert_allclose(outs, np.broadcast_to(X.mean(axis=0), outs.shape))
    assert not noise_variance_consistent(outs, X.mean(axis=0), sd)


@pytest.mark.parametrize("neighbouring", ["replace", "add_remove"])
def test_every_step_of_every_class_is_noised(monkeypatch, digits_split, neighbouring):
    """DPPL-Mean draws noise at every step of every class, with the stated sd.

    replace: the clipped mean has sensitivity 2 R_i / n_c -> sd = 2 R_i / (n_c sqrt(2 ρ_i)).
    add_remove (default): one noisy count per class (sd 1/sqrt(2 ρ_count)), then the clipped
    centred *sum* has sensitivity R_i -> sd = R_i / sqrt(2 ρ_i).
    """
    calls = []
    real = dppl_mean._gaussian_noise

    def spy(rng, sd, size):
        calls.append((sd, size))
        return real(rng, sd, size)

    monkeypatch.setattr(dppl_mean, "_gaussian_noise", spy)
    pytest.importorskip("mixdp_core.accounting")
    m = dppl_mean.DPPLMean(target_epsilon=1.0, seed=0, neighbouring=neighbouring).fit(digits_split)
    C, d = digits_split.n_classes, digits_split.dim
    counts = digits_split.private_counts
    if neighbouring == "add_remove":
        assert len(calls) == C + 3 * C
        count_rho = m.rho_ - sum(m.step_rhos_)
        for c in range(C):
            assert calls[c] == (pytest.approx(1 / math.sqrt(2 * count_rho)), 1)
        calls = calls[C:]
    assert len(calls) == 3 * C
    for i, rho_i in enumerate(m.step_rhos_):
        for c in range(C):
            sd, size = calls[i * C + c]
            R = m.coinpress_history_[c][i]["clip_radius"]
            assert size == d
            if neighbouring == "replace":
                assert sd == pytest.approx(2 * R / (counts[c] * math.sqrt(2 * rho_i)))
            else:
                assert sd == pytest.approx(R / math.sqrt(2 * rho_i))
            assert sd > 0


def test_radius_shrinks_at_reasonable_budget():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5000, 16)) + 3.0
    c, hist = coinpress_mean(X, rhos=tuple(np.array([5, 7, 52]) / 64 * 1.0), rng=rng)
    radii = [h["radius"] for h in hist]
    assert radii[0] > radii[1] > radii[2]
    assert np.linalg.norm(c - X.mean(axis=0)) < 0.5
