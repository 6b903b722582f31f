"""Small file-system helpers shared by the feature cache and the run store."""

from __future__ import annotations

import errno
import os
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import IO, Callable, Iterable

from .errors import StorageError

def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask), at least 1: the one reader for
    thread and worker counts (encoders, BLAS threads of a fit, sweep workers)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def stat_identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """``(size, st_mtime_ns, st_ctime_ns, st_ino)``: what identifies a file's content without
    reading it. A file rewritten with its old mtime put back (``cp -p``, ``rsync -t``, ``tar
    x``) still changes its ctime, which no user tool sets back; one swapped by rename changes
    its inode. The one rule of the feature cache's keys (image files, weights files)."""
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def env_limit(name: str, default: float, *, kind: type = int, hi: float = float("inf")) -> float:
    """A positive limit from the environment variable ``name`` (``default`` when unset or
    empty): one reader for every ``MIXDP_MAX_*``-style knob.

    Raises:
        ConfigError: naming ``name``, when it is set to something that is not a positive
            ``kind`` at most ``hi`` (it fell back to the default silently, and the refusal
            that followed cited the variable as if it had been applied)."""
    from .errors import ConfigError

    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    what = ("an integer" if kind is int else "a number") + (" >= 1" if kind is int else " > 0") + (
        f" and <= {hi:g}" if hi != float("inf") else "")
    try:
        f = float(raw)  # "4e7" is an integer written as MIXDP_MAX_STEPS and the byte limits accept it
        if kind is int and not f.is_integer():
            raise ValueError
        v = kind(f)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(name, f"must be {what} (environment variable), got {raw[:40]!r}") from None
    if not (0 < v <= hi) or v != v:
        raise ConfigError(name, f"must be {what} (environment variable), got {raw[:40]!r}")
    return v


_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG}
_READONLY = {errno.EROFS, errno.EACCES, errno.EPERM}


def storage_error(exc: BaseException, path: str | os.PathLike, *, what: str, fix: str = "") -> StorageError:
    """A one-line :class:`StorageError` for an OS / SQLite write failure on ``path``.

    Names the cause (disk full, read-only / not writable, other), the path and ``fix``.
    """
    msg = str(exc).lower()
    no = getattr(exc, "errno", None)
    if no in _FULL or "disk is full" in msg or "database or disk is full" in msg:
        why = "the disk is full"
    elif no in _READONLY or "readonly" in msg or "read-only" in msg or "permission denied" in msg:
        why = "it is read-only or not writable"
    elif "database is locked" in msg or "database table is locked" in msg or "busy" in msg:
        # not a space problem: the generic fix ("free some space") would mislead
        return StorageError(f"{what}: {str(path)!r} is held by another process (a write lock was not released "
                            f"in time); wait for it to finish, or use another store (MIXDP_HOME, CLI: --store)")
    elif "not a database" in msg or "malformed" in msg or "file is encrypted" in msg:
        return StorageError(f"{what}: {str(path)!r} is not a readable run database (corrupt or another kind of "
                            f"file); move it aside or use another store (MIXDP_HOME, CLI: --store)")
    elif isinstance(exc, sqlite3.Error) and ("unable to open" in msg or "disk i/o" in msg):
        why = f"the database cannot be opened or written ({exc})"
    else:
        why = f"{type(exc).__name__}: {exc}"
    return StorageError(f"{what}: cannot write {str(path)!r}: {why}" + (f"; {fix}" if fix else ""))


def sweep_orphans(folder: str | os.PathLike, patterns: Iterable[str] = (".*.tmp", ".*.npz", ".*.json"),
                  *, older_than: float = 3600.0) -> int:
    """Remove temp files left by interrupted atomic writes (hidden names matching
    ``patterns``, older than ``older_than`` seconds, so a live writer's file is kept).

    Returns the number removed; never raises (a read-only folder is left alone).
    """
    n = 0
    now = time.time()
    try:
        for pat in patterns:
            for f in Path(folder).glob(pat):
                try:
                    if now - f.lstat().st_mtime < older_than:
                        continue
                    if f.is_dir() and not f.is_symlink():
                        import shutil

                        shutil.rmtree(f, ignore_errors=True)
                    else:
                        f.unlink()
                    n += 1
                except OSError:
                    pass
    except OSError:
        pass
    return n


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None], *, suffix: str = ".tmp") -> Path:
    """Write a file atomically: ``write(f)`` into a temp file in the same folder, fsync, rename.

    A reader never sees a half-written ``path``: it sees the old file or the complete new one.
    An exception (including ``KeyboardInterrupt``) removes the temp file and propagates.

    Args:
        path: destination; its folder must exist.
        write: callback writing the content to the open binary file object.
        suffix: suffix of the temp file (e.g. ``".npz"`` so numpy does not append one).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def real_path(path: str | Path) -> str:
    """``path`` with ``~`` expanded and every symlink and ``..`` resolved: the one spelling of a
    user path's identity (the ledger's data-set identity, whether two specs name the same data,
    a data set's fingerprint), so two ways of naming one folder are one data set everywhere."""
    return os.path.realpath(os.path.expanduser(str(path)))
