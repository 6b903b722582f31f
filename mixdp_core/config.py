"""One declaration per config constraint: type, range or choices, help, privacy cost.

Every field of a method / run config declares its constraint once, as dataclass field
metadata (in the spirit of scikit-learn's ``_parameter_constraints`` with ``Interval`` and
``StrOptions``)::

    @dataclass(frozen=True, kw_only=True)
    class MyConfig(PrivacyConfig):
        k: int = param(3, type=int, range=Interval(1, None), help="prototypes per class")
        mode: str = param("fast", choices=("fast", "exact"), help="...")
        peek: bool = param(False, type=bool, leaks_private=True,
                           privacy_note="tunes on the test set; ε no longer bounds the run")

From these declarations:

* :func:`validate` checks a config instance (called by the configs' ``__post_init__``) and
  raises :class:`~mixdp_core.errors.ConfigError` ``(field, "must be ..., got ...")`` naming
  the allowed range;
* :func:`describe` lists :class:`ParamSpec` s, from which the app forms
  (:mod:`mixdp_core.app_support.forms`), the CLI help (``mixdp methods --params NAME``) and
  ``docs/methods.md`` (:func:`config_markdown`, via ``mixdp methods --markdown``) are
  generated.

Cross-field constraints (e.g. ``d_min < d_max``) stay in the config's ``__post_init__``
after ``super().__post_init__()``. ``EPSILON`` and ``DELTA`` are the single declarations of
the privacy budget; every other module checks ε / δ with :func:`check` against them.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

import numpy as np

from .errors import ConfigError

#: Key of the :class:`ParamSpec` in ``dataclasses.Field.metadata``.
SPEC_KEY = "mixdp_param"

_CLOSED = ("both", "left", "right", "neither")


class _Required:
    """Default of a field without one (``dataclasses.MISSING`` cannot be a field default)."""

    def __repr__(self) -> str:
        return "REQUIRED"


#: :attr:`ParamSpec.default` of a required field.
REQUIRED: Any = _Required()


def _fmt(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


@dataclass(frozen=True)
class Interval:
    """A numeric range ``lo .. hi`` (``None``: unbounded), like sklearn's ``Interval``.

    Args:
        lo: lower end, or ``None``.
        hi: upper end, or ``None``.
        closed: which ends belong to the range: ``"both"`` (default), ``"left"``,
            ``"right"`` or ``"neither"``.
    """

    lo: Optional[float] = None
    hi: Optional[float] = None
    closed: str = "both"

    def __post_init__(self) -> None:
        if self.closed not in _CLOSED:
            raise ValueError(f"closed must be one of {_CLOSED}, got {self.closed!r}")

    @property
    def lo_closed(self) -> bool:
        return self.closed in ("both", "left")

    @property
    def hi_closed(self) -> bool:
        return self.closed in ("both", "right")

    def __contains__(self, v: float) -> bool:
        if self.lo is not None and not (v >= self.lo if self.lo_closed else v > self.lo):
            return False
        if self.hi is not None and not (v <= self.hi if self.hi_closed else v < self.hi):
            return False
        return True

    def describe(self) -> str:
        """``"> 0"``, ``">= 1"``, ``"in (0, 1]"``, ``"in the open interval (0, 1)"``..."""
        if self.lo is not None and self.hi is not None:
            if self.closed == "neither":
                return f"in the open interval ({_fmt(self.lo)}, {_fmt(self.hi)})"
            lb = "[" if self.lo_closed else "("
            rb = "]" if self.hi_closed else ")"
            return f"in {lb}{_fmt(self.lo)}, {_fmt(self.hi)}{rb}"
        if self.lo is not None:
            return f"{'>=' if self.lo_closed else '>'} {_fmt(self.lo)}"
        if self.hi is not None:
            return f"{'<=' if self.hi_closed else '<'} {_fmt(self.hi)}"
        return "any value"


@dataclass(frozen=True)
class ParamSpec:
    """The declaration of one config field (read it with :func:`describe`).

    Attributes:
        name: the dataclass field name (``target_epsilon``).
        type: ``int``, ``float``, ``bool``, ``str`` or ``None`` (no type check: tuples,
            JSON-like values, checked by ``check``).
        default: the default value (:data:`REQUIRED` for required fields).
        range: allowed numeric :class:`Interval`, or ``None``.
        choices: allowed values, or ``()``.
        optional: ``None`` is also allowed (the method then chooses automatically).
        none_means: what ``None`` does, in a few words, where it is not an automatic choice
            (``"one release at σ"``); the form's empty-field label (default ``"auto"``).
        help: one-paragraph help text (UI tooltip, CLI help, docs).
        leaks_private: the option looks at private data beyond the accounted mechanism
            (e.g. tuning on test results); the UI labels it "COSTS PRIVACY".
        privacy_note: what the option costs in privacy (with ``leaks_private``: a cost the ε does not
            cover; without it: how the accounted run pays for it). Every view shows it.
        leaks_when: the values that cost it (``()``: any truthy value, as a ``bool`` switch);
            e.g. ``("public",)`` for a choice of which only one reads the private data.
        unit: unit or symbol shown next to the value (``"ε"``, ``"epochs"``...).
        alias: field name used in error messages and the UI (``"epsilon"`` for
            ``target_epsilon``); defaults to ``name``.
        check: extra validator ``check(value) -> None`` raising ``ConfigError`` (for
            structured values: tuples, paths, registry names).
        allowed: what ``check`` accepts, in words (e.g. ``"a registered method"``), shown
            in errors of the type check, help and docs.
    """

    name: str = ""
    type: Optional[type] = None
    default: Any = REQUIRED
    range: Optional[Interval] = None
    choices: tuple[Any, ...] = ()
    optional: bool = False
    none_means: str = "auto"
    help: str = ""
    leaks_private: bool = False
    privacy_note: str = ""
    leaks_when: tuple[Any, ...] = ()
    unit: str = ""
    alias: str = ""
    check: Optional[Callable[[Any], None]] = None
    allowed: str = ""

    def leaks_for(self, value: Any) -> bool:
        """Whether setting the field to ``value`` costs privacy beyond the accounting."""
        if not self.leaks_private:
            return False
        return value in self.leaks_when if self.leaks_when else bool(value)

    def leak_condition(self) -> str:
        """When it costs privacy, in words: ``""`` (whenever set) or ``"when 'public'"``."""
        return f"when {' or '.join(map(repr, self.leaks_when))}" if self.leaks_when else ""

    @property
    def field(self) -> str:
        """The user-visible field name of error messages."""
        return self.alias or self.name

    def requirement(self) -> str:
        """What the field allows, e.g. ``"an integer >= 1"``, ``"one of 'a', 'b'"``."""
        if self.allowed:
            text = self.allowed
        elif self.choices:
            text = f"one of {', '.join(map(repr, self.choices))}"
        elif self.type is bool:
            text = "True or False"
        elif self.type is int:
            text = "an integer" + (f" {self.range.describe()}" if self.range else "")
        elif self.type is float:
            text = "a finite number" + (f" {self.range.describe()}" if self.range else "")
        elif self.type is str:
            text = "a non-empty string"
        else:
            text = "a value" + (f" {self.range.describe()}" if self.range else "")
        if not self.optional:
            return text
        # what None does, where it is not an automatic choice (errors, CLI help, docs and forms agree)
        return text + (" or None" if self.none_means == "auto" else f" or None ({self.none_means})")


def param(
    default: Any = dataclasses.MISSING,
    *,
    type: Optional[type] = None,
    range: Optional[Interval] = None,
    choices: Iterable[Any] = (),
    optional: bool = False,
    none_means: str = "auto",
    help: str = "",
    leaks_private: bool = False,
    privacy_note: str = "",
    leaks_when: Iterable[Any] = (),
    unit: str = "",
    alias: str = "",
    check: Optional[Callable[[Any], None]] = None,
    allowed: str = "",
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A ``dataclasses.field`` carrying its :class:`ParamSpec` as metadata.

    Args:
        default: default value (omit for a required field).
        type: ``int``, ``float``, ``bool``, ``str`` or ``None`` (unchecked, see ``check``);
            inferred from ``default`` / ``choices`` when omitted.
        range: numeric :class:`Interval` the value must lie in.
        choices: allowed values.
        optional: ``None`` is allowed too (inferred when ``default`` is ``None``).
        none_means: what ``None`` does where it is not an automatic choice (form label).
        help: help text shown in the app, the CLI and the docs.
        leaks_private: the option looks at private data beyond the accounted mechanism.
        privacy_note: what it costs in privacy (required with ``leaks_private``).
        leaks_when: the values that cost it (default: any truthy value); must be choices.
        unit: unit / symbol of the value.
        alias: user-visible name in errors (e.g. ``"epsilon"``).
        check: extra validator raising ``ConfigError``.
        allowed: what ``check`` accepts, in words.
        default_factory: as in ``dataclasses.field`` (mutable defaults).

    Returns:
        A ``dataclasses.Field`` (the spec's ``name`` is filled in by :func:`describe`).
    """
    choices = tuple(choices)
    if type is None and not check:
        probe = default if default is not dataclasses.MISSING else (choices[0] if choices else None)
        if isinstance(probe, bool):
            type = bool
        elif isinstance(probe, (int, float, str)):
            type = builtins_type(probe)
    if leaks_private and not privacy_note:
        raise ValueError("a field with leaks_private=True must say what it costs (privacy_note=...)")
    leaks_when = tuple(leaks_when)
    if leaks_when and (not leaks_private or any(v not in choices for v in leaks_when)):
        raise ValueError("leaks_when needs leaks_private=True and values among the field's choices")
    spec = ParamSpec(type=type, default=REQUIRED if default is dataclasses.MISSING else default, range=range, choices=choices,
                     optional=optional or default is None, none_means=none_means, help=help, leaks_private=leaks_private,
                     privacy_note=privacy_note, leaks_when=leaks_when, unit=unit, alias=alias, check=check,
                     allowed=allowed)
    kw: dict[str, Any] = {"metadata": {SPEC_KEY: spec, "leaks_private": leaks_private}}
    if default_factory is not dataclasses.MISSING:
        kw["default_factory"] = default_factory
    elif default is not dataclasses.MISSING:
        kw["default"] = default
    return dataclasses.field(**kw)


