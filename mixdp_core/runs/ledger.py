r"""Privacy ledger per private data set: what has this data set spent, over every run?

Every run reports its own ε; this module adds them up per *data set* (like diffprivlib's
``BudgetAccountant`` or OpenDP's odometers), from the runs recorded in a
:class:`~mixdp_core.runs.store.RunStore`, and enforces an optional cap per data set.

**Which data set.** A private data set is identified by what the feature cache keys its
content by (:func:`mixdp_core.features.cache.cache_key`: the loader's ``cache_key``), less
what only picks rows of the same people or another copy of the same numbers:

* the encoder, its weights and the package version are left out (the same images under
  another encoder are the same people);
* the train/test partition and subset options (``test_fraction``, ``split_seed``,
  ``max_per_class``, ``max_test_per_class``) and file lists / modification times are left
  out (a subset or another partition of a folder still holds its people; an edited file
  must not open a fresh budget);
* kept: the registered dataset name, the real path of what it reads where that path names the
  data (``image_folder:<root>``, ``features:<file>``; ``data.datasets.PATH_NAMED_DATASETS``:
  a root given to digits, or another folder holding CIFAR-10, is the same data set; a CD-FSL
  target given a folder is that ``image_folder``, at its fixed place it is keyed by its name;
  a relative path is resolved in the folder the run started in, ``versions["cwd"]``) and the
  loader options that change the content
  (e.g. ``synthetic``'s ``classes``, ``data_seed``), with the loader's defaults filled in.

The key (:func:`dataset_key`) is ``<name>-<10 hex digits>``, e.g. ``digits-…``. Merging two
data sets into one ledger can only over-count; splitting one into two would under-count, so
every choice above errs towards merging.

**Which runs charge it.** Conservatively *every* run on the data set, whatever its split
seed, public shots or imbalance ratio: splits with other seeds move rows between the public
and the private part, so any row may have been private in some run. Counted: ``completed``
and ``cancelled`` runs (both released a model and its metrics; a cancelled run's report covers
the steps it executed), and ``failed`` private runs that wrote a step record before failing:
their step records (test error per step, noisy counts, guard gains) are outputs of the private
phase and stay in the store and its exports. Such a run has no privacy report; it is charged
at ``max(target ε, the largest ε its step records state)`` at its target δ, by basic
composition only (flagged). So is a ``failed`` private run whose mechanism had started (a
release's noise generator was made) before it failed without a step record (``released`` in
its metrics: a noisy count, then a budget too small for the steps that count implies, whose
error quotes them; a hidden honest-tuning repetition). Not counted: other ``failed`` runs
(nothing was released: the data could not be loaded, a refusal from public values). A
deleted run counts through its tombstone (``RunStore.deleted_records``). Private fits of the
papers' figures that are not stored runs (:func:`charged_fits`) count at their target ε, by
basic composition, flagged. ``running`` runs, and the budget that launches still training
have *reserved* (:func:`reserve_budget`: a sweep's runs have no row until they land), are
shown apart and
charged by :func:`check_cap` at what they may spend: their target times the method's
``budget_multiple()`` (more than the target only where an option composes several runs, e.g.
``optimistic_tuning``).

**Totals** (``LedgerSummary``), with δ_total = Σ δ_i of the private runs unless given:

* *basic composition*: ε = Σ ε_i at δ = Σ δ_i (Dwork, Rothblum & Vadhan 2010). It holds for
  **adaptively chosen** runs (an analyst who looks at each result before launching the next
  one), so it is the sound total, the one the cap is checked against.
* *tight composition*: the runs' recorded events composed with :class:`~mixdp_core.accounting.Composition`
  and accounted at δ_total (exact μ-GDP for Gaussian-family runs: μ² add up). An
  :class:`~mixdp_core.accounting.AdaptiveComposition` part (a pure release that chose the
  rest) adds its pure ε: total = Σ pure parts + tight composition of the rest. Tight
  composition across runs assumes the runs' mechanisms were **fixed in advance**; it is shown
  beside the basic total, never instead of it. Runs without a stored event (older runs,
  private selection) or under another neighbouring relation (replace-one) enter by basic
  composition only, at their own (ε, δ): tight ε = tight(events, δ_total − Σ δ_j of those) +
  Σ ε_j of those, flagged. The tight total reported is never above the basic one (both bound
  the same release at δ_total; the smaller is reported).

Non-private references: paragon reads the private data with no guarantee (ε = ∞); it is
listed, flagged "owner's view, not private", and left out of the totals — its outputs are
the owner's view and must not be published. Only-Public and zero-shot read no private row:
cost 0.

**Cap**: stored in the store's ``meta`` table under ``budget_cap:<dataset key>`` as JSON
``{"epsilon", "delta", "dataset"}`` (no schema change). :func:`check_cap` refuses, before
anything runs, a private run whose charge (its target ε times ``budget_multiple()``) would
bring the basic total (plus the charges of runs still running and of live reservations)
above the cap (and likewise for δ when the cap has one). :func:`reserve_budget` makes the
check and the reservation one write transaction, so two launches at the same instant cannot
both pass a cap that holds one of them; a reservation ends when its launch returns, and one
left by a process that died is ignored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import math
import os
import time
from dataclasses import dataclass
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

from .. import accounting
from ..config import check_delta, check_epsilon
from ..errors import BudgetError, ConfigError, StorageError, UnknownNameError
from .store import CANCELLED, COMPLETED, FAILED, RUNNING, RunStore, records_epsilon

#: Prefix of the ``meta`` keys holding caps: ``budget_cap:<dataset key>``.
CAP_PREFIX = "budget_cap:"
#: Prefix of the ``meta`` keys holding live budget reservations (:func:`reserve_budget`).
RESERVE_PREFIX = "budget_reserved:"
#: Prefix of the ``meta`` keys holding the charges of private fits that are not stored runs
#: (:func:`charged_fits`: the papers' figures that train on feature matrices).
CHARGE_PREFIX = "budget_charge:"
#: Loader options that only pick a partition or subset of the same rows, or where to fetch
#: them from: left out of the data set's identity (see the module docstring).
SELECTOR_OPTIONS = frozenset({"test_fraction", "split_seed", "max_per_class", "max_test_per_class", "download",
                              "root"})
#: Run statuses whose privacy report counts (the run released a model and its metrics). A
#: ``failed`` run counts too when it wrote step records (:func:`_failed_entry`).
COUNTED_STATUSES = (COMPLETED, CANCELLED)

KIND_PRIVATE = "private"
KIND_OWNER_VIEW = "owner_view"  # paragon: reads private data, no guarantee
KIND_PUBLIC_ONLY = "public_only"  # only_public / zero_shot: reads no private row
KIND_RUNNING = "running"  # a private run still training (charged at its target by check_cap)

FLAG_NO_EVENT = "no stored event: basic composition only"
FLAG_REPLACE_ONE = "replace-one neighbours: basic composition only (a different relation)"
FLAG_REPRODUCIBLE = "reproducible noise: not private against anyone who knows the seed"
FLAG_OWNER_VIEW = "owner's view, not private (ε = ∞): not in the totals, do not publish"
FLAG_PUBLIC_ONLY = "reads no private data: cost 0"
FLAG_FAILED = "failed after writing step records: charged at its target ε (or the largest its records state)"
FLAG_FAILED_STARTED = ("failed after its mechanism started, before any step record: charged at its target ε "
                       "(it may have released)")
FLAG_FIT = "a figure's private fit (mixdp reproduce), no run row: charged at its target ε, basic composition only"
#: A run deleted from the store: what it spent stays charged (``RunStore.deleted_records``).
FLAG_DELETED = "a deleted run: what it spent stays in the ledger (its record kept as a tombstone)"
FLAG_EXACT_COUNT = ("exact private count treated as public (dataset_size='public'): a cost the ε does not "
                    "cover")


# --------------------------------------------------------------------------- identity
def _number(v: Any) -> Any:
    """Numbers as floats (``classes=10`` and ``10.0`` are the same data), others as they are."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    return float(v)


