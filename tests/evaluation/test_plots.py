import numpy as np

from mixdp_core.evaluation.plots import (
    metric_vs_epsilon_figure,
    save_metric_vs_epsilon_png,
    save_sorted_pdp_png,
)

ROWS = [
    {"method": "paragon", "epsilon": None, "test_error_mean": 0.05, "test_error_std": 0.01},
    {"method": "adamix", "epsilon": 3.0, "test_error_mean": 0.10, "test_error_std": 0.02},
    {"method": "adamix", "epsilon": 1.0, "test_error_mean": 0.20, "test_error_std": 0.02},
    {"method": "ngd", "epsilon": 1.0, "test_error_mean": 0.30, "test_error_std": None},
]


def test_plotly_figure_traces():
    fig = metric_vs_epsilon_figure(ROWS)
    names = [t.name for t in fig.data]
    assert names == ["Paragon (non-private)", "AdaMix", "NGD (mixed)"]
    ada = fig.data[1]
    assert list(ada.x) == [1.0, 3.0] and list(ada.y) == [0.2, 0.1]  # sorted by ε
    assert list(fig.data[0].y) == [0.05, 0.05]


def test_png_written(tmp_path):
    p = save_metric_vs_epsilon_png(ROWS, tmp_path / "e.png", title="t")
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    q = save_sorted_pdp_png({"adamix": np.linspace(0, 3, 50)}, tmp_path / "p.png", target_epsilon=3)
    assert q.stat().st_size > 1000
