"""A pre-registered check of the (c) failure map's boundary on regimes nobody has run
(docs/results/regimes.md, "Where (c) fails: the map", and "The map's boundary on fresh draws").

The map (``scripts/c_failure_map.py``) was read off the committed tables: above
``signal = (n / C) * mu(8) / sqrt(D) = 6`` property (c) held in 11 of 11 regimes. That boundary
was chosen after the results, so it is a hypothesis, not a finding. This script tests it on
draws of the family that no table has run:

* ``select START COUNT PLAN``: walk ``drawn_START``, ``drawn_START+1``, ... and keep the first
  COUNT whose signal (sizes only: the seed-0 split's private row count, C, D; no method is fit)
  is above :data:`SIGNAL_BAR`; write them, every skipped index and the prediction to the JSON
  file PLAN *before* any method runs on them.
* ``report PLAN JSONL``: the verdict per planned regime from the runs of
  ``python scripts/variants_parallel.py --regimes <the plan's> --epsilons 3,8 --seeds 0,1,2,3
  --variants op,pg,def --jsonl JSONL`` (secure noise): where (c) applies (paragon <= 1/2
  Only-Public, means over the seeds), whether AdaMix gains >= 10 % at epsilon = 3 and >= 40 %
  at 8 (the figure's rule), with each gain's standard error over the seeds.

Usage: ``python scripts/c_map_validation.py select 100 10 PLAN.json`` then the runs, then
``python scripts/c_map_validation.py report PLAN.json RUNS.jsonl``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from center_and_start import regime_splits  # noqa: E402  (the tables' regimes and splits)
from mixdp_core.accounting.gaussian import gdp_mu_for_budget  # noqa: E402
from mixdp_core.runs.figures.regimes import regime_by_name  # noqa: E402

#: The map's boundary, read off c_failure_map.png after the tables (the hypothesis under test).
SIGNAL_BAR = 6.0


def signal(name: str) -> tuple[float, int, int, int]:
    """``(signal, private rows, C, D)`` of regime ``name`` from its seed-0 split (sizes only)."""
    from center_and_start import userlike_regime

    reg = userlike_regime(int(name.split("_")[1])) if name.startswith("userlike_") else regime_by_name(name)
    kw = reg["dataset_kwargs"]
    n = len(next(iter(regime_splits(name, [0])))[1].y_private)
    C, D = int(kw["classes"]), int(kw["dim"])
    return n / C * gdp_mu_for_budget(epsilon=8.0, delta=1e-5) / math.sqrt(D), n, C, D


def select(start: int, count: int, plan: str) -> None:
    kept, skipped, i = [], [], start
    while len(kept) < count:
        name = f"drawn_{i}"
        s, n, C, D = signal(name)
        row = {"regime": name, "signal": round(s, 3), "private_rows": n, "classes": C, "dim": D}
        (kept if s > SIGNAL_BAR else skipped).append(row)
        print(f"{name}: C={C} D={D} n={n} signal={s:.2f} {'kept' if s > SIGNAL_BAR else 'skipped'}",
              file=sys.stderr, flush=True)
        i += 1
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    Path(plan).write_text(json.dumps({
        "hypothesis": f"(c) holds on every regime with signal > {SIGNAL_BAR:g} where it applies "
                      "(paragon <= 1/2 Only-Public; means over seeds 0-3)",
        "signal_bar": SIGNAL_BAR, "first_index": start, "commit": commit, "kept": kept, "skipped": skipped,
        "runs": "python scripts/variants_parallel.py --regimes <kept> --epsilons 3,8 --seeds 0,1,2,3 "
                "--variants op,pg,def --workers 2 --jsonl <runs>",
    }, indent=1) + "\n")


def select_userlike(count: int, plan: str) -> None:
    """Fix ``userlike_0`` … ``userlike_<count−1>`` (every one, whatever its signal) and write
    them with their sizes to PLAN before any method runs (the user-like check, below)."""
    from center_and_start import userlike_regime

    kept = []
    for i in range(count):
        name = f"userlike_{i}"
        s, n, C, D = signal(name)
        kept.append({"regime": name, "signal": round(s, 3), "private_rows": n, "classes": C, "dim": D,
                     "dataset_kwargs": userlike_regime(i)["dataset_kwargs"]})
        print(f"{name}: C={C} n={n} signal={s:.2f} {userlike_regime(i)['dataset_kwargs']}", file=sys.stderr, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    Path(plan).write_text(json.dumps({
        "question": "how often (c) holds on regimes drawn around the shape of the product owner's unseen data "
                    "(about 100 classes, D = 1280, 2 public and about 62 private rows per class); every draw reported",
        "commit": commit, "kept": kept, "skipped": [],
        "runs": "python scripts/variants_parallel.py --regimes <kept> --epsilons 3,8 --seeds 0,1,2,3 "
                "--variants op,pg,def --workers 2 --jsonl <runs>",
    }, indent=1) + "\n")


def _mean_se(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, float("nan")
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


def report(plan: str, jsonl: str) -> None:
    p = json.loads(Path(plan).read_text())
    err: dict[tuple, dict[int, float]] = defaultdict(dict)
    for line in Path(jsonl).read_text().splitlines():
        r = json.loads(line)
        err[(r["regime"], r["variant"], r["epsilon"])][r["seed"]] = r["error"]
    print("| regime | C | D | private rows / class | signal | Only-Public | paragon | AdaMix ε = 3 / 8 "
          "| gain ε = 3 / 8 (± s.e.) | (c) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    tally = {"holds": 0, "fails": 0, "n/a": 0}
    for row in p["kept"]:
        g = row["regime"]
        op, pg = err[(g, "op", None)], err[(g, "pg", None)]
        a3, a8 = err[(g, "def", 3.0)], err[(g, "def", 8.0)]
        seeds = sorted(set(op) & set(pg) & set(a3) & set(a8))
        if not seeds:
            print(f"| `{g}` | {row['classes']} | {row['dim']} | – | {row['signal']:.1f} | not run | | | | |")
            continue
        mop = sum(op[s] for s in seeds) / len(seeds)
        mpg = sum(pg[s] for s in seeds) / len(seeds)
        m3, m8 = (sum(a[s] for s in seeds) / len(seeds) for a in (a3, a8))
        # gain per seed against that seed's Only-Public: its spread gives the mean gain's s.e.
        g3 = _mean_se([1 - a3[s] / op[s] if op[s] else 0.0 for s in seeds])
        g8 = _mean_se([1 - a8[s] / op[s] if op[s] else 0.0 for s in seeds])
        applies = mpg <= 0.5 * mop
        holds = applies and (1 - m3 / mop) >= 0.10 and (1 - m8 / mop) >= 0.40
        mark = "n/a" if not applies else ("✓" if holds else "✗")
        tally["n/a" if not applies else ("holds" if holds else "fails")] += 1
        print(f"| `{g}` | {row['classes']} | {row['dim']} | {row['private_rows'] / row['classes']:.0f} "
              f"| {row['signal']:.1f} | {mop:.1f} | {mpg:.1f} | {m3:.1f} / {m8:.1f} "
              f"| {100 * (1 - m3 / mop):.0f} / {100 * (1 - m8 / mop):.0f} % "
              f"(± {100 * g3[1]:.0f} / {100 * g8[1]:.0f}) | {mark} |")
    print(f"\n(c) holds in {tally['holds']}, fails in {tally['fails']}, does not apply in {tally['n/a']} "
          f"of {len(p['kept'])} planned regimes (seeds {len(seeds)} each).")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "select" and len(sys.argv) == 5:
        select(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif cmd == "userlike" and len(sys.argv) == 4:
        select_userlike(int(sys.argv[2]), sys.argv[3])
    elif cmd == "report" and len(sys.argv) == 4:
        report(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