def dataset_identity(dataset: str, dataset_root: Optional[str] = None,
                     dataset_kwargs: Optional[Mapping[str, Any]] = None, *, legacy: bool | str = False) -> dict[str, Any]:
    """What identifies the private data set a run reads (see the module docstring).

    Args:
        dataset: dataset spec (``"digits"``, ``"image_folder:/data/x"``...).
        dataset_root: the run's ``dataset_root`` (used when the spec has no path).
        dataset_kwargs: the run's loader options.

    Returns:
        ``{"dataset": name, ["path": real path], ["options": {...}]}`` (JSON-ready). No file
        is read: a ledger of old runs works after their files are gone.

    Raises:
        ConfigError: ``dataset``: not a non-empty string.
    """
    from ..data.datasets import (CDFSL_FOLDERS, DATASETS, PATH_NAMED_DATASETS, PUBLIC_DOMAIN_OPTIONS, data_location,
                                 parse_spec)
    from .._io import real_path

    if not isinstance(dataset, str) or not dataset.strip():
        raise ConfigError("dataset", f"must be a dataset spec such as 'digits', got {dataset!r}")
    name, arg = parse_spec(dataset.strip())
    kwargs = dict(dataset_kwargs or {})
    folder = arg or dataset_root or kwargs.get("root")
    if legacy != "named" and name in CDFSL_FOLDERS and folder:
        # a CD-FSL target given a folder loads that folder as image_folder does: the same data set
        # (``cdfsl_eurosat:<folder>`` had a budget apart from ``image_folder:<folder>``'s, and any
        # private folder named so escaped its cap). At its fixed place it stays keyed by its name:
        # a key from the data root would move with $MIXDP_DATA_ROOT (a cap stopped applying when it
        # changed); image_folder:<that folder> is caught at launch as the same folder
        # (_capped_same_file) instead.
        name, folder = data_location(dataset.strip(), folder)
    ident: dict[str, Any] = {"dataset": name}
    # only where the path names the data (a folder, a feature file): a root given to a loader
    # that ignores it, or another copy of a named set, is the same data set (one ledger)
    path = folder if (legacy is True or name in PATH_NAMED_DATASETS) else None
    if path:
        ident["path"] = real_path(path)
    opts: dict[str, Any] = {}
    left_out = SELECTOR_OPTIONS | PUBLIC_DOMAIN_OPTIONS  # neither changes which private rows these are
    try:  # the loader's defaults, so that an option left at its default is the same data set
        params = inspect.signature(DATASETS.get(name)).parameters.values()
        opts = {p.name: p.default for p in params
                if p.default is not inspect.Parameter.empty and p.name not in left_out
                and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)}
    except UnknownNameError:  # a data set no longer registered: its runs still count, by their options
        pass
    opts.update({k: v for k, v in kwargs.items() if k not in left_out})
    if opts:
        ident["options"] = {k: _number(opts[k]) for k in sorted(opts)}
    return ident


def _key_of(ident: Mapping[str, Any]) -> str:
    blob = json.dumps(ident, sort_keys=True, separators=(",", ":"), default=str)
    return f"{ident['dataset']}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


def dataset_key(dataset: str, dataset_root: Optional[str] = None,
                dataset_kwargs: Optional[Mapping[str, Any]] = None, *, legacy: bool | str = False) -> str:
    """The ledger key ``<name>-<10 hex>`` of :func:`dataset_identity`. ``legacy=True``: the key
    the identity gave before it kept the path of path-named data sets only (a root given to
    digits or CIFAR-10 was part of it): caps stored under such a key still apply
    (:func:`effective_cap`)."""
    return _key_of(dataset_identity(dataset, dataset_root, dataset_kwargs, legacy=legacy))


def config_dataset_key(config: Any, metrics: Optional[Mapping[str, Any]] = None, *, legacy: bool | str = False,
                       cwd: Optional[str] = None) -> str:
    """The ledger key of a run's config (a :class:`~mixdp_core.runs.runner.RunConfig` or its
    ``to_dict()``, e.g. a stored record's ``config``).

    ``metrics``: the stored run's metrics; when the config names its data by a *relative*
    path, the absolute one the feature cache recorded (``features_meta``) is used, so the key
    does not depend on the folder the ledger is read from. ``cwd``: the folder the run was
    started in (its record's ``versions["cwd"]``), for a run without that metric (failed before
    its features were loaded, or still running): the relative path is resolved there, not in
    the folder the ledger is read from (a failed run's spend moved to another data set).
    """
    get = config.get if isinstance(config, Mapping) else (lambda k, d=None: getattr(config, k, d))
    dataset, root, kw = get("dataset"), get("dataset_root"), dict(get("dataset_kwargs") or {})
    fm = (metrics or {}).get("features_meta") or {}
    from ..data.datasets import parse_spec

    _, arg = parse_spec(str(dataset or ""))
    given = arg or root or kw.get("root")
    if given and not os.path.isabs(os.path.expanduser(str(given))):
        dk = fm.get("dataset_key") if isinstance(fm.get("dataset_key"), Mapping) else {}
        recorded = dk.get("root") or dk.get("path") or fm.get("source_file")
        if not (isinstance(recorded, str) and os.path.isabs(recorded)) and isinstance(cwd, str) and os.path.isabs(cwd):
            recorded = os.path.join(cwd, os.path.expanduser(str(given)))
        if isinstance(recorded, str) and os.path.isabs(recorded):
            return dataset_key(str(dataset).split(":", 1)[0] + ":" + recorded, None,
                               {k: v for k, v in kw.items() if k != "root"}, legacy=legacy)
    return dataset_key(dataset, root, kw, legacy=legacy)


