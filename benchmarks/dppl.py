"""Benchmark: DPPL-Public utilities for an ImageNet-sized public pool on this machine's CPU.

Workload (paper App. E.3, Table 2): 1,281,167 public candidates x 512 features vs 5,000
private samples over 10 classes, float32. Each configuration runs in a fresh subprocess
(so peak RSS is per configuration) and is timed side by side with the others:

* path: ``noclip`` (d_min=0, d_max=2: class-sum fast path, a (C, d) x (d, block) product)
  and ``clip`` (d_min=0.5, d_max=1.5: full (5000 x block) cosine tile, clipped, summed);
* BLAS threads: 1 vs 2 (threadpoolctl);
* layout (clip path): ``private_major`` vs ``pool_major`` tiles; block sizes.

The pool is never materialized: a 65,536-row random float32 base (128 MiB) is read
cyclically block by block (content does not affect the cost of dense products), which is
how a memory-mapped feature file would be streamed. Peak memory is the subprocess's
``ru_maxrss`` (includes the Python/numpy baseline, reported separately).

Usage::

    python benchmarks/dppl.py              # full grid, prints a markdown table + JSON
    python benchmarks/dppl.py --quick      # 10 % of the pool, for a smoke test
    python benchmarks/dppl.py --tiny       # 20,000-row pool, 500 private rows, 1 thread, 3 configurations

The last line of stdout is one JSON object: the rows and the ratios measured side by side
(``clip_over_noclip``, ``pool_major_over_private_major``, ``two_over_one_thread_*``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

N_POOL = 1_281_167
DIM = 512
N_PRIVATE = 5_000
N_CLASSES = 10
BASE_ROWS = 65_536


class CyclicPool:
    """``(n, d)`` pool view that serves rows of a smaller base array cyclically."""

    def __init__(self, base, n):
        self.base = base
        self.shape = (n, base.shape[1])

    def __getitem__(self, sl):
        import numpy as np

        a, b = sl.start, sl.stop
        m = len(self.base)
        if a // m == (b - 1) // m:
            return self.base[a % m : a % m + (b - a)]
        return np.take(self.base, np.arange(a, b) % m, axis=0)


def _worker(cfg: dict) -> dict:
    import resource

    import numpy as np
    from threadpoolctl import threadpool_limits

    from mixdp_core.methods.prototypes.utilities import public_utilities

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rng = np.random.default_rng(0)
    n_pool = cfg["n_pool"]
    n_private = cfg.get("n_private", N_PRIVATE)
    base = rng.standard_normal((cfg.get("base_rows", BASE_ROWS), DIM), dtype=np.float32)
    pool = CyclicPool(base, n_pool)
    X = rng.standard_normal((n_private, DIM), dtype=np.float32)
    y = rng.integers(0, N_CLASSES, n_private)
    d_min, d_max = (0.0, 2.0) if cfg["path"] == "noclip" else (0.5, 1.5)
    rss_data = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with threadpool_limits(limits=cfg["threads"]):
        t0 = time.perf_counter()
        U = public_utilities(X, y, pool, n_classes=N_CLASSES, d_min=d_min, d_max=d_max,
                             block_size=cfg["block"], layout=cfg["layout"])
        dt = time.perf_counter() - t0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert U.shape == (N_CLASSES, n_pool) and np.isfinite(U).all()
    return {**cfg, "seconds": dt, "seconds_full_pool": dt * N_POOL / n_pool,
            "peak_rss_mib": rss1, "baseline_rss_mib": rss0, "data_rss_mib": rss_data,
            "output_mib": U.nbytes / 2**20}


def _grid(quick: bool, tiny: bool = False) -> list[dict]:
    if tiny:  # one thread, auto block: the fast path and the two clip layouts
        small = {"threads": 1, "block": None, "n_pool": 20_000, "n_private": 500, "base_rows": 4096}
        return [{"path": "noclip", "layout": "private_major", **small},
                {"path": "clip", "layout": "private_major", **small},
                {"path": "clip", "layout": "pool_major", **small}]
    n = N_POOL // 10 if quick else N_POOL
    grid = []
    for threads in (1, 2):
        grid.append({"path": "noclip", "threads": threads, "layout": "private_major", "block": None, "n_pool": n})
        for layout in ("private_major", "pool_major"):
            for block in (None, 1024, 8192):
                grid.append({"path": "clip", "threads": threads, "layout": layout, "block": block, "n_pool": n})
    return grid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="20,000-row pool, 3 configurations (tests)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(_worker(json.loads(args.worker))))
        return
    rows = []
    env = dict(os.environ, OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2", MKL_NUM_THREADS="2")
    for cfg in _grid(args.quick, args.tiny):
        out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(cfg)], capture_output=True,
                             text=True, env=env, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(f"{r['path']:7s} threads={r['threads']} {r['layout']:13s} block={str(r['block']):5s} "
              f"{r['seconds_full_pool']:7.1f} s  peak {r['peak_rss_mib']:7.0f} MiB", flush=True)
    print("\n| path | threads | layout | block | seconds (full pool) | peak RSS MiB |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['path']} | {r['threads']} | {r['layout']} | {r['block'] or 'auto'} | "
              f"{r['seconds_full_pool']:.1f} | {r['peak_rss_mib']:.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)

    def sec(path, threads, layout, block):
        return next((r["seconds"] for r in rows if (r["path"], r["threads"], r["layout"], r["block"])
                     == (path, threads, layout, block)), None)

    res = {"benchmark": "dppl", "n_pool": rows[0]["n_pool"], "n_private": rows[0].get("n_private", N_PRIVATE),
           "dim": DIM, "rows": rows}
    for th in (1, 2):
        nc, pm, qm = sec("noclip", th, "private_major", None), sec("clip", th, "private_major", None), \
            sec("clip", th, "pool_major", None)
        if nc and pm:
            res[f"clip_over_noclip_threads{th}"] = pm / nc
        if pm and qm:
            res[f"pool_major_over_private_major_threads{th}"] = qm / pm
    for path, layout in (("noclip", "private_major"), ("clip", "private_major"), ("clip", "pool_major")):
        one, two = sec(path, 1, layout, None), sec(path, 2, layout, None)
        if one and two:
            res[f"two_over_one_thread_{path}_{layout}"] = two / one
    print(json.dumps(res, allow_nan=False))


if __name__ == "__main__":
    main()
