"""Shared machinery of all training methods: the registry, configs and step records.

Every method is sklearn-like::

    model = METHODS.get("adamix")(AdaMixConfig(target_epsilon=3.0))
    model.fit(split, on_step=callback)   # returns self
    model.predict(split.X_test)          # (N,) labels
    model.privacy_                       # PrivacyReport computed for the run as executed

Fitted attributes every method sets (``None`` where they do not apply):

* ``privacy_``: :class:`mixdp_core.accounting.PrivacyReport` computed by the accounting
  module for the run *as executed* (steps actually run, noise actually used); ``None`` for
  non-private reference methods (``paragon``, ``only_public``), which the UI shows as ε = ∞.
* ``steps_``: number of steps (epochs for fine-tuning) executed.
* ``history_``: list of the :class:`StepRecord` emitted.
* ``noise_multiplier_``: σ used (``None`` if not a Gaussian-noise method).
* ``ledger_``: the :class:`~mixdp_core.accounting.RunLedger` of the run's private releases
  (recorded where each happens; ``privacy_`` is its report), ``None`` for non-private methods.
* ``pdp_sq_ratio_sum_``: ``(N_private,)`` array of Σ_t r_{i,t}² (per-instance DP, AdaMix
  App. C) for NoisyGD-type methods, else ``None``; evaluation turns it into ε_i with
  :func:`mixdp_core.accounting.pdp_epsilon`.
* ``timing_owner_only_``: ``True`` where the fit's running time depends on a secret of its
  mechanism (``honest_tuning``'s hidden number of repetitions) or on private rows it reads
  without releasing them (fine-tuning's per-instance-DP pass); every private run's timings are
  owner-only anyway, since its duration grows with the exact private count
  (:func:`mixdp_core.runs.owner_view.timing_is_owner_only`).

``on_step`` receives a :class:`StepRecord` after each step (or epoch, for network
fine-tuning) and may return ``True`` to request a stop; the method then stops before the
next noisy release, so the reported privacy is that of the steps actually executed.
"""

from __future__ import annotations

import dataclasses
import functools
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional

import numpy as np

from ..config import delta_param, epsilon_param, param, validate
from ..errors import ConfigError, DataError
from ..randomness import NOISE_SOURCES, REPRODUCIBLE, REPRODUCIBLE_WARNING, SECURE
from ..registry import Registry


@dataclass(frozen=True)
class StepRecord:
    """One progress record streamed by ``fit(on_step=...)``.

    Attributes:
        step: 1-based index of the step just executed (epoch for network fine-tuning).
        total_steps: planned number of steps (calibrated T).
        train_loss: mean cross-entropy on the training data seen by the step (public +
            private, non-private diagnostic: it is *not* released by the DP mechanism and is
            only shown to the data owner), or ``None``.
        test_error: error on the test set in ``[0, 1]`` (computed every few steps), or ``None``.
        clip_norm: clip threshold used at this step (τ_t), or ``None`` for non-private steps.
        epsilon_spent: ε at the run's δ after this step, from the accounting module.
        extra: method-specific scalars (e.g. ``{"lr": ...}``).
    """

    step: int
    total_steps: int
    train_loss: Optional[float] = None
    test_error: Optional[float] = None
    clip_norm: Optional[float] = None
    epsilon_spent: Optional[float] = None
    extra: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """``dataclasses.asdict(self)``: the same dict, built directly when ``extra`` holds
        scalars (asdict's recursive deep copy was a tenth of a small run's time with a record
        written every step: 0.8 of 10 s over 10,000 digits steps, cProfile)."""
        out = {name: getattr(self, name) for name in _STEP_FIELDS}
        extra = out.pop("extra")
        if not all(type(v) in _SCALAR_TYPES for v in (*out.values(), *extra.values())):
            return dataclasses.asdict(self)
        out["extra"] = dict(extra)
        return out


#: The record's fields in order; immutable values a record's dict may share with it (no copy).
_STEP_FIELDS = tuple(f.name for f in dataclasses.fields(StepRecord))
_SCALAR_TYPES = frozenset({int, float, bool, str, type(None), np.float64, np.float32, np.int64, np.int32, np.bool_})


#: Callback type: return ``True`` to request a stop.
OnStep = Callable[[StepRecord], Optional[bool]]


#: :attr:`Method.role` values.
ROLE_METHOD = "method"
ROLE_REFERENCE_UPPER = "reference_upper"
ROLE_REFERENCE_LOWER = "reference_lower"


