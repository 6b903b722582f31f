"""Only-Public with one public row per class: which ridge should ``l2_rule="loo"`` fall back to?

With one row per class no row can be left out and still have its class in the refit, so
``select_l2_loo`` cannot score any ridge and returns its ``fallback``. This script compares
the candidate fallbacks (fixed ridges 1e-2 = ``PUBLIC_L2``, 1e-3, 1e-4, 1e-5) on 1-shot
*development* settings (the choice is made there), then reports them on 1-shot *validation*
settings that no ridge choice has looked at (run once, after the choice): the tables of
docs/results/only_public_ridge.md, "One public row per class". Seeds 0-3, test error %.

Usage: ``python scripts/only_public_oneshot.py [--role development|validation]``.
CIFAR-10 needs ``CIFAR10_DIR`` (default /tmp/c10; skipped when absent).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mixdp_core.data.splits import SplitSpec, make_split  # noqa: E402
from center_and_start import regime_features  # noqa: E402  (the same regimes and features)
from mixdp_core.methods import make_method  # noqa: E402

CANDIDATES = (1e-2, 1e-3, 1e-4, 1e-5)
DEVELOPMENT = ("fine_grained_100", "many_class_100_d256", "ten_class_ir10", "digits_pixels")
VALIDATION = ("classes_50_d2048_5shot", "classes_20_d128_ir10", "cifar10_efficientnet", "classes_200_d512_1shot")


def features(name: str):
    """``(feature set, imbalance ratio)`` of a setting (``center_and_start.regime_features``),
    or None when its data is absent."""
    if name == "cifar10_efficientnet" and not Path(os.environ.get("CIFAR10_DIR", "/tmp/c10")).is_dir():
        return None
    fs, _, ir = regime_features({"digits_pixels": "digits", "cifar10_efficientnet": "cifar10_2_20"}.get(name, name))
    return fs, ir


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=("development", "validation"), action="append")
    a = ap.parse_args()
    heads = " | ".join(f"ridge {c:g}" for c in CANDIDATES)
    print(f"| setting (1 public row / class) | role | {heads} |\n|---|---|" + "---|" * len(CANDIDATES))
    means = {c: [] for c in CANDIDATES}
    for role in a.role or ["development", "validation"]:
        for name in (DEVELOPMENT if role == "development" else VALIDATION):
            got = features(name)
            if got is None:
                print(f"| `{name}` | {role} | " + " | ".join("absent" for _ in CANDIDATES) + " |")
                continue
            fs, ir = got
            err = {c: [] for c in CANDIDATES}
            for seed in range(4):
                sp = make_split(fs, SplitSpec(public_per_class=1, imbalance_ratio=ir, seed=seed))
                for c in CANDIDATES:
                    err[c].append(100 * make_method("only_public", l2=c).fit(sp).history_[-1].test_error)
            best = min(np.mean(v) for v in err.values())
            print(f"| `{name}` | {role} | " + " | ".join(
                (f"**{np.mean(v):.1f}**" if np.mean(v) == best else f"{np.mean(v):.1f}") + f" ± {np.std(v, ddof=1):.1f}"
                for v in err.values()) + " |", flush=True)
            if role == "development":
                for c in CANDIDATES:
                    means[c].append(np.mean(err[c]))
    if any(means.values()):
        print("\ndevelopment mean: " + ", ".join(f"{c:g}: {np.mean(v):.2f}" for c, v in means.items() if v))


if __name__ == "__main__":
    main()
