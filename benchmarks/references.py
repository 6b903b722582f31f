"""Benchmark: the non-private references' ridge selection (``paragon``'s 5-fold CV) and final
fit, before (direct L-BFGS in feature space, ``benchmarks/_references_v0.py``) and after
(:func:`mixdp_core.methods._linear.cross_validate_l2` and
:func:`~mixdp_core.methods._linear.fit_logistic_spectral`: spectral coordinates, curvature
preconditioning, float32 products, warm starts), side by side in one process on the same data.

Workload: synthetic class-structured features of the product owner's size,
6,500 x 1,280, 102 classes, unit rows, with a CNN-like spectrum (a large common mean and
power-law within-class variance, so the problem is ill-conditioned as real embeddings are).

"After" runs as ``Paragon.fit`` does: one eigenbasis (:func:`spectral_rows`) serves the CV and
the final fit, and the final fit starts from the CV's mean fold solution at the chosen ridge.
The CV's time includes the eigenbasis; the final fit's does not (it is counted once, in the
CV). Also reported: the final fit standalone (eigenbasis + fit from zero) and the total
(CV + final fit). Reports process-CPU time of each, the ratios, the ridge each selects, the
fold-averaged CV error per ridge (and the rows on which they differ), and for the final fit
the objective ``mean CE + (l2/2) ||W||^2`` reached by each solver, its gap to a tight
reference solve, and the test error on 2,000 held-out synthetic rows.
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
        L2_GRID, cross_validate_l2, error_rate, fit_logistic, fit_logistic_spectral, spectral_rows,
    )

    n, d, c, nt = (600, 64, 6, 300) if args.tiny else (6500, 1280, 102, 2000)
    (X, y), (Xt, yt) = synthetic(n, d, c, nt)
    out: dict = {"shape": [n, d, c], "threads": args.threads}
    with threadpoolctl.threadpool_limits(args.threads):
        # one untimed call of each path first: the first call pays lazy imports and BLAS start-up
        # (~0.1 s), and it was always the old path's, doubling the --tiny ratio
        m = min(len(y), 20 * c)
        select_l2_cv_v0(X[:m], y[:m], c, return_errors=True)
        cross_validate_l2(X[:m], y[:m], c, basis=spectral_rows(X[:m]))
        (l2_old, errs_old), w_old, c_old = _timed(lambda: select_l2_cv_v0(X, y, c, return_errors=True))
        print(f"before: l2 = {l2_old:g}, {w_old:.1f} s wall, {c_old:.1f} s CPU; CV errors {errs_old}", flush=True)

        def cv_new():
            sp = spectral_rows(X)
            return sp, cross_validate_l2(X, y, c, basis=sp)

        (sp, cv), w_new, c_new = _timed(cv_new)
        errs_new = {f"{l2:g}": float(e) for l2, e in zip(cv.path, cv.errors)}
        print(f"after:  l2 = {cv.l2:g}, {w_new:.1f} s wall, {c_new:.1f} s CPU; CV errors {errs_new}", flush=True)
        before = {f"{l2:g}": e for e, l2 in errs_old}
        out["cv"] = {"before_s": w_old, "after_s": w_new, "before_cpu_s": c_old, "after_cpu_s": c_new,
                     "cpu_ratio": c_old / max(c_new, 1e-9), "wall_ratio": w_old / max(w_new, 1e-9),
                     "l2_before": l2_old, "l2_after": cv.l2, "same_l2": l2_old == cv.l2,
                     "cv_error_before": before, "cv_error_after": errs_new,
                     "cv_error_rows_apart": {k: round(abs(before[k] - v) * n) for k, v in errs_new.items()}}
        # final fit of the paragon at the selected ridge (Paragon: max_iter 500)
        l2 = cv.l2
        W_old, w1, c1 = _timed(lambda: fit_logistic(X, y, c, l2=l2, max_iter=500))
        B_new, w2, c2 = _timed(lambda: fit_logistic_spectral(sp.Z, y, c, sp.s, l2=l2, init=cv.init, max_iter=500))
        W_new = sp.V @ B_new

        def standalone():
            sp1 = spectral_rows(X)
            return sp1.V @ fit_logistic_spectral(sp1.Z, y, c, sp1.s, l2=l2, max_iter=500)

        W_alone, _, c3 = _timed(standalone)
        # tight reference optimum: polish the best of the three far below the stopping rules
        W_ref = sp.V @ fit_logistic_spectral(sp.Z, y, c, sp.s, l2=l2, init=B_new, max_iter=5000, tol=1e-10)
        objs = {k: _objective(X, y, W, l2) for k, W in
                (("before", W_old), ("after", W_new), ("after_standalone", W_alone), ("reference", W_ref))}
        ref = min(objs.values())
        out["final_fit"] = {
            "l2": l2, "before_cpu_s": c1, "after_cpu_s": c2, "cpu_ratio": c1 / max(c2, 1e-9),
            "standalone_after_cpu_s": c3, "standalone_cpu_ratio": c1 / max(c3, 1e-9),
            **{f"objective_{k}": v for k, v in objs.items()},
            **{f"objective_gap_{k}": v - ref for k, v in objs.items() if k != "reference"},
            "objective_abs_diff_before_after": abs(objs["before"] - objs["after"]),
            "test_error_before": error_rate(Xt, yt, W_old), "test_error_after": error_rate(Xt, yt, W_new),
        }
        print(f"final fit: {c1:.1f} s vs {c2:.1f} s CPU (standalone {c3:.1f} s); {out['final_fit']}", flush=True)
        out["total"] = {"before_cpu_s": c_old + c1, "after_cpu_s": c_new + c2,
                        "cpu_ratio": (c_old + c1) / max(c_new + c2, 1e-9)}
        print(f"ratios (CPU): CV {out['cv']['cpu_ratio']:.2f}x, final fit {out['final_fit']['cpu_ratio']:.2f}x "
              f"(standalone {out['final_fit']['standalone_cpu_ratio']:.2f}x), total {out['total']['cpu_ratio']:.2f}x; "
              f"objectives before {objs['before']:.9f} after {objs['after']:.9f} (reference {objs['reference']:.9f})",
              flush=True)
    out["grid"] = list(L2_GRID)
    print(json.dumps(out, allow_nan=False))
    return out


if __name__ == "__main__":
    main()
