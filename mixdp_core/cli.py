"""``mixdp`` command line: list registries, extract features, train.

Bad arguments give a one-line error naming the field and the allowed values (exit code 2);
progress goes to stderr (tqdm), results to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from .errors import MixDPError


def _cmd_datasets(args: argparse.Namespace) -> int:
    from .data.datasets import DATASETS

    for name, loader in DATASETS.items():
        doc = (loader.__doc__ or "").strip().splitlines()[0] if loader.__doc__ else ""
        print(f"{name:14s} {doc}")
    return 0


def _cmd_encoders(args: argparse.Namespace) -> int:
    from .encoders import ENCODERS

    for name, cls in ENCODERS.items():
        flags = []
        if getattr(cls, "offline", False):
            flags.append("offline")
        if getattr(cls, "has_text", False):
            flags.append("text")
        print(f"{name:18s} [{', '.join(flags)}] {getattr(cls, 'description', '')}")
    return 0


def _cmd_methods(args: argparse.Namespace) -> int:
    from .methods import METHODS

    for name, cls in METHODS.items():
        tag = "private" if cls.private else "non-private"
        print(f"{name:22s} {cls.family:11s} {tag:12s} {cls.description}")
    return 0


def _cmd_encode(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .features.cache import get_features

    bars: dict[str, tqdm] = {}

    def progress(split: str, done: int, total: int) -> None:
        bar = bars.get(split)
        if bar is None:
            bar = bars[split] = tqdm(total=total, desc=f"encode {split}", unit="img", file=sys.stderr)
        bar.update(done - bar.n)

    kwargs = {}
    if args.max_per_class is not None:
        kwargs["max_per_class"] = args.max_per_class
    if args.max_test_per_class is not None:
        kwargs["max_test_per_class"] = args.max_test_per_class
    if args.download:
        kwargs["download"] = True
    enc_kwargs = {"image_size": args.image_size} if args.image_size else None
    fs = get_features(
        args.dataset,
        args.encoder,
        root=args.root,
        cache_dir=args.cache_dir,
        dtype=args.dtype,
        batch_size=args.batch_size,
        device=args.device,
        skip_corrupt=args.skip_corrupt,
        progress=progress,
        refresh=args.refresh,
        encoder_kwargs=enc_kwargs,
        **kwargs,
    )
    for b in bars.values():
        b.close()
    summary = {
        "dataset": fs.meta.get("dataset", args.dataset),
        "encoder": args.encoder,
        "n_train": int(fs.X_train.shape[0]),
        "n_test": int(fs.X_test.shape[0]),
        "dim": fs.dim,
        "classes": fs.n_classes,
        "cache_hit": bool(fs.meta.get("cache_hit")),
        "cache_key": fs.meta.get("cache_key"),
    }
    print(json.dumps(summary))
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse that prints a single-line error (exit code 2)."""

    def error(self, message: str) -> None:  # noqa: D401
        sys.stderr.write(f"mixdp: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    from .data.datasets import DATASETS
    from .encoders import ENCODERS

    p = _Parser(prog="mixdp", description="MixDP Explorer: mixed public/private differentially private learning.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("datasets", help="list datasets").set_defaults(func=_cmd_datasets)
    sub.add_parser("encoders", help="list encoders").set_defaults(func=_cmd_encoders)
    sub.add_parser("methods", help="list methods").set_defaults(func=_cmd_methods)

    e = sub.add_parser("encode", help="extract and cache features of a dataset")
    e.add_argument("--dataset", required=True, help=f"one of {', '.join(DATASETS.keys())}; or image_folder:<root>, features:<npz>")
    e.add_argument("--encoder", default="efficientnet_lite0", help=f"one of {', '.join(ENCODERS.keys()) or '(none)'}")
    e.add_argument("--root", default=None, help="dataset folder (image_folder) or download folder")
    e.add_argument("--download", action="store_true", help="download torchvision datasets (needs network)")
    e.add_argument("--cache-dir", default=None, help="feature cache folder (default: $MIXDP_CACHE or ~/.cache/mixdp/features)")
    e.add_argument("--dtype", choices=["float16", "float32"], default="float16")
    e.add_argument("--batch-size", type=int, default=64)
    e.add_argument("--image-size", type=int, default=None, help="encoder input resolution (encoder default if omitted)")
    e.add_argument("--device", default=None, help="cuda, mps or cpu (default: auto)")
    e.add_argument("--max-per-class", type=int, default=None, help="image_folder: first N train files per class")
    e.add_argument("--max-test-per-class", type=int, default=None, help="image_folder: first N test files per class")
    e.add_argument("--skip-corrupt", action="store_true", help="skip undecodable images with a warning")
    e.add_argument("--refresh", action="store_true", help="re-extract even if cached")
    e.set_defaults(func=_cmd_encode)

    try:
        from .runs.cli_train import add_parser as add_train_parser
    except ImportError:  # the run store is optional at import time of the CLI
        add_train_parser = None
    if add_train_parser is not None:
        add_train_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mixdp`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "encode":
        from .data.datasets import DATASETS, parse_spec
        from .encoders import ENCODERS

        key, _ = parse_spec(args.dataset)
        if key not in DATASETS:
            parser.error(f"--dataset: unknown {key!r}; choose one of {', '.join(DATASETS.keys())}")
        if key != "features" and args.encoder not in ENCODERS:
            parser.error(f"--encoder: unknown {args.encoder!r}; choose one of {', '.join(ENCODERS.keys())}")
        if args.batch_size < 1:
            parser.error(f"--batch-size: must be >= 1, got {args.batch_size}")
    try:
        return int(args.func(args) or 0)
    except MixDPError as e:
        sys.stderr.write(f"mixdp: error: {e}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("mixdp: interrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
