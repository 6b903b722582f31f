"""Run one experiment end to end and record it in the :class:`~mixdp_core.runs.store.RunStore`.

``execute(config, store=store)``: load features (cache) → split → method → ``fit`` with a
callback streaming :class:`~mixdp_core.methods.base.StepRecord` s to the store and polling
its cancel flag → evaluate (utility, privacy report, MIA, pDP) → store metrics and the
per-sample ``.npz`` artifact. Any exception (including ``KeyboardInterrupt``) marks the run
``failed`` with its message, keeps the step history, and is re-raised.

``train(config)`` is the same pipeline without a store (sweep workers on other processes or
machines must not open the SQLite file): it returns a picklable :class:`TrainedRun` (steps,
metrics, per-sample arrays, status) that the driver writes with ``record_trained(store, run)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from ..config import (IMBALANCE_RANGE, MAX_IMBALANCE_RATIO, SEED_RANGE, Interval, delta_param,  # noqa: F401
                      epsilon_param, param, validate)  # MAX_IMBALANCE_RATIO: part of this module's API
from ..errors import ConfigError, DataError, UnknownNameError
from .owner_view import OWNER_NOTE, diagnostics  # noqa: F401  (diagnostics: part of this module's API)
from .store import CANCELLED, COMPLETED, FAILED, RunStore, records_epsilon

#: RunConfig fields forwarded to the method config when the method has them.
_FORWARDED = ("target_epsilon", "target_delta", "seed")


#: Where each registry lives (imported on first use: importing a package registers its
#: built-ins). An import failure is a real error and propagates.
_REGISTRIES = {"method": ("mixdp_core.methods", "METHODS"),
               "encoder": ("mixdp_core.encoders", "ENCODERS"),
               "dataset": ("mixdp_core.data", "DATASETS")}


def _registry_check(field_name: str, kind: str, name: str) -> None:
    """Raise ConfigError(field_name, ...) if ``name`` is not in the registry of ``kind``."""
    import importlib

    module, attr = _REGISTRIES[kind]
    reg = getattr(importlib.import_module(module), attr)
    try:
        reg.get(name)
    except UnknownNameError as e:
        raise ConfigError.unknown_name(field_name, e) from None


def _registered(kind: str) -> Callable[[str], None]:
    """A :func:`~mixdp_core.config.param` ``check``: the value names a registered ``kind``
    (dataset specs go through :func:`_resolve_spec` instead)."""

    def check(value: str) -> None:
        _registry_check(kind, kind, value)

    return check


def _resolve_spec(spec: str) -> None:
    """The dataset check of every config: the one resolver of data specs, unconfined (the
    app confines every launch on top, :func:`mixdp_core.data.paths.confine_run_paths`)."""
    from ..data.paths import resolve_dataset_spec

    resolve_dataset_spec(spec, confine=False)


def _json_mapping(field_name: str) -> Callable[[Any], None]:
    """A ``check``: a dict whose values are JSON-serializable with finite numbers."""

    def check(value: Any) -> None:
        if not isinstance(value, Mapping):
            raise ConfigError(field_name, f"must be a dict, got {type(value).__name__}")
        for k, v in value.items():  # name the entry, not the whole mapping
            try:
                _canonical({str(k): v})
            except (TypeError, ValueError):
                allowed = "a finite number or JSON value"
                if field_name == "dataset_kwargs":  # a loader option with a declared range: say it
                    from ..data.datasets import _dataset_arg_specs

                    spec = _dataset_arg_specs().get(str(k))
                    if spec is not None:
                        allowed = spec.requirement()
                raise ConfigError(str(k), f"must be {allowed} (in {field_name}), got {str(v)[:60]}") from None

    return check


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False, default=str)


def _hash(obj: Any) -> str:
    return hashlib.sha256(_canonical(obj).encode()).hexdigest()[:32]


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything that determines one experiment (frozen, JSON round-trippable).

    Args:
        dataset: dataset spec, e.g. ``"digits"``, ``"cifar10"``, ``"image_folder:/data/x"``.
        encoder: feature extractor name (``ENCODERS``), e.g. ``"pixels"``, ``"efficientnet_lite0"``.
        method: training method name (``METHODS``), e.g. ``"adamix"``.
        seed: seed of the split (and of the method's noise only with ``noise="reproducible"``,
            research only: secure noise never reads it), integer ``>= 0``.
        target_epsilon: ε > 0 of the (ε, δ)-DP guarantee (ignored by non-private methods).
        target_delta: δ in (0, 1). Default 1e-5.
        public_per_class: public samples per class, integer ``>= 1``. Default 5.
        imbalance_ratio: long-tail ratio of the private part, ``>= 1`` (1 = balanced).
        public_from: dataset spec of the public data under domain shift, or ``None``.
        method_params: other fields of the method's config (e.g. ``{"noise_multiplier": 20}``).
        dataset_root: where the dataset lives / is downloaded (``None`` = loader default).
        dataset_kwargs: extra keyword arguments of the dataset loader (e.g. ``max_per_class``).
        encoder_kwargs: extra encoder constructor arguments (e.g. ``{"image_size": 128}``).
        private_per_class: at most this many private samples per class (``None`` = all; left
            out of :meth:`to_dict` and the hashes when ``None``, so older runs stay reusable).
    """

    dataset: str = param(type=str, check=_resolve_spec,
                         allowed="a dataset spec '<registered dataset>[:<argument>]' (`mixdp datasets`)",
                         help="Dataset spec, e.g. 'digits', 'cifar10', 'image_folder:/data/x'.")
    encoder: str = param(type=str, check=_registered("encoder"), allowed="a registered encoder (`mixdp encoders`)",
                         help="Feature extractor name (ENCODERS), e.g. 'pixels', 'efficientnet_lite0'.")
    method: str = param(type=str, check=_registered("method"), allowed="a registered method (`mixdp methods`)",
                        help="Training method name (METHODS), e.g. 'adamix'.")
    seed: int = param(0, type=int, range=SEED_RANGE, help="Seed of the split (and of the method's noise only with noise='reproducible').")
    target_epsilon: float = epsilon_param(3.0)
    target_delta: float = delta_param(1e-5)
    public_per_class: int = param(5, type=int, range=Interval(1, None), help="Public samples per class.")
    imbalance_ratio: float = param(1.0, type=float, range=IMBALANCE_RANGE,
                                   help="Long-tail ratio of the private part (1 = balanced; the papers use "
                                        "up to 100).")
    public_from: str | None = param(None, type=str, allowed="a dataset spec",
                                    help="Dataset spec of the public data under domain shift, or None.")
    method_params: dict[str, Any] = param(default_factory=dict, check=_json_mapping("method_params"),
                                          allowed="a JSON-serializable dict",
                                          help="Other fields of the method's config, e.g. {\"noise_multiplier\": 20}.")
    dataset_root: str | None = param(None, type=str,
                                     help="Where the dataset lives / is downloaded (None = loader default).")
    dataset_kwargs: dict[str, Any] = param(default_factory=dict, check=_json_mapping("dataset_kwargs"),
                                           allowed="a JSON-serializable dict",
                                           help="Extra keyword arguments of the dataset loader (e.g. max_per_class).")
    encoder_kwargs: dict[str, Any] = param(default_factory=dict, check=_json_mapping("encoder_kwargs"),
                                           allowed="a JSON-serializable dict",
                                           help="Extra encoder constructor arguments (e.g. {\"image_size\": 128}).")
    private_per_class: int | None = param(None, type=int, range=Interval(1, None),
                                          help="At most this many private samples per class (None = all).")

    def __post_init__(self) -> None:
        validate(self)  # every declared field: type, range, registry membership, JSON-ability
        for name in ("method_params", "dataset_kwargs", "encoder_kwargs"):
            object.__setattr__(self, name, dict(getattr(self, name)))
        for k in self.method_params:
            if k in _FORWARDED:
                raise ConfigError(k, f"set it as RunConfig.{k}, not inside method_params")
        from ..data.datasets import check_dataset_kwargs, public_source

        check_dataset_kwargs(self.dataset, self.dataset_kwargs)
        if self.dataset == "synthetic" and self.public_from is None:
            # its sizes are declared: a public share that leaves no private row is known before
            # the set is drawn (it was found after 44 s of generation, a failed run stored)
            import inspect

            from ..data.synthetic import synthetic_features

            n = self.dataset_kwargs.get(
                "train_per_class", inspect.signature(synthetic_features).parameters["train_per_class"].default)
            if isinstance(n, int) and not isinstance(n, bool) and self.public_per_class >= n:
                raise ConfigError("public_per_class", f"must be below the synthetic data's train_per_class ({n}): "
                                                      f"every class keeps at least one private row, got "
                                                      f"{self.public_per_class}")
        from ..encoders.base import check_encoder_kwargs

        check_encoder_kwargs(self.encoder, self.encoder_kwargs)  # a typo fails before any row exists
        try:
            if self.public_from is not None:  # a registered data set, before any row exists
                from ..data.datasets import DATASETS, parse_spec

                DATASETS.get(parse_spec(self.public_from)[0])
            public_source(self.dataset, self.dataset_kwargs, self.public_from, self.dataset_root)  # refuses a shift nothing uses
        except UnknownNameError as e:  # an unknown public data set: name the field that holds it
            raise ConfigError.unknown_name("public_from", e) from None
        # Validates method_params against the method's config (ranges, names). No calibration
        # here: the budget is checked once, by preflight(), where a run is about to start.
        self.make_method()

    def preflight(self) -> None:
        """Refuse a budget no run can meet (e.g. ε too small for σ), before any run exists.

        The one budget check of a run: the entry points call it where a run is decided (the
        sweep's expansion, the app's form) and :func:`execute` before it stores anything; the
        result is remembered on this (frozen) config, so a second call costs nothing.

        Raises:
            BudgetError: the method's calibration cannot meet ``target_epsilon`` (one line
                naming the field).
        """
        if self.__dict__.get("_preflight_ok"):
            return
        self.make_method().preflight()
        object.__setattr__(self, "_preflight_ok", True)

    # ---------------------------------------------------------------- derived
    def method_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``make_method(self.method, ...)``."""
        from ..methods import METHODS

        fields = {f.name for f in dataclasses.fields(METHODS.get(self.method).config_cls)}
        kw = {k: getattr(self, k) for k in _FORWARDED if k in fields}
        kw.update(self.method_params)
        return kw

    def make_method(self):
        """A fresh, unfitted method instance for this config."""
        from ..methods import make_method

        return make_method(self.method, **self.method_kwargs())

    def split_spec(self):
        """The :class:`~mixdp_core.data.splits.SplitSpec` of this run."""
        from ..data.splits import SplitSpec

        return SplitSpec(
            public_per_class=self.public_per_class,
            imbalance_ratio=self.imbalance_ratio,
            seed=self.seed,
            public_from=self.public_from,
            private_per_class=self.private_per_class,
        )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d["private_per_class"] is None:  # optional field added later: keeps old hashes
            del d["private_per_class"]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RunConfig":
        """Inverse of :meth:`to_dict` (unknown keys are an error naming the key)."""
        names = {f.name for f in dataclasses.fields(cls)}
        extra = sorted(set(d) - names)
        if extra:
            raise ConfigError(extra[0], f"not a RunConfig field; allowed: {', '.join(sorted(names))}")
        return cls(**dict(d))

    def config_hash(self) -> str:
        """Hash identifying identical runs: this config plus the method's resolved config.

        Including the resolved method config (defaults filled in) means a change of a method
        default yields a new hash instead of silently reusing an old run; including the hash of
        the ``mixdp_core`` sources means a run produced by other code is never reused as
        "identical" (it stays in the store and can still be reopened); including the data's
        fingerprint where a path names them (:func:`~mixdp_core.data.datasets.data_fingerprint`)
        means other files under the same spec are another run.
        """
        from ..data.datasets import data_fingerprint

        method_cfg = dataclasses.asdict(self.make_method().config)
        code = _source_identity()["mixdp_core_source_sha256"]
        out = {"run": self.to_dict(), "method_config": method_cfg, "code": code}
        # a path-named data set is its files, not its spec: the same relative spec in two folders,
        # or a feature file replaced in place, gave one hash and the other data's run back as
        # "reused" (its metrics and ε, and no ledger entry for the data actually named)
        for field_, spec, root, kw in (("data", self.dataset, self.dataset_root, self.dataset_kwargs),
                                       ("public_data", self.public_from, None, None)):
            fp = data_fingerprint(spec, root, kw) if spec else None
            if fp is not None:
                out[field_] = fp
        return _hash(out)

    def split_hash(self) -> str:
        """Hash of everything that determines the split (shared by all methods on it).

        Long-tailed splits (``imbalance_ratio > 1``) also hash their tail's stream: since
        2026-11-30 the tail's order has a stream of its own (:func:`~mixdp_core.data.splits.tail_ranks`),
        so the same options give other private rows than in runs stored before, and a stored
        reference of the earlier split must not be taken for this one (:func:`sibling_boost`).
        Balanced splits did not change and keep their hash."""
        return _hash(
            {
                **({"tail_stream": "seed-own-2026-11-30"} if float(self.imbalance_ratio) > 1 else {}),
                "dataset": self.dataset,
                "encoder": self.encoder,
                "dataset_root": self.dataset_root,
                "dataset_kwargs": self.dataset_kwargs,
                "encoder_kwargs": self.encoder_kwargs,
                "seed": self.seed,
                "public_per_class": self.public_per_class,
                "imbalance_ratio": self.imbalance_ratio,
                "public_from": self.public_from,
                **({"private_per_class": self.private_per_class} if self.private_per_class is not None else {}),
            }
        )


@functools.lru_cache(maxsize=1)
def _source_identity() -> dict[str, str]:
    """Hash of the ``mixdp_core`` sources (exact code identity, even uncommitted) + git commit."""
    pkg = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for f in sorted(pkg.rglob("*.py")):
        h.update(str(f.relative_to(pkg)).encode())
        try:
            h.update(f.read_bytes())
        except OSError:
            pass
    out = {"mixdp_core_source_sha256": h.hexdigest()[:16]}
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=pkg, capture_output=True,
                             text=True, timeout=5)
        if rev.returncode == 0:
            out["git_commit"] = rev.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def versions() -> dict[str, str]:
    """Versions of the software a run used (package versions, source hash, git commit)."""
    from .. import __version__

    out = {"mixdp_core": __version__, "python": platform.python_version(), "numpy": np.__version__,
           "platform": platform.platform(), **_source_identity()}
    for mod in ("scipy", "sklearn", "torch", "opacus", "autodp"):
        m = sys.modules.get(mod)
        if m is not None and hasattr(m, "__version__"):
            out[mod] = str(m.__version__)
    return out


def run_versions() -> dict[str, str]:
    """:func:`versions` and the folder the run starts in (``cwd``): a relative data path in its
    config was read there, and the privacy ledger resolves it there (never where the ledger is
    read from). Not in a figure's metadata (a local folder in committed docs)."""
    return {**versions(), "cwd": os.getcwd()}


