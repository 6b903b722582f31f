"""Benchmark and results of the privacy audits (digits · pixels by default).

Speed targets (2 shared CPU cores, sequential executor, features from the cache):

* LiRA with 16 reference models (17 trainings) of ``fully_private`` at ε = 3: < 60 s;
* white-box Dirac-canary audit of ``fully_private`` (NoisyGD) with 1,000 trials: < 120 s.

``--results`` also runs the grid behind ``docs/results/audit.md`` (every attack on every
feature-based family, private vs non-private, class-matched vs not) and prints it as a
markdown table. The last line of stdout is always one JSON object.

``--families`` measures the newer families and alarms: pDP quantiles of DPPL-Public-TopK and
sparse fine-tuning (with the cost of the norm passes, side by side in one process), the ε = 1 alarm of
the half-noise NoisyGD mechanism (1,000 vs 10,000 white-box trials, and the time of 10,000), the
correct mechanism at 10,000 trials over several seeds, and the DP-SGD alarm (privacy-profile test).

Usage::

    python benchmarks/audit.py                      # speed only
    python benchmarks/audit.py --results            # + the results grid (a few minutes)
    python benchmarks/audit.py --families --no-speed  # only the families' measurements
    python benchmarks/audit.py --tiny               # LiRA K=2, 100 white-box trials (smoke test)
    python benchmarks/audit.py --dataset image_folder --dataset-arg root=/tmp/cifar10 --encoder efficientnet_lite0
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the planted bugs (half-noise mechanisms) are test-only classes
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "evaluation"))


def _split(dataset, encoder, ir=1.0, dataset_kwargs=None, encoder_kwargs=None):
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features

    f = get_features(dataset, encoder, encoder_kwargs=encoder_kwargs, **(dataset_kwargs or {}))
    return make_split(f, SplitSpec(imbalance_ratio=ir))


def _row(tag, r):
    s = r.summary()
    keep = ("attack", "method", "claimed_epsilon", "auc", "tpr_at_fpr_0.001", "tpr_at_fpr_0.01",
            "empirical_epsilon_lower", "empirical_mu_lower", "claimed_mu", "confidence", "n_trials", "bound_method",
            "alarm", "auc_unmatched", "lira_offline_auc", "rmia_auc", "wall_seconds")
    out = {"case": tag}
    out.update({k: s.get(k) for k in keep})
    return out


def speed(split, reference_models=16, trials=1000):
    """The two speed targets; ``--tiny`` shrinks K and the trials (keys then name the sizes used,
    and the targets, which are for the full sizes, are left out)."""
    from mixdp_core.evaluation.audit import run_audit

    t = time.perf_counter()
    lira = run_audit(split, "fully_private", attack="lira", epsilon=3.0, reference_models=reference_models)
    t_lira = time.perf_counter() - t
    t = time.perf_counter()
    wb = run_audit(split, "fully_private", attack="canary-whitebox", epsilon=4.0, trials=trials)
    t_wb = time.perf_counter() - t
    k, n = reference_models, trials
    out = {f"lira{k}_fully_private_eps3_s": round(t_lira, 2),
           f"whitebox{n}_fully_private_eps4_s": round(t_wb, 2),
           f"lira{k}_auc": lira.metrics["auc"], "whitebox_eps_lower": wb.bound.epsilon_lower,
           "whitebox_claimed_eps": wb.claimed_epsilon}
    if (k, n) == (16, 1000):
        out.update(lira16_target_s=60, whitebox_target_s=120)
    return out


def results(split, split_ir10, quick=False):
    from mixdp_core.evaluation.audit import run_audit

    rows = []

    def add(tag, sp, method, attack, **kw):
        r = run_audit(sp, method, attack=attack, **kw)
        rows.append(_row(tag, r))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)

    np_params = {"l2": 1e-5}  # fixed ridge: no cross-validation in each of the 17 trainings
    if quick:  # a smaller grid for larger data sets (CIFAR-10 subset)
        for m in ("dp_ls", "paragon"):
            add("IR=10 loss", split_ir10, m, "loss", epsilon=3.0)
        for m, eps, mp in (("paragon", 3.0, np_params), ("fully_private", 3.0, None), ("dppl_mean", 3.0, None)):
            add("LiRA K=16", split, m, "lira", epsilon=eps, method_params=mp, reference_models=16)
        for eps in (1.0, 4.0, 8.0):
            add("white-box 1000", split, "fully_private", "canary-whitebox", epsilon=eps, trials=1000)
        add("white-box one run 1000", split, "dp_linear_probe", "canary-whitebox", epsilon=4.0, trials=1000)
        add("one-run 1000 white-box", split, "fully_private", "one-run", epsilon=4.0, canaries=1000)
        add("one-run 500 black-box", split, "dppl_mean", "one-run", epsilon=4.0, canaries=500)
        return rows
    for m in ("dp_ls", "fully_private", "dppl_mean", "paragon"):
        add("IR=10 loss", split_ir10, m, "loss", epsilon=3.0)
    for m, eps, mp in (("paragon", 3.0, np_params), ("fully_private", 1.0, None), ("fully_private", 3.0, None),
                       ("fully_private", 8.0, None), ("adamix", 3.0, None), ("dp_linear_probe", 3.0, None),
                       ("dppl_mean", 3.0, None), ("dppl_public", 3.0, None), ("dp_ls", 3.0, None)):
        add("LiRA K=16", split, m, "lira", epsilon=eps, method_params=mp, reference_models=16)
    for m in ("fully_private", "ngd", "adamix", "ppgd"):
        for eps in (1.0, 2.0, 4.0, 8.0):
            add("white-box 1000", split, m, "canary-whitebox", epsilon=eps, trials=1000)
    for m in ("dp_linear_probe", "dpsgd_global_adapt"):
        add("white-box one run 1000", split, m, "canary-whitebox", epsilon=4.0, trials=1000)
    for m in ("dppl_mean", "dppl_public", "dp_ls", "dp_linear_probe", "fully_private", "paragon"):
        add("one-run 500 black-box" if m != "fully_private" else "one-run 1000 white-box", split, m, "one-run",
            epsilon=4.0, canaries=500 if m != "fully_private" else 1000,
            method_params=np_params if m == "paragon" else None)
    for m in ("dppl_mean", "fully_private"):
        add("black-box canary 100", split, m, "canary", epsilon=4.0, trials=100)
    # the planted bug: half the noise it accounts for
    from test_audit_alarm import HalfNoiseFullyPrivate

    for eps in (1.0, 4.0):
        add("half-noise bug, white-box 1000", split, HalfNoiseFullyPrivate, "canary-whitebox", epsilon=eps, trials=1000)
    return rows


def _q(e):
    import numpy as np

    return {k: round(float(v), 4) for k, v in zip(("min", "q05", "median", "q95", "max"),
                                                    np.quantile(e, [0, 0.05, 0.5, 0.95, 1]))}


def families(split):
    """pDP of the new families, ε = 1 alarm and 10k-trial timing, DP-SGD alarm (module docstring)."""
    from mixdp_core.evaluation.audit import run_audit
    from mixdp_core.evaluation.pdp import pdp_kind, per_instance_epsilon
    from mixdp_core.methods import make_method

    out = {}

    def log(k, v):
        out[k] = v
        print(json.dumps({k: v}, default=str), file=sys.stderr, flush=True)

    for sampling, k, eps in ((s_, k_, e_) for s_ in ("monotone", "paper") for k_ in (1, 3) for e_ in (1.0, 3.0)):
        m = make_method("dppl_public_topk", target_epsilon=eps, k=k, sampling=sampling).fit(split)
        t = time.perf_counter()
        e = per_instance_epsilon(m, delta=1e-5, split=split)
        log(f"pdp_dppl_public_topk_{sampling}_k{k}_eps{eps:g}", dict(_q(e), epsilon=m.privacy_.epsilon, epsilon_em=m.epsilon_em_,
                                                         pool=int(len(split.y_public)), seconds=round(time.perf_counter() - t, 3),
                                                         kind=pdp_kind(m)))
    ft = dict(pretrain_epochs=10, epochs=5, width=8, gn_groups=4, device="cpu")
    for clip in (1.0, 5.0):
        for ov in (1.0, 1000.0):  # about once per epoch (k = ceil(1/q)) / every step (exact)
            m = make_method("sparse_finetune", target_epsilon=3.0, clip_norm=clip, pdp_overhead=ov, **ft).fit(split)
            e = per_instance_epsilon(m, delta=1e-5, split=split)
            # cost of the norm passes: their share of the DP epochs' wall time, in the same run
            pdp_s = sum(r.extra["pdp_seconds"] for r in m.history_)
            log(f"pdp_sparse_finetune_clip{clip:g}_overhead{ov:g}",
                dict(_q(e), epsilon=m.privacy_.epsilon, k=m.pdp_every_, steps=m.dp_steps_, kind=pdp_kind(m),
                     dp_epochs_seconds=round(sum(m.epoch_seconds_), 2), pdp_seconds=round(pdp_s, 2),
                     pdp_share=round(pdp_s / max(sum(m.epoch_seconds_), 1e-9), 3)))
    from test_audit_alarm import DPSGD_PARAMS, HalfNoiseFullyPrivate, HalfNoiseNoBiasDPSGD, NoBiasDPSGD

    for trials in (1000, 10_000):
        t = time.perf_counter()
        s = run_audit(split, HalfNoiseFullyPrivate, attack="canary-whitebox", epsilon=1.0, trials=trials).summary()
        log(f"half_noise_noisygd_eps1_{trials}", dict(alarm=s["alarm"], mu_lower=s["empirical_mu_lower"],
                                                       claimed_mu=s["claimed_mu"], eps_lower=s["empirical_epsilon_lower"],
                                                       seconds=round(time.perf_counter() - t, 2)))
    for seed in range(5):
        t = time.perf_counter()
        s = run_audit(split, "fully_private", attack="canary-whitebox", epsilon=1.0, trials=10_000, seed=seed).summary()
        log(f"correct_noisygd_eps1_10000_seed{seed}", dict(alarm=s["alarm"], mu_lower=s["empirical_mu_lower"],
                                                           claimed_mu=s["claimed_mu"],
                                                           seconds=round(time.perf_counter() - t, 2)))
    for meth in (HalfNoiseNoBiasDPSGD, NoBiasDPSGD):
        for eps in (1.0, 2.0, 4.0):
            t = time.perf_counter()
            s = run_audit(split, meth, attack="canary-whitebox", epsilon=eps, trials=5000,
                          method_params=DPSGD_PARAMS).summary()
            log(f"{meth.__name__}_eps{eps:g}_5000", dict(alarm=s["alarm"], profile_violation=s["profile_violation"],
                                                         eps_lower=s["empirical_epsilon_lower"], auc=s["auc"],
                                                         seconds=round(time.perf_counter() - t, 2)))
    return out


def markdown(rows):
    def f(x, p=3):
        return "—" if x is None else (f"{x:.{p}f}" if isinstance(x, float) else str(x))

    head = "| case | method | claimed ε | AUC | TPR@0.1% | TPR@1% | ε lower (95 %) | μ lower / claimed μ | alarm | extra |"
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        extra = []
        if r.get("auc_unmatched") is not None:
            extra.append(f"unmatched AUC {r['auc_unmatched']:.3f}")
        if r.get("rmia_auc") is not None:
            extra.append(f"RMIA {r['rmia_auc']:.3f}, offline LiRA {r['lira_offline_auc']:.3f}")
        extra.append(f"{r['wall_seconds']:.1f} s")
        mu = "—" if r.get("empirical_mu_lower") is None else f"{r['empirical_mu_lower']:.2f} / {r['claimed_mu']:.2f}"
        lines.append(f"| {r['case']} | {r['method']} | {f(r['claimed_epsilon'], 2)} | {f(r['auc'])} | "
                     f"{f(r['tpr_at_fpr_0.001'])} | {f(r['tpr_at_fpr_0.01'])} | {f(r['empirical_epsilon_lower'], 2)} | "
                     f"{mu} | {'**ALARM**' if r['alarm'] else 'no'} | {'; '.join(extra)} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="digits")
    ap.add_argument("--encoder", default="pixels")
    ap.add_argument("--dataset-arg", action="append", default=[])
    ap.add_argument("--encoder-arg", action="append", default=[])
    ap.add_argument("--results", action="store_true")
    ap.add_argument("--quick", action="store_true", help="smaller results grid")
    ap.add_argument("--families", action="store_true", help="pDP of the newer families and the alarm measurements")
    ap.add_argument("--no-speed", action="store_true", help="skip the speed targets")
    ap.add_argument("--tiny", action="store_true", help="speed section only, LiRA K=2 and 100 white-box trials")
    a = ap.parse_args()
    if a.tiny and (a.results or a.families):
        ap.error("--tiny runs the speed section only")
    dkw = {k: json.loads(v) if v[:1].isdigit() else v for k, v in (x.split("=", 1) for x in a.dataset_arg)}
    ekw = {k: json.loads(v) for k, v in (x.split("=", 1) for x in a.encoder_arg)} or None
    split = _split(a.dataset, a.encoder, dataset_kwargs=dkw, encoder_kwargs=ekw)
    out = {"benchmark": "audit", "tiny": a.tiny, "dataset": a.dataset, "encoder": a.encoder, "n_private": int(len(split.y_private)), "dim": split.dim}
    if not a.no_speed:
        out.update(speed(split, reference_models=2, trials=100) if a.tiny else speed(split))
    if a.families:
        out["families"] = families(split)
    if a.results:
        rows = results(split, _split(a.dataset, a.encoder, ir=10.0, dataset_kwargs=dkw, encoder_kwargs=ekw),
                       quick=a.quick)
        print(markdown(rows))
        out["rows"] = rows
    print(json.dumps(out, allow_nan=False, default=str))


if __name__ == "__main__":
    main()
