"""Feature-cache hit latency: extraction once, then repeated cache loads (digits).

Prints seconds per cache hit next to the extraction time of the same entry, measured in one
run. The issue's target: a digits cache hit loads in well under a second.

Prints one JSON object (``extract_s``, ``hit_s``, ``extract_over_hit``) as the last line of stdout;
``--tiny`` uses 2 cache hits (smoke test).

Usage: ``python benchmarks/cache.py [--encoder pixels|efficientnet_lite0] [--repeats 5] [--tiny]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from mixdp_core.features import get_features


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", default="pixels")
    ap.add_argument("--image-size", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tiny", action="store_true", help="2 cache hits (smoke test)")
    args = ap.parse_args()
    if args.tiny:
        args.repeats = min(args.repeats, 2)
    kw = {"encoder_kwargs": {"image_size": args.image_size}} if args.image_size else {}
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        fs = get_features("digits", args.encoder, cache_dir=d, **kw)
        extract = time.perf_counter() - t0
        hits = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fs2 = get_features("digits", args.encoder, cache_dir=d, **kw)
            hits.append(time.perf_counter() - t0)
            assert fs2.meta["cache_hit"]
    med = statistics.median(hits)
    print(f"digits/{args.encoder}: {fs.X_train.shape[0] + fs.X_test.shape[0]} x {fs.dim} features")
    print(f"  first call (extract + store): {extract:.3f} s")
    print(f"  cache hit (median of {args.repeats}): {med * 1000:.1f} ms   ratio extract/hit = {extract / med:.1f}x")
    print(json.dumps({"benchmark": "cache", "dataset": "digits", "encoder": args.encoder,
                      "rows": int(fs.X_train.shape[0] + fs.X_test.shape[0]), "dim": int(fs.dim),
                      "repeats": args.repeats, "extract_s": extract, "hit_s": med,
                      "extract_over_hit": extract / med}, allow_nan=False))


if __name__ == "__main__":
    main()
