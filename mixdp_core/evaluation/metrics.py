"""Utility metrics of a trained classifier: error, balanced / per-class / minority accuracy.

Conventions: labels are ints in ``[0, C)``; errors and accuracies are fractions in
``[0, 1]`` (never percentages). A class with no test sample has per-class accuracy ``nan``
and is left out of the balanced accuracy (as in :func:`sklearn.metrics.balanced_accuracy_score`).
"""

from __future__ import annotations

import numpy as np

from ..errors import DataError


def _labels(name: str, y: np.ndarray, n_classes: int | None = None) -> np.ndarray:
    """``y`` as int64 labels, refusing what would silently change the result: non-integer
    values (``1.2`` truncated to 1), negatives, and labels ``>= n_classes`` where it is given
    (``bincount`` would size arrays by the label and drop them from the recall)."""
    a = np.asarray(y).ravel()
    if a.dtype.kind == "b" or a.dtype.kind not in "iuf":
        raise DataError(f"{name}: labels must be integers, got dtype {a.dtype}")
    if a.dtype.kind == "f" and a.size and not (np.all(np.isfinite(a)) and np.all(a == np.round(a))):
        raise DataError(f"{name}: labels must be integers in [0, C), got non-integer values")
    if a.size and a.min() < 0:
        raise DataError(f"{name}: labels must lie in [0, C), got {a.min():g}")
    if n_classes is not None and a.size and a.max() >= n_classes:
        raise DataError(f"{name}: labels must lie in [0, {int(n_classes)}) (n_classes), got {a.max():g}")
    return a.astype(np.int64, copy=False)


def _check(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    y_true = _labels("y_true", y_true, n_classes)
    y_pred = _labels("y_pred", y_pred, n_classes)
    if y_true.shape != y_pred.shape:
        raise DataError(f"y_pred: expected {y_true.shape[0]} predictions, got {y_pred.shape[0]}")
    if y_true.size == 0:
        raise DataError("y_true: no samples to evaluate")
    return y_true, y_pred


def test_error(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Fraction of misclassified samples, in ``[0, 1]``."""
    y_true, y_pred = _check(y_true, y_pred)
    return float(np.mean(y_true != y_pred))


test_error.__test__ = False  # not a pytest test despite its name


def per_class_accuracy(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int) -> np.ndarray:
    """Recall of every class: ``(C,)`` array, ``nan`` for classes absent from ``y_true``."""
    y_true, y_pred = _check(y_true, y_pred, int(n_classes))
    total = np.bincount(y_true, minlength=n_classes).astype(float)
    correct = np.bincount(y_true[y_true == y_pred], minlength=n_classes).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.where(total > 0, correct / np.maximum(total, 1), np.nan)
    return acc[:n_classes]


def balanced_accuracy(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int | None = None) -> float:
    """Mean per-class recall over the classes present in ``y_true`` (sklearn's
    ``balanced_accuracy_score``). ``n_classes``: labels must lie in ``[0, n_classes)``; without
    it the classes are those of ``y_true`` (a predicted label outside them is a miss)."""
    y_true, y_pred = _check(y_true, y_pred, None if n_classes is None else int(n_classes))
    C = int(y_true.max() + 1) if n_classes is None else int(n_classes)
    pred = np.where(y_pred < C, y_pred, -1)  # a label no true class has: wrong, never a bincount index
    total = np.bincount(y_true, minlength=C).astype(float)
    correct = np.bincount(y_true[y_true == pred], minlength=C).astype(float)
    present = total > 0
    return float(np.mean(correct[present] / total[present]))


def minority_accuracy(y_true: np.ndarray, y_pred: np.ndarray, minority_classes: np.ndarray) -> float | None:
    """Accuracy on the test samples whose label is a minority class.

    Minority classes are the last 25 % of classes in the split's long tail, chosen from its
    seed, not from the private counts (:attr:`mixdp_core.data.splits.Split.minority_classes`),
    so the set this figure averages over does not follow the private data (the tail's order is
    a function of the seed and the number of classes alone); the accuracy is sample-weighted
    over their test samples. ``None`` when there is no minority class (a balanced split,
    imbalance ratio 1: the quantity does not exist); ``nan`` if none of them has a test sample.
    """
    y_true, y_pred = _check(y_true, y_pred)
    if len(minority_classes) == 0:
        return None
    mask = np.isin(y_true, np.asarray(minority_classes, dtype=np.int64))
    if not mask.any():
        return float("nan")
    return float(np.mean(y_true[mask] == y_pred[mask]))


def performance_boost(err_dp: float, *, err_public: float, err_paragon: float) -> float:
    """Performance Boost of a mixed-privacy method (AdaMix paper, Sec. 4).

    ``PB = (err_public - err_paragon) / (err_DP - err_paragon)``, exactly as defined in the
    paper, where ``err_paragon`` is the error of the non-private model trained on public +
    private data, ``err_public`` that of the model trained on the public data only, and
    ``err_DP`` that of the mixed-privacy model (all on the same split). PB = 1 when the DP
    model is no better than Only-Public, grows as ``err_DP`` approaches the paragon, and is
    ``inf`` when it reaches it. It is ``-inf`` (undefined, shown as n/a) when ``err_DP`` or
    ``err_public`` is below the paragon's error, and ``nan`` when the paragon error equals both
    the others (nothing to learn).

    Args:
        err_dp, err_public, err_paragon: test errors in ``[0, 1]``.
    """
    num = float(err_public) - float(err_paragon)
    den = float(err_dp) - float(err_paragon)
    if num < 0.0 or den < 0.0:
        # an error below the paragon's: the ratio no longer measures the way from Only-Public to
        # the paragon (paragon 10 %, Only-Public 8 %, DP 9 % gave "2.00×" beside "use no private
        # method"); −∞, which every view shows as n/a (format_boost)
        return float("-inf")
    if den == 0.0:
        return float("nan") if num == 0.0 else float(np.copysign(np.inf, num))
    return num / den


#: How every view shows a Performance Boost that the paper's ratio cannot express: negative
#: (the DP model's error, or Only-Public's, is below the paragon's) or −∞.
BOOST_UNDEFINED = "n/a (an error below the Paragon's)"


def format_boost(pb: float | None) -> str:
    """A Performance Boost as a multiple (``"0.89×"``, ``"∞"``, ``"—"`` for none): the one
    unit of every view (app, recommendations). A negative PB is not "worse than Only-Public":
    it means an error below the paragon's, where the ratio has no meaning
    (:data:`BOOST_UNDEFINED`)."""
    if pb is None:
        return "—"
    pb = float(pb)
    if np.isnan(pb):
        return "—"
    if pb < 0:
        return BOOST_UNDEFINED
    if np.isinf(pb):
        return "∞"
    return f"{pb:.2f}×"
