"""The roots: where the app may read datasets from, and where features and exported encoder
models are cached (no other import from ``data``, so the loaders, the path checks, the encoders
and the feature cache can all use them without importing each other)."""

from __future__ import annotations

import os
from pathlib import Path


def data_root() -> Path:
    """The folder the app may read datasets from: ``$MIXDP_DATA_ROOT`` or ``~/mixdp-data``."""
    return Path(os.environ.get("MIXDP_DATA_ROOT", Path.home() / "mixdp-data")).expanduser().resolve()


def default_cache_dir() -> Path:
    """``$MIXDP_CACHE``, else ``$XDG_CACHE_HOME/mixdp/features``, else ``~/.cache/mixdp/features``."""
    env = os.environ.get("MIXDP_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")
    return Path(base) / "mixdp" / "features"