def builtins_type(v: Any) -> type:
    """``float`` for floats, ``int`` for ints, ``str`` for strings (the declared type)."""
    if isinstance(v, float):
        return float
    if isinstance(v, (int, np.integer)):
        return int
    return str


def _spec_of(f: dataclasses.Field) -> Optional[ParamSpec]:
    spec = f.metadata.get(SPEC_KEY)
    if spec is None:
        return None
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return dataclasses.replace(spec, name=f.name, default=f.default_factory())  # type: ignore[misc]
    return dataclasses.replace(spec, name=f.name)


def check(spec: ParamSpec, value: Any, *, field: Optional[str] = None) -> Any:
    """Check ``value`` against ``spec``; returns it normalized (``int`` / ``float``).

    Args:
        spec: the declaration.
        value: the value to check.
        field: user-visible name for the error (default: the spec's alias or name).

    Raises:
        ConfigError: ``(field, "must be <requirement>, got <value>")``.
    """
    name = field or spec.field
    if value is None and spec.optional:
        return None

    def bad() -> ConfigError:
        return ConfigError(name, f"must be {spec.requirement()}, got {value!r}", allowed=spec.requirement(),
                           got=value, choices=spec.choices)

    t = spec.type
    if t is bool:
        if not isinstance(value, (bool, np.bool_)):
            raise bad()
        value = bool(value)
    elif t is int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
            raise bad()
        value = int(value)
    elif t is float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
            raise bad()
        value = float(value)
    elif t is str and not spec.choices:
        if not isinstance(value, str):
            raise bad()
        if not value.strip():
            if spec.check is not None:
                spec.check(value)  # a registry name: its own error lists the registered keys
            raise bad()
    if spec.choices and value not in spec.choices:
        raise bad()
    if spec.range is not None and value not in spec.range:
        raise bad()
    if spec.check is not None:
        spec.check(value)
    return value


