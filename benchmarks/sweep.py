"""Benchmark: the sweep engine against the sum of its single runs, side by side.

Workload (the issue's): 24 digits/pixels runs = 3 AdaMix-family methods (adamix, ngd, ppgd)
× 4 target ε (0.5, 1, 3, 8) × 2 seeds (σ = 20). Measured, in this order, on warm feature
caches:

1. ``singles``: every run alone, in this process (``runner.train`` on preloaded features),
   twice (before and after the sweeps; the mean is used): their sum, and the
   **slowest-worker share** = the makespan of the longest-first greedy schedule of those run
   times on ``--workers`` workers (what a perfect 2-worker sweep would take);
2. ``local``: ``run_sweep(backend="local", workers=N)`` into a fresh store, wall time
   including pool start, feature shipping, and the driver's store writes;
   **ratio = local wall / slowest-worker share** (target <= 1.3); ``--sessions both``
   times it with the workers in the driver's session and each in its own session
   (``LocalExecutor(own_session=...)``), alternated ``--repeats`` times;
3. ``ray`` (unless ``--no-ray``): the same sweep on a local Ray (started by this script with
   its own temp dir and ``num_cpus = workers``, warmed up before timing);
   **Ray overhead per run = (ray wall − local wall) / runs**.

The load average of the machine is printed with the results (a shared CPU inflates every
ratio), and ``ratio_local_vs_in_sweep_share`` = local wall / the same schedule of the run times
measured *inside* the sweep, i.e. the engine's own overhead without the CPU contention. On a
shared Linux machine with ``kernel.sched_autogroup_enabled = 1`` all processes of one session
share one CPU share: two local workers then get no more CPU than one process (runs take ~2x
longer each), while Ray's workers live in the raylet's own session and get their own share;
the JSON reports the setting. The last line is one JSON object with every number.

Usage::

    python benchmarks/sweep.py                 # 2 workers, local + ray
    python benchmarks/sweep.py --workers 2 --no-ray
    python benchmarks/sweep.py --tiny          # 2 runs (adamix, ngd at ε = 3), local pool only (tests)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def lpt_makespan(times: list[float], workers: int) -> float:
    """Longest-processing-time-first greedy schedule length on ``workers`` machines."""
    loads = [0.0] * workers
    for t in sorted(times, reverse=True):
        i = loads.index(min(loads))
        loads[i] += t
    return max(loads)


def singles(configs, feats) -> list[float]:
    from mixdp_core.runs.runner import train

    out = []
    for c in configs:
        t0 = time.perf_counter()
        r = train(c, features=feats[0], public_features=feats[1])
        out.append(time.perf_counter() - t0)
        assert r.status == "completed", r.error
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--sessions", choices=("own", "shared", "both"), default="own",
                    help="local workers each in its own session (default, see LocalExecutor), in the "
                         "driver's session, or both side by side")
    ap.add_argument("--repeats", type=int, default=1, help="local sweeps per session mode (alternated)")
    ap.add_argument("--tiny", action="store_true",
                    help="2 runs (adamix and ngd at ε = 3, one seed) on the local process pool; never starts Ray")
    args = ap.parse_args(argv)
    if args.tiny:
        args.no_ray, args.repeats = True, 1
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from mixdp_core.runs.runner import _load_features
    from mixdp_core.runs.store import RunStore
    from mixdp_core.runs.sweep import SweepSpec, run_sweep

    if args.tiny:
        spec = SweepSpec(methods=("adamix", "ngd"), epsilons=(3,), seeds=(0,), params={"noise_multiplier": 20.0})
    else:
        spec = SweepSpec(methods=("adamix", "ngd", "ppgd"), epsilons=(0.5, 1, 3, 8), seeds=(0, 1),
                         params={"noise_multiplier": 20.0})
    configs = spec.configs()
    n = len(configs)
    feats = _load_features(configs[0], cache_dir=None, progress=None)  # warms the feature cache
    load0 = os.getloadavg()

    s1 = singles(configs, feats)
    # local sweeps, workers in the driver's session ("shared") and each in its own ("own"),
    # alternated (shared, own, own, shared, ...) so that a drifting machine load hits both alike
    walls: dict[str, list[float]] = {"shared": [], "own": []}
    order = [("shared", "own"), ("own", "shared")]
    local = None
    for rep in range(args.repeats):
        for mode in order[rep % 2]:
            if mode == "shared" and args.sessions == "own" or mode == "own" and args.sessions == "shared":
                continue
            os.environ["MIXDP_WORKER_SESSION"] = "1" if mode == "own" else "0"
            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="mixdp_bench_") as st_dir:  # removed after: none left in /tmp
                out = run_sweep(configs, store=RunStore(st_dir), workers=args.workers)
            walls[mode].append(time.perf_counter() - t0)
            assert out.n_failed == 0
            local = local or out
    os.environ.pop("MIXDP_WORKER_SESSION", None)
    main_mode = "own" if walls["own"] else "shared"
    local_s = sum(walls[main_mode]) / len(walls[main_mode])
    s2 = singles(configs, feats)
    single = [(a + b) / 2 for a, b in zip(s1, s2)]
    share = lpt_makespan(single, args.workers)
    res = {
        "benchmark": "sweep", "tiny": args.tiny, "runs": n, "workers": args.workers, "sum_single_s": round(sum(single), 3),
        "sum_single_pass1_s": round(sum(s1), 3), "sum_single_pass2_s": round(sum(s2), 3),
        "slowest_worker_share_s": round(share, 3), "local_sweep_s": round(local_s, 3),
        "ratio_local_vs_share": round(local_s / share, 3), "local_mode": main_mode,
        "local_sweep_s_by_session": {k: [round(x, 3) for x in v] for k, v in walls.items() if v},
        "ratio_local_vs_share_by_session": {k: round(sum(v) / len(v) / share, 3) for k, v in walls.items() if v},
        "sum_in_sweep_run_s": round(sum(r.metrics.get("wall_seconds") or 0 for r in local.results), 3),
    }
    # the same ratio against the run times measured inside the sweep: engine overhead alone,
    # without the slow-down of two processes sharing a loaded CPU
    in_sweep = lpt_makespan([r.metrics.get("wall_seconds") or 0 for r in local.results], args.workers)
    res["ratio_local_vs_in_sweep_share"] = round(local_s / in_sweep, 3)
    print(f"singles: sum {sum(single):.2f} s (passes {sum(s1):.2f} / {sum(s2):.2f}), slowest-worker share on "
          f"{args.workers} workers {share:.2f} s", file=sys.stderr)
    print(f"local sweep ({args.workers} workers): {local_s:.2f} s -> ratio {local_s / share:.2f} "
          f"(target <= 1.3)", file=sys.stderr)

    if not args.no_ray:
        import secrets

        # private token (Ray reads the auth mode at import): a new local Ray would otherwise use
        # or create ~/.ray/auth_token, shared with every Ray user of the machine
        os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
        try:
            import ray
        except ImportError:
            res["ray"] = "not installed"
        else:
            tmp = tempfile.mkdtemp(prefix="rb", dir="/tmp")
            ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False, _temp_dir=tmp,
                     runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[1]),
                                               "OMP_NUM_THREADS": "1"}})
            try:
                ray.get([ray.remote(lambda: 0).remote() for _ in range(args.workers)])  # warm workers
                t0 = time.perf_counter()
                with tempfile.TemporaryDirectory(prefix="mixdp_bench_") as st_dir:
                    rs = run_sweep(configs, store=RunStore(st_dir), backend="ray")
                ray_s = time.perf_counter() - t0
                assert rs.n_failed == 0
            finally:
                ray.shutdown()
                shutil.rmtree(tmp, ignore_errors=True)
            res.update(ray_sweep_s=round(ray_s, 3), ray_overhead_per_run_s=round((ray_s - local_s) / n, 3),
                       ratio_ray_vs_share=round(ray_s / share, 3))
            print(f"ray sweep: {ray_s:.2f} s -> overhead per run vs local {(ray_s - local_s) / n:+.3f} s",
                  file=sys.stderr)
    res["loadavg_1m_before_after"] = [round(load0[0], 2), round(os.getloadavg()[0], 2)]
    res["cpus"] = os.cpu_count()
    try:
        res["sched_autogroup_enabled"] = int(Path("/proc/sys/kernel/sched_autogroup_enabled").read_text())
    except (OSError, ValueError):
        pass
    print(json.dumps(res, allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
