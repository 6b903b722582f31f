"""Benchmark: the non-private references' ridge selection (``paragon``'s 5-fold CV) and final
fit, before (direct L-BFGS in feature space, ``benchmarks/_references_v0.py``) and after
(spectral coordinates + curvature preconditioning, :func:`mixdp_core.methods._linear.select_l2_cv`),
side by side in one process on the same data.

Workload: synthetic class-structured features of the product owner's size,
6,500 x 1,280, 102 classes, unit rows, with a CNN-like spectrum (a large common mean and
power-law within-class variance, so the problem is ill-conditioned as real embeddings are).
Reports wall and process-CPU time of each, their ratio, the ridge each selects, each
fold-averaged CV error per ridge, and (for the final fit at the selected ridge) the
objective reached by each solver and the test error on 2,000 held-out synthetic rows.
Prints one JSON object as the **last line**.

Usage::

    python benchmarks/references.py            # the issue's size
    python benchmarks/references.py --tiny     # a few hundred rows (smoke test)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def synthetic(n: int, d: int, c: int, n_test: int, seed: int = 0):
    """Unit-norm class-structured rows: common mean + class mean + power-law noise."""
    rng = np.random.default_rng(seed)
    scale = (1.0 + np.arange(d)) ** -0.8  # power-law spectrum of the within-class variance
    basis = np.linalg.qr(rng.normal(size=(d, d)))[0]
    common = np.abs(rng.normal(size=d)) * 3.0 / np.sqrt(d)
    means = rng.normal(size=(c, d)) * scale * 0.6

    def draw(m):
        y = np.arange(m) % c
        rng.shuffle(y)
        X = common + means[y] + rng.normal(size=(m, d)) * scale
        X = X @ basis.T
        return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32), y

    return draw(n), draw(n_test)


def _objective(X, y, W, l2):
    from mixdp_core.methods._linear import softmax_residual

    _, loss = softmax_residual(np.asarray(X, np.float64) @ W, y)
    return float(loss.mean() + 0.5 * l2 * np.sum(np.asarray(W, np.float64) ** 2))


def _timed(f):
    w, c = time.perf_counter(), time.process_time()
    out = f()
    return out, time.perf_counter() - w, time.process_time() - c


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="600 x 64 x 6 (smoke test)")
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    args = ap.parse_args(argv)
    import threadpoolctl

    from _references_v0 import select_l2_cv_v0
    from mixdp_core.methods._linear import (
        L2_GRID, error_rate, fit_logistic, fit_logistic_spectral, select_l2_cv, spectral_rows,
    )

    n, d, c, nt = (600, 64, 6, 300) if args.tiny else (6500, 1280, 102, 2000)
    (X, y), (Xt, yt) = synthetic(n, d, c, nt)
    out: dict = {"shape": [n, d, c], "threads": args.threads}
    with threadpoolctl.threadpool_limits(args.threads):
        (l2_old, errs_old), w_old, c_old = _timed(lambda: select_l2_cv_v0(X, y, c, return_errors=True))
        print(f"before: l2 = {l2_old:g}, {w_old:.1f} s wall, {c_old:.1f} s CPU; CV errors {errs_old}", flush=True)
        l2_new, w_new, c_new = _timed(lambda: select_l2_cv(X, y, c))
        print(f"after:  l2 = {l2_new:g}, {w_new:.1f} s wall, {c_new:.1f} s CPU", flush=True)
        out["cv"] = {"before_s": w_old, "after_s": w_new, "before_cpu_s": c_old, "after_cpu_s": c_new,
                     "cpu_ratio": c_old / max(c_new, 1e-9), "wall_ratio": w_old / max(w_new, 1e-9),
                     "l2_before": l2_old, "l2_after": l2_new,
                     "cv_error_before": {f"{l2:g}": e for e, l2 in errs_old}}
        # final fit of the paragon at the selected ridge (Paragon: max_iter 500)
        l2 = l2_new
        W_old, w1, c1 = _timed(lambda: fit_logistic(X, y, c, l2=l2, max_iter=500))

        def spectral_fit():
            sp = spectral_rows(X)
            return sp.V @ fit_logistic_spectral(sp.Z, y, c, sp.s, l2=l2, max_iter=500)

        W_new, w2, c2 = _timed(spectral_fit)
        out["final_fit"] = {
            "l2": l2, "before_cpu_s": c1, "after_cpu_s": c2, "cpu_ratio": c1 / max(c2, 1e-9),
            "objective_before": _objective(X, y, W_old, l2), "objective_after": _objective(X, y, W_new, l2),
            "test_error_before": error_rate(Xt, yt, W_old), "test_error_after": error_rate(Xt, yt, W_new),
        }
        print(f"final fit: {c1:.1f} s vs {c2:.1f} s CPU; {out['final_fit']}", flush=True)
    out["grid"] = list(L2_GRID)
    print(json.dumps(out, allow_nan=False))
    return out


if __name__ == "__main__":
    main()
