"""GPU figures, side by side with the CPU in one run: the private linear release, a whole AdaMix
fit, and feature extraction.

Run it on a machine with a CUDA device; without one every GPU figure is ``null`` with the reason
beside it (never made up), and the CPU side runs at the ``--tiny`` size (seconds).

* ``release``: one NoisyGD / AdaMix private release ``Σ clip_τ(g_i)`` (the linear step's
  kernel; ``methods/adamix/kernels/torch_backend.py``) on ``N × D`` float32 features with ``C`` classes.
  Reported as ratios: the CUDA release over one streaming read of X on the GPU (the memory
  floor of a full-batch linear step), over its two products with X alone (fp32, the compute
  floor on a GPU), and the numpy CPU release over the CUDA one.
* ``adamix_fit``: a whole ``adamix`` fit (defaults, ε = 3) on the ``synthetic`` regime with
  ``--classes`` classes, ``device="cuda"`` against ``device="cpu"``: wall-time ratio and both
  test errors (the mechanism and its ε are the same on every device).
* ``extract``: images/s of ``encoder.encode_images`` (decode, resize, forward, copy back) at
  ``--size`` px with random weights, CUDA against the CPU (all cores; one with ``--tiny``), and
  of the bare forward.

The last line of stdout is one JSON object.

Usage::

    python benchmarks/gpu.py                # the figures of docs/results/gpu.md
    python benchmarks/gpu.py --tiny         # a few hundred rows (tests)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cuda():
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "no CUDA device visible to torch on this machine"
    return torch, None


def _median_time(fn, repeats: int, sync=None) -> float:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def bench_release(n: int, d: int, c: int, repeats: int) -> dict:
    from mixdp_core.methods.adamix.engine import private_release

    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d), dtype=np.float32)
    y = rng.integers(0, c, n)
    W = (0.01 * rng.standard_normal((d, c))).astype(np.float32)
    xn = np.linalg.norm(X, axis=1)
    out: dict = {"n": n, "d": d, "classes": c, "x_bytes": int(X.nbytes)}
    t_cpu = _median_time(lambda: private_release(X, y, W, 0.5, None, x_norm=xn), max(1, repeats // 2))
    out["cpu_release_s"] = t_cpu
    out["cpu_threads"] = os.cpu_count()
    torch, why = _cuda()
    if torch is None:
        out.update(cuda_release_over_gpu_stream=None, cpu_over_cuda=None, skipped=why)
        return out
    sync = torch.cuda.synchronize
    private_release(X, y, W, 0.5, None, x_norm=xn, kernel="cuda")  # warm-up and the copy of X
    sync()
    t_gpu = _median_time(lambda: private_release(X, y, W, 0.5, None, x_norm=xn, kernel="cuda"), repeats, sync)
    Xg = torch.from_numpy(X).cuda()
    Xg.sum()
    sync()
    t_stream = _median_time(lambda: Xg.sum(), repeats, sync)
    # the compute floor: the release's two products with X (logits X W, gradient sum Xᵀ R) alone
    Wg = torch.from_numpy(W).cuda()
    Rg = torch.zeros((n, c), device="cuda", dtype=torch.float32)
    t_gemm = _median_time(lambda: (Xg @ Wg, Xg.T @ Rg), repeats, sync)
    # the same release with the check against the numpy kernel (same quantity on every device)
    a = private_release(X, y, W, 0.5, None, x_norm=xn)[0]
    b = private_release(X, y, W, 0.5, None, x_norm=xn, kernel="cuda")[0]
    out.update(device=torch.cuda.get_device_name(0), cuda_release_s=t_gpu, gpu_stream_s=t_stream,
               gpu_stream_gb_per_s=X.nbytes / t_stream / 1e9,
               cuda_release_over_gpu_stream=t_gpu / t_stream, gpu_two_gemms_s=t_gemm,
               cuda_release_over_two_gemms=t_gpu / t_gemm, cpu_over_cuda=t_cpu / t_gpu,
               max_rel_diff_vs_numpy=float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30)))
    return out


def bench_adamix(classes: int, dim: int, per_class: int) -> dict:
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.data.synthetic import synthetic_features
    from mixdp_core.features.featureset import FeatureSet
    from mixdp_core.methods import make_method

    Xtr, ytr, Xte, yte = synthetic_features(classes=classes, dim=dim, train_per_class=per_class, test_per_class=20,
                                            effective_rank=dim / 8, separation=4.0)
    fs = FeatureSet(X_train=Xtr, y_train=ytr, X_test=Xte, y_test=yte, class_names=[str(i) for i in range(classes)],
                    meta={"dataset": "synthetic", "encoder": "none"})
    split = make_split(fs, SplitSpec(public_per_class=2, seed=0))
    out: dict = {"classes": classes, "dim": dim, "private_rows": int(len(split.y_private))}
    torch, why = _cuda()
    devices = ["cpu"] + (["cuda"] if torch is not None else [])
    for dev in devices:
        if dev == "cuda":  # the context and the first copy are paid once per process, not per run
            make_method("adamix", target_epsilon=3.0, device="cuda").fit(split)
        t = time.perf_counter()
        m = make_method("adamix", target_epsilon=3.0, device=dev).fit(split)
        out[f"{dev}_fit_s"] = time.perf_counter() - t
        out[f"{dev}_test_error"] = float(np.mean(m.predict(split.X_test) != split.y_test))
        out[f"{dev}_epsilon"] = float(m.privacy_.epsilon)
    if torch is None:
        out.update(cpu_over_cuda=None, skipped=why)
    else:
        out["cpu_over_cuda"] = out["cpu_fit_s"] / out["cuda_fit_s"]
    return out


def bench_extract(name: str, n: int, size: int, batch: int, repeats: int, threads: int | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="mixdp_gpu_") as d:  # the JPEGs are removed after: none left in /tmp
        return _bench_extract_in(Path(d), name, n, size, batch, repeats, threads)


def _bench_extract_in(tmp: Path, name: str, n: int, size: int, batch: int, repeats: int,
                      threads: int | None = None) -> dict:
    from PIL import Image

    from mixdp_core.data.base import FileImageSource
    from mixdp_core.encoders import ENCODERS

    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):  # real-photo-sized JPEGs: decode and resize are part of what is timed
        p = tmp / f"{i:05d}.jpg"
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(p, quality=85)
        paths.append(p)
    src = FileImageSource(paths, np.zeros(n, dtype=np.int64))
    threads = threads or os.cpu_count()
    out: dict = {"encoder": name, "weights": "random", "images": n, "size": size, "batch": batch,
                 "cpu_threads": threads}
    torch, why = _cuda()
    kw = {"fuse": True, "backend": "torch"} if name == "efficientnet_lite0" else {}  # torch on both devices
    for dev in ["cpu"] + (["cuda"] if torch is not None else []):
        enc = ENCODERS.get(name)(pretrained=None, image_size=size, batch_size=batch, device=dev,
                                 num_threads=threads, **kw)
        x = enc.to_tensor(np.stack([enc.preprocess_image(src[i][0]) for i in range(min(batch, n))]))
        enc.forward_tensor(x)  # warm-up (weights, allocator, cudnn autotune)
        sync = torch.cuda.synchronize if dev == "cuda" else None
        t = _median_time(lambda: enc.encode_images(src), repeats, sync)
        tb = _median_time(lambda: enc.forward_tensor(x), repeats, sync)
        out[f"{dev}_images_per_s"] = n / t
        out[f"{dev}_bare_images_per_s"] = len(x) / tb
    if torch is None:
        out.update(cuda_over_cpu=None, skipped=why)
    else:
        out["cuda_over_cpu"] = out["cuda_images_per_s"] / out["cpu_images_per_s"]
        out["cuda_full_over_bare"] = out["cuda_images_per_s"] / out["cuda_bare_images_per_s"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="release,adamix,extract")
    ap.add_argument("--n", type=int, default=400_000, help="rows of the release benchmark")
    ap.add_argument("--d", type=int, default=1280)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--images", type=int, default=1024)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--encoders", default="efficientnet_lite0,resnet50")
    ap.add_argument("--tiny", action="store_true", help="a few hundred rows and 16 images (tests)")
    args = ap.parse_args(argv)
    torch, why = _cuda()
    if torch is None and not args.tiny:  # the CPU side alone says nothing here: keep `make bench` short
        print(f"{why}: every GPU figure is null; the CPU side runs at the --tiny size")
        args.tiny = True
    if args.tiny:
        args.n, args.d, args.classes, args.repeats, args.images, args.size = 600, 32, 5, 1, 8, 64
        args.encoders = "efficientnet_lite0"
    only = set(args.only.split(","))
    res: dict = {"benchmark": "gpu", "tiny": bool(args.tiny)}
    if "release" in only:
        res["release"] = bench_release(args.n, args.d, args.classes, args.repeats)
        print("release:", json.dumps(res["release"]), flush=True)
    if "adamix" in only:
        per_class = 40 if args.tiny else 500
        res["adamix_fit"] = bench_adamix(args.classes, args.d if not args.tiny else 16, per_class)
        print("adamix_fit:", json.dumps(res["adamix_fit"]), flush=True)
    if "extract" in only:
        # --tiny: one CPU thread (torch at every core of a loaded 2-core machine ran 8 images of
        # 64 px at 7 images/s, most of the smoke test's time; the code path is the same)
        res["extract"] = [bench_extract(e, args.images, args.size, 8 if args.tiny else 128, 1 if args.tiny else 3,
                                        threads=1 if args.tiny else None)
                          for e in args.encoders.split(",")]
        for r in res["extract"]:
            print("extract:", json.dumps(r), flush=True)
    print(json.dumps(res, allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
