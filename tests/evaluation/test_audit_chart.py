"""theory_vs_attack_figure: the theory line is accounting.max_tpr; attacks drawn on top."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

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


def test_roc_band_is_the_clopper_pearson_interval_of_each_rate():
    from scipy.stats import beta

    from mixdp_core.evaluation.audit.stats import roc_band

    f_lo, f_hi, t_lo, t_hi = roc_band([0.0, 0.01, 0.5], [0.134, 0.2, 0.9], 200, 200)
    # independent: exact two-sided 95 % interval of k successes in n, k = 2 non-members of 200 at FPR 1 %
    assert f_hi[1] == pytest.approx(beta.ppf(0.975, 3, 198)) and f_lo[1] == pytest.approx(beta.ppf(0.025, 2, 199))
    assert f_lo[0] == 0.0 and t_hi[2] == pytest.approx(beta.ppf(0.975, 181, 20))
    assert (t_lo <= [0.134, 0.2, 0.9]).all() and (t_hi >= [0.134, 0.2, 0.9]).all()
    # the case: TPR 13.4 % at FPR 1 % with 200 trials is compatible with TPR ~8 % at FPR ~3.6 %
    assert t_lo[0] < 0.1 and f_hi[1] > 0.03


def test_theory_chart_draws_each_measured_curve_with_its_band_and_legend():
    from types import SimpleNamespace

    from mixdp_core.app_support.charts import theory_vs_attack_figure

    rep = SimpleNamespace(epsilon=1.0, delta=1e-5, mu=None)
    f = np.linspace(0, 1, 21)
    fig = theory_vs_attack_figure(rep, {"canary": (f, np.sqrt(f))}, counts={"canary": (100, 100)}, log=False)
    names = [t.name for t in fig.data]
    # the curve's legend entry names its band (one row per attack: a band's own entry doubled the
    # rows, and after a LiRA audit 12 of them squeezed the plot to ~150 px)
    assert any("95 % band, 100 members, 100 non-members" in n for n in names)
    band = next(t for t in fig.data if t.fill == "toself")
    assert band.showlegend is False and band.legendgroup == "canary"
    h1 = fig.layout.height
    more = theory_vs_attack_figure(rep, {f"a{i}": (f, np.sqrt(f)) for i in range(6)},
                                   counts={f"a{i}": (100, 100) for i in range(6)}, log=False)
    assert more.layout.height > h1 and more.layout.legend.yref == "container"  # taller, not squeezed
    fig2 = theory_vs_attack_figure(rep, {"canary": (f, np.sqrt(f))}, log=False)  # no counts: no band
    assert not any("band" in (t.name or "") for t in fig2.data)