def _record_cwd(rec: Any) -> Optional[str]:
    """The folder a stored run was started in (``versions["cwd"]``, recorded since relative data
    paths are resolved against it), or ``None`` for older records."""
    v = getattr(rec, "versions", None)
    cwd = v.get("cwd") if isinstance(v, Mapping) else None
    return cwd if isinstance(cwd, str) else None


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class LedgerRun:
    """One run's entry in a data set's ledger.

    Attributes:
        run_id, method, status: as in the store.
        kind: ``"private"``, ``"owner_view"`` (paragon: ε = ∞, not in the totals),
            ``"public_only"`` (reads no private row: cost 0) or ``"running"``.
        epsilon: the run's ε (accounted, as executed; the target ε for a running run);
            ``None`` for a reference (``owner_view`` means ∞, ``public_only`` 0).
        delta: the δ that ε refers to (``None`` for references).
        event: the run's event as stored (:func:`~mixdp_core.accounting.event_to_dict`), or
            ``None`` (older run, private selection): then it counts by basic composition.
        flags: short notes (no stored event, replace-one, reproducible noise, owner's view...).
        created_at: Unix seconds.
    """

    run_id: str
    method: str
    status: str
    kind: str
    epsilon: Optional[float]
    delta: Optional[float]
    event: Optional[dict]
    flags: tuple[str, ...]
    created_at: float

    @property
    def tight(self) -> bool:
        """Whether the run enters the tight composition (private, event stored, add/remove)."""
        return self.kind == KIND_PRIVATE and self.event is not None and FLAG_REPLACE_ONE not in self.flags

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["flags"] = list(self.flags)
        return d


@dataclass(frozen=True)
class BudgetCap:
    """A data set's cap: the basic total may not exceed ``epsilon`` (nor ``delta`` if set).

    Attributes:
        epsilon: ε > 0 (finite).
        delta: δ in (0, 1), or ``None`` (only ε is capped).
        dataset: the dataset spec the cap was set with (a label for listings).
    """

    epsilon: float
    delta: Optional[float] = None
    dataset: str = ""

    def __post_init__(self) -> None:
        eps = check_epsilon(self.epsilon, field="budget_cap")
        if not math.isfinite(eps):
            raise ConfigError("budget_cap", f"must be a finite ε > 0, got {self.epsilon!r}")
        object.__setattr__(self, "epsilon", eps)
        if self.delta is not None:
            object.__setattr__(self, "delta", check_delta(self.delta, field="budget_cap_delta"))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        return f"ε = {self.epsilon:g}" + (f", δ = {self.delta:g}" if self.delta is not None else "")


@dataclass(frozen=True)
class LedgerSummary:
    """What one data set has spent (see the module docstring for every rule).

    Attributes:
        dataset_key: :func:`dataset_key` of the data set.
        label: the dataset spec(s) its runs were launched with.
        runs: the counted private runs (completed / cancelled), oldest first.
        references: non-private runs on it (paragon flagged ``owner_view``; Only-Public,
            zero-shot ``public_only``).
        running: private runs still running (not in the totals; :func:`check_cap` charges
            their target ε).
        epsilon_basic, delta_basic: Σ ε_i and Σ δ_i of ``runs`` (basic composition: holds
            for adaptively chosen runs).
        delta_total: the δ of ``epsilon_tight`` (default Σ δ_i = ``delta_basic``).
        epsilon_tight: ε at ``delta_total`` by tight composition of the stored events (runs
            fixed in advance), runs without one added by basic composition; never above
            ``epsilon_basic`` when ``delta_total >= delta_basic``; ``None`` when
            ``delta_total >= 1`` (no guarantee) or no δ is left for the events.
        accountant: the accountant of the tight composition (``None`` without events).
        n_basic_only: runs counted by basic composition only (no event, replace-one).
        cap: the data set's :class:`BudgetCap`, or ``None``.
        epsilon_running: Σ target ε of ``running``.
        n_splits: distinct public / private splits carved from this data set among its runs
            (split seed, public shots, imbalance; runs whose public rows come from another data
            set left out). Above 1, a row public in one split is private in another, and every
            split's public rows are read without noise (Only-Public, each public start): the
            totals bound the rows private in every split, not the data set's public rows
            (:attr:`split_note`).
    """

    dataset_key: str
    label: str
    runs: tuple[LedgerRun, ...]
    references: tuple[LedgerRun, ...]
    running: tuple[LedgerRun, ...]
    epsilon_basic: float
    delta_basic: float
    delta_total: float
    epsilon_tight: Optional[float]
    accountant: Optional[str]
    n_basic_only: int
    cap: Optional[BudgetCap]
    epsilon_running: float
    n_splits: int = 1

    @property
    def n_private(self) -> int:
        return len(self.runs)

    @property
    def split_note(self) -> Optional[str]:
        """What the totals do not cover when the runs carved several splits (``None`` for one)."""
        if self.n_splits <= 1:
            return None
        return (f"runs on {self.n_splits} different public/private splits of this data set: a row public in one "
                "split (read without noise by Only-Public and every public start) is private in another; the "
                "totals bound only the rows that were private in every split")

    @property
    def cap_left(self) -> Optional[float]:
        """ε the cap leaves (basic composition, running runs charged), or ``None`` without a cap."""
        if self.cap is None:
            return None
        return self.cap.epsilon - self.epsilon_basic - self.epsilon_running

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: an infinite ε (a private run without a recorded ε) becomes ``None``."""
        return _no_inf({
            "dataset_key": self.dataset_key, "dataset": self.label, "n_private_runs": self.n_private,
            "epsilon_basic": self.epsilon_basic, "delta_basic": self.delta_basic,
            "epsilon_tight": self.epsilon_tight, "delta_total": self.delta_total, "accountant": self.accountant,
            "n_basic_only": self.n_basic_only, "epsilon_running": self.epsilon_running,
            "cap": self.cap.to_dict() if self.cap is not None else None, "cap_left": self.cap_left,
            "runs": [r.to_dict() for r in self.runs], "references": [r.to_dict() for r in self.references],
            "running": [r.to_dict() for r in self.running],
            "n_splits": self.n_splits, "split_note": self.split_note,
            # an infinite total becomes null above, as "no cap" does for cap_left: say which
            "unbounded": not math.isfinite(self.epsilon_basic),
        })


def _no_inf(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _no_inf(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_no_inf(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _method_flags(method: str) -> tuple[bool, bool]:
    """``(private, reads_private)`` of a registered method; ``(True, True)`` if unknown (the
    conservative reading of a run whose method is no longer registered)."""
    from ..methods import METHODS

    try:
        cls = METHODS.get(method)
    except UnknownNameError:
        return True, True
    return bool(getattr(cls, "private", True)), bool(getattr(cls, "uses_private_data", True))


def _finite(x: Any) -> Optional[float]:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _failed_entry(rec: Any, private: bool, common: Mapping[str, Any]) -> Optional[LedgerRun]:
    """The entry of a ``failed`` run: charged when it is private and wrote step records or
    released before failing (``released`` in its metrics; see the module docstring), else ``None``."""
    m = rec.metrics or {}
    try:
        n_records = int(m.get("n_step_records") or 0)
    except (TypeError, ValueError):
        n_records = 1  # unreadable: assume it released
    if not private or (n_records <= 0 and not m.get("released")):
        return None
    target = _finite(rec.config.get("target_epsilon"))
    released = _finite(m.get("epsilon_released"))
    # nothing bounds a run without a target ε
    eps = math.inf if target is None else max(target, released or 0.0)
    delta = _finite(rec.config.get("target_delta")) or 0.0
    flags = [FLAG_FAILED if n_records > 0 else FLAG_FAILED_STARTED, FLAG_NO_EVENT]
    if str((rec.config.get("method_params") or {}).get("noise", "")) == "reproducible":
        flags.append(FLAG_REPRODUCIBLE)
    return LedgerRun(kind=KIND_PRIVATE, epsilon=eps, delta=delta, event=None, flags=tuple(flags), **common)


def _entry(rec: Any) -> Optional[LedgerRun]:
    """The ledger entry of a stored run (``None`` for a run that does not count: a failed run
    that released nothing, a failed reference); a deleted run's (its tombstone) is flagged."""
    e = _run_entry(rec)
    if e is not None and (rec.metrics or {}).get("deleted"):
        e = dataclasses.replace(e, flags=tuple(e.flags) + (FLAG_DELETED,))
    return e


