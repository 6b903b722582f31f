"""Sweep executors: run a function on many items, on local processes or on Ray.

Contract:

* An executor (:data:`EXECUTORS`, made by :func:`make_executor`) has
  ``imap(fn, items, shared)``, yielding ``(index, result)`` as tasks finish (any order);
  ``cancel()`` (start no further task) and ``close()``. A task that raised, or whose worker
  was lost more than ``max_retries`` times, yields a :class:`TaskError` instead of a result;
  ``imap`` itself does not raise for a failed task.
* ``fn`` is a module-level function (it is pickled); it is called as ``fn(item, shared)``
  when ``shared`` is given, else ``fn(item)``. ``shared`` is sent once per local worker, or
  put once into Ray's object store, never once per item.
* ``local`` (:class:`LocalExecutor`): a process pool (default: the CPUs this process may
  use; ``workers=1`` runs inline) that is rebuilt, and its runs in flight submitted again,
  when a worker dies. On Linux each worker leads its own session (:func:`_own_session`) so
  the scheduler's autogroups give it its own CPU share, and ends when the driver dies.
* ``ray`` (:class:`RayExecutor`): each item is a Ray task (``max_retries`` on worker loss) on
  a running cluster (``address="auto"`` / ``"host:port"``) or a local Ray started for the
  run (``address=None``). Ray is the scheduler; there is none here.
* Executors never open the run store: :mod:`.driver` writes every result.
* :func:`map_trainings` is the blocking, ordered front end for trainings that are not
  ``RunConfig`` s (audits: reference models, canaries).
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..._io import usable_cores
from ...errors import ConfigError, MixDPError
from ...registry import Registry

class TaskError(MixDPError):
    """A task of :func:`map_trainings` raised, or its worker was lost more than
    ``max_retries`` times. ``released``: ``False`` when the task failed before any private
    release's noise generator was made (a refusal from public values: nothing to charge),
    ``True`` when it may have released, ``None`` when unknown (a lost worker, Ray)."""

    def __init__(self, message: str, released: bool | None = None) -> None:
        super().__init__(message)
        self.released = released


def _task_error(e: BaseException) -> TaskError:
    """The :class:`TaskError` of a task's exception, with what :func:`_tracked` learned."""
    return TaskError(f"{type(e).__name__}: {e}", released=getattr(e, "mixdp_released", None))


def _tracked(fn: Callable, *args: Any) -> Any:
    """``fn(*args)``, noting on an exception whether a private release's noise generator was
    made first (``mixdp_released``; :func:`mixdp_core.randomness.tracking_noise`)."""
    from ...randomness import tracking_noise

    with tracking_noise() as drawn:
        try:
            return fn(*args)
        except Exception as e:
            if not getattr(e, "mixdp_released", False):
                try:
                    e.mixdp_released = bool(drawn[0])
                except AttributeError:  # an exception type without a __dict__: unknown
                    pass
            raise


#: The most re-runs of one item whose worker died (a crash that repeats is not a lost worker).
MAX_RETRIES = 100


def max_local_workers() -> int:
    """The most local worker processes one sweep may start: 4 per CPU this process may use."""
    return 4 * default_workers()


def check_workers(workers: int | None, *, local: bool = True) -> None:
    """The one bound on a worker count (every entry point: sweep, reproduce, audit, and
    :class:`LocalExecutor`): ``None`` (the default) or an integer >= 1, and for a local process
    pool at most :func:`max_local_workers` (each worker is a process holding its own torch and
    data: beyond a few per CPU they only add memory; 100,000 asked would have tried to start
    100,000 processes).

    Raises:
        ConfigError: field ``workers``, naming the range.
    """
    if workers is None:
        return
    hi = max_local_workers()
    if local and not 1 <= workers <= hi:
        raise ConfigError("workers", f"must be an integer in [1, {hi}] (4 per CPU this process may use), "
                                     f"got {workers!r}")
    if workers < 1:
        raise ConfigError("workers", f"must be an integer >= 1, got {workers!r}")


#: Seconds a Ray ``host:port`` address has to accept a TCP connection before the sweep says it
#: cannot reach it (``ray.init`` retried a closed port for good: 534 s and counting).
RAY_CONNECT_TIMEOUT_S = 5.0


