"""Run one experiment end to end and record it in the :class:`~mixdp_core.runs.store.RunStore`.

``execute(config, store=store)``: load features (cache) → split → method → ``fit`` with a
callback streaming :class:`~mixdp_core.methods.base.StepRecord` s to the store and polling
its cancel flag → evaluate (utility, privacy report, MIA, pDP) → store metrics and the
per-sample ``.npz`` artifact. Any exception (including ``KeyboardInterrupt``) marks the run
``failed`` with its message, keeps the step history, and is re-raised.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import platform
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import ConfigError, UnknownNameError
from .store import CANCELLED, COMPLETED, FAILED, RunStore

#: RunConfig fields forwarded to the method config when the method has them.
_FORWARDED = ("target_epsilon", "target_delta", "seed")


def _registry_check(field_name: str, kind: str, name: str) -> None:
    """Raise ConfigError(field_name, ...) if ``name`` is not in the registry of ``kind``."""
    try:
        if kind == "method":
            from ..methods import METHODS as reg
        elif kind == "encoder":
            from ..encoders import base as _eb

            try:
                from .. import encoders as _enc  # noqa: F401  (registers the built-ins)
            except ImportError:
                pass
            reg = _eb.ENCODERS
        else:
            from .. import data as _data

            reg = getattr(_data, "DATASETS", None)
            if reg is None:
                return  # dataset registry not available: the loader validates the spec
    except ImportError:
        return
    try:
        reg.get(name)
    except UnknownNameError:
        raise ConfigError(field_name, f"unknown {kind} {name!r}; choose one of: {', '.join(reg.keys())}") from None


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
        seed: seed of the split and of the method's noise, integer ``>= 0``.
        target_epsilon: ε > 0 of the (ε, δ)-DP guarantee (ignored by non-private methods).
        target_delta: δ in (0, 1). Default 1e-5.
        public_per_class: public samples per class, integer ``>= 1``. Default 5.
        imbalance_ratio: long-tail ratio of the private part, ``>= 1`` (1 = balanced).
        public_from: dataset spec of the public data under domain shift, or ``None``.
        method_params: other fields of the method's config (e.g. ``{"noise_multiplier": 20}``).
        dataset_root: where the dataset lives / is downloaded (``None`` = loader default).
        dataset_kwargs: extra keyword arguments of the dataset loader (e.g. ``max_per_class``).
        encoder_kwargs: extra encoder constructor arguments (e.g. ``{"image_size": 128}``).
    """

    dataset: str
    encoder: str
    method: str
    seed: int = 0
    target_epsilon: float = 3.0
    target_delta: float = 1e-5
    public_per_class: int = 5
    imbalance_ratio: float = 1.0
    public_from: str | None = None
    method_params: dict[str, Any] = field(default_factory=dict)
    dataset_root: str | None = None
    dataset_kwargs: dict[str, Any] = field(default_factory=dict)
    encoder_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("dataset", "encoder", "method"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v.strip():
                raise ConfigError(name, f"must be a non-empty string, got {v!r}")
        _registry_check("method", "method", self.method)
        _registry_check("encoder", "encoder", self.encoder)
        _registry_check("dataset", "dataset", self.dataset.partition(":")[0])
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ConfigError("seed", f"must be an integer >= 0, got {self.seed!r}")
        try:
            eps = float(self.target_epsilon)
        except (TypeError, ValueError):
            eps = float("nan")
        if not (math.isfinite(eps) and eps > 0):
            raise ConfigError("epsilon", f"must be a finite number > 0, got {self.target_epsilon!r}")
        try:
            delta = float(self.target_delta)
        except (TypeError, ValueError):
            delta = float("nan")
        if not (0 < delta < 1):
            raise ConfigError("delta", f"must lie in the open interval (0, 1), got {self.target_delta!r}")
        ppc = self.public_per_class
        if isinstance(ppc, bool) or not isinstance(ppc, (int, np.integer)) or ppc < 1:
            raise ConfigError("public_per_class", f"must be an integer >= 1, got {ppc!r}")
        try:
            ir = float(self.imbalance_ratio)
        except (TypeError, ValueError):
            ir = float("nan")
        if not (math.isfinite(ir) and ir >= 1):
            raise ConfigError("imbalance_ratio", f"must be a number >= 1 (1 = balanced), got {self.imbalance_ratio!r}")
        if self.public_from is not None and (not isinstance(self.public_from, str) or not self.public_from):
            raise ConfigError("public_from", f"must be a dataset spec or None, got {self.public_from!r}")
        for name in ("method_params", "dataset_kwargs", "encoder_kwargs"):
            v = getattr(self, name)
            if not isinstance(v, Mapping):
                raise ConfigError(name, f"must be a dict, got {type(v).__name__}")
            try:
                _canonical(dict(v))
            except (TypeError, ValueError) as e:
                raise ConfigError(name, f"must be JSON-serializable with finite numbers: {e}") from None
            object.__setattr__(self, name, dict(v))
        for k in self.method_params:
            if k in _FORWARDED:
                raise ConfigError(k, f"set it as RunConfig.{k}, not inside method_params")
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "public_per_class", int(self.public_per_class))
        object.__setattr__(self, "target_epsilon", eps)
        object.__setattr__(self, "target_delta", delta)
        object.__setattr__(self, "imbalance_ratio", ir)
        # Validates method_params against the method's config, and refuses a budget no run
        # can meet (e.g. ε too small for σ) before any run is created, for every caller.
        self.make_method().preflight()

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
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

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
        "identical" (it stays in the store and can still be reopened).
        """
        method_cfg = dataclasses.asdict(self.make_method().config)
        code = _source_identity()["mixdp_core_source_sha256"]
        return _hash({"run": self.to_dict(), "method_config": method_cfg, "code": code})

    def split_hash(self) -> str:
        """Hash of everything that determines the split (shared by all methods on it)."""
        return _hash(
            {
                "dataset": self.dataset,
                "encoder": self.encoder,
                "dataset_root": self.dataset_root,
                "dataset_kwargs": self.dataset_kwargs,
                "encoder_kwargs": self.encoder_kwargs,
                "seed": self.seed,
                "public_per_class": self.public_per_class,
                "imbalance_ratio": self.imbalance_ratio,
                "public_from": self.public_from,
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
    """``on_step`` callback: buffers StepRecords, flushes them to the store, polls cancel.

    Records are flushed at most every ``flush_every_s`` seconds (and at the end), so a run
    killed mid-way loses at most that much history; the cancel flag is read at each flush.
    """

    def __init__(self, store: RunStore, run_id: str, on_record: Callable | None, flush_every_s: float = 0.5):
        self.store, self.run_id, self.on_record = store, run_id, on_record
        self.flush_every_s = flush_every_s
        self.buffer: list[dict[str, Any]] = []
        self.last_flush = 0.0
        self.cancelled = False
        self.n_records = 0

    def flush(self) -> None:
        if self.buffer:
            self.store.append_steps(self.run_id, self.buffer)
            self.buffer = []
        self.last_flush = time.monotonic()

    def __call__(self, record: Any) -> bool:
        self.buffer.append(record.to_dict())
        self.n_records += 1
        stop = False
        if self.on_record is not None:
            stop = bool(self.on_record(record))
        if time.monotonic() - self.last_flush >= self.flush_every_s:
            self.flush()
            stop = stop or self.store.is_cancel_requested(self.run_id)
        if stop:
            self.cancelled = True
        return self.cancelled


class _LiveView:
    """Observer of NoisyGD-type steps (see :mod:`mixdp_core.runs.live`): every ``every_s``
    seconds (and at the last step) adds ``minority_accuracy`` to the step record's ``extra``
    and writes the per-instance ε of the steps so far to the run's artifact
    (``live_pdp_epsilon``, ``live_step``; the final artifact replaces it)."""

    def __init__(self, store: RunStore, run_id: str, split: Any, delta: float, every_s: float = 0.5):
        self.store, self.run_id, self.split, self.delta, self.every_s = store, run_id, split, float(delta), every_s
        self.minority = np.asarray(split.minority_classes, dtype=np.int64)
        self.n_private = int(len(split.y_private))
        self.last = -math.inf

    def __call__(self, *, rec: Any, W: Any, pdp_sq: Any, problem: Any, noise_multiplier: float) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s and rec.step < rec.total_steps:
            return
        self.last = now
        try:
            X, y = getattr(problem, "X_test", None), getattr(problem, "y_test", None)
            if X is not None and y is not None and self.minority.size:
                mask = np.isin(y, self.minority)
                if mask.any():
                    pred = (X[mask] @ W).argmax(axis=1)
                    rec.extra["minority_accuracy"] = float(np.mean(pred == y[mask]))
            if noise_multiplier and noise_multiplier > 0 and self.n_private:
                from ..accounting import pdp_epsilon

                sq = np.asarray(pdp_sq[: self.n_private], dtype=np.float64)
                eps_i = np.asarray(pdp_epsilon(sq, noise_multiplier=float(noise_multiplier), delta=self.delta))
                self.store.save_artifacts(self.run_id, {"live_pdp_epsilon": eps_i,
                                                        "live_step": np.asarray(rec.step)})
        except Exception:  # a live view must never break the run
            pass


def _load_features(config: RunConfig, *, cache_dir: Any, progress: Callable | None):
    from ..features.cache import get_features

    kw = dict(config.dataset_kwargs)
    ekw = dict(config.encoder_kwargs) or None
    feats = get_features(config.dataset, config.encoder, root=config.dataset_root, cache_dir=cache_dir,
                         progress=progress, encoder_kwargs=ekw, **kw)
    pub = None
    if config.public_from is not None:
        pub = get_features(config.public_from, config.encoder, root=None, cache_dir=cache_dir,
                           progress=progress, encoder_kwargs=ekw)
    return feats, pub


def sibling_boost(store: RunStore, split_hash: str, err_dp: float) -> float | None:
    """Performance Boost of an error ``err_dp`` against completed paragon and only-public runs
    of the same split in ``store`` (newest of each), or ``None`` if either is missing."""
    from ..evaluation.metrics import performance_boost

    refs = {}
    for m in ("paragon", "only_public"):
        runs = store.list_runs(status=COMPLETED, split_hash=split_hash, method=m, limit=1)
        if not runs or runs[0].metrics.get("test_error") is None:
            return None
        refs[m] = runs[0].metrics["test_error"]
    pb = performance_boost(err_dp, err_public=refs["only_public"], err_paragon=refs["paragon"])
    return pb if math.isfinite(pb) else None


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
    flush_every_s: float = 0.5,
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
        flush_every_s: how often buffered step records are written and the cancel flag read.

    Returns:
        The run id. Its status is ``completed`` or ``cancelled``.

    Raises:
        Whatever the pipeline raised (after marking the run ``failed``).
    """
    from ..data.splits import make_split
    from ..evaluation.report import evaluate, json_safe

    chash = config.config_hash()
    if reuse:
        done = store.find_completed(chash)
        if done is not None:
            return done.run_id
    run_id = store.create_run(config.to_dict(), config_hash=chash, split_hash=config.split_hash(),
                              versions=versions(), label=label)
    writer = _StepWriter(store, run_id, on_record, flush_every_s)
    t0 = time.perf_counter()
    try:
        with _Heartbeat(store, run_id):
            if features is None:
                features, public_features = _load_features(config, cache_dir=cache_dir, progress=progress)
            split = make_split(features, config.split_spec(), public_features=public_features)
            model = config.make_method()
            t_fit = time.perf_counter()
            from .live import observing

            with observing(_LiveView(store, run_id, split, config.target_delta, flush_every_s)):
                model.fit(split, on_step=writer)
            fit_seconds = time.perf_counter() - t_fit
            writer.flush()
            cancelled = writer.cancelled
            ev = evaluate(model, split, delta=config.target_delta, seed=config.seed)
            metrics = dict(ev.metrics)
            metrics.update(
                run_id=run_id, method=config.method, dataset=config.dataset, encoder=config.encoder,
                seed=config.seed, target_epsilon=config.target_epsilon,
                target_delta=config.target_delta, public_per_class=config.public_per_class,
                imbalance_ratio=config.imbalance_ratio, fit_seconds=fit_seconds,
                wall_seconds=time.perf_counter() - t0, n_step_records=writer.n_records,
                split=json_safe(split.summary()), features_meta=json_safe(dict(features.meta)),
                method_config=json_safe(dataclasses.asdict(model.config)),
            )
            if metrics.get("delta") is None:
                metrics["delta"] = config.target_delta
            metrics["performance_boost"] = (
                sibling_boost(store, config.split_hash(), metrics["test_error"])
                if config.method not in ("paragon", "only_public") else None
            )
            store.save_artifacts(run_id, ev.arrays)
            store.finish(run_id, CANCELLED if cancelled else COMPLETED, metrics=json_safe(metrics))
    except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt must mark the run failed too
        try:
            writer.flush()
        except Exception:
            pass
        msg = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        try:
            store.finish(run_id, FAILED, error=msg,
                         metrics={"wall_seconds": time.perf_counter() - t0, "n_step_records": writer.n_records})
        except Exception:
            pass
        raise
    return run_id
