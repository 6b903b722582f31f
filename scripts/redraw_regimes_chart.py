"""Redraw a ``regimes`` chart from the JSON its section wrote, without training anything (the
run store's reuse is keyed on the mixdp_core sources, so a chart-only change would otherwise
retrain the family): ``python scripts/redraw_regimes_chart.py docs/results/regimes.json``
writes ``docs/results/regimes.png`` beside it, with the figure's own drawing code and size."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mixdp_core.runs.figures.base import FIGURES
    from mixdp_core.runs.figures.regimes import draw_family, family_curves, family_spread

    src = Path(sys.argv[1])
    data = json.loads(src.read_text())
    fig = plt.figure(figsize=FIGURES.get("regimes").size)
    eps = [float(e) for e in data["params"]["epsilons"]]
    draw_family(fig, family_curves(data["rows"], eps), eps, family_spread(data["rows"], eps))
    fig.tight_layout()
    fig.savefig(src.with_suffix(".png"), dpi=130)
    print(src.with_suffix(".png"))


if __name__ == "__main__":
    main()