@dataclass(frozen=True, kw_only=True)
class PrivacyConfig:
    """Privacy budget shared by every private method (keyword-only).

    Fields declare their constraints with :func:`mixdp_core.config.param`; ``__post_init__``
    checks them all (subclass fields included) with :func:`mixdp_core.config.validate`.
    Subclasses add cross-field checks after ``super().__post_init__()``.

    Args:
        target_epsilon: ε > 0 of the (ε, δ)-DP guarantee the run must satisfy.
        target_delta: δ in (0, 1). Default 1e-5.
        noise: where the mechanism's randomness comes from (:mod:`mixdp_core.randomness`):
            ``"secure"`` (default; ChaCha20 keyed from the OS at every run, never stored) or
            ``"reproducible"`` (from the seed: not private against anyone who knows it).
    """

    target_epsilon: float = epsilon_param(3.0)
    target_delta: float = delta_param(1e-5)
    noise: str = param(SECURE, choices=NOISE_SOURCES,
                       help="Randomness of every private release: 'secure' (default: a cryptographic generator "
                            "keyed from the OS at every run, never stored, so the same seed gives different noise) "
                            "or 'reproducible' (from the seed, for replaying research runs).",
                       leaks_private=True, leaks_when=(REPRODUCIBLE,),
                       privacy_note=f"'reproducible': {REPRODUCIBLE_WARNING}.")

    def __post_init__(self) -> None:
        validate(self)


