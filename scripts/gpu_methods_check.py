"""Every method that offers ``device="cuda"`` fits on a real GPU as it does on the CPU.

The suite checks the CUDA path with torch on the CPU standing in for the device (no GPU on the
development machines); this script is the check on a real one. For each registered method whose
config has a ``device`` field it fits the same split twice with reproducible noise and the same
seed, ``device="cpu"`` and ``device="cuda"``, and compares: the ε reported for the run as
executed (must be equal: the mechanism and its accounting do not depend on the device), the
steps run and, for the linear methods, the released weights (float32 rounding only). The test
errors are printed beside them, not compared: the network methods' convolutions round
otherwise on the GPU, and their noisy epochs carry that. Two splits: digits
pixels balanced, and at imbalance ratio 10 (the class histogram's pilot and the prior
correction act there).

Exits 1 if any comparison fails or no CUDA device is visible. The last line of stdout is one
JSON object.

Usage::

    python scripts/gpu_methods_check.py
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _digits(imbalance: float):
    from sklearn.datasets import load_digits

    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.featureset import FeatureSet

    d = load_digits()
    X, y = d.data.astype(np.float32), d.target.astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(y))
    X, y = X[perm], y[perm]
    fs = FeatureSet(X[:1257], y[:1257], X[1257:], y[1257:], [str(c) for c in range(10)])
    return make_split(fs, SplitSpec(public_per_class=5, imbalance_ratio=imbalance, seed=1))


def main() -> int:
    import torch

    from mixdp_core.methods import METHODS, make_method

    if not torch.cuda.is_available():
        print(json.dumps({"ok": False, "why": "no CUDA device visible to torch"}))
        return 1
    rows, ok = [], True
    for imbalance in (1.0, 10.0):
        split = _digits(imbalance)
        for name in METHODS:
            fields = {f.name for f in dataclasses.fields(METHODS.get(name).config_cls)}
            if "device" not in fields:
                continue
            kw = {"target_epsilon": 3.0, "noise": "reproducible"}
            if "seed" in fields:
                kw["seed"] = 3
            fits, errors = {}, {}
            for device in ("cpu", "cuda"):
                t = time.perf_counter()
                try:
                    m = make_method(name, device=device, **kw).fit(split)
                except Exception as e:  # noqa: BLE001 - reported, and a failure unless both devices refuse alike
                    errors[device] = f"{type(e).__name__}: {e}"[:300]
                    continue
                fits[device] = (m, time.perf_counter() - t)
            if errors:
                alike = set(errors) == {"cpu", "cuda"} and errors["cpu"] == errors["cuda"]
                rows.append({"method": name, "imbalance_ratio": imbalance, "errors": errors, "same": alike})
                ok = ok and alike
                print(f"{name:>22s} IR {imbalance:>4g}: {'not for this split' if alike else 'FAILED'}: {errors}",
                      flush=True)
                continue
            (a, ta), (b, tb) = fits["cpu"], fits["cuda"]
            err = [float(np.mean(m.predict(split.X_test) != split.y_test)) for m in (a, b)]
            row = {"method": name, "imbalance_ratio": imbalance,
                   "epsilon_cpu": a.privacy_.epsilon, "epsilon_cuda": b.privacy_.epsilon,
                   "steps_cpu": a.steps_, "steps_cuda": b.steps_,
                   "test_error_cpu": err[0], "test_error_cuda": err[1],
                   "seconds_cpu": round(ta, 2), "seconds_cuda": round(tb, 2)}
            same = a.privacy_.epsilon == b.privacy_.epsilon and a.steps_ == b.steps_
            Wa, Wb = getattr(a, "W_", None), getattr(b, "W_", None)
            if Wa is not None and Wb is not None:
                diff = float(np.max(np.abs(np.asarray(Wa) - np.asarray(Wb))) / max(np.max(np.abs(Wa)), 1e-12))
                row["weights_max_rel_diff"] = diff
                same = same and diff < 1e-3
            row["same"] = bool(same)
            ok = ok and same
            rows.append(row)
            print(f"{name:>22s} IR {imbalance:>4g}: eps {row['epsilon_cpu']:.5f} / {row['epsilon_cuda']:.5f}  "
                  f"steps {a.steps_} / {b.steps_}  error {err[0]:.3f} / {err[1]:.3f}  "
                  f"W diff {row.get('weights_max_rel_diff', float('nan')):.2e}  {'ok' if same else 'DIFFERS'}",
                  flush=True)
    print(json.dumps({"ok": ok, "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