def validate(config: Any) -> None:
    """Check every declared field of the dataclass instance ``config`` (in field order).

    Numbers are normalized in place (``numpy.int64`` → ``int``, ``3`` → ``3.0`` for float
    fields), so configs hash and serialize identically whatever the caller passed. Fields
    without a declaration are left to the class's own ``__post_init__``.

    Raises:
        ConfigError: the first out-of-range field, naming it and its allowed range.
    """
    for f in dataclasses.fields(config):
        spec = _spec_of(f)
        if spec is None:
            continue
        v = getattr(config, f.name)
        nv = check(spec, v)
        if nv is not v and type(nv) is not type(v):
            object.__setattr__(config, f.name, nv)


#: Undeclared-config overlays, see :func:`declare_external`.
_EXTERNAL: dict[type, dict[str, ParamSpec]] = {}


def declare_external(cls: type, **specs: ParamSpec) -> None:
    """Attach descriptions to fields of a config class that does not declare them itself.

    Transitional: for config classes still validated by their own ``__post_init__`` (the
    NoisyGD / AdaMix configs), so that forms, CLI help and docs describe them too. Only
    :func:`describe` reads these; :func:`validate` does not.
    """
    _EXTERNAL.setdefault(cls, {}).update(specs)


def _fallback(f: dataclasses.Field) -> ParamSpec:
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        default = f.default_factory()  # type: ignore[misc]
    else:
        default = REQUIRED
    tname = str(f.type)
    optional = default is None or "Optional" in tname or "None" in tname
    if isinstance(default, bool) or tname == "bool":
        t: Optional[type] = bool
    elif isinstance(default, (tuple, list, dict)) or tname.startswith("Any") or any(
            w in tname for w in ("tuple", "list", "dict")):
        t = None
    elif isinstance(default, (int, np.integer)) or tname.split(" |")[0] in ("int", "Optional[int]"):
        t = int
    elif isinstance(default, float) or "float" in tname:
        t = float
    elif isinstance(default, str) or tname == "str":
        t = str
    else:
        t = None
    return ParamSpec(name=f.name, type=t, default=default, optional=optional)


