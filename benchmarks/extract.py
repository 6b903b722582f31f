"""CPU feature-extraction speed: inference backends, full encode path vs bare forward, side by side.

``--backends`` (the comparison behind the encoder's default): for one resolution (``--size``,
default 224 px), in one process, alternating passes over the same images, it measures images/s of

* ``plain-torch``: a plain PyTorch fp32 pipeline (PIL decode, torchvision ``Resize`` +
  ``ToTensor`` + ``Normalize``, the unfused network in NCHW layout, ``torch.inference_mode``);
* ``torch``: ``encode_images`` of ``efficientnet_lite0`` with ``backend="torch"`` (BN fusion,
  channels-last: what ``mixdp encode`` ran before the onnxruntime backend);
* ``ort-fp32`` / ``ort-int8``: ``backend="onnxruntime"`` with ``precision="fp32"`` / ``"int8"``
  (the int8 graph is calibrated on scikit-learn's two bundled sample photos, see
  ``mixdp_core/encoders/_onnx.py``);

each with ``--threads`` threads (default: torch's default, half the usable cores) and with
every usable core, plus ``ort-int8+ahead`` (``decode_ahead=True``: decode of the next batch in a
background thread, ``--threads`` threads); the default configuration is starred;
each as ``full`` (decode, resize, forward) and ``bare`` (network on pre-decoded uint8 batches),
plus ``prep`` (decode + resize alone), and the ratio of every ``full`` to ``plain-torch`` and to
``torch`` with the same threads. It then fits a linear probe (logistic regression on
``--probe-train`` CIFAR-10 train images, tested on ``--probe-test`` test images) on the
features of the ``--threads`` rows of ``torch``, ``ort-fp32`` and ``ort-int8``
(``--probe-backends``), with, against the first of them: the accuracy difference on the same
test images and its standard error (paired), the test predictions' agreement and the median
relative L2 distance of the features; and names the default
(``ENCODERS.get("efficientnet_lite0")()``: its resolved backend, precision, image size,
threads). Without the CIFAR-10 archive it uses scikit-learn's digits (8 px, upscaled; no JPEG
decode). One-time costs (ONNX export, int8 calibration; ``setup``) are timed apart, in a
temporary model folder.

Speed grid (default mode): for each setting (input resolution, torch threads, channels-last,
batch size) it measures

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
The speed grid and ``--probe`` time the torch backend (``--backend`` to change it).
``--tiny`` (smoke test) needs no data: 16 random 32x32 JPEGs written to a temporary folder,
the backend comparison at 64 px and 1 thread (probe on 8 + 8 of them) and one grid setting
(64 px, 1 thread, batch 8, one pass), same code paths, in seconds.

The last line of stdout is one JSON object: the backend rows (``--backends``), one row per
setting with ``full_over_bare`` (or the probe accuracies), or
``{"benchmark": "extract", "skipped": "<reason>"}`` without the archive (grid and probe).

Usage::

    python benchmarks/extract.py --backends --size 224 --n 200 --probe-train 500 --probe-test 500
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


def bench_setting(name, src, *, image_size, threads, channels_last, batch_size, repeats, fuse=True, backend="torch"):
    kw = {"fuse": fuse, "backend": backend} if name == "efficientnet_lite0" else {}
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


def fit_probe(Xtr, ytr, Xte):
    """Test predictions of a logistic-regression probe (benchmark only: the scaler and fit are
    non-private, never used by the DP methods)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    sc = StandardScaler().fit(Xtr)
    clf = LogisticRegression(max_iter=2000, C=0.1).fit(sc.transform(Xtr), ytr)
    return clf.predict(sc.transform(Xte))


def linear_probe(name, train, test, *, image_size, threads, batch_size, backend="torch") -> tuple[float, float]:
    kw = {"backend": backend} if name == "efficientnet_lite0" else {}
    enc = ENCODERS.get(name)(image_size=image_size, num_threads=threads, batch_size=batch_size, device="cpu", **kw)
    enc.load()
    t = time.perf_counter()
    Xtr, _ = enc.encode_images(train)
    Xte, _ = enc.encode_images(test)
    ips = (len(train) + len(test)) / (time.perf_counter() - t)
    return float(np.mean(fit_probe(Xtr, train.labels, Xte) == test.labels)), ips


