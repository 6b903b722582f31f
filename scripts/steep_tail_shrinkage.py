"""AdaMix under a steep long tail (imbalance ratio 100) on real features: balanced and
minority-class accuracy per split seed and ε, for the default and for other AdaMix options
(a research measurement: noise drawn from the seed, so every option of a cell sees the same
draws; never a release).

The prototypes figure's splits (docs/results/prototypes.md: 20 % of the training rows held out
as its unlabelled pool, 5 public rows per class, ``imbalance_ratio`` 100) with AdaMix's own
defaults (σ = 20 at every ε, unlike the figure's σ rule). Prints Only-Public and one line per
(seed, ε): balanced and minority accuracy, whether the guard released the private model, the
update's factor and which rule set it, the pilot's verdict; then the means over seeds. Appends
every cell to ``--jsonl``. Reads test labels: a diagnostic for docs/results/class_balance.md
("A steep tail"), never a choice.

Usage::

    python scripts/steep_tail_shrinkage.py cifar10 CIFAR10_DIR [key=value ...] --jsonl OUT
    python scripts/steep_tail_shrinkage.py digits_efficientnet - update_shrinkage=two_iterate_when_balanced --imbalance 30
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def features(name: str, root: str):
    from mixdp_core.features.cache import get_features

    eff = {"image_size": 128, "precision": "fp32"}  # the committed tables' features
    if name == "cifar10":
        return get_features("image_folder", "efficientnet_lite0", root=root, encoder_kwargs=eff,
                            max_per_class=500, max_test_per_class=200)
    if name == "digits_efficientnet":
        return get_features("digits", "efficientnet_lite0", encoder_kwargs=eff)
    if name == "digits_pixels":
        return get_features("digits", "pixels")
    raise SystemExit(f"features: one of cifar10, digits_efficientnet, digits_pixels; got {name!r}")


def options(pairs) -> dict:
    """AdaMix options from ``key=value`` words: a Python literal where it parses (3 stays an
    int, 0.5 a float, None None), else the bare word as a string."""
    extra = {}
    for kv in pairs:
        k, v = kv.split("=", 1)
        try:
            extra[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            extra[k] = v  # a bare word: a string option
    return extra


def prototype_split(fs, seed: int, imbalance: float):
    """The prototypes figure's split of ``fs`` for ``seed`` (docs/results/prototypes.md): 20 %
    of the training rows held out as its unlabelled pool, 5 public rows per class, the private
    rows' imbalance ratio ``imbalance``."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.runs.figures.prototypes import _proto_holdout

    base, _ = _proto_holdout(fs, seed, 0.2)
    return make_split(base, SplitSpec(public_per_class=5, imbalance_ratio=imbalance, seed=seed))


def main(argv: list[str]) -> None:
    from threadpoolctl import threadpool_limits

    from mixdp_core.evaluation.metrics import balanced_accuracy, minority_accuracy
    from mixdp_core.methods import make_method

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("features")
    ap.add_argument("root", help="CIFAR10_DIR for cifar10 ('-' otherwise)")
    ap.add_argument("options", nargs="*", help="AdaMix key=value options (_key=value: a research attribute)")
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--epsilons", default="0.5,1,3,8")
    ap.add_argument("--imbalance", type=float, default=100.0)
    ap.add_argument("--jsonl")
    a = ap.parse_intermixed_args(argv)
    extra = options(a.options)
    fs = features(a.features, a.root)
    C = fs.n_classes
    out = open(a.jsonl, "a") if a.jsonl else None
    agg: dict = defaultdict(list)
    with threadpool_limits(1):
        for seed in [int(s) for s in a.seeds.split(",")]:
            sp = prototype_split(fs, seed, a.imbalance)
            p = make_method("only_public").fit(sp).predict(sp.X_test)
            b0, m0 = balanced_accuracy(sp.y_test, p, C), minority_accuracy(sp.y_test, p, sp.minority_classes)
            agg["op"].append((b0, m0))
            print(f"seed {seed}: Only-Public balanced {b0:.3f} minority {m0:.3f}; private rows per class "
                  f"{sp.private_counts.tolist()} (owner's view)", flush=True)
            for eps in [float(e) for e in a.epsilons.split(",")]:
                opts = {k: v for k, v in extra.items() if not k.startswith("_")}
                m = make_method("adamix", target_epsilon=eps, seed=seed, noise="reproducible", **opts)
                for k, v in extra.items():  # "_name": a research attribute set on the instance
                    if k.startswith("_"):
                        setattr(m, k, v)
                m.fit(sp)
                p = m.predict(sp.X_test)
                b, mi = balanced_accuracy(sp.y_test, p, C), minority_accuracy(sp.y_test, p, sp.minority_classes)
                agg[eps].append((b, mi))
                s = m.update_shrinkage_
                pilot = (m.histogram_test_ or {}).get("imbalanced")
                print(f"  ε {eps:g}: balanced {b:.3f} minority {mi:.3f} guard released {m.guard_kept_private_} "
                      f"factor {'None' if s is None else f'{s:.2f}'} ({m.update_shrinkage_rule_}; check rejected "
                      f"{m.update_check_rejected_}) pilot imbalanced "
                      f"{pilot}", flush=True)
                if out:
                    out.write(json.dumps({"features": a.features, "imbalance_ratio": a.imbalance, "options": extra,
                                          "seed": seed, "epsilon": eps,
                                          "only_public_balanced": b0, "balanced": b, "minority": mi,
                                          "guard_released": m.guard_kept_private_, "factor": s,
                                          "rule": m.update_shrinkage_rule_,
                                          "check_rejected": m.update_check_rejected_}) + "\n")
                    out.flush()
    for key, rows in agg.items():
        r = np.asarray(rows, dtype=float)
        name = "Only-Public" if key == "op" else f"ε {key:g}"
        print(f"{name}: balanced {r[:, 0].mean():.3f} (sd {r[:, 0].std(ddof=1) if len(r) > 1 else 0:.3f}) "
              f"minority {r[:, 1].mean():.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
