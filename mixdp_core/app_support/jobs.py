"""Background jobs of the Streamlit app: training runs, sweeps and feature extraction.

The app never runs long work in the script thread. A single :class:`JobManager` per run
store (created once per server process from a ``st.cache_resource`` factory, see
:mod:`mixdp_core.app_support.resources`) owns a small pool of daemon worker threads (job
slots, default 2); every browser session submits jobs to it and polls them
(``st.fragment(run_every=...)``).

Training jobs (Train page, Home demo) run :func:`mixdp_core.runs.runner.execute` in a
pre-warmed worker *process* per slot (:class:`~mixdp_core.app_support.run_worker.RunProcess`,
started with the manager, i.e. with the app): the slot's thread only sends the config and
relays progress, so a run neither waits for imports nor competes with the pages' redraws for
the server's GIL, and a crashing run cannot take the server down (the slot gets a fresh
process). ``execute`` writes the run row, its step records (flushed every
:data:`APP_FLUSH_S` s, so the live charts get a point that often), metrics and artifacts to
the :class:`~mixdp_core.runs.store.RunStore`. The pages draw from the store, never from the
job object, so a closed tab loses nothing: the run keeps going and its history is in the
store when the page is reopened. The store's liveness check (pid of the writer) marks runs
``failed`` if their process dies; :meth:`JobManager.__init__` calls
:meth:`RunStore.recover_interrupted` at app start for runs a previous server left behind.

Each training run of a job is tagged with the store ``label`` ``"<kind>:<job_id>:<index>"``
so that the page can find the run id while the run is still going.

Sweep jobs (:meth:`JobManager.submit_sweep`, the Compare page) go through the sweep engine
(:func:`mixdp_core.runs.sweep.run_sweep`), the same as ``mixdp sweep``: identical completed
runs are reused, the others are trained by the configured executor (``sweep_backend`` /
``sweep_workers`` / ``ray_address``, defaults from ``$MIXDP_SWEEP_BACKEND``,
``$MIXDP_SWEEP_WORKERS``, ``$MIXDP_RAY_ADDRESS``; one inline worker when ``sync``) and each
run lands in the store as soon as it finishes (``job.run_ids`` fills in as they land).
Cancelling a sweep job starts no further run.

For tests, ``sync=True`` runs every job in the calling thread (no sleeping on real time):
``submit_*`` returns after the job has finished; ``processes=False`` (or an ``on_record``
hook, which must see every step in this process) trains in the slot threads instead.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..runs.store import RUNNING, RunStore
from ..data.paths import confine_run_paths


def app_data_folders(cache_dir: Any = None) -> tuple:
    """Folders besides the data root that app runs may read: the app's own upload folder."""
    from .forms import uploads_dir

    return (uploads_dir(cache_dir),)

QUEUED = "queued"
ACTIVE = "running"
DONE = "done"
FAILED = "failed"
CANCELLED = "cancelled"
JOB_STATES = (QUEUED, ACTIVE, DONE, FAILED, CANCELLED)
#: Seconds a step record of an app run waits before it reaches the store (and the live charts,
#: which poll every 0.2 s, :data:`~mixdp_core.app_support.resources.POLL_S`): half the poll
#: period, so that every poll finds new points; ten small SQLite transactions per second per
#: run (benchmarks/app_latency.py measures what the browser shows). The
#: run's first record is written at once. The runner's live view runs at the same period in the
#: run's worker process: minority accuracy (one prediction on the test rows, milliseconds) every
#: 0.1 s, the pDP of the steps so far at most every 0.5 s (``_LiveView.PDP_EVERY_S``).
APP_FLUSH_S = 0.1
#: Seconds in which a second launch of a config still queued or running is the same launch
#: (a double click), not a second run (:meth:`JobManager.submit_run`).
DUPLICATE_LAUNCH_S = 10.0


