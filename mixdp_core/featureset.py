"""The in-memory feature matrices every method trains on (ground floor: imports only ``errors``).

Lives at the package root so that ``data`` (which builds feature sets from ``.npz`` files) and
``features.cache`` (which stores them) both import it without ``data`` importing ``features``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._io import env_limit
from .errors import DataError

#: Largest |feature value| accepted (``$MIXDP_MAX_FEATURE_ABS`` overrides). Encoders give
#: values of order 1-255; 1e38 overflows every squared norm to inf in float32.
DEFAULT_MAX_FEATURE_ABS = 1e6


#: Largest feature dimension D the methods take (``$MIXDP_MAX_FEATURE_DIM`` overrides): the
#: DP linear methods hold D x C weights, D x k projection bases and per-step D-sized work; a
#: 200,000-column file ran adamix into 10.9 GB. 65,536 covers every shipped encoder and
#: 128-px pixels (49,152).
DEFAULT_MAX_FEATURE_DIM = 65_536


def max_feature_dim() -> int:
    return int(env_limit("MIXDP_MAX_FEATURE_DIM", DEFAULT_MAX_FEATURE_DIM))


def check_feature_dim(d: int, where: str = "X_train") -> None:
    """Refuse ``d`` feature columns above :func:`max_feature_dim` (before any training)."""
    lim = max_feature_dim()
    if int(d) > lim:
        raise DataError(f"{where}: {int(d):,} feature columns; the methods take at most {lim:,} "
                        f"(reduce the dimension, e.g. a smaller image_size or an encoder; MIXDP_MAX_FEATURE_DIM "
                        f"sets the limit)")


def max_feature_abs() -> float:
    return float(env_limit("MIXDP_MAX_FEATURE_ABS", DEFAULT_MAX_FEATURE_ABS, kind=float))


@dataclass
class FeatureSet:
    """Encoded train/test features of one dataset with one encoder.

    Features are stored *unnormalized* (float32 in memory, float16 or float32 on disk); each
    method decides whether to L2-normalize them at use.

    Attributes:
        X_train: ``(N_train, D)`` features.
        y_train: ``(N_train,)`` int labels in ``[0, C)``.
        X_test: ``(N_test, D)`` features.
        y_test: ``(N_test,)`` int labels in ``[0, C)``.
        class_names: the ``C`` class names, index = label.
        text_embeddings: optional ``(C, D)`` zero-shot class embeddings from a CLIP text tower
            (mean over prompt templates, L2-normalized), ``None`` for encoders without text;
            a finite float array (checked).
        meta: provenance (dataset, encoder, weights tag, preprocessing, versions...).
    """

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    class_names: list[str]
    text_embeddings: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def dim(self) -> int:
        return int(self.X_train.shape[1])

    def validate(self) -> None:
        """Check shapes, finiteness and label ranges; errors name the offending array.

        Raises:
            DataError: on any inconsistency.
        """
        C = len(self.class_names)
        if C < 2:
            raise DataError(f"class_names: need at least 2 classes, got {C}")
        for xn, yn in (("X_train", "y_train"), ("X_test", "y_test")):
            X, y = getattr(self, xn), getattr(self, yn)
            if X.ndim != 2:
                raise DataError(f"{xn}: must be 2-D (samples x features), got shape {X.shape}")
            if y.ndim != 1 or y.shape[0] != X.shape[0]:
                raise DataError(
                    f"{yn}: must be 1-D with one label per row of {xn} "
                    f"({X.shape[0]}), got shape {y.shape}"
                )
            if X.shape[0] == 0:
                raise DataError(f"{xn}: has no samples")
            if X.shape[1] == 0:
                raise DataError(f"{xn}: has no feature columns (shape {X.shape})")
            check_feature_dim(X.shape[1], xn)
            if X.dtype.kind not in "fiu":
                raise DataError(f"{xn}: must be a numeric (float) array, got dtype {X.dtype}")
            if y.dtype.kind not in "iuf":
                raise DataError(f"{yn}: labels must be integer class indices 0..{C - 1}, got dtype {y.dtype}")
            if not np.issubdtype(y.dtype, np.integer):
                if not (np.all(np.isfinite(y)) and np.all(np.equal(np.mod(y, 1), 0))):
                    raise DataError(f"{yn}: labels must be integers")
                setattr(self, yn, y.astype(np.int64))
                y = getattr(self, yn)
            if y.min() < 0 or y.max() >= C:
                raise DataError(
                    f"{yn}: labels must lie in [0, {C - 1}] (C={C} class_names), "
                    f"got range [{y.min()}, {y.max()}]"
                )
            if not np.all(np.isfinite(X)):
                bad = int(np.count_nonzero(~np.isfinite(X).all(axis=1)))
                raise DataError(f"{xn}: contains NaN or infinite values in {bad} rows")
            lim = max_feature_abs()
            big = float(np.max(np.abs(X))) if X.size else 0.0
            if big > lim:
                raise DataError(f"{xn}: feature values must satisfy |x| <= {lim:g}, got {big:.3g} "
                                f"(rescale the features; MIXDP_MAX_FEATURE_ABS sets the limit)")
        absent = np.setdiff1d(np.arange(C), self.y_train)
        if absent.size:
            raise DataError(
                f"y_train: every class must have training samples; class(es) "
                f"{', '.join(repr(self.class_names[i]) for i in absent[:5])}"
                f"{' ...' if absent.size > 5 else ''} have none"
            )
        absent_test = np.setdiff1d(np.arange(C), self.y_test)
        if absent_test.size:
            warnings.warn(
                f"y_test: {absent_test.size} class(es) have no test samples "
                f"({', '.join(repr(self.class_names[i]) for i in absent_test[:5])}); their accuracy is "
                f"undefined and balanced accuracy averages over the others",
                stacklevel=3,
            )
        if self.X_train.shape[1] != self.X_test.shape[1]:
            raise DataError(
                f"X_test: has {self.X_test.shape[1]} features but X_train has "
                f"{self.X_train.shape[1]}"
            )
        if self.text_embeddings is not None:
            T = np.asarray(self.text_embeddings)
            # zero-shot scores are X @ T.T: a NaN row made every prediction class 0 and a run
            # that reported an error rate; a string array failed deep in a method
            if T.dtype.kind != "f":
                raise DataError(f"text_embeddings: must be a finite float array, got dtype {T.dtype}")
            if T.shape != (C, self.X_train.shape[1]):
                raise DataError(
                    f"text_embeddings: expected shape ({C}, {self.X_train.shape[1]}), "
                    f"got {T.shape}"
                )
            if not np.all(np.isfinite(T)):
                bad = int(np.count_nonzero(~np.isfinite(T).all(axis=1)))
                raise DataError(f"text_embeddings: must be a finite float array; {bad} of {C} class rows "
                                f"contain NaN or infinite values")
