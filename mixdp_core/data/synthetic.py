"""``synthetic``: features with controllable classes, dimension, counts, spectrum and separation.

A regime family the product can dial without downloading anything: many classes (≥ 100),
any dimension, few or many samples per class, a covariance of chosen effective rank and a
chosen class separation, a shared mean, ambiguous rows and a public → private domain shift
(imbalance and the public/private counts come from the split's own options). Deterministic
from its arguments (the same arguments give the same arrays on every machine), so a regime is
named by its options.

Generative model (every quantity below is a loader option)::

    Q        a random orthogonal basis of R^D (fixed by ``data_seed``)
    λ_j    = 1 / (1 + j / r),  j = 0..D−1, rescaled so that Σ λ_j = D     (covariance spectrum)
    μ_c    = separation · Q diag(√λ) g_c,  g_c ~ N(0, I_D / D)           (class means, c = 0..C−1)
    x      = μ_s + Q diag(√λ) z + m,  z ~ N(0, I_D)                       (one sample of class y)
    s      = y, or with probability ``ambiguity`` another class (label kept: irreducible error)
    m      = ``shared_mean`` · √D · |h|/‖h‖,  h ~ N(0, I_D)                  (mean shared by all classes)
    μ'_c   = μ_c + ``shift`` · separation · Q diag(√λ) g'_c,  g'_c ~ N(0, I_D / D)
                                                          (class means of the public domain)

``r`` (``effective_rank``) sets how fast the spectrum decays: its participation ratio
``(Σλ)² / Σλ²`` grows with ``r`` (about ``r·ln²(D/r)`` for ``r ≪ D``: ``Σλ ≈ r ln(D/r)`` and
``Σλ² ≈ r`` before the rescaling; 485 at D = 4096, r = 16) and reaches ``D`` for a flat spectrum
as ``r → ∞``. ``effective_rank`` is therefore the decay's knee, not the participation ratio. ``separation`` scales the class means against the within-class
noise along the same directions, so it sets the Bayes error for a given C and D; means and
noise share the spectrum, as in pretrained-encoder features where both live in the same
leading directions. ``shared_mean`` adds a nonnegative mean common to every class, as
post-ReLU encoder features have: after the head's row normalization the class signal is a
smaller share of each row, so a clipped private gradient carries less of it (privacy costs
more) while the nearest-mean geometry that few public shots exploit is unchanged.
``ambiguity`` draws that fraction of rows around another class's mean with their own label
kept — an error no amount of data removes (paragon's floor), as fine-grained photos have.

**Domain shift.** ``domain="public"`` draws the *train* rows of the same regime's public
domain: every class mean moves by an independent displacement with the law of a class mean
itself, scaled by ``shift`` (so ``shift`` is in units of the class means' own spread: at 1 a
public class mean lies about as far from its private mean as from the origin of the class
means; the within-class noise, the shared mean and the ambiguity are unchanged). Its rows come
from their own noise streams, so no public row repeats a private one, even at ``shift = 0``
(an independent public pool). A run uses it with ``dataset="synthetic"`` and
``public_from="synthetic"`` (:func:`mixdp_core.data.datasets.public_source`): the public rows are
then the public domain's of the same options, the private and test rows the private domain's
(``shift`` does not change those). This is the few-shot picture of a public set photographed
elsewhere (PACS photo → art): nearest public means are biased, private rows can correct them.

Train rows are class-major (``train_per_class`` per class), test rows likewise; the split
(public / private / test, imbalance) is made by :mod:`mixdp_core.data.splits` as for any set.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ConfigError

#: Options of ``synthetic`` and their ranges (checked by :func:`synthetic_features`); the
#: caps keep every array below 512 MiB (the feature-file limit).
SYNTHETIC_LIMITS = {
    "classes": (2, 1000),
    "dim": (2, 4096),
    "train_per_class": (2, 5000),
    "test_per_class": (1, 1000),
}
MAX_SYNTHETIC_VALUES = 128 * 2**20  # float32 values in train + test (512 MiB)
#: Rows × classes of train + test: every method and the evaluation hold a rows × classes score
#: matrix (float64, a few at once), which the feature cap does not bound: 1,000 classes × 6,000
#: rows per class at D = 2 passed it and failed allocating 3.7 GiB after the data were drawn.
#: 50 M is 400 MiB per float64 copy; the family's largest regimes hold about 21 M.
MAX_SYNTHETIC_SCORES = 50_000_000
#: Values per block of rows while drawing (float64 temporaries of 16 MiB each).
ROW_BLOCK_VALUES = 2 * 2**20
#: ``domain`` choices: the private domain (train / test rows of a run) or the public one.
DOMAINS = ("private", "public")


def _check_int(name: str, v: int, lo: int, hi: int) -> int:
    try:
        ok = not isinstance(v, bool) and float(v).is_integer() and lo <= int(v) <= hi
    except (TypeError, ValueError, OverflowError):  # None, a string, inf
        ok = False
    if not ok:
        raise ConfigError(name, f"must be an integer in [{lo}, {hi}], got {v!r}")
    return int(v)


def _check_float(name: str, v: float, lo: float, hi: float) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ConfigError(name, f"must be a number in [{lo:g}, {hi:g}], got {v!r}") from None
    if not (np.isfinite(f) and lo <= f <= hi):
        raise ConfigError(name, f"must be a number in [{lo:g}, {hi:g}], got {v!r}")
    return f


def spectrum(dim: int, effective_rank: float) -> np.ndarray:
    """``λ_j = 1/(1 + j/r)`` rescaled to sum to ``dim`` (module docstring)."""
    lam = 1.0 / (1.0 + np.arange(dim) / float(effective_rank))
    return lam * (dim / lam.sum())


def participation_ratio(lam: np.ndarray) -> float:
    """``(Σλ)² / Σλ²``: the number of directions a spectrum effectively spans."""
    lam = np.asarray(lam, dtype=np.float64)
    return float(lam.sum() ** 2 / np.square(lam).sum())


def check_shift(shift: Any) -> float:
    """``shift`` as a float in [0, 10] (public → private class-mean shift, in units of the
    separation's scale); the private domain ignores it, but its loader checks it too.

    Raises:
        ConfigError: field ``shift``, out of range or not a number."""
    return _check_float("shift", shift, 0.0, 10.0)


def synthetic_features(*, classes: int = 10, dim: int = 64, train_per_class: int = 200, test_per_class: int = 50,
                       effective_rank: float = 16.0, separation: float = 1.0, data_seed: int = 0,
                       shared_mean: float = 0.0, ambiguity: float = 0.0, shift: float = 0.0,
                       domain: str = "private",
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(X_train, y_train, X_test, y_test)`` of the model in the module docstring.

    ``domain="public"`` gives the public domain's rows (shifted class means, own streams);
    ``"private"`` (default) ignores ``shift``: the private domain is the same for every shift.

    Raises:
        ConfigError: an option out of its range (the message names it).
    """
    C = _check_int("classes", classes, *SYNTHETIC_LIMITS["classes"])
    D = _check_int("dim", dim, *SYNTHETIC_LIMITS["dim"])
    n_tr = _check_int("train_per_class", train_per_class, *SYNTHETIC_LIMITS["train_per_class"])
    n_te = _check_int("test_per_class", test_per_class, *SYNTHETIC_LIMITS["test_per_class"])
    r = _check_float("effective_rank", effective_rank, 0.5, 1e6)
    sep = _check_float("separation", separation, 0.0, 100.0)
    seed = _check_int("data_seed", data_seed, 0, 2**32 - 1)
    offset = _check_float("shared_mean", shared_mean, 0.0, 100.0)
    amb = _check_float("ambiguity", ambiguity, 0.0, 0.5)
    sh = check_shift(shift)
    if domain not in DOMAINS:
        raise ConfigError("domain", f"must be one of {', '.join(DOMAINS)}, got {domain!r}")
    if C * (n_tr + n_te) * D > MAX_SYNTHETIC_VALUES:
        raise ConfigError("dim", f"classes x (train + test per class) x dim = {C * (n_tr + n_te) * D:,} values; at most "
                                 f"{MAX_SYNTHETIC_VALUES:,} (512 MiB): lower one of them")
    if C * (n_tr + n_te) * C > MAX_SYNTHETIC_SCORES:
        raise ConfigError("classes", f"classes x (train + test per class) x classes = {C * (n_tr + n_te) * C:,} "
                                     f"scores; at most {MAX_SYNTHETIC_SCORES:,} (each method holds a rows x classes "
                                     "matrix): lower classes or the rows per class")
    rng = np.random.default_rng([seed, 0x5E7])
    Q, _ = np.linalg.qr(rng.standard_normal((D, D)))
    scale = np.sqrt(spectrum(D, r))
    A = Q * scale[None, :]  # x = A z has covariance Q diag(λ) Qᵀ
    # g_c ~ N(0, I/D): two class means lie ≈ separation·√2 apart in the noise's own (whitened)
    # metric, whatever D, so separation sets the difficulty independently of the dimension
    means = sep * (rng.standard_normal((C, D)) / np.sqrt(D)) @ A.T

    # A nonnegative mean shared by every class (pretrained features are post-ReLU averages):
    # after the head's row normalization it shrinks the class signal's share of each row, and so
    # the signal a clipped private gradient can carry. Its own stream: the rest is unchanged.
    common = np.abs(np.random.default_rng([seed, 0x5E8]).standard_normal(D))
    common *= offset * np.sqrt(D) / max(float(np.linalg.norm(common)), 1e-12)
    public = domain == "public"
    if public:  # own stream: the private domain's means and rows are unchanged by any shift
        means = means + sh * sep * (np.random.default_rng([seed, 0x5E9]).standard_normal((C, D)) / np.sqrt(D)) @ A.T

    def draw(n: int, stream: int) -> tuple[np.ndarray, np.ndarray]:
        g = np.random.default_rng([seed, stream])
        y = np.repeat(np.arange(C), n)
        src = y
        if amb > 0:  # ambiguous rows: drawn around another class's mean, label kept (own stream)
            ga = np.random.default_rng([seed, stream, 0xA3B])
            flip = ga.random(C * n) < amb
            src = np.where(flip, (y + ga.integers(1, C, C * n)) % C, y)
        # In blocks of rows into the float32 result: the float64 temporaries stay at one block's
        # size (ROW_BLOCK_VALUES), not several copies of the whole matrix (3.4 GB at the cap). The
        # generator yields the same normals in blocks as in one call, row by row.
        X = np.empty((C * n, D), dtype=np.float32)
        step = max(1, ROW_BLOCK_VALUES // D)
        for i in range(0, C * n, step):
            j = min(C * n, i + step)
            X[i:j] = means[src[i:j]] + g.standard_normal((j - i, D)) @ A.T + common
        return X, y.astype(np.int64)

    # the public domain's rows use streams 3 / 4: never a copy of a private row's noise
    X_tr, y_tr = draw(n_tr, 3 if public else 1)
    X_te, y_te = draw(n_te, 4 if public else 2)
    return X_tr, y_tr, X_te, y_te
