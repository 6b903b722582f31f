"""Uploads (app) and storage faults: bombs and lying zips refused with bounded memory, no
orphan temp files; disk full / read-only folders give one line and lose nothing."""

from __future__ import annotations

import errno
import io
import os
import sqlite3
import sys
import time
import zipfile

import numpy as np
import pytest

from . import _faults as F
from .conftest import Outcome, assert_ok, orphan_files, record, run_inprocess, run_subprocess, store_snapshot

BASE = ["train", "--dataset", "digits", "--encoder", "pixels", "--no-progress", "--json"]


# ------------------------------------------------------------------ uploads (app path)
def _upload_case(case: str, fn, env, fld: str = "upload") -> Outcome:
    from mixdp_core.errors import MixDPError

    o = Outcome(case, "upload", "clear", fld)
    t0 = time.perf_counter()
    try:
        fn()
        o.outcome = "accepted"
    except MixDPError as e:
        msg = str(e)
        o.outcome = "clear" if (msg.startswith(fld + ":") and "\n" not in msg) else "unclear"
        o.message = msg
    except BaseException as e:  # noqa: BLE001
        o.outcome, o.message = "traceback", f"{type(e).__name__}: {e}"
    o.seconds = time.perf_counter() - t0
    probs = orphan_files(env["cache"])
    o.lost, o.notes = bool(probs), probs
    return record(o)


@pytest.mark.parametrize("case,make", [
    ("upload .npz: object arrays", lambda d: (np.savez(d / "u1.npz", **{**F.feature_arrays(),
                                                                        "y_train": np.array([None] * 40, object)}),
                                              (d / "u1.npz").read_bytes())[1]),
    ("upload .npz: text file", lambda d: b"PK not really a zip"),
    ("upload .npz: header without data", lambda d: F.header_without_data(d / "u3.npz").read_bytes()),
    ("upload .npz: string labels", lambda d: (np.savez(d / "u4.npz", **{**F.feature_arrays(),
                                                                        "y_train": np.array(["a"] * 40)}),
                                              (d / "u4.npz").read_bytes())[1]),
])
def test_npz_upload_errors_leave_no_orphans(case, make, env):
    from mixdp_core.app_support.forms import save_npz_upload

    data = make(env["files"])
    o = _upload_case(case, lambda: save_npz_upload(data, "feat.npz"), env)
    assert_ok(o)


def test_zip_upload_lying_header(env):
    from mixdp_core.app_support.forms import extract_zip_upload

    data = F.zip_lying_header(env["files"] / "lie.zip").read_bytes()
    o = _upload_case("upload .zip: member header lies about its size (was BadZipFile)",
                     lambda: extract_zip_upload(data, "imgs.zip"), env)
    assert_ok(o)


def test_zip_upload_good_archive_still_works(env):
    from mixdp_core.app_support.forms import extract_zip_upload

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for c in "ab":
            for i in range(3):
                zf.writestr(f"{c}/{i}.png", F.tiny_png_bytes(i + (10 if c == "b" else 0)))
    spec = extract_zip_upload(buf.getvalue(), "ok.zip")
    assert spec.startswith("image_folder:") and not orphan_files(env["cache"])


_UPLOAD_NPZ = ("import sys; from mixdp_core.app_support.forms import save_npz_upload\n"
               "from mixdp_core.errors import MixDPError\n"
               "try:\n    save_npz_upload(open(sys.argv[1], 'rb').read(), 'bomb.npz')\n"
               "except MixDPError as e:\n    print('mixdp app: error:', e, file=sys.stderr); sys.exit(2)\n")
_UPLOAD_ZIP = _UPLOAD_NPZ.replace("save_npz_upload", "extract_zip_upload").replace("'bomb.npz'", "'big.zip'")


def test_npz_bomb_upload_memory_bounded(env):
    bomb = F.npz_bomb(env["files"] / "bomb_up.npz")
    o = run_subprocess(Outcome("upload .npz bomb (was 3.85 GB)", "upload", "clear", "upload"),
                       ["-c", _UPLOAD_NPZ, str(bomb)], env)
    assert_ok(o)


def test_zip_big_member_upload_memory_bounded(env):
    z = F.zip_big_member(env["files"] / "big.zip", mib=900)
    assert z.stat().st_size < 2 * 2**20
    o = run_subprocess(Outcome("upload .zip with one 900 MiB member (was 1.8 GB)", "upload", "clear", "upload"),
                       ["-c", _UPLOAD_ZIP, str(z)], env)
    assert_ok(o)
    assert "MIXDP_MAX_MEMBER_BYTES" in o.message


