"""Where property (c) fails across the regime family: a descriptive map, read off the committed
tables (docs/results/regimes.md, "Where (c) fails: the map"). A diagnostic after the tables,
never used to choose anything.

For every regime of the committed regime JSONs where (c) applies (paragon <= 1/2 Only-Public),
two coordinates computed from the regime's sizes and its non-private references only (no
AdaMix error enters them):

* ``signal = (n / C) * mu(8) / sqrt(D)``: private rows per class times the Gaussian-DP mu of
  (epsilon = 8, delta = 1e-5), over the root of the feature dimension. A full-batch noisy
  gradient of a linear head averaged over a run of total mu has per-coordinate noise ~ 1/mu
  against a per-class signal that grows with the class's rows; the noise norm over a class's
  D weights grows like sqrt(D). A scale, not a prediction.
* ``asks = 0.4 / (1 - paragon / Only-Public)``: the share of the non-private headroom
  (Only-Public - paragon) that (c)'s 40 % cut at epsilon = 8 demands. Near 1 where paragon is
  barely below half of Only-Public.

Prints one markdown table (sorted by ``signal``) and writes ``c_failure_map.png`` (log signal
against asks, holds / fails marked) into OUT (default ``docs/results``). The private row counts
come from each regime's seed-0 split.

Usage: ``python scripts/c_failure_map.py [OUT]``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from center_and_start import regime_splits  # noqa: E402  (the tables' regimes and splits)
from mixdp_core.accounting.gaussian import gdp_mu_for_budget  # noqa: E402
from mixdp_core.runs.figures.regimes import regime_by_name  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
#: the committed regime tables (every section of regimes.md that runs the family's references);
#: a later file's cells replace an earlier one's (regimes_drawn_imbalanced.json regenerated the
#: drawn sections' imbalanced regimes on the checked factor)
FILES = ("regimes.json", "regimes_drawn.json", "regimes_drawn_fresh.json", "regimes_drawn_validation.json",
         "regimes_drawn_imbalanced.json")


def cells() -> dict[tuple, float]:
    """``{(regime, method, epsilon): mean test error in [0, 1]}`` over the committed tables."""
    out: dict[tuple, float] = {}
    for name in FILES:
        for r in json.loads((RESULTS / name).read_text())["rows"]:
            out[(r["regime"], r["method"], r["target_epsilon"])] = r["test_error_mean"]
    return out


def rows(count_rows: bool = True) -> list[dict]:
    """One dict per regime where (c) applies: sizes, references, AdaMix's gains, the verdict
    (the rule of the figure's (c): gains >= 10 % at epsilon = 3 and >= 40 % at 8 over the means).
    ``count_rows=False`` skips building the splits (``private_rows`` and ``signal`` are then None)."""
    c = cells()
    mu8 = gdp_mu_for_budget(epsilon=8.0, delta=1e-5)
    out = []
    for g in sorted({k[0] for k in c}):
        op, pa = c.get((g, "only_public", None)), c.get((g, "paragon", None))
        a3, a8 = c.get((g, "adamix", 3.0)), c.get((g, "adamix", 8.0))
        if None in (op, pa, a3, a8) or not pa <= 0.5 * op:
            continue
        reg = regime_by_name(g)
        kw = reg["dataset_kwargs"]
        n = len(next(iter(regime_splits(g, [0])))[1].y_private) if count_rows else None
        C, D = int(kw["classes"]), int(kw["dim"])
        gain3, gain8 = 1 - a3 / op, 1 - a8 / op
        out.append({
            "regime": g, "classes": C, "dim": D, "private_rows": n, "imbalance": reg["imbalance_ratio"],
            "only_public": op, "paragon": pa, "adamix_3": a3, "adamix_8": a8,
            "fully_private_8": c.get((g, "fully_private", 8.0)),
            "gain_3": gain3, "gain_8": gain8, "holds": gain3 >= 0.10 and gain8 >= 0.40,
            "signal": None if n is None else n / C * mu8 / math.sqrt(D), "asks": 0.4 / (1 - pa / op),
        })
    return sorted(out, key=lambda r: (r["signal"] or 0.0, r["regime"]))


def main(argv: list[str]) -> None:
    out_dir = Path(argv[0]) if argv else RESULTS
    rs = rows()
    print("| regime | C | D | private rows / class | imbalance | Only-Public | paragon | AdaMix ε = 3 / 8 "
          "| Fully-Private ε = 8 | signal | (c) asks of the headroom | (c) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rs:
        fp = "–" if r["fully_private_8"] is None else f"{100 * r['fully_private_8']:.1f}"
        print(f"| `{r['regime']}` | {r['classes']} | {r['dim']} | {r['private_rows'] / r['classes']:.0f} "
              f"| {r['imbalance']:g} | {100 * r['only_public']:.1f} | {100 * r['paragon']:.1f} "
              f"| {100 * r['adamix_3']:.1f} / {100 * r['adamix_8']:.1f} | {fp} | {r['signal']:.1f} "
              f"| {r['asks']:.2f} | {'✓' if r['holds'] else '✗'} |")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.6))
    for holds, mark, col, lab in ((True, "o", "tab:blue", "(c) holds"), (False, "x", "tab:red", "(c) fails")):
        pts = [r for r in rs if r["holds"] == holds]
        ax.scatter([r["signal"] for r in pts], [r["asks"] for r in pts], marker=mark, c=col, label=lab, s=36)
        for r in pts:
            ax.annotate(r["regime"].replace("drawn_", "d"), (r["signal"], r["asks"]), fontsize=6,
                        xytext=(3, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("private rows per class × μ(ε = 8, δ = 1e-5) / √D  (log scale)")
    ax.set_ylabel("share of paragon's headroom (c) asks at ε = 8")
    ax.set_title("Property (c) across the regime family (committed tables, 4 seeds)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(out_dir / "c_failure_map.png", dpi=130)
    print(f"\nwrote {out_dir / 'c_failure_map.png'}")


if __name__ == "__main__":
    main(sys.argv[1:])
