"""Benchmark: total CPU (user + sys) of a small training run from the command line.

Measures ``mixdp train --dataset digits --encoder pixels --method adamix --epsilon 3 --json``
(target: <= 1.5 s of CPU in total with a warm cache), run as a child process with
the feature cache warmed by one untimed run, and, for reference, a bare ``python -c pass``,
the import of the CLI, and the import of the training stack. CPU time comes from
``resource.getrusage(RUSAGE_CHILDREN)`` around each child, so other processes sharing the
machine do not inflate it the way they inflate wall time. Medians of ``--repeats`` runs,
interleaved. Prints a table, then one JSON object (key ``cpu_seconds``) as the last line.

"Warm" also means warm bytecode: the children may write ``__pycache__`` (the untimed run
compiles the package once, as ``pip install`` does at install time), even when the calling
shell sets ``PYTHONDONTWRITEBYTECODE``; otherwise every run would recompile the ~40 modules
of ``mixdp_core`` on the path (~0.1-0.2 s of CPU) and measure the environment, not the code.
``--no-bytecode`` keeps the caller's setting (as this benchmark first measured: with
``PYTHONDONTWRITEBYTECODE`` set, every child recompiles).

Usage::

    python benchmarks/startup.py [--repeats 5] [--no-bytecode] [--baseline OTHER_CHECKOUT] [--tiny]

``--tiny`` (smoke test) times each command once after the warm-up run.

``--baseline`` also times the train command of another checkout of the project (e.g. an
extracted older commit), interleaved with this one, under the same settings (key
``cpu_seconds_baseline``): a before/after pair measured side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ["train", "--dataset", "digits", "--encoder", "pixels", "--method", "adamix", "--epsilon", "3", "--json"]
CLI = "import sys; from mixdp_core.cli import main; sys.exit(main())"


def _child_cpu(argv, env, root=ROOT) -> tuple[float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(argv, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, p.returncode


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-bytecode", action="store_true", help="keep PYTHONDONTWRITEBYTECODE as the caller set it")
    ap.add_argument("--baseline", default=None, help="another checkout whose train command is timed alongside")
    ap.add_argument("--tiny", action="store_true", help="one timed run of each command (smoke test)")
    a = ap.parse_args(argv)
    if a.tiny:
        a.repeats = 1
    tmp = tempfile.mkdtemp(prefix="mixdp-startup-")
    try:
        _run(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(a, tmp: str) -> None:
    env = {**os.environ, "MIXDP_HOME": str(Path(tmp) / "home"), "MIXDP_CACHE": str(Path(tmp) / "cache"),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    if not a.no_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    bytecode = "PYTHONDONTWRITEBYTECODE" not in env
    cases = {
        "python_bare": [sys.executable, "-c", "pass"],
        "import_cli": [sys.executable, "-c", "import mixdp_core.cli"],
        "import_training_stack": [sys.executable, "-c", "import mixdp_core.methods, mixdp_core.runs.runner, mixdp_core.evaluation"],
        "train_digits_adamix": [sys.executable, "-c", CLI, *TRAIN],
    }
    roots = {k: ROOT for k in cases}
    envs = {k: env for k in cases}
    if a.baseline:
        base = Path(a.baseline).resolve()
        cases["train_digits_adamix_baseline"] = cases["train_digits_adamix"]
        roots["train_digits_adamix_baseline"] = base
        envs["train_digits_adamix_baseline"] = {**env, "PYTHONPATH": str(base) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for k in [k for k in cases if k.startswith("train_")]:  # warm the feature and bytecode caches
        cpu, rc = _child_cpu(cases[k], envs[k], roots[k])
        if rc != 0:
            raise SystemExit(f"{k}: train command failed (exit {rc})")
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(a.repeats):
        for k, argv_ in cases.items():
            c, rc = _child_cpu(argv_, envs[k], roots[k])
            if rc != 0:
                raise SystemExit(f"{k} failed (exit {rc})")
            times[k].append(c)
    med = {k: float(np.median(v)) for k, v in times.items()}
    print(f"## CPU seconds (user + sys), medians of {a.repeats} interleaved runs, warm feature cache")
    print("| command | CPU s |")
    print("|---|---|")
    for k, v in med.items():
        print(f"| {k} | {v:.3f} |")
    res = {"cpu_seconds": med["train_digits_adamix"], "target_cpu_seconds": 1.5, "repeats": a.repeats,
           "bytecode_cache": bytecode, "load_average": os.getloadavg()[0],
           **{f"cpu_seconds_{k}": v for k, v in med.items()}}
    if a.baseline:
        res["cpu_seconds_baseline"] = med["train_digits_adamix_baseline"]
    res["train_over_python_bare"] = med["train_digits_adamix"] / max(med["python_bare"], 1e-9)
    print(json.dumps(res, sort_keys=True, allow_nan=False))


if __name__ == "__main__":
    main()
