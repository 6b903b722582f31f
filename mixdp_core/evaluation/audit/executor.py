"""How an audit runs its many independent trainings: one small executor interface.

An audit (LiRA reference models, black-box canary trials, white-box canary runs) is a list
of independent, picklable jobs ``fn(item) -> result``. :func:`map_jobs` runs them through an
*executor*: any callable ``executor(fn, items) -> iterable of results in order``.

Built-ins: ``"sequential"`` (default; also what the tests use), ``"threads"`` and
``"processes"`` (``concurrent.futures`` pools of ``max_workers``). **Sweep engine:** the
layers above this one (``mixdp audit --executor local|ray``, the app) pass
``executor=functools.partial(mixdp_core.runs.sweep.map_trainings, backend=...)``, so audits
run their trainings on the same process pool / Ray executors as sweeps (the evaluation layer
itself does not import ``runs``).
"""

from __future__ import annotations

import concurrent.futures as cf
import os
from typing import Any, Callable, Iterable, Optional, Sequence, Union

Executor = Callable[[Callable[[Any], Any], Sequence[Any]], Iterable[Any]]

#: Used when no executor is passed (library calls, tests).
DEFAULT_EXECUTOR: Union[str, Executor] = "sequential"


def _sequential(fn, items):
    for it in items:
        yield fn(it)


def _pool(kind: str, max_workers: Optional[int]) -> Executor:
    def run(fn, items):
        cls = cf.ThreadPoolExecutor if kind == "threads" else cf.ProcessPoolExecutor
        with cls(max_workers=max_workers or min(len(items), os.cpu_count() or 1)) as ex:
            yield from ex.map(fn, items)

    return run


def resolve(executor: Union[None, str, Executor], max_workers: Optional[int] = None) -> Executor:
    """The executor callable for ``None`` (default), a built-in name, or a callable."""
    ex = DEFAULT_EXECUTOR if executor is None else executor
    if callable(ex):
        return ex
    if ex == "sequential":
        return _sequential
    if ex in ("threads", "processes"):
        return _pool(ex, max_workers)
    raise ValueError(f"executor: expected 'sequential', 'threads', 'processes' or a callable, got {ex!r}")


def map_jobs(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    *,
    executor: Union[None, str, Executor] = None,
    progress: Optional[Callable[[int, int], None]] = None,
    max_workers: Optional[int] = None,
) -> list[Any]:
    """Run ``fn`` on every item through ``executor``; results in input order.

    ``progress(done, total)`` is called after each finished job (and once with 0 first).
    """
    items = list(items)
    total = len(items)
    if progress is not None:
        progress(0, total)
    out = []
    for i, r in enumerate(resolve(executor, max_workers)(fn, items), 1):
        out.append(r)
        if progress is not None:
            progress(i, total)
    return out