def describe(cls: type) -> list[ParamSpec]:
    """The :class:`ParamSpec` of every init field of the config class ``cls``, in order.

    Declared fields return their declaration; fields of not-yet-converted classes return the
    overlay of :func:`declare_external` if any, else a spec inferred from the dataclass type
    and default (no range, no help).
    """
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        spec = _spec_of(f)
        if spec is None:
            spec = next((_EXTERNAL[k][f.name] for k in cls.__mro__ if f.name in _EXTERNAL.get(k, {})), None)
            if spec is not None:
                base = _fallback(f)
                spec = dataclasses.replace(spec, name=f.name, default=base.default,
                                           type=spec.type or base.type,
                                           optional=spec.optional or base.optional)
            else:
                spec = _fallback(f)
        out.append(spec)
    return out


def default_of(spec: ParamSpec) -> Any:
    """The default value, ``None`` for a required field."""
    return None if spec.default is REQUIRED else spec.default


# --------------------------------------------------------------------------- the budget
#: The single declaration of ε (every module validates ε against it).
EPSILON = ParamSpec(name="target_epsilon", type=float, default=3.0, range=Interval(0, None, closed="neither"),
                    help="ε > 0 of the (ε, δ)-DP guarantee the run must satisfy (ignored by non-private "
                         "reference methods).", unit="ε", alias="epsilon")
