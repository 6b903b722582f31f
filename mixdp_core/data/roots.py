"""The data root: where the app may read datasets from (no other import from ``data``, so the
loaders and the path checks can both use it without importing each other)."""

from __future__ import annotations

import os
from pathlib import Path


def data_root() -> Path:
    """The folder the app may read datasets from: ``$MIXDP_DATA_ROOT`` or ``~/mixdp-data``."""
    return Path(os.environ.get("MIXDP_DATA_ROOT", Path.home() / "mixdp-data")).expanduser().resolve()
