import json

import pytest

from mixdp_core.cli import main

KEYS = {"run_id", "method", "dataset", "encoder", "seed", "epsilon", "delta", "noise_multiplier", "steps",
        "test_error", "balanced_accuracy", "minority_accuracy", "accountant", "mechanism", "diagnostics"}
# Owner-only diagnostics (no DP guarantee) live under "diagnostics", never beside epsilon.
DIAG = {"mia_auc", "mia_advantage", "pdp_epsilon_min", "pdp_epsilon_median", "pdp_epsilon_max", "n_private"}


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("MIXDP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MIXDP_CACHE", str(tmp_path / "cache"))
    return tmp_path


def test_train_json(env, capsys):
    rc = main(["train", "--dataset", "digits", "--encoder", "pixels", "--method", "adamix", "--epsilon", "1",
               "--seed", "0", "--noise-multiplier", "20", "--json", "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 0
    d = json.loads(out)  # exactly one JSON object on stdout
    assert KEYS <= set(d) and not (DIAG & set(d))
    assert DIAG <= set(d["diagnostics"]) and "not covered" in d["diagnostics"]["note"]
    # a private run's duration grows with the exact private count: the owner's block holds it
    assert "wall_seconds" not in d and d["diagnostics"]["wall_seconds"] > 0
    diag = d["diagnostics"]
    assert d["method"] == "adamix" and d["noise_multiplier"] == 20.0 and d["delta"] == 1e-5
    assert 0 < d["epsilon"] <= 1.0 and d["steps"] >= 1
    for k in ("test_error", "balanced_accuracy"):
        assert 0.0 <= d[k] <= 1.0
    assert d["minority_accuracy"] is None  # imbalance ratio 1: no minority class
    assert 0.0 <= diag["mia_auc"] <= 1.0
    assert diag["pdp_epsilon_min"] <= diag["pdp_epsilon_median"] <= diag["pdp_epsilon_max"] <= d["epsilon"] + 1e-9
    assert (env / "home" / "runs.sqlite").exists()
    rc = main(["train", "--method", "adamix", "--epsilon", "1", "--noise-multiplier", "20", "--json",
               "--no-progress", "--reuse"])
    d2 = json.loads(capsys.readouterr().out)
    assert rc == 0 and d2["run_id"] == d["run_id"] and d2["reused"] is True


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--epsilon", "-1"], "epsilon"),
        (["--epsilon", "abc"], "epsilon"),
        (["--delta", "2"], "delta"),
        (["--seed", "1.5"], "seed"),
        (["--public-per-class", "0"], "public_per_class"),
        (["--imbalance-ratio", "0.5"], "imbalance_ratio"),
        (["--method", "nope"], "method"),
        (["--encoder", "nope"], "encoder"),
        (["--dataset", "nope"], "dataset"),
        (["--noise-multiplier", "-3"], "noise_multiplier"),
        (["--param", "bogus=1"], "bogus"),
        (["--param", "noequals"], "param"),
        (["--bogus-flag"], "unrecognized"),
    ],
)
def test_bad_args_one_line_exit_2(env, capsys, argv, field):
    try:
        rc = main(["train", "--no-progress", *argv])
    except SystemExit as e:  # argparse-level errors
        rc = e.code
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "error" in lines[0]
    if field == "method":
        assert "adamix" in lines[0] and "paragon" in lines[0]  # lists the allowed values


def test_train_with_public_data_from_another_domain(env, capsys):
    """`--public-from`: public samples from domain A, private + test from domain B (same classes)."""
    from tests.conftest import write_png_tree

    a = write_png_tree(env / "domain_a", per_class=6, seed=1)
    b = write_png_tree(env / "domain_b", per_class=12, seed=2)
    rc = main(["train", "--dataset", f"image_folder:{b}", "--public-from", f"image_folder:{a}",
               "--encoder", "pixels", "--method", "adamix", "--epsilon", "3", "--public-per-class", "2",
               "--json", "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    d = json.loads(out)
    from mixdp_core.runs import RunStore

    run = RunStore().get_run(d["run_id"])
    assert run.config["public_from"] == f"image_folder:{a}"
    # all of domain B's training images stay private (none taken as public): 3 classes x 12 x 0.8
    n_train_b = 3 * (12 - round(0.2 * 12))
    assert run.metrics["n_private"] == n_train_b and run.metrics["n_public"] == 3 * 2
    assert 0 < d["epsilon"] <= 3


def test_infeasible_budget_is_refused_before_any_run(env, capsys):
    """ε = 0.05 at σ = 20: no full-batch step fits; one line naming the budget, no run stored."""
    rc = main(["train", "--method", "adamix", "--epsilon", "0.05", "--noise-multiplier", "20", "--json",
               "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    line = err.strip()
    assert len(line.splitlines()) == 1 and "epsilon" in line and "noise_multiplier" in line
    from mixdp_core.runs import RunStore

    assert RunStore().list_runs() == []