class _Heartbeat:
    """Background thread refreshing the run's heartbeat every ``period`` seconds."""

    def __init__(self, store: RunStore, run_id: str, period: float = 10.0):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(store, run_id, period), daemon=True,
                                        name=f"mixdp-heartbeat-{run_id}")

    def _loop(self, store: RunStore, run_id: str, period: float) -> None:
        while not self._stop.wait(period):
            try:
                store.heartbeat(run_id)
            except Exception:  # a busy database must not kill the run
                pass

    def __enter__(self) -> "_Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class _StepWriter:
    """``on_step`` callback: hands StepRecords to a batched :class:`~mixdp_core.runs.store.StepWriter`
    and polls the cancel flag.

    The first record is written at once; later ones reach the database when the oldest
    unwritten one is ``flush_every_s`` old (also
    between steps, from the writer's background thread), every ``max_steps`` records and at the
    end, so a run killed mid-way loses at most ``flush_every_s`` seconds of history; the cancel
    flag is read after each flush.
    """

    def __init__(self, store: RunStore, run_id: str, on_record: Callable | None, flush_every_s: float = 1.0,
                 max_steps: int = 256):
        self.store, self.run_id, self.on_record = store, run_id, on_record
        # the first record at once: it is the live charts' first point (Launch -> first point)
        self.writer = store.step_writer(run_id, max_age_s=flush_every_s, max_steps=max_steps, write_first=True)
        self.cancelled = False
        self.n_records = 0
        self.epsilon_released = 0.0  # the largest epsilon_spent of a record written (a failed run is charged it)
        self._seen_flushes = 0

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()

    def __call__(self, record: Any) -> bool:
        d = record.to_dict()
        self.writer.append(d)
        self.n_records += 1
        self.epsilon_released = records_epsilon((d,), self.epsilon_released)
        stop = False
        if self.on_record is not None:
            stop = bool(self.on_record(record))
        if self.writer.n_flushes != self._seen_flushes:  # poll cancel once per flush
            self._seen_flushes = self.writer.n_flushes
            stop = stop or self.writer.cancel_requested()
        if stop:
            self.cancelled = True
        return self.cancelled


