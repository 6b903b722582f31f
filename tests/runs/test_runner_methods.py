"""The runner with the real AdaMix-family methods on scikit-learn digits (pixels).

Checks the promises of the results report: the reported ε of every run equals the
accounting module's ε for (σ, T) as executed, every per-instance ε_i <= ε, MIA AUC in [0, 1].
"""

import numpy as np
import pytest

from mixdp_core import accounting
from mixdp_core.runs import CANCELLED, COMPLETED, RunStore
from mixdp_core.runs.runner import RunConfig, execute

PRIVATE = ("fully_private", "ngd", "adamix", "ppgd")


def _run(tmp_path, feats, method, **kw):
    st = RunStore(tmp_path)
    cfg = RunConfig(dataset="digits", encoder="pixels", method=method, seed=kw.pop("seed", 0),
                    target_epsilon=kw.pop("target_epsilon", 1.0), **kw)
    return st, execute(cfg, store=st, features=feats)


@pytest.mark.parametrize("method", PRIVATE)
def test_reported_epsilon_matches_accounting(tmp_path, digits_features, method):
    st, rid = _run(tmp_path, digits_features, method, method_params={"noise_multiplier": 20.0})
    rec = st.get_run(rid)
    m = rec.metrics
    assert rec.status == COMPLETED
    T, sigma, delta = m["steps"], m["noise_multiplier"], m["delta"]
    assert sigma == 20.0 and delta == 1e-5 and T >= 1
    # independent recomputation: T full-batch Gaussian releases with noise multiplier sigma
    eps = accounting.epsilon(accounting.ComposedGaussian(sigma, T), delta=delta)
    assert m["epsilon"] == pytest.approx(eps, rel=1e-9)
    assert m["epsilon"] <= 1.0 + 1e-9
    assert m["mu"] == pytest.approx(np.sqrt(T) / sigma, rel=1e-6)
    # per-instance DP: every ε_i <= ε
    e_i = st.load_artifacts(rid)["pdp_epsilon"]
    assert e_i.shape == (m["n_private"],)
    assert np.all(e_i >= 0) and np.all(e_i <= m["epsilon"] + 1e-9)
    assert m["pdp_epsilon_max"] == pytest.approx(e_i.max())
    assert 0.0 <= m["mia_auc"] <= 1.0 and 0.0 <= m["mia_advantage"] <= 1.0
    assert 0.0 <= m["test_error"] <= 1.0
    assert m["minority_accuracy"] is None  # imbalance ratio 1: no minority class
    # the step history is complete and ends at the executed T
    steps = st.steps(rid)
    assert steps[-1]["step"] == T and steps[-1]["epsilon_spent"] == pytest.approx(eps, rel=1e-6)


def test_nonprivate_references_and_boost(tmp_path, digits_features):
    st, p = _run(tmp_path, digits_features, "paragon")
    _, o = _run(tmp_path, digits_features, "only_public")
    _, a = _run(tmp_path, digits_features, "adamix")
    mp, mo, ma = (st.get_run(r).metrics for r in (p, o, a))
    assert mp["epsilon"] is None and mp["private"] is False and mp["pdp_epsilon_max"] is None
    assert mp["test_error"] < mo["test_error"]  # 1250 labelled samples beat 50
    expected = (mo["test_error"] - mp["test_error"]) / (ma["test_error"] - mp["test_error"])
    assert ma["performance_boost"] == pytest.approx(expected)


def test_cancelled_private_run_reports_executed_steps(tmp_path, digits_features):
    st = RunStore(tmp_path)
    cfg = RunConfig(dataset="digits", encoder="pixels", method="adamix", target_epsilon=3.0)
    seen = []  # stop at the 10th record (the first is the class histogram, worth several releases)
    rid = execute(cfg, store=st, features=digits_features, on_record=lambda r: seen.append(r.step) or len(seen) >= 10,
                  flush_every_s=0)
    rec = st.get_run(rid)
    m = rec.metrics
    assert rec.status == CANCELLED and m["steps"] == seen[-1] == seen[0] + 9 and len(st.steps(rid)) == 10
    eps10 = accounting.epsilon(accounting.ComposedGaussian(m["noise_multiplier"], seen[-1]), delta=1e-5)
    assert m["epsilon"] == pytest.approx(eps10, rel=1e-9) and m["epsilon"] < 3.0
