"""The config declarations (mixdp_core.config): one declaration per constraint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pytest

from mixdp_core.config import (
    DELTA,
    EPSILON,
    REQUIRED,
    Interval,
    ParamSpec,
    check_delta,
    check_epsilon,
    declare_external,
    describe,
    param,
    validate,
)
from mixdp_core.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Cfg:
    name: str = param(type=str, help="required name")
    k: int = param(3, type=int, range=Interval(1, 10), help="count")
    rate: float = param(0.5, type=float, range=Interval(0.0, 1.0, closed="right"))
    mode: str = param("a", choices=("a", "b"))
    block: Optional[int] = param(None, type=int, range=Interval(1, None))
    cap: Optional[int] = param(None, type=int, range=Interval(1, None), none_means="no bound")
    peek: bool = param(False, type=bool, leaks_private=True, privacy_note="tunes on test results")
    plain: float = 2.0

    def __post_init__(self) -> None:
        validate(self)


@pytest.mark.parametrize(
    "kw, field, text",
    [
        ({"k": 0}, "k", "must be an integer in [1, 10], got 0"),
        ({"k": 2.0}, "k", "an integer"),
        ({"k": True}, "k", "an integer"),
        ({"rate": 0.0}, "rate", "must be a finite number in (0, 1], got 0.0"),
        ({"rate": float("nan")}, "rate", "finite"),
        ({"mode": "c"}, "mode", "must be one of 'a', 'b', got 'c'"),
        ({"block": 0}, "block", "an integer >= 1 or None, got 0"),
        ({"cap": 0}, "cap", "an integer >= 1 or None (no bound), got 0"),  # what None does, where not "auto"
        ({"peek": 1}, "peek", "True or False"),
        ({"name": ""}, "name", "non-empty string"),
    ],
)
def test_validate_names_the_field_and_the_allowed_range(kw, field, text):
    with pytest.raises(ConfigError) as e:
        Cfg(**{"name": "x", **kw})
    assert e.value.field == field
    assert text in str(e.value)


def test_validate_normalizes_numbers():
    c = Cfg(name="x", k=np.int64(4), rate=1, block=np.int32(2))
    assert type(c.k) is int and type(c.rate) is float and type(c.block) is int
    assert Cfg(name="x", plain="not checked").plain == "not checked"  # undeclared: left alone


def test_describe_reads_the_declarations():
    specs = {s.name: s for s in describe(Cfg)}
    assert specs["name"].default is REQUIRED
    assert specs["k"].range == Interval(1, 10) and specs["k"].help == "count"
    assert specs["block"].optional and specs["mode"].choices == ("a", "b")
    assert specs["peek"].leaks_private and specs["peek"].privacy_note
    assert specs["plain"].type is float and specs["plain"].help == ""  # fallback: type + default


def test_a_leaky_option_must_say_what_it_costs():
    with pytest.raises(ValueError, match="privacy_note"):
        param(False, type=bool, leaks_private=True)


def test_declare_external_describes_without_validating():
    @dataclass(frozen=True)
    class Legacy:
        mode: str = "x"

    declare_external(Legacy, mode=ParamSpec(type=str, choices=("x", "y"), help="legacy"))
    (spec,) = describe(Legacy)
    assert spec.choices == ("x", "y") and spec.default == "x" and spec.help == "legacy"
    assert Legacy(mode="z").mode == "z"  # validation stays the class's own business


def test_budget_declared_once():
    assert check_epsilon(3) == 3.0 and check_delta(1e-5) == 1e-5
    for bad in (0, -1, float("inf"), float("nan"), "3", True):
        with pytest.raises(ConfigError) as e:
            check_epsilon(bad)
        assert e.value.field == "epsilon"
    for bad in (0, 1, 1.5, float("nan")):
        with pytest.raises(ConfigError) as e:
            check_delta(bad)
        assert e.value.field == "delta" and "(0, 1)" in str(e.value)
    # every config that carries a budget uses these two declarations
    from mixdp_core.methods import METHODS
    from mixdp_core.runs.runner import RunConfig

    # what a run may ask for: one declaration each, inside the mathematical domains above
    from mixdp_core.config import RUN_DELTA, RUN_EPSILON

    assert RUN_EPSILON.range.lo in EPSILON.range and RUN_DELTA.range.hi in DELTA.range
    for cls in [RunConfig] + [m.config_cls for _, m in METHODS.items()]:
        specs = {s.name: s for s in describe(cls)}
        assert specs["target_epsilon"].range == RUN_EPSILON.range and specs["target_epsilon"].field == "epsilon"
        assert specs["target_delta"].range == RUN_DELTA.range and specs["target_delta"].field == "delta"


def test_interval_describe():
    assert Interval(0, None, closed="neither").describe() == "> 0"
    assert Interval(1, None).describe() == ">= 1"
    assert Interval(0, 1, closed="neither").describe() == "in the open interval (0, 1)"
    assert Interval(0, 1, closed="left").describe() == "in [0, 1)"
    assert 0.0 not in Interval(0, 1, closed="right") and 1.0 in Interval(0, 1, closed="right")


def test_leaks_when_flags_only_the_values_that_cost_privacy():
    from mixdp_core.config import describe
    from mixdp_core.methods import METHODS
    from mixdp_core.runs.figures.adamix import Variant, _display

    spec = next(s for s in describe(METHODS.get("dp_linear_probe").config_cls) if s.name == "dataset_size")
    assert spec.leaks_private and spec.leaks_for("public")
    assert not spec.leaks_for("noisy_count") and not spec.leaks_for("public_bound")
    assert spec.leak_condition() == "when 'public'"
    # a figure variant that sets the default value is not labelled test-tuned; the leaky one is
    assert "leaks" not in _display(Variant("x", "dp_linear_probe", {"dataset_size": "noisy_count"}))
    assert "leaks" in _display(Variant("x", "dp_linear_probe", {"dataset_size": "public"}))
    # CLI help and docs name the condition
    from mixdp_core.config import format_spec

    assert "COSTS PRIVACY when 'public':" in format_spec(spec)


def test_leaks_when_must_name_choices_of_a_leaky_field():
    from mixdp_core.config import param

    with pytest.raises(ValueError):
        param("a", choices=("a", "b"), leaks_when=("b",))  # not leaks_private
    with pytest.raises(ValueError):
        param("a", choices=("a", "b"), leaks_private=True, privacy_note="x", leaks_when=("c",))


def test_an_unknown_or_unhashable_registry_name_lists_the_keys():
    from mixdp_core.errors import UnknownNameError
    from mixdp_core.methods import METHODS

    for bad in ("adamx", ["adamix"]):
        with pytest.raises(UnknownNameError, match="choose one of: .*adamix"):
            METHODS.get(bad)
