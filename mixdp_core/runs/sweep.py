"""One sweep engine: a grid of runs, executed locally or on Ray, recorded in one run store.

Everything that trains many models goes through here: ``mixdp sweep``, the Compare page,
``mixdp reproduce`` (the papers' figures) and the audits.

* :class:`SweepSpec` — a grid (methods × ε × seeds × public shots × imbalance ratios ×
  private caps × encoders), from CLI flags or a TOML file (:meth:`SweepSpec.from_toml`);
  :meth:`SweepSpec.expand` gives its :class:`SweepPoint` s (label + ``RunConfig``).
  Non-private methods ignore ε: they run once per grid cell at ``nonprivate_epsilon``.
* :func:`run_sweep` — runs a list of :class:`~mixdp_core.runs.runner.RunConfig` s:
  runs already ``completed`` in the store with the same config hash are reused, never
  recomputed (so a killed sweep, started again, resumes where it stopped); the others are
  trained by an executor and every result is written to the store **by the driver only**
  (workers never open the SQLite file), tagged with the sweep id. Feature matrices are
  loaded once by the driver and shipped once per executor (Ray: one ``ray.put``).
* :func:`map_trainings` — the lower-level API for training functions that are not
  ``RunConfig`` s (audits: reference models, canaries): ``fn(item, shared)`` on every item,
  results in item order, the big ``shared`` arrays sent once.
* Executors (:data:`EXECUTORS`): ``local`` — a process pool (``workers`` processes, default
  the CPUs this process may use; one worker runs inline) that restarts itself and retries
  the runs in flight when a worker dies; on Linux each worker leads its own session, so
  that the scheduler's autogroups give it its own CPU share (:func:`_own_session`); ``ray`` — each run is a Ray task (``max_retries``
  on worker loss), on a running cluster (``address="auto"`` or ``"host:port"``) or a local
  Ray started for the sweep (``address=None``). Ray is the scheduler; there is none here.

Example::

    from mixdp_core.runs.sweep import SweepSpec, run_sweep
    spec = SweepSpec(dataset="digits", encoders=("pixels",), methods=("adamix", "ngd"),
                     epsilons=(0.5, 1, 3), seeds=(0, 1))
    outcome = run_sweep(spec.configs(), store=RunStore(), backend="local", workers=2, spec=spec)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from ..errors import ConfigError, MixDPError
from ..registry import Registry
from .store import COMPLETED, FAILED, RunStore

# ---------------------------------------------------------------------------- grid spec


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
            return cls(str(obj.get("label") or obj["method"]), str(obj["method"]), dict(obj.get("params") or {}))
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
    from .._io import env_limit

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
        seeds: split + noise seeds.
        public_per_class: public shots per class.
        imbalance_ratios: long-tail ratios of the private part (1 = balanced).
        private_per_class: caps of private samples per class (``None`` = all).
        delta: target δ.
        params: method config fields given to every method that has them (e.g.
            ``{"noise_multiplier": 20}``); a variant's own params win.
        nonprivate_epsilon: the placeholder ε stored with non-private methods (they ignore
            it; one run per grid cell, reused across sweeps).
        dataset_root, dataset_kwargs, encoder_kwargs, public_from: as in ``RunConfig``.
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

    def __post_init__(self) -> None:
        from ..config import parse_number

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
            object.__setattr__(self, name, tuple(
                None if (v is None and name == "private_per_class") else parse_number(name, v, kind, allowed)
                for v in vals))
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
        n = self.n_points()
        if n > max_grid_points():
            raise ConfigError("grid", f"{n:,} runs; a sweep may hold at most {max_grid_points():,} "
                                      f"(MIXDP_MAX_GRID_POINTS; split it into several sweeps)")

    def n_points(self) -> int:
        """Runs of the grid, counted from the axes before any config is built."""
        from ..errors import UnknownNameError
        from ..methods import METHODS

        per_cell = 0
        for v in self.methods:
            try:
                private = bool(getattr(METHODS.get(v.method), "private", True))
            except UnknownNameError as e:
                raise ConfigError("methods", str(e)) from None
            per_cell += len(self.epsilons) if private else 1
        return (per_cell * len(self.encoders) * len(self.seeds) * len(self.public_per_class)
                * len(self.imbalance_ratios) * len(self.private_per_class))

    # -------------------------------------------------------------- I/O
    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["methods"] = [{"label": v.label, "method": v.method, "params": dict(v.params)} for v in self.methods]
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
        given: then invalid points (e.g. a target ε that the method's σ cannot reach) are
        reported to it and left out."""
        from ..errors import UnknownNameError
        from ..methods import METHODS
        from .runner import RunConfig

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
                                    raise ConfigError("methods", str(e)) from None
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
                                    except ConfigError as e:
                                        msg = e.message
                                        err = ConfigError(e.field, f"{v.label}: {msg}")
                                        if on_invalid is None:
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


