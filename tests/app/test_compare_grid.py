"""The Compare page's grid: expanded by SweepSpec (app_support.forms.compare_configs)."""

from __future__ import annotations

from mixdp_core.app_support import forms
from mixdp_core.runs.runner import RunConfig

SETTINGS = dict(dataset="digits", encoder="pixels", public_per_class=5, imbalance_ratio=1.0, public_from=None,
                dataset_kwargs={}, encoder_kwargs={})


def test_grid_is_the_sweep_expansion_with_references_at_a_canonical_epsilon():
    cfgs, errors = forms.compare_configs(SETTINGS, methods=["adamix", "ngd"], epsilons=[3.0, 1.0], seeds=[1, 0],
                                         delta=1e-5, references=["paragon", "only_public"])
    assert errors == {}
    got = {(c.method, c.seed, c.target_epsilon) for c in cfgs}
    want = {(m, s, 1.0) for m in ("paragon", "only_public") for s in (0, 1)}
    want |= {(m, s, e) for m in ("adamix", "ngd") for s in (0, 1) for e in (1.0, 3.0)}
    assert got == want and len(cfgs) == len(want)
    assert {c.method for c in cfgs[:4]} == {"paragon", "only_public"}  # references first (the boost finds them)
    # the same config (hash) as one built by hand: stored runs are reused across pages
    hand = RunConfig(dataset="digits", encoder="pixels", method="adamix", seed=0, target_epsilon=1.0)
    assert hand.config_hash() in {c.config_hash() for c in cfgs}


def test_grid_errors_name_the_field():
    assert forms.compare_configs(SETTINGS, methods=[], epsilons=[], seeds=[], delta=1e-5, references=[])[1].keys() \
        == {"methods", "epsilon", "seed"}
    cfgs, errors = forms.compare_configs(dict(SETTINGS, public_per_class=10_000), methods=["adamix"],
                                         epsilons=[1.0], seeds=[0], delta=1e-5, references=[])
    assert cfgs == [] and "public_per_class" in errors
    # a point no run can meet: refused before anything runs, named by its method
    cfgs, errors = forms.compare_configs(SETTINGS, methods=["adamix"], epsilons=[0.001], seeds=[0], delta=1e-5,
                                         references=[])
    assert cfgs == [] and any(v.startswith("adamix: ") for v in errors.values()), errors
