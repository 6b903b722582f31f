"""Public / private / test splits, deterministic per seed and identical across methods.

Conventions (both papers):

* **public** = ``public_per_class`` samples of every class drawn from the training set
  (or from another dataset/domain with the same label set, ``public_from``);
* **private** = the remaining training samples, optionally made long-tailed with an
  exponential profile (DP-prototypes paper, Sec. 5): class ``c`` (in a seed-shuffled order)
  keeps ``n_max * IR^(-c/(C-1))`` samples, IR = ``imbalance_ratio``;
* optionally at most ``private_per_class`` private samples of every class (seeded choice,
  after the long tail), to measure the value of private samples (AdaMix Fig. 2);
* **test** = the dataset's test set, untouched;
* **minority classes** = the last 25 % of classes in the long tail's seed-shuffled order (at
  least one), and only when the private part is made long-tailed (``imbalance_ratio > 1``): a
  balanced split has no minority class, so no minority-class accuracy. They are chosen from the
  seed's tail order, not from the private counts: which classes a reported minority-class
  accuracy averages over should not follow the private data (it did, through the exact counts'
  order and ties). The order is a permutation drawn from a stream of its own, keyed by the seed
  alone (:func:`tail_ranks`): a function of the seed and the number of classes, never of the
  data. (Until 2026-11-30 it was drawn after the public rows from the split's generator, whose
  bounded draws depend on the class sizes with probability about size / 2³² each, so a
  neighbouring data set could reorder it that rarely; docs/privacy.md.)

The split only selects indices; the same ``(features, spec)`` always gives the same split,
whatever method is trained on it afterwards.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..config import IMBALANCE_RANGE, SEED_RANGE, Interval, param, validate
from ..errors import ConfigError, DataError
from ..featureset import FeatureSet


@dataclass(frozen=True)
class SplitSpec:
    """How to split a :class:`FeatureSet` into public / private / test.

    Args:
        public_per_class: public samples per class (k-shot), ``>= 1``. Default 5.
        imbalance_ratio: IR ``>= 1`` of the exponential long tail applied to the private
            part; 1 means no imbalance.
        seed: seed of every random choice of the split.
        public_from: name of the dataset spec (e.g. ``"image_folder:PACS/photo"``) whose
            training features provide the public samples (domain shift); ``None`` means the
            public samples come from the same training set.
        private_per_class: keep at most this many private samples per class (``None`` = all).
    """

    # declared once, as a run's fields are (the same ranges as RunConfig's): nan, inf, None, a
    # string or a list raised bare ValueError / TypeError / OverflowError, True passed as 1, and
    # 1e308 or 2**70 were accepted here though a run refuses them
    public_per_class: int = param(5, type=int, range=Interval(1, None), help="public samples per class (k-shot)")
    imbalance_ratio: float = param(1.0, type=float, range=IMBALANCE_RANGE,
                                   help="long-tail ratio of the private part (1 = balanced)")
    seed: int = param(0, type=int, range=SEED_RANGE, help="seed of every random choice of the split")
    public_from: str | None = None
    private_per_class: int | None = param(None, type=int, range=Interval(1, None),
                                          help="at most this many private samples per class (None = all)")

    def __post_init__(self) -> None:
        validate(self)  # each field's type and range, one line naming it
        if self.public_from is not None and not isinstance(self.public_from, str):
            raise ConfigError("public_from", f"must be a dataset spec (a string) or None, got {self.public_from!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Split:
    """The matrices one training run sees.

    Attributes:
        X_public, y_public: public (non-private) labelled samples.
        X_private, y_private: private samples; every privacy guarantee is about these.
        X_test, y_test: held-out evaluation samples (never used for training).
        class_names: the ``C`` class names.
        minority_classes: sorted class ids of the last 25 % of classes in the long tail's
            seed-shuffled order (:func:`minority_classes`; not from the private counts); empty when
            ``spec.imbalance_ratio <= 1`` (no minority in a balanced split).
        private_counts: ``(C,)`` private samples per class.
        text_embeddings: optional ``(C, D)`` CLIP text embeddings (zero-shot / text init).
        spec: the :class:`SplitSpec` that produced it.
        meta: provenance copied from the feature set.
    """

    X_public: np.ndarray
    y_public: np.ndarray
    X_private: np.ndarray
    y_private: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    class_names: list[str]
    minority_classes: np.ndarray
    private_counts: np.ndarray
    text_embeddings: np.ndarray | None = None
    spec: SplitSpec = field(default_factory=SplitSpec)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Every split a method sees is checked once, also one built by hand or by
        ``dataclasses.replace``: 2-D float matrices of one dimension D, finite values, integer
        labels in ``[0, C)`` matching their rows. A NaN in one private row would decide the whole
        output (no clipping bounds it) and a label −1 would silently count as the last class.

        Raises:
            DataError: one line naming the array."""
        from ..errors import DataError
        from ..featureset import max_feature_abs

        C = len(self.class_names)
        D = None
        for xs, ys in (("X_public", "y_public"), ("X_private", "y_private"), ("X_test", "y_test")):
            X, y = np.asarray(getattr(self, xs)), np.asarray(getattr(self, ys))
            if X.ndim != 2:
                raise DataError(f"{xs}: must be a 2-D (rows, D) matrix, got shape {X.shape}")
            if D is None:
                D = X.shape[1]
            elif X.shape[1] != D:
                raise DataError(f"{xs}: has {X.shape[1]} columns, the other parts {D}")
            if y.shape != (X.shape[0],):
                raise DataError(f"{ys}: expected {X.shape[0]} labels (one per row of {xs}), got shape {y.shape}")
            if X.size and X.dtype.kind != "f":
                raise DataError(f"{xs}: must be a float matrix, got dtype {X.dtype}")
            if X.size and not np.isfinite(X).all():
                raise DataError(f"{xs}: contains NaN or infinite values")
            # the FeatureSet's bound, also for a split built by hand: a value past float32's range
            # becomes inf where a method computes in float32, and one such row decided a whole
            # DPPL-Public selection (its class's utilities NaN, the pick certain)
            if X.size and (big := float(np.max(np.abs(X)))) > (lim := max_feature_abs()):
                raise DataError(f"{xs}: feature values must satisfy |x| <= {lim:g}, got {big:.3g} "
                                f"(rescale the features; MIXDP_MAX_FEATURE_ABS sets the limit)")
            if y.size and (y.dtype.kind not in "iu" or int(y.min()) < 0 or int(y.max()) >= C):
                raise DataError(f"{ys}: labels must be integers in [0, {C}) (class_names), got "
                                f"{y.dtype} in [{y.min()}, {y.max()}]")

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def dim(self) -> int:
        return int(self.X_private.shape[1])

    def summary(self) -> dict[str, Any]:
        """Counts per class, for charts: public, private, test and the minority flag."""
        C = self.n_classes
        return {
            "class_names": list(self.class_names),
            "public": np.bincount(self.y_public, minlength=C).tolist(),
            "private": self.private_counts.tolist(),
            "test": np.bincount(self.y_test, minlength=C).tolist(),
            "minority": [int(c in set(self.minority_classes.tolist())) for c in range(C)],
            # what the split holds (largest / smallest private class), beside the ratio asked
            "realized_imbalance_ratio": (float(self.private_counts.max()) / float(self.private_counts.min())
                                         if len(self.private_counts) and self.private_counts.min() > 0 else None),
        }


