"""Benchmark: cost of one DP-SGD step (per-sample gradients, masking, clipping, noise) versus
one non-private SGD step on the same batch, for the GroupNorm networks of sparse DP
fine-tuning (Luo et al. 2021).

For each (architecture, transfer mode) the two steps are timed side by side, interleaved,
on the same physical batch of random images (content does not change the cost):

* ``nonprivate``: forward, mean cross-entropy backward, SGD step over τ (same
  ``requires_grad`` as the DP step; for ``all`` the non-private step trains whole conv
  tensors, since a plain optimizer cannot skip entries either);
* ``dp``: the loop of :func:`mixdp_core.methods.finetune.training.dp_sgd_finetune` for one
  logical step: Opacus ``GradSampleModule`` forward/backward (per-sample gradients of τ),
  per-sample masks for ``all``, per-sample clipping, Gaussian noise, noised-grad mask, step.

The reported figure is the median over ``--repeats`` of each, and their ratio (the DP
overhead). CPU timings use ``torch.set_num_threads(--threads)``; a GPU is used only with
``--device cuda`` (not available in the session that produced docs/results).

Usage::

    python benchmarks/sparse_finetune.py            # small_cnn (batch 64) + resnet18_32 (batch 16)
    python benchmarks/sparse_finetune.py --quick    # small_cnn only, few repeats
    python benchmarks/sparse_finetune.py --tiny     # small_cnn of width 8, batch 16, one repeat (tests)

The last line of stdout is one JSON object: the rows (``overhead`` = DP / non-private step) and
the overhead per (architecture, τ).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _time_steps(arch: str, mode: str, batch: int, repeats: int, device: str, width: int) -> dict:
    import torch
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer
    from torch import nn

    from mixdp_core.methods.finetune.models import build_model, replace_classifier
    from mixdp_core.methods.finetune.selection import select_parameters

    torch.manual_seed(0)
    size = 32
    model = build_model(arch, 3, 10, width=width, gn_groups=8, image_size=size).to(device)
    replace_classifier(model, 5)
    nn.init.normal_(model.classifier.weight, std=0.01)
    sel = select_parameters(model, mode, conv_fraction=0.01)
    X = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(0, 5, (batch,), device=device)
    params = [p for p in model.parameters() if p.requires_grad]
    loss_fn = nn.CrossEntropyLoss()

    # Non-private step on a plain copy-free model (hooks are added only below).
    sgd = torch.optim.SGD(params, lr=1e-4, momentum=0.9)

    def nonprivate_step():
        sgd.zero_grad(set_to_none=True)
        loss_fn(model(X), y).backward()
        sgd.step()

    gsm = GradSampleModule(model, loss_reduction="mean")
    gsm.disable_hooks()
    base = torch.optim.SGD(params, lr=1e-4, momentum=0.9)
    dp = DPOptimizer(base, noise_multiplier=1.0, max_grad_norm=1.0, expected_batch_size=batch)
    named = dict(model.named_parameters())
    masks = [(named[n], m.to(device=device, dtype=named[n].dtype)) for n, m in sel.masks.items()]

    def hook(opt):
        for p, m in masks:
            p.grad.mul_(m)

    dp.attach_step_hook(hook)

    def dp_step():
        dp.zero_grad(set_to_none=True)
        loss_fn(gsm(X), y).backward()
        for p, m in masks:
            p.grad_sample.mul_(m)
        dp.step()

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    times = {"nonprivate": [], "dp": []}
    for r in range(repeats + 1):  # first round = warm-up
        for name, fn in (("nonprivate", nonprivate_step), ("dp", dp_step)):
            if name == "dp":
                gsm.enable_hooks()
            else:
                gsm.disable_hooks()
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            if r > 0:
                times[name].append(time.perf_counter() - t0)
    npv = statistics.median(times["nonprivate"])
    dpv = statistics.median(times["dp"])
    return {
        "arch": arch,
        "width": width,
        "mode": mode,
        "batch": batch,
        "device": device,
        "trainable": sel.n_trainable,
        "params": sel.n_total,
        "nonprivate_ms": 1000 * npv,
        "dp_ms": 1000 * dpv,
        "overhead": dpv / npv,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64, help="physical batch of the small CNN")
    ap.add_argument("--resnet-batch", type=int, default=16, help="physical batch of ResNet-18 (per-sample "
                    "gradients of 11.2 M parameters take 45 MB per sample)")
    ap.add_argument("--resnet-repeats", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="small_cnn width 8, batch 16, 1 repeat (smoke test)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    repeats = 1 if args.tiny else 2 if args.quick else args.repeats
    configs = [("small_cnn", 8, 16, repeats)] if args.tiny else [("small_cnn", 16, args.batch, repeats)]
    if not (args.quick or args.tiny):
        configs.append(("resnet18_32", 64, args.resnet_batch, args.resnet_repeats))
    rows = []
    for arch, width, batch, reps in configs:
        for mode in ("cls", "cls_norm", "all", "full"):
            rows.append(_time_steps(arch, mode, batch, reps, args.device, width))
            r = rows[-1]
            print(
                f"{arch:12s} {mode:9s} trainable={r['trainable']:>9,d} nonprivate={r['nonprivate_ms']:8.1f} ms "
                f"dp={r['dp_ms']:8.1f} ms overhead={r['overhead']:5.2f}x",
                flush=True,
            )
    print()
    print("| arch | batch | τ | trainable / total | non-private step (ms) | DP step (ms) | DP / non-private |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['arch']} (width {r['width']}) | {r['batch']} | {r['mode']} | {r['trainable']:,} / {r['params']:,} | "
            f"{r['nonprivate_ms']:.1f} | {r['dp_ms']:.1f} | {r['overhead']:.2f}× |"
        )
    print(f"\ndevice {args.device}, torch threads {args.threads}, median of {repeats} (small CNN) / "
          f"{args.resnet_repeats} (ResNet-18) interleaved repeats after one warm-up")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    print(json.dumps({"benchmark": "sparse_finetune", "device": args.device, "threads": args.threads,
                      "repeats": repeats, "rows": rows,
                      "overhead": {f"{r['arch']}_{r['mode']}": r["overhead"] for r in rows}}, allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
