"""Pre-warmed worker processes that execute the app's training runs.

Why processes: a run trained in a thread of the Streamlit server shares the server's GIL with
the pages redrawing its live charts, so each slows the other (measured on 2 loaded cores:
the 0.3 s demo run took 5 s in the server, and its first chart point came after 5-10 s). A
run started in a *fresh* process pays the imports of the training stack (seconds on a loaded
CPU) at every launch. So the :class:`~mixdp_core.app_support.jobs.JobManager` starts, with
the app, one long-lived :class:`RunProcess` per job slot; each imports the training and
evaluation stack and loads the default features once (:func:`prewarm`), then waits for
configs. Launch only sends a pickled ``RunConfig`` down a pipe.

The child is a plain ``python -m mixdp_core.app_support.run_worker`` subprocess, not a
:mod:`multiprocessing` child: Streamlit installs the page script as ``__main__``, and
multiprocessing's spawn and forkserver children re-import ``__main__`` (they would run the
page). Its end of a socket pair is passed as a file descriptor.

Protocol (pickled messages over :class:`multiprocessing.connection.Connection`). Parent →
child: ``("run", seq, config, label, cache_dir, flush_every_s)``, ``("cancel", seq)``, or
``None`` (exit). Child → parent: ``("ready", pid)`` once warm, ``("progress", split, done,
total)`` during feature extraction, then ``("done", run_id)`` or ``("error", message,
traceback)``. A reader thread in the child takes the messages, so a cancel reaches a running
run at its next step record (as the store's cancel flag does at every flush).

Safety: the child writes the run store itself (SQLite WAL, one transaction per flush, as
``mixdp train`` does), so a ``kill -9`` of the child or of the server loses at most one flush
interval of history, and :meth:`RunStore.recover_interrupted` marks the run failed (dead
writer pid). A crash of the child (segfault, out of memory, ``kill -9``) fails the run, never
the app: the parent sees the socket close, marks the run failed and starts a fresh child.
When the server dies the child's socket closes: it cancels its run (stored ``cancelled`` with
its history) and exits.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Iterator

#: Dataset and encoder whose features the children load while warming up (the app's offline
#: default, see :mod:`mixdp_core.app_support.resources`).
WARM_DATASET, WARM_ENCODER = "digits", "pixels"


def prewarm(cache_dir: str | Path | None = None) -> None:
    """Import what a run needs, in the order it needs it, and load the default features
    (cold imports of scikit-learn / scipy take seconds on a loaded CPU). Streamlit-free."""
    try:
        from ..features.cache import get_features
        from ..methods import METHODS  # noqa: F401
        from ..runs import runner  # noqa: F401
        from .. import accounting

        get_features(WARM_DATASET, WARM_ENCODER, cache_dir=cache_dir)
        accounting.calibrate_steps(noise_multiplier=20.0, target_epsilon=3.0, target_delta=1e-5)
        from ..evaluation import report  # noqa: F401  (sklearn metrics, scipy.stats: the final evaluation)
        from ..randomness import noise_rng

        noise_rng("secure", 0, 0).standard_normal(1)  # the first private release imports randomgen
    except Exception:  # warm-up only: a run reports real errors
        pass


#: Niceness added to the run processes (``MIXDP_APP_RUN_NICE`` overrides; 0 keeps the server's).
#: Why: on a machine with fewer free cores than busy processes (2 cores: the run, the server,
#: the browser), the run would take an equal share of CPU from the server that redraws its
#: live charts; a lower priority lets the redraw run as soon as it is due, and the run uses
#: whatever CPU is left (all of it while the page waits for the next poll).
RUN_NICE = 5


def lower_priority() -> int:
    """Add :data:`RUN_NICE` (or ``MIXDP_APP_RUN_NICE``, an integer 0-19) to this process's
    niceness; return the increment actually applied (0 where the platform has no ``os.nice``
    or refuses it). A bad value is reported on stderr (one line) and replaced: a non-integer by
    :data:`RUN_NICE`, an integer outside 0-19 by the nearest end; the run goes on either way."""
    raw = os.environ.get("MIXDP_APP_RUN_NICE", str(RUN_NICE))
    try:
        inc = int(raw)
    except ValueError:
        print(f"MIXDP_APP_RUN_NICE: must be an integer 0-19, got {raw!r}; using {RUN_NICE}", file=sys.stderr)
        inc = RUN_NICE
    if not 0 <= inc <= 19:
        print(f"MIXDP_APP_RUN_NICE: must be an integer 0-19, got {raw!r}; using {min(max(inc, 0), 19)}",
              file=sys.stderr)
        inc = min(max(inc, 0), 19)
    if inc == 0 or not hasattr(os, "nice"):
        return 0
    try:
        old = os.nice(0)
        return os.nice(inc) - old  # less than inc when the niceness reaches its limit (19)
    except OSError:  # a sandbox may refuse it: run at the server's priority
        return 0


def serve(conn: Connection, root: str, cache_dir: str | None) -> None:
    """Child main loop: warm up, then execute one config at a time (see the module docstring)."""
    jobs: "queue.Queue[Any]" = queue.Queue()
    cancelled: set[int] = set()
    lost = threading.Event()

    def reader() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # the server is gone: stop the run, then exit
                lost.set()
                jobs.put(None)
                return
            if msg is None:
                jobs.put(None)
                return
            if msg[0] == "cancel":
                cancelled.add(int(msg[1]))
            else:
                jobs.put(msg)

    threading.Thread(target=reader, name="mixdp-run-worker-reader", daemon=True).start()
    prewarm(cache_dir)
    from ..runs.runner import execute
    from ..runs.store import RunStore

    store = RunStore(root, recover=False)
    send_lock = threading.Lock()

    def send(msg: tuple) -> None:
        if lost.is_set():
            return
        with send_lock:
            try:
                conn.send(msg)
            except (OSError, EOFError):
                lost.set()

    send(("ready", os.getpid()))
    while True:
        msg = jobs.get()
        if msg is None:
            return
        _, seq, config, label, job_cache_dir, flush_every_s = msg
        try:
            rid = execute(config, store=store, on_record=lambda rec: seq in cancelled or lost.is_set(),
                          cache_dir=job_cache_dir, label=label, flush_every_s=flush_every_s,
                          progress=lambda split, done, total: send(("progress", split, int(done), int(total))))
            send(("done", rid))
        except BaseException as e:  # noqa: BLE001 - report, then take the next job
            send(("error", f"{type(e).__name__}: {e}" if str(e) else type(e).__name__,
                  traceback.format_exc(limit=5)))


class RunFailed(RuntimeError):
    """The run raised in the child (message ``"Type: message"``; the run is marked failed)."""


class WorkerDied(RuntimeError):
    """The child process ended while running a config (crash, out of memory, kill)."""


class RunProcess:
    """Parent-side handle of one pre-warmed child process (one job slot).

    Args:
        root: run-store folder the child writes to.
        cache_dir: feature-cache folder for the warm-up.

    Attributes:
        process: the :class:`subprocess.Popen` of the child (replaced after a crash).
        restarts: children started after a crash.
        ready: whether the child said it is warm.
    """

    def __init__(self, root: str | Path, cache_dir: str | Path | None = None):
        self.root, self.cache_dir = str(root), None if cache_dir is None else str(cache_dir)
        self.restarts = 0
        self.process: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.ready = False
        self._seq = 0
        self._lock = threading.Lock()
        self._start()

    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        # the child imports this very package, wherever it lies (a worktree, an editable install)
        pkg_parent = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        args = [sys.executable, "-m", "mixdp_core.app_support.run_worker", str(theirs.fileno()), self.root,
                self.cache_dir or ""]
        self.process = subprocess.Popen(args, pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
                                        close_fds=True)
        theirs.close()
        self.conn = Connection(ours.detach())
        self.ready = False

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def restart(self) -> None:
        """Replace a dead (or stuck) child with a fresh one."""
        try:
            if self.alive():
                self.process.kill()
            if self.process is not None:
                self.process.wait(timeout=5)
            if self.conn is not None:
                self.conn.close()
        except Exception:
            pass
        finally:
            self.restarts += 1
            self._start()

    def execute(self, config: Any, *, label: str, cache_dir: str | Path | None, flush_every_s: float,
                should_stop: Any = None, poll_s: float = 0.05) -> Iterator[tuple]:
        """Send one config; yield the child's messages up to ``("done", run_id)`` or
        ``("error", message, traceback)`` (the last one yielded).

        Args:
            should_stop: ``() -> bool`` polled every ``poll_s`` s; once true, the run is asked
                to stop (it ends ``cancelled`` at its next step record).

        Raises:
            WorkerDied: the child ended before finishing (a fresh one is started first).
        """
        with self._lock:  # one run at a time per child
            if not self.alive():
                self.restart()
            self._seq += 1
            seq = self._seq
            self.conn.send(("run", seq, config, label, None if cache_dir is None else str(cache_dir),
                            float(flush_every_s)))
            asked = False
            while True:
                if not asked and should_stop is not None and should_stop():
                    asked = True
                    try:
                        self.conn.send(("cancel", seq))
                    except OSError:
                        pass
                try:
                    msg = self.conn.recv() if self.conn.poll(poll_s) else None
                except (EOFError, OSError):
                    msg = None
                    try:
                        self.process.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        pass
                if msg is None and not self.alive():
                    code = self.process.returncode
                    self.restart()
                    raise WorkerDied(f"the run's worker process ended unexpectedly (exit code {code}); "
                                     "a fresh one was started")
                if msg is None:
                    continue
                if msg[0] == "ready":
                    self.ready = True
                    continue
                yield msg
                if msg[0] in ("done", "error"):
                    return

    def close(self) -> None:
        """Ask the child to exit (it also exits by itself when the server dies)."""
        try:
            self.conn.send(None)
        except Exception:
            pass
        if self.process is not None:
            try:
                self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.process.kill()


def main(argv: list[str] | None = None) -> None:
    """``python -m mixdp_core.app_support.run_worker FD ROOT [CACHE_DIR]`` (started by
    :class:`RunProcess`, not by hand)."""
    argv = sys.argv[1:] if argv is None else argv
    lower_priority()
    conn = Connection(int(argv[0]))
    serve(conn, argv[1], (argv[2] if len(argv) > 2 else "") or None)


if __name__ == "__main__":
    main()
