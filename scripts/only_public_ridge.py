"""Only-Public's test error at the fixed ridges 1e-4 and 1e-2 and at the leave-one-out ridge
(``l2_rule="loo"``), seeds 0-3: the tables of docs/results/only_public_ridge.md.

Usage: ``python scripts/only_public_ridge.py [--role development|validation] [--only NAME]
[--cache DIR]``. Development settings: the development regimes of ``REGIME_FAMILY`` and
digits/pixels with 5 public per class; validation: the validation regimes. About 2 CPU minutes
for both roles (the LOO selection on 200 public rows x 100 classes takes ~10 s).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core

from mixdp_core.data.splits import SplitSpec, make_split  # noqa: E402
from mixdp_core.features.cache import get_features  # noqa: E402
from mixdp_core.methods import make_method  # noqa: E402
from mixdp_core.runs.figures.regimes import REGIME_FAMILY  # noqa: E402

RULES = (("1e-4", {"l2": 1e-4}), ("1e-2", {"l2": 1e-2}), ("loo", {"l2_rule": "loo"}))


def settings(role: str):
    out = [(r["name"], "synthetic", r["dataset_kwargs"], r["public_per_class"], r["imbalance_ratio"])
           for r in REGIME_FAMILY if r["role"] == role]
    if role == "development":
        out.append(("digits_pixels_5shot", "digits", {}, 5, 1.0))
    return out


def cell(v) -> str:
    v = 100 * np.asarray(v)
    return f"{v.mean():.1f} ± {v.std(ddof=1):.1f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=("development", "validation"), action="append")
    ap.add_argument("--only", help="one setting name")
    ap.add_argument("--cache", default=None, help="feature cache folder (default: the library's)")
    a = ap.parse_args()
    print("| setting | role | ridge 1e-4 | ridge 1e-2 (`PUBLIC_L2`) | LOO-selected | selected ridge (seeds 0–3) "
          "| LOO − 1e-4, paired | LOO − 1e-2, paired | selection CPU s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for role in a.role or ["development", "validation"]:
        for name, dataset, kw, k, ir in settings(role):
            if a.only and name != a.only:
                continue
            fs = get_features(dataset, "pixels", cache_dir=a.cache, **kw)
            err = {lab: [] for lab, _ in RULES}
            sel, cpu = [], []
            for seed in range(4):
                sp = make_split(fs, SplitSpec(public_per_class=k, imbalance_ratio=ir, seed=seed))
                for lab, params in RULES:
                    t = time.process_time()
                    m = make_method("only_public", **params).fit(sp)
                    err[lab].append(m.history_[-1].test_error)
                    if lab == "loo":
                        sel.append(m.l2_)
                        cpu.append(time.process_time() - t)
            diff = {b: 100 * (np.asarray(err["loo"]) - np.asarray(err[b])) for b in ("1e-4", "1e-2")}
            print(f"| `{name}` | {role} | {cell(err['1e-4'])} | {cell(err['1e-2'])} | {cell(err['loo'])} | "
                  f"{', '.join(f'{v:.2g}' for v in sel)} | "
                  + " | ".join(f"{d.mean():+.1f} ± {d.std(ddof=1):.1f}" for d in diff.values())
                  + f" | {np.mean(cpu):.1f} |", flush=True)


if __name__ == "__main__":
    main()