class _LiveView:
    """Observer of NoisyGD-type steps (installed with :func:`mixdp_core.methods._observe.observing_steps`): every ``every_s``
    seconds (and at the last step) adds ``minority_accuracy`` to the step record's ``extra``
    (of ``X W + intercept`` where a per-class ``intercept`` is given: AdaMix's prior correction);
    at most every ``max(every_s, PDP_EVERY_S)`` seconds (and at the last step) it writes the
    per-instance ε of the steps so far to the run's artifact (``live_pdp_epsilon``,
    ``live_step``; the final artifact replaces it)."""

    #: The per-instance ε artifact is rewritten at most this often (s): it costs a pDP
    #: conversion of every private row and a compressed write, in the training process.
    PDP_EVERY_S = 0.5

    def __init__(self, store: RunStore, run_id: str, split: Any, delta: float, every_s: float = 0.5):
        self.store, self.run_id, self.split, self.delta, self.every_s = store, run_id, split, float(delta), every_s
        self.minority = np.asarray(split.minority_classes, dtype=np.int64)
        self.n_private = int(len(split.y_private))
        self.last = -math.inf
        self.last_pdp = -math.inf

    def __call__(self, *, rec: Any, W: Any, pdp_sq: Any, problem: Any, noise_multiplier: float,
                 intercept: Any = None) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s and rec.step < rec.total_steps:
            return
        self.last = now
        try:
            X, y = getattr(problem, "X_test", None), getattr(problem, "y_test", None)
            if X is not None and y is not None and self.minority.size:
                mask = np.isin(y, self.minority)
                if mask.any():
                    scores = X[mask] @ W
                    pred = (scores if intercept is None else scores + intercept).argmax(axis=1)
                    rec.extra["minority_accuracy"] = float(np.mean(pred == y[mask]))
            last_step = rec.step >= rec.total_steps
            if (noise_multiplier and noise_multiplier > 0 and self.n_private
                    and (last_step or now - self.last_pdp >= max(self.every_s, self.PDP_EVERY_S))):
                self.last_pdp = now
                from ..accounting import pdp_epsilon

                sq = np.asarray(pdp_sq[: self.n_private], dtype=np.float64)
                eps_i = np.asarray(pdp_epsilon(sq, noise_multiplier=float(noise_multiplier), delta=self.delta))
                self.store.save_artifacts(self.run_id, {"live_pdp_epsilon": eps_i,
                                                        "live_step": np.asarray(rec.step)})
        except Exception:  # a live view must never break the run
            pass


