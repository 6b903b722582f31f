"""Regenerate ``docs/methods.md`` from the config declarations (``mixdp methods --markdown``).

Usage: ``python scripts/gen_methods_doc.py`` (``tests/test_docs.py`` fails when the file is
stale).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's mixdp_core, not an installed one

from mixdp_core.cli.listing import methods_markdown  # noqa: E402

if __name__ == "__main__":
    out = ROOT / "docs" / "methods.md"
    out.write_text(methods_markdown() + "\n", encoding="utf-8")
    print(f"wrote {out}")
