"""benchmarks/train.py runs at tiny size and ends with the step-ratio JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_train_benchmark_tiny_prints_ratio_json_last():
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train.py"), "--tiny"], capture_output=True,
                       text=True, timeout=300, cwd=ROOT, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    last = p.stdout.strip().splitlines()[-1]
    res = json.loads(last)
    for key in ("step_over_stream_floor_noisygd", "step_over_stream_floor_adamix", "opacus_epoch_over_step",
                "step_over_stream_floor_noisygd_before", "best_block_rows", "best_threads", "tracked_over_untracked",
                "tracked_over_untracked_numpy"):
        assert key in res, key
    for key in ("step_over_stream_floor_noisygd", "step_over_stream_floor_adamix", "opacus_epoch_over_step",
                "tracked_over_untracked", "ownpull_fresh_over_inplace"):
        assert isinstance(res[key], float) and res[key] > 0, key