# ----------------------------------------------------------------------------- backends
class PlainTorch:
    """A plain PyTorch fp32 pipeline: torchvision transforms per image, the unfused network
    in NCHW layout, batches of ``batch_size``, ``threads`` torch threads."""

    def __init__(self, image_size: int, batch_size: int, threads: int, pretrained="imagenet"):
        import torch
        from torchvision import transforms as T

        from mixdp_core.encoders.efficientnet import EfficientNetLite0Encoder as E

        self.torch, self.batch_size, self.threads = torch, batch_size, threads
        ref = E(pretrained=pretrained, image_size=image_size, fuse=False, channels_last=False, backend="torch",
                device="cpu")
        self.model = ref.model
        self.tf = T.Compose([T.Resize((image_size, image_size), interpolation=T.InterpolationMode.BILINEAR),
                             T.ToTensor(), T.Normalize(E.mean, E.std)])

    def encode_images(self, src):
        torch = self.torch
        old = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            out = []
            for s in range(0, len(src), self.batch_size):
                x = torch.stack([self.tf(src[i][0].convert("RGB"))
                                 for i in range(s, min(s + self.batch_size, len(src)))])
                with torch.inference_mode():
                    out.append(self.model(x).numpy())
            return np.concatenate(out), np.arange(len(src))
        finally:
            torch.set_num_threads(old)


def digits_sources(n_train: int, n_test: int):
    from mixdp_core.data.datasets import load_digits_dataset

    d = load_digits_dataset()
    tr, te = d.train, d.test
    from mixdp_core.data.base import ArrayImageSource

    return (ArrayImageSource(tr.images[:n_train], tr.labels[:n_train], tr.value_range),
            ArrayImageSource(te.images[:n_test], te.labels[:n_test], te.value_range))


