"""``mixdp encode``: extract and cache the features of a dataset.

Prints one JSON object on stdout (sizes, cache key, whether the cache was hit, the runtime that
encoded: e.g. ``"onnxruntime-int8"``, ``null`` for encoders with a single runtime); progress
bars on stderr.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import ConfigError
from ._common import Progress, description


def add_parser(sub: Any) -> None:
    e = sub.add_parser("encode", help="extract and cache features of a dataset", description=description(__doc__))
    a = e.add_argument
    a("--dataset", required=True, help="dataset spec (see `mixdp datasets`); or image_folder:<root>, features:<npz>")
    a("--encoder", default="efficientnet_lite0", help="feature extractor (see `mixdp encoders`)")
    a("--root", default=None, help="dataset folder (image_folder) or download folder")
    a("--download", action="store_true", help="download torchvision datasets (needs network)")
    a("--cache-dir", default=None, help="feature cache folder (default: $MIXDP_CACHE or ~/.cache/mixdp/features)")
    a("--dtype", choices=["float16", "float32"], default="float16",
      help="dtype of the cached features (float16 halves the cache; default float16)")
    a("--batch-size", type=int, default=64, help="images per encoder batch: an integer >= 1 (default 64)")
    a("--image-size", type=int, default=None, help="encoder input resolution (encoder default if omitted)")
    a("--device", default=None, help="cuda, mps or cpu (default: auto)")
    a("--weights", default=None, metavar="FILE", help="encoder weights file (offline route; see `mixdp train --help`)")
    a("--encoder-arg", action="append", default=[], metavar="KEY=VALUE",
      help="encoder option, e.g. backend=torch, precision=fp32, decode_ahead=true (efficientnet_lite0); repeatable")
    a("--max-per-class", type=int, default=None, help="image_folder: first N train files per class")
    a("--max-test-per-class", type=int, default=None, help="image_folder: first N test files per class")
    a("--skip-corrupt", action="store_true", help="skip undecodable images with a warning")
    a("--refresh", action="store_true", help="re-extract even if cached")
    a("--no-progress", action="store_true", help="no progress bars on stderr")
    e.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    from ..data.datasets import DATASETS, parse_spec
    from ..encoders import ENCODERS

    key, _ = parse_spec(args.dataset)
    if key not in DATASETS:
        raise ConfigError("--dataset", f"unknown {key!r}; choose one of {', '.join(DATASETS.keys())}")
    if key != "features" and args.encoder not in ENCODERS:
        raise ConfigError("--encoder", f"unknown {args.encoder!r}; choose one of {', '.join(ENCODERS.keys())}")
    if args.batch_size < 1:
        raise ConfigError("--batch-size", f"must be >= 1, got {args.batch_size}")


def run(args: argparse.Namespace) -> int:
    from ..features.cache import get_features
    from .train import _encoder_kwargs

    _check(args)
    ekw = _encoder_kwargs(args)  # --encoder-arg pairs, --weights as ``pretrained``
    if args.image_size is not None:  # 0 is a value to refuse, not "omitted"
        ekw["image_size"] = args.image_size
    kwargs: dict[str, Any] = {}
    if args.max_per_class is not None:
        kwargs["max_per_class"] = args.max_per_class
    if args.max_test_per_class is not None:
        kwargs["max_test_per_class"] = args.max_test_per_class
    if args.download:
        kwargs["download"] = True
    from ..data.datasets import check_dataset_kwargs

    check_dataset_kwargs(args.dataset, kwargs)  # an option the dataset does not take was ignored in silence
    prog = Progress(not args.no_progress)
    try:
        fs = get_features(
            args.dataset, args.encoder, root=args.root, cache_dir=args.cache_dir, dtype=args.dtype,
            batch_size=args.batch_size, device=args.device, skip_corrupt=args.skip_corrupt,
            progress=prog.features, refresh=args.refresh,
            encoder_kwargs=ekw or None, **kwargs,
        )
    finally:
        prog.close()
    print(json.dumps({
        "dataset": fs.meta.get("dataset", args.dataset), "encoder": args.encoder,
        "n_train": int(fs.X_train.shape[0]), "n_test": int(fs.X_test.shape[0]), "dim": fs.dim,
        "classes": fs.n_classes, "cache_hit": bool(fs.meta.get("cache_hit")), "cache_key": fs.meta.get("cache_key"),
        "encoder_runtime": fs.meta.get("encoder_runtime"),
    }))
    return 0
