"""Benchmark: DPPL-Public utilities for an ImageNet-sized public pool on this machine's CPU.

Workload (paper App. E.3, Table 2): 1,281,167 public candidates x 512 features vs 5,000
private samples over 10 classes, float32. Each configuration runs in a fresh subprocess
(so peak RSS is per configuration) and is timed side by side with the others:

* path: ``noclip`` (d_min=0, d_max=2: class-sum fast path, a (C, d) x (d, block) product)
  and ``clip`` (d_min=0.5, d_max=1.5: full (5000 x block) cosine tile, clipped, summed);
* BLAS threads: 1 vs 2 (threadpoolctl);
* layout (clip path): ``private_major`` vs ``pool_major`` tiles; block sizes;
* ``gemm``: the floor of the clip path, the same ``(block, 5000)`` products ``P @ E.T`` alone
  (no normalisation, clip or class sums) at the same threads: ``clip_over_gemm`` says how close
  the clipped utilities run to the BLAS on this machine, ``gemm_gflops`` at what rate (the
  clipped path is 2 N_pool N_private d = 6.6 TFLOP, compute-bound);
* ``--devices cuda``: both paths with ``device="cuda"`` (torch on the GPU; the pool is still
  read block by block from host memory and copied), timed after one tiny warm-up call (the CUDA
  context), beside the CPU rows of the same run.

The pool is never materialized: a 65,536-row random float32 base (128 MiB) is read
cyclically block by block (content does not affect the cost of dense products), which is
how a memory-mapped feature file would be streamed. Peak memory is the subprocess's
``ru_maxrss`` (includes the Python/numpy baseline, reported separately).

Usage::

    python benchmarks/dppl.py              # full grid, prints a markdown table + JSON
    python benchmarks/dppl.py --quick      # 10 % of the pool, for a smoke test
    python benchmarks/dppl.py --tiny       # 20,000-row pool, 500 private rows, 1 thread, 4 configurations
    python benchmarks/dppl.py --devices cpu,cuda --threads 16 --layouts pool_major --blocks auto   # GPU machine

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

    from mixdp_core.methods.prototypes.utilities import default_block_size, public_utilities

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rng = np.random.default_rng(0)
    n_pool = cfg["n_pool"]
    n_private = cfg.get("n_private", N_PRIVATE)
    base = rng.standard_normal((cfg.get("base_rows", BASE_ROWS), DIM), dtype=np.float32)
    pool = CyclicPool(base, n_pool)
    X = rng.standard_normal((n_private, DIM), dtype=np.float32)
    y = rng.integers(0, N_CLASSES, n_private)
    d_min, d_max = (0.0, 2.0) if cfg["path"] == "noclip" else (0.5, 1.5)
    device = cfg.get("device", "cpu")
    precision = cfg.get("precision", "fp32")
    rss_data = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    torch_import = 0.0
    if precision != "fp32" or device != "cpu":  # torch's threads are its own, not a BLAS pool
        t0 = time.perf_counter()
        import torch

        torch.set_num_threads(cfg["threads"])
        torch_import = time.perf_counter() - t0
    with threadpool_limits(limits=cfg["threads"]):
        if device != "cpu":  # the CUDA context and torch's import are paid once per process
            public_utilities(X[:8], y[:8], base[:8], n_classes=N_CLASSES, d_min=d_min, d_max=d_max, device=device)
        t0 = time.perf_counter()
        if cfg["path"] == "gemm":
            U = _gemm_floor(X, pool, cfg["block"] or default_block_size(len(X)))
        else:
            U = public_utilities(X, y, pool, n_classes=N_CLASSES, d_min=d_min, d_max=d_max,
                                 block_size=cfg["block"], layout=cfg["layout"], device=device, precision=precision)
        dt = time.perf_counter() - t0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert np.isfinite(U).all()
    return {**cfg, "precision": precision, "seconds": dt, "seconds_full_pool": dt * N_POOL / n_pool,
            "torch_import_seconds": torch_import,
            "gflops": 2.0 * n_pool * n_private * DIM / dt / 1e9,
            "peak_rss_mib": rss1, "baseline_rss_mib": rss0, "data_rss_mib": rss_data,
            "output_mib": U.nbytes / 2**20}


def _gemm_floor(X, pool, block):
    """The clipped path's products alone: ``P @ X.T`` into one reused ``(block, n)`` tile."""
    import numpy as np

    tile = np.empty((block, len(X)), dtype=np.float32)
    Xt = np.ascontiguousarray(X).T
    n = pool.shape[0]
    for a in range(0, n, block):
        b = min(n, a + block)
        np.matmul(pool[a:b], Xt, out=tile[: b - a])
    return tile[:1]


