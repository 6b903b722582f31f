"""Non-private references of the AdaMix family (``paragon``, ``only_public``) and ``zero_shot``,
plus the linear head they share with the private methods."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Optional

import numpy as np

from ...errors import DataError
from .._linear import (
    cross_validate_l2, fit_logistic_spectral, fit_public, l2_normalize, public_ridge, spectral_rows,
)
from ..base import METHODS, ROLE_METHOD, ROLE_REFERENCE_LOWER, ROLE_REFERENCE_UPPER, Method, OnStep, StepRecord
from .configs import NonPrivateConfig, OnlyPublicConfig, ZeroShotConfig

# ----------------------------------------------------------------------------- helpers


@dataclass(frozen=True, eq=False)
class FeatureMap:
    """The head's input map: ``x -> x/||x||``, or with public-mean centering
    ``x -> (x/||x|| - m) / ||x/||x|| - m||`` where ``m`` is the mean of the unit-norm *public*
    rows (SimpleShot's "CL2N", Wang et al. 2019).

    Why centering: encoder features after a ReLU share a large nonnegative mean, so after row
    normalization most of every row's norm is the same direction for every class. That
    direction carries no class information but takes most of a clipped gradient's norm (a
    clipped private gradient then carries little class signal against noise that is the same
    in every direction) and dominates the curvature of the loss (the descent-lemma step is set
    by it). Removing it is a fixed function of public data: no privacy cost, no constant to
    choose, and every mapped row still has norm <= 1 (the sensitivity bounds of the private
    releases assume ``||x|| <= 1``; a row whose unit version equals ``m`` maps to 0).
    """

    center: Optional[np.ndarray] = None

    def __call__(self, X: np.ndarray) -> np.ndarray:
        Xn = l2_normalize(X)
        if self.center is None or len(Xn) == 0:
            return Xn
        return l2_normalize(Xn - self.center.astype(Xn.dtype, copy=False))

    @classmethod
    def from_public(cls, X_public: np.ndarray) -> "FeatureMap":
        """Centering on the mean of the unit-norm public rows (plain ``x/||x||`` without any)."""
        if len(X_public) == 0:
            return cls()
        return cls(center=l2_normalize(np.asarray(X_public)).mean(axis=0).astype(np.float32))


#: The plain map ``x -> x/||x||`` (no centering).
UNIT_MAP = FeatureMap()


def feature_map_for(choice: str, split: Any, *, public_start: bool) -> FeatureMap:
    """The :class:`FeatureMap` of a method's ``feature_center`` choice on ``split``.

    ``"auto"``: public-mean centering when the method reads the public rows as public and
    starts from them (``public_start``), else none; ``"public_mean"``: centering (the plain
    map when the split has no public row); ``"none"``: the plain map.
    """
    if choice == "none" or (choice == "auto" and not public_start):
        return UNIT_MAP
    return FeatureMap.from_public(split.X_public)


class UnitRows(NamedTuple):
    """A split's three feature matrices with every row scaled to unit L2 norm (the head's input).

    ``private`` is DP-protected; ``public`` may be read freely; ``test`` is for evaluation only.
    """

    private: np.ndarray
    public: np.ndarray
    test: np.ndarray


def unit_rows(split: Any, fmap: FeatureMap = UNIT_MAP) -> UnitRows:
    """``split``'s private, public and test features through ``fmap`` (unit-norm rows, or
    public-mean centred and renormalized; ``(0, D)`` if no public)."""
    return UnitRows(
        private=fmap(split.X_private),
        public=fmap(split.X_public) if len(split.X_public) else np.zeros((0, split.dim), np.float32),
        test=fmap(split.X_test),
    )


def text_init(split: Any, beta: float, method: str) -> np.ndarray:
    """``W = beta [enc(c_1), ..., enc(c_C)]`` (Sec. 3.3), shape ``(D, C)``.

    Raises:
        DataError: the split has no text embeddings (encoder without a text tower).
    """
    T = getattr(split, "text_embeddings", None)
    if T is None:
        raise DataError(
            f"text_embeddings: method {method!r} needs CLIP text embeddings, but these features "
            f"come from an encoder without a text tower; use a CLIP encoder (clip_vit_b32 or "
            f"clip_rn50) or another init"
        )
    T = np.asarray(T, dtype=np.float32)
    if T.shape != (split.n_classes, split.dim):
        raise DataError(f"text_embeddings: expected shape ({split.n_classes}, {split.dim}), got {T.shape}")
    return (np.float32(beta) * l2_normalize(T)).T.copy()


class LinearHead(Method):
    """Shared prediction for linear heads on normalized features."""

    family: ClassVar[str] = "adamix"
    W_: np.ndarray
    #: the input map the head was fitted on (set by ``fit``; the plain map before)
    feature_map_: FeatureMap = UNIT_MAP
    #: per-class logit offsets added to every score (``None``: none); AdaMix's prior correction
    #: sets them (post-processing on public rows, :func:`.engine.balanced_prior_bias`)
    intercept_: np.ndarray | None = None

    def _feature_map(self, split: Any, *, public_start: bool) -> FeatureMap:
        """Set and return ``feature_map_`` from the config's ``feature_center`` (``"none"``
        for a config without that field)."""
        choice = getattr(self.config, "feature_center", "none")
        self.feature_map_ = feature_map_for(choice, split, public_start=public_start)
        return self.feature_map_

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "W_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(split) first")
        scores = self.feature_map_(X) @ self.W_
        return scores if self.intercept_ is None else scores + self.intercept_


# ----------------------------------------------------------------------------- non-private


@METHODS.register("paragon")
class Paragon(LinearHead):
    """Non-private upper bound: logistic regression on public + private rows.

    Privacy: none (``privacy_ = None``, epsilon = infinity); nothing is released privately.
    """

    role = ROLE_REFERENCE_UPPER

    config_cls = NonPrivateConfig
    description = "Non-private paragon: logistic regression on public + private data (ε = ∞)"
    paper = "AdaMix (Golatkar et al. 2022), Tab. 1 'Non-Private (paragon)'"
    private = False

    def fit(self, split: Any, *, on_step: OnStep | None = None) -> "Paragon":
        self._reset()
        # the same map as only_public / adamix (centred on the public mean): the references and
        # the methods are compared on the same features
        d = unit_rows(split, self._feature_map(split, public_start=True))
        X = np.vstack([d.public, d.private])
        y = np.concatenate([split.y_public, split.y_private])
        # One eigenbasis of the rows it trains on serves the CV folds and the final fit
        # (spectral_rows: exact reparametrization, preconditioned L-BFGS, float32 products);
        # the final fit starts from the mean of the CV's fold solutions at the chosen ridge
        # (docs/results/tuning_notes.md, select_l2_cv solver; benchmarks/references.py).
        sp = spectral_rows(X)
        init = None
        if self.config.l2 is not None:
            self.l2_ = float(self.config.l2)
        else:
            cv = cross_validate_l2(X, y, split.n_classes, seed=self.config.seed, basis=sp)
            self.l2_, init = float(cv.l2), cv.init
        B = fit_logistic_spectral(sp.Z, y, split.n_classes, sp.s, l2=self.l2_, init=init,
                                  max_iter=self.config.max_iter)
        self.W_ = (sp.V @ B).astype(np.float32)
        self._finish(split, d.test, on_step)
        return self

    def _finish(self, split: Any, Xt: np.ndarray, on_step: OnStep | None) -> None:
        err = float(np.mean((Xt @ self.W_).argmax(1) != split.y_test))
        rec = StepRecord(step=1, total_steps=1, test_error=err)
        self.history_ = [rec]
        self.steps_ = 1
        if on_step is not None:
            on_step(rec)


@METHODS.register("only_public")
class OnlyPublic(Paragon):
    """Few-shot baseline: logistic regression on the public rows only.

    Ridge (``l2=None``): :func:`~mixdp_core.methods._linear.public_ridge` under ``l2_rule``, the
    rule of the public start of ``adamix`` / ``ngd`` (``public_l2_rule``), so Only-Public *is*
    that start: ``"loo"`` (default) selects it on the public rows with
    :func:`~mixdp_core.methods._linear.select_l2_loo` (approximate class-balanced leave-one-out
    log-loss along a ridge path; ``ONE_SHOT_L2`` with 1 shot per class), ``"fixed"`` uses
    ``PUBLIC_L2``. Either way the model is :func:`fit_public` at that ridge.
    Measurements: docs/results/only_public_ridge.md.

    Privacy: the private rows are never read, so their privacy loss is 0 (``privacy_`` stays
    ``None`` as for every non-private method; ``uses_private_data = False``).
    """

    role = ROLE_REFERENCE_LOWER
    config_cls = OnlyPublicConfig

    description = "Only-public: logistic regression on the public samples only (private data unused)"
    paper = "AdaMix (Golatkar et al. 2022), Tab. 1 'Only-Public'"
    uses_private_data = False

    def fit(self, split: Any, *, on_step: OnStep | None = None) -> "OnlyPublic":
        self._reset()
        d = unit_rows(split, self._feature_map(split, public_start=True))
        if len(split.y_public) == 0:
            raise DataError("X_public: only_public needs at least one public sample")
        # The same fit as the public start of adamix / ngd (fit_public); only the ridge may differ.
        if self.config.l2 is not None:
            self.l2_ = float(self.config.l2)
        else:  # the rule of the public start (NoisyGDMethod._public_init): the same ridge, the same model
            self.l2_ = public_ridge(d.public, split.y_public, split.n_classes, self.config.l2_rule)
        self.W_ = fit_public(d.public, split.y_public, split.n_classes, l2=self.l2_,
                             max_iter=max(self.config.max_iter, 1000))
        self._finish(split, d.test, on_step)
        return self


@METHODS.register("zero_shot")
class ZeroShot(Paragon):
    """CLIP zero-shot classifier ``W = beta [enc(c_1), ..., enc(c_C)]`` (Sec. 3.3).

    Privacy: uses only the class names (public), so no private data is read.

    Raises:
        DataError (at fit): the encoder has no text tower.
    """

    role = ROLE_METHOD

    config_cls = ZeroShotConfig
    description = "Zero-shot CLIP: class-name text embeddings as weights (no image training)"
    paper = "AdaMix (Golatkar et al. 2022), Sec. 3.3; Radford et al. 2021"
    needs_text = True
    uses_private_data = False

    def fit(self, split: Any, *, on_step: OnStep | None = None) -> "ZeroShot":
        self._reset()
        self.W_ = text_init(split, self.config.beta, "zero_shot")
        self.feature_map_ = UNIT_MAP  # text embeddings live in the uncentred space
        self._finish(split, l2_normalize(split.X_test), on_step)
        return self


# ----------------------------------------------------------------------------- private


def public_signal_share(X: np.ndarray, y: np.ndarray, n_classes: int) -> float:
    """The class-signal share ``s = rms_c ||mu_c - mu_bar|| / rms_i ||x_i - mu_bar||`` of the
    public rows (``mu_bar`` the mean of the class means), without the biases of few-shot
    means; ``0.0`` when no class has two rows.

    ``E||sum_{i in c} x_i||^2 = n_c^2 ||mu_c||^2 + n_c E||x - mu_c||^2``: the square of a class
    sum overstates ``||mu_c||^2`` by the within-class spread over ``n_c``, which at 2 shots is
    most of it. Every term here is instead a product of *independent* rows, so unbiased:

    * ``U_c = (||S_c||^2 - sum_{i in c} ||x_i||^2) / (n_c (n_c - 1))`` (``S_c`` the class sum:
      the cross terms ``sum_{i != j} x_i . x_j``) estimates ``||mu_c||^2``;
    * ``||sum_c xbar_c||^2 - sum_c ||xbar_c||^2`` estimates ``sum_{c != d} mu_c . mu_d``;

    so ``||mu_bar||^2 ~ (sum_c U_c + sum_{c != d} xbar_c . xbar_d) / K^2`` (over the ``K``
    classes with >= 2 rows), the between-class spread is ``mean_c U_c - ||mu_bar||^2`` and the
    total ``mean_i ||x_i||^2 - ||mu_bar||^2``. The estimate is invariant to a shift of every
    row by the same vector, even one computed from the rows: rows centred on their own public
    mean (the head's map) give what the uncentred rows give. Measuring around ``0`` instead
    would leave a ``-1/N`` bias from that centring, which at 10 classes x 2 shots (N = 20) halved
    the estimate on CIFAR-10 (docs/results/centering.md). Public rows only (no privacy cost).
    A negative spread (no signal visible) gives 0.
    """
    y = np.asarray(y)
    X = np.asarray(X, dtype=np.float64)
    U, means, sq = [], [], []
    for c in range(int(n_classes)):
        Xc = X[y == c]
        n = len(Xc)
        if n < 2:
            continue
        t = Xc.sum(axis=0)
        r2 = np.einsum("ij,ij->i", Xc, Xc)
        U.append((float(t @ t) - float(r2.sum())) / (n * (n - 1)))
        means.append(t / n)
        sq.append(r2)
    K = len(U)
    if K == 0:
        return 0.0
    M = np.asarray(means)
    T = M.sum(axis=0)
    mu_bar2 = (sum(U) + float(T @ T) - float(np.einsum("ij,ij->", M, M))) / K ** 2
    between = float(np.mean(U)) - mu_bar2
    total = float(np.mean(np.concatenate(sq))) - mu_bar2
    return math.sqrt(max(between, 0.0) / total) if total > 0 else 0.0