def minority_classes(tail_ranks: np.ndarray, imbalance_ratio: float, fraction: float = 0.25) -> np.ndarray:
    """Class ids the long tail plans smallest: the ``fraction`` of classes with the largest
    tail rank (class ``c`` keeps ``n_max * IR^(-tail_ranks[c]/(C-1))`` private rows).

    A function of the tail's ranks alone, not of the private counts: minority-class accuracy
    is published beside ε, and a set chosen from the exact counts (their order, their ties
    where the floor or the dataset's own sizes equalize them) would let that figure depend on
    the private data without an accounted release. Where a dataset's own classes are so uneven
    that a planned class cannot keep its share (the tail is clipped at the rows a class has),
    the smallest private class may lie outside the set; the split summary's counts (owner-only)
    show it.

    Args:
        tail_ranks: ``(C,)`` a permutation of ``0..C-1``: each class's place in the tail.
        imbalance_ratio: the split's ratio (``SplitSpec.imbalance_ratio``). At ``<= 1`` the
            private part keeps the dataset's own, near-equal class sizes, so no class is a
            minority: the result is empty (and minority-class accuracy undefined), rather than
            an arbitrary quarter of near-equal classes.
        fraction: share of the classes that are minorities when imbalanced.

    Returns:
        Sorted int64 class ids; at least one when ``imbalance_ratio > 1``.
    """
    if float(imbalance_ratio) <= 1.0:
        return np.zeros(0, dtype=np.int64)
    ranks = np.asarray(tail_ranks, dtype=np.int64)
    C = len(ranks)
    if C == 0 or not np.array_equal(np.sort(ranks), np.arange(C)):
        raise ValueError(f"tail_ranks: must be a permutation of 0..{C - 1}")
    k = max(1, int(np.floor(fraction * C)))
    return np.sort(np.argsort(-ranks, kind="stable")[:k]).astype(np.int64)


def tail_ranks(seed: int, n_classes: int) -> np.ndarray:
    """Each class's place in the long tail of split ``seed``: a permutation of ``0..C-1`` from a
    generator of its own, keyed by ``[seed, 0x7A11]``.

    A function of the seed and ``C`` alone, so the planned minority classes
    (:func:`minority_classes`) are the same on every data set with these classes (a
    neighbouring one, another public share, another domain). Drawn from the split's shared
    generator after the public rows, as before 2026-11-30, the order depended on the class sizes
    through numpy's rejection of bounded draws (probability about size / 2³² each).
    """
    return np.random.default_rng([int(seed), 0x7A11]).permutation(int(n_classes))