def _run_entry(rec: Any) -> Optional[LedgerRun]:
    m = rec.metrics or {}
    method = rec.method or str(rec.config.get("method"))
    private, reads = _method_flags(method)
    common = dict(run_id=rec.run_id, method=method, status=rec.status, created_at=float(rec.created_at))
    if rec.status == RUNNING:
        if not private:
            return None
        eps, delta = planned_charge(rec.config)
        return LedgerRun(kind=KIND_RUNNING, epsilon=eps, delta=delta, event=None, flags=(), **common)
    if rec.status == FAILED:
        return _failed_entry(rec, private, common)
    if rec.status not in COUNTED_STATUSES:
        return None
    priv = m.get("privacy") if isinstance(m.get("privacy"), Mapping) else None
    if "private" in m:
        private = bool(m["private"]) or priv is not None
    if not private:
        if not reads or m.get("epsilon") == 0.0:
            return LedgerRun(kind=KIND_PUBLIC_ONLY, epsilon=None, delta=None, event=None, flags=(FLAG_PUBLIC_ONLY,),
                             **common)
        return LedgerRun(kind=KIND_OWNER_VIEW, epsilon=None, delta=None, event=None, flags=(FLAG_OWNER_VIEW,),
                         **common)
    flags: list[str] = []
    eps = _finite(m.get("epsilon", (priv or {}).get("epsilon")))
    if eps is None:  # a private run without a recorded ε: nothing bounds it
        eps = math.inf
        flags.append("no ε recorded: counted as ∞")
    delta = _finite(m.get("delta", (priv or {}).get("delta")))
    if delta is None:
        delta = _finite(rec.config.get("target_delta")) or 0.0
    event = (priv or {}).get("event")
    if event is not None:
        try:
            accounting.event_from_dict(event)
        except ConfigError as e:  # a corrupt record: count it, by basic composition
            event = None
            flags.append(f"stored event unreadable ({e}): basic composition only")
    if event is None and not any(f.startswith("stored event") for f in flags):
        flags.append(FLAG_NO_EVENT)
    if "replace-one" in str((priv or {}).get("mechanism", "")):
        flags.append(FLAG_REPLACE_ONE)
    if "N_private treated as public" in str((priv or {}).get("mechanism", "")):
        flags.append(FLAG_EXACT_COUNT)
    if m.get("noise") == "reproducible":
        flags.append(FLAG_REPRODUCIBLE)
    return LedgerRun(kind=KIND_PRIVATE, epsilon=eps, delta=delta, event=dict(event) if event else None,
                     flags=tuple(flags), **common)


def planned_charge(config: Any) -> tuple[Optional[float], Optional[float]]:
    """``(ε, δ)`` a private run of ``config`` (a ``RunConfig`` or its ``to_dict()``) may spend
    at most: its target times its method's ``budget_multiple()`` (basic composition). A config
    that no longer builds (an old run, a method since removed) is charged its target."""
    get = config.get if isinstance(config, Mapping) else (lambda k, d=None: getattr(config, k, d))
    eps, delta = _finite(get("target_epsilon")), _finite(get("target_delta"))
    try:
        if hasattr(config, "make_method"):  # a RunConfig
            method = config.make_method()
        else:  # a stored config: the method's own fields are its method_params
            from ..methods import make_method

            method = make_method(str(get("method")), **dict(get("method_params") or {}))
        k = max(1, int(method.budget_multiple()))
    except (ConfigError, UnknownNameError, TypeError, ValueError, KeyError):
        k = 1
    return (None if eps is None else eps * k), (None if delta is None else delta * k)


#: How long a reservation of another machine's process counts (its process cannot be checked
#: from here): a store shared between hosts errs towards charging, for a day.
REMOTE_RESERVATION_S = 24 * 3600.0
#: Reservations made by the launch running in this context (thread / task): a check inside a
#: launch (an executed run of a reserved grid) must not count that launch's charge twice;
#: another launch of the same process (the app runs jobs in threads) still sees it.
_ACTIVE_RESERVATIONS: ContextVar[frozenset] = ContextVar("mixdp_active_budget_reservations", default=frozenset())


def _reservations(store: RunStore, own: frozenset = frozenset()) -> dict[str, list[LedgerRun]]:
    """Live reservations' charges per data set key, as ``running`` entries: every charge a
    launch has not yet released (:meth:`Reservation.land` removes one when its run is stored;
    the launch's end removes the rest), from processes still alive (a reservation left by a
    killed process is ignored). ``own``: config hashes being checked now; a charge of one of
    them in a reservation of *this* launch (:data:`_ACTIVE_RESERVATIONS`) is that launch's own,
    not a second charge."""
    from .store import _process_alive

    active = _ACTIVE_RESERVATIONS.get()
    out: dict[str, list[LedgerRun]] = {}
    for mkey, raw in store.meta_items(RESERVE_PREFIX).items():
        rid = mkey[len(RESERVE_PREFIX):]
        try:
            r = json.loads(raw)
            pid, token, t0 = int(r["pid"]), r.get("token"), float(r["created_at"])
            charges = list(r["charges"])
        except (ValueError, TypeError, KeyError):
            continue  # unreadable: written by something else
        host = r.get("host")
        if host is not None and host != store.host:  # another machine's process: its pid means nothing here;
            if time.time() - t0 > REMOTE_RESERVATION_S:  # alive until it ends, or this long (a crash there)
                continue
        elif not _process_alive(pid, token):
            continue
        for c in charges:
            key, h = c.get("key"), c.get("config_hash")
            if rid in active and h in own:
                continue
            out.setdefault(key, []).append(LedgerRun(
                run_id=rid, method=str(c.get("method")), status="reserved",
                kind=KIND_RUNNING, epsilon=_finite(c.get("epsilon")), delta=_finite(c.get("delta")), event=None,
                flags=("reserved by a launch still training: no run row yet",), created_at=t0))
    return out


