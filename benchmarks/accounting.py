"""Accounting speed: calibration and ε queries for typical inputs, vs autodp's calibrators.

Full-batch calibration (``calibrate_steps`` / ``calibrate_noise``) uses the exact closed form
(μ-GDP) and should take well under a millisecond; autodp's generic ``eps_delta_calibrator``
searches σ numerically and is shown for comparison, together with the largest difference
between its σ and ours. DP-SGD calibration (RDP, optionally PRV/PLD) and the vectorized
per-instance ε are timed too, and the PLD ε of each DP-SGD case from dp-accounting's own
``PLDAccountant`` against :func:`mixdp_core.accounting.backends._pld` (the same PMF, its grid
vectorized), side by side, with their ratio and whether the two ε are equal; and a 49-point
privacy profile δ(ε_k) with the PLD rebuilt at every ε against built once (``pld_delta``).

Prints one JSON object (the timings above and ratios such as ``autodp_generic_over_ours``) as the
last line of stdout. ``--tiny`` runs every case with 2 repeats and 10,000 pDP samples (tests).

Usage: ``python benchmarks/accounting.py [--repeats 20] [--prv] [--pld] [--tiny]``
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import warnings
from typing import Callable

import numpy as np

import mixdp_core.accounting as A

# (σ, ε, δ) typical of AdaMix / NoisyGD runs.
FULL_BATCH = [(10.0, 1.0, 1e-5), (50.0, 3.0, 1e-5), (200.0, 8.0, 1e-6), (20.0, 0.5, 1e-5)]
# (q, T, ε, δ) typical DP-SGD fine-tuning.
DPSGD = [(0.04, 2250, 8.0, 1e-5), (256 / 60000, 14000, 3.0, 1e-5), (0.3, 60, 3.0, 1e-5)]


def _time(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    out = fn()  # warm-up (lazy imports, caches)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--prv", action="store_true", help="also time PRV calibration (seconds)")
    ap.add_argument("--pld", action="store_true", help="also time PLD calibration (seconds)")
    ap.add_argument("--tiny", action="store_true", help="2 repeats, 1e4 pDP samples (smoke test)")
    args = ap.parse_args()
    if args.tiny:
        args.repeats = min(args.repeats, 2)
    warnings.simplefilter("ignore")
    res: dict = {"benchmark": "accounting", "repeats": args.repeats, "full_batch": [], "autodp": [], "dpsgd": []}

    print("Full-batch NoisyGD (exact μ-GDP closed form)")
    for sigma, eps, dlt in FULL_BATCH:
        t_steps, T = _time(
            lambda: A.calibrate_steps(noise_multiplier=sigma, target_epsilon=eps, target_delta=dlt), args.repeats
        )
        t_noise, s = _time(
            lambda: A.calibrate_noise(steps=T, target_epsilon=eps, target_delta=dlt), args.repeats
        )
        t_eps, _ = _time(lambda: A.epsilon(A.ComposedGaussian(sigma, T), delta=dlt), args.repeats)
        res["full_batch"].append({"sigma": sigma, "epsilon": eps, "delta": dlt, "steps": int(T),
                                  "calibrate_steps_ms": t_steps * 1e3, "calibrate_noise_ms": t_noise * 1e3,
                                  "epsilon_ms": t_eps * 1e3})
        print(
            f"  σ={sigma:<6g} ε={eps:<4g} δ={dlt:g}: T={T:<7d} calibrate_steps {t_steps * 1e3:7.3f} ms | "
            f"calibrate_noise {t_noise * 1e3:7.3f} ms | epsilon {t_eps * 1e3:7.3f} ms"
        )

    from autodp.calibrator_zoo import ana_gaussian_calibrator, eps_delta_calibrator
    from autodp.mechanism_zoo import ExactGaussianMechanism

    print("autodp calibrators, one Gaussian (σ for (ε, δ)), vs calibrate_noise(steps=1)")
    generic, ana = eps_delta_calibrator(), ana_gaussian_calibrator()
    for _, eps, dlt in FULL_BATCH:
        t_gen, m_gen = _time(lambda: generic(ExactGaussianMechanism, eps, dlt, [0, 1000], name="GM"), min(3, args.repeats))
        t_ana, m_ana = _time(lambda: ana(ExactGaussianMechanism, eps, dlt, name="GM"), min(3, args.repeats))
        t_ours, s = _time(lambda: A.calibrate_noise(steps=1, target_epsilon=eps, target_delta=dlt), args.repeats)
        res["autodp"].append({"epsilon": eps, "delta": dlt, "ours_ms": t_ours * 1e3, "autodp_generic_ms": t_gen * 1e3,
                              "autodp_analytic_ms": t_ana * 1e3, "autodp_generic_over_ours": t_gen / max(t_ours, 1e-12),
                              "sigma_ours": float(s), "sigma_abs_diff_generic": abs(float(s) - m_gen.params["sigma"]),
                              "sigma_abs_diff_analytic": abs(float(s) - m_ana.params["sigma"])})
        print(
            f"  ε={eps:<4g} δ={dlt:g}: ours {t_ours * 1e3:7.3f} ms σ={s:.6f} | autodp generic "
            f"{t_gen * 1e3:8.1f} ms σ={m_gen.params['sigma']:.6f} | autodp analytic {t_ana * 1e3:7.3f} ms "
            f"σ={m_ana.params['sigma']:.6f}"
        )

    print("DP-SGD noise calibration (Opacus RDP; first call includes computing RDP orders)")
    for q, T, eps, dlt in DPSGD:
        A.backends._RDP_CACHE.clear()
        t0 = time.perf_counter()
        s = A.calibrate_dpsgd_noise(sample_rate=q, steps=T, target_epsilon=eps, target_delta=dlt)
        cold = time.perf_counter() - t0
        t_curve, _ = _time(
            lambda: A.dpsgd_privacy_curve(noise_multiplier=s, sample_rate=q, steps=T, delta=dlt), min(3, args.repeats)
        )
        row = {"sample_rate": q, "steps": T, "epsilon": eps, "delta": dlt, "rdp_sigma": float(s),
               "rdp_calibrate_cold_ms": cold * 1e3, "curve_ms": t_curve * 1e3}
        line = f"  q={q:<8.4g} T={T:<6d} ε={eps:<4g}: rdp σ={s:.5f} in {cold * 1e3:7.1f} ms | curve {t_curve * 1e3:6.1f} ms"
        for acc, on in (("prv", args.prv), ("pld", args.pld)):
            if on:
                t0 = time.perf_counter()
                s2 = A.calibrate_dpsgd_noise(sample_rate=q, steps=T, target_epsilon=eps, target_delta=dlt, accountant=acc)
                dt = time.perf_counter() - t0
                row.update({f"{acc}_sigma": float(s2), f"{acc}_calibrate_s": dt})
                line += f" | {acc} σ={s2:.5f} in {dt:.2f} s"
        res["dpsgd"].append(row)
        print(line)

    print("PLD ε of a DP-SGD run, dp-accounting's PLDAccountant vs ours (same PMF; vectorized grid and self-composition bounds), side by side")
    res["pld_build"] = []
    interval = 1e-3 if args.tiny else A.backends.PLD_INTERVAL
    for row in (res["dpsgd"][-1:] if args.tiny else res["dpsgd"]):
        blocks = ((row["rdp_sigma"], row["sample_rate"], row["steps"]),)

        def library():
            from dp_accounting.pld import PLDAccountant

            acc = PLDAccountant(value_discretization_interval=interval)
            acc.compose(A.backends._pld_event(blocks))
            return acc.get_epsilon(row["delta"])

        def ours():
            A.backends._gaussian_pld.cache_clear()  # no reuse: the whole construction is timed
            return A.backends._pld(blocks, interval).get_epsilon_for_delta(row["delta"])

        reps = 1 if args.tiny else 3
        t_lib, e_lib = _time(library, reps)
        t_ours, e_ours = _time(ours, reps)
        res["pld_build"].append({"sample_rate": row["sample_rate"], "steps": row["steps"], "interval": interval,
                                 "library_s": t_lib, "ours_s": t_ours, "library_over_ours": t_lib / t_ours,
                                 "epsilon_equal": bool(e_lib == e_ours)})
        print(f"  q={row['sample_rate']:<8.4g} T={row['steps']:<6d}: library {t_lib:.3f} s | ours {t_ours:.3f} s | "
              f"{t_lib / t_ours:.2f}x | ε equal: {e_lib == e_ours}")
    assert all(r["epsilon_equal"] for r in res["pld_build"])

    print("PLD self-composition of one DP-SGD step, the library's vs ours (same PMF; Chernoff bounds without "
          "SciPy's logsumexp dispatch), side by side")
    res["pld_self_compose"] = []
    for row in (res["dpsgd"][-1:] if args.tiny else res["dpsgd"]):
        for itv in ((1e-3,) if args.tiny else (A.backends.PLD_INTERVAL, A.backends.PLD_SEARCH_INTERVAL)):
            step = A.backends._gaussian_pld(row["rdp_sigma"], row["sample_rate"], itv)
            reps = 1 if args.tiny else 5
            t_lib, lib = _time(lambda: step.self_compose(row["steps"]), reps)
            t_ours, ours = _time(lambda: A.backends._self_compose(step, row["steps"]), reps)
            same = bool(np.array_equal(lib._pmf_remove._probs, ours._pmf_remove._probs)
                        and np.array_equal(lib._pmf_add._probs, ours._pmf_add._probs))
            res["pld_self_compose"].append({"sample_rate": row["sample_rate"], "steps": row["steps"], "interval": itv,
                                            "library_s": t_lib, "ours_s": t_ours, "library_over_ours": t_lib / t_ours,
                                            "pmf_equal": same})
            print(f"  q={row['sample_rate']:<8.4g} T={row['steps']:<6d} interval {itv:g}: library {t_lib:.4f} s | "
                  f"ours {t_ours:.4f} s | {t_lib / t_ours:.2f}x | PMF equal: {same}")
    assert all(r["pmf_equal"] for r in res["pld_self_compose"])

    print("A privacy profile δ(ε_k) of one DP-SGD run at 49 ε (an audit's claimed curve): the PLD rebuilt at every ε "
          "(as before) vs built once (pld_delta), side by side")
    row = res["dpsgd"][-1]
    blocks = ((row["rdp_sigma"], row["sample_rate"], row["steps"]),)
    eps_k = np.linspace(0.0, 4.0 * row["epsilon"] + 4.0, 9 if args.tiny else 49)

    def rebuilt():
        return [min(1.0, float(A.backends._pld(blocks).get_delta_for_epsilon(float(e)))) for e in eps_k]

    def once():
        A.backends._pld_cached.cache_clear()  # the one construction is timed
        return [A.backends.pld_delta(blocks, epsilon=float(e)) for e in eps_k]

    reps = 1 if args.tiny else 3
    t_re, d_re = _time(rebuilt, reps)
    t_once, d_once = _time(once, reps)
    res["pld_profile"] = {"points": int(eps_k.size), "sample_rate": row["sample_rate"], "steps": row["steps"],
                          "rebuilt_s": t_re, "once_s": t_once, "rebuilt_over_once": t_re / t_once,
                          "delta_equal": bool(d_re == d_once)}
    print(f"  {eps_k.size} points: rebuilt {t_re:.3f} s | once {t_once:.3f} s | {t_re / t_once:.1f}x | "
          f"δ equal: {d_re == d_once}")
    assert res["pld_profile"]["delta_equal"]

    rng = np.random.default_rng(0)
    n_pdp = 10_000 if args.tiny else 100_000
    sq = rng.uniform(0, 400, size=n_pdp)
    t_pdp, _ = _time(lambda: A.pdp_epsilon(sq, noise_multiplier=10.0, delta=1e-5), min(3, args.repeats))
    t_curve, _ = _time(lambda: A.privacy_curve(noise_multiplier=10.0, steps=10_000, delta=1e-5), min(3, args.repeats))
    print(f"pdp_epsilon, {n_pdp:.0e} samples: {t_pdp * 1e3:.1f} ms | privacy_curve, T=1e4: {t_curve * 1e3:.1f} ms")
    assert math.isfinite(t_pdp)
    gen = [r["autodp_generic_over_ours"] for r in res["autodp"]]
    res.update({"pdp_samples": n_pdp, "pdp_epsilon_ms": t_pdp * 1e3, "privacy_curve_T1e4_ms": t_curve * 1e3,
                "autodp_generic_over_ours_median": statistics.median(gen),
                "max_sigma_abs_diff_generic": max(r["sigma_abs_diff_generic"] for r in res["autodp"]),
                "max_calibrate_noise_ms": max(r["calibrate_noise_ms"] for r in res["full_batch"])})
    print(json.dumps(res, allow_nan=False))


if __name__ == "__main__":
    main()
