"""AdaMix's decisions under a steep long tail, per split seed and ε (a diagnostic, not a method).

On the prototypes figure's splits (20 % of the training rows held out as an unlabelled pool, 5
public rows per class, ``imbalance_ratio`` IR): Only-Public's balanced and minority-class
accuracy, then AdaMix at ε = 1, 3, 8 with the figure's noise rule (σ = 20 max(1, 3/ε)): balanced
and minority accuracy, whether the public-start guard released the private model, the guard
path's factor, the checkpoint test, the prior correction, the update's shrinkage factor and the
class histogram pilot's verdict. Extra ``key=value`` arguments are AdaMix options (e.g.
``guard_rule=balanced_when_imbalanced``). Secure noise: other draws on every run. Reads test
labels: a diagnostic for docs/results/prototypes.md, never a choice.

Usage::

    python scripts/imbalance_guard_diagnostic.py CIFAR10_DIR 100 [key=value ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _fmt(v) -> str:
    return "None" if v is None else f"{float(v):.2f}"  # no shrinkage factor: no step, or the two-iterate path


def main(argv: list[str]) -> None:
    from steep_tail_shrinkage import features, options, prototype_split

    from mixdp_core.evaluation.metrics import balanced_accuracy, minority_accuracy
    from mixdp_core.methods import make_method

    root, ir = argv[0], float(argv[1])
    extra = options(argv[2:])
    sigma_rule = "noise_multiplier" not in extra
    fs = features("cifar10", root)
    C = fs.n_classes
    for seed in (0, 1, 2):
        sp = prototype_split(fs, seed, ir)
        p = make_method("only_public").fit(sp).predict(sp.X_test)
        print(f"seed {seed}: Only-Public balanced {balanced_accuracy(sp.y_test, p, C):.3f} minority "
              f"{minority_accuracy(sp.y_test, p, sp.minority_classes):.3f}; private rows per class "
              f"{sp.private_counts.tolist()} (owner's view), minority classes {sp.minority_classes.tolist()}", flush=True)
        for eps in (1.0, 3.0, 8.0):
            sigma = {"noise_multiplier": 20.0 * max(1.0, 3.0 / eps)} if sigma_rule else {}
            m = make_method("adamix", target_epsilon=eps, seed=seed, **sigma, **extra).fit(sp)
            p = m.predict(sp.X_test)
            pilot = (m.histogram_test_ or {}).get("imbalanced")
            print(f"  ε {eps:g}: balanced {balanced_accuracy(sp.y_test, p, C):.3f} minority "
                  f"{minority_accuracy(sp.y_test, p, sp.minority_classes):.3f} guard released {m.guard_kept_private_} "
                  f"path factor {m.guard_path_factor_} checkpoint {m.checkpoint_kept_early_} prior corrected "
                  f"{m.prior_corrected_} shrinkage {_fmt(m.update_shrinkage_)} pilot imbalanced {pilot}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
