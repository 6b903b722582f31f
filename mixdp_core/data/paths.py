"""Path safety: user-supplied paths (uploads, app fields) must stay inside a data root."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError


from .roots import data_root  # noqa: E402,F401  (the data root; here, where callers find it)


def resolve_under(root: str | Path, path: str | Path, *, field: str = "path") -> Path:
    """Resolve ``path`` (relative to ``root`` if not absolute) and refuse anything outside it.

    Symlinks and ``..`` are resolved first, so ``root/../etc`` or a link pointing out of the
    root are refused.

    Raises:
        ConfigError: the resolved path is not inside ``root``, or cannot be resolved (a null
            byte, a symlink loop); the message names ``field``.
    """
    try:
        root_r = Path(root).expanduser().resolve()
        p = Path(path).expanduser()
        full = (p if p.is_absolute() else root_r / p).resolve()
    except (ValueError, RuntimeError, OSError) as e:  # null byte, symlink loop, unreadable link
        raise ConfigError(field, f"{str(path)!r} cannot be resolved: {e}") from None
    if full != root_r and root_r not in full.parents:
        raise ConfigError(field, f"{str(path)!r} is outside the data root {str(root_r)!r}")
    return full


def resolve_under_any(path: str, roots: Any, field: str) -> Path:
    """``path`` resolved under the data root or one of ``roots`` (the app's upload folder).

    A relative ``path`` is relative to the data root, and only to it: resolved against a
    folder where nothing is outside it, or against the process's working directory by the
    loader later, it would escape the check. Callers must read the path this returns, never
    the one they were given."""
    p = Path(str(path)).expanduser()
    if not p.is_absolute():
        return resolve_under(data_root(), p, field=field)
    for r in roots:
        try:
            return resolve_under(r, p, field=field)
        except ConfigError:
            continue
    return resolve_under(data_root(), p, field=field)


def resolve_dataset_spec(spec: str, *, confine: bool, field: str = "dataset", also: Any = ()) -> str:
    """The one place a dataset spec from a user is resolved.

    ``"<key>[:<path>]"``: ``key`` must be a registered dataset and the path (every dataset's
    argument is the folder or file it reads) is resolved — symlinks and ``..`` followed —
    and, with ``confine=True`` (every spec that reaches the app: pages, shared links, sweeps
    and audits launched there), must lie under :func:`data_root` or one of the folders in
    ``also`` (the app's own upload folder). The CLI runs as its user and passes
    ``confine=False``: it reads what the user can read.

    Returns:
        The canonical spec (``key`` or ``key:<resolved path>``).

    Raises:
        ConfigError: naming ``field``: unknown dataset, or a path outside the data root.
    """
    from .datasets import DATASETS, parse_spec
    from ..errors import UnknownNameError

    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(field, "must be a dataset spec '<registered dataset>[:<path>]'")
    key, arg = parse_spec(spec.strip())
    try:
        DATASETS.get(key)
    except UnknownNameError:
        raise ConfigError(field, f"unknown dataset {key!r}; choose one of: {', '.join(DATASETS.keys())}") from None
    if arg is None:
        return key
    if not confine:
        return f"{key}:{arg}"
    return f"{key}:{resolve_under_any(arg, also, field)}"


def confine_run_paths(config: Any, *, also: Any = ()) -> Any:
    """Check every path a :class:`~mixdp_core.runs.runner.RunConfig` will read against the
    data root: ``dataset``, ``public_from``, ``dataset_root``, a ``root`` loader option and a
    ``public_pool`` file of the method (DPPL-Public).

    Returns:
        ``config`` with each of those paths replaced by the resolved one that was checked (a
        copy; ``dataclasses.replace`` for dataclasses): the run must read exactly what was
        checked, not a relative path that the loader would resolve elsewhere.

    Raises:
        ConfigError: naming the field of the first path outside the root.
    """
    import copy
    import dataclasses

    changes: dict[str, Any] = {"dataset": resolve_dataset_spec(config.dataset, confine=True, field="dataset",
                                                               also=also)}
    if getattr(config, "public_from", None):
        changes["public_from"] = resolve_dataset_spec(config.public_from, confine=True, field="public_from",
                                                      also=also)
    if getattr(config, "dataset_root", None):
        changes["dataset_root"] = str(resolve_under_any(config.dataset_root, also, "dataset_root"))
    kwargs = getattr(config, "dataset_kwargs", None) or {}
    if kwargs.get("root"):
        changes["dataset_kwargs"] = dict(kwargs, root=str(resolve_under_any(str(kwargs["root"]), also, "root")))
    mp = getattr(config, "method_params", None) or {}
    if isinstance(mp.get("public_pool"), str) and mp["public_pool"] != "split":  # DPPL-Public's pool file
        changes["method_params"] = dict(mp, public_pool=str(resolve_under_any(mp["public_pool"], also,
                                                                               "public_pool")))
    changes = {k: v for k, v in changes.items() if getattr(config, k, None) != v}
    if not changes:
        return config
    if dataclasses.is_dataclass(config):
        return dataclasses.replace(config, **changes)
    out = copy.copy(config)
    for k, v in changes.items():
        setattr(out, k, v)
    return out