# ---------------------------------------------------------------------------- executors


class TaskError(MixDPError):
    """A task of :func:`map_trainings` raised, or its worker was lost more than
    ``max_retries`` times."""


def default_workers() -> int:
    """CPUs this process may use (``sched_getaffinity``), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


_SHARED: Any = None  # the shared object of the local worker processes
_STARTED: Any = None  # shared int array: pid of the worker that started task i


def _own_session() -> None:
    """Put this worker in its own session, tied to its parent's life (Linux; no-op elsewhere).

    With ``kernel.sched_autogroup_enabled = 1`` the CFS scheduler shares the CPU between
    *sessions* first: all workers of one pool in the driver's session get one share between
    them, so two workers run no faster than one when other sessions are busy. A worker in its
    own session gets its own share, like Ray's workers (which live in the raylet's session).
    Leaving the driver's session also leaves its process group, so the terminal's Ctrl-C no
    longer reaches the workers: the driver terminates them (``imap``'s ``finally``), and
    ``PR_SET_PDEATHSIG`` kills a worker whose driver died without cleaning up.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        os.setsid()
    except OSError:  # already a session leader
        pass
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the driver died before prctl took effect
            os._exit(1)
    except (OSError, AttributeError):
        pass


def _exit_with(driver_pid: int, period_s: float = 0.5) -> None:
    """End this worker within ``period_s`` of the driver's death, however it died.

    ``PR_SET_PDEATHSIG`` follows the *parent*, which for a forkserver pool is the forkserver,
    not the driver: after ``kill -9`` of a driver its workers (and, through them, the
    forkserver and resource tracker) lived on for minutes. A daemon thread polls the driver's
    pid instead; ``os._exit`` skips the pool's cleanup, which has no driver to report to."""
    import threading

    def watch() -> None:
        while True:
            time.sleep(period_s)
            try:
                os.kill(driver_pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:  # pid reused by another user's process: the driver is gone
                os._exit(1)

    threading.Thread(target=watch, name="mixdp-driver-watch", daemon=True).start()


def _local_init(shared: Any, started: Any, own_session: bool = False, driver_pid: int | None = None) -> None:
    global _SHARED, _STARTED
    _SHARED, _STARTED = shared, started
    sys.stdout = sys.stderr  # stdout of the driver is for results (--json)
    if own_session:
        _own_session()
    if driver_pid is not None:
        _exit_with(int(driver_pid))


def _local_call(fn: Callable, index: int, item: Any, with_shared: bool) -> Any:
    _STARTED[index] = os.getpid()
    return fn(item, _SHARED) if with_shared else fn(item)


class LocalExecutor:
    """Process pool on this machine. ``workers=1`` runs inline in the calling process.

    A worker that dies breaks the pool; the pool is then rebuilt and every task that was in
    flight is submitted again, at most ``max_retries`` times each.

    Args:
        workers: processes (default: the CPUs this process may use; 1 = inline).
        max_retries: re-runs of a task whose worker died.
        own_session: each worker in its own session (Linux, :func:`_own_session`), so that
            it gets its own CPU share under ``sched_autogroup``; default ``$MIXDP_WORKER_SESSION``
            (``0`` turns it off), else on.
    """

    name = "local"

    def __init__(self, *, workers: int | None = None, max_retries: int = 2, own_session: bool | None = None,
                 **_: Any):
        self.workers = int(workers) if workers else default_workers()
        if self.workers < 1:
            raise ConfigError("workers", f"must be an integer >= 1, got {workers!r}")
        self.max_retries = int(max_retries)
        if own_session is None:
            own_session = os.environ.get("MIXDP_WORKER_SESSION", "1").strip() not in ("0", "false", "no", "")
        self.own_session = bool(own_session)
        self._pool: ProcessPoolExecutor | None = None
        self._stop = False

    def _new_pool(self, n: int, shared: Any, n_items: int) -> ProcessPoolExecutor:
        import multiprocessing as mp

        import threading

        # fork is instant and inherits the imports, but is unsafe in a multi-threaded process
        # (e.g. the Streamlit server): there, a forkserver (clean process, preloaded imports).
        default = "spawn"
        if sys.platform.startswith("linux"):
            default = "fork" if threading.active_count() == 1 else "forkserver"
        method = os.environ.get("MIXDP_MP_START") or default
        ctx = mp.get_context(method)
        if method == "forkserver":
            ctx.set_forkserver_preload(["mixdp_core.runs.runner", "mixdp_core.runs.sweep", "mixdp_core.methods"])
        self._started = ctx.Array("i", n_items, lock=False)
        return ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_local_init,
                                   initargs=(shared, self._started, self.own_session, os.getpid()))

    def imap(self, fn: Callable, items: Sequence[Any], shared: Any = None) -> Iterator[tuple[int, Any]]:
        """Yield ``(index, result)`` as tasks finish; a failed task yields a :class:`TaskError`."""
        with_shared = shared is not None
        if self.workers == 1 or len(items) <= 1:
            for i, item in enumerate(items):
                if self._stop:
                    return
                try:
                    yield i, (fn(item, shared) if with_shared else fn(item))
                except Exception as e:  # noqa: BLE001
                    yield i, TaskError(f"{type(e).__name__}: {e}")
            return
        todo = list(range(len(items)))
        attempts = [0] * len(items)
        while todo and not self._stop:
            self._pool = pool = self._new_pool(min(self.workers, len(todo)), shared, len(items))
            futs = {pool.submit(_local_call, fn, i, items[i], with_shared): i for i in todo}
            todo = []
            procs: dict[int, Any] = {}
            lost: list[int] = []
            try:
                while futs and not self._stop:
                    procs.update(getattr(pool, "_processes", None) or {})
                    done, _ = wait(list(futs), timeout=0.2, return_when=FIRST_COMPLETED)
                    for f in done:
                        i = futs.pop(f)
                        try:
                            res = f.result()
                        except BrokenProcessPool:  # a worker died: rebuild the pool, run again
                            lost.append(i)
                            continue
                        except Exception as e:  # noqa: BLE001
                            res = TaskError(f"{type(e).__name__}: {e}")
                        yield i, res
                if lost:
                    # Charge the runs whose worker died on its own (not the pool's SIGTERM of
                    # the survivors); if none can be told apart, every run that had started.
                    dead = {pid for pid, p in procs.items() if p.exitcode not in (None, -15)}
                    culprits = [i for i in lost if self._started[i] in dead] or \
                        [i for i in lost if self._started[i] != 0]
                    for i in lost:
                        attempts[i] += i in culprits
                        if attempts[i] > self.max_retries:
                            yield i, TaskError(f"worker process lost {attempts[i]} times")
                        else:
                            todo.append(i)
            except GeneratorExit:  # the consumer stopped (Ctrl-C, error): do not wait for runs in flight
                self._stop = True
                raise
            finally:
                if self._stop:  # cancelled / interrupted: do not wait for runs in flight
                    for p in list((getattr(pool, "_processes", None) or {}).values()):
                        p.terminate()
                pool.shutdown(wait=not self._stop, cancel_futures=True)
                self._pool = None
            todo.sort()

    def cancel(self) -> None:
        """Start no further task; tasks in flight finish (their results are dropped)."""
        self._stop = True

    def close(self) -> None:
        self._stop = True


def _ray_call(fn: Callable, item: Any, shared: Any, with_shared: bool) -> Any:
    return fn(item, shared) if with_shared else fn(item)


class RayExecutor:
    """Each task is a Ray task (``num_cpus`` each, ``max_retries`` on worker loss).

    Args:
        address: ``"auto"`` (the running cluster, also ``$RAY_ADDRESS``), ``"host:port"``,
            ``"ray://host:10001"`` (Ray Client), or ``None`` (a local Ray for this process).
        ship_code: send the ``mixdp_core`` package to the workers (``runtime_env``
            ``py_modules``), for clusters whose nodes do not have it installed.
    """

    name = "ray"

    def __init__(self, *, address: str | None = None, max_retries: int = 2, num_cpus: float = 1,
                 ship_code: bool = False, workers: int | None = None, **_: Any):
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError("backend", "ray is not installed; pip install -r requirements.txt "
                                         "(or choose --backend local)") from None
        self.address, self.max_retries, self.num_cpus = address, int(max_retries), float(num_cpus)
        self.ship_code = bool(ship_code)
        self.workers = int(workers) if workers else None
        self._owned = False
        self._refs: dict[Any, int] = {}

    def _connect(self):
        import ray

        if not ray.is_initialized():
            kw: dict[str, Any] = dict(address=self.address, log_to_driver=False, ignore_reinit_error=True)
            if self.address is None:
                kw.update(include_dashboard=False, num_cpus=self.workers or default_workers())
            if self.ship_code:
                kw["runtime_env"] = {"py_modules": [str(Path(__file__).resolve().parents[1])]}
            try:
                ray.init(**kw)
            except ConnectionError as e:
                raise ConfigError("ray_address", f"cannot connect to a Ray cluster at {self.address!r}: {e}") from None
            self._owned = True
        return ray

    def imap(self, fn: Callable, items: Sequence[Any], shared: Any = None) -> Iterator[tuple[int, Any]]:
        ray = self._connect()
        from ray.exceptions import RayError

        shared_ref = ray.put(shared) if shared is not None else None  # once, whatever the run count
        remote = ray.remote(num_cpus=self.num_cpus, max_retries=self.max_retries)(_ray_call)
        fn_ref = ray.put(fn)
        self._refs = {remote.remote(fn_ref, item, shared_ref, shared is not None): i for i, item in enumerate(items)}
        while self._refs:
            done, _ = ray.wait(list(self._refs), num_returns=1, timeout=1.0)
            for r in done:
                i = self._refs.pop(r)
                try:
                    yield i, ray.get(r)
                except RayError as e:
                    yield i, TaskError(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    def cancel(self) -> None:
        import ray

        for r in list(self._refs):
            try:
                ray.cancel(r)
            except Exception:  # noqa: BLE001 - already finished
                pass
        self._refs = {}

    def close(self) -> None:
        if self._owned:
            import ray

            ray.shutdown()
            self._owned = False


#: Sweep executors by ``--backend`` name.
EXECUTORS: Registry[type] = Registry("backend")
EXECUTORS.add("local", LocalExecutor)
EXECUTORS.add("ray", RayExecutor)


def make_executor(backend: str = "local", **kw: Any):
    """An executor of :data:`EXECUTORS` (``workers``, ``address``, ``max_retries``...)."""
    from ..errors import UnknownNameError

    try:
        cls = EXECUTORS.get(backend)
    except UnknownNameError as e:
        raise ConfigError("backend", str(e)) from None
    return cls(**kw)


def map_trainings(fn: Callable, items: Sequence[Any], *, backend: str = "local", workers: int | None = None,
                  address: str | None = None, shared: Any = None, max_retries: int = 2,
                  on_result: Callable[[int, Any], Any] | None = None, raise_errors: bool = True) -> list[Any]:
    """Run ``fn`` on every item with the sweep executors; results in item order.

    For training functions that are not ``RunConfig`` s (audits: reference models, canary
    trainings on feature matrices). ``fn`` must be a module-level function (it is pickled);
    it is called as ``fn(item, shared)`` when ``shared`` is given, else ``fn(item)``.
    ``shared`` (e.g. a dict of feature matrices) goes to each local worker once, or into
    Ray's object store once (``ray.put``), not once per item. Results must be picklable.

    Args:
        backend: ``"local"`` (process pool) or ``"ray"``.
        workers: local processes (default: the CPUs available; 1 = inline).
        address: Ray address (``"auto"``, ``"host:port"``; ``None`` = a local Ray).
        max_retries: re-runs of a task whose worker died.
        on_result: ``on_result(index, result)`` as each task finishes (any order).
        raise_errors: raise the first :class:`TaskError` at the end (else it is the result).
    """
    ex = make_executor(backend, workers=workers, address=address, max_retries=max_retries)
    out: list[Any] = [None] * len(items)
    try:
        for i, res in ex.imap(fn, list(items), shared):
            out[i] = res
            if on_result is not None:
                on_result(i, res)
    finally:
        ex.close()
    if raise_errors:
        for r in out:
            if isinstance(r, TaskError):
                raise r
    return out


# ---------------------------------------------------------------------------- sweeps


@dataclass
class SweepResult:
    """What :func:`run_sweep` reports for one config (``on_result`` and the outcome).

    ``reused``: an earlier completed run was found (nothing trained). ``metrics``: the
    stored metrics (``test_error``, ``epsilon`` = ε from the accounting module for the run
    as executed, ``None`` for non-private methods...)."""

    index: int
    config: Any
    run_id: str | None
    status: str
    reused: bool
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        """One JSON-ready line: ``epsilon`` is the grid's target ε (``None`` for
        non-private methods, which ignore it), ``epsilon_spent`` the accounted ε."""
        from ..methods import METHODS

        c, m = self.config, self.metrics
        private = bool(getattr(METHODS.get(c.method), "private", True))
        return {
            "run_id": self.run_id, "status": self.status, "method": c.method,
            "dataset": c.dataset, "encoder": c.encoder, "seed": c.seed,
            "epsilon": c.target_epsilon if private else None, "delta": c.target_delta,
            "epsilon_spent": m.get("epsilon"), "public_per_class": c.public_per_class,
            "imbalance_ratio": c.imbalance_ratio, "private_per_class": c.private_per_class,
            "test_error": m.get("test_error"), "minority_accuracy": m.get("minority_accuracy"),
            "mia_auc": m.get("mia_auc"), "performance_boost": m.get("performance_boost"),
            "wall_seconds": m.get("wall_seconds"), "reused": self.reused, "error": self.error,
        }


@dataclass
class SweepOutcome:
    """Result of :func:`run_sweep`: ``results[i]`` belongs to ``configs[i]``."""

    sweep_id: str
    results: list[SweepResult]
    status: str
    wall_seconds: float

    @property
    def n_reused(self) -> int:
        return sum(r.reused for r in self.results)

    @property
    def n_failed(self) -> int:
        return sum(r.status != COMPLETED for r in self.results)


def sweep_id_for(hashes: Sequence[str]) -> str:
    """Deterministic id of a sweep (the same grid on the same code gets the same id, so
    re-running a killed sweep continues it)."""
    return "sw-" + hashlib.sha256("\n".join(sorted(set(hashes))).encode()).hexdigest()[:12]


def _feature_key(c: Any) -> str:
    return json.dumps([c.dataset, c.encoder, c.dataset_root, c.dataset_kwargs, c.encoder_kwargs, c.public_from],
                      sort_keys=True, default=str)


def _train_item(item: tuple[dict, str, str | None], shared: Mapping[str, Any]):
    """Worker side of a sweep: train one config on the shipped features, no store."""
    from .runner import RunConfig, train

    cfg_dict, key, cache_dir = item
    feats, pub = shared.get(key, (None, None))
    return train(RunConfig.from_dict(cfg_dict), features=feats, public_features=pub, cache_dir=cache_dir)


class _SweepLog:
    """The ``sweeps`` / ``sweep_runs`` rows of one sweep (driver side)."""

    def __init__(self, store: RunStore, sweep_id: str):
        self.store, self.sweep_id = store, sweep_id

    def start(self, spec: Mapping[str, Any], hashes: Sequence[str], backend: str) -> None:
        now = time.time()
        with self.store._connect() as con, self.store._write(con):
            con.execute("INSERT OR IGNORE INTO sweeps(sweep_id, spec_json, n_runs, status, backend, created_at, "
                        "updated_at) VALUES (?,?,?,?,?,?,?)",
                        (self.sweep_id, json.dumps(spec, sort_keys=True, default=str), len(hashes), "running",
                         backend, now, now))
            con.execute("UPDATE sweeps SET status='running', backend=?, updated_at=? WHERE sweep_id=?",
                        (backend, now, self.sweep_id))
            con.executemany("INSERT OR IGNORE INTO sweep_runs(sweep_id, idx, config_hash) VALUES (?,?,?)",
                            [(self.sweep_id, i, h) for i, h in enumerate(hashes)])

    def link(self, idxs: Iterable[int], run_id: str, reused: bool) -> None:
        with self.store._connect() as con, self.store._write(con):
            con.executemany("UPDATE sweep_runs SET run_id=?, reused=? WHERE sweep_id=? AND idx=?",
                            [(run_id, int(reused), self.sweep_id, i) for i in idxs])

    def finish(self, status: str) -> None:
        self.store._exec_write("UPDATE sweeps SET status=?, updated_at=? WHERE sweep_id=?",
                               (status, time.time(), self.sweep_id))


def get_sweep(store: RunStore, sweep_id: str) -> dict[str, Any]:
    """The stored sweep: ``{"sweep_id", "spec", "n_runs", "status", "backend", "runs": [...]}``
    where ``runs[i]`` is ``{"config_hash", "run_id", "reused"}`` (``run_id`` ``None`` until done)."""
    with store._connect() as con:
        row = con.execute("SELECT spec_json, n_runs, status, backend, created_at, updated_at FROM sweeps "
                          "WHERE sweep_id=?", (sweep_id,)).fetchone()
        if row is None:
            raise ConfigError("resume", f"no sweep {sweep_id!r} in {store.db_path}")
        runs = con.execute("SELECT config_hash, run_id, reused FROM sweep_runs WHERE sweep_id=? ORDER BY idx",
                           (sweep_id,)).fetchall()
    return {"sweep_id": sweep_id, "spec": json.loads(row[0]), "n_runs": row[1], "status": row[2],
            "backend": row[3], "created_at": row[4], "updated_at": row[5],
            "runs": [{"config_hash": h, "run_id": r, "reused": bool(u)} for h, r, u in runs]}


def list_sweeps(store: RunStore) -> list[dict[str, Any]]:
    """Every stored sweep (newest first), without its run list."""
    with store._connect() as con:
        rows = con.execute("SELECT sweep_id, n_runs, status, backend, created_at FROM sweeps "
                           "ORDER BY created_at DESC").fetchall()
    return [dict(zip(("sweep_id", "n_runs", "status", "backend", "created_at"), r)) for r in rows]


def run_sweep(
    configs: Sequence[Any],
    *,
    store: RunStore,
    backend: str = "local",
    workers: int | None = None,
    address: str | None = None,
    max_retries: int = 2,
    ship_code: bool = False,
    spec: SweepSpec | Mapping[str, Any] | None = None,
    sweep_id: str | None = None,
    label: str | None = None,
    reuse: bool = True,
    cache_dir: Any = None,
    on_result: Callable[[SweepResult], Any] | None = None,
    on_start: Callable[[int, int], Any] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> SweepOutcome:
    """Run ``configs`` (``RunConfig`` s) and record every run in ``store``.

    Completed runs with the same config hash are reused (never recomputed, also within the
    sweep); the rest are trained by the ``backend`` executor and written to the store by
    this process only, with ``sweep_id`` and ``label``. Private runs whose reference runs
    (paragon, only-public of the same split) are still pending in this sweep are written
    after them, so their Performance Boost is computed.

    Args:
        configs: the runs.
        store: the run store (only this process writes it).
        backend: ``"local"`` or ``"ray"`` (:data:`EXECUTORS`).
        workers: local worker processes (default: CPUs available; 1 = inline).
        address: Ray address (``"auto"``, ``"host:port"``; ``None`` starts a local Ray).
        max_retries: re-runs of a run whose worker process died.
        ship_code: Ray only: send ``mixdp_core`` to the workers (``py_modules``).
        spec: the grid, stored with the sweep (so ``--resume`` can expand it again).
        sweep_id: default :func:`sweep_id_for` the config hashes (resumable).
        label: store label of the new runs.
        reuse: reuse completed identical runs (default).
        cache_dir: feature cache folder.
        on_result: called with each :class:`SweepResult` as it lands (reused ones first).
        on_start: ``on_start(n_total, n_reused)`` before training starts.
        progress: feature extraction progress ``(split, done, total)``.
        should_stop: polled between results; ``True`` cancels the rest (status ``cancelled``).

    Returns:
        The :class:`SweepOutcome`.
    """
    from .runner import _load_features, record_trained

    t0 = time.perf_counter()
    configs = list(configs)
    hashes = [c.config_hash() for c in configs]
    sweep_id = sweep_id or sweep_id_for(hashes)
    spec_d = spec.to_dict() if isinstance(spec, SweepSpec) else dict(spec or {"configs": [c.to_dict() for c in configs]})
    log = _SweepLog(store, sweep_id)
    executor = make_executor(backend, workers=workers, address=address, max_retries=max_retries, ship_code=ship_code)
    log.start(spec_d, hashes, backend)
    results: list[SweepResult | None] = [None] * len(configs)

    def land(res: SweepResult, idxs: Sequence[int]) -> None:
        for n, i in enumerate(idxs):  # duplicates of a config reuse its run
            r = dataclasses.replace(res, index=i, config=configs[i], reused=res.reused or (n > 0 and res.run_id is not None))
            results[i] = r
            if on_result is not None:
                on_result(r)

    # 1. reuse
    groups: dict[str, list[int]] = {}
    for i, h in enumerate(hashes):
        groups.setdefault(h, []).append(i)
    todo: list[str] = []
    found = {}
    for h, idxs in groups.items():
        rec = store.find_completed(h) if reuse else None
        if rec is not None:
            found[h] = rec
        else:
            todo.append(h)
    if on_start is not None:
        on_start(len(configs), len(configs) - sum(len(groups[h]) for h in todo))
    for h, rec in found.items():
        log.link(groups[h], rec.run_id, True)
        land(SweepResult(0, configs[groups[h][0]], rec.run_id, rec.status, True, rec.metrics), groups[h])

    # 2. features, once per (dataset, encoder, options), loaded by the driver
    shared: dict[str, Any] = {}
    items = []
    for h in todo:
        c = configs[groups[h][0]]
        key = _feature_key(c)
        if key not in shared:
            shared[key] = _load_features(c, cache_dir=cache_dir, progress=progress)
        items.append((c.to_dict(), key, None if cache_dir is None else str(cache_dir)))

    # 3. train, write as results come back (references before the private runs they boost)
    from ..methods.base import is_reference

    def is_ref(c: Any) -> bool:
        return is_reference(c.method)

    pending_refs: dict[str, int] = {}
    for h in todo:
        c = configs[groups[h][0]]
        if is_ref(c):
            pending_refs[c.split_hash()] = pending_refs.get(c.split_hash(), 0) + 1
    deferred: dict[str, list[tuple[str, Any]]] = {}
    warned: list[str] = []

    def write(h: str, trained: Any) -> None:
        c = configs[groups[h][0]]
        if isinstance(trained, TaskError):
            land(SweepResult(0, c, None, FAILED, False, {}, str(trained)), groups[h])
        else:
            if trained.config_hash != h and not warned:
                warned.append(h)
                warnings.warn(f"sweep {sweep_id}: a worker ran other mixdp_core code than this driver (config "
                              "hash differs); its runs are stored under their own hash and will not be "
                              "reused by this driver. Install the same code on every node (or ship_code=True).",
                              RuntimeWarning, stacklevel=2)
            rid = record_trained(store, trained, label=label, sweep_id=sweep_id)
            log.link(groups[h], rid, False)
            land(SweepResult(0, c, rid, trained.status, False, store.get_run(rid).metrics, trained.error), groups[h])
        if is_ref(c):
            sh = c.split_hash()
            pending_refs[sh] -= 1
            if pending_refs[sh] == 0:
                for h2, t2 in deferred.pop(sh, []):
                    write(h2, t2)

    status = COMPLETED
    stream = executor.imap(_train_item, items, shared) if items else iter(())
    try:
        for j, trained in stream:
            h = todo[j]
            c = configs[groups[h][0]]
            sh = c.split_hash()
            if not is_ref(c) and pending_refs.get(sh, 0) > 0 and not isinstance(trained, TaskError):
                deferred.setdefault(sh, []).append((h, trained))
            else:
                write(h, trained)
            if should_stop is not None and should_stop():
                status = "cancelled"
                executor.cancel()
                break
    except BaseException:
        status = "interrupted"
        raise
    finally:
        if hasattr(stream, "close"):
            stream.close()
        for sh in list(deferred):  # never lose a finished run
            for h2, t2 in deferred.pop(sh):
                try:
                    write(h2, t2)
                except Exception:  # noqa: BLE001
                    pass
        executor.close()
        if status == COMPLETED and any(r is None or r.status != COMPLETED for r in results):
            status = FAILED if any(r is not None and r.status == FAILED for r in results) else status
        try:
            log.finish(status)
        except Exception:  # noqa: BLE001
            pass
    done = [r if r is not None else SweepResult(i, configs[i], None, "cancelled", False) for i, r in enumerate(results)]
    return SweepOutcome(sweep_id, done, status, time.perf_counter() - t0)


def resume_spec(store: RunStore, sweep_id: str) -> tuple[SweepSpec | None, list[Any]]:
    """The grid of a stored sweep, to run it again (``mixdp sweep --resume ID``):
    ``(spec, configs)``; ``spec`` is ``None`` for sweeps submitted as a plain config list."""
    from .runner import RunConfig

    d = get_sweep(store, sweep_id)["spec"]
    if "configs" in d:
        return None, [RunConfig.from_dict(c) for c in d["configs"]]
    spec = SweepSpec.from_dict(d)
    return spec, spec.configs()
