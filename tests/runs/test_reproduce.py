"""``mixdp reproduce``: every figure on a tiny grid writes a PNG, a markdown table and a JSON
file whose numbers come from the stored runs; a second call reuses every run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mixdp_core.runs.reproduce import FIGURES, reproduce
from mixdp_core.runs.store import RunStore

TINY = {
    "adamix_epsilon": {"epsilons": [2], "seeds": [0, 1]},
    "dppl_epsilon": {"epsilons": [0.1, 3], "seeds": [0]},  # AdaMix's σ cannot reach ε = 0.1
    "public_vs_private": {"public": [1, 5], "private": [10, 40], "seeds": [0]},
    "boost_vs_shots": {"shots": [2, 10], "seeds": [0], "methods": ["adamix"]},
    "dppl_imbalance": {"ratios": [1, 50], "seeds": [0], "methods": ["dppl_mean", "dppl_public"]},
}


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXDP_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _png_ok(path) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as im:
        assert im.format == "PNG"
        arr = np.asarray(im.convert("L"))
    assert arr.std() > 5  # something was drawn
    return im.size


def test_every_figure_has_a_tiny_test():
    assert set(FIGURES.keys()) == set(TINY) | {"sparse_finetune"}


@pytest.mark.parametrize("name", sorted(TINY))
def test_figure_writes_png_table_json(env, name):
    store = RunStore(env / "store")
    paths = reproduce(name, env / "out", params=TINY[name], store=store, workers=1)
    _png_ok(paths["png"])
    md = paths["md"].read_text()
    assert md.startswith(f"# {FIGURES.get(name).title}") and "| " in md and f"]({name}.png)" in md
    data = json.loads(paths["json"].read_text())
    assert data["figure"] == name and data["params"]["seeds"] == TINY[name]["seeds"] and data["rows"]
    if name == "dppl_epsilon":  # an unreachable budget is skipped and said so, never run
        assert any(m.startswith("adamix at target ε = 0.1") for m in data["skipped"])
        assert "Not run (no run can meet the budget" in md
        assert not any(r["label"] == "adamix" and r["target_epsilon"] == 0.1 for r in data["runs"])
    else:
        assert data["skipped"] == []
    ids = {r["run_id"] for r in data["runs"]}
    assert ids == {r.run_id for r in store.list_runs()}  # every number traces to a stored run
    for r in data["runs"]:
        eps = r["metrics"]["epsilon"]
        if r["method"] in ("paragon", "only_public"):
            assert eps is None
        else:  # the accountant's ε of the run as executed, within the target
            assert 0 < eps <= r["target_epsilon"] + 1e-9
    again = reproduce(name, env / "out2", params=TINY[name], store=store, workers=1)
    data2 = json.loads(again["json"].read_text())
    assert all(r["reused"] for r in data2["runs"]) and len(store.list_runs()) == len(ids)
    assert data2["rows"] == data["rows"]


def test_adamix_epsilon_table_matches_the_runs(env):
    # same grid (and store layout) as the parametrized test: the runs are cheap to redo
    store = RunStore(env / "store")
    paths = reproduce("adamix_epsilon", env / "out", params=TINY["adamix_epsilon"], store=store, workers=1)
    data = json.loads(paths["json"].read_text())
    errs = [r["metrics"]["test_error"] for r in data["runs"] if r["label"] == "adamix"]
    row = next(r for r in data["rows"] if r["method"] == "adamix")
    assert len(errs) == 2 and row["test_error_mean"] == pytest.approx(np.mean(errs))
    assert row["test_error_std"] == pytest.approx(np.std(errs, ddof=1))
    assert f"| adamix | {100 * np.mean(errs):.1f} ± {100 * np.std(errs, ddof=1):.1f} |" in paths["md"].read_text()


def test_public_vs_private_cap_is_applied(env):
    store = RunStore(env / "store")
    paths = reproduce("public_vs_private", env / "out", params={"public": [2], "private": [7, 30], "seeds": [0]},
                      store=store, workers=1)
    runs = json.loads(paths["json"].read_text())["runs"]
    assert sorted(r["metrics"]["n_private"] for r in runs) == [70, 300]


def test_sparse_finetune_tiny(env):
    pytest.importorskip("opacus")
    paths = reproduce("sparse_finetune", env / "out", store=RunStore(env / "store"), workers=1,
                      params={"epsilons": [1.0], "epochs": 1, "pretrain_epochs": 1, "batch_size": 200})
    _png_ok(paths["png"])
    rows = json.loads(paths["json"].read_text())["rows"]
    assert [r["mode"] for r in rows] == ["cls", "cls_norm", "all", "full"]
    assert all(0 < r["epsilon_spent_max"] <= 1.0 + 1e-9 and 0 <= r["accuracy_mean"] <= 1 for r in rows)


def test_cli_reproduce_list_and_errors(env, capsys):
    from mixdp_core.cli import main

    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in FIGURES.keys())
    for argv, field in ((["reproduce", "nope"], "name"), (["reproduce"], "name"),
                        (["reproduce", "adamix_epsilon", "--set", "bogus=1"], "bogus"),
                        (["reproduce", "adamix_epsilon", "--epsilons", "a"], "epsilons"),
                        (["reproduce", "boost_vs_shots", "--epsilons", "1"], "epsilons"),
                        (["reproduce", "sparse_finetune", "--dataset", "cifar10"], "dataset"),
                        (["reproduce", "adamix_epsilon", "--backend", "x"], "backend")):
        assert main(argv + ["--store", str(env / "s"), "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.startswith(f"mixdp reproduce: error: {field}"), err


def test_cli_reproduce_writes_files(env, capsys):
    from mixdp_core.cli import main

    rc = main(["reproduce", "dppl_imbalance", "--out", str(env / "o"), "--store", str(env / "s"), "--seeds", "0",
               "--set", "ratios=[1,10]", "--set", 'methods=["dppl_mean"]', "--workers", "1", "--no-progress"])
    assert rc == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(env / "o" / f"dppl_imbalance.{k}") for k in ("png", "md", "json")]
    assert "minority" in (env / "o" / "dppl_imbalance.md").read_text().lower()
