"""Benchmark: NoisyGD / AdaMix training speed and the Thm.-3 schedule, measured side by side.

Sections (each prints its ratios; ``--only`` picks some):

``layouts``  the two dense products of a full-batch step (``X @ W`` and ``X^T @ R``) for
             numpy and torch, 1 vs 2 threads, ``X.T @ R`` vs ``(R.T @ X).T``.
``step``     time of one NoisyGD (no projection) / AdaMix (paper projection, rank projection)
             step, including the public part, noise, update and pDP bookkeeping, divided by
             the floor = best ``X @ W`` + best ``X^T @ R`` of the same shape (target <= 1.5x).
``blocks``   the private release with row blocks of different sizes (forward and backward
             product per block keeps the block in cache: one pass over X per step).
``opacus``   one epoch of Opacus DP-SGD on the same bias-free linear head, full (logical)
             batch, same data, vs one NoisyGD step (= one epoch) (target >= 10x).
``e2e``      end-to-end ``adamix`` at epsilon = 3 (sigma = 20) on synthetic class-structured
             features of CIFAR-10 size (50,000 x 1,280, 10 classes, 10,000 test) (target <= 30 s).
``schedule`` Thm.-3 schedule vs the paper's constant learning rates on scikit-learn digits
             at epsilon in {1, 8}: mean test error over seeds for every private method.
``ownpull``  the guard's leave-one-out bookkeeping (``engine._OwnPull``: two N x C float64
             arrays updated at every step) at many classes (49,800 x 100, the GPU fit of
             docs/results/gpu.md): its in-place updates against the fresh-array updates they
             replaced (kept here as the reference, same results to the bit), interleaved
             repeats, wall time: ``ownpull_fresh_over_inplace``.

``ratios``   one NoisyGD / AdaMix step of the real loop divided by one streaming
             pass over X (``X.sum()``): with the default kernel (the fused numba kernel at this
             size), with the blocked numpy kernel (``*_numpy``) and before the fused
             kernel (commit 3902d5c, kept in ``benchmarks/_release_v0.py``); the GFLOP/s of the
             two BLAS products in cache and of both release kernels; the block size and thread
             count of the release, the torch kernel (CPU; CUDA when available, else
             ``torch_cuda_* = null`` and ``torch_cuda_skipped`` says why) and Opacus' epoch
             over one step, and AdaMix's projection norms alone (``pdp_norms_over_stream``,
             fused path; ``pdp_norms_dense_over_stream`` the dense map it replaced), and the cost
             of the guard's leave-one-out tracking (``step_over_stream_floor_noisygd_tracked*``,
             ``tracked_over_untracked*``: the same step with ``track_self_pull``). Each ratio is the median over interleaved repeats in this process; 1-thread
             ratios use process CPU time (robust to other processes sharing the cores), thread
             comparisons use wall time. Prints one JSON object as the **last line**.

Workload sizes are the issue's; ``--quick`` shrinks them 10x for a smoke test, ``--tiny`` to a
few hundred rows (for the test that checks the JSON keys).

Usage::

    python benchmarks/train.py                  # everything
    python benchmarks/train.py --only step,e2e  # some sections
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

N, D, C = 50_000, 1_280, 10


def _best(f, repeat=5):
    f()
    ts = []
    for _ in range(repeat):
        a = time.perf_counter()
        f()
        ts.append(time.perf_counter() - a)
    return min(ts)


def _data(n, d, c, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d), dtype=np.float32)
    return X, rng.standard_normal((d, c), dtype=np.float32), rng.standard_normal((n, c), dtype=np.float32)


def bench_layouts(n, d, c):
    import threadpoolctl
    import torch

    X, W, R = _data(n, d, c)
    Xt, Wt, Rt = torch.from_numpy(X), torch.from_numpy(W), torch.from_numpy(R)
    rows = []
    for threads in (1, 2):
        with threadpoolctl.threadpool_limits(threads):
            torch.set_num_threads(threads)
            rows.append(("numpy", threads, "X @ W", _best(lambda: X @ W)))
            rows.append(("numpy", threads, "X.T @ R", _best(lambda: X.T @ R)))
            rows.append(("numpy", threads, "(R.T @ X).T", _best(lambda: (R.T @ X).T)))
            rows.append(("torch", threads, "X @ W", _best(lambda: Xt @ Wt)))
            rows.append(("torch", threads, "X.T @ R", _best(lambda: Xt.T @ Rt)))
            rows.append(("torch", threads, "(R.T @ X).T", _best(lambda: (Rt.T @ Xt).T)))
    best = {op: min(t for _, _, o, t in rows if o in ops) for op, ops in
            (("fwd", ("X @ W",)), ("bwd", ("X.T @ R", "(R.T @ X).T")))}
    print(f"\n## layouts ({n} x {d} by x {c})")
    print("| lib | threads | product | seconds | / best of its kind |")
    print("|---|---|---|---|---|")
    for lib, th, op, t in rows:
        b = best["fwd"] if op == "X @ W" else best["bwd"]
        print(f"| {lib} | {th} | {op} | {t:.4f} | {t / b:.2f}x |")
    return best["fwd"] + best["bwd"]


def _problem(n, d, c, seed=0, n_pub_per_class=5):
    from mixdp_core.methods._linear import l2_normalize
    from mixdp_core.methods.adamix.engine import NoisyGDProblem

    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((c, d)).astype(np.float32)
    y = rng.integers(0, c, n)
    X = l2_normalize(centers[y] * 0.3 + rng.standard_normal((n, d), dtype=np.float32))
    yp = np.repeat(np.arange(c), n_pub_per_class)
    Xp = l2_normalize(centers[yp] * 0.3 + rng.standard_normal((len(yp), d), dtype=np.float32))
    return NoisyGDProblem(X, y, Xp, yp, None, None, c)


def bench_step(n, d, c, floor=None, steps=8):
    import threadpoolctl

    from mixdp_core.methods._linear import fit_logistic
    from mixdp_core.methods.adamix.engine import NoisyGDOptions, run_noisygd
    from mixdp_core.methods.adamix.projection import projection_dim_for

    prob = _problem(n, d, c)
    W0 = fit_logistic(prob.X_public, prob.y_public, c, l2=1.0 / len(prob.y_public))
    print(f"\n## step time vs floor ({n} x {d}, C = {c}, 1 BLAS thread)")
    print("| variant | seconds / step | / floor |")
    print("|---|---|---|")
    with threadpoolctl.threadpool_limits(1):
        X, W = prob.X_private, W0
        R = np.random.default_rng(1).standard_normal((n, c), dtype=np.float32)
        fl = _best(lambda: X @ W) + _best(lambda: (R.T @ X).T)
        if floor is not None:
            fl = min(fl, floor)
        print(f"| floor (X@W + (R.T@X).T) | {fl:.4f} | 1.00x |")
        variants = [
            ("NoisyGD (fixed clip, no projection)", dict(clip="fixed", projection_dim=None)),
            ("AdaMix, paper projection k=round(D*2000/2048)", dict(clip="percentile", projection_dim=projection_dim_for(d, "paper", c))),
            ("AdaMix, rank projection", dict(clip="percentile", projection_dim="rank")),
            ("AdaMix, no projection", dict(clip="percentile", projection_dim=None)),
        ]
        out = {}
        for name, kw in variants:
            opts = NoisyGDOptions(noise_multiplier=20.0, steps=steps, target_delta=1e-5, weight_decay=1.0, **kw)
            run_noisygd(prob, W0, W0, NoisyGDOptions(**{**opts.__dict__, "steps": 1}))  # warm-up
            ts = []
            for _ in range(2):
                a = time.perf_counter()
                run_noisygd(prob, W0, W0, opts)
                ts.append((time.perf_counter() - a) / steps)
            t = min(ts)
            out[name] = t
            print(f"| {name} | {t:.4f} | {t / fl:.2f}x |")
    return out


def bench_blocks(n, d, c, rounds=3):
    """private_release with different row-block sizes (one pass over X vs two)."""
    import threadpoolctl

    from mixdp_core.methods._linear import row_norms
    from mixdp_core.methods.adamix.engine import private_release

    prob = _problem(n, d, c)
    X, y = prob.X_private, prob.y_private
    W = np.full((d, c), 0.01, np.float32)
    xn = row_norms(X)
    R = np.random.default_rng(0).standard_normal((n, c), dtype=np.float32)
    sizes = (256, 1024, 4096, 16384, n)
    print(f"\n## row blocks of the private release ({n} x {d}, 1 thread; / floor, {rounds} rounds)")
    print("| round | floor s | " + " | ".join(f"block {b}" for b in sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    with threadpoolctl.threadpool_limits(1):
        for r in range(rounds):
            fl = _best(lambda: X @ W, 3) + _best(lambda: (R.T @ X).T, 3)
            cells = [_best(lambda: private_release(X, y, W, 0.5, None, x_norm=xn, block_rows=b), 3) / fl for b in sizes]
            print(f"| {r} | {fl:.4f} | " + " | ".join(f"{v:.2f}x" for v in cells) + " |")


def bench_opacus(n, d, c, noisygd_step, physical=5000):
    import torch
    from opacus import PrivacyEngine
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    torch.set_num_threads(1)
    prob = _problem(n, d, c)
    ds = torch.utils.data.TensorDataset(torch.from_numpy(prob.X_private), torch.from_numpy(prob.y_private))
    model = torch.nn.Linear(d, c, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(ds, batch_size=n)
    pe = PrivacyEngine(accountant="rdp")
    model, opt, loader = pe.make_private(
        module=model, optimizer=opt, data_loader=loader, noise_multiplier=20.0, max_grad_norm=1.0,
        poisson_sampling=False,
    )
    lossf = torch.nn.CrossEntropyLoss(reduction="sum")

    def epoch():
        with BatchMemoryManager(data_loader=loader, max_physical_batch_size=physical, optimizer=opt) as mem:
            for xb, yb in mem:
                opt.zero_grad()
                lossf(model(xb), yb).backward()
                opt.step()

    epoch()
    t = min(_time(epoch) for _ in range(2))
    print(f"\n## Opacus DP-SGD vs NoisyGD ({n} x {d}, C = {c}, full logical batch, physical {physical}, 1 thread)")
    print("| method | seconds / epoch | speed-up of NoisyGD |")
    print("|---|---|---|")
    print(f"| Opacus DP-SGD | {t:.3f} | |")
    print(f"| NoisyGD step | {noisygd_step:.4f} | {t / noisygd_step:.1f}x |")


def _time(f):
    a = time.perf_counter()
    f()
    return time.perf_counter() - a


def bench_e2e(n, d, c, n_test=10_000, epsilon=3.0, threads_list=(1, 2)):
    import threadpoolctl

    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.featureset import FeatureSet
    from mixdp_core.methods import make_method

    rng = np.random.default_rng(0)
    centers = rng.standard_normal((c, d)).astype(np.float32)
    y = rng.integers(0, c, n)
    yt = rng.integers(0, c, n_test)
    X = centers[y] * 0.15 + rng.standard_normal((n, d), dtype=np.float32)
    Xt = centers[yt] * 0.15 + rng.standard_normal((n_test, d), dtype=np.float32)
    fs = FeatureSet(X, y, Xt, yt, [f"c{i}" for i in range(c)])
    split = make_split(fs, SplitSpec(public_per_class=5, seed=0))
    print(f"\n## end-to-end adamix, epsilon = {epsilon}, sigma = 20 ({n} x {d}, C = {c}, test {n_test})")
    print("(floor = best X@W + best (R.T@X).T measured just before; T x floor is what the run")
    print(" would cost at 1.0x floor per step on this machine at this moment)")
    print("| BLAS threads | seconds (fit) | steps T | T x floor (s) | fit / (T x floor) | test error | only_public error |")
    print("|---|---|---|---|---|---|---|")
    pub = make_method("only_public").fit(split)
    pub_err = float(np.mean(pub.predict(Xt) != yt))
    Xn = np.ascontiguousarray(split.X_private)
    W = np.zeros((d, c), np.float32)
    R = np.zeros((len(Xn), c), np.float32)
    for threads in threads_list:
        with threadpoolctl.threadpool_limits(threads):
            fl = _best(lambda: Xn @ W, 3) + _best(lambda: (R.T @ Xn).T, 3)
            a = time.perf_counter()
            m = make_method("adamix", target_epsilon=epsilon, blas_threads=None).fit(split)
            t = time.perf_counter() - a
        err = float(np.mean(m.predict(Xt) != yt))
        tf = m.steps_ * fl
        print(f"| {threads} | {t:.1f} | {m.steps_} | {tf:.1f} | {t / tf:.2f}x | {err:.3f} | {pub_err:.3f} |")


def bench_schedule(seeds=3):
    from sklearn.datasets import load_digits

    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.featureset import FeatureSet
    from mixdp_core.methods import make_method

    d = load_digits()
    perm = np.random.default_rng(0).permutation(len(d.target))
    X, y = d.data[perm].astype(np.float32), d.target[perm]
    fs = FeatureSet(X[:1257], y[:1257], X[1257:], y[1257:], [str(i) for i in range(10)])
    split = make_split(fs, SplitSpec(public_per_class=5, seed=0))

    def err(m):
        return float(np.mean(m.predict(split.X_test) != split.y_test))

    print("\n## Thm.-3 schedule vs constant learning rates (digits, 5 public/class, sigma = 20)")
    print(f"paragon {err(make_method('paragon').fit(split)):.3f}, only_public "
          f"{err(make_method('only_public').fit(split)):.3f}")
    grid = [("theorem3 (default)", {}), ("theorem3, worst-case lambda", {"weight_decay_rule": "worst_case"})]
    grid += [(f"constant lr={lr:g}", {"schedule": "constant", "learning_rate": lr}) for lr in (5e-4, 1e-3, 2.5e-3, 5e-3)]
    print("| epsilon | method | " + " | ".join(g for g, _ in grid) + " |")
    print("|---|---|" + "---|" * len(grid))
    for eps in (1.0, 8.0):
        for name in ("fully_private", "ngd", "adamix", "ppgd"):
            cells = []
            for _, kw in grid:
                es = [err(make_method(name, target_epsilon=eps, seed=s, **kw).fit(split)) for s in range(seeds)]
                cells.append(f"{np.mean(es):.3f}±{np.std(es):.3f}")
            print(f"| {eps:g} | {name} | " + " | ".join(cells) + " |", flush=True)


def bench_ownpull(n=49_800, c=100, steps=10, repeats=5):
    """``ownpull``: see the module docstring."""
    from mixdp_core.methods.adamix.engine import _OwnPull

    class _Fresh:  # the update before 2026-11-30 (commit 7098398): a new N x C array per operation
        def __init__(self, n_rows, n_classes):
            self.P = np.zeros((n_rows, n_classes))
            self.Q = np.zeros((n_rows, n_classes))

        def average(self, t):
            self.Q = self.Q * ((t - 1) / (t + 1)) + self.P * (2.0 / (t + 1))

        def step(self, eta, lam, scale, own):
            self.P = (1.0 - eta * lam) * self.P - eta * scale * own

    own = np.random.default_rng(0).standard_normal((n, c))

    def run(cls):
        p = cls(n, c)
        for t in range(1, steps + 1):
            p.average(t)
            p.step(0.1, 0.01, 1e-3, own)
        return p

    a, b = run(_OwnPull), run(_Fresh)
    assert np.array_equal(a.P, b.P) and np.array_equal(a.Q, b.Q)  # the same arithmetic
    times = {"inplace": [], "fresh": []}
    for _ in range(repeats):
        for name, cls in (("inplace", _OwnPull), ("fresh", _Fresh)):
            t0 = time.perf_counter()
            run(cls)
            times[name].append(time.perf_counter() - t0)
    import statistics

    res = {"ownpull_rows": n, "ownpull_classes": c, "ownpull_steps": steps,
           "ownpull_fresh_over_inplace": statistics.median(times["fresh"]) / statistics.median(times["inplace"])}
    print("ownpull:", res, flush=True)
    return res


def _cpu_steps(run):
    """Per-step process CPU seconds of one run_noisygd call (on_step timestamps; the first
    step, which includes the run's setup, is dropped)."""
    marks = []
    run(lambda rec: marks.append(time.process_time()) and False)
    return float(np.median(np.diff(marks)))


def _stream_cpu(X, reps=3):
    ts = []
    for _ in range(reps):
        a = time.process_time()
        X.sum()
        ts.append(time.process_time() - a)
    return min(ts)


def bench_ratios(n, d, c, repeats=7, steps=6, opacus_repeats=3, physical=5000, blocks=(256, 512, 1024, 2048),
                 sub_repeats=None):
    """The step-cost ratios; returns the JSON dict (see module docstring)."""
    sub_repeats = max(3, repeats // 2) if sub_repeats is None else int(sub_repeats)
    import json

    import threadpoolctl

    from mixdp_core.methods.adamix import engine as noisygd
    from mixdp_core.methods._linear import fit_logistic, row_norms
    from mixdp_core.methods.adamix.engine import NoisyGDOptions, private_release, run_noisygd
    from mixdp_core.methods.adamix.kernels import cpu as cpu_kernel
    from mixdp_core.methods.adamix.kernels import numba_backend
    from mixdp_core.methods.adamix.projection import projection_dim_for

    from _release_v0 import private_release_v0 as _v0

    def private_release_v0(*a, ratio_out=None, loss_out=None, kernel=None, on_sum=None, logit_offset=None,
                           resid_out=None, **k):
        """The kernel before the fused one (commit 3902d5c) behind the engine's current call (it
        fills the run's reused ``(N,)`` buffers: two copies, ~0.004 of a stream pass; the kernel
        choice is ignored). It has no logit offset: the benchmark's runs use none."""
        from mixdp_core.methods._linear import into

        if logit_offset is not None or resid_out is not None:
            raise ValueError("the v0 release kernel has no logit offset and no residual output")

        noisy, ratio, loss = _v0(*a, **k)
        return noisy, into(ratio_out, ratio), into(loss_out, loss)

    prob = _problem(n, d, c)
    X, y = prob.X_private, prob.y_private
    W0 = fit_logistic(prob.X_public, prob.y_public, c, l2=1.0 / len(prob.y_public))
    variants = {
        "noisygd": NoisyGDOptions(noise_multiplier=20.0, steps=steps, target_delta=1e-5, clip="fixed", projection_dim=None),
        # the paper's projection (the release's most expensive AdaMix path; the default has none,
        # i.e. the "noisygd" release with an adaptive clip)
        "adamix": NoisyGDOptions(noise_multiplier=20.0, steps=steps, target_delta=1e-5, clip="percentile",
                                 projection_dim=projection_dim_for(d, "paper", c)),
    }
    fast = noisygd.private_release

    fused_min = cpu_kernel.FUSED_MIN_BYTES

    def run_with(kernel, opts, fused=True):
        def run(cb):
            noisygd.private_release = kernel
            cpu_kernel.FUSED_MIN_BYTES = fused_min if fused else 1 << 62
            try:
                run_noisygd(prob, W0, W0, opts, on_step=cb)
            finally:
                noisygd.private_release = fast
                cpu_kernel.FUSED_MIN_BYTES = fused_min
        return run

    out: dict = {"n": n, "d": d, "c": c, "timer_1thread": "process CPU time", "repeats": repeats}
    ratios: dict = {k: [] for k in ("noisygd", "adamix", "noisygd_numpy", "adamix_numpy", "noisygd_before", "adamix_before",
                                    "noisygd_tracked", "noisygd_tracked_numpy", "two_gemm", "two_gemm_in_cache")}
    # the guard's leave-one-out count (AdaMix's default): the kernel also writes its clipped
    # residuals and the engine carries each row's own pull, two (N, C) recursions per step
    tracked = dataclasses.replace(variants["noisygd"], track_self_pull=True)
    gemm_s: list = []
    R = np.random.default_rng(1).standard_normal((n, c), dtype=np.float32)
    bh = min(512, n)
    Xh, Zh, Th, Eh = X[:bh].copy(), np.empty((bh, c), np.float32), np.empty((c, d), np.float32), R[:bh].T.copy()

    def two_gemm():  # the "plain numpy 2-GEMM": X @ W and (R^T X)
        X @ W0
        R.T @ X

    def two_gemm_in_cache():  # both products on one cached block, n rows in all: compute floor
        for _ in range(n // bh):
            np.matmul(Xh, W0, out=Zh)
            np.matmul(Eh, Xh, out=Th)
    opacus_ratio = []
    with threadpoolctl.threadpool_limits(1):
        epoch = _opacus_epoch_fn(prob, physical) if opacus_repeats else None
        for r in range(repeats):
            for name, opts in variants.items():
                fl = _stream_cpu(X)
                ratios[name].append(_cpu_steps(run_with(fast, opts)) / fl)
                fl = _stream_cpu(X)
                ratios[name + "_numpy"].append(_cpu_steps(run_with(fast, opts, fused=False)) / fl)
                fl = _stream_cpu(X)
                ratios[name + "_before"].append(_cpu_steps(run_with(private_release_v0, opts, fused=False)) / fl)
            fl = _stream_cpu(X)
            ratios["noisygd_tracked"].append(_cpu_steps(run_with(fast, tracked)) / fl)
            fl = _stream_cpu(X)
            ratios["noisygd_tracked_numpy"].append(_cpu_steps(run_with(fast, tracked, fused=False)) / fl)
            for name, f in (("two_gemm", two_gemm), ("two_gemm_in_cache", two_gemm_in_cache)):
                fl = _stream_cpu(X)
                a = time.process_time()
                f()
                ratios[name].append((time.process_time() - a) / fl)
                if name == "two_gemm_in_cache":
                    gemm_s.append(time.process_time() - a)
            if epoch is not None and r < opacus_repeats:
                step = _cpu_steps(run_with(fast, variants["noisygd"]))
                a = time.process_time()
                epoch()
                opacus_ratio.append((time.process_time() - a) / step)
        for name, v in ratios.items():
            key = f"{name}_over_stream" if name.startswith("two_gemm") else f"step_over_stream_floor_{name}"
            out[key] = float(np.median(v))
        out["opacus_epoch_over_step"] = float(np.median(opacus_ratio)) if opacus_ratio else None
        for suffix in ("", "_numpy"):  # the leave-one-out tracking's cost, step over step, same repeats
            out[f"tracked_over_untracked{suffix}"] = float(np.median(
                np.asarray(ratios["noisygd_tracked" + suffix]) / np.asarray(ratios["noisygd" + suffix])))
        out["fused_kernel"] = bool(numba_backend.available()) and X.nbytes >= fused_min
        # arithmetic: one step is 2 products of 2 N D C flops; the GEMM rate in cache is the BLAS
        # ceiling for these skinny shapes, the fused release rate is what the kernel reaches
        flops = 4.0 * n * d * c
        out["two_gemm_in_cache_gflops"] = flops / float(np.median(gemm_s)) / 1e9
        rel_f, rel_n = [], []
        Wc, xn0 = np.ascontiguousarray(W0), row_norms(X)
        for r in range(sub_repeats):
            for kern, acc in (("numba", rel_f), ("numpy", rel_n)):
                if kern == "numba" and not out["fused_kernel"]:
                    continue
                a = time.process_time()
                private_release(X, y, Wc, 0.5, None, x_norm=xn0, kernel=kern)
                acc.append(time.process_time() - a)
        # nominal rate: the fused kernel multiplies only C - 1 classes with X (exact identities,
        # see mixdp_core/methods/adamix/kernels/numba_jit.py), its true arithmetic is (C - 1) / C of this
        out["fused_release_gflops"] = flops / float(np.median(rel_f)) / 1e9 if rel_f else None
        if out["fused_kernel"]:
            # AdaMix's extra per step on the fused path: the pDP projection norms ||U^T x_i||^2 of
            # the paper projection from the cached [X B | X Q_p] by the engine's low-rank maps
            # (r (m + 2 n_pub) multiply-adds per row), and, side by side, the dense ||A_i M||^2
            # with the (m + n_pub) x m map of X Q (m (m + n_pub); the path before this change)
            from mixdp_core.methods._linear import softmax_residual
            from mixdp_core.methods.adamix.kernels import numba_jit
            from mixdp_core.methods.adamix.kernels.numba_backend import complement_base, complement_maps
            from mixdp_core.methods.adamix.kernels.pools import side_by_side
            from mixdp_core.methods.adamix.projection import projection_basis

            k_pap = projection_dim_for(d, "paper", c)
            Xp_, yp_ = prob.X_public, prob.y_public
            Bm = np.random.default_rng(3).standard_normal((d, d - k_pap)).astype(np.float32)
            qr_ = np.linalg.qr(Xp_.T.astype(np.float64))
            Ep_, _ = softmax_residual(Xp_ @ W0, yp_)
            bas = projection_basis(Xp_.T @ Ep_, k_pap, Bm, public_qr=qr_, E_pub=Ep_)
            XB_, XQp_ = X @ Bm, X @ qr_[0].astype(np.float32)
            A = side_by_side(XB_, XQp_, np.float32)
            base = complement_base(XB_, Bm, xn0)
            MT = np.ascontiguousarray(np.random.default_rng(3).standard_normal((d - k_pap, A.shape[1]), dtype=np.float32))
            sq_out = np.empty(n)
            numba_jit.row_sq_norms(A, MT, 0, n, sq_out)
            pr, pd = [], []
            for r in range(sub_repeats):
                fl = _stream_cpu(X)
                a = time.process_time()
                M1T, M2T = complement_maps(bas, XQp_.shape[1])
                numba_jit.sq_norms_lowrank(A, M1T, d - k_pap, M2T, base, 0, n, sq_out)
                pr.append((time.process_time() - a) / fl)
                fl = _stream_cpu(X)
                a = time.process_time()
                numba_jit.row_sq_norms(A, MT, 0, n, sq_out)
                pd.append((time.process_time() - a) / fl)
            out["pdp_norms_over_stream"] = float(np.median(pr))
            out["pdp_norms_dense_over_stream"] = float(np.median(pd))
            del A, XB_, XQp_
        out["numpy_release_gflops"] = flops / float(np.median(rel_n)) / 1e9
        # the BLAS's own rate on a square product: what this core reaches when it is not bound by
        # the skinny C-column shapes (the "peak" the two rates above compare with)
        sq = min(1024, max(64, d))
        Aq = np.random.default_rng(2).standard_normal((sq, sq), dtype=np.float32)
        Aq @ Aq
        tq = []
        for r in range(sub_repeats):
            a = time.process_time()
            Aq @ Aq
            tq.append(time.process_time() - a)
        out["square_sgemm_gflops"] = 2.0 * sq**3 / max(float(np.median(tq)), 1e-9) / 1e9

        # block size of the release (1 thread, CPU time), interleaved with the stream
        W = np.ascontiguousarray(W0)
        xn = row_norms(X)
        by_block = {b: [] for b in blocks}
        for r in range(sub_repeats):
            for b in blocks:
                fl = _stream_cpu(X)
                a = time.process_time()
                private_release(X, y, W, 0.5, None, x_norm=xn, block_rows=b, kernel="numpy")
                by_block[b].append((time.process_time() - a) / fl)
        med = {b: float(np.median(v)) for b, v in by_block.items()}
        best_b = min(med, key=med.get)
        out["release_over_stream_by_block_rows"] = {str(b): v for b, v in med.items()}
        out["best_block_rows"] = int(best_b)

        # threads of the release (wall time on both sides: CPU time cannot show a speed-up)
        by_threads = {1: [], 2: []}
        for r in range(sub_repeats):
            for t in by_threads:
                a = time.perf_counter()
                X.sum()
                fl = time.perf_counter() - a
                a = time.perf_counter()
                private_release(X, y, W, 0.5, None, x_norm=xn, block_rows=best_b, threads=t)  # fused when large
                by_threads[t].append((time.perf_counter() - a) / fl)
        medt = {t: float(np.median(v)) for t, v in by_threads.items()}
        out["release_over_stream_wall_by_threads"] = {str(t): v for t, v in medt.items()}
        out["best_threads"] = int(min(medt, key=medt.get))
        out["cpu_count"] = os.cpu_count()

        # torch kernel: CPU (1 thread) against the numpy kernel; CUDA when available
        try:
            import torch
        except ImportError:  # pragma: no cover
            torch = None
        if torch is not None:
            torch.set_num_threads(1)
            tr = []
            for r in range(sub_repeats):
                a = time.process_time()
                private_release(X, y, W, 0.5, None, x_norm=xn, kernel="numpy")
                t_np = time.process_time() - a
                a = time.process_time()
                private_release(X, y, W, 0.5, None, x_norm=xn, kernel="torch")
                tr.append((time.process_time() - a) / t_np)
            out["torch_cpu_release_over_numpy_release"] = float(np.median(tr))
            if torch.cuda.is_available():
                private_release(X, y, W, 0.5, None, x_norm=xn, kernel="cuda")  # warm-up + copy of X
                tc = []
                for r in range(sub_repeats):
                    a = time.perf_counter()
                    X.sum()
                    fl = time.perf_counter() - a
                    a = time.perf_counter()
                    private_release(X, y, W, 0.5, None, x_norm=xn, kernel="cuda")
                    torch.cuda.synchronize()
                    tc.append((time.perf_counter() - a) / fl)
                out["torch_cuda_release_over_stream_wall"] = float(np.median(tc))
                out["torch_cuda_device"] = torch.cuda.get_device_name(0)
            else:  # no GPU figure is ever made up: null, and the reason beside it
                out["torch_cuda_release_over_stream_wall"] = None
                out["torch_cuda_skipped"] = "no CUDA device visible to torch on this machine"
    print(f"\n## step-cost ratios ({n} x {d}, C = {c}; medians of {repeats} interleaved repeats)")
    print("| quantity | value |")
    print("|---|---|")
    for k, v in out.items():
        print(f"| {k} | {v if not isinstance(v, float) else round(v, 3)} |")
    return out


def _opacus_epoch_fn(prob, physical):
    """One Opacus DP-SGD epoch (full logical batch, bias-free linear head), as a callable."""
    import torch
    from opacus import PrivacyEngine
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    torch.set_num_threads(1)
    n, d = prob.X_private.shape
    ds = torch.utils.data.TensorDataset(torch.from_numpy(prob.X_private), torch.from_numpy(prob.y_private))
    model = torch.nn.Linear(d, prob.n_classes, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(ds, batch_size=n)
    model, opt, loader = PrivacyEngine(accountant="rdp").make_private(
        module=model, optimizer=opt, data_loader=loader, noise_multiplier=20.0, max_grad_norm=1.0,
        poisson_sampling=False,
    )
    lossf = torch.nn.CrossEntropyLoss(reduction="sum")

    def epoch():
        with BatchMemoryManager(data_loader=loader, max_physical_batch_size=min(physical, n), optimizer=opt) as mem:
            for xb, yb in mem:
                opt.zero_grad()
                lossf(model(xb), yb).backward()
                opt.step()

    epoch()  # warm-up
    return epoch


def main(argv=None):
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="layouts,step,blocks,opacus,e2e,schedule,ratios,ownpull")
    ap.add_argument("--quick", action="store_true", help="10x smaller N for a smoke test")
    ap.add_argument("--tiny", action="store_true", help="a few hundred rows (tests)")
    a = ap.parse_args(argv)
    only = set(a.only.split(","))
    if a.tiny:
        r = bench_ratios(300, 16, 10, repeats=1, steps=3, opacus_repeats=1, physical=300, blocks=(64, 128), sub_repeats=1)
        r.update(bench_ownpull(300, 10, steps=3, repeats=1))
        print(json.dumps(r, sort_keys=True))
        return
    n = N // 10 if a.quick else N
    floor = bench_layouts(n, D, C) if "layouts" in only else None
    step = bench_step(n, D, C, floor) if ("step" in only or "opacus" in only) else None
    if "blocks" in only:
        bench_blocks(n, D, C)
    if "opacus" in only:
        bench_opacus(n, D, C, step["NoisyGD (fixed clip, no projection)"])
    if "e2e" in only:
        bench_e2e(n, D, C, n_test=1000 if a.quick else 10_000, threads_list=(1,) if a.quick else (1, 2))
    if "schedule" in only:
        bench_schedule(seeds=2 if a.quick else 3)
    res = bench_ratios(n, D, C, repeats=3 if a.quick else 7) if "ratios" in only else {}
    if "ownpull" in only:
        res.update(bench_ownpull(4_980 if a.quick else 49_800, 100))
    print(json.dumps(res, sort_keys=True))  # last line: the step-cost ratios


if __name__ == "__main__":
    main()