class Reservation:
    """A launch's live budget reservation (:func:`reserve_budget`)."""

    def __init__(self, store: RunStore, rid: Optional[str]):
        self.store, self.rid = store, rid

    def land(self, config_hash: str) -> None:
        """Release one charge of ``config_hash``: its run is now a stored row, counted by it."""
        if self.rid is None:
            return
        with self.store.exclusive() as con:
            row = con.execute("SELECT value FROM meta WHERE key=?", (RESERVE_PREFIX + self.rid,)).fetchone()
            if row is None:
                return
            r = json.loads(row[0])
            charges = list(r.get("charges", []))
            i = next((j for j, c in enumerate(charges) if c.get("config_hash") == config_hash), None)
            if i is None:
                return
            del charges[i]
            r["charges"] = charges
            con.execute("UPDATE meta SET value=? WHERE key=?", (json.dumps(r), RESERVE_PREFIX + self.rid))


@dataclass(frozen=True)
class FitCharge:
    """A private fit that is not a stored run (a figure's training on a feature matrix), as
    the cap check sees a run config: its method, data set and target.

    Attributes:
        method: registered method name.
        dataset, dataset_root, dataset_kwargs: the data set it reads (as a ``RunConfig``'s).
        target_epsilon, target_delta: the fit's target (its method never overshoots it).
        tag: what tells this fit apart from the others of its figure (e.g. ``"ir=100 seed=2"``).
    """

    method: str
    dataset: str
    target_epsilon: float
    target_delta: float
    dataset_root: Optional[str] = None
    dataset_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tag: str = ""

    def config_hash(self) -> str:
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)
        return "fit-" + hashlib.sha256(blob.encode()).hexdigest()[:16]


@contextmanager
def charged_fits(store: RunStore, fits: Sequence[FitCharge], *, label: str,
                 started: Callable[[], Optional[Iterable[int]]] | None = None) -> Iterator[None]:
    """Charge private fits that write no run row to their data sets' ledgers.

    Before the block: the caps are checked and the fits' charges reserved
    (:func:`reserve_budget`). When it exits — also by an error: a fit may have released
    before another failed — the private fits that may have run are charged at their target
    (ε, δ) as a ``budget_charge:`` entry of the store's ``meta`` table, listed by ``mixdp
    budget`` with :data:`FLAG_FIT`. Non-private fits (paragon, Only-Public) are not charged.

    ``started()``, called at the exit, gives the indices (into ``fits``) of the fits that may
    have started, or ``None`` for all of them (the default): an interrupted figure charged
    every fit it had planned (700 of them after 6 s; 1.4 M once, which no cap survives).

    Raises:
        BudgetError: a cap would be exceeded (nothing has run).
    """
    import uuid

    fits = list(fits)
    private = [i for i, f in enumerate(fits) if _method_flags(f.method)[0]]
    with reserve_budget(store, [fits[i] for i in private]):
        try:
            yield
        finally:
            ran = started() if started is not None else None
            if ran is not None:
                ran = set(int(i) for i in ran)
                private = [i for i in private if i in ran]
            fits = [fits[i] for i in private]
            if fits:
                blob = json.dumps({"created_at": time.time(), "label": str(label), "charges": [
                    {"key": config_dataset_key(f), "dataset": f.dataset, "method": f.method,
                     "epsilon": float(f.target_epsilon), "delta": float(f.target_delta), "tag": f.tag}
                    for f in fits]})
                store.set_meta(CHARGE_PREFIX + uuid.uuid4().hex[:16], blob)


def _fit_charges(store: RunStore) -> dict[str, list[LedgerRun]]:
    """The stored :func:`charged_fits` entries per data set key, as private ledger entries."""
    out: dict[str, list[LedgerRun]] = {}
    for mkey, raw in store.meta_items(CHARGE_PREFIX).items():
        try:
            r = json.loads(raw)
            t0, label, charges = float(r["created_at"]), str(r.get("label", "")), list(r["charges"])
        except (ValueError, TypeError, KeyError):
            # fail closed: skipped, its charges left the ledger (ε 36.7 → 1.7) and a cap let runs
            # through; which data sets it charged cannot be read, so nothing can be counted
            raise StorageError(f"budget_charge: the store's entry {mkey!r} is unreadable, so the budget ledger "
                               f"cannot be computed; restore the store from a backup, or delete that entry "
                               f"(sqlite3 runs.sqlite \"DELETE FROM meta WHERE key='{mkey}'\") knowing its "
                               f"charges are then lost") from None
        for i, c in enumerate(charges):
            eps, delta = _finite(c.get("epsilon")), _finite(c.get("delta"))
            out.setdefault(str(c.get("key")), []).append(LedgerRun(
                run_id=f"{mkey[len(CHARGE_PREFIX):]}#{i}", method=str(c.get("method")), status=label or "fit",
                kind=KIND_PRIVATE, epsilon=math.inf if eps is None else eps, delta=delta or 0.0, event=None,
                flags=(FLAG_FIT,), created_at=t0))
    return out


def _extra_entries(store: RunStore, own: frozenset = frozenset()) -> dict[str, list[LedgerRun]]:
    """Entries without a run row, per key: figures' charged fits and live reservations."""
    out = _fit_charges(store)
    for k, v in _reservations(store, own).items():
        out.setdefault(k, []).extend(v)
    return out


def _records_by_key(store: RunStore) -> dict[str, list[Any]]:
    """Every stored run grouped by data set key, oldest first. A ``failed`` run's step records
    are counted from the store itself (a process killed mid-run, or a disk-full fallback,
    leaves no metrics saying how many it wrote): ``n_step_records`` and ``epsilon_released``
    of its metrics become at least what its stored records show."""
    out: dict[str, list[Any]] = {}
    # deleted runs count through their tombstones: privacy spent cannot be deleted
    for rec in list(store.list_runs(newest_first=False)) + store.deleted_records():
        try:
            key = config_dataset_key(rec.config, rec.metrics, cwd=_record_cwd(rec))
        except ConfigError:  # a config without a dataset: nothing to charge
            continue
        if rec.status == FAILED:
            steps = store.steps(rec.run_id)
            if steps:
                m = dict(rec.metrics or {})
                try:
                    n_rec = int(m.get("n_step_records") or 0)
                except (TypeError, ValueError):
                    n_rec = 0
                m["n_step_records"] = max(n_rec, len(steps))
                m["epsilon_released"] = records_epsilon(steps, _finite(m.get("epsilon_released")) or 0.0)
                rec = dataclasses.replace(rec, metrics=m)
        out.setdefault(key, []).append(rec)
    return out


# --------------------------------------------------------------------------- composition
def tight_epsilon(events: Sequence[Any], *, delta: float) -> tuple[float, Optional[str]]:
    """ε at ``delta`` of the events composed (mechanisms fixed in advance), and the accountant.

    AdaptiveComposition parts add their pure ε (basic adaptive composition, as
    :func:`~mixdp_core.accounting.epsilon` does for one); the rest is one
    :class:`~mixdp_core.accounting.Composition` accounted with the default accountant
    (exact μ-GDP when every part is Gaussian-family).
    """
    pure, rest = accounting.split_adaptive(events)
    if not rest:
        return math.fsum(pure), ("pure" if pure else None)
    eps, used = accounting.epsilon_and_accountant(accounting.Composition(rest), delta=delta)
    return math.fsum(pure) + float(eps), used