#: The single declaration of δ.
DELTA = ParamSpec(name="target_delta", type=float, default=1e-5, range=Interval(0, 1, closed="neither"),
                  help="δ in (0, 1) of the (ε, δ)-DP guarantee; well below 1/N.", unit="δ", alias="delta")

# What a *run* may ask for (configs: ``RunConfig`` and every method config), inside the
# mathematical domains above that the accounting module's functions take:
#: ε below 1e-3 needs more noise than any float run can use (the accountants' inverses
#: underflow: 1e-300 was a math domain error); above 1000 the (ε, δ) statement says nothing
#: (e^1000 overflows a double).
RUN_EPSILON = dataclasses.replace(EPSILON, range=Interval(1e-3, 1e3),
                                  help="ε of the (ε, δ)-DP guarantee the run must satisfy, 0.001 to 1000 "
                                       "(ignored by non-private reference methods).")
#: δ is the probability that the ε statement may fail; above 0.1 a run could publish a record
#: in the clear with that probability and still "satisfy" it, so no useful run asks for more.
RUN_DELTA = dataclasses.replace(DELTA, range=Interval(0, 0.1, closed="right"),
                                help="δ in (0, 0.1] of the (ε, δ)-DP guarantee; well below 1/N.")


#: Seeds: numpy's generators and SQLite take them as 32-bit unsigned integers.
SEED_RANGE = Interval(0, 2**32 - 1)
#: Largest long-tail ratio accepted: beyond it the tail classes keep one private sample on
#: any dataset (n_max / IR < 1), so larger values only hide a typo (e.g. 1e308).
MAX_IMBALANCE_RATIO = 1e4
#: Long-tail ratios of the private part (1 = balanced).
IMBALANCE_RANGE = Interval(1, MAX_IMBALANCE_RATIO)

#: Learning rates of SGD fine-tuning: above 100 a step leaves float32 at once (1e308 failed in
#: torch after the pre-training, a RuntimeError naming no field).
SGD_LR_RANGE = Interval(0.0, 100.0, closed="right")

#: Upper bounds of the episode protocol's sizes (:func:`mixdp_core.evaluation.sample_episodes`
#: and the ``episodes`` figure; declared here, light to import): each episode is one fit per
#: method and shot count (the paper runs 600); a billion asked of the sampler drew on past a
#: minute, growing.
EPISODE_LIMITS = {"n_episodes": 10_000, "n_way": 1_000, "k_shot": 10_000, "n_query": 10_000, "seed": 2**32 - 1}

#: Bounds on a privacy audit's size (:func:`mixdp_core.evaluation.audit.check_audit_size`;
#: declared here, light to import, for the CLI's help and the app's fields). Each reference
#: model (LiRA / RMIA) is one training; the one-run / white-box canary design holds an
#: M x (D + M) float64 matrix for M canaries (5,000: 200 MB at D = 0; 100,000 would be 80 GB);
#: a trial is a training (canary, seed-replay) or a canary (white-box).
AUDIT_MAX_REFERENCE_MODELS = 256
AUDIT_MAX_CANARIES = 5_000
AUDIT_MAX_TRIALS = 100_000
#: Seed replay runs two trainings per trial: at most this many trials, and its own default (as
#: many as refuting the target ε needs) at most AUDIT_DEFAULT_REPLAY_TRIALS.
AUDIT_MAX_REPLAY_TRIALS = 2_000
AUDIT_DEFAULT_REPLAY_TRIALS = 400


_FLOAT_TEXT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|infinity|nan)", re.IGNORECASE)
_INT_TEXT = re.compile(r"[+-]?\d+")


