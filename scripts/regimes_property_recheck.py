"""Recheck the properties of committed ``regimes`` tables from their JSON alone (no training).

``python scripts/regimes_property_recheck.py docs/results/regimes.json [more.json ...]``

Two reviews of the property rules, applied to the runs each JSON holds (every run's metrics,
seeds and ε):
- (b) and (d) over **every pair** ε < ε' (the tables were generated checking consecutive ε only;
  the library checks every pair since): a verdict that changes is printed.
- (d) on the family's class-balanced test sets is (b) on the same numbers (balanced accuracy =
  1 − test error there): the script checks that identity on every run, and adds the check
  that can differ, **minority-class accuracy non-decreasing in ε within 1 point** (over every
  pair), for each imbalanced regime.
Prints one markdown table per file; regimes.md keeps the output.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from itertools import combinations
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core

from mixdp_core.runs.figures.regimes import regime_by_name  # noqa: E402


def _regime_of(run: dict, regimes: list[dict], previous: str | None = None) -> str | None:
    """The regime a run belongs to, from its shape (classes, D, test rows, public shots,
    imbalance); where two regimes share a shape, the data seed its feature record names, else
    the regime of the run before it (a figure stores each regime's runs together)."""
    m = run["metrics"]
    seed = ((m.get("features_meta") or {}).get("synthetic") or {}).get("data_seed")
    hits = [reg["name"] for reg in regimes
            if m.get("n_classes") == reg["dataset_kwargs"]["classes"] and m.get("dim") == reg["dataset_kwargs"]["dim"]
            and m.get("n_test") == reg["dataset_kwargs"]["classes"] * reg["dataset_kwargs"]["test_per_class"]
            and float(run["imbalance_ratio"]) == float(reg["imbalance_ratio"])
            and int(run["public_per_class"]) == int(reg["public_per_class"])]
    if len(hits) > 1 and seed is not None:
        hits = [h for h in hits if regime_by_name(h)["dataset_kwargs"].get("data_seed", 0) == seed] or hits
    if len(hits) > 1 and previous in hits:
        hits = [previous]
    if len(hits) > 1 and previous is not None:  # the next regime of the file's order after the previous run's
        order = [reg["name"] for reg in regimes]
        later = [h for h in hits if order.index(h) > order.index(previous)]
        hits = [min(later, key=order.index)] if later else hits
    if len(hits) > 1:
        raise SystemExit(f"run {run['run_id']} matches several regimes: {hits}")
    return hits[0] if hits else None


def recheck(path: Path) -> list[str]:
    from mixdp_core.runs.figures.regimes import NONPRIVATE, _regime_slack, _verdicts, regime_by_name

    data = json.loads(path.read_text())
    eps = [float(e) for e in data["params"]["epsilons"]]
    regimes = [regime_by_name(str(n)) for n in data["params"]["regimes"]]
    by = defaultdict(list)
    name = None
    for r in data["runs"]:
        name = _regime_of(r, regimes, name)
        if name is None:
            raise SystemExit(f"{path}: a run matches no regime of the file: {r['run_id']}")
        by[name].append(r)
    lines = [f"`{path.name}`: {len(regimes)} regimes, {len(data['runs'])} runs", "",
             "| regime | (b) consecutive → every pair | (d) → every pair | (d) is (b) | minority acc. non-decreasing "
             "| AdaMix's lowest minority acc. − min(Only-Public, paragon) |",
             "|---|---|---|---|---|---|"]
    max_gap = 0.0
    for reg in regimes:
        runs = by[reg["name"]]
        per = {m: defaultdict(dict) for m in ("test_error", "balanced_accuracy", "minority_accuracy")}
        for r in runs:
            key = (r["label"], None if r["label"] in NONPRIVATE else float(r["target_epsilon"]))
            for m, d in per.items():
                v = r["metrics"].get(m)
                if v is not None and np.isfinite(v):
                    d[key][r["seed"]] = float(v)
            be, te = r["metrics"].get("balanced_accuracy"), r["metrics"].get("test_error")
            if be is not None and te is not None:
                max_gap = max(max_gap, abs(be - (1 - te)))
        mean = {m: {k: float(np.mean(list(v.values()))) for k, v in d.items()} for m, d in per.items()}
        imb = float(reg["imbalance_ratio"]) > 1.0
        new = _regime_slack(mean["test_error"], mean["balanced_accuracy"], eps, imb, per["test_error"],
                            per["balanced_accuracy"])
        # the old rule: consecutive ε only
        ada = [mean["test_error"].get(("adamix", e)) for e in eps]
        old_b = min(a + 0.01 - b for a, b in zip(ada, ada[1:])) if all(a is not None for a in ada) else None
        bal = [mean["balanced_accuracy"].get(("adamix", e)) for e in eps]
        old_d = (min(y + 0.01 - x for x, y in zip(bal, bal[1:])) if imb and all(v is not None for v in bal)
                 else None)
        mino = [mean["minority_accuracy"].get(("adamix", e)) for e in eps]
        m_slack, m_pair = None, ""
        if imb and all(v is not None for v in mino):
            (ea, x), (eb, y) = min(combinations(list(zip(eps, mino)), 2), key=lambda p: p[1][1] - p[0][1])
            m_slack = y + 0.01 - x
            op_m, par_m = mean["minority_accuracy"].get(("only_public", None)), mean["minority_accuracy"].get(
                ("paragon", None))
            m_pair = (f" (ε {ea:g} → {eb:g}: {100 * x:.1f} → {100 * y:.1f} %; AdaMix at ε "
                      + " / ".join(f"{100 * v:.0f}" for v in mino)
                      + (f"; Only-Public {100 * op_m:.0f}" if op_m is not None else "")
                      + (f", paragon {100 * par_m:.0f}" if par_m is not None else "") + ")")
        v = _verdicts(new)
        refs = [mean["minority_accuracy"].get((r, None)) for r in ("only_public", "paragon")]
        below = (f"{100 * (min(mino) - min(x for x in refs if x is not None)):+.1f}"
                 if imb and m_slack is not None and any(x is not None for x in refs) else "n/a")

        def cell(old, got, ok):
            if got is None:
                return "n/a"
            mark = "✓" if ok else "✗"
            flip = " **(changed)**" if old is not None and (old >= 0) != ok else ""
            # snapped before rounding, as the figure's cells: (b) and (d) are one slack by two sums
            o, g = round(100 * old, 9) if old is not None else None, round(100 * got[0], 9)
            return f"{o:+.1f} → {mark} {g:+.1f}{flip}" if o is not None else f"{mark} {g:+.1f}"

        same = "yes" if imb and new["d"] is not None and abs(new["d"][0] - new["b"][0]) < 1e-9 else ("n/a" if not imb else "no")
        lines.append(f"| `{reg['name']}` | {cell(old_b, new['b'], v['b'])} | {cell(old_d, new['d'], v['d'])} | {same} | "
                     + ("n/a" if m_slack is None else f"{'✓' if m_slack >= 0 else '✗'} {100 * m_slack:+.1f}{m_pair}")
                     + f" | {below} |")
    lines += ["", f"Largest |balanced accuracy − (1 − test error)| over the file's runs: {max_gap:.1e}.", ""]
    return lines


def main() -> None:
    for p in sys.argv[1:]:
        print("\n".join(recheck(Path(p))))


if __name__ == "__main__":
    main()