# --------------------------------------------------------------------------- caps
def _cap_key(key: str) -> str:
    return CAP_PREFIX + key


def effective_cap(store: RunStore, key: str, legacy_keys: Iterable[str] = ()) -> Optional[BudgetCap]:
    """The tightest of the caps of ``key`` and of its legacy keys (caps set before the key
    changed: :func:`dataset_key`'s ``legacy``), or ``None``: a cap never stops applying because
    the key it was stored under changed."""
    caps = [c for c in (get_cap(store, k) for k in dict.fromkeys([key, *legacy_keys])) if c is not None]
    if not caps:
        return None
    deltas = [c.delta for c in caps if c.delta is not None]
    return BudgetCap(epsilon=min(c.epsilon for c in caps), delta=min(deltas) if deltas else None,
                     dataset=caps[0].dataset)


def legacy_dataset_keys(config: Any, metrics: Optional[Mapping[str, Any]] = None,
                        cwd: Optional[str] = None) -> set[str]:
    """The keys a run's data set had before the identity changed, under which a cap may be
    stored: the path kept for every data set (``legacy=True``), and a CD-FSL target given a
    folder keyed by its name (``legacy="named"``, before it became that ``image_folder``)."""
    return {config_dataset_key(config, metrics, legacy=kind, cwd=cwd) for kind in (True, "named")}


def _legacy_keys(groups: Mapping[str, list[Any]], caps: set) -> dict[str, set]:
    """``{key: legacy keys with a cap}`` from the stored runs of each key."""
    out: dict[str, set] = {}
    for key, recs in groups.items():
        for rec in recs:
            try:
                olds = legacy_dataset_keys(rec.config, rec.metrics, cwd=_record_cwd(rec))
            except ConfigError:
                continue
            for old in olds:
                if old != key and old in caps:
                    out.setdefault(key, set()).add(old)
    return out


def get_cap(store: RunStore, key: str) -> Optional[BudgetCap]:
    """The cap of data set ``key``, or ``None``.

    Raises:
        ConfigError: ``budget_cap``: the stored entry is unreadable (edited by hand).
    """
    text = store.get_meta(_cap_key(key))
    if text is None:
        return None
    try:
        d = json.loads(text)
        return BudgetCap(epsilon=d["epsilon"], delta=d.get("delta"), dataset=str(d.get("dataset", "")))
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ConfigError("budget_cap", f"stored cap of {key} is unreadable ({type(e).__name__}): "
                                        f"set it again with `mixdp budget --dataset ... --cap EPS`") from None


def set_cap(store: RunStore, key: str, epsilon: float, delta: Optional[float] = None, *,
            dataset: str = "") -> BudgetCap:
    """Set the cap of data set ``key`` (replacing any); returns it.

    A cap below what the data set has already spent is accepted (it then refuses every
    further private run); the CLI says so.

    Raises:
        ConfigError: ``budget_cap`` (ε not a finite number > 0) or ``budget_cap_delta``
            (δ not in (0, 1)).
    """
    cap = BudgetCap(epsilon=epsilon, delta=delta, dataset=dataset)
    store.set_meta(_cap_key(key), json.dumps(cap.to_dict(), sort_keys=True))
    return cap


def apply_config_cap(store: RunStore, key: str, epsilon: float, delta: Optional[float] = None, *,
                     dataset: str = "") -> str:
    """Apply a cap given in a configuration file (a sweep file's ``budget_cap``); returns one
    line saying what happened.

    A file may set a cap where there is none and lower a higher one (ε, or δ when both have
    one), never raise one: a file copied from another project must not loosen the owner's
    cap; only ``mixdp budget --cap`` raises it.

    Raises:
        ConfigError: ``budget_cap`` / ``budget_cap_delta`` out of range (see :func:`set_cap`).
    """
    new = BudgetCap(epsilon=epsilon, delta=delta, dataset=dataset)
    old = get_cap(store, key)
    if old is None:
        set_cap(store, key, new.epsilon, new.delta, dataset=dataset)
        return f"cap set from the configuration file: {new.describe()}"
    eps = min(old.epsilon, new.epsilon)
    dl = (new.delta if old.delta is None else old.delta if new.delta is None else min(old.delta, new.delta))
    if eps == old.epsilon and dl == old.delta:
        return (f"cap kept: {old.describe()} (the file's {new.describe()} would not lower it; "
                f"raise a cap with mixdp budget --cap)")
    cap = set_cap(store, key, eps, dl, dataset=dataset or old.dataset)
    return f"cap lowered by the configuration file: {old.describe()} -> {cap.describe()}"


def clear_cap(store: RunStore, key: str) -> bool:
    """Remove the cap of data set ``key``; returns whether there was one."""
    had = store.get_meta(_cap_key(key)) is not None
    store.set_meta(_cap_key(key), None)
    return had


def capped_keys(store: RunStore) -> list[str]:
    """Keys of every data set with a cap."""
    return [k[len(CAP_PREFIX):] for k in store.meta_items(CAP_PREFIX)]


# --------------------------------------------------------------------------- ledger
def _summary(key: str, recs: Iterable[Any], cap: Optional[BudgetCap], delta_total: Optional[float],
             extra: Sequence[LedgerRun] = ()) -> LedgerSummary:
    recs = list(recs)
    entries = sorted([e for e in (_entry(r) for r in recs) if e is not None] + list(extra),
                     key=lambda e: e.created_at)
    runs = tuple(e for e in entries if e.kind == KIND_PRIVATE)
    refs = tuple(e for e in entries if e.kind in (KIND_OWNER_VIEW, KIND_PUBLIC_ONLY))
    running = tuple(e for e in entries if e.kind == KIND_RUNNING)
    labels = sorted({str(r.dataset or r.config.get("dataset")) for r in recs})
    label = ", ".join(labels) if labels else (cap.dataset if cap is not None and cap.dataset else key)

    eps_basic = math.fsum(r.epsilon for r in runs)
    delta_basic = math.fsum(r.delta for r in runs)
    tight_runs = [r for r in runs if r.tight]
    loose = [r for r in runs if not r.tight]
    eps_loose, delta_loose = math.fsum(r.epsilon for r in loose), math.fsum(r.delta for r in loose)
    if delta_total is None:
        d_total = delta_basic  # the rule: the tight total is read at the δ the basic one holds at
    else:
        d_total = check_delta(delta_total, field="delta_total")
    eps_tight: Optional[float]
    used: Optional[str] = None
    if not runs:
        eps_tight = 0.0
    elif d_total >= 1.0:
        eps_tight = None  # Σ δ_i >= 1: no guarantee is left to state
    else:
        delta_events = math.fsum(r.delta for r in tight_runs)
        # by default the events get exactly their own Σ δ (no subtraction round-off)
        d_events = delta_events if delta_total is None else d_total - delta_loose
        if tight_runs and d_events <= 0.0 or not tight_runs and d_total < delta_loose:
            raise ConfigError("delta_total", f"must exceed {delta_loose:g}, the δ already taken by the "
                                             f"{len(loose)} run(s) counted by basic composition, got {d_total:g}")
        if not tight_runs:
            eps_tight = eps_loose
        else:
            events = [accounting.event_from_dict(r.event) for r in tight_runs]
            eps_events, used = tight_epsilon(events, delta=d_events)
            basic_events = math.fsum(r.epsilon for r in tight_runs)
            if d_events >= delta_events and basic_events < eps_events:
                # both bound the same runs at this δ; the accountant's may be the looser one
                # (e.g. RDP for DP-SGD runs that reported with PLD): report the smaller
                eps_events, used = basic_events, "basic"
            eps_tight = eps_events + eps_loose
    counted = {e.run_id for e in entries}
    splits = {r.split_hash for r in recs if r.run_id in counted and getattr(r, "split_hash", None)
              and not (r.config or {}).get("public_from")}
    return LedgerSummary(
        dataset_key=key, label=label, runs=runs, references=refs, running=running,
        epsilon_basic=eps_basic, delta_basic=delta_basic, delta_total=d_total, epsilon_tight=eps_tight,
        accountant=used, n_basic_only=len(loose), cap=cap,
        epsilon_running=math.fsum(r.epsilon or 0.0 for r in running), n_splits=max(1, len(splits)),
    )


