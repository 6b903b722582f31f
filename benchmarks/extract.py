"""CPU feature-extraction speed: full encode path vs bare forward, same run, side by side.

For each setting (input resolution, torch threads, channels-last, batch size) it measures

* ``full``: images/s of ``encoder.encode_images(FileImageSource)`` -- what ``mixdp encode``
  runs: JPEG decode, resize, normalize, forward, copy back;
* ``bare``: images/s of ``encoder.forward_tensor`` on the same images already preprocessed
  into tensors (the network alone);
* ``prep``: images/s of decode + resize + normalize alone (the non-network part);

and prints ``full/bare`` (1.0 = no overhead outside the network). Timings are the median of
``--repeats`` alternating passes, so load from other processes hits both sides alike.

With ``--probe`` it also reports a linear-probe accuracy (logistic regression on
``--probe-train`` CIFAR-10 train images, evaluated on ``--probe-test`` test images) per
resolution, for the speed/accuracy trade-off of ``image_size``.

Uses the CIFAR-10 JPEGs in ``../shared/data/cifar10_images_jpg.tar.gz`` (extracted to a
temporary folder, never into ``../shared``); exits with a message when the archive is absent.
``--tiny`` (smoke test) needs no data: 16 random 32x32 JPEGs written to a temporary folder, one
setting (64 px, 1 thread, batch 8, one pass), same code path.

The last line of stdout is one JSON object: one row per setting with ``full_over_bare`` (or the
probe accuracies), or ``{"benchmark": "extract", "skipped": "<reason>"}`` without the archive.

Usage::

    python benchmarks/extract.py --n 128 --sizes 224,128,96 --threads 1,2
    python benchmarks/extract.py --probe --sizes 224,128,96 --threads 1
    python benchmarks/extract.py --tiny
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mixdp_core.data.base import FileImageSource  # noqa: E402
from mixdp_core.encoders import ENCODERS  # noqa: E402

ARCHIVE = ROOT.parent / "shared" / "data" / "cifar10_images_jpg.tar.gz"
CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def extract_cifar(dest: Path, split: str, per_class: int) -> FileImageSource:
    """Extract ``per_class`` JPEGs per class of ``split`` into ``dest`` (reuses earlier runs)."""
    want = {f"{split}/{c}/{i:04d}.jpg": k for k, c in enumerate(CLASSES) for i in range(per_class)}
    missing = [n for n in want if not (dest / n).is_file()]
    if missing:
        todo = set(missing)
        with tarfile.open(ARCHIVE, "r:gz") as tf:
            for m in tf:
                if m.name in todo:
                    tf.extract(m, dest, filter="data")
                    todo.discard(m.name)
                    if not todo:
                        break
    names = sorted(want, key=lambda n: (want[n], n))
    return FileImageSource([dest / n for n in names], np.array([want[n] for n in names]))


def random_jpegs(dest: Path, n: int, seed: int = 0) -> FileImageSource:
    """``n`` random 32x32 RGB JPEGs in ``dest`` (content does not change the cost of the path)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        p = dest / f"{i:04d}.jpg"
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(p, quality=75)
        paths.append(p)
    return FileImageSource(paths, np.arange(n) % len(CLASSES))


def time_full(enc, src) -> float:
    t = time.perf_counter()
    enc.encode_images(src)
    return len(src) / (time.perf_counter() - t)


def time_prep(enc, src, batch_size) -> float:
    """images/s of decode + resize + normalize alone (no network)."""
    t = time.perf_counter()
    for s in range(0, len(src), batch_size):
        enc.to_tensor(np.stack([enc.preprocess_image(src[i][0]) for i in range(s, min(s + batch_size, len(src)))]))
    return len(src) / (time.perf_counter() - t)


def time_bare(enc, batches, n) -> float:
    t = time.perf_counter()
    for x in batches:
        enc.forward_tensor(x)
    return n / (time.perf_counter() - t)


def bench_setting(name, src, *, image_size, threads, channels_last, batch_size, repeats, fuse=True):
    kw = {"fuse": fuse} if name == "efficientnet_lite0" else {}
    enc = ENCODERS.get(name)(image_size=image_size, num_threads=threads, channels_last=channels_last,
                             batch_size=batch_size, device="cpu", **kw)
    imgs = [src[i][0] for i in range(len(src))]
    batches = [
        enc.to_tensor(np.stack([enc.preprocess_image(im) for im in imgs[s : s + batch_size]]))
        for s in range(0, len(imgs), batch_size)
    ]
    enc.forward_tensor(batches[0][:2])  # warm-up (weights load, allocator)
    full, bare, prep = [], [], []
    for _ in range(repeats):
        bare.append(time_bare(enc, batches, len(src)))
        full.append(time_full(enc, src))
        prep.append(time_prep(enc, src, batch_size))
    return statistics.median(full), statistics.median(bare), statistics.median(prep)


