"""Helpers shared by the app tests."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
TIMEOUT = 120  # seconds per AppTest script run (real runs on digits + first imports)


def small_config(**kw):
    """digits · pixels config (fast: a few seconds on one core)."""
    from mixdp_core.runs.runner import RunConfig

    base = dict(dataset="digits", encoder="pixels", method="adamix", target_epsilon=3.0, seed=0)
    base.update(kw)
    return RunConfig(**base)


def page_text(t) -> str:
    """All markdown / caption / info / error text of the current page, joined."""
    parts = []
    for kind in ("title", "header", "markdown", "caption", "info", "error", "warning", "success", "subheader"):
        parts.extend(str(e.value) for e in getattr(t, kind))
    return "\n".join(parts)
