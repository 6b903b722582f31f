"""Small file-system helpers shared by the feature cache and the run store."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Callable


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