def bench_backends(args, src, train, test, what: str, pretrained="imagenet") -> dict:
    """Side-by-side rows of every backend (see the module docstring)."""
    import os

    from mixdp_core.encoders._onnx import usable_cores
    from mixdp_core.encoders._torch import default_num_threads
    from mixdp_core.encoders.efficientnet import EfficientNetLite0Encoder as E

    size, bs, reps = args.size, int(args.batch.split(",")[0]), args.repeats
    thr = default_num_threads() if args.threads in ("", "auto") else int(args.threads.split(",")[0])
    cores = usable_cores()
    model_dir = Path(tempfile.mkdtemp(prefix="mixdp-extract-models-"))
    common = dict(pretrained=pretrained, image_size=size, batch_size=bs, device="cpu", model_dir=model_dir)
    load0 = os.getloadavg()
    print(f"backends at {size} px: {len(src)} {what}; batch {bs}; {cores} usable cores; load average "
          f"{load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f}", flush=True)
    # --tiny: one thread count (the rows at every core run the same code with more threads, and
    # on a loaded 2-core machine torch at 2 threads took most of the smoke test's time)
    counts = [thr] if cores == thr or getattr(args, "tiny", False) else [thr, cores]
    # (name, threads, constructor options); plain-torch rows are built apart
    specs = []
    for t in counts:
        specs += [(f"plain-torch", t, None), ("torch", t, dict(backend="torch")),
                  ("ort-fp32", t, dict(backend="onnxruntime", precision="fp32")),
                  ("ort-int8", t, dict(backend="onnxruntime", precision="int8"))]
    specs.append(("ort-int8+ahead", thr, dict(backend="onnxruntime", precision="int8", decode_ahead=True)))
    encs: dict[tuple[str, int], object] = {}
    setup: dict[tuple[str, int], float] = {}
    for name, t, kw in specs:
        t0 = time.perf_counter()
        if kw is None:
            e = PlainTorch(size, bs, t, pretrained)
        else:
            e = E(**common, **kw, num_threads=t)
            e.load()  # export / quantize (first of each precision), session or weights
        setup[(name, t)] = time.perf_counter() - t0
        encs[(name, t)] = e
    imgs = [src[i][0] for i in range(len(src))]
    ref = encs[("torch", thr)]
    u8 = [np.stack([ref.preprocess_image(im) for im in imgs[s : s + bs]]) for s in range(0, len(imgs), bs)]
    for key, e in encs.items():  # warm-up
        e.encode_images(src) if key[0] == "plain-torch" else e.forward_uint8(u8[0][:2])
    full = {k: [] for k in encs}
    bare = {k: [] for k in encs if k[0] != "plain-torch"}
    prep = []
    for _ in range(reps):
        for key, e in encs.items():
            t0 = time.perf_counter()
            e.encode_images(src)
            full[key].append(len(src) / (time.perf_counter() - t0))
            if key in bare:
                t0 = time.perf_counter()
                for b in u8:
                    e.forward_uint8(b)
                bare[key].append(len(src) / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for s in range(0, len(src), bs):
            np.stack([ref.preprocess_image(src[i][0]) for i in range(s, min(s + bs, len(src)))])
        prep.append(len(src) / (time.perf_counter() - t0))
    med = {k: statistics.median(v) for k, v in full.items()}
    bmed = {k: statistics.median(v) for k, v in bare.items()}
    d = E(device="cpu")
    default = {"backend": d.runtime[0], "precision": d.runtime[1], "image_size": d.image_size,
               "decode_ahead": d.decode_ahead,
               "threads": d.ort_threads if d.runtime[0] == "onnxruntime" else d.num_threads}
    dname = ("torch" if default["backend"] == "torch" else f"ort-{default['precision']}") + (
        "+ahead" if default["decode_ahead"] else "")
    rows = []
    print("x plain / x torch: full img/s over plain-torch / torch with the same threads; * = the default")
    print(f"{'backend':<16} {'thr':>3} {'full img/s':>10} {'x plain':>8} {'x torch':>8} {'bare img/s':>10} "
          f"{'setup s':>8}")
    for (name, t), e in encs.items():
        is_default = name == dname and t == default["threads"]
        r = {"backend": name, "threads": t, "full_images_per_s": med[(name, t)],
             "over_plain_torch": med[(name, t)] / med[("plain-torch", t)],
             "over_torch": med[(name, t)] / med[("torch", t)], "bare_images_per_s": bmed.get((name, t)),
             "setup_s": setup[(name, t)], "default": is_default}
        rows.append(r)
        b = f"{bmed[(name, t)]:>10.1f}" if (name, t) in bmed else f"{'-':>10}"
        print(f"{name + ('*' if is_default else ''):<16} {t:>3} {r['full_images_per_s']:>10.1f} "
              f"{r['over_plain_torch']:>8.2f} {r['over_torch']:>8.2f} {b} {r['setup_s']:>8.1f}", flush=True)
    encs = {k[0]: v for k, v in encs.items() if k[1] == thr}  # the probe runs the single-thread rows
    pmed = statistics.median(prep)
    print(f"decode + resize alone: {pmed:.0f} img/s (median of {reps})", flush=True)

    probe = []
    if train is not None:
        names = [b for b in args.probe_backends.split(",") if b]
        refname = names[0]
        print(f"linear probe: {len(train)} train / {len(test)} test images, {size} px; agreement, feature "
              f"distance and accuracy difference (paired, +- standard error) against {refname}", flush=True)
        print(f"{'backend':<16} {'accuracy':>8} {'diff':>7} {'+-SE':>6} {'agree':>6} {'rel L2':>7} {'img/s':>7}")
        feats = {}
        for name in names:
            e = encs[name]
            t = time.perf_counter()
            Xtr, _ = e.encode_images(train)
            Xte, _ = e.encode_images(test)
            ips = (len(train) + len(test)) / (time.perf_counter() - t)
            pred = fit_probe(Xtr, train.labels, Xte)
            feats[name] = (Xte, pred)
            ok = (pred == test.labels).astype(float)
            X0, p0 = feats[refname]
            dd = ok - (p0 == test.labels)
            diff, se = float(dd.mean()), float(dd.std(ddof=1) / np.sqrt(len(dd))) if len(dd) > 1 else 0.0
            agree = float(np.mean(pred == p0))
            rel = float(np.median(np.linalg.norm(Xte - X0, axis=1) / np.maximum(np.linalg.norm(X0, axis=1), 1e-12)))
            probe.append({"backend": name, "accuracy": float(ok.mean()), "reference": refname,
                          "accuracy_diff": diff, "accuracy_diff_se": se, "agreement": agree,
                          "median_rel_l2": rel, "images_per_s": ips})
            print(f"{name:<16} {ok.mean():>8.3f} {100 * diff:>+7.2f} {100 * se:>6.2f} {agree:>6.3f} {rel:>7.1e} "
                  f"{ips:>7.1f}", flush=True)
        print("(diff and SE in points of accuracy)")
    print(f"default (ENCODERS.get('efficientnet_lite0')() on this machine): backend {default['backend']}, "
          f"precision {default['precision']}, {default['image_size']} px, decode_ahead {default['decode_ahead']}, "
          f"{default['threads']} thread(s)")
    load1 = os.getloadavg()
    print(f"load average at the end {load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f}")
    import shutil

    shutil.rmtree(model_dir, ignore_errors=True)
    return {"size": size, "images": len(src), "data": what, "batch": bs, "threads": counts, "cores": cores,
            "repeats": reps, "rows": rows, "prep_images_per_s": pmed, "probe": probe, "default": default,
            "load_start": list(load0), "load_end": list(load1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", default="efficientnet_lite0")
    ap.add_argument("--n", type=int, default=128, help="images per timing pass")
    ap.add_argument("--sizes", default="224,128,96")
    ap.add_argument("--threads", default=None,
                    help="grid: a list (default 1,2); --backends: one count or 'auto' (default: the encoder's default)")
    ap.add_argument("--channels-last", default="1,0", help="1 (on), 0 (off) or both")
    ap.add_argument("--batch", default="32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fuse", default="1", help="EfficientNet BN/padding fusion: 1, 0 or 1,0")
    ap.add_argument("--backends", action="store_true",
                    help="compare the inference backends at --size (speed and linear probe) instead of the grid")
    ap.add_argument("--size", type=int, default=224, help="--backends: input side in pixels")
    ap.add_argument("--backend", default="torch", help="grid / --probe: efficientnet_lite0 backend")
    ap.add_argument("--probe-backends", default="torch,ort-fp32,ort-int8",
                    help="--backends: rows whose features get a linear probe; the first is the reference")
    ap.add_argument("--probe", action="store_true", help="linear-probe accuracy per size instead of the speed grid")
    ap.add_argument("--probe-train", type=int, default=500)
    ap.add_argument("--probe-test", type=int, default=500)
    ap.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "mixdp_bench_cifar"))
    ap.add_argument("--tiny", action="store_true", help="16 random JPEGs, 64 px, one setting (no data needed)")
    args = ap.parse_args(argv)
    if args.threads is None:
        args.threads = "auto" if args.backends else "1,2"
    res: dict = {"benchmark": "extract", "encoder": args.encoder}

    tiny_dir = None
    if args.tiny:
        if args.probe:
            ap.error("--tiny times the backends and the speed grid only")
        args.n, args.sizes, args.threads, args.channels_last, args.batch, args.repeats, args.fuse = (
            16, "64", "1", "1", "8", 1, "1")
        args.size = 64
        tiny_dir = tempfile.TemporaryDirectory(prefix="mixdp-extract-tiny-")
    elif args.backends:
        pass  # falls back to digits without the archive
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
    threads = [int(t) for t in args.threads.split(",")] if args.threads != "auto" else []
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} default threads, encoder {args.encoder}")

    if args.backends or tiny_dir is not None:
        if args.encoder != "efficientnet_lite0":
            raise SystemExit("--backends compares the runtimes of efficientnet_lite0 only")
        import onnxruntime

        print(f"onnxruntime {onnxruntime.__version__}")
        if tiny_dir is not None:
            src = random_jpegs(tiny_dir, args.n)
            train = FileImageSource(src.paths[:8], np.arange(8) % 2)
            test = FileImageSource(src.paths[8:], np.arange(8) % 2)
            b = bench_backends(args, src, train, test, "random 32x32 JPEGs (--tiny)", pretrained=None)
        elif ARCHIVE.is_file():
            src = extract_cifar(dest, "test", max(1, args.n // 10))
            train = extract_cifar(dest, "train", args.probe_train // 10)
            test = extract_cifar(dest, "test", args.probe_test // 10)
            b = bench_backends(args, src, train, test, "CIFAR-10 JPEGs (32x32, upscaled)")
        else:
            print(f"CIFAR-10 archive not found at {ARCHIVE}: scikit-learn digits (8x8, upscaled) instead")
            train, test = digits_sources(args.probe_train, args.probe_test)
            src = digits_sources(0, args.n)[1]
            b = bench_backends(args, src, train, test, "scikit-learn digits (8x8, upscaled; no JPEG decode)")
        res.update(mode="backends", backends=b)
        if tiny_dir is None:
            print(json.dumps(res, allow_nan=False))
            return 0

    if args.probe:
        train = extract_cifar(dest, "train", args.probe_train // 10)
        test = extract_cifar(dest, "test", args.probe_test // 10)
        print(f"linear probe: {len(train)} train / {len(test)} test CIFAR-10 images, threads={threads[0]}")
        print(f"{'size':>5} {'acc':>6} {'img/s':>7}")
        res.update(mode="probe", probe_train=len(train), probe_test=len(test), threads=threads[0], rows=[])
        for s in sizes:
            acc, ips = linear_probe(args.encoder, train, test, image_size=s, threads=threads[0],
                                    batch_size=int(args.batch.split(",")[0]), backend=args.backend)
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
    res.update(mode="speed" if tiny_dir is None else "backends+speed", images=len(src), data=what,
               repeats=args.repeats, rows=[])
    print(f"{'size':>5} {'thr':>3} {'CL':>3} {'bs':>4} {'fuse':>4} {'full img/s':>10} {'bare img/s':>10} "
          f"{'full/bare':>9} {'prep img/s':>10}")
    for size, thr, cl, bs, fuse in grid:
        f, b, p = bench_setting(args.encoder, src, image_size=size, threads=thr, channels_last=cl,
                                batch_size=bs, repeats=args.repeats, fuse=fuse, backend=args.backend)
        print(f"{size:>5} {thr:>3} {int(cl):>3} {bs:>4} {int(fuse):>4} {f:>10.1f} {b:>10.1f} {f / b:>9.2f} {p:>10.0f}",
              flush=True)
        res["rows"].append({"size": size, "threads": thr, "channels_last": cl, "batch": bs, "fuse": fuse,
                            "full_images_per_s": f, "bare_images_per_s": b, "prep_images_per_s": p,
                            "full_over_bare": f / b})
    print(json.dumps(res, allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