def _load_features(config: RunConfig, *, cache_dir: Any, progress: Callable | None):
    from ..data.datasets import public_source
    from ..features.cache import get_features

    kw = dict(config.dataset_kwargs)
    ekw = dict(config.encoder_kwargs) or None
    pub_spec, pub_kw = public_source(config.dataset, kw, config.public_from, config.dataset_root)
    if pub_spec is not None:
        _check_public_classes(config, kw, pub_spec)
    feats = get_features(config.dataset, config.encoder, root=config.dataset_root, cache_dir=cache_dir,
                         progress=progress, encoder_kwargs=ekw, **kw)
    pub = None
    if pub_spec is not None:
        pub = get_features(pub_spec, config.encoder, root=None, cache_dir=cache_dir,
                           progress=progress, encoder_kwargs=ekw, **pub_kw)
    return feats, pub


def _check_public_classes(config: RunConfig, kw: Mapping[str, Any], pub_spec: str) -> None:
    """Refuse a public domain whose classes are not the private data set's before anything is
    encoded: from the two listings, where encoding is the cost (image data sets). The split found
    it only after both data sets were encoded (hours on a real one). Feature data sets are read,
    not encoded: the split's own check comes as soon."""
    from ..data.datasets import carries_features, public_classes_mismatch

    if carries_features(config.dataset) and carries_features(pub_spec):
        return
    bad = public_classes_mismatch(config.dataset, kw, config.public_from, config.dataset_root)
    if bad:
        raise DataError(f"public_from: {bad}")


