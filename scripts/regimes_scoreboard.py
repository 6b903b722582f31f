"""The issue's four properties across every committed section of ``docs/results/regimes.md``, in
one table (no training: it reads the property tables the sections' generator wrote).

``python scripts/regimes_scoreboard.py``            prints the scoreboard (markdown)
``python scripts/regimes_scoreboard.py --write``    replaces it between regimes.md's markers
``<!-- BEGIN SCOREBOARD -->`` and ``<!-- END SCOREBOARD -->``

Per section (the family's summary and each section of drawn regimes): how many regimes each
property applies to, how many it holds in, and every failure with its slack ± paired standard
error as the section prints it, and the commit the section was generated at (and, for the
regimes a later section regenerated, :data:`REGENERATED`, that section's rows and commit). A test
(``tests/test_docs.py``) checks that the committed scoreboard is this script's output, so it
cannot go stale when a section is regenerated.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "results" / "regimes.md"
BEGIN, END = "<!-- BEGIN SCOREBOARD -->", "<!-- END SCOREBOARD -->"
# the sections whose property tables together cover every regime once (the named regimes'
# own sections repeat the summary's rows)
SECTIONS = ("summary: the whole family", "drawn at random: drawn_0 to drawn_7",
            "drawn after the last choice: drawn_30 to drawn_53",
            "drawn after the two-iterate choice: drawn_82 to drawn_89, 91, 92, 98, 99")
_ROW = re.compile(r"^\| `([a-z0-9_]+)` \| ([^|]+)\|([^|]+)\|([^|]+)\|([^|]+)\|([^|]+)\|$")
PROPS = ("(a)", "(b)", "(c)", "(d)")
#: a section that regenerated some regimes of the sections above (the drawn sections' imbalanced
#: regimes, after a default that changes imbalanced runs only): its rows replace theirs
REGENERATED = "the drawn sections' imbalanced regimes on the checked factor"


def _section(text: str, name: str) -> dict | None:
    """``{name, commit, rows: [(regime, role, {prop: cell})]}`` of one section, or ``None``."""
    m = re.search(re.escape(f"<!-- BEGIN AUTO {name} -->") + r"(.*?)" + re.escape(f"<!-- END AUTO {name} -->"),
                  text, re.S)
    if m is None:
        return None
    body = m.group(1)
    commit = re.search(r"git commit `([0-9a-f]+)`", body)
    rows, seen = [], set()
    for line in body.splitlines():
        r = _ROW.match(line.strip())
        if r and r.group(1) not in seen and r.group(5).strip()[:1] in "✓✗n":
            seen.add(r.group(1))
            rows.append((r.group(1), r.group(2).strip(), dict(zip(PROPS, (c.strip() for c in r.group(3, 4, 5, 6))))))
    return {"name": name, "commit": commit.group(1) if commit else "?", "rows": rows}


def sections(text: str) -> list[dict]:
    """``[{name, commit, rows: [(regime, role, {prop: cell})], newer: (commit, n) | None}]`` for
    :data:`SECTIONS`, in order. Where :data:`REGENERATED` is present, its rows replace a
    section's rows of the same regimes (``newer``: its commit and how many it replaced)."""
    newer = _section(text, REGENERATED)
    fresh = {row[0]: row for row in newer["rows"]} if newer else {}
    out = []
    for name in SECTIONS:
        sec = _section(text, name)
        if sec is None:
            raise SystemExit(f"regimes.md: no section {name!r}")
        n = sum(row[0] in fresh for row in sec["rows"])
        sec["rows"] = [fresh.get(row[0], row) for row in sec["rows"]]
        sec["newer"] = (newer["commit"], n) if n else None
        out.append(sec)
    return out


def scoreboard(text: str) -> str:
    """The markdown table: one row per section, one cell per property ("held / applies", then
    each failure)."""
    lines = ["| section (commit) | regimes | " + " | ".join(PROPS) + " |", "|---|---|---|---|---|---|"]
    tot = {p: [0, 0] for p in PROPS}
    for sec in sections(text):
        cells = []
        for p in PROPS:
            applies = [(reg, c) for reg, _, cs in sec["rows"] if (c := cs[p])[:1] in "✓✗"]
            fails = [f"`{reg}` {c[1:].strip()}" for reg, c in applies if c.startswith("✗")]
            held = len(applies) - len(fails)
            tot[p][0] += held
            tot[p][1] += len(applies)
            cells.append(f"{held} / {len(applies)}" + (" — ✗ " + "; ".join(fails) if fails else ""))
        gen = f"`{sec['commit']}`" + (f"; its {sec['newer'][1]} imbalanced at `{sec['newer'][0]}`" if sec["newer"] else "")
        lines.append(f"| {sec['name']} ({gen}) | {len(sec['rows'])} | " + " | ".join(cells) + " |")
    n = sum(len(s["rows"]) for s in sections(text))
    lines.append(f"| **all** | {n} | " + " | ".join(f"**{h} / {a}**" for h, a in tot.values()) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    text = DOC.read_text()
    board = scoreboard(text)
    if "--write" not in argv:
        print(board)
        return
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise SystemExit(f"regimes.md: markers {BEGIN} … {END} not found")
    DOC.write_text(text[:i + len(BEGIN)] + "\n" + board + "\n" + text[j:])
    print(f"wrote the scoreboard into {DOC}")


if __name__ == "__main__":
    main(sys.argv[1:])
