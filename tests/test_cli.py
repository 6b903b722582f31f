import json
import subprocess
import sys

import pytest

from mixdp_core.cli import main


def test_lists(capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "digits" in out and "image_folder" in out
    # each loader's whole first paragraph, not its first line cut mid-sentence
    synthetic = next(line for line in out.splitlines() if line.startswith("synthetic "))
    assert "deterministic from the options" in synthetic and "No encoder is run" in synthetic
    assert main(["encoders"]) == 0
    out = capsys.readouterr().out
    assert "efficientnet_lite0" in out and "offline" in out
    assert main(["methods"]) == 0
    assert "adamix" in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["encode", "--dataset", "mnistt", "--encoder", "pixels"], "--dataset: unknown 'mnistt'; choose one of digits"),
    (["encode", "--dataset", "digits", "--encoder", "vgg"], "--encoder: unknown 'vgg'; choose one of pixels"),
    (["encode", "--dataset", "digits", "--batch-size", "0"], "--batch-size: must be >= 1"),
    (["encode", "--dataset", "digits", "--dtype", "int8"], "invalid choice"),
    (["frobnicate"], "invalid choice"),
    # encoder options typed and ranged, a device this machine lacks, before any image is read
    (["encode", "--dataset", "digits", "--encoder", "pixels", "--encoder-arg", "image_size=abc"],
     "image_size: must be an integer in [1, 128] or None, got 'abc'"),
    (["encode", "--dataset", "digits", "--encoder", "pixels", "--image-size", "0"], "image_size: must be an integer"),
    (["encode", "--dataset", "digits", "--encoder", "pixels", "--device", "nope"], "device: must be auto, cpu, cuda"),
    (["sweep", "--methods", "adamix,,ngd", "--dry-run"], "methods: must be a comma-separated list of names without"),
    (["sweep", "--workers", "100000", "--dry-run"], "workers: must be an integer in [1, "),
    (["sweep", "--max-retries", "1000000000", "--dry-run"], "max_retries: must be an integer in [0, 100]"),
    (["audit", "--attack", "seed-replay", "--trials", "100000"], "trials: seed-replay runs two trainings per trial"),
    (["sweep", "--epsilons", "1,-2", "--dry-run"], "epsilons: must be numbers, each a finite number in [0.001, 1000]"),
    (["encode", "--dataset", "digits", "--encoder", "pixels", "--max-per-class", "5"],
     "max_per_class: not an option of dataset 'digits'"),  # was ignored in silence
    (["train", "--seed", "1.5"], "seed: must be an integer in [0, 4294967295]"),
    (["train", "--method", ""], "method: unknown method ''; choose one of: paragon"),  # lists the keys
    (["train", "--dataset", "synthetic", "--dataset-arg", "classes=NaN"], "classes: must be an integer in [2, 1000]"),
    (["reproduce", "adamix_epsilon", "--workers", "100000"], "workers: must be an integer in [1, "),
    (["audit", "--executor", "local", "--workers", "100000", "--no-store"], "workers: must be an integer in [1, "),
])
def test_bad_arguments_one_line_exit_2(argv, needle, capsys):
    try:
        rc = main(argv)  # a value the parser accepts but the command refuses
    except SystemExit as e:  # argparse's own refusals (unknown choice, wrong type)
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_running_out_of_memory_is_one_line_exit_2(monkeypatch, capsys):
    """A size no check foresaw ended in a NumPy traceback (exit 1)."""
    import numpy as np

    from mixdp_core.cli import listing

    def too_big(args):
        np.empty(2**44, dtype=np.float64)  # 128 TiB

    monkeypatch.setattr(listing, "_datasets", too_big)
    assert main(["datasets"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mixdp datasets: error: out of memory (") and err.count("\n") == 1
    assert "Traceback" not in err


def test_encode_digits_pixels_json(tmp_path, capsys):
    assert main(["encode", "--dataset", "digits", "--encoder", "pixels", "--cache-dir", str(tmp_path)]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["n_train"] == 1258 and first["dim"] == 64 and first["cache_hit"] is False
    assert main(["encode", "--dataset", "digits", "--encoder", "pixels", "--cache-dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["cache_hit"] is True


def test_missing_torchvision_dataset_is_one_line(tmp_path, capsys):
    rc = main(["encode", "--dataset", "cifar10", "--root", str(tmp_path), "--encoder", "pixels"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "cifar10: dataset files not found" in err and "Traceback" not in err
    # the hint names an option each command has (`mixdp train` has no --download)
    assert "`mixdp encode --download`" in err and "`--dataset-arg download=true`" in err


def test_encode_cifar10_image_folder_efficientnet(cifar10_subset, tmp_path):
    """The documented path: `mixdp encode --dataset image_folder --root <CIFAR-10 subset>`."""
    cmd = [sys.executable, "-m", "mixdp_core.cli", "encode", "--dataset", "image_folder", "--root", str(cifar10_subset),
           "--encoder", "efficientnet_lite0", "--image-size", "64", "--max-per-class", "3", "--max-test-per-class", "2",
           "--cache-dir", str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["n_train"] == 30 and out["n_test"] == 20 and out["dim"] == 1280 and out["classes"] == 10
    assert "encode train" in r.stderr  # tqdm progress on stderr


def test_train_text_output_says_a_feature_dataset_used_no_encoder(tmp_path, capsys):
    args = ["train", "--store", str(tmp_path), "--method", "only_public", "--no-progress"]
    assert main(args + ["--dataset", "synthetic", "--dataset-arg", "classes=5", "--dataset-arg", "train_per_class=20"]) == 0
    enc = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("encoder:")]
    assert enc == ["             encoder: pixels (not used: the dataset's rows are features)"]
    assert main(args + ["--dataset", "digits"]) == 0
    enc = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("encoder:")]
    assert enc == ["             encoder: pixels"]


def test_device_the_machine_lacks_is_one_line(monkeypatch):
    import torch

    from mixdp_core.encoders.base import select_device
    from mixdp_core.errors import ConfigError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="device: 'cuda' asked but torch sees no CUDA device"):
        select_device("cuda")
    assert select_device("CPU") == "cpu"


def test_unreadable_folder_and_unknown_public_data_name_their_field(tmp_path, capsys, monkeypatch):
    import os

    monkeypatch.setenv("MIXDP_HOME", str(tmp_path / "home"))
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "x.png").write_bytes(b"not read: the scan fails first")
    (tree / "b").mkdir()
    locked = tree / "b" / "sub"
    locked.mkdir()
    os.chmod(locked, 0)
    try:
        if os.access(locked, os.R_OK):  # root reads anything: simulate the refusal instead
            real = os.scandir

            def scandir(path="."):
                if os.fspath(path) == str(locked):
                    raise PermissionError(13, "Permission denied", str(locked))
                return real(path)

            monkeypatch.setattr(os, "scandir", scandir)
        rc = main(["train", "--dataset", f"image_folder:{tree}", "--encoder", "pixels", "--json"])
    finally:
        os.chmod(locked, 0o700)
    err = capsys.readouterr().err.strip()
    assert rc in (1, 2) and len(err.splitlines()) == 1 and "root: cannot read" in err and "Permission denied" in err
    assert main(["train", "--public-from", "nope", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mixdp train: error: public_from: unknown dataset 'nope'") and len(err.splitlines()) == 1


def test_budget_on_a_store_that_does_not_exist_creates_nothing(tmp_path, capsys):
    where = tmp_path / "no" / "store"
    assert main(["budget", "--store", str(where)]) == 0
    assert "does not exist" in capsys.readouterr().out and not where.exists() and not (tmp_path / "no").exists()
    assert main(["budget", "--store", str(where), "--json"]) == 0
    assert capsys.readouterr().out == "" and not where.exists()
    # the same checks and output as on an empty store: an unknown dataset is refused, a known one summed
    assert main(["budget", "--store", str(where), "--dataset", "nope"]) == 2
    assert "dataset: unknown dataset 'nope'" in capsys.readouterr().err
    assert main(["budget", "--store", str(where), "--dataset", "digits", "--json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["n_private_runs"] == 0 and not where.exists()


def test_sigterm_marks_a_training_run_failed_at_once(tmp_path):
    """A run killed with SIGTERM (timeout, kill) is marked failed by its own process, not left
    'running' until the next store opens."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from mixdp_core.runs import RunStore

    env = dict(os.environ, MIXDP_HOME=str(tmp_path), OMP_NUM_THREADS="1")
    p = subprocess.Popen([sys.executable, "-m", "mixdp_core.cli", "train", "--dataset", "synthetic",
                          "--dataset-arg", "classes=50", "--dataset-arg", "dim=512", "--dataset-arg",
                          "train_per_class=400", "--method", "adamix", "--epsilon", "8", "--no-progress"],
                         env=env, stderr=subprocess.PIPE, text=True)
    db = tmp_path / "runs.sqlite"
    t0 = time.time()
    while time.time() - t0 < 60:  # until the run row exists
        if db.exists() and RunStore(tmp_path, recover=False).list_runs():
            break
        time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    err = p.communicate(timeout=60)[1]
    rec = RunStore(tmp_path, recover=False).list_runs()[0]
    assert p.returncode == 143 and "interrupted" in err
    assert rec.status == "failed" and "SIGTERM" in (rec.error or "")


def test_number_lists_refuse_empty_items():
    """'--epsilons 1,,2' is a typo: refused with the field named, not run as a two-point grid."""
    from mixdp_core.cli._common import number_list
    from mixdp_core.errors import ConfigError

    assert number_list("epsilons", "1, 2", float, "numbers") == [1.0, 2.0]
    for bad in ("1,,2", "1,", ",", ""):
        with pytest.raises(ConfigError, match="epsilons: .*without empty items"):
            number_list("epsilons", bad, float, "numbers")


@pytest.mark.parametrize("argv, needle", [
    # figure axes met the runs' declarations only after fits had started (seeds=[0.5] ran seed 0,
    # ratios=[1e308] wrote "IR = 1e+308" tables)
    (["reproduce", "prototypes", "--set", "seeds=[0.5]"], "seeds: must be integers in [0, 4294967295], got 0.5"),
    (["reproduce", "prototypes", "--set", "ratios=[1e308]"], "ratios: must be numbers in [1, 10000]"),
    (["reproduce", "adamix_epsilon", "--epsilons", "5000"], "epsilons: each must be a finite number in [0.001, 1000]"),
    # a grid flag beside --resume was silently ignored
    (["sweep", "--resume", "sw-x", "--epsilons", "8"], "epsilons: not with --resume"),
    (["sweep", "--resume", "sw-x", "--config", "/nonexistent.toml"], "config: not with --resume"),
])
def test_late_or_ignored_arguments_are_refused_first(argv, needle, tmp_path, capsys):
    assert main(argv + ["--store", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_help_states_the_declared_ranges(capsys):
    """The help said 'integer >= 0' where 2^32 is refused and '>= 1' where 20,000 is."""
    from mixdp_core.config import IMBALANCE_RANGE, SEED_RANGE

    for cmd in ("train", "sweep"):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert SEED_RANGE.describe() in out and IMBALANCE_RANGE.describe() in out
    # the flags whose errors named a range their help did not; descriptions without reST's ``
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "an integer in [0, 100]" in out and "an integer in [1, 4 per CPU" in out
    for cmd in ("encode", "train", "sweep", "reproduce", "audit", "budget"):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        out = capsys.readouterr().out
        assert "``" not in out, cmd
    with pytest.raises(SystemExit):
        main(["encode", "--help"])
    assert "images per encoder batch" in capsys.readouterr().out


def test_a_dry_run_counts_without_creating_a_store(tmp_path, capsys):
    """`mixdp sweep --store new --dry-run` created the store folder; a dry run only reads."""
    new = tmp_path / "never"
    assert main(["sweep", "--store", str(new), "--dataset", "digits", "--encoder", "pixels", "--methods", "adamix",
                 "--epsilons", "1,3", "--seeds", "0", "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {"runs": 2, "stored": 0, "refused": None}
    assert not new.exists()


def test_budget_on_a_path_that_is_not_a_store_says_what_it_is(tmp_path, capsys):
    """`mixdp budget --store f` on a file said "(it does not exist)"."""
    f = tmp_path / "f"
    f.write_text("x")
    assert main(["budget", "--store", str(f)]) == 0
    assert "(it is a file, not a store folder)" in capsys.readouterr().out
    assert main(["budget", "--store", str(tmp_path / "none")]) == 0
    assert "(it does not exist)" in capsys.readouterr().out
    assert not (tmp_path / "none").exists()


def test_sweep_json_lines_keep_private_details_in_the_owners_block(tmp_path, capsys):
    """A failed run's message can quote the private data (a class's exact count) and a failed
    private run's duration grows with its rows: both go to the owner's block of its sweep line;
    a line on replayable noise says so (three defects a review reproduced)."""
    import re

    # digits' classes hold fewer rows than 500 public ones: the split's refusal quotes a class's
    # exact count (synthetic's declared sizes are refused before any run instead)
    argv = ["sweep", "--store", str(tmp_path / "s"), "--dataset", "digits", "--encoder", "pixels",
            "--methods", "dp_ls", "--epsilons", "1", "--seeds", "0", "--public-per-class", "500", "--workers", "1",
            "--no-progress", "--json"]
    main(argv)
    out = capsys.readouterr().out
    line = next(json.loads(x) for x in out.splitlines() if x.startswith("{") and '"run_id"' in x)
    assert line["status"] == "failed"
    assert not re.search(r"has [0-9]+ samples", str(line["error"])) and line["error"].startswith("DataError: y_train")
    assert re.search(r"has [0-9]+ samples", line["diagnostics"]["error"])
    assert "wall_seconds" not in line and "wall_seconds" in line["diagnostics"]
    from mixdp_core.runs.runner import RunConfig, failure_fields

    assert failure_fields(RunConfig(method="dp_ls", dataset="digits", encoder="pixels"), ValueError("x"))["private"] is True
    assert failure_fields(RunConfig(method="only_public", dataset="digits", encoder="pixels"), ValueError("x"))["private"] is False
    main(["sweep", "--store", str(tmp_path / "s2"), "--dataset", "digits", "--encoder", "pixels", "--methods", "dp_ls",
          "--epsilons", "1", "--seeds", "0", "--workers", "1", "--no-progress", "--json",
          "--param", "noise=reproducible"])
    ok = next(json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{") and '"run_id"' in x)
    assert ok["status"] == "completed" and ok["noise"] == "reproducible" and "seed" in ok["noise_label"]


def test_a_dry_run_says_what_the_budget_cap_would_refuse(tmp_path, capsys):
    """A dry run said "1 runs, 0 already stored" (exit 0) for a grid the run then refused on its
    data set's cap; it now asks the caps (the sweep file's too) on a scratch copy and writes nothing."""
    store = tmp_path / "s"
    assert main(["budget", "--store", str(store), "--dataset", "digits", "--cap", "2"]) == 0
    capsys.readouterr()
    base = ["sweep", "--store", str(store), "--dataset", "digits", "--encoder", "pixels", "--methods", "dp_ls",
            "--seeds", "0", "--dry-run", "--json"]
    assert main(base + ["--epsilons", "3"]) == 2
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["runs"] == 1 and "budget_cap" in out["refused"] and "cap ε = 2" in out["refused"]
    assert main(base + ["--epsilons", "1"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["refused"] is None
    cfg = tmp_path / "s.toml"
    cfg.write_text('dataset = "digits"\nencoder = "pixels"\nmethods = ["dp_ls"]\nepsilons = [1.0]\nseeds = [0]\n'
                   'budget_cap = 0.5\n')
    assert main(["sweep", "--store", str(tmp_path / "s2"), "--config", str(cfg), "--dry-run", "--json"]) == 2
    assert "budget_cap" in json.loads(capsys.readouterr().out.strip().splitlines()[-1])["refused"]
    assert not (tmp_path / "s2").exists()  # a dry run creates no store
    from mixdp_core.runs import ledger as L
    from mixdp_core.runs.store import RunStore

    assert L.get_cap(RunStore(store), L.dataset_key("digits")).epsilon == 2.0  # the real store unchanged


def test_sigterm_between_the_run_row_and_its_try_still_marks_it_failed(tmp_path, monkeypatch):
    """The SIGTERM test above failed once in a suite run: the signal arrived after the run's row
    was written and before the ``try`` that marks a run failed, and the row stayed 'running'.
    Here SIGTERM is sent from inside ``create_run`` (the row committed): it is deferred to that
    ``try``, so the run is marked failed by its own process."""
    import os
    import signal

    from mixdp_core.cli import _terminate_as_interrupt
    from mixdp_core.cli._common import Terminated
    from mixdp_core.runs import RunStore, runner
    from mixdp_core.runs.runner import RunConfig

    store = RunStore(tmp_path, recover=False)
    real = store.create_run

    def create_then_term(*a, **k):
        run_id = real(*a, **k)
        os.kill(os.getpid(), signal.SIGTERM)
        return run_id

    monkeypatch.setattr(store, "create_run", create_then_term)
    cfg = RunConfig(dataset="digits", encoder="pixels", method="only_public", seed=0)
    with pytest.raises(Terminated), _terminate_as_interrupt():
        runner.execute(cfg, store=store)
    rec = RunStore(tmp_path, recover=False).list_runs()[0]
    assert rec.status == "failed" and "SIGTERM" in (rec.error or "")