DIAGNOSTICS_NOTE = OWNER_NOTE  # one wording for the CLI's --json, exports and pages


def sibling_boost(store: RunStore, split_hash: str, err_dp: float) -> float | None:
    """Performance Boost of an error ``err_dp`` against completed paragon and only-public runs
    of the same split in ``store`` (newest of each), or ``None`` if either is missing. It may
    be ∞ or −∞ (undefined), which JSON cannot hold: :func:`_with_boost` stores how it reads."""
    from ..evaluation.metrics import performance_boost
    from ..methods.base import ROLE_REFERENCE_LOWER, ROLE_REFERENCE_UPPER, reference_methods

    names = reference_methods()
    refs = {}
    for role in (ROLE_REFERENCE_UPPER, ROLE_REFERENCE_LOWER):
        if role not in names:
            return None
        runs = store.list_runs(status=COMPLETED, split_hash=split_hash, method=names[role], limit=1)
        if not runs or runs[0].metrics.get("test_error") is None:
            return None
        refs[role] = runs[0].metrics["test_error"]
    pb = performance_boost(err_dp, err_public=refs[ROLE_REFERENCE_LOWER], err_paragon=refs[ROLE_REFERENCE_UPPER])
    return pb


def _fit_evaluate(config: RunConfig, features: Any, public_features: Any, on_step: Callable,
                  *, cache_dir: Any, progress: Callable | None, run_id: str, t0: float,
                  live: Callable[[Any], Any] | None = None):
    """Features → split → fit → evaluate. Returns ``(metrics, arrays)``; ``metrics`` lack
    ``performance_boost`` (it needs the store) and ``n_step_records``. ``live(split)``, if
    given, makes the live step observer installed during ``fit``."""
    from ..methods._observe import observing_steps
    from ..data.splits import make_split
    from ..evaluation.report import evaluate, json_safe

    if features is None:
        features, public_features = _load_features(config, cache_dir=cache_dir, progress=progress)
    split = make_split(features, config.split_spec(), public_features=public_features)
    model = config.make_method()
    t_fit = time.perf_counter()
    from ..randomness import tracking_noise

    try:
        with tracking_noise() as drawn, observing_steps(live(split) if live is not None else None):
            model.fit(split, on_step=on_step)
    except BaseException as e:
        # a fit can release before it fails with no step record written (a noisy count, then a
        # budget too small for the steps it implies; a hidden honest-tuning repetition; the
        # held-out guard's histogram, whose ledgers are the fit's only at its end): once its
        # mechanism made a noise generator it is taken to have released (the ledger charges
        # it); a refusal from public values before that (a projection too large) is not
        if drawn[0] or len(getattr(model, "ledger_", None) or ()):
            with contextlib.suppress(Exception):
                e.mixdp_released = True
        raise
    fit_seconds = time.perf_counter() - t_fit
    model.verify_privacy()  # releases fit the plan and privacy_ is the ledger's, or the run fails
    ev = evaluate(model, split, delta=config.target_delta, seed=config.seed)
    metrics = dict(ev.metrics)
    metrics.update(
        run_id=run_id, method=config.method, dataset=config.dataset, encoder=config.encoder,
        seed=config.seed, target_epsilon=config.target_epsilon,
        target_delta=config.target_delta, public_per_class=config.public_per_class,
        imbalance_ratio=config.imbalance_ratio, fit_seconds=fit_seconds,
        wall_seconds=time.perf_counter() - t0,
        split=json_safe(split.summary()), features_meta=json_safe(dict(features.meta)),
        method_config=json_safe(dataclasses.asdict(model.config)),
    )
    if metrics.get("delta") is None:
        metrics["delta"] = config.target_delta
    if getattr(model, "timing_owner_only_", False):  # the duration depends on a secret of the mechanism
        metrics["timing_owner_only"] = True
    if getattr(model, "ledger_", None) is not None:  # what was released, in order (no data values)
        metrics["privacy_ledger"] = model.ledger_.to_dicts()
    if getattr(model, "epsilon_rdp_", None) is not None:
        metrics["epsilon_rdp"] = float(model.epsilon_rdp_)  # the looser RDP ε, shown beside
    metrics["diagnostics"] = diagnostics(metrics)
    return metrics, ev.arrays


