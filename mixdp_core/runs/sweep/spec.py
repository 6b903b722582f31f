"""The grid of a sweep: what runs it holds, before anything is trained.

Contract:

* :class:`SweepSpec` is a frozen grid (methods × ε × seeds × public shots × imbalance
  ratios × private caps × encoders), built from keyword arguments, a dict
  (:meth:`SweepSpec.from_dict`) or a TOML file (:meth:`SweepSpec.from_toml`). Every axis
  value is typed and checked when the spec is built; a bad value raises
  :class:`~mixdp_core.errors.ConfigError` naming the field.
* The grid size is counted from the axes before any config is built and refused above
  :func:`max_grid_points` (``$MIXDP_MAX_GRID_POINTS``).
* :meth:`SweepSpec.expand` gives the :class:`SweepPoint` s (variant label + ``RunConfig``),
  non-private reference methods first; non-private methods ignore ε and run once per grid
  cell at ``nonprivate_epsilon``.
* Nothing here trains, touches the run store or starts a process.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from ...errors import ConfigError

@dataclass(frozen=True)
class Variant:
    """A named method setting of a sweep: ``label`` (legend/table name), registry ``method``
    and extra method ``params`` (e.g. ``Variant("adamix_rank", "adamix", {"projection": "rank"})``)."""

    label: str
    method: str
    params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, obj: Any) -> "Variant":
        """``"adamix"``, ``{"label":..., "method":..., "params": {...}}`` or a Variant."""
        if isinstance(obj, Variant):
            return obj
        if isinstance(obj, str):
            return cls(obj, obj, {})
        if isinstance(obj, Mapping) and "method" in obj:
            extra = sorted(set(obj) - {"label", "method", "params"})
            if extra:
                raise ConfigError("methods", f"unknown key {extra[0]!r} in a method entry; allowed: label, method, params")
            params = obj.get("params") or {}
            if not isinstance(params, Mapping):  # else a dict() traceback ("update sequence element")
                raise ConfigError("params", f"a method entry's params must be a table, got {str(params)[:60]!r}")
            return cls(str(obj.get("label") or obj["method"]), str(obj["method"]), dict(params))
        raise ConfigError("methods", f"each entry must be a method name or a table with 'method', got {obj!r}")


@dataclass(frozen=True)
class SweepPoint:
    """One run of a sweep: its variant ``label`` and its ``config``."""

    label: str
    config: Any  # RunConfig


#: Runs one sweep may hold (``$MIXDP_MAX_GRID_POINTS`` overrides): counted from the axes
#: before expansion, so a 100,000-point grid is refused at once instead of building configs.
DEFAULT_MAX_GRID_POINTS = 2_000
#: Values one axis may list, and the largest sweep file read.
MAX_AXIS_VALUES = 200
MAX_CONFIG_BYTES = 256 * 1024


def max_grid_points() -> int:
    from ..._io import env_limit

    return int(env_limit("MIXDP_MAX_GRID_POINTS", DEFAULT_MAX_GRID_POINTS))


def _tuple(name: str, v: Any) -> tuple:
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        v = (v,)
    v = tuple(v)
    if not v:
        raise ConfigError(name, "must list at least one value")
    return v


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """A grid of runs. Every field that is a tuple is one axis of the grid.

    Args:
        dataset: dataset spec (``"digits"``...).
        encoders: feature extractors.
        methods: method names or :class:`Variant` s (same method with other params).
        epsilons: target ε of the private methods.
        seeds: split seeds (the noise follows a seed only with noise='reproducible'; secure noise, the default, follows none).
        public_per_class: public shots per class.
        imbalance_ratios: long-tail ratios of the private part (1 = balanced).
        private_per_class: caps of private samples per class (``None`` = all).
        delta: target δ.
        params: method config fields given to every method that has them (e.g.
            ``{"noise_multiplier": 20}``); a variant's own params win.
        nonprivate_epsilon: the placeholder ε stored with non-private methods (they ignore
            it; one run per grid cell, reused across sweeps).
        dataset_root, dataset_kwargs, encoder_kwargs, public_from: as in ``RunConfig``.
        budget_cap, budget_cap_delta: the data set's privacy cap from the sweep file (``None``:
            none given). Applied before the grid runs by
            :func:`~mixdp_core.runs.ledger.apply_config_cap`: it sets a cap where there is
            none and lowers a higher one, never raises one (only ``mixdp budget --cap`` does).
            Not part of the grid, so not of the sweep's id.
    """

    dataset: str = "digits"
    encoders: tuple[str, ...] = ("pixels",)
    methods: tuple[Any, ...] = ("adamix",)
    epsilons: tuple[float, ...] = (1.0,)
    seeds: tuple[int, ...] = (0,)
    public_per_class: tuple[int, ...] = (5,)
    imbalance_ratios: tuple[float, ...] = (1.0,)
    private_per_class: tuple[int | None, ...] = (None,)
    delta: float = 1e-5
    params: Mapping[str, Any] = field(default_factory=dict)
    nonprivate_epsilon: float = 1.0
    dataset_root: str | None = None
    dataset_kwargs: Mapping[str, Any] = field(default_factory=dict)
    encoder_kwargs: Mapping[str, Any] = field(default_factory=dict)
    public_from: str | None = None
    budget_cap: float | None = None
    budget_cap_delta: float | None = None

    def __post_init__(self) -> None:
        from ...config import parse_number

        for name in ("encoders", "epsilons", "seeds", "public_per_class", "imbalance_ratios", "private_per_class"):
            object.__setattr__(self, name, _tuple(name, getattr(self, name)))
        # every axis value typed once, here (a TOML string "1,2" is one value, not two)
        for name, kind, allowed in (("epsilons", float, "numbers (a list: epsilons = [1, 2])"),
                                    ("seeds", int, "integers (a list: seeds = [0, 1])"),
                                    ("public_per_class", int, "integers"),
                                    ("imbalance_ratios", float, "numbers"),
                                    ("private_per_class", int, "integers or none")):
            vals = getattr(self, name)
            if len(vals) > MAX_AXIS_VALUES:
                raise ConfigError(name, f"at most {MAX_AXIS_VALUES} values per axis, got {len(vals):,}")
            # a repeated value is one grid point (with --no-reuse it would spend its ε again)
            object.__setattr__(self, name, tuple(dict.fromkeys(
                None if (v is None and name == "private_per_class") else parse_number(name, v, kind, allowed)
                for v in vals)))
        from ...config import RUN_DELTA, RUN_EPSILON, check

        # checked here, by their declarations: a bad value reached float() in expand() (a traceback)
        object.__setattr__(self, "delta", check(RUN_DELTA, parse_number("delta", self.delta, float, "a number"),
                                                field="delta"))
        object.__setattr__(self, "nonprivate_epsilon", check(
            RUN_EPSILON, parse_number("nonprivate_epsilon", self.nonprivate_epsilon, float, "a number"),
            field="nonprivate_epsilon"))
        if not isinstance(self.encoders, tuple) or not all(isinstance(e, str) for e in self.encoders):
            raise ConfigError("encoders", f"must be encoder names, got {self.encoders!r}"[:200])
        if len(self.methods) > MAX_AXIS_VALUES:
            raise ConfigError("methods", f"at most {MAX_AXIS_VALUES} methods, got {len(self.methods):,}")
        object.__setattr__(self, "methods", tuple(Variant.parse(m) for m in _tuple("methods", self.methods)))
        labels = [v.label for v in self.methods]
        dup = {x for x in labels if labels.count(x) > 1}
        if dup:
            raise ConfigError("methods", f"variant labels must be unique, {sorted(dup)[0]!r} appears twice")
        for name in ("params", "dataset_kwargs", "encoder_kwargs"):
            if not isinstance(getattr(self, name), Mapping):
                raise ConfigError(name, f"must be a table/dict, got {getattr(self, name)!r}")
        if self.budget_cap is not None or self.budget_cap_delta is not None:
            from ..ledger import BudgetCap

            if self.budget_cap is None:
                raise ConfigError("budget_cap_delta", "only with budget_cap (the cap's ε)")
            cap = BudgetCap(epsilon=self.budget_cap, delta=self.budget_cap_delta)  # ranges, one line each
            object.__setattr__(self, "budget_cap", cap.epsilon)
            object.__setattr__(self, "budget_cap_delta", cap.delta)
        n = self.n_points()
        self._check_params_known()
        if n > max_grid_points():
            raise ConfigError("grid", f"{n:,} runs; a sweep may hold at most {max_grid_points():,} "
                                      f"(MIXDP_MAX_GRID_POINTS; split it into several sweeps)")

    def _check_params_known(self) -> None:
        """Every key of ``params`` must be a config field of some registered method (a misspelt
        key used to be dropped silently while the grid ran on the defaults). A real field that
        only other methods take is given to those that have it, as before: figures pass one
        set of parameters to every variant (``noise_multiplier`` reaches NoisyGD, not paragon)."""
        from ...methods import METHODS

        fields: set[str] = set()
        for _, cls in METHODS.items():
            fields |= {f.name for f in dataclasses.fields(cls.config_cls)}
        unknown = sorted(set(self.params) - fields)
        if unknown:
            raise ConfigError(unknown[0], "not a config field of any registered method; the sweep's methods "
                                          f"({', '.join(v.method for v in self.methods)}) take: "
                                          f"{', '.join(sorted(self.method_fields()))}")

    def method_fields(self) -> set[str]:
        """The config fields of the grid's methods, together."""
        from ...methods import METHODS

        out: set[str] = set()
        for v in self.methods:
            out |= {f.name for f in dataclasses.fields(METHODS.get(v.method).config_cls)}
        return out

    def check_params_used(self) -> None:
        """A user's sweep (CLI, sweep file): every ``params`` key must be a config field of one
        of the grid's own methods. A field only other methods take would be dropped in silence;
        the constructor accepts those, for figures that give one set of parameters to every
        variant.

        Raises:
            ConfigError: naming the key and what the grid's methods take.
        """
        ours = self.method_fields()
        unused = sorted(set(self.params) - ours)
        if unused:
            raise ConfigError(unused[0], f"not a config field of the sweep's methods "
                                         f"({', '.join(v.method for v in self.methods)}); they take: "
                                         f"{', '.join(sorted(ours))}")

    def n_points(self) -> int:
        """Runs of the grid, counted from the axes before any config is built."""
        from ...errors import UnknownNameError
        from ...methods import METHODS

        per_cell = 0
        for v in self.methods:
            try:
                private = bool(getattr(METHODS.get(v.method), "private", True))
            except UnknownNameError as e:
                raise ConfigError.unknown_name("methods", e) from None
            per_cell += len(self.epsilons) if private else 1
        return (per_cell * len(self.encoders) * len(self.seeds) * len(self.public_per_class)
                * len(self.imbalance_ratios) * len(self.private_per_class))

    # -------------------------------------------------------------- I/O
    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["methods"] = [{"label": v.label, "method": v.method, "params": dict(v.params)} for v in self.methods]
        for k in ("budget_cap", "budget_cap_delta"):  # not grid axes: left out when unset (stable sweep ids)
            if d[k] is None:
                del d[k]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SweepSpec":
        """Build from a dict (TOML table or :meth:`to_dict`); unknown keys name themselves."""
        names = {f.name for f in dataclasses.fields(cls)}
        aliases = {"encoder": "encoders", "method": "methods", "epsilon": "epsilons", "seed": "seeds",
                   "imbalance_ratio": "imbalance_ratios"}
        kw: dict[str, Any] = {}
        for k, v in d.items():
            k2 = aliases.get(k, k)
            if k2 not in names:
                raise ConfigError(k, f"not a sweep field; allowed: {', '.join(sorted(names))}")
            kw[k2] = v
        return cls(**kw)

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> "SweepSpec":
        """Read a grid from a TOML file (top level or a ``[sweep]`` table). Example::

            dataset = "digits"
            encoders = ["pixels"]
            methods = ["adamix", "ngd", {label = "adamix_rank", method = "adamix", params = {projection = "rank"}}]
            epsilons = [0.5, 1, 3]
            seeds = [0, 1]
            [params]
            noise_multiplier = 20
        """
        import tomllib

        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as e:
            raise ConfigError("config", f"cannot read {path}: {e.strerror or e}") from None
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError("config", f"{path} is larger than {MAX_CONFIG_BYTES // 1024} KiB; a sweep file is a few lines")
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise ConfigError("config", f"{path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("config", f"{path} is not valid TOML: {e}") from None
        except RecursionError:
            raise ConfigError("config", f"{path} nests tables or arrays too deeply to be a sweep file") from None
        if not isinstance(data.get("sweep", data), Mapping):
            raise ConfigError("config", f"{path}: [sweep] must be a table")
        return cls.from_dict(data.get("sweep", data))

    # -------------------------------------------------------------- expansion
    def expand(self, on_invalid: Callable[[str, Mapping[str, Any], ConfigError], Any] | None = None
               ) -> list[SweepPoint]:
        """Every run of the grid, non-private reference methods first (so that the
        Performance Boost of the private runs finds them). Raises ``ConfigError`` naming the
        field of the first invalid combination, unless ``on_invalid(label, point, error)`` is
        given: then points whose budget no run can meet (``BudgetError``: a target ε that the
        method's σ cannot reach) are reported to it and left out; any other invalid value
        raises."""
        from ...errors import BudgetError, UnknownNameError
        from ...methods import METHODS
        from ..runner import RunConfig

        refs, private = [], []
        for enc in self.encoders:
            for seed in self.seeds:
                for ppc in self.public_per_class:
                    for ir in self.imbalance_ratios:
                        for cap in self.private_per_class:
                            for v in self.methods:
                                try:
                                    cls = METHODS.get(v.method)
                                except UnknownNameError as e:
                                    raise ConfigError.unknown_name("methods", e) from None
                                fields = {f.name for f in dataclasses.fields(cls.config_cls)}
                                mp = {k: val for k, val in self.params.items() if k in fields}
                                mp.update(v.params)
                                is_private = bool(getattr(cls, "private", True))
                                for eps in (self.epsilons if is_private else (self.nonprivate_epsilon,)):
                                    try:
                                        cfg = RunConfig(
                                            dataset=self.dataset, encoder=enc, method=v.method, seed=int(seed),
                                            target_epsilon=float(eps), target_delta=float(self.delta),
                                            public_per_class=int(ppc), imbalance_ratio=float(ir),
                                            private_per_class=None if cap is None else int(cap),
                                            public_from=self.public_from, method_params=mp,
                                            dataset_root=self.dataset_root, dataset_kwargs=dict(self.dataset_kwargs),
                                            encoder_kwargs=dict(self.encoder_kwargs))
                                        cfg.preflight()  # the budget, before any cell runs (remembered)
                                    except ConfigError as e:
                                        msg = e.message
                                        err = ConfigError(e.field, f"{v.label}: {msg}")
                                        # only a budget no run can meet is skippable; a bad value is
                                        # the caller's error, whoever asked
                                        if on_invalid is None or not isinstance(e, BudgetError):
                                            raise err from None
                                        on_invalid(v.label, {"encoder": enc, "seed": seed, "public_per_class": ppc,
                                                             "imbalance_ratio": ir, "private_per_class": cap,
                                                             "target_epsilon": float(eps)}, err)
                                        continue
                                    (private if is_private else refs).append(SweepPoint(v.label, cfg))
        return refs + private

    def configs(self) -> list[Any]:
        """The ``RunConfig`` s of :meth:`expand`."""
        return [p.config for p in self.expand()]