def _take_public(y: np.ndarray, k: int, C: int, rng: np.random.Generator, where: str) -> np.ndarray:
    idx = []
    for c in range(C):
        members = np.flatnonzero(y == c)
        if members.size == 0:
            raise DataError(f"{where}: class {c} has no samples; every class needs at least {k}")
        if members.size < k:
            raise DataError(
                f"{where}: class {c} has {members.size} samples, fewer than "
                f"public_per_class={k}", field="public_per_class"
            )
        idx.append(rng.choice(members, size=k, replace=False))
    return np.sort(np.concatenate(idx))


def make_split(
    features: FeatureSet,
    spec: SplitSpec = SplitSpec(),
    *,
    public_features: FeatureSet | None = None,
) -> Split:
    """Split ``features`` into public / private / test as described in the module docstring.

    Args:
        features: the target task's features (private + test come from here).
        spec: split parameters.
        public_features: features of ``spec.public_from`` (required iff it is set); must have
            the same class names in the same order.

    Returns:
        The :class:`Split`. Features are copied as float32.

    Raises:
        DataError: a class has no (or too few) samples, or the public domain's label set
            differs.
        ConfigError: ``public_from`` set without ``public_features`` or vice versa.
    """
    C = features.n_classes
    k = spec.public_per_class
    rng = np.random.default_rng([spec.seed, 0x5EED])
    y = np.asarray(features.y_train)

    if spec.public_from is not None:
        if public_features is None:
            raise ConfigError("public_from", f"features for {spec.public_from!r} were not provided")
        if list(public_features.class_names) != list(features.class_names):
            raise DataError(
                f"public_from: {spec.public_from!r} has classes {public_features.class_names}, "
                f"but the private dataset has {features.class_names}; they must be equal"
            )
        pub_idx = _take_public(np.asarray(public_features.y_train), k, C, rng, "public_from")
        X_pub = public_features.X_train[pub_idx]
        y_pub = public_features.y_train[pub_idx]
        remaining = np.arange(len(y))
    else:
        if public_features is not None:
            raise ConfigError("public_from", "public_features given but spec.public_from is None")
        pub_idx = _take_public(y, k, C, rng, "y_train")
        X_pub, y_pub = features.X_train[pub_idx], y[pub_idx]
        mask = np.ones(len(y), dtype=bool)
        mask[pub_idx] = False
        remaining = np.flatnonzero(mask)

    # Long tail of the private part: class at rank r keeps n_max * IR^(-r/(C-1)).
    y_rem = y[remaining]
    counts = np.bincount(y_rem, minlength=C)
    if np.any(counts == 0):
        empty = int(np.flatnonzero(counts == 0)[0])
        raise DataError(
            f"y_train: class {empty} ({features.class_names[empty]!r}) has no private samples "
            f"left after taking {k} public samples per class"
        )
    minority = np.zeros(0, dtype=np.int64)
    if spec.imbalance_ratio > 1:
        n_max = int(counts.max())
        ranks = tail_ranks(spec.seed, C)  # class ranks[c]-th in the tail: the seed's plan alone
        minority = minority_classes(ranks, spec.imbalance_ratio)  # the seed's plan, not the counts
        keep_n = np.floor(n_max * spec.imbalance_ratio ** (-ranks / max(C - 1, 1))).astype(int)
        keep_n = np.clip(keep_n, 1, counts)
        realized = float(keep_n.max()) / float(max(keep_n.min(), 1))
        if realized < 0.8 * spec.imbalance_ratio:
            # one row per class is the floor: 100 and 1000 asked on 55-row classes gave the same
            # split under labels ten times apart (the summary's realized_imbalance_ratio says it too)
            warnings.warn(f"imbalance_ratio: asked {spec.imbalance_ratio:g}, the split realizes {realized:.3g} "
                          f"(largest / smallest private class; every class keeps at least one row)")
        kept = []
        for c in range(C):
            members = remaining[y_rem == c]
            kept.append(rng.choice(members, size=keep_n[c], replace=False))
        priv_idx = np.sort(np.concatenate(kept))
    else:
        priv_idx = remaining
    if spec.private_per_class is not None:  # own stream: splits without a cap are unchanged
        cap_rng = np.random.default_rng([spec.seed, 0xCA9])
        y_p = y[priv_idx]
        kept = [cap_rng.choice(priv_idx[y_p == c], size=min(int(spec.private_per_class), int((y_p == c).sum())),
                               replace=False) for c in range(C)]
        priv_idx = np.sort(np.concatenate(kept))
    y_priv = y[priv_idx]
    private_counts = np.bincount(y_priv, minlength=C)
    return Split(
        X_public=np.ascontiguousarray(X_pub, dtype=np.float32),
        y_public=np.asarray(y_pub, dtype=np.int64),
        X_private=np.ascontiguousarray(features.X_train[priv_idx], dtype=np.float32),
        y_private=np.asarray(y_priv, dtype=np.int64),
        X_test=np.ascontiguousarray(features.X_test, dtype=np.float32),
        y_test=np.asarray(features.y_test, dtype=np.int64),
        class_names=list(features.class_names),
        minority_classes=minority,
        private_counts=private_counts,
        text_embeddings=features.text_embeddings,
        spec=spec,
        meta=dict(features.meta),
    )
