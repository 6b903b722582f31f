"""One sweep engine: a grid of runs, executed locally or on Ray, recorded in one run store.

Everything that trains many models goes through here: ``mixdp sweep``, the Compare page,
``mixdp reproduce`` (the papers' figures) and the audits. Three parts, each with its
contract in its module docstring:

* :mod:`.spec` — :class:`SweepSpec`, the grid (methods × ε × seeds × public shots ×
  imbalance ratios × private caps × encoders) from CLI flags or a TOML file, expanded into
  :class:`SweepPoint` s (label + ``RunConfig``). Trains nothing.
* :mod:`.executors` — :data:`EXECUTORS` (``local``: a process pool that survives worker
  loss; ``ray``: one Ray task per item) and :func:`map_trainings`, the ordered front end for
  trainings that are not ``RunConfig`` s (audits). Never touch the run store.
* :mod:`.driver` — :func:`run_sweep`: reuses completed runs with the same config hash,
  ships the features once, trains the rest on an executor and writes every result to the
  store (the driver only), tagged with a deterministic, resumable sweep id.

This package re-exports the public names of the three, so
``from mixdp_core.runs.sweep import SweepSpec, run_sweep`` is the import to use.

Example::

    from mixdp_core.runs.sweep import SweepSpec, run_sweep
    spec = SweepSpec(dataset="digits", encoders=("pixels",), methods=("adamix", "ngd"),
                     epsilons=(0.5, 1, 3), seeds=(0, 1))
    outcome = run_sweep(spec.configs(), store=RunStore(), backend="local", workers=2, spec=spec)
"""

from __future__ import annotations

from .driver import (
    SweepOutcome,
    SweepResult,
    get_sweep,
    list_sweeps,
    resume_spec,
    run_sweep,
    sweep_id_for,
)
from .executors import (
    EXECUTORS,
    LocalExecutor,
    RayExecutor,
    TaskError,
    default_workers,
    make_executor,
    map_trainings,
)
from .spec import (
    DEFAULT_MAX_GRID_POINTS,
    MAX_AXIS_VALUES,
    MAX_CONFIG_BYTES,
    SweepPoint,
    SweepSpec,
    Variant,
    max_grid_points,
)

__all__ = [
    "DEFAULT_MAX_GRID_POINTS",
    "EXECUTORS",
    "MAX_AXIS_VALUES",
    "MAX_CONFIG_BYTES",
    "LocalExecutor",
    "RayExecutor",
    "SweepOutcome",
    "SweepPoint",
    "SweepResult",
    "SweepSpec",
    "TaskError",
    "Variant",
    "default_workers",
    "get_sweep",
    "list_sweeps",
    "make_executor",
    "map_trainings",
    "max_grid_points",
    "resume_spec",
    "run_sweep",
    "sweep_id_for",
]
