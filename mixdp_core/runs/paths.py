"""Where MixDP Explorer keeps its run store.

Order: ``$MIXDP_HOME`` if set, else the per-user data folder of the platform (the same
places ``platformdirs.user_data_dir("mixdp")`` picks): ``$XDG_DATA_HOME/mixdp`` or
``~/.local/share/mixdp`` on Linux, ``~/Library/Application Support/mixdp`` on macOS,
``%LOCALAPPDATA%\\mixdp`` on Windows.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

APP_NAME = "mixdp"


def user_data_dir(app: str = APP_NAME) -> Path:
    """Per-user data folder for ``app`` (not created)."""
    if sys.platform.startswith("win"):
        base = os.environ.get("LOCALAPPDATA") or os.environ.get("APPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / app
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / app
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / app


def default_home() -> Path:
    """``$MIXDP_HOME`` if set (and non-empty), else :func:`user_data_dir`."""
    env = os.environ.get("MIXDP_HOME")
    return Path(env).expanduser() if env else user_data_dir()


def store_root(root: str | os.PathLike | None = None) -> Path:
    """The folder of a run store: ``root`` (``~`` expanded), else :func:`default_home`; what
    :class:`~mixdp_core.runs.store.RunStore` opens, for callers that look before opening one."""
    return Path(root).expanduser() if root is not None else default_home()