def failure_fields(config: RunConfig, error: BaseException) -> dict[str, Any]:
    """What the metrics of a run that failed before its report was made carry besides its
    timing (:func:`execute` and :func:`train` alike):

    * ``noise`` and ``noise_label`` of a private method's config: its stored step records
      (noisy counts, a guard's gain) are releases, and with reproducible noise anyone who
      knows the seed can replay them, so a failed run carries the label as a completed one does;
    * ``private``: the method's flag (a private method's timings are owner-only, failed or not);
    * ``released: True`` when its fit had started its mechanism (a release's noise generator
      was made: it may have released), so the budget ledger charges it even without a step
      record; absent for a failure before (loading the data, the split, a refusal from public
      values)."""
    from .. import randomness

    out: dict[str, Any] = {}
    try:
        method = config.make_method()
        cfg = method.config
        # whether it reads private rows: a failed private run's timings are owner-only as a
        # completed one's (owner_view.timing_is_owner_only reads this flag; a review found a
        # failed DP run's wall_seconds in the public part of sweep --json and of exports)
        out["private"] = bool(getattr(method, "private", True))
    except Exception:  # noqa: BLE001 - the run failed already; its stored config says the rest
        cfg = None
    if cfg is not None and hasattr(cfg, "noise"):
        src = randomness.noise_source_of(cfg)
        out.update(noise=src, noise_label=randomness.label(src))
    if getattr(error, "mixdp_released", False):
        out["released"] = True
    return out


def _with_boost(store: RunStore, config: RunConfig, metrics: dict[str, Any]) -> dict[str, Any]:
    from ..evaluation.report import json_safe

    from ..methods.base import is_reference

    pb = None if is_reference(config.method) else sibling_boost(store, config.split_hash(), metrics["test_error"])
    metrics["performance_boost"] = pb if pb is not None and math.isfinite(pb) else None
    if pb is not None and not math.isfinite(pb):
        # ∞ (the paragon's error reached) or undefined (an error below the paragon's): JSON holds
        # neither, so the run keeps how it reads; the card showed nothing at all
        from ..evaluation.metrics import format_boost

        metrics["performance_boost_label"] = format_boost(pb)
    return json_safe(metrics)