def _check_reachable(address: str | None) -> None:
    """Refuse a ``host:port`` Ray address that accepts no TCP connection within
    :data:`RAY_CONNECT_TIMEOUT_S` (``None``, ``"auto"`` and ``ray://`` addresses are Ray's to
    resolve).

    Raises:
        ConfigError: field ``ray_address``, one line.
    """
    import socket

    if not address or address == "auto" or "://" in address or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_TIMEOUT_S):
            return
    except (OSError, ValueError) as e:
        raise ConfigError("ray_address", f"cannot connect to a Ray cluster at {address!r} "
                                         f"(no answer within {RAY_CONNECT_TIMEOUT_S:g} s: {e})") from None


def check_retries(max_retries: int) -> None:
    """``max_retries`` in [0, :data:`MAX_RETRIES`] (field ``max_retries``)."""
    if not 0 <= int(max_retries) <= MAX_RETRIES:
        raise ConfigError("max_retries", f"must be an integer in [0, {MAX_RETRIES}], got {max_retries!r}")


def default_workers() -> int:
    """CPUs this process may use (:func:`mixdp_core._io.usable_cores`), at least 1."""
    return usable_cores()


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
    try:
        return _tracked(fn, item, _SHARED) if with_shared else _tracked(fn, item)
    except Exception as e:  # noqa: BLE001
        # built here: the errors' own pickling keeps their fields, not the mark _tracked set
        return _task_error(e)


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
        check_workers(self.workers)
        check_retries(max_retries)
        self.max_retries = int(max_retries)
        if own_session is None:
            own_session = os.environ.get("MIXDP_WORKER_SESSION", "1").strip() not in ("0", "false", "no", "")
        self.own_session = bool(own_session)
        self._pool: ProcessPoolExecutor | None = None
        self._stop = False
        self._started = None
        self._started_before: set[int] = set()

    def started(self) -> set[int]:
        """Indices of the items whose task has started (in any pool of this executor, or inline):
        what may have run when a stream is interrupted (charged by a figure's ledger entry)."""
        out = set(self._started_before)
        if self._started is not None:
            out.update(i for i in range(len(self._started)) if self._started[i] != 0)
        return out

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
        self._started_before = self.started()  # a rebuilt pool keeps what the earlier one started
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
                self._started_before.add(i)
                try:
                    yield i, (_tracked(fn, item, shared) if with_shared else _tracked(fn, item))
                except Exception as e:  # noqa: BLE001
                    yield i, _task_error(e)
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
                            res = _task_error(e)
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
            except BaseException:
                # the consumer stopped (GeneratorExit), or Ctrl-C / SIGTERM arrived inside wait():
                # terminate the runs in flight instead of waiting for them (13-21 s after the
                # signal, and their results were dropped anyway)
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
                kw["runtime_env"] = {"py_modules": [str(Path(__file__).resolve().parents[2])]}
            _check_reachable(self.address)
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
    from ...errors import UnknownNameError

    try:
        cls = EXECUTORS.get(backend)
    except UnknownNameError as e:
        raise ConfigError.unknown_name("backend", e) from None
    return cls(**kw)


def map_trainings(fn: Callable, items: Sequence[Any], *, backend: str = "local", workers: int | None = None,
                  address: str | None = None, shared: Any = None, max_retries: int = 2,
                  on_result: Callable[[int, Any], Any] | None = None, raise_errors: bool = True,
                  started: set | None = None) -> list[Any]:
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
        started: filled, when the call ends (also by an error or Ctrl-C), with the indices of
            the items whose task started (local executor), or with every index where that is
            not known (Ray): what may have run.
    """
    ex = make_executor(backend, workers=workers, address=address, max_retries=max_retries)
    out: list[Any] = [None] * len(items)
    try:
        for i, res in ex.imap(fn, list(items), shared):
            out[i] = res
            if on_result is not None:
                on_result(i, res)
    finally:
        if started is not None:
            started.update(ex.started() if hasattr(ex, "started") else range(len(items)))
        ex.close()
    if raise_errors:
        for r in out:
            if isinstance(r, TaskError):
                raise r
    return out
