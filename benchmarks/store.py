"""Benchmark: cost of writing step records to the run store, before and after batching.

Before (the former runner): the runner called ``RunStore.append_steps`` every 0.5 s, each call
opening a new SQLite connection (and closing it: with WAL, closing the last connection
checkpoints the log). After: :class:`mixdp_core.runs.store.StepWriter` writes once the oldest
buffered record is ~1 s old, on one connection kept open for the run.

Both are timed in this process, whole simulated runs alternating, on batches of the same records:
per-write wall and CPU seconds (medians), and the total for a run of ``--steps`` records
written at each policy's cadence (``--step-ms`` of training per step). Last line: JSON.

Usage::

    python benchmarks/store.py [--steps 2000] [--step-ms 45] [--repeats 5]
    python benchmarks/store.py --tiny        # 200 records, 2 repeats (smoke test)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _record(i: int) -> dict:
    return {"step": i, "total_steps": 10_000, "train_loss": 0.5, "test_error": None, "clip_norm": 0.3,
            "epsilon_spent": 1.0, "extra": {"lr": 0.1, "weight_decay": 1.0}}


def main(argv=None):
    from mixdp_core.runs.store import RunStore

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000, help="records in the simulated run")
    ap.add_argument("--step-ms", type=float, default=45.0, help="training time per step (sets the batch sizes)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tiny", action="store_true", help="200 records, 2 repeats (smoke test)")
    a = ap.parse_args(argv)
    if a.tiny:
        a.steps, a.repeats = min(a.steps, 200), min(a.repeats, 2)
    per_old = max(1, int(round(500.0 / a.step_ms)))  # records per write: 0.5 s cadence
    per_new = max(1, int(round(900.0 / a.step_ms)))  # ~0.9 s cadence (oldest record 0.9 * 1 s old)
    root = tempfile.mkdtemp(prefix="mixdp-store-bench-")
    st = RunStore(root)
    old_w, old_c, new_w, new_c = [], [], [], []
    for r in range(a.repeats):  # alternate whole simulated runs (no connection open across them)
        rid_old = st.create_run({"method": "old"}, config_hash=f"o{r}")
        for i in range(0, a.steps, per_old):
            batch = [_record(j) for j in range(i, min(a.steps, i + per_old))]
            w0, c0 = time.perf_counter(), time.process_time()
            st.append_steps(rid_old, batch)
            old_w.append(time.perf_counter() - w0)
            old_c.append(time.process_time() - c0)
        rid_new = st.create_run({"method": "new"}, config_hash=f"n{r}")
        writer = st.step_writer(rid_new, max_age_s=1e9, max_steps=10**9, background=False)
        for i in range(0, a.steps, per_new):
            batch = [_record(j) for j in range(i, min(a.steps, i + per_new))]
            w0, c0 = time.perf_counter(), time.process_time()
            writer.extend(batch)
            writer.flush()
            new_w.append(time.perf_counter() - w0)
            new_c.append(time.process_time() - c0)
        w0, c0 = time.perf_counter(), time.process_time()
        writer.close()
        new_w[-1] += time.perf_counter() - w0
        new_c[-1] += time.process_time() - c0
    n_old = -(-a.steps // per_old)
    n_new = -(-a.steps // per_new)
    res = {
        "records_per_write_before": per_old, "records_per_write_after": per_new,
        "write_wall_s_before": float(np.median(old_w)), "write_wall_s_after": float(np.median(new_w)),
        "write_cpu_s_before": float(np.median(old_c)), "write_cpu_s_after": float(np.median(new_c)),
        "writes_per_run_before": n_old, "writes_per_run_after": n_new,
    }
    res["run_write_wall_s_before"] = float(np.sum(old_w)) / a.repeats  # mean total per run
    res["run_write_wall_s_after"] = float(np.sum(new_w)) / a.repeats
    res["run_write_overhead_ratio_after_over_before"] = res["run_write_wall_s_after"] / res["run_write_wall_s_before"]
    print(f"## step-record writes ({a.steps} records, {a.step_ms:g} ms/step, per-write medians, per-run totals averaged)")
    print("| quantity | before | after |")
    print("|---|---|---|")
    for k in ("records_per_write", "write_wall_s", "write_cpu_s", "writes_per_run", "run_write_wall_s"):
        b, f = res[f"{k}_before"], res[f"{k}_after"]
        print(f"| {k} | {b:.4g} | {f:.4g} |")
    shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(res, sort_keys=True, allow_nan=False))


if __name__ == "__main__":
    main()