def _grid(quick: bool, tiny: bool = False, threads=(1, 2), layouts=("private_major", "pool_major"),
          blocks=(None, 1024, 8192), devices=("cpu",), precisions=("fp32", "bf16")) -> list[dict]:
    if tiny:  # one thread, auto block: the fast path, the two clip layouts, bf16 and the floor
        small = {"threads": 1, "block": None, "n_pool": 20_000, "n_private": 500, "base_rows": 4096}
        return [{"path": "noclip", "layout": "private_major", **small},
                {"path": "clip", "layout": "private_major", **small},
                {"path": "clip", "layout": "pool_major", **small},
                {"path": "clip", "layout": "pool_major", "precision": "bf16", **small},
                {"path": "gemm", "layout": "pool_major", **small}]
    n = N_POOL // 10 if quick else N_POOL
    grid = []
    for th in threads:
        if "cpu" in devices:
            grid.append({"path": "noclip", "threads": th, "layout": "private_major", "block": None, "n_pool": n})
            for layout in layouts:
                for block in blocks:
                    grid.append({"path": "clip", "threads": th, "layout": layout, "block": block, "n_pool": n})
            for prec in precisions:
                if prec != "fp32":  # bf16 products (torch, CPU), its own tile size
                    grid.append({"path": "clip", "threads": th, "layout": "pool_major", "block": None, "n_pool": n,
                                 "precision": prec})
            grid.append({"path": "gemm", "threads": th, "layout": "pool_major", "block": None, "n_pool": n})
        for dev in devices:
            if dev != "cpu":
                grid += [{"path": p, "threads": th, "layout": "pool_major", "block": None, "n_pool": n,
                          "device": dev} for p in ("noclip", "clip")]
    return grid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="20,000-row pool, 3 configurations (tests)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--threads", default="1,2", help="BLAS thread counts, comma-separated")
    ap.add_argument("--layouts", default="private_major,pool_major", help="clip-path layouts")
    ap.add_argument("--blocks", default="auto,1024,8192", help="clip-path block sizes ('auto' or rows)")
    ap.add_argument("--devices", default="cpu", help="'cpu' and/or 'cuda', comma-separated")
    ap.add_argument("--precisions", default="fp32,bf16",
                    help="clip-path arithmetic on the CPU: 'fp32' and/or 'bf16' (bfloat16 products), comma-separated")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(_worker(json.loads(args.worker))))
        return
    rows = []
    threads = tuple(int(t) for t in args.threads.split(","))
    blocks = tuple(None if b == "auto" else int(b) for b in args.blocks.split(","))
    grid = _grid(args.quick, args.tiny, threads, tuple(args.layouts.split(",")), blocks,
                 tuple(args.devices.split(",")), tuple(args.precisions.split(",")))
    nt = str(max(threads))
    env = dict(os.environ, OMP_NUM_THREADS=nt, OPENBLAS_NUM_THREADS=nt, MKL_NUM_THREADS=nt)
    for cfg in grid:
        out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(cfg)], capture_output=True,
                             text=True, env=env, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(f"{r['path']:7s} {r.get('device', 'cpu'):4s} {r['precision']:4s} threads={r['threads']} {r['layout']:13s} "
              f"block={str(r['block']):5s} {r['seconds_full_pool']:7.1f} s  {r['gflops']:7.1f} GFLOP/s  "
              f"peak {r['peak_rss_mib']:7.0f} MiB", flush=True)
    print("\n| path | device | precision | threads | layout | block | seconds (full pool) | GFLOP/s (2 n N d / s) | "
          "peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['path']} | {r.get('device', 'cpu')} | {r['precision']} | {r['threads']} | {r['layout']} | "
              f"{r['block'] or 'auto'} | "
              f"{r['seconds_full_pool']:.1f} | {r['gflops']:.0f} | {r['peak_rss_mib']:.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)

    def sec(path, threads, layout, block, device="cpu", precision="fp32"):
        key = (path, threads, layout, block, device, precision)
        return next((r["seconds"] for r in rows if (r["path"], r["threads"], r["layout"], r["block"],
                                                     r.get("device", "cpu"), r["precision"]) == key), None)

    res = {"benchmark": "dppl", "n_pool": rows[0]["n_pool"], "n_private": rows[0].get("n_private", N_PRIVATE),
           "dim": DIM, "rows": rows}
    for th in threads:
        clip, floor = sec("clip", th, "pool_major", None), sec("gemm", th, "pool_major", None)
        if clip and floor:
            res[f"clip_over_gemm_threads{th}"] = clip / floor
            res[f"gemm_gflops_threads{th}"] = 2.0 * rows[0]["n_pool"] * res["n_private"] * DIM / floor / 1e9
        for path in ("noclip", "clip"):
            cpu_s = sec(path, th, "pool_major" if path == "clip" else "private_major", None)
            for dev in args.devices.split(","):
                gpu_s = sec(path, th, "pool_major", None, dev) if dev != "cpu" else None
                if gpu_s:
                    res[f"{path}_{dev}_seconds_full_pool"] = gpu_s * N_POOL / rows[0]["n_pool"]
                    if cpu_s:
                        res[f"{path}_cpu{th}_over_{dev}"] = cpu_s / gpu_s
        nc, pm, qm = sec("noclip", th, "private_major", None), sec("clip", th, "private_major", None), \
            sec("clip", th, "pool_major", None)
        if nc and pm:
            res[f"clip_over_noclip_threads{th}"] = pm / nc
        if pm and qm:
            res[f"pool_major_over_private_major_threads{th}"] = qm / pm
        bf = sec("clip", th, "pool_major", None, precision="bf16")
        if bf:  # the clipped utilities with bf16 products, import of torch excluded (reported per row)
            res[f"clip_bf16_seconds_full_pool_threads{th}"] = bf * N_POOL / rows[0]["n_pool"]
            if qm:
                res[f"clip_fp32_over_bf16_threads{th}"] = qm / bf
    for path, layout in (("noclip", "private_major"), ("clip", "private_major"), ("clip", "pool_major")):
        one, two = sec(path, 1, layout, None), sec(path, 2, layout, None)
        if one and two and 2 in threads:
            res[f"two_over_one_thread_{path}_{layout}"] = two / one
    print(json.dumps(res, allow_nan=False))


if __name__ == "__main__":
    main()