def linear_probe(name, train, test, *, image_size, threads, batch_size) -> tuple[float, float]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    enc = ENCODERS.get(name)(image_size=image_size, num_threads=threads, batch_size=batch_size, device="cpu")
    t = time.perf_counter()
    Xtr, _ = enc.encode_images(train)
    Xte, _ = enc.encode_images(test)
    ips = (len(train) + len(test)) / (time.perf_counter() - t)
    sc = StandardScaler().fit(Xtr)  # benchmark only (non-private); not used by DP methods
    clf = LogisticRegression(max_iter=2000, C=0.1).fit(sc.transform(Xtr), train.labels)
    return float(clf.score(sc.transform(Xte), test.labels)), ips


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", default="efficientnet_lite0")
    ap.add_argument("--n", type=int, default=128, help="images per timing pass")
    ap.add_argument("--sizes", default="224,128,96")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--channels-last", default="1,0", help="1 (on), 0 (off) or both")
    ap.add_argument("--batch", default="32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fuse", default="1", help="EfficientNet BN/padding fusion: 1, 0 or 1,0")
    ap.add_argument("--probe", action="store_true", help="linear-probe accuracy per size instead of the speed grid")
    ap.add_argument("--probe-train", type=int, default=500)
    ap.add_argument("--probe-test", type=int, default=500)
    ap.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "mixdp_bench_cifar"))
    ap.add_argument("--tiny", action="store_true", help="16 random JPEGs, 64 px, one setting (no data needed)")
    args = ap.parse_args(argv)
    res: dict = {"benchmark": "extract", "encoder": args.encoder}

    tiny_dir = None
    if args.tiny:
        if args.probe:
            ap.error("--tiny times the speed grid only")
        args.n, args.sizes, args.threads, args.channels_last, args.batch, args.repeats, args.fuse = (
            16, "64", "1", "1", "8", 1, "1")
        tiny_dir = tempfile.TemporaryDirectory(prefix="mixdp-extract-tiny-")
    elif not ARCHIVE.is_file():
        print(f"SKIP: CIFAR-10 archive not found at {ARCHIVE}")
        print(json.dumps({**res, "skipped": f"CIFAR-10 archive not found at {ARCHIVE}"}))
        return 0
    try:
        return _run(args, res, Path(tiny_dir.name) if tiny_dir else None)
    finally:
        if tiny_dir is not None:
            tiny_dir.cleanup()


def _run(args, res: dict, tiny_dir: Path | None) -> int:
    dest = Path(args.workdir)
    if tiny_dir is None:
        dest.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} default threads, encoder {args.encoder}")

    if args.probe:
        train = extract_cifar(dest, "train", args.probe_train // 10)
        test = extract_cifar(dest, "test", args.probe_test // 10)
        print(f"linear probe: {len(train)} train / {len(test)} test CIFAR-10 images, threads={threads[0]}")
        print(f"{'size':>5} {'acc':>6} {'img/s':>7}")
        res.update(mode="probe", probe_train=len(train), probe_test=len(test), threads=threads[0], rows=[])
        for s in sizes:
            acc, ips = linear_probe(args.encoder, train, test, image_size=s, threads=threads[0],
                                    batch_size=int(args.batch.split(",")[0]))
            print(f"{s:>5} {acc:>6.3f} {ips:>7.1f}", flush=True)
            res["rows"].append({"size": s, "accuracy": acc, "images_per_s": ips})
        print(json.dumps(res, allow_nan=False))
        return 0

    if tiny_dir is not None:
        src = random_jpegs(tiny_dir, args.n)
        what = "random 32x32 JPEGs (--tiny)"
    else:
        src = extract_cifar(dest, "test", max(1, args.n // 10))
        what = "CIFAR-10 JPEGs (32x32)"
    grid = itertools.product(sizes, threads, [bool(int(c)) for c in args.channels_last.split(",")],
                             [int(b) for b in args.batch.split(",")], [bool(int(f)) for f in args.fuse.split(",")])
    print(f"{len(src)} {what}, median of {args.repeats} alternating passes")
    res.update(mode="speed", images=len(src), data=what, repeats=args.repeats, rows=[])
    print(f"{'size':>5} {'thr':>3} {'CL':>3} {'bs':>4} {'fuse':>4} {'full img/s':>10} {'bare img/s':>10} "
          f"{'full/bare':>9} {'prep img/s':>10}")
    for size, thr, cl, bs, fuse in grid:
        f, b, p = bench_setting(args.encoder, src, image_size=size, threads=thr, channels_last=cl,
                                batch_size=bs, repeats=args.repeats, fuse=fuse)
        print(f"{size:>5} {thr:>3} {int(cl):>3} {bs:>4} {int(fuse):>4} {f:>10.1f} {b:>10.1f} {f / b:>9.2f} {p:>10.0f}",
              flush=True)
        res["rows"].append({"size": size, "threads": thr, "channels_last": cl, "batch": bs, "fuse": fuse,
                            "full_images_per_s": f, "bare_images_per_s": b, "prep_images_per_s": p,
                            "full_over_bare": f / b})
    print(json.dumps(res, allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
