"""Privacy hygiene: the private count is accounted (or declared public), DP-SGD is calibrated
and reported with PLD and checked against an independent PLD computation, replace-one runs
say so, owner-only diagnostics are grouped, and the work a budget implies is bounded."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mixdp_core.accounting as A
from mixdp_core.errors import ConfigError
from mixdp_core.methods import make_method

from .conftest import RESULTS


def independent_pld(blocks, delta, interval=5e-5):
    """ε from dp-accounting's PLD on a finer grid than the one the library reports with."""
    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    acc = PLDAccountant(value_discretization_interval=interval)
    for sigma, q, t in blocks:
        ev = dp_accounting.GaussianDpEvent(sigma)
        acc.compose(ev if q >= 1 else dp_accounting.PoissonSampledDpEvent(q, ev), int(t))
    return acc.get_epsilon(delta)


@pytest.fixture(scope="module")
def split():
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features

    return make_split(get_features("digits", "pixels"), SplitSpec(public_per_class=5, seed=0))


@pytest.mark.parametrize("name,eps", [("dp_linear_probe", 1.0), ("dpsgd_global_adapt", 0.5)])
def test_dpsgd_reported_epsilon_tight_and_never_below_independent_pld(name, eps, split):
    m = make_method(name, target_epsilon=eps, epochs=3).fit(split)
    # the pure noisy count (ε_c) chose q and T; the steps are PLD-accounted; basic adaptive composition
    e_ind = m.count_event_.epsilon + independent_pld([(m.noise_multiplier_, m.sample_rate_, m.steps_)], 1e-5)
    assert e_ind <= m.privacy_.epsilon <= eps
    assert m.privacy_.epsilon >= eps * (1 - 3e-3)  # the budget is used, not wasted
    assert m.privacy_.accountant == "pld" and m.epsilon_rdp_ > m.privacy_.epsilon
    assert "noisy private count" in m.privacy_.mechanism
    # q and T come from the noisy count, not from the exact N
    assert float(m.n_used_).is_integer() and m.sample_rate_ == pytest.approx(min(1.0, 256 / m.n_used_))
    RESULTS.append({"category": "accounting", "case": f"{name} ε={eps} (3 epochs, digits, with noisy count)",
                    "reported_pld": m.privacy_.epsilon, "rdp_beside": m.epsilon_rdp_, "independent_pld": e_ind})


@pytest.mark.parametrize("eps", [1.0])
def test_before_after_rdp_vs_pld_calibration(eps):
    """Before: σ calibrated with RDP, so PLD says the run spent less than reported (budget
    wasted). After: σ calibrated with PLD; the reported ε is the PLD one, ≥ independent PLD."""
    n, B, epochs = 1207, 256, 20
    q = B / n
    T = math.ceil(epochs / q)
    s_rdp = A.calibrate_dpsgd_noise(sample_rate=q, steps=T, target_epsilon=eps, target_delta=1e-5, accountant="rdp")
    s_pld = A.calibrate_dpsgd_noise(sample_rate=q, steps=T, target_epsilon=eps, target_delta=1e-5, accountant="pld")
    before = independent_pld([(s_rdp, q, T)], 1e-5)
    after = A.epsilon(A.PoissonSubsampledGaussian(s_pld, q, T), delta=1e-5, accountant="pld")
    after_ind = independent_pld([(s_pld, q, T)], 1e-5)
    after_rdp = A.epsilon(A.PoissonSubsampledGaussian(s_pld, q, T), delta=1e-5, accountant="rdp")
    assert before < eps * 0.97  # RDP calibration wastes budget
    assert after_ind <= after <= eps and after >= eps * (1 - 2e-3)
    assert s_pld < s_rdp
    RESULTS.append({"category": "accounting", "case": f"DP-SGD q={q:.3f}, T={T}, target ε={eps}",
                    "before_sigma": s_rdp, "before_pld": before, "after_sigma": s_pld, "reported_pld": after,
                    "rdp_beside": after_rdp, "independent_pld": after_ind})


def test_public_n_is_said_in_the_report(split):
    m = make_method("dp_linear_probe", target_epsilon=2.0, epochs=2, dataset_size="public").fit(split)
    assert "treated as public" in m.privacy_.mechanism
    assert m.sample_rate_ == pytest.approx(256 / len(split.y_private))


def test_public_bound_is_checked_before_running():
    with pytest.raises(ConfigError) as e:
        make_method("dp_linear_probe", dataset_size="public_bound", size_bound=10**7, epochs=100,
                    expected_batch_size=1).preflight()
    assert e.value.field == "epochs" and "100,000" in str(e.value)
    with pytest.raises(ConfigError) as e:
        make_method("dp_linear_probe", dataset_size="public_bound").preflight()
    assert e.value.field == "size_bound"


def test_replace_one_is_said_in_the_report(split):
    r = make_method("dppl_mean", target_epsilon=2.0, neighbouring="replace").fit(split)
    a = make_method("dppl_mean", target_epsilon=2.0).fit(split)
    assert "replace-one" in r.privacy_.mechanism and "replace-one" not in a.privacy_.mechanism
    from mixdp_core.app_support.charts import privacy_table

    rows = {x["notion"]: x["value"] for x in privacy_table({"privacy": r.privacy_.to_dict(), "epsilon": 2.0})}
    assert rows["neighbouring relation"].startswith("replace-one")


def test_diagnostics_grouped_in_run_metrics(split, tmp_path):
    from mixdp_core.runs.runner import RunConfig, execute
    from mixdp_core.runs.store import RunStore

    store = RunStore(tmp_path / "s")
    rid = execute(RunConfig(dataset="digits", encoder="pixels", method="dp_linear_probe", target_epsilon=2.0,
                            method_params={"epochs": 2}), store=store)
    m = store.get_run(rid).metrics
    d = m["diagnostics"]
    assert "not covered by the reported epsilon" in d["note"]
    assert {"mia_auc", "n_private", "pdp_epsilon_max"} & set(d) >= {"mia_auc", "n_private"}
    assert m["epsilon_rdp"] > m["epsilon"]


def test_step_ceiling_is_configurable_and_curves_are_bounded(monkeypatch):
    monkeypatch.setenv("MIXDP_MAX_STEPS", "50")
    with pytest.raises(ConfigError) as e:
        A.calibrate_steps(noise_multiplier=20.0, target_epsilon=3.0, target_delta=1e-5)
    assert e.value.field == "epsilon" and "limit of 50 steps" in str(e.value)
    # the σ the message proposes does fit the limit
    s = float(str(e.value).split("noise_multiplier <= ")[1].split()[0])
    assert A.calibrate_steps(noise_multiplier=s, target_epsilon=3.0, target_delta=1e-5) <= 50
    monkeypatch.setenv("MIXDP_MAX_STEPS", "zero")
    with pytest.raises(ConfigError) as e:
        A.step_limit()
    assert e.value.field == "MIXDP_MAX_STEPS"
    t, eps = A.privacy_curve_points(noise_multiplier=1.0, steps=10**9, delta=1e-5, points=100)
    assert len(t) == len(eps) <= 100 and t[-1] == 10**9 and np.all(np.diff(eps) >= 0)