class Method(ABC):
    """Base class of every registered method.

    Subclasses set the class attributes and implement :meth:`fit` and
    :meth:`decision_function`. Fitted attributes end in ``_``.

    Class attributes:
        config_cls: the frozen dataclass holding the hyper-parameters.
        family: ``"adamix"``, ``"prototypes"`` or ``"finetune"``.
        description: one line for the UI.
        paper: reference (paper + section/algorithm).
        private: ``False`` for non-private reference methods (paragon, only-public).
        needs_text: ``True`` if it needs CLIP text embeddings.
        uses_private_data: ``False`` if the method never reads the private rows (only-public,
            zero-shot): their privacy loss is 0 even though ``privacy_`` is ``None``.
        role: ``"method"`` (default), or the reference a Performance Boost is measured
            against: ``"reference_upper"`` (the non-private paragon) or
            ``"reference_lower"`` (only-public). The runner reads this instead of names.
        test_config: small config fields (``{field: value}``) with which the contract test
            (``tests/methods/test_contract.py``) fits the method in about a second.
    """

    config_cls: ClassVar[type] = PrivacyConfig
    family: ClassVar[str] = ""
    description: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    private: ClassVar[bool] = True
    needs_text: ClassVar[bool] = False
    uses_private_data: ClassVar[bool] = True
    role: ClassVar[str] = ROLE_METHOD
    test_config: ClassVar[dict[str, Any]] = {}

    #: What ``decision_function`` takes: ``"rows"`` (feature rows ``(N, D)``, checked by
    #: :func:`check_rows` against the fitted ``n_features_in_``) or ``"images"`` (the
    #: fine-tuning family checks its own shapes).
    input_kind: ClassVar[str] = "rows"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every ``fit`` records ``n_features_in_`` (the split's D) and every row-taking
        ``decision_function`` checks its input first (:func:`check_rows`): a wrong number of
        columns gave numpy's broadcast errors, a 1-D row an AxisError, and all-NaN rows were
        predicted as class 0 without a word."""
        super().__init_subclass__(**kwargs)
        fit = cls.__dict__.get("fit")
        if fit is not None and not getattr(fit, "_records_dim", False):
            @functools.wraps(fit)
            def fit_recording_dim(self, split, *args, **kw):
                out = fit(self, split, *args, **kw)
                dim = getattr(split, "dim", None)
                if isinstance(dim, (int, np.integer)):
                    self.n_features_in_ = int(dim)
                return out

            fit_recording_dim._records_dim = True
            cls.fit = fit_recording_dim
        df = cls.__dict__.get("decision_function")
        if df is not None and not getattr(df, "_checks_rows", False) and not getattr(df, "__isabstractmethod__", False):
            @functools.wraps(df)
            def checked(self, X, *args, **kw):
                if self.input_kind == "rows":
                    X = check_rows(X, getattr(self, "n_features_in_", None))
                return df(self, X, *args, **kw)

            checked._checks_rows = True
            cls.decision_function = checked

    def __init__(self, config: Any = None, **params: Any):
        if config is None:
            config = self.config_cls(**params)
        elif params:
            config = dataclasses.replace(config, **params)
        if not isinstance(config, self.config_cls):
            raise ConfigError("config", f"expected {self.config_cls.__name__}, got {type(config).__name__}")
        self.config = config

    def preflight(self) -> None:
        """Check, before any data is touched, that the privacy budget can be met.

        Lets the CLI and the app refuse a launch up front (naming the field) instead of
        starting a job that fails. The default does nothing; methods whose calibration can be
        infeasible (e.g. no full-batch step fits ε at the chosen σ) override it.

        Raises:
            ConfigError: (e.g. :class:`~mixdp_core.accounting.BudgetError`) the budget is
                infeasible for this config.
        """

    def budget_multiple(self) -> int:
        """How many times its target (ε, δ) a fit of this config may spend, at most (basic
        composition). 1 for every method that calibrates its whole run to the target; more
        where an option runs the mechanism several times on the same rows and reports the
        composition (e.g. AdaMix's ``optimistic_tuning``). The privacy ledger checks a data
        set's cap against ``budget_multiple() × target`` before the run starts, so that a run
        that will spend more than its target cannot pass the cap."""
        return 1

    def _reset(self) -> None:
        """Clear the fitted attributes every method sets (see the module docstring)."""
        self.privacy_ = None
        self.steps_ = 0
        self.history_: list[StepRecord] = []
        self.noise_multiplier_ = None
        self.pdp_sq_ratio_sum_ = None
        self.ledger_ = None
        # True where the fit's running time depends on a secret of its mechanism (a private
        # selection's hidden number of repetitions): the run's timings are then owner-only
        self.timing_owner_only_ = False

    def verify_privacy(self) -> float:
        """Check, after :meth:`fit`, that the run's releases fit its plan and that ``privacy_``
        is what its ledger composes; return that ε (0 for a method that reads no private row).

        Every private method keeps a :class:`~mixdp_core.accounting.RunLedger` in ``ledger_``
        (each release recorded where it happens). The runner calls this after every fit and
        fails the run loudly on a mismatch: a result whose privacy was counted by hand, or
        that released more than planned, is never reported.

        Raises:
            PlanExceededError: no ledger, releases beyond the plan or the budget, or a
                ``privacy_`` that is not the ledger's.
        """
        import math

        from ..accounting import PlanExceededError

        if not (self.private and self.uses_private_data):
            return 0.0
        name = type(self).__name__
        ledger = getattr(self, "ledger_", None)
        if ledger is None:
            raise PlanExceededError(f"{name}: a private method finished without a run ledger (ledger_)")
        spent = ledger.check()
        rep = getattr(self, "privacy_", None)
        if rep is None or not math.isclose(rep.epsilon, spent, rel_tol=1e-9, abs_tol=1e-12):
            raise PlanExceededError(
                f"{name}: privacy_ reports ε = {getattr(rep, 'epsilon', None)} but its ledger composes "
                f"ε = {spent:.6g} ({len(ledger)} releases)")
        return spent

    @abstractmethod
    def fit(self, split: Any, *, on_step: OnStep | None = None) -> "Method":
        """Train on ``split`` (a :class:`~mixdp_core.data.splits.Split`); returns self."""

    @abstractmethod
    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """Class scores ``(N, C)`` for raw (unnormalized) features ``X``."""

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predicted labels ``(N,)``."""
        return np.asarray(self.decision_function(X)).argmax(axis=1)


def check_rows(X: Any, dim: Optional[int]) -> np.ndarray:
    """``X`` as an array of feature rows ``(N, dim)`` of finite real numbers, or a
    :class:`~mixdp_core.errors.DataError` naming ``X`` (``dim=None``: any number of columns).
    Integer and boolean rows are accepted (they are numbers); complex and object rows are not."""
    a = np.asarray(X)
    if a.ndim != 2:
        raise DataError(f"X: must be a 2-D array of feature rows (N, D), got shape {a.shape}")
    if dim is not None and a.shape[1] != dim:
        raise DataError(f"X: has {a.shape[1]} feature columns, the model was fitted on {dim}")
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == bool) or np.issubdtype(a.dtype, np.complexfloating):
        raise DataError(f"X: must hold real numbers, got dtype {a.dtype}")
    if a.size and np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
        raise DataError("X: contains NaN or infinite values")
    return a


METHODS: Registry[type[Method]] = Registry("method")


def reference_methods() -> dict[str, str]:
    """``{role: method name}`` of the registered reference methods (roles
    :data:`ROLE_REFERENCE_UPPER` and :data:`ROLE_REFERENCE_LOWER`)."""
    return {cls.role: name for name, cls in METHODS.items() if cls.role != ROLE_METHOD}


def is_reference(name: str) -> bool:
    """Whether the registered method ``name`` is a Performance-Boost reference."""
    return METHODS.get(name).role != ROLE_METHOD


def make_method(name: str, **params: Any) -> Method:
    """Instantiate the method registered as ``name`` with config fields ``params``.

    Raises:
        UnknownNameError: ``name`` is not registered (the message lists the methods).
        ConfigError: a parameter is out of range.
        TypeError: a parameter name does not exist for that method.
    """
    cls = METHODS.get(name)
    fields = {f.name for f in dataclasses.fields(cls.config_cls)}
    unknown = set(params) - fields
    if unknown:
        raise ConfigError(
            sorted(unknown)[0],
            f"not a parameter of method {name!r}; allowed: {', '.join(sorted(fields))}",
        )
    return cls(cls.config_cls(**params))
