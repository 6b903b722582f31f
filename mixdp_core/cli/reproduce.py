"""``mixdp reproduce NAME``: regenerate one of the papers' figures (PNG + table + JSON)."""

from __future__ import annotations

from typing import Any


def add_parser(subparsers: Any):
    p = subparsers.add_parser("reproduce", help="regenerate a figure of the papers")
    p.set_defaults(func=lambda a: 0)
    return p
