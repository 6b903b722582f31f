"""theory_vs_attack_figure: the theory line is accounting.max_tpr; attacks drawn on top."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from mixdp_core.accounting import max_tpr, tradeoff_sentence
from mixdp_core.app_support.charts import theory_vs_attack_figure


def test_theory_line_is_the_accounting_bound_and_attacks_are_overlaid():
    rep = SimpleNamespace(epsilon=3.0, delta=1e-5, mu=0.72)
    fpr = np.array([0.0, 1e-3, 0.01, 0.5, 1.0])
    tpr = np.array([0.0, 2e-3, 0.02, 0.6, 1.0])
    fig = theory_vs_attack_figure(rep, {"LiRA": (fpr, tpr), "loss": (fpr, fpr)})
    theory = fig.data[0]
    assert np.allclose(theory.y, max_tpr(rep, np.asarray(theory.x)))
    assert [d.name for d in fig.data[2:]] == ["LiRA", "loss"]
    assert fig.layout.xaxis.type == "log" and fig.layout.font.size >= 18
    assert min(fig.data[2].x) >= 1e-4  # FPR = 0 cannot be drawn on log axes
    lin = theory_vs_attack_figure(None, {"LiRA": (fpr, tpr)}, log=False, large=False)
    assert lin.layout.xaxis.type != "log" and np.all(np.asarray(lin.data[0].y) == 1.0)
    assert "no attacker can identify more than" in tradeoff_sentence(rep, 0.01)
