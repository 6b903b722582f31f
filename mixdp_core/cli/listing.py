"""``mixdp datasets | encoders | methods``: list the registries."""

from __future__ import annotations

import argparse
from typing import Any


def _datasets(args: argparse.Namespace) -> int:
    from ..data.datasets import DATASETS

    for name, loader in DATASETS.items():
        doc = (loader.__doc__ or "").strip().splitlines()[0] if loader.__doc__ else ""
        print(f"{name:14s} {doc}")
    return 0


def _encoders(args: argparse.Namespace) -> int:
    from ..encoders import ENCODERS

    for name, cls in ENCODERS.items():
        flags = [f for f, on in (("offline", getattr(cls, "offline", False)), ("text", getattr(cls, "has_text", False))) if on]
        print(f"{name:18s} [{', '.join(flags)}] {getattr(cls, 'description', '')}")
    return 0


def _methods(args: argparse.Namespace) -> int:
    from ..methods import METHODS

    for name, cls in METHODS.items():
        tag = "private" if cls.private else "non-private"
        print(f"{name:22s} {cls.family:11s} {tag:12s} {cls.description}")
    return 0


def add_parser(sub: Any) -> None:
    """Add ``datasets``, ``encoders`` and ``methods``."""
    sub.add_parser("datasets", help="list datasets").set_defaults(func=_datasets)
    sub.add_parser("encoders", help="list encoders").set_defaults(func=_encoders)
    sub.add_parser("methods", help="list methods").set_defaults(func=_methods)
