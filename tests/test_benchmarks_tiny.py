"""Every benchmark runs at its ``--tiny`` size and ends with one JSON object on its last stdout line.

``benchmarks/_*.py`` are helper modules (earlier versions timed side by side), not benchmarks.
Each benchmark runs in its own process on an isolated feature cache, run store and temp folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))
#: train.py --tiny is run (and its keys checked) by tests/test_benchmark_train.py
TINY_HERE = [p for p in BENCHMARKS if p.name != "train.py"]


def test_benchmarks_found():
    assert len(BENCHMARKS) >= 10, BENCHMARKS


@pytest.mark.timeout(150)
@pytest.mark.parametrize("path", TINY_HERE, ids=[p.stem for p in TINY_HERE])
def test_benchmark_tiny_ends_with_json(path, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MIXDP_HOME": str(tmp_path / "home"),
           "MIXDP_CACHE": str(tmp_path / "cache"), "TMPDIR": str(tmp), "MIXDP_OFFLINE": "1"}
    p = subprocess.run([sys.executable, str(path), "--tiny"], capture_output=True, text=True, timeout=120,
                       cwd=ROOT, env=env)
    assert p.returncode == 0, f"{path.name} --tiny exited {p.returncode}:\n{p.stderr[-3000:]}"
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert lines, f"{path.name} --tiny printed nothing:\n{p.stderr[-3000:]}"
    res = json.loads(lines[-1])
    assert isinstance(res, dict) and res, lines[-1]