def dataset_ledger(store: RunStore, dataset_key: str, *, delta_total: Optional[float] = None) -> LedgerSummary:
    """The ledger of one data set (see the module docstring for the rules).

    Args:
        store: the run store.
        dataset_key: :func:`dataset_key` / :func:`config_dataset_key` of the data set.
        delta_total: δ of the tight total; default Σ δ_i of the private runs.

    Raises:
        ConfigError: ``delta_total`` out of (0, 1) or not above the δ of the runs counted by
            basic composition only.
    """
    groups = _records_by_key(store)
    legacy = _legacy_keys({dataset_key: groups.get(dataset_key, [])}, set(capped_keys(store)))
    return _summary(dataset_key, groups.get(dataset_key, []),
                    effective_cap(store, dataset_key, legacy.get(dataset_key, ())), delta_total,
                    _extra_entries(store).get(dataset_key, ()))


def dataset_ledgers(store: RunStore, *, delta_total: Optional[float] = None) -> list[LedgerSummary]:
    """The ledger of every data set with a run or a cap in ``store``, most spent first."""
    groups = _records_by_key(store)
    reserved = _extra_entries(store)
    caps = set(capped_keys(store))
    legacy = _legacy_keys(groups, caps)
    absorbed = set().union(*legacy.values()) if legacy else set()  # listed with the key their runs now have
    keys = set(groups) | (caps - absorbed) | set(reserved)
    out = [_summary(k, groups.get(k, []), effective_cap(store, k, legacy.get(k, ())), delta_total,
                    reserved.get(k, ())) for k in keys]
    out = [s for s in out if s.runs or s.references or s.running or s.cap is not None]
    return sorted(out, key=lambda s: (-s.epsilon_basic, s.label, s.dataset_key))


def find_dataset(store: RunStore, name: str, dataset_root: Optional[str] = None,
                 dataset_kwargs: Optional[Mapping[str, Any]] = None) -> str:
    """The key a user means by ``name``: a key listed by ``mixdp budget`` (``digits-3fa2…``)
    if one matches, else the key of the dataset spec ``name`` with these options.

    Raises:
        ConfigError: ``dataset``: neither a listed key nor a registered dataset spec (a cap on
            a misspelt name would guard nothing); or a loader option it does not take.
    """
    from ..data.datasets import check_dataset_kwargs
    from ..data.paths import resolve_dataset_spec

    if dataset_root is None and not dataset_kwargs:
        # a listed key: of a cap, of stored runs, or of a figure's fit charges only (`mixdp budget`
        # suggested "--dataset digits-8872d00f74" for those and then called it unknown)
        if (store.get_meta(_cap_key(name)) is not None or name in _records_by_key(store)
                or name in _extra_entries(store)):
            return name
    resolve_dataset_spec(name, confine=False, field="dataset")
    check_dataset_kwargs(name, dict(dataset_kwargs or {}))
    return dataset_key(name, dataset_root, dataset_kwargs)


# --------------------------------------------------------------------------- the check
def check_caps(store: RunStore, configs: Sequence[Any], *, reuse: bool = False) -> None:
    """Refuse ``configs`` (about to run) if they would take a data set above its cap.

    Per data set with a cap: spent (basic composition of the counted runs) + target ε of the
    runs still running + Σ target ε of the new private ``configs`` must stay ≤ the cap's ε
    (and likewise Σ δ ≤ the cap's δ, when it has one). Non-private references are not charged
    (paragon's outputs are the owner's view; Only-Public reads no private row). With
    ``reuse``, a config whose identical run is stored completed is not charged (it will not
    run again). Nothing is written.

    Raises:
        BudgetError: field ``budget_cap``, one line with the data set, the numbers and what
            to change.
    """
    _check_and_charge(store, configs, reuse)


def _capped_same_file(store: RunStore, config: Any, caps: Iterable[str]) -> Optional[BudgetCap]:
    """The cap of another key whose data are the same file or folder (device and inode) as this
    config's, or ``None``. A ledger key is a path (it must work after the files are gone), so a
    hard link opened a budget of its own (a review spent ε = 1 past a cap of 1.5 so); a copy is
    other bytes on disk and stays another data set (docs/privacy.md)."""
    from ..data.datasets import data_location, same_file

    try:
        _, path = data_location(config.dataset, getattr(config, "dataset_root", None))
    except (ValueError, ConfigError):
        return None
    if path is None:
        return None
    for k in caps:
        cap = get_cap(store, k)
        if cap is None or not cap.dataset:
            continue
        try:
            _, other = data_location(cap.dataset)
        except (ValueError, ConfigError):
            continue
        if same_file(path, other):
            return cap
    return None


