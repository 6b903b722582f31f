"""How often the public-start guard released the private model, per results file, method and ε,
from the runs a committed table was built from (each ``docs/results/*.json`` keeps every run's
``guard_released_private`` flag). The figures print the same counts under their test-error
table since 2026-11-28; this recovers them for tables generated before.

Usage: ``python scripts/guard_release_counts.py docs/results/fewshot_*.json`` (prints a markdown
table: file, method, released / runs at each ε, and the commit the runs were made with).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def counts(path: Path) -> tuple[dict[str, dict[float, list[bool]]], str | None]:
    """``({label: {ε: [released, ...]}}, commit)`` of the guarded runs in one results file."""
    data = json.loads(path.read_text())
    out: dict[str, dict[float, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r in data.get("runs", []):
        g = (r.get("metrics") or {}).get("guard_released_private")
        if g is not None:
            out[r["label"]][float(r["target_epsilon"])].append(bool(g))
    return out, (data.get("code") or {}).get("git_commit")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    rows, eps_all = [], set()
    for name in argv:
        by_label, commit = counts(Path(name))
        for lab, by_eps in by_label.items():
            eps_all |= set(by_eps)
            rows.append((Path(name).name, lab, by_eps, commit))
    eps = sorted(eps_all)
    print("| results file | method | " + " | ".join(f"ε = {e:g}" for e in eps) + " | runs made at |")
    print("|---" * (len(eps) + 3) + "|")
    for name, lab, by_eps, commit in rows:
        cells = [f"{sum(by_eps[e])}/{len(by_eps[e])}" if e in by_eps else "–" for e in eps]
        print(f"| `{name}` | `{lab}` | " + " | ".join(cells) + f" | `{commit}` |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
