"""Events round-trip exactly through ``event_to_dict`` / JSON / ``event_from_dict``, and a
privacy report carries its event (what a data set's ledger composes across runs)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mixdp_core import accounting as A
from mixdp_core.errors import ConfigError

#: One instance of every event class, with non-default and awkward values (floats that are
#: not short decimals, integer-valued floats, nesting), so that a lossy format would show.
EVENTS = [
    A.GaussianMechanism(noise_multiplier=0.1 + 0.2, sensitivity=3),
    A.GaussianMechanism(7.5),
    A.ComposedGaussian(noise_multiplier=1 / 3, steps=1234),
    A.PoissonSubsampledGaussian(noise_multiplier=1.1, sample_rate=0.0123456789, steps=50.0),
    A.ExponentialMechanism(epsilon=0.25, monotone=True, count=3),
    A.ExponentialMechanism(epsilon=2.0),
    A.ZCDP(rho=1e-7),
    A.PureDP(epsilon=5e-3),
    A.Composition([A.ComposedGaussian(20.0, 8), A.ZCDP(0.01), A.PureDP(0.2)]),
    A.AdaptiveComposition(first=A.PureDP(0.05), then=A.PoissonSubsampledGaussian(2.0, 0.01, 300)),
    A.Composition([A.AdaptiveComposition(A.ExponentialMechanism(0.1, count=2), A.ComposedGaussian(4.0, 9)),
                   A.GaussianMechanism(3.0, 2.0)]),
]


@pytest.mark.parametrize("ev", EVENTS, ids=lambda e: type(e).__name__)
def test_round_trip_is_exact_through_json(ev):
    d = A.event_to_dict(ev)
    assert d["type"] == type(ev).__name__
    back = A.event_from_dict(json.loads(json.dumps(d, allow_nan=False)))
    assert back == ev and type(back) is type(ev)
    assert A.event_to_dict(back) == d
    # the same ε, from the same accountant (nothing about the mechanism was lost); a
    # Composition holding an AdaptiveComposition has no single accountant (the ledger splits it)
    if not any(isinstance(e, A.AdaptiveComposition) for e in getattr(ev, "events", ())):
        assert A.epsilon_and_accountant(back, delta=1e-6) == A.epsilon_and_accountant(ev, delta=1e-6)


def test_every_event_class_has_a_serialized_form():
    covered = {type(e).__name__ for e in EVENTS}
    assert covered == {"GaussianMechanism", "ComposedGaussian", "PoissonSubsampledGaussian", "ExponentialMechanism",
                       "ZCDP", "PureDP", "Composition", "AdaptiveComposition"}


def test_dict_records_every_field_defaults_included():
    assert A.event_to_dict(A.GaussianMechanism(2.0)) == {"type": "GaussianMechanism", "noise_multiplier": 2.0,
                                                         "sensitivity": 1.0}
    assert A.event_to_dict(A.ExponentialMechanism(1.0)) == {"type": "ExponentialMechanism", "epsilon": 1.0,
                                                            "monotone": False, "count": 1}
    d = A.event_to_dict(A.AdaptiveComposition(A.PureDP(0.1), A.ComposedGaussian(5.0, 3)))
    assert d == {"type": "AdaptiveComposition", "first": {"type": "PureDP", "epsilon": 0.1},
                 "then": {"type": "ComposedGaussian", "noise_multiplier": 5.0, "steps": 3}}


@pytest.mark.parametrize("d, field", [
    (5, "event"),
    ({}, "event.type"),
    ({"type": "Laplace", "epsilon": 1}, "event.type"),
    ({"type": "PureDP"}, "event.epsilon"),
    ({"type": "PureDP", "epsilon": -1}, "event.epsilon"),
    ({"type": "PureDP", "epsilon": float("nan")}, "event.epsilon"),
    ({"type": "PureDP", "epsilon": "1"}, "event.epsilon"),
    ({"type": "PureDP", "epsilon": 1, "delta": 1e-5}, "event.delta"),
    ({"type": "ComposedGaussian", "noise_multiplier": 1.0, "steps": 2.5}, "event.steps"),
    ({"type": "ExponentialMechanism", "epsilon": 1.0, "monotone": "yes"}, "event.monotone"),
    ({"type": "PoissonSubsampledGaussian", "noise_multiplier": 1.0, "sample_rate": 1.5, "steps": 3},
     "event.sample_rate"),
    ({"type": "Composition", "events": []}, "event.events"),
    ({"type": "Composition", "events": [{"type": "ZCDP", "rho": 0.1}, {"type": "ZCDP", "rho": 0}]},
     "event.events[1].rho"),
    ({"type": "AdaptiveComposition", "first": {"type": "ZCDP", "rho": 1.0}, "then": {"type": "PureDP", "epsilon": 1}},
     "event.first"),
    ({"type": "AdaptiveComposition", "first": {"type": "PureDP", "epsilon": 1}}, "event.then"),
])
def test_bad_input_is_one_line_naming_the_field(d, field):
    with pytest.raises(ConfigError) as ei:
        A.event_from_dict(d)
    assert ei.value.field == field
    assert len(str(ei.value).splitlines()) == 1 and str(ei.value).startswith(field + ":")


def test_deep_nesting_is_refused_not_a_recursion_error():
    d: dict = {"type": "PureDP", "epsilon": 1.0}
    for _ in range(200):
        d = {"type": "Composition", "events": [d]}
    with pytest.raises(ConfigError, match="nested deeper"):
        A.event_from_dict(d)


def test_event_to_dict_refuses_a_non_event():
    with pytest.raises(ConfigError) as ei:
        A.event_to_dict({"type": "PureDP", "epsilon": 1.0})
    assert ei.value.field == "event"


def test_privacy_report_carries_its_event_and_old_constructions_still_work():
    ev = A.AdaptiveComposition(A.PureDP(0.1), A.PoissonSubsampledGaussian(1.5, 0.05, 40))
    rep = A.privacy_report(ev, delta=1e-5)
    assert rep.event == A.event_to_dict(ev)
    assert A.event_from_dict(rep.to_dict()["event"]) == ev
    assert json.loads(json.dumps(rep.to_dict()))["event"] == rep.event
    # a report built field by field (no event) keeps working, and hashing still works
    old = A.PrivacyReport(epsilon=1.0, delta=1e-5, mu=None, rho=None, pure_epsilon=None, mechanism="m",
                          accountant="rdp")
    assert old.event is None and old.to_dict()["event"] is None
    hash(old), hash(rep)
    # a method that rewords the mechanism keeps the event
    reworded = dataclasses.replace(rep, mechanism=rep.mechanism + " [note]")
    assert reworded.event == rep.event