def _check_and_charge(store: RunStore, configs: Sequence[Any], reuse: bool) -> list[dict[str, Any]]:
    """:func:`check_caps`; returns the charges it checked (configs on capped data sets that
    will run, one per distinct config), what :func:`reserve_budget` holds."""
    if not configs:
        return []
    caps = set(capped_keys(store))
    if not caps:
        return []  # the common case: one query, no ledger
    groups = _records_by_key(store)
    stored_legacy = _legacy_keys(groups, caps)  # caps stored under the key a data set had before
    new: dict[str, list[Any]] = {}
    hashes: dict[int, str] = {}  # each config's hash, once (it builds the method and reads the data's identity)
    legacy_of: dict[str, set] = {}
    seen: set[str] = set()
    for c in configs:
        private, _ = _method_flags(c.method)
        if not private:
            continue
        key, olds = config_dataset_key(c), legacy_dataset_keys(c)
        if key not in caps and not (olds & caps) and key not in stored_legacy:
            twin = _capped_same_file(store, c, caps)
            if twin is not None:  # a hard link or another name of a capped file or folder: refused
                raise BudgetError("budget_cap", (
                    f"data set {c.dataset!r} is the same file or folder as {twin.dataset!r} (a hard link or another "
                    f"name), which has a cap (ε = {twin.epsilon:g}): launch it as {twin.dataset!r} so its spend "
                    "counts against that cap"))
            continue
        for old in olds:
            if old != key and old in caps:
                legacy_of.setdefault(key, set()).add(old)
        h = hashes[id(c)] = c.config_hash()
        if reuse and store.find_completed(h) is not None:
            continue
        if h in seen and not isinstance(c, FitCharge):
            # one run per distinct config: a sweep trains a config named twice once (a figure's
            # fits are each charged: every item is a training)
            continue
        seen.add(h)
        new.setdefault(key, []).append(c)
    if not new:
        return []
    reserved = _extra_entries(store, frozenset(hashes[id(c)] for cs in new.values() for c in cs))
    planned = {key: [planned_charge(c) for c in cs] for key, cs in new.items()}  # (ε, δ) of each, once
    for key, cs in new.items():
        cap = effective_cap(store, key, legacy_of.get(key, set()) | stored_legacy.get(key, set()))
        if cap is None:  # removed meanwhile
            continue
        recs = groups.get(key, [])
        entries = [e for e in (_entry(r) for r in recs) if e is not None] + reserved.get(key, [])
        spent = math.fsum(e.epsilon for e in entries if e.kind == KIND_PRIVATE)
        in_flight = math.fsum(e.epsilon or 0.0 for e in entries if e.kind == KIND_RUNNING)
        n_priv = sum(e.kind == KIND_PRIVATE for e in entries)
        n_run = sum(e.kind == KIND_RUNNING for e in entries)
        replace_one = [c for c in cs  # a figure's FitCharge has no method_params: never replace-one
                       if str((getattr(c, "method_params", None) or {}).get("neighbouring", "")) == "replace"]
        if replace_one:  # its ε is for another relation: under add/remove (the cap's) it bounds nothing
            raise BudgetError("budget_cap", f"data set {cs[0].dataset!r} has a cap (ε = {cap.epsilon:g}, add/remove "
                                            f"neighbours); a {replace_one[0].method} run with neighbouring='replace' "
                                            "treats the class sizes as public and has no add/remove bound: use "
                                            "neighbouring='add_remove', or remove the cap (mixdp budget --clear-cap)")
        # the same for a run that takes the exact private count as public (its q and T read N in
        # the clear: an add/remove neighbour changes them, and its ε does not cover that)
        exact_n = [c for c in cs if str((getattr(c, "method_params", None) or {}).get("dataset_size", "")) == "public"]
        if exact_n:
            raise BudgetError("budget_cap", f"data set {cs[0].dataset!r} has a cap (ε = {cap.epsilon:g}); a "
                                            f"{exact_n[0].method} run with dataset_size='public' reads the exact "
                                            "private count in the clear, a cost its ε does not cover: use "
                                            "dataset_size='noisy_count' (the default), or remove the cap "
                                            "(mixdp budget --clear-cap)")
        charges = planned[key]
        want = math.fsum(e for e, _ in charges)
        label = cs[0].dataset
        what = f"this run's target ε = {want:g}" if len(cs) == 1 else f"these {len(cs)} runs' target ε sum to {want:g}"
        if any(e is not None and e > float(c.target_epsilon) * (1 + 1e-12) for (e, _), c in zip(charges, cs)):
            what = (f"this run's charge ε = {want:g}" if len(cs) == 1 else f"these {len(cs)} runs' charges sum to "
                    f"ε = {want:g}") + " (an option that composes several fits is charged their total)"
        running_txt = f" + {in_flight:.4g} running ({n_run} run(s))" if n_run else ""
        total = spent + in_flight + want
        # a relative slack of 1e-9: a cap met exactly (e.g. 3 runs of ε = 1 under a cap of 3) is allowed
        if total > cap.epsilon * (1 + 1e-9):
            raise BudgetError("budget_cap", (
                f"data set {label} ({key}) has spent ε = {spent:.4g} (basic composition of {n_priv} private run(s))"
                f"{running_txt}; {what} would bring it to {total:.4g} > its cap ε = {cap.epsilon:g}: "
                f"lower epsilon, or raise the cap with `mixdp budget --dataset {label} --cap EPS`"))
        if cap.delta is not None:
            d_spent = math.fsum(e.delta for e in entries if e.kind == KIND_PRIVATE)
            d_run = math.fsum(e.delta or 0.0 for e in entries if e.kind == KIND_RUNNING)
            d_total = d_spent + d_run + math.fsum(d for _, d in charges)
            if d_total > cap.delta * (1 + 1e-9):
                raise BudgetError("budget_cap", (
                    f"data set {label} ({key}) has spent δ = {d_spent:.3g} (basic composition of {n_priv} private "
                    f"run(s)); the new run(s) would bring it to {d_total:.3g} > its cap δ = {cap.delta:g}: lower "
                    f"delta, or raise the cap with `mixdp budget --dataset {label} --cap EPS --delta D`"))
    out, seen = [], set()  # a repeated config runs once: reserved once
    for key, cs in new.items():
        for c, (eps, delta) in zip(cs, planned[key]):
            h = hashes[id(c)]
            if h not in seen:
                seen.add(h)
                out.append({"key": key, "config_hash": h, "method": c.method, "epsilon": eps, "delta": delta})
    return out


def check_cap(store: RunStore, config: Any, *, reuse: bool = False) -> None:
    """:func:`check_caps` for one run config (call it before anything runs)."""
    check_caps(store, [config], reuse=reuse)


@contextmanager
def reserve_budget(store: RunStore, configs: Sequence[Any], *, reuse: bool = False) -> Iterator[Reservation]:
    """:func:`check_caps`, and hold the configs' charges for the block, in one step.

    The check and the reservation are one write transaction (``RunStore.exclusive``): a
    second launch on the same store waits, then sees this reservation, so two launches at the
    same instant cannot both pass a cap that holds one of them. Inside the block the
    reservation counts as running for every other check (:func:`_reservations`) until each
    charge is released by :meth:`Reservation.land` (its run is stored) or the block exits (a
    process that dies leaves it behind, and it is then ignored). Without a cap on any of the
    data sets nothing is written. Yields the :class:`Reservation`.

    Raises:
        BudgetError: as :func:`check_caps`, before anything is reserved.
    """
    import uuid

    from .store import _process_token

    if not capped_keys(store):
        yield Reservation(store, None)
        return
    rid = uuid.uuid4().hex[:16]
    with store.exclusive() as con:  # other writers wait; the reads below see every committed reservation
        charges = _check_and_charge(store, configs, reuse)
        if charges:
            blob = json.dumps({"pid": os.getpid(), "token": _process_token(os.getpid()), "host": store.host,
                               "created_at": time.time(), "charges": charges})
            con.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (RESERVE_PREFIX + rid, blob))
    ctx = _ACTIVE_RESERVATIONS.set(_ACTIVE_RESERVATIONS.get() | {rid})
    try:
        yield Reservation(store, rid if charges else None)
    finally:
        _ACTIVE_RESERVATIONS.reset(ctx)
        if charges:
            store.set_meta(RESERVE_PREFIX + rid, None)
