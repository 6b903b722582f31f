"""The start rule's alignment assumption, measured: docs/results/centering.md ("signal share").

AdaMix's start scale (``init_scale="class_scaled"``, :meth:`PrivatePhase._scaled_start`) sets
its burn-in horizon from an assumed alignment of the per-row gradients at the start,
``BURN_IN_ALIGNMENT * sqrt(BURN_IN_CLASSES / C)``: the norm of the gradient sum over the sum
of the rows' gradient norms. The ``1/sqrt(C)`` law is derived; the factor left, the rows'
class-signal share ``s``, is assumed equal to its value where the constant was set. This
script measures, per regime, on the rows the head sees (unit rows centred on the public mean):

* ``A_priv``: the alignment ``||sum_i x_i e_i^T|| / sum_i ||x_i|| ||e_i||`` of the private rows
  at ``W = 0`` (``e_i = onehot(y_i) - 1/C``), the owner's view (it reads private rows);
* ``s_priv = A_priv * sqrt(C)`` and the rule's assumed ``s = BURN_IN_ALIGNMENT * sqrt(BURN_IN_CLASSES)``;
* ``s_pub``: the same share estimated from the public rows alone
  (:func:`~mixdp_core.methods.adamix.references.public_signal_share`: products of
  independent rows only, so without the bias of few-shot class means or of the centring);
  ``0`` at 1 shot, where no class has two rows.

With ``--alpha``, a second table: the start scale ``alpha`` each rule gives per regime and ε
(``init_scale="class_scaled"`` against ``"signal_share"``, which takes the alignment
``s_pub / sqrt(C - 1)`` from the public rows), each fit stopped at its first step (the start
is computed before it; the released count is noisy, so ``alpha`` varies by a few % between
calls) and the burn-in horizon of each against the run's gradient steps ``T``.

Usage: ``python scripts/signal_share.py [--alpha] REGIME [REGIME ...]`` (names of
:func:`center_and_start.regime_features`; seed 0 split).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mixdp_core
sys.path.insert(0, str(Path(__file__).resolve().parent))

from center_and_start import regime_splits  # noqa: E402

from mixdp_core.methods.adamix.configs import BURN_IN_ALIGNMENT, BURN_IN_CLASSES  # noqa: E402
from mixdp_core.methods.adamix.references import FeatureMap, public_signal_share  # noqa: E402


def alignment_at_zero(X: np.ndarray, y: np.ndarray, C: int) -> float:
    """``||sum_i x_i e_i^T||_F / sum_i ||x_i|| ||e_i||`` with ``e_i = onehot(y_i) - 1/C``."""
    E = -np.full((len(y), C), 1.0 / C)
    E[np.arange(len(y)), y] += 1.0
    G = X.T @ E
    return float(np.linalg.norm(G) / np.sum(np.linalg.norm(X, axis=1) * np.linalg.norm(E, axis=1)))


def main(names: list[str]) -> None:
    assumed = BURN_IN_ALIGNMENT * math.sqrt(BURN_IN_CLASSES)
    print(f"rule's assumed share s = {BURN_IN_ALIGNMENT} * sqrt({BURN_IN_CLASSES}) = {assumed:.3f}")
    print("| regime | C | D | public / class | A_priv | s_priv = A·√C | s_pub (public rows) | s_priv / assumed |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        seed, split = next(iter(regime_splits(name, [0])))
        fmap = FeatureMap.from_public(split.X_public)
        Xv, Xp = fmap(np.asarray(split.X_private)), fmap(np.asarray(split.X_public))
        yv, yp = np.asarray(split.y_private), np.asarray(split.y_public)
        C = int(max(yv.max(), yp.max())) + 1
        a = alignment_at_zero(Xv, yv, C)
        s_pub = public_signal_share(Xp, yp, C)
        k = int(round(len(yp) / C))
        print(f"| {name} | {C} | {Xv.shape[1]} | {k} | {a:.3f} | {a * math.sqrt(C):.3f} | {s_pub:.3f} | "
              f"{a * math.sqrt(C) / assumed:.2f} |", flush=True)


def alpha_table(names: list[str], epsilons=(0.5, 1.0, 3.0, 8.0)) -> None:
    """alpha of the start under both rules, per regime and ε (fits stopped at step 1)."""
    from threadpoolctl import threadpool_limits

    from mixdp_core.methods import make_method

    print("\n| regime | ε | T (gradient steps) | α class_scaled | α signal_share | ratio |")
    print("|---|---|---|---|---|---|")
    for name in names:
        _, split = next(iter(regime_splits(name, [0])))
        for eps in epsilons:
            a = {}
            for rule in ("class_scaled", "signal_share"):
                with threadpool_limits(1):
                    m = make_method("adamix", target_epsilon=eps, seed=0, init_scale=rule).fit(
                        split, on_step=lambda rec: True)
                a[rule] = m.init_scale_
            T = getattr(m, "calibrated_steps_", None)
            print(f"| {name} | {eps:g} | {T} | {a['class_scaled']:.4g} | {a['signal_share']:.4g} | "
                  f"{a['signal_share'] / a['class_scaled']:.2f} |", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--alpha"]:
        alpha_table(sys.argv[2:] or ["digits", "digits_ir10", "ten_class_ir10", "fine_grained_100",
                                     "many_class_100_d256", "classes_20_d128_ir10", "classes_50_d2048_5shot"])
        sys.exit(0)
    main(sys.argv[1:] or ["digits", "digits_ir10", "ten_class_ir10", "fine_grained_100", "many_class_100_d256",
                          "classes_20_d128_ir10", "classes_200_d512_1shot", "classes_50_d2048_5shot"])
