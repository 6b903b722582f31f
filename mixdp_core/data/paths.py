"""Path safety: user-supplied paths (uploads, app fields) must stay inside a data root."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError


def data_root() -> Path:
    """The folder the app may read datasets from: ``$MIXDP_DATA_ROOT`` or ``~/mixdp-data``."""
    return Path(os.environ.get("MIXDP_DATA_ROOT", Path.home() / "mixdp-data")).expanduser().resolve()


def resolve_under(root: str | Path, path: str | Path, *, field: str = "path") -> Path:
    """Resolve ``path`` (relative to ``root`` if not absolute) and refuse anything outside it.

    Symlinks and ``..`` are resolved first, so ``root/../etc`` or a link pointing out of the
    root are refused.

    Raises:
        ConfigError: the resolved path is not inside ``root`` (the message names ``field``).
    """
    root_r = Path(root).expanduser().resolve()
    p = Path(path).expanduser()
    full = (p if p.is_absolute() else root_r / p).resolve()
    if full != root_r and root_r not in full.parents:
        raise ConfigError(field, f"{str(path)!r} is outside the data root {str(root_r)!r}")
    return full