def parse_number(field: str, text: Any, kind: type, allowed: str) -> Any:
    """``text`` as an ``int`` or ``float``, in one format only: ASCII digits, an optional sign,
    for floats a decimal point and exponent (``inf`` is parsed and left to the range check;
    NaN is refused). Python's ``float()`` also takes full-width and Arabic-Indic digits,
    ``1_0`` and surrounding spaces; a typed number means what it shows, so those are refused.
    Integers are digits only (``1e3`` is not an integer count). ``None`` stays ``None``;
    numbers (not strings) pass through the same checks.

    Raises:
        ConfigError: naming ``field`` and ``allowed``.
    """
    if text is None:
        return None
    bad = ConfigError(field, f"must be {allowed}, got {_short(text)}", allowed=allowed, got=text)
    if isinstance(text, bool):
        raise bad
    if isinstance(text, (int, float)):
        if kind is int and not (isinstance(text, int) or float(text).is_integer()):
            raise bad
        if isinstance(text, float) and math.isnan(text):
            raise bad
        return int(text) if kind is int else float(text)
    if not isinstance(text, str):
        raise bad
    t = text.strip()
    if not t.isascii() or not (_INT_TEXT if kind is int else _FLOAT_TEXT).fullmatch(t):
        raise bad
    try:
        v = int(t) if kind is int else float(t)
    except (ValueError, OverflowError):
        raise bad from None
    if kind is float and math.isnan(v):
        raise bad
    return v


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (errors never echo a whole list)."""
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 15] + f"... ({len(r)} chars)"


def epsilon_param(default: float = 3.0) -> Any:
    """The ``target_epsilon`` field of a run's config (declaration :data:`RUN_EPSILON`)."""
    return param(default, **_kw(RUN_EPSILON))


def delta_param(default: float = 1e-5) -> Any:
    """The ``target_delta`` field of a run's config (declaration :data:`RUN_DELTA`)."""
    return param(default, **_kw(RUN_DELTA))


def _kw(spec: ParamSpec) -> dict[str, Any]:
    return dict(type=spec.type, range=spec.range, help=spec.help, unit=spec.unit, alias=spec.alias)


def check_epsilon(value: Any, *, field: str = "epsilon") -> float:
    """``value`` is a valid ε (declaration :data:`EPSILON`); returns it as a float."""
    return check(EPSILON, value, field=field)


def check_delta(value: Any, *, field: str = "delta") -> float:
    """``value`` is a valid δ (declaration :data:`DELTA`); returns it as a float."""
    return check(DELTA, value, field=field)


# --------------------------------------------------------------------------- rendering
def format_spec(spec: ParamSpec) -> str:
    """One line: ``name (type, default 3): help [range] — COSTS PRIVACY: note``."""
    t = spec.type.__name__ if spec.type else "value"
    d = "required" if spec.default is REQUIRED else f"default {spec.default!r}"
    rng = spec.requirement() if (spec.range or spec.choices or spec.allowed) else ""
    line = f"{spec.name} ({t}, {d})"
    if spec.help:
        line += f": {spec.help}"
    if rng:
        line += f" [{rng}]"
    if spec.leaks_private:
        line += f" — COSTS PRIVACY{(' ' + spec.leak_condition()) if spec.leaks_when else ''}: {spec.privacy_note}"
    elif spec.privacy_note:  # an accounted cost, said where the field is
        line += f" — privacy: {spec.privacy_note}"
    return line


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def config_markdown(cls: type) -> str:
    """A Markdown table of the fields of config class ``cls``."""
    rows = ["| field | type | default | allowed | help |", "|---|---|---|---|---|"]
    for s in describe(cls):
        t = s.type.__name__ if s.type else "value"
        d = "required" if s.default is REQUIRED else f"`{s.default!r}`"
        allowed = s.requirement() if (s.range or s.choices or s.type or s.allowed) else ""
        h = s.help + (f" **Costs privacy{(' ' + s.leak_condition()) if s.leaks_when else ''}:** {s.privacy_note}"
                      if s.leaks_private else f" Privacy: {s.privacy_note}" if s.privacy_note else "")
        rows.append(f"| `{s.name}` | {t} | {_md_cell(d)} | {_md_cell(allowed)} | {_md_cell(h)} |")
    return "\n".join(rows)