@dataclass
class Job:
    """One unit of background work and its live state (shared between threads).

    Attributes:
        job_id: short unique id.
        kind: ``"train"``, ``"compare"``, ``"demo"``, ``"features"`` or ``"episodes"``.
        configs: the :class:`~mixdp_core.runs.runner.RunConfig` s to execute, in order
            (empty for feature jobs).
        reuse: reuse a completed run with the same config hash instead of re-running.
        feature_request: ``{"dataset", "encoder", "encoder_kwargs", ...}`` for feature jobs; for
            episodes jobs also ``"params"`` (the ``episodes`` figure's) and ``"public_from"``.
        state: one of ``queued, running, done, failed, cancelled``.
        run_ids: run id of each config once known (``None`` before).
        reused: per config, whether the run id is an earlier completed run.
        errors: per config, the error message of a failed run (``None`` otherwise).
        progress: feature extraction progress ``{"split", "done", "total"}``.
        current: index of the config being executed (``len(configs)`` when all are done).
        error: message of the first failure (job level).
        created_at, started_at, finished_at: Unix seconds.
    """

    job_id: str
    kind: str
    configs: list[Any] = field(default_factory=list)
    reuse: bool = False
    feature_request: dict[str, Any] | None = None
    state: str = QUEUED
    run_ids: list[str | None] = field(default_factory=list)
    reused: list[bool] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    current: int = 0
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    done_event: threading.Event = field(default_factory=threading.Event, repr=False)
    cancel_event: threading.Event = field(default_factory=threading.Event, repr=False)

    def __post_init__(self) -> None:
        n = len(self.configs)
        self.run_ids = self.run_ids or [None] * n
        self.reused = self.reused or [False] * n
        self.errors = self.errors or [None] * n

    def label(self, index: int) -> str:
        """Store label of the ``index``-th run of this job."""
        return f"{self.kind}:{self.job_id}:{index}"

    @property
    def finished(self) -> bool:
        return self.state in (DONE, FAILED, CANCELLED)

    @property
    def n_done(self) -> int:
        """How many configs have been processed (run ended or reused)."""
        return min(self.current, len(self.configs))

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job has finished; returns whether it did within ``timeout``."""
        return self.done_event.wait(timeout)


def feature_key(dataset: str, encoder: str, encoder_kwargs: dict[str, Any] | None = None,
                dataset_kwargs: dict[str, Any] | None = None) -> tuple[str, ...]:
    """Hashable identity of a feature extraction (dataset spec, encoder, their kwargs): the
    data set's options are part of it (the Data page said "Features ready" for any synthetic
    dial once its defaults had loaded)."""
    import json

    return (dataset, encoder, json.dumps(dict(encoder_kwargs or {}), sort_keys=True, default=str),
            json.dumps(dict(dataset_kwargs or {}), sort_keys=True, default=str))


def public_feature_key(cfg: Any) -> tuple[str, ...] | None:
    """:func:`feature_key` of a run config's public domain (``None`` without one)."""
    from ..data.datasets import public_source

    spec, kw = public_source(cfg.dataset, cfg.dataset_kwargs, cfg.public_from, cfg.dataset_root)
    return None if spec is None else feature_key(spec, cfg.encoder, cfg.encoder_kwargs, kw)


class _Cancelled(Exception):
    """Raised from a job's progress callback once Cancel was asked (:func:`_stop_if_cancelled`):
    the episodes figure and the audit stop at their next cell or training."""


def _stop_if_cancelled(job: Job) -> None:
    if job.cancel_event.is_set():
        raise _Cancelled()


