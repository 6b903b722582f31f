"""AdaMix Fig. 6 on the run view: the subspace chart, live and finished."""

from __future__ import annotations

from mixdp_core.app_support import charts
from mixdp_core.app_support.live import RunSeries


def _records(with_subspace: bool):
    out = []
    for t in range(1, 11):
        extra = {"lr": 0.1}
        if with_subspace and t % 2 == 0:
            extra.update(subspace_error_public=0.1 + 0.01 * t, subspace_error_random=0.5)
        out.append({"step": t, "total_steps": 10, "test_error": 0.2, "epsilon_spent": 0.1 * t, "clip_norm": 1.0,
                     "extra": extra})
    return out


def test_live_chart_has_both_subspaces_and_only_when_recorded():
    s = RunSeries("r")
    s.add(_records(True))
    spec, frame = charts.live_charts(s, target_epsilon=1.0)["subspace"]
    assert set(frame["series"]) == set(charts.SUBSPACE_NAMES)
    pub = frame[frame["series"] == charts.SUBSPACE_NAMES[0]]
    assert list(pub["step"]) == [2, 4, 6, 8, 10] and pub["value"].iloc[-1] == 0.2
    assert spec["encoding"]["y"]["scale"] == {"domain": [0, 1]} and "owner's view" in spec["title"]
    s2 = RunSeries("r2")
    s2.add(_records(False))
    assert "subspace" not in charts.live_charts(s2, target_epsilon=1.0)


def test_finished_chart():
    figs = charts.live_figures(_records(True), target_epsilon=1.0)
    fig = figs["subspace"]
    assert [t.name for t in fig.data] == list(charts.SUBSPACE_NAMES)
    assert list(fig.data[1].y) == [0.5] * 5 and fig.layout.yaxis.range == (0, 1.0)
    assert "subspace" not in charts.live_figures(_records(False), target_epsilon=1.0)
