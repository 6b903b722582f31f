"""Fast start: importing the training stack pulls in no heavy optional library, and the
numpy replacements used to avoid them give exactly what the libraries give."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "sklearn", "matplotlib", "scipy.stats", "pandas", "numba")


def test_importing_methods_and_runner_loads_no_heavy_library():
    code = ("import json, sys, numpy as np, mixdp_core.methods, mixdp_core.runs.runner, mixdp_core.evaluation; "
            "from mixdp_core.data.datasets import load_dataset; load_dataset('digits'); "  # digits: no sklearn
            "from mixdp_core.evaluation.mia import loss_threshold_attack; lab = np.arange(8) % 2; "
            "loss_threshold_attack(np.arange(8.0), np.arange(8.0), member_labels=lab, nonmember_labels=lab); "  # MIA
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == []


def test_small_training_run_imports_neither_torch_nor_numba(tmp_path):
    """The digits fast path (the start-up budget of benchmarks/startup.py) trains AdaMix with the numpy kernel:
    device='auto' decides on the problem size before looking for a GPU (no torch), and the
    fused kernel's numba import is reserved for large feature matrices."""
    code = ("import json, sys\n"
            "from mixdp_core.cli import main\n"
            "try:\n"
            "    main(['train', '--dataset', 'digits', '--encoder', 'pixels', '--method', 'adamix', '--epsilon', '3',"
            " '--json'])\n"
            "except SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "print(json.dumps([m for m in ('torch', 'numba', 'llvmlite') if m in sys.modules]))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "MIXDP_HOME": str(tmp_path / "home"), "MIXDP_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == []


def test_digits_without_sklearn_equals_load_digits():
    from sklearn.datasets import load_digits

    from mixdp_core.data.datasets import _digits_arrays

    images, target = _digits_arrays()
    d = load_digits()
    np.testing.assert_array_equal(images, d.images)
    np.testing.assert_array_equal(target, d.target)


def test_numpy_rank_and_log_softmax_equal_scipy():
    from scipy.special import log_softmax
    from scipy.stats import rankdata

    from mixdp_core.evaluation.mia import _average_ranks, _log_softmax

    rng = np.random.default_rng(0)
    a = np.round(rng.standard_normal(500), 1)  # many ties
    np.testing.assert_array_equal(_average_ranks(a), rankdata(a))
    np.testing.assert_array_equal(_average_ranks(np.ones(4)), rankdata(np.ones(4)))
    z = rng.standard_normal((50, 7)) * 30
    np.testing.assert_allclose(_log_softmax(z), log_softmax(z, axis=1), rtol=1e-12, atol=1e-12)