class JobManager:
    """Runs jobs on daemon worker threads and records training runs in a :class:`RunStore`.

    Args:
        root: run-store folder (default ``$MIXDP_HOME`` / the user data folder).
        max_workers: concurrent jobs (other jobs wait in a FIFO queue). Default 2.
        sync: run each job in the submitting thread (tests).
        cache_dir: feature-cache folder passed to the runner (default of the cache).
        on_record: optional ``on_record(job, step_record)`` hook called on every step of every
            run (e.g. to observe progress in tests); its return value is ignored. Implies
            ``processes=False``.
        processes: train runs in pre-warmed worker processes, one per slot (default: yes,
            unless ``sync`` or ``on_record``).

    Attributes:
        store: the :class:`RunStore`.
        run_processes: the slots' :class:`~mixdp_core.app_support.run_worker.RunProcess` es
            (empty when training in threads).
        recovered: ids of runs marked ``failed`` by :meth:`RunStore.recover_interrupted`
            when the manager was created (app start).
    """

    def __init__(self, root: str | Path | None = None, *, max_workers: int = 2, sync: bool = False,
                 cache_dir: str | Path | None = None, on_record: Callable[[Job, Any], Any] | None = None,
                 sweep_backend: str | None = None, sweep_workers: int | None = None, ray_address: str | None = None,
                 processes: bool | None = None):
        import os

        self.on_record = on_record
        self.sweep_backend = sweep_backend or os.environ.get("MIXDP_SWEEP_BACKEND") or "local"
        env_workers = os.environ.get("MIXDP_SWEEP_WORKERS")
        self.sweep_workers = 1 if sync else (sweep_workers or (int(env_workers) if env_workers else None))
        self.ray_address = ray_address or os.environ.get("MIXDP_RAY_ADDRESS") or None
        self.store = RunStore(root, recover=False)
        self.recovered: list[str] = self.store.recover_interrupted()
        self.sync = bool(sync)
        self.cache_dir = cache_dir
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._launch_lock = threading.Lock()
        self._audit_slot = threading.Lock()  # audits: one at a time, outside the worker slots
        self._recent_launches: dict[str, tuple[float, Job]] = {}
        self._queue: "queue.Queue[Job]" = queue.Queue()
        self._threads: list[threading.Thread] = []
        #: feature keys (see :func:`feature_key`) known to be in the feature cache.
        self.features_ready: set[tuple[str, str, str]] = set()
        use_processes = (not self.sync and on_record is None) if processes is None else bool(processes)
        self.run_processes: list[Any] = []
        if not self.sync:
            n = max(1, int(max_workers))
            if use_processes:
                from .run_worker import RunProcess

                self.run_processes = [RunProcess(self.store.root, cache_dir) for _ in range(n)]
            for i in range(n):
                t = threading.Thread(target=self._worker, args=(i,), name=f"mixdp-app-worker-{i}", daemon=True)
                t.start()
                self._threads.append(t)

    # ------------------------------------------------------------------ submit
    def _submit(self, job: Job) -> Job:
        with self._lock:
            self._jobs[job.job_id] = job
        if self.sync:
            self._run_job(job)
        else:
            self._queue.put(job)
        return job

    @staticmethod
    def _new_id() -> str:
        return uuid.uuid4().hex[:10]

    def submit_run(self, config: Any, *, kind: str = "train", reuse: bool = False) -> Job:
        """Queue one training run of ``config`` (a ``RunConfig``).

        A launch of the same config (same config hash) within :data:`DUPLICATE_LAUNCH_S` of
        one still queued or running returns that job instead of a second run: two clicks on
        Launch 0.3 s apart trained twice and charged the data set's ε twice. A second draw of
        the same config is launched once the first has finished.

        Raises:
            ConfigError: a path of the config lies outside the data root (every launch from
                the app goes through here or :meth:`submit_sweep`).
            BudgetError: field ``budget_cap``: the run would take its data set above its cap
                (:func:`mixdp_core.runs.ledger.check_cap`)."""
        from ..runs.ledger import check_cap

        config = confine_run_paths(config, also=app_data_folders(self.cache_dir))  # run what was checked
        return self._launch_once(config.config_hash(), Job(job_id=self._new_id(), kind=kind, configs=[config],
                                                           reuse=reuse),
                                 lambda: check_cap(self.store, config, reuse=reuse))  # refused before it is queued

    def submit_sweep(self, configs: Sequence[Any], *, kind: str = "compare", reuse: bool = True) -> Job:
        """Queue a sweep of runs through the sweep engine (in parallel on the configured
        executor); completed identical runs (same config hash) are reused when ``reuse``. The
        same grid within :data:`DUPLICATE_LAUNCH_S` of one still queued or running is that job.

        Raises:
            ConfigError: a path of a config lies outside the data root.
            BudgetError: field ``budget_cap``: the grid's new private runs would take a data
                set above its cap."""
        from ..runs.ledger import check_caps

        configs = [confine_run_paths(c, also=app_data_folders(self.cache_dir)) for c in configs]  # run what was checked
        # a double click on Run comparison queued two sweeps whose runs in flight trained twice
        return self._launch_once("sweep:" + ",".join(sorted(c.config_hash() for c in configs)),
                                 Job(job_id=self._new_id(), kind=kind, configs=list(configs), reuse=reuse),
                                 lambda: check_caps(self.store, list(configs), reuse=reuse))  # the whole grid

    def _launch_once(self, key: str, job: Job, check: Callable[[], None]) -> Job:
        """Submit ``job`` after ``check()`` (the caps), unless a launch with the same ``key`` (its
        config hashes) is still queued or running from less than :data:`DUPLICATE_LAUNCH_S` ago:
        that job is returned instead. The lookup, the check and the registration are one step
        under a lock (two sessions, two clicks)."""
        with self._launch_lock:
            now = time.time()
            earlier = self._recent_launches.get(key)
            if earlier is not None and now - earlier[0] < DUPLICATE_LAUNCH_S and earlier[1].state in (QUEUED, ACTIVE):
                return earlier[1]
            check()
            self._recent_launches = {k: v for k, v in self._recent_launches.items() if now - v[0] < DUPLICATE_LAUNCH_S}
            self._recent_launches[key] = (now, job)
        return self._submit(job)

    def submit_episodes(self, request: dict[str, Any]) -> Job:
        """Queue an N-way K-shot episodes evaluation: the ``episodes`` figure of ``mixdp
        reproduce`` on the request's data set (``{"dataset", "encoder", "dataset_kwargs",
        "encoder_kwargs", "public_from", "params"}``, from :func:`.forms.episodes_request`).
        When done, ``job.progress["result"]`` is the path of the figure's JSON (rows per method ×
        shots). Each fit protects its own support set at the request's ε; the episodes are not
        runs of the store and charge no data set (they are drawn from the data set's rows, as
        an evaluation by its owner).

        Raises:
            ConfigError: the data set's path lies outside the data root."""
        from ..data.paths import resolve_dataset_spec

        request = dict(request)
        for key in ("dataset", "public_from"):  # read what was checked
            if request.get(key):
                request[key] = resolve_dataset_spec(request[key], confine=True, field=key,
                                                    also=app_data_folders(self.cache_dir))
        return self._submit(Job(job_id=self._new_id(), kind="episodes", feature_request=request))

    def submit_audit(self, run_id: str, *, attack: str, reference_models: int = 8, trials: int | None = None,
                     canaries: int = 1000) -> Job:
        """Queue a privacy audit of the stored run ``run_id`` (:func:`.audit.run_stored_audit`:
        it retrains the run's method on its split, so it reads the private rows, and is the
        owner's diagnostic, charged to no budget). In a job, not the page: an audit of hundreds
        of trainings ran in the page's session, and leaving the page stopped it with nothing
        stored. ``job.progress``: ``done`` / ``total`` trainings; when done, ``result`` is the
        stored audit's id. Cancel stops it at its next training (nothing is stored).

        Audits run on threads of their own, one at a time (the next waits for it), never in the
        worker slots: two long audits there queued every Train launch of the app behind them. The
        same audit of the same run asked again while one is queued or running is that job.

        Raises:
            ConfigError: ``run_id`` names no finished run of the store."""
        from ..errors import ConfigError
        from ..runs import store as run_store

        try:
            rec = self.store.get_run(run_id)
        except run_store.RunNotFoundError:
            rec = None
        if rec is None or rec.status not in (run_store.COMPLETED, run_store.CANCELLED):
            raise ConfigError("run_id", f"no finished run {run_id!r} in this store to audit")
        req = {"run_id": run_id, "attack": str(attack), "reference_models": int(reference_models),
               "trials": None if trials is None else int(trials), "canaries": int(canaries)}
        with self._launch_lock:  # a second click: the audit already asked for
            same = next((j for j in self.jobs() if j.kind == "audit" and not j.finished and j.feature_request == req),
                        None)
            if same is not None:
                return same
            job = Job(job_id=self._new_id(), kind="audit", feature_request=req)
            with self._lock:
                self._jobs[job.job_id] = job
        if self.sync:
            self._run_job(job)
        else:
            def run() -> None:
                # waiting for the running audit: a Cancel meanwhile ends this one at once (it
                # waited for the other's last training before)
                while not self._audit_slot.acquire(timeout=0.2):
                    if job.cancel_event.is_set():
                        self._run_job(job)  # marks it cancelled, nothing run
                        return
                try:
                    self._run_job(job)
                finally:
                    self._audit_slot.release()

            threading.Thread(target=run, name=f"mixdp-app-audit-{job.job_id}", daemon=True).start()
        return job

    def find_audit(self, run_id: str) -> Job | None:
        """The newest audit job of this server for ``run_id``: the running one first, then one
        waiting for its turn, then the newest finished: a reload, a second browser or a return
        to the page re-attaches to its progress (a waiting audit had hidden the running one)."""
        same = [j for j in self.jobs() if j.kind == "audit" and (j.feature_request or {}).get("run_id") == run_id]
        return next((j for j in same if j.state == ACTIVE),
                    next((j for j in same if not j.finished), same[0] if same else None))

    def submit_features(self, dataset: str, encoder: str, *, root: str | None = None,
                        encoder_kwargs: dict[str, Any] | None = None,
                        dataset_kwargs: dict[str, Any] | None = None) -> Job:
        """Queue a feature extraction (fills the feature cache; progress in ``job.progress``).

        Raises:
            ConfigError: the dataset's path or ``root`` lies outside the data root."""
        from ..data.paths import resolve_under_any, resolve_dataset_spec

        dataset = resolve_dataset_spec(dataset, confine=True, also=app_data_folders(self.cache_dir))
        if root:  # read what was checked
            root = str(resolve_under_any(root, app_data_folders(self.cache_dir), "root"))
        req = {"dataset": dataset, "encoder": encoder, "root": root,
               "encoder_kwargs": dict(encoder_kwargs or {}), "dataset_kwargs": dict(dataset_kwargs or {})}
        return self._submit(Job(job_id=self._new_id(), kind="features", feature_request=req))

    # ------------------------------------------------------------------ query / control
    def get(self, job_id: str | None) -> Job | None:
        """The job with this id (``None`` if unknown, e.g. after a server restart)."""
        if job_id is None:
            return None
        with self._lock:
            return self._jobs.get(job_id)

    def jobs(self) -> list[Job]:
        """All jobs of this server process, newest first."""
        with self._lock:
            return sorted(self._jobs.values(), key=lambda j: j.created_at, reverse=True)

    def find_sweep(self, config_hashes: Sequence[str], *, kind: str = "compare") -> Job | None:
        """The newest job of ``kind`` whose configs have exactly ``config_hashes``, in order:
        a comparison launched from an earlier session of this server (a reload, a second
        browser, a reconnected socket) for the same selection, so that its page re-attaches to
        the job's progress instead of showing only what is already stored."""
        want = list(config_hashes)
        for j in self.jobs():
            if j.kind == kind and len(j.configs) == len(want) and [c.config_hash() for c in j.configs] == want:
                return j
        return None

    def run_id(self, job: Job, index: int = 0) -> str | None:
        """Run id of the job's ``index``-th config, looked up by label while it runs."""
        rid = job.run_ids[index] if index < len(job.run_ids) else None
        if rid is None and job.kind != "features":
            runs = self.store.list_runs(label=job.label(index), limit=1)
            if runs:
                rid = runs[0].run_id
        return rid

    def wait_run_id(self, job: Job, timeout: float = 3.0) -> str | None:
        """The run id of a just-submitted job, waiting up to ``timeout`` s for its worker to
        create the run row (the first thing it does), so a page can put it in the URL."""
        deadline = time.monotonic() + timeout
        rid = self.run_id(job)
        while rid is None and not job.finished and time.monotonic() < deadline:
            time.sleep(0.05)
            rid = self.run_id(job)
        return rid

    def wait_first_step(self, run_id: str | None, timeout: float = 1.5) -> bool:
        """Wait up to ``timeout`` s until the run has a step record in the store (or has
        ended), so that the page's first draw after Launch already has a chart point instead
        of waiting for the next live poll. Returns whether it has one."""
        if run_id is None:
            return False
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.store.steps(run_id) or self.store.get_run(run_id).status != RUNNING:
                    return bool(self.store.steps(run_id))
            except Exception:  # run deleted meanwhile
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def current_run_id(self, job: Job) -> str | None:
        """Run id of the config being executed now (or the last one)."""
        if not job.configs:
            return None
        return self.run_id(job, min(job.current, len(job.configs) - 1))

    def cancel(self, job_id: str) -> bool:
        """Request cancellation: a queued job never starts, a running one stops at its next
        step (the run is stored as ``cancelled`` with its history). Returns whether the job
        was still unfinished."""
        job = self.get(job_id)
        if job is None or job.finished:
            return False
        job.cancel_event.set()
        rid = self.current_run_id(job)
        if rid is not None:
            try:
                if self.store.get_run(rid).status == RUNNING:
                    self.store.request_cancel(rid)
            except Exception:  # run deleted meanwhile: nothing to cancel in the store
                pass
        return True

    def cancel_run(self, run_id: str) -> bool:
        """Cancel a running run by id, whether or not this manager started it."""
        for job in self.jobs():
            if not job.finished and run_id in [self.run_id(job, i) for i in range(len(job.configs))]:
                return self.cancel(job.job_id)
        return self.store.request_cancel(run_id)

    # ------------------------------------------------------------------ workers
    def _worker(self, slot: int) -> None:
        while True:
            job = self._queue.get()
            try:
                self._run_job(job, slot)
            finally:
                self._queue.task_done()

    def close(self) -> None:
        """Stop the worker processes (they also exit by themselves when the server dies)."""
        for p in self.run_processes:
            p.close()

    def _run_job(self, job: Job, slot: int | None = None) -> None:
        if job.cancel_event.is_set():
            job.state = CANCELLED
            job.finished_at = time.time()
            job.done_event.set()
            return
        job.state = ACTIVE
        job.started_at = time.time()
        try:
            if job.kind == "features":
                self._run_features(job)
            elif job.kind == "episodes":
                self._run_episodes(job)
            elif job.kind == "audit":
                self._run_audit(job)
            elif job.kind in ("train", "demo") or len(job.configs) <= 1:
                self._run_configs(job, slot)
            else:
                self._run_sweep(job)
        except BaseException as e:  # noqa: BLE001 - a job failure must never kill the worker
            job.error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            job.state = FAILED
            job.progress["traceback"] = traceback.format_exc(limit=5)
        finally:
            job.finished_at = time.time()
            job.done_event.set()

    def _run_features(self, job: Job) -> None:
        from ..features.cache import get_features

        req = dict(job.feature_request or {})

        def progress(split: str, done: int, total: int) -> None:
            job.progress.update(split=split, done=int(done), total=int(total))

        fs = get_features(req["dataset"], req["encoder"], root=req.get("root"), cache_dir=self.cache_dir,
                          progress=progress, encoder_kwargs=req.get("encoder_kwargs") or None,
                          **(req.get("dataset_kwargs") or {}))
        job.progress.update(n_train=len(fs.y_train), n_test=len(fs.y_test), dim=fs.dim,
                            cache_hit=bool(fs.meta.get("cache_hit")))
        self.features_ready.add(feature_key(req["dataset"], req["encoder"], req.get("encoder_kwargs"),
                                            req.get("dataset_kwargs")))
        job.state = DONE

    def _run_episodes(self, job: Job) -> None:
        from pathlib import Path

        from ..runs.reproduce import reproduce

        req = dict(job.feature_request or {})
        done = [0]

        # Cancel: the figure stops at its next cell (or extraction chunk)
        def on_start(total: int, reused: int) -> None:
            job.progress.update(cells=int(total), cells_done=0)
            _stop_if_cancelled(job)

        def on_result(_: Any) -> None:
            done[0] += 1
            job.progress["cells_done"] = done[0]
            _stop_if_cancelled(job)

        def progress(split: str, n: int, total: int) -> None:
            job.progress.update(split=split, done=int(n), total=int(total))
            _stop_if_cancelled(job)

        out = Path(self.store.root) / "episodes" / job.job_id  # beside the store: the owner's data
        try:
            paths = reproduce("episodes", out, params=req["params"], dataset=req["dataset"], encoder=req["encoder"],
                              dataset_kwargs=dict(req.get("dataset_kwargs") or {}),
                              encoder_kwargs=dict(req.get("encoder_kwargs") or {}),
                              public_from=req.get("public_from"), store=self.store, cache_dir=self.cache_dir,
                              backend="local", workers=1, on_start=on_start, on_result=on_result, progress=progress,
                              command="the Compare page (episodes)")
        except _Cancelled:
            job.state = CANCELLED
            return
        job.progress["result"] = str(paths["json"])
        job.state = DONE

    def _run_audit(self, job: Job) -> None:
        from .audit import run_stored_audit

        req = dict(job.feature_request or {})

        def progress(done: int, total: int) -> None:  # Cancel: stops at the next training
            job.progress.update(done=int(done), total=int(total))
            _stop_if_cancelled(job)

        rec = self.store.get_run(req["run_id"])
        try:
            job.progress["result"] = run_stored_audit(
                self.store, rec, attack=req["attack"], reference_models=req["reference_models"],
                trials=req["trials"], canaries=req["canaries"], progress=progress)
        except _Cancelled:
            job.state = CANCELLED
            return
        job.state = DONE

    def find_episodes(self, request: dict[str, Any]) -> Job | None:
        """The newest episodes job of this server for the same data (dataset, encoder and their
        options, public domain), unfinished first: a reload or a second browser re-attaches to
        its progress (the job id lived only in the session that launched it)."""
        keys = ("dataset", "encoder", "dataset_kwargs", "encoder_kwargs", "public_from")
        same = [j for j in self.jobs() if j.kind == "episodes" and j.feature_request
                and all(j.feature_request.get(k) == request.get(k) for k in keys)]
        return next((j for j in same if not j.finished), same[0] if same else None)

    def _execute(self, job: Job, index: int, cfg: Any, slot: int | None) -> str:
        """Run one config: in the slot's worker process when there is one, else here."""
        def progress(split: str, done: int, total: int) -> None:
            job.progress.update(split=split, done=int(done), total=int(total))

        if slot is not None and slot < len(self.run_processes):
            from ..runs.store import FAILED as RUN_FAILED
            from .run_worker import RunFailed, WorkerDied

            proc = self.run_processes[slot]
            try:
                for msg in proc.execute(cfg, label=job.label(index), cache_dir=self.cache_dir,
                                        flush_every_s=APP_FLUSH_S, should_stop=job.cancel_event.is_set):
                    if msg[0] == "progress":
                        progress(*msg[1:])
                    elif msg[0] == "done":
                        return msg[1]
                    elif msg[0] == "error":
                        job.progress["traceback"] = msg[2]
                        raise RunFailed(msg[1])  # the runner has marked the run failed
            except WorkerDied as e:
                rid = self.run_id(job, index)
                if rid is not None and self.store.get_run(rid).status == RUNNING:
                    self.store.finish(rid, RUN_FAILED, error=str(e))
                raise
            raise WorkerDied("the run's worker process sent no result")

        from ..runs.runner import execute

        def on_record(rec: Any) -> bool:
            if self.on_record is not None:
                self.on_record(job, rec)
            return job.cancel_event.is_set()

        return execute(cfg, store=self.store, on_record=on_record, cache_dir=self.cache_dir,
                       progress=progress, label=job.label(index), flush_every_s=APP_FLUSH_S)

    def _run_configs(self, job: Job, slot: int | None = None) -> None:
        from ..runs.store import CANCELLED as RUN_CANCELLED

        any_failed = False
        for i, cfg in enumerate(job.configs):
            job.current = i
            if job.cancel_event.is_set():
                break
            if job.reuse:
                done = self.store.find_completed(cfg.config_hash())
                if done is not None:
                    job.run_ids[i] = done.run_id
                    job.reused[i] = True
                    continue

            try:
                rid = self._execute(job, i, cfg, slot)
                job.run_ids[i] = rid
                self.features_ready.add(feature_key(cfg.dataset, cfg.encoder, cfg.encoder_kwargs, cfg.dataset_kwargs))
                if cfg.public_from:
                    self.features_ready.add(public_feature_key(cfg))
                if self.store.get_run(rid).status == RUN_CANCELLED:
                    job.cancel_event.set()
            except Exception as e:  # the runner (or _execute, for a dead process) marked the run failed
                any_failed = True
                job.errors[i] = (str(e) if type(e).__name__ == "RunFailed"  # already "Type: message"
                                 else f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
                job.error = job.error or job.errors[i]
                job.run_ids[i] = self.run_id(job, i)
        job.current = len(job.configs)
        if job.cancel_event.is_set():
            job.state = CANCELLED
        elif any_failed and all(e is not None for e in job.errors):
            job.state = FAILED
        else:
            job.state = DONE


    def _run_sweep(self, job: Job) -> None:
        """A sweep job through :func:`~mixdp_core.runs.sweep.run_sweep` (runs land as they finish)."""
        from ..runs.sweep import run_sweep

        def on_result(r: Any) -> None:
            job.run_ids[r.index] = r.run_id
            job.reused[r.index] = r.reused
            if r.status != "completed":
                job.errors[r.index] = r.error or r.status
                job.error = job.error or job.errors[r.index]
            job.current = sum(x is not None or e is not None for x, e in zip(job.run_ids, job.errors))

        def progress(split: str, done: int, total: int) -> None:
            job.progress.update(split=split, done=int(done), total=int(total))

        out = run_sweep(job.configs, store=self.store, backend=self.sweep_backend, workers=self.sweep_workers,
                        address=self.ray_address, label=f"{job.kind}:{job.job_id}", reuse=job.reuse,
                        cache_dir=self.cache_dir, on_result=on_result, progress=progress,
                        should_stop=job.cancel_event.is_set)
        job.progress["sweep_id"] = out.sweep_id
        for cfg in job.configs:
            self.features_ready.add(feature_key(cfg.dataset, cfg.encoder, cfg.encoder_kwargs, cfg.dataset_kwargs))
        job.current = len(job.configs)
        if job.cancel_event.is_set() or out.status == "cancelled":
            job.state = CANCELLED
        elif all(e is not None for e in job.errors):
            job.state = FAILED
        else:
            job.state = DONE


ProgressCallback = Callable[[str, int, int], None]