class _TerminationDeferral:
    """Where a run of the main thread is between writing its row and the ``try`` that marks it
    failed, a SIGTERM handler (the CLI's, which raises :class:`~mixdp_core.cli._common.Terminated`)
    hands its exception here instead of raising it; the run raises it inside that ``try``.
    Raised in between, it left the row 'running' until the next store opened. (Blocking the
    signal is not enough: a process-directed signal goes to any thread that does not block it,
    and the handler then runs in the main thread at once.)"""

    def __init__(self) -> None:
        self.active = False
        self.pending: BaseException | None = None

    def begin(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False  # signal handlers run in the main thread: nothing of this run to defer
        self.active, self.pending = True, None
        return True

    def end(self, began: bool) -> None:
        """Stop deferring; raise the exception a handler handed over meanwhile, if any."""
        if not began:
            return
        self.active = False
        exc, self.pending = self.pending, None
        if exc is not None:
            raise exc


_TERMINATION = _TerminationDeferral()


def defer_termination(exc: BaseException) -> bool:
    """For a SIGTERM handler in the main thread: ``True`` if a run is in the short window between
    its row and its ``try`` (``exc`` is then raised there, and the handler must return),
    ``False`` if the handler should raise ``exc`` itself."""
    if _TERMINATION.active:
        _TERMINATION.pending = exc
        return True
    return False


def execute(
    config: RunConfig,
    *,
    store: RunStore,
    on_record: Callable[[Any], bool | None] | None = None,
    features: Any = None,
    public_features: Any = None,
    cache_dir: Any = None,
    progress: Callable[[str, int, int], None] | None = None,
    reuse: bool = False,
    label: str | None = None,
    flush_every_s: float = 1.0,
) -> str:
    """Run ``config`` and record it in ``store``.

    Args:
        config: the experiment.
        store: where the run row, step history, metrics and artifacts go.
        on_record: called with every :class:`StepRecord` (e.g. a progress bar); may return
            ``True`` to cancel.
        features: a ready :class:`~mixdp_core.features.featureset.FeatureSet` (skips the
            feature cache; the caller vouches it matches ``config.dataset``/``encoder``).
        public_features: features of ``config.public_from`` when ``features`` is given.
        cache_dir: feature-cache folder (default of :func:`get_features`).
        progress: ``progress(split_name, done, total)`` during feature extraction.
        reuse: return the id of a completed run with the same :meth:`RunConfig.config_hash`
            instead of running again.
        label: free-text tag stored with the run (e.g. the experiment name).
        flush_every_s: the most seconds a step record waits before it is written (and the
            cancel flag read); see :class:`~mixdp_core.runs.store.StepWriter`.

    Returns:
        The run id. Its status is ``completed`` or ``cancelled``.

    Raises:
        BudgetError: field ``budget_cap``: the run would take its data set above the cap set
            with ``mixdp budget`` (:func:`mixdp_core.runs.ledger.check_cap`); nothing was
            stored or run.
        Whatever the pipeline raised (after marking the run ``failed``).
    """
    config.preflight()  # the budget, before a row exists (a no-op if the caller already checked)
    chash = config.config_hash()
    if reuse:
        done = store.find_completed(chash)
        if done is not None:
            return done.run_id
    # The data set's budget cap, if any (mixdp budget): refused before a row or a step exists.
    # Every entry point checks it too (CLI, app); this is the backstop for library callers.
    from .ledger import reserve_budget

    # SIGTERM (the CLI raises it as an interrupt) is deferred from just before the row is
    # written until the ``try`` that marks the run failed (_TerminationDeferral)
    deferring = False
    try:
        # the cap's check and the run's row in one step: a launch racing this one sees either the
        # reservation or the running row (ledger.reserve_budget)
        with reserve_budget(store, [config]):
            if features is None:  # a missing folder or unusable feature file fails before a run row exists
                from ..data.datasets import check_dataset_source, parse_spec

                check_dataset_source(config.dataset, config.dataset_root or config.dataset_kwargs.get("root"))
                if config.public_from is not None and parse_spec(config.public_from)[1]:  # a path of its own
                    check_dataset_source(config.public_from, None)
            stamp = run_versions()  # (a git subprocess of up to 5 s: kept out of the deferred window)
            deferring = _TERMINATION.begin()
            run_id = store.create_run(config.to_dict(), config_hash=chash, split_hash=config.split_hash(),
                                      versions=stamp, label=label)
        writer = _StepWriter(store, run_id, on_record, flush_every_s)
    except BaseException:
        _TERMINATION.end(deferring)  # a SIGTERM handed over meanwhile is raised (chained) on the way out
        raise
    t0 = time.perf_counter()
    try:
        _TERMINATION.end(deferring)  # a SIGTERM that arrived meanwhile is raised here, inside the try
        with _Heartbeat(store, run_id):
            metrics, arrays = _fit_evaluate(
                config, features, public_features, writer, cache_dir=cache_dir, progress=progress, run_id=run_id,
                t0=t0, live=lambda split: _LiveView(store, run_id, split, config.target_delta, flush_every_s))
            writer.close()
            metrics["n_step_records"] = writer.n_records
            store.save_artifacts(run_id, arrays)
            store.finish(run_id, CANCELLED if writer.cancelled else COMPLETED,
                         metrics=_with_boost(store, config, metrics))
    except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt must mark the run failed too
        try:
            writer.close()
        except Exception:
            pass
        msg = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        try:
            store.finish(run_id, FAILED, error=msg,
                         metrics={"wall_seconds": time.perf_counter() - t0, "n_step_records": writer.n_records,
                                  "epsilon_released": writer.epsilon_released, **failure_fields(config, e)})
        except Exception:
            try:  # e.g. disk full: the smallest possible write, so the run is not left 'running'
                store.finish(run_id, FAILED, error=msg[:500])
            except Exception:
                pass  # the next RunStore() marks it failed (dead process)
        raise
    return run_id


# ---------------------------------------------------------------------- store-less path
@dataclass
class TrainedRun:
    """A run trained without a store (e.g. in a sweep worker), for a driver to record.

    Everything :func:`record_trained` writes: the run id (chosen by the worker, so the
    metrics can name it), config and hashes, software versions, status, step records,
    metrics, per-sample arrays and the error message of a failed run. Picklable.
    """

    run_id: str
    config: dict[str, Any]
    config_hash: str
    split_hash: str
    versions: dict[str, Any]
    status: str
    steps: list[dict[str, Any]]
    metrics: dict[str, Any]
    arrays: dict[str, np.ndarray]
    error: str | None = None
    host: str = ""
    pid: int = 0


def train(
    config: RunConfig,
    *,
    features: Any = None,
    public_features: Any = None,
    cache_dir: Any = None,
    on_record: Callable[[Any], bool | None] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    config_hash: str | None = None,
) -> TrainedRun:
    """Run ``config`` without touching any store and return the record to write.

    ``config_hash``: the hash the caller (a sweep's driver) computed for ``config``; the
    record carries it. Recomputed here it would describe the worker's working directory and
    files (a relative data path, a file absent on a remote node) and the driver would never
    find the run again to reuse it.

    The same pipeline as :func:`execute` (features → split → fit → evaluate), for processes
    that must not open the SQLite store (sweep workers on other processes or machines). An
    exception of the pipeline yields a ``failed`` record with its message and the steps so
    far (``KeyboardInterrupt``/``SystemExit`` propagate). ``on_record`` may return ``True``
    to stop: the record is then ``cancelled``. Write the result with :func:`record_trained`.
    """
    import os
    import socket

    from ..evaluation.report import json_safe
    from .store import new_run_id

    run_id = new_run_id()
    steps: list[dict[str, Any]] = []
    cancelled = [False]

    def on_step(rec: Any) -> bool:
        steps.append(rec.to_dict())
        if on_record is not None and on_record(rec):
            cancelled[0] = True
        return cancelled[0]

    t0 = time.perf_counter()
    status, error, arrays = COMPLETED, None, {}
    # before the fit (the data as they are now); raising here, as before, not a record without a hash
    chash = config_hash if config_hash is not None else config.config_hash()
    try:
        metrics, arrays = _fit_evaluate(config, features, public_features, on_step, cache_dir=cache_dir,
                                        progress=progress, run_id=run_id, t0=t0)
        status = CANCELLED if cancelled[0] else COMPLETED
    except Exception as e:  # noqa: BLE001 - recorded as a failed run by the driver
        status, error = FAILED, (f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
        metrics = {"wall_seconds": time.perf_counter() - t0, "epsilon_released": records_epsilon(steps),
                   **failure_fields(config, e)}
    metrics["n_step_records"] = len(steps)
    return TrainedRun(run_id=run_id, config=config.to_dict(), config_hash=chash,
                      split_hash=config.split_hash(), versions=run_versions(), status=status,
                      steps=json_safe(steps), metrics=metrics, arrays=dict(arrays), error=error,
                      host=socket.gethostname(), pid=os.getpid())


def record_trained(store: RunStore, run: TrainedRun, *, label: str | None = None,
                   sweep_id: str | None = None) -> str:
    """Write a :class:`TrainedRun` to ``store`` (row, steps, artifacts, final status);
    the Performance Boost is computed here, against the store's reference runs. Returns
    the run id."""
    from ..evaluation.report import json_safe

    config = RunConfig.from_dict(run.config)
    metrics = dict(run.metrics)
    if run.status != FAILED and "test_error" in metrics:
        metrics = _with_boost(store, config, metrics)
    metrics.setdefault("worker", {"host": run.host, "pid": run.pid})
    store.create_run(run.config, config_hash=run.config_hash, split_hash=run.split_hash,
                     versions=run.versions, label=label, run_id=run.run_id, sweep_id=sweep_id)
    try:
        if run.steps:
            store.append_steps(run.run_id, run.steps)
        if run.arrays:
            store.save_artifacts(run.run_id, run.arrays)
        store.finish(run.run_id, run.status, metrics=json_safe(metrics), error=run.error)
    except BaseException:
        try:
            store.finish(run.run_id, FAILED, error="interrupted while the driver recorded the run")
        except Exception:
            pass
        raise
    return run.run_id
