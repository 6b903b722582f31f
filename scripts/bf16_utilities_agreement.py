"""How far DPPL-Public's bf16 utilities sit from fp32, and what that does to the exponential
mechanism's selection (docs/results/prototypes.md, "bf16 utilities").

Data: a regime of the family (default ``many_class_100_d256``: 100 classes, 256-d features
whose cosines spread across the clip range, so part of the summands are clipped and part not;
``fine_grained_100``'s shared mean puts every cosine above 0.5, all clipped, and the utilities
are exact in any precision): the private rows of one split against a pool of public, test and a
second split's private rows. For the clip
range (d_min, d_max) = (0.5, 1.5) (Δu = 1, monotone) it prints, per class, the largest utility
difference against a float64 reference for fp32 and bf16, the bound 3·2⁻⁹·n_c, and the total
variation distance between the exponential mechanism's distributions from the fp32 and the bf16
utilities at ε = 1 and 8; the last line is JSON.

Usage::

    python scripts/bf16_utilities_agreement.py [REGIME]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from center_and_start import regime_splits

    from mixdp_core.methods.prototypes.utilities import dense_public_utilities, em_log_probs, public_utilities

    regime = sys.argv[1] if len(sys.argv) > 1 else "many_class_100_d256"
    (_, sp), (_, sp2) = list(regime_splits(regime, [0, 1]))
    X, y, C = sp.X_private, sp.y_private, sp.n_classes
    pool = np.concatenate([sp.X_public, sp.X_test, sp2.X_private]).astype(np.float32)
    kw = dict(n_classes=C, d_min=0.5, d_max=1.5)
    ref = dense_public_utilities(X, y, pool, **kw)
    f32 = public_utilities(X, y, pool, precision="fp32", **kw)
    b16 = public_utilities(X, y, pool, precision="bf16", **kw)
    n_c = np.bincount(y, minlength=C)
    err32, err16 = np.abs(f32 - ref).max(1), np.abs(b16 - ref).max(1)
    clipped = float(np.mean(np.abs(1.0 + (X / np.linalg.norm(X, axis=1, keepdims=True))
                                   @ (pool[:2000] / np.linalg.norm(pool[:2000], axis=1, keepdims=True)).T - 1.0) > 0.5))
    tv = {}
    for eps in (1.0, 8.0):
        d = [0.5 * np.abs(np.exp(em_log_probs(f32[c], epsilon=eps, sensitivity=1.0, monotone=True))
                          - np.exp(em_log_probs(b16[c], epsilon=eps, sensitivity=1.0, monotone=True))).sum()
             for c in range(C)]
        tv[eps] = (float(np.median(d)), float(np.max(d)))
    res = {"script": "bf16_utilities_agreement", "regime": regime, "n_private": int(len(y)),
           "n_pool": int(len(pool)), "dim": int(X.shape[1]), "classes": int(C),
           "share_of_summands_clipped": clipped,
           "max_abs_err_fp32": float(err32.max()), "max_abs_err_bf16": float(err16.max()),
           "max_err_bf16_over_sqrt_nc_2m9": float(np.max(err16 / np.sqrt(n_c) * 2**9)),
           "max_err_bf16_over_worst_case_bound": float(np.max(err16 / (3 * 2.0**-9 * n_c))),
           "tv_eps1_median_max": tv[1.0], "tv_eps8_median_max": tv[8.0]}
    print(f"{len(y)} private rows x {len(pool)} pool rows x {X.shape[1]} dims, {C} classes; "
          f"{100 * clipped:.0f} % of summands clipped")
    print(f"max |U - U_float64|: fp32 {res['max_abs_err_fp32']:.2e}, bf16 {res['max_abs_err_bf16']:.3f} "
          f"({res['max_err_bf16_over_sqrt_nc_2m9']:.2f} x 2^-9 sqrt(n_c); "
          f"{res['max_err_bf16_over_worst_case_bound']:.3f} of the worst case 3 2^-9 n_c)")
    for eps in (1.0, 8.0):
        print(f"EM total variation fp32 vs bf16 at eps {eps:g}: median {tv[eps][0]:.4f}, max {tv[eps][1]:.4f} over classes")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
