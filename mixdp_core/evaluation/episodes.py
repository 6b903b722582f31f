"""N-way K-shot episodes: the CD-FSL evaluation protocol for any registered method.

The cross-domain few-shot protocol (Guo et al., ECCV 2020; used by Luo et al., CVPR 2021,
Table 2: 5-way, 5 / 20 / 50 shots, 60 episodes, 15 query images per class) evaluates a
method on many small tasks instead of one split:

* :func:`sample_episodes` draws the episodes: each picks ``n_way`` classes among those with at
  least ``k_shot + n_query`` samples, then exactly ``k_shot`` *support* and ``n_query``
  *query* samples of each, support and query disjoint. It returns index arrays into the
  labels it was given. The draw is a seeded :class:`numpy.random.Generator`: this is the
  sampling of *evaluation* tasks, not privacy noise (no privacy guarantee rests on it), so a
  reproducible generator is the right tool — the same seed gives the same episodes.
* :func:`episode_split` turns one episode into a :class:`~mixdp_core.data.splits.Split`: the
  support set is the **private** data, the query set the test data, and the public data are
  the given public rows of the episode's classes; labels are renumbered ``0..n_way-1`` in the
  order of :attr:`Episode.classes`.
* :func:`run_episodes` fits a fresh method on every episode (its (ε, δ) target protects the
  support set of that one fit) and reports the query accuracy of each;
  :func:`mean_ci95` aggregates them: mean and the 95 % interval half-width ``t · s / √n``
  (Student's t, sample std; the CD-FSL code's ``1.96 · std / √n`` with the population std is
  the same over its 600 episodes, too narrow over a few).

Units: accuracies are fractions in [0, 1]; ε, δ are those of (ε, δ)-DP per fit. Each episode
is an independent training on its own support set; a sample drawn into the supports of
several episodes is covered by each fit's ε separately (the protocol measures utility, it
is not one release).
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from ..config import EPISODE_LIMITS
from ..errors import ConfigError, DataError

#: The paper's protocol (Luo et al. 2021, Sec. 5.2 / Table 2; Guo et al. 2020).
N_WAY, SHOTS, N_QUERY, N_EPISODES = 5, (5, 20, 50), 15, 60


class Episode(NamedTuple):
    """One N-way K-shot task, as indices into the labels it was drawn from.

    Attributes:
        classes: ``(n_way,)`` the episode's classes (original labels), in the order that
            defines the episode labels ``0..n_way-1``.
        support: ``(n_way * k_shot,)`` indices, ``k_shot`` per class, class by class.
        query: ``(n_way * n_query,)`` indices, ``n_query`` per class, disjoint from ``support``.
    """

    classes: np.ndarray
    support: np.ndarray
    query: np.ndarray


def _count(name: str, value: Any, low: int) -> int:
    high = EPISODE_LIMITS[name]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ConfigError(name, f"must be an integer in [{low}, {high:,}], got {value!r}")
    return int(value)


def sample_episodes(y: Sequence[int] | np.ndarray, n_way: int, k_shot: int, n_query: int, n_episodes: int,
                    seed: int = 0) -> list[Episode]:
    """Draw ``n_episodes`` class-balanced N-way K-shot episodes from labels ``y``.

    Each episode chooses ``n_way`` distinct classes uniformly among the classes with at
    least ``k_shot + n_query`` samples, then for each class ``k_shot + n_query`` distinct
    samples uniformly: the first ``k_shot`` are support, the rest query. Deterministic for
    a given ``(y, n_way, k_shot, n_query, n_episodes, seed)``: a seeded NumPy generator
    (evaluation sampling, not privacy noise).

    Args:
        y: ``(N,)`` integer class labels.
        n_way: classes per episode (>= 2).
        k_shot: support samples per class (>= 1).
        n_query: query samples per class (>= 1).
        n_episodes: number of episodes (>= 1).
        seed: seed of the draw (integer >= 0).

    Returns:
        The episodes; indices are into ``y``.

    Raises:
        ConfigError: a count is not an integer in range (naming it).
        DataError: fewer than ``n_way`` classes have ``k_shot + n_query`` samples (the
            message gives how many do and the largest class size).
    """
    n_way, k_shot = _count("n_way", n_way, 2), _count("k_shot", k_shot, 1)
    n_query, n_episodes = _count("n_query", n_query, 1), _count("n_episodes", n_episodes, 1)
    seed = _count("seed", seed, 0)
    y = np.asarray(y)
    if y.ndim != 1 or y.size == 0:
        raise DataError(f"y: expected a non-empty 1-D array of labels, got shape {y.shape}")
    classes, counts = np.unique(y, return_counts=True)
    need = k_shot + n_query
    eligible = classes[counts >= need]
    if eligible.size < n_way:
        raise DataError(f"y: {n_way}-way {k_shot}-shot episodes with {n_query} query samples need {n_way} classes "
                        f"with at least {need} samples each; {eligible.size} of {classes.size} classes have that "
                        f"many (largest class: {int(counts.max())} samples)")
    members = {c: np.flatnonzero(y == c) for c in eligible.tolist()}
    rng = np.random.default_rng([seed, 0xE915])
    out = []
    for _ in range(n_episodes):
        chosen = rng.choice(eligible, size=n_way, replace=False)
        picks = [rng.choice(members[c], size=need, replace=False) for c in chosen.tolist()]
        out.append(Episode(classes=np.asarray(chosen),
                           support=np.concatenate([p[:k_shot] for p in picks]).astype(np.int64),
                           query=np.concatenate([p[k_shot:] for p in picks]).astype(np.int64)))
    return out


def mean_ci95(accuracies: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """``(mean, half-width)`` of the 95 % interval of the mean over episodes:
    ``t · s / √n`` with the sample std ``s`` (``ddof = 1``) and ``t`` the two-sided 95 %
    quantile of Student's t with ``n − 1`` degrees of freedom. The CD-FSL convention,
    ``1.96 · std(ddof = 0) / √n``, is the same from a few hundred episodes on (the protocol's
    600) but 9× too narrow at 2 episodes; at 60 it is 3 % narrower. One episode has no
    spread: its half-width is ``nan`` (shown as "—").

    Raises:
        DataError: no accuracy given, or one that is not finite.
    """
    from scipy.stats import t

    a = np.asarray(accuracies, dtype=float).ravel()
    if a.size == 0 or not np.all(np.isfinite(a)):
        raise DataError("accuracies: need at least one finite value")
    if a.size == 1:
        return float(a[0]), float("nan")
    return float(a.mean()), float(t.ppf(0.975, a.size - 1) * a.std(ddof=1) / math.sqrt(a.size))


def episode_split(X: np.ndarray, y: np.ndarray, episode: Episode, *,
                  public: tuple[np.ndarray, np.ndarray] | None = None, class_names: Sequence[str] | None = None,
                  text_embeddings: np.ndarray | None = None, meta: dict[str, Any] | None = None) -> Any:
    """The :class:`~mixdp_core.data.splits.Split` of one episode.

    Args:
        X, y: the rows the episode indexes (``(N, D)`` features, ``(N,)`` labels).
        episode: from :func:`sample_episodes` on ``y``.
        public: ``(X_pub, y_pub)`` public rows labelled in the same label space as ``y``;
            the rows of the episode's classes become the split's public data (none if
            ``None``).
        class_names: names of the original labels (``class_names[c]``), default ``str(c)``.
        text_embeddings: ``(C, D)`` per original class (CLIP), sliced to the episode.
        meta: provenance copied into the split.

    Returns:
        Support = private, query = test, labels ``0..n_way-1`` in ``episode.classes`` order;
        ``meta["episode_classes"]`` gives the original labels (``split.spec`` is the default
        :class:`~mixdp_core.data.splits.SplitSpec`: no split spec made this split).
    """
    from ..data.splits import Split

    cls = np.asarray(episode.classes)
    relabel = {int(c): j for j, c in enumerate(cls.tolist())}

    def lab(v: np.ndarray) -> np.ndarray:
        return np.asarray([relabel[int(c)] for c in v], dtype=np.int64)

    X = np.asarray(X)
    y = np.asarray(y)
    if public is not None:
        Xp, yp = np.asarray(public[0]), np.asarray(public[1])
        keep = np.isin(yp, cls)
        X_pub, y_pub = Xp[keep], lab(yp[keep])
    else:
        X_pub, y_pub = np.zeros((0, X.shape[1]), np.float32), np.zeros(0, np.int64)
    y_priv = lab(y[episode.support])
    names = [str(class_names[int(c)]) if class_names is not None else str(c) for c in cls.tolist()]
    return Split(
        X_public=np.ascontiguousarray(X_pub, dtype=np.float32), y_public=y_pub,
        X_private=np.ascontiguousarray(X[episode.support], dtype=np.float32), y_private=y_priv,
        X_test=np.ascontiguousarray(X[episode.query], dtype=np.float32), y_test=lab(y[episode.query]),
        class_names=names, minority_classes=np.zeros(0, np.int64),
        private_counts=np.bincount(y_priv, minlength=len(cls)),
        text_embeddings=None if text_embeddings is None else np.asarray(text_embeddings)[cls],
        meta={**dict(meta or {}), "episode_classes": [int(c) for c in cls.tolist()]})


@dataclass
class EpisodeResult:
    """What :func:`run_episodes` reports.

    Attributes:
        accuracies: ``(n_episodes,)`` query accuracy of each episode, in [0, 1].
        mean, ci95: :func:`mean_ci95` of ``accuracies`` (fractions).
        epsilons: ε of each fit as executed (accounting module), ``None`` for a method
            without a privacy report (non-private references).
        seconds: wall time of each fit.
    """

    accuracies: np.ndarray
    mean: float
    ci95: float
    epsilons: list[float | None]
    seconds: list[float]


def run_episodes(method_factory: Callable[..., Any], features: np.ndarray, labels: np.ndarray, *,
                 epsilon: float, delta: float = 1e-5, n_way: int = N_WAY, k_shot: int = SHOTS[0],
                 n_query: int = N_QUERY, n_episodes: int = N_EPISODES, seed: int = 0,
                 public: tuple[np.ndarray, np.ndarray] | None = None, public_pool: np.ndarray | None = None,
                 class_names: Sequence[str] | None = None, text_embeddings: np.ndarray | None = None,
                 meta: dict[str, Any] | None = None,
                 episodes: Sequence[Episode] | None = None) -> EpisodeResult:
    """Fit a fresh method on each episode's support set (the private data) and score its query set.

    Args:
        method_factory: called as ``method_factory(target_epsilon=ε, target_delta=δ, seed=s)``
            for every episode (``s = seed + episode index``); returns an unfitted
            :class:`~mixdp_core.methods.Method` (e.g. ``functools.partial(make_method, "adamix")``).
        features, labels: ``(N, D)`` rows and ``(N,)`` labels the episodes are drawn from
            (none of them public).
        epsilon, delta: the (ε, δ)-DP target of every fit (protecting that fit's support set).
        n_way, k_shot, n_query, n_episodes, seed: the protocol (:func:`sample_episodes`).
        public: ``(X_pub, y_pub)`` labelled public rows in the label space of ``labels``
            (e.g. another domain with the same classes); each episode gets those of its
            classes. ``None``: no labelled public data.
        public_pool: unlabelled public rows for methods whose ``fit`` takes ``public_pool``
            (DPPL-Public); default: the episode's public rows.
        class_names, text_embeddings, meta: passed to :func:`episode_split`.
        episodes: episodes to use instead of drawing them (e.g. the same ones for several
            methods); must index ``labels``.

    Returns:
        The per-episode accuracies and their mean ± 95 % interval.

    Raises:
        DataError / ConfigError: from the sampler or from a method that cannot fit (e.g.
            one that needs public rows when there are none, or a budget no run can meet).
    """
    eps = episodes if episodes is not None else sample_episodes(labels, n_way, k_shot, n_query, n_episodes, seed)
    acc, spent, secs = [], [], []
    for i, ep in enumerate(eps):
        split = episode_split(features, labels, ep, public=public, class_names=class_names,
                              text_embeddings=text_embeddings, meta=meta)
        method = method_factory(target_epsilon=float(epsilon), target_delta=float(delta), seed=int(seed) + i)
        kw = {}
        if "public_pool" in inspect.signature(method.fit).parameters:
            kw["public_pool"] = public_pool if public_pool is not None else split.X_public
        t0 = time.perf_counter()
        method.fit(split, **kw)
        if hasattr(method, "verify_privacy"):
            method.verify_privacy()  # releases fit the plan and privacy_ is the ledger's (as the runner checks)
        secs.append(time.perf_counter() - t0)
        acc.append(float(np.mean(np.asarray(method.predict(split.X_test)) == split.y_test)))
        pr = getattr(method, "privacy_", None)
        spent.append(None if pr is None else float(pr.epsilon))
    a = np.asarray(acc, dtype=float)
    m, h = mean_ci95(a)
    return EpisodeResult(accuracies=a, mean=m, ci95=h, epsilons=spent, seconds=secs)