# ------------------------------------------------------------------ storage faults
def _enospc(*a, **k):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_on_artifact_write_marks_run_failed_at_once(env, baseline_run, monkeypatch):
    import mixdp_core.runs.store as S

    monkeypatch.setattr(S, "atomic_write", _enospc)
    o = run_inprocess(Outcome("disk full (ENOSPC) while saving a run", "storage", "clear", "store"),
                      BASE + ["--method", "adamix", "--noise-multiplier", "20", "--epsilon", "0.5"], env)
    assert_ok(o)
    assert "disk is full" in o.message
    monkeypatch.undo()
    snap = store_snapshot(env["home"])
    failed = [k for k, v in snap.items() if v[0] == "failed"]
    assert failed and all(v[0] != "running" for v in snap.values())
    assert max(snap[k][1] for k in failed) >= 1  # its step history is kept


def test_disk_full_in_sqlite_while_writing_steps(env, baseline_run, monkeypatch):
    import mixdp_core.runs.store as S

    real = S.RunStore._insert_steps

    class FullDisk:  # the store's own connection, except that inserting steps hits SQLITE_FULL
        def __init__(self, con):
            self._con = con

        def executemany(self, *a):
            raise sqlite3.OperationalError("database or disk is full")

        def __getattr__(self, name):
            return getattr(self._con, name)

    monkeypatch.setattr(S.RunStore, "_insert_steps", lambda self, con, run_id, rows: real(self, FullDisk(con), run_id, rows))
    o = run_inprocess(Outcome("disk full (SQLITE_FULL) while writing steps", "storage", "clear", "store"),
                      BASE + ["--method", "adamix", "--noise-multiplier", "20", "--epsilon", "0.5"], env)
    monkeypatch.setattr(S.RunStore, "_insert_steps", real)
    assert_ok(o)


def test_read_only_home(env, baseline_run, monkeypatch, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0:
        ro.chmod(0o555)
    else:  # root ignores permissions: inject the error the kernel would give
        from pathlib import Path

        real_mkdir = Path.mkdir

        def mkdir(self, *a, **k):
            if str(self).startswith(str(ro)):
                raise OSError(errno.EROFS, "Read-only file system", str(self))
            return real_mkdir(self, *a, **k)

        monkeypatch.setattr(Path, "mkdir", mkdir)
    o = run_inprocess(Outcome("read-only MIXDP_HOME", "storage", "clear", "store"),
                      BASE + ["--method", "only_public", "--store", str(ro / "home")], env)
    assert_ok(o)
    assert "read-only" in o.message


def test_read_only_store_database(env, baseline_run, monkeypatch, tmp_path):
    from mixdp_core.runs.store import RunStore

    home = tmp_path / "rostore"
    RunStore(home)
    if os.geteuid() != 0:
        (home / "runs.sqlite").chmod(0o444)
        home.chmod(0o555)
    else:
        real = sqlite3.connect

        def ro_connect(path, *a, **k):
            if str(path).startswith(str(home)):
                return real(f"file:{path}?mode=ro", *a, uri=True, **k)
            return real(path, *a, **k)

        import mixdp_core.runs.store as S

        monkeypatch.setattr(S.sqlite3, "connect", ro_connect)
    o = run_inprocess(Outcome("read-only run database", "storage", "clear", "store"),
                      BASE + ["--method", "only_public", "--store", str(home)], env)
    assert_ok(o)


def test_read_only_cache_is_documented_behaviour(env, baseline_run, monkeypatch, tmp_path):
    """A read-only MIXDP_CACHE does not fail the run: features are used from memory and not
    cached, with a warning naming the folder (documented in docs/reliability.md)."""
    import mixdp_core.features.cache as C

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(C, "atomic_write", read_only)

    def check(rc, out, err):
        return [] if "features not cached" in err else ["no warning about the unwritable cache"]

    o = run_inprocess(Outcome("read-only MIXDP_CACHE (run completes, features not cached)", "storage",
                              "documented", "cache"),
                      BASE + ["--method", "only_public", "--cache-dir", str(tmp_path / "rocache")], env, check)
    assert_ok(o)


def test_orphan_temp_files_are_swept_at_start(env, tmp_path):
    from mixdp_core.runs.store import RunStore

    home = tmp_path / "sweep"
    RunStore(home)
    orphan = home / "artifacts" / ".x.npz.abc.npz.tmp"
    orphan.write_bytes(b"half")
    fresh = home / "artifacts" / ".y.npz.def.npz.tmp"
    fresh.write_bytes(b"being written")
    old = time.time() - 7200
    os.utime(orphan, (old, old))
    RunStore(home)
    assert not orphan.exists() and fresh.exists()  # a live writer's temp file is kept



def test_store_path_is_a_file(env, baseline_run, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    o = run_inprocess(Outcome("--store names a file", "storage", "clear", "store"),
                      BASE + ["--method", "only_public", "--store", str(f)], env)
    assert_ok(o)
    assert "is a file, not a folder" in o.message
