"""Loading ``.npz`` files and zip archives with sizes checked *before* anything big is read.

* :func:`load_npz`: every ``.npy`` member's header (shape + dtype, via
  ``numpy.lib.format.read_array_header_*`` on the zip member, a few hundred bytes) is read
  first; object arrays, truncated members (header without data) and a total above the limit
  are refused before a single array is decompressed. A 1.96 MB file holding a 2 GB array is
  refused in milliseconds instead of costing 4 GB and 53 s.
* :func:`copy_member`: a zip member is streamed in 1 MiB chunks with a running byte count,
  so a member whose header lies about its size, or a 900 MiB member in a 0.9 MB archive,
  is stopped at the limit (memory stays at one chunk).

Limits (bytes), configurable by environment variable or argument, and stated in every error:

* ``MIXDP_MAX_NPZ_BYTES`` — total decompressed size of an ``.npz`` (default 512 MiB);
* ``MIXDP_MAX_MEMBER_BYTES`` — one file inside an uploaded zip (default 64 MiB).

Every failure is a one-line :class:`~mixdp_core.errors.DataError` naming ``field``.
"""

from __future__ import annotations

import os
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import IO, Optional

import numpy as np

from .errors import ConfigError, DataError

DEFAULT_MAX_NPZ_BYTES = 512 * 2**20
DEFAULT_MAX_MEMBER_BYTES = 64 * 2**20
_CHUNK = 2**20


def env_limit(name: str, default: int, unit: str = "bytes") -> int:
    """A size limit from the environment variable ``name`` (``default`` where unset): a number
    >= 1 (``1e9`` accepted); anything else is a one-line ``ConfigError`` naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        v = int(float(raw))
        if v < 1:
            raise ValueError
    except (ValueError, OverflowError):
        raise ConfigError(name, f"must be a number of {unit} >= 1, got {raw!r}") from None
    return v


def max_npz_bytes() -> int:
    """``$MIXDP_MAX_NPZ_BYTES`` or 512 MiB."""
    return env_limit("MIXDP_MAX_NPZ_BYTES", DEFAULT_MAX_NPZ_BYTES)


def max_member_bytes() -> int:
    """``$MIXDP_MAX_MEMBER_BYTES`` or 64 MiB."""
    return env_limit("MIXDP_MAX_MEMBER_BYTES", DEFAULT_MAX_MEMBER_BYTES)


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def npz_headers(path: str | Path, *, field: str = "features", max_bytes: Optional[int] = None
                ) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """``{name: (shape, dtype)}`` of every array in the ``.npz`` at ``path``, read from the
    headers only, after checking the file type, dtypes, truncation and the size limit.

    Raises:
        DataError: folder instead of a file, not a zip/npz, unreadable member, object array,
            truncated member, or total size above the limit (message names ``field`` and
            the limit with its environment variable).
    """
    p = Path(path)
    limit = max_npz_bytes() if max_bytes is None else int(max_bytes)
    if p.is_dir():
        raise DataError(f"{field}: {str(p)!r} is a folder; give the .npz file itself")
    if not p.exists():
        raise DataError(f"{field}: file {str(p)!r} does not exist")
    if not p.is_file():  # checked before any read: a FIFO or /dev/stdin would block, /dev/zero never ends
        raise DataError(f"{field}: {str(p)!r} is not a regular file (a device, FIFO or socket); give a .npz file")
    if tarfile.is_tarfile(p):
        raise DataError(f"{field}: {str(p)!r} is a tar archive, not a .npz (a zip of .npy arrays); save the "
                        f"arrays with numpy.savez")
    if not zipfile.is_zipfile(p):
        raise DataError(f"{field}: {str(p)!r} is not a readable .npz archive (no zip structure: a text "
                        f"file? save the arrays with numpy.savez)")
    out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    total = 0
    try:
        with zipfile.ZipFile(p) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                with zf.open(info) as f:
                    try:
                        version = np.lib.format.read_magic(f)
                        if version == (1, 0):
                            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                        else:
                            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                        header_len = f.tell()
                    except (ValueError, EOFError) as e:
                        raise DataError(f"{field}: member {info.filename!r} of {str(p)!r} is not a numpy "
                                        f"array ({e})") from None
                if dtype.hasobject:
                    raise DataError(f"{field}: array {name!r}: object arrays are not allowed (dtype {dtype}); store numbers "
                                    f"(features float, labels int)")
                nbytes = int(np.prod(shape, dtype=np.float64) * dtype.itemsize)
                if info.file_size < header_len + nbytes:
                    raise DataError(f"{field}: array {name!r}: data is truncated in {str(p)!r} (header says "
                                    f"{shape} {dtype}, {nbytes} bytes; the member holds "
                                    f"{max(0, info.file_size - header_len)})")
                total += nbytes
                if total > limit:
                    raise DataError(f"{field}: {str(p)!r} holds at least {_mib(total)} of arrays "
                                    f"({name}: shape {shape}, {dtype}); the limit is {_mib(limit)} "
                                    f"(set MIXDP_MAX_NPZ_BYTES to raise it)")
                out[name] = (tuple(int(s) for s in shape), dtype)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError) as e:
        raise DataError(f"{field}: {str(p)!r} is not a readable .npz archive ({type(e).__name__}: {e})") from None
    return out


def load_npz(path: str | Path, *, field: str = "features", max_bytes: Optional[int] = None
             ) -> dict[str, np.ndarray]:
    """All arrays of the ``.npz`` at ``path``, after :func:`npz_headers` accepted it.

    Decompression errors (a member whose header lies about its size, bad CRC) become a
    :class:`DataError` naming ``field``.
    """
    npz_headers(path, field=field, max_bytes=max_bytes)
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as e:
        raise DataError(f"{field}: {str(path)!r} is not a readable .npz archive ({type(e).__name__}: {e})") from None


def copy_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: IO[bytes], *, field: str = "upload",
                max_bytes: Optional[int] = None, budget: Optional[list] = None) -> int:
    """Stream one zip member into ``dest`` with a running byte count; returns bytes copied.

    Args:
        max_bytes: per-member limit (default :func:`max_member_bytes`), enforced on the bytes
            actually produced, whatever the member's header claims.
        budget: optional one-element list holding the bytes still allowed for the whole
            archive; decremented as data is copied.

    Raises:
        DataError: the member exceeds a limit, or is corrupt (bad CRC, lying size header).
    """
    limit = max_member_bytes() if max_bytes is None else int(max_bytes)
    n = 0
    try:
        with zf.open(info) as src:
            while True:
                chunk = src.read(_CHUNK)
                if not chunk:
                    break
                n += len(chunk)
                if n > limit:
                    raise DataError(f"{field}: {info.filename!r} unpacks to more than {_mib(limit)}, the limit "
                                    f"per file (set MIXDP_MAX_MEMBER_BYTES to raise it)")
                if budget is not None:
                    budget[0] -= len(chunk)
                    if budget[0] < 0:
                        raise DataError(f"{field}: the archive unpacks to more than its total limit")
                dest.write(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:
        raise DataError(f"{field}: {info.filename!r} is corrupt in the archive ({type(e).__name__}: {e})") from None
    return n
