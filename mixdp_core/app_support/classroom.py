"""Classroom mode: what ε means, in five steps on offline data: digits · pixels, or a synthetic
many-class regime the teacher dials (:class:`Lesson`: classes, rows per class, class imbalance).

Everything a lesson draws comes from here (the page only reads the ε slider and draws):

1. :func:`noisy_class_means` — the noise the Gaussian mechanism adds at this ε, shown on the
   average image of each class (a noisy sum of images clipped to norm 1 and a noisy count,
   both sensitivity 1 under add/remove, both accounted);
2. :func:`lesson_run` ``("adamix" / "paragon")`` — the accuracy lost;
3. the best possible attack: :func:`mixdp_core.accounting.max_tpr` of the run's report;
4. the per-sample privacy loss: the run's per-instance ε (pDP);
5. :func:`lesson_run` ``("fully_private")`` vs ``("adamix")`` — what a few public samples change.

Every ε shown is computed by the accounting module (calibration, run reports).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..config import Interval, param, validate

#: The lesson's ε grid (precomputed trainings; the slider moves along it).
LESSON_EPSILONS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
LESSON_DELTA = 1e-5
LESSON_DATASET, LESSON_ENCODER = "digits", "pixels"
#: The data a lesson can run on: ``{name: (dataset, encoder, loader options)}``. "digits" is the
#: default (8x8 images: step 1 draws them); "many classes" is a synthetic many-class few-shot
#: regime (the regime users meet: :mod:`mixdp_core.data.synthetic`), where step 1 shows the
#: noise as distances instead of images.
LESSON_DATA: dict[str, tuple[str, str, dict[str, Any]]] = {
    "digits": ("digits", "pixels", {}),
    "many classes (synthetic)": ("synthetic", "pixels", {"classes": 100, "dim": 64, "train_per_class": 40,
                                                        "test_per_class": 20, "separation": 4.0}),
}
DEFAULT_LESSON = "digits"
#: Former names of :data:`LESSON_DATA` keys (links shared before the rename still open them).
LESSON_ALIASES = {"100 classes (synthetic)": "many classes (synthetic)"}


@dataclass(frozen=True)
class Lesson:
    """The data a lesson runs on: one of :data:`LESSON_DATA` and the dials a teacher turns.

    Every field declares its range once (the classroom page draws its dials from them,
    :func:`mixdp_core.config.describe`); a bad value raises a one-line ``ConfigError`` naming
    the field. The synthetic lesson's ``classes`` and ``train_per_class`` bound its size
    (at most 200 × 200 rows); on digits they do not apply and are reset to their defaults, so
    two digits lessons that differ only there are the same lesson (one cache).
    """

    data: str = param(DEFAULT_LESSON, choices=tuple(LESSON_DATA), help="the lesson's data")
    imbalance_ratio: float = param(
        1.0, type=float, range=Interval(1, 100),
        help="long tail of the private part: the largest class has this many times the rows of the smallest "
             "(1 = balanced). The quarter of the classes the seed puts last in the tail, the smallest, are the "
             "minority classes.")
    classes: int = param(100, type=int, range=Interval(10, 200),
                         help="synthetic lesson: number of classes (the regimes users meet have ≥ 100)")
    train_per_class: int = param(40, type=int, range=Interval(10, 200),
                                 help="synthetic lesson: training rows per class (5 public, the rest private)")

    def __post_init__(self) -> None:
        validate(self)
        if LESSON_DATA[self.data][0] != "synthetic":
            for f in dataclasses.fields(self):
                if f.name in ("classes", "train_per_class"):
                    object.__setattr__(self, f.name, f.default)

    @property
    def synthetic(self) -> bool:
        return LESSON_DATA[self.data][0] == "synthetic"

    def source(self) -> tuple[str, str, dict[str, Any]]:
        """``(dataset, encoder, loader options)`` of this lesson."""
        dataset, encoder, kw = LESSON_DATA[self.data]
        if self.synthetic:
            kw = {**kw, "classes": self.classes, "train_per_class": self.train_per_class}
        return dataset, encoder, dict(kw)

    def describe(self) -> str:
        """One sentence for the page."""
        if self.synthetic:
            text = f"{self.classes} classes, {self.train_per_class} training rows each, 64 features (synthetic, offline)"
        else:
            text = "Handwritten digits (8×8 pixels, offline)"
        if self.imbalance_ratio > 1:
            text += (f"; the private rows are long-tailed, the largest class {self.imbalance_ratio:g}× the smallest "
                     "(the quarter of the classes at the tail's end are the minority)")
        return text + "."


def as_lesson(lesson: "str | Lesson") -> Lesson:
    """A :class:`Lesson` from a lesson or the name of one of :data:`LESSON_DATA`."""
    if isinstance(lesson, Lesson):
        return lesson
    from ..errors import ConfigError

    lesson = LESSON_ALIASES.get(lesson, lesson)
    if lesson not in LESSON_DATA:
        raise ConfigError("lesson", f"must be one of {', '.join(LESSON_DATA)}, got {lesson!r}",
                          allowed=f"one of {', '.join(LESSON_DATA)}", got=lesson, choices=tuple(LESSON_DATA))
    return Lesson(data=lesson)


def _lesson_features(lesson: "str | Lesson", cache_dir: Any) -> Any:
    from ..features.cache import get_features

    dataset, encoder, kw = as_lesson(lesson).source()
    return get_features(dataset, encoder, cache_dir=cache_dir, **kw)


def _lesson_split(lesson: "str | Lesson", cache_dir: Any, *, public_per_class: int = 5, seed: int = 0) -> Any:
    """The lesson's split: ``public_per_class`` public rows per class, the private part
    long-tailed by the lesson's imbalance ratio."""
    from ..data.splits import SplitSpec, make_split

    les = as_lesson(lesson)
    return make_split(_lesson_features(les, cache_dir),
                      SplitSpec(public_per_class=int(public_per_class), imbalance_ratio=float(les.imbalance_ratio),
                                seed=int(seed)))


def noise_multiplier(epsilon: float, *, steps: int = 1, delta: float = LESSON_DELTA) -> float:
    """σ of ``steps`` Gaussian releases that together are (ε, δ)-DP (accounting module)."""
    from ..accounting import calibrate_noise

    return float(calibrate_noise(steps=int(steps), target_epsilon=float(epsilon), target_delta=float(delta)))


#: Releases per class in the lesson's mechanism: the noisy sum and the noisy count.
CLASS_MEAN_RELEASES = 2
#: What the lesson's first step releases, in words (shown on the page).
CLASS_MEAN_MECHANISM = (
    "Neighbouring data sets: add or remove one image. Each image is clipped to norm 1; per class the "
    "mechanism releases the sum of the clipped images (L2 sensitivity 1) and the number of images "
    "(sensitivity 1), each with Gaussian noise of std σ, σ calibrated by the accounting module so that "
    "the two releases together are (ε, δ)-DP; the classes hold disjoint images, so they compose in "
    "parallel. The noisy average image is noisy sum ÷ noisy count (post-processing). The exact count "
    "is never used: dividing by it would make the sensitivity 1/n, which is not the sensitivity under "
    "add/remove (n itself changes).")


def noisy_class_means(epsilon: float, *, delta: float = LESSON_DELTA, seed: int = 0,
                      cache_dir: Any = None, noise: str = "secure", lesson: "str | Lesson" = DEFAULT_LESSON) -> dict[str, Any]:
    """Average image of each class of the lesson's *private* rows, in the clear and released at (ε, δ).

    Mechanism (:data:`CLASS_MEAN_MECHANISM`), add/remove one image: per class ``c``,
    ``S̃_c = Σ_{i∈c} clip(x_i) + N(0, σ² I)`` (L2 sensitivity 1, rows clipped to norm 1) and
    ``ñ_c = n_c + N(0, σ²)`` (sensitivity 1), σ from
    :func:`mixdp_core.accounting.calibrate_noise` for two unit-sensitivity Gaussian releases
    (μ = √2/σ GDP); classes are disjoint, so parallel composition keeps (ε, δ). The image
    shown is ``S̃_c / max(ñ_c, 1)``: the same noise on a smaller class moves its average
    further, which a long-tailed lesson (``imbalance_ratio > 1``) shows on its minority classes.

    Returns ``{"class_names", "clean" (C, H, W), "noisy" (C, H, W), "sigma", "noise_std",
    "counts", "noisy_counts", "minority", "mechanism", "error_norm", "mean_distance"}``;
    ``noise_std`` is the typical per-pixel std of the noisy mean, ``σ / n_c`` averaged over the
    classes (a teaching aid computed from the exact counts: owner's view); ``counts`` are the
    exact private counts (owner's view too); ``minority`` flags the minority classes (empty
    when balanced); ``error_norm`` (per class, ‖published − true average‖) and
    ``mean_distance`` (the median distance between two true class averages) let a lesson
    without images compare the noise with what separates the classes. ``clean`` / ``noisy``
    are ``(C, D)`` rows when D is not a square (no images).
    """
    from ..randomness import noise_rng

    les = as_lesson(lesson)
    split = _lesson_split(les, cache_dir)
    X = np.asarray(split.X_private, dtype=np.float64)
    X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)  # clip to norm 1
    y = np.asarray(split.y_private)
    C = split.n_classes
    s = int(round(np.sqrt(X.shape[1])))
    images = not les.synthetic and s * s == X.shape[1]  # synthetic rows are not images
    shape = (s, s) if images else (X.shape[1],)
    sigma = noise_multiplier(epsilon, steps=CLASS_MEAN_RELEASES, delta=delta)
    rng = noise_rng(noise, seed, 0xC1A55)
    clean, noisy, counts, noisy_counts, std = [], [], [], [], []
    for c in range(C):
        Xc = X[y == c]
        n = len(Xc)
        noisy_sum = Xc.sum(axis=0) + rng.normal(0.0, sigma, size=X.shape[1])
        n_tilde = float(np.rint(n + rng.normal(0.0, sigma)))
        clean.append((Xc.mean(axis=0) if n else np.zeros(X.shape[1])).reshape(shape))
        noisy.append((noisy_sum / max(n_tilde, 1.0)).reshape(shape))
        counts.append(n)
        noisy_counts.append(n_tilde)
        std.append(sigma / max(n, 1))
    clean_a, noisy_a = np.stack(clean), np.stack(noisy)
    flat = clean_a.reshape(C, -1)
    d2 = np.sqrt(np.maximum((flat ** 2).sum(1)[:, None] + (flat ** 2).sum(1)[None, :] - 2 * flat @ flat.T, 0.0))
    return {"class_names": [str(n) for n in split.class_names], "clean": clean_a, "noisy": noisy_a,
            "sigma": sigma, "noise_std": float(np.mean(std)), "counts": counts, "noisy_counts": noisy_counts,
            "minority": [int(c) for c in split.minority_classes],
            # feature rows, not images, on a synthetic lesson: the caption names what is clipped and summed
            "mechanism": CLASS_MEAN_MECHANISM if clean_a.ndim == 3
            else CLASS_MEAN_MECHANISM.replace("images", "rows").replace("image", "row"),
            "error_norm": np.linalg.norm((noisy_a - clean_a).reshape(C, -1), axis=1),
            "mean_distance": float(np.median(d2[np.triu_indices(C, 1)]))}


def lesson_run(method: str, epsilon: float, *, public_per_class: int = 5, seed: int = 0,
               delta: float = LESSON_DELTA, cache_dir: Any = None,
               lesson: "str | Lesson" = DEFAULT_LESSON) -> dict[str, Any]:
    """Train ``method`` at ε on the lesson's data with the method's own defaults (up to a few
    seconds) and return what the lesson draws: ``test_error``, ``balanced_accuracy``, ``minority_accuracy`` (``None`` when the
    lesson is balanced), ``report`` (``{"epsilon", "delta", "mu"}`` or ``None`` for a
    non-private method), ``pdp_epsilon`` (per-instance ε or ``None``), ``steps``, ``sigma``.
    Nothing is written to the run store."""
    from ..evaluation import balanced_accuracy, minority_accuracy
    from ..evaluation.pdp import per_instance_epsilon
    from ..runs.runner import RunConfig

    les = as_lesson(lesson)
    dataset, encoder, kw = les.source()
    # The method's own defaults (its σ, schedule and steps), so the lesson shows what a run of the
    # library does at this ε.
    cfg = RunConfig(dataset=dataset, encoder=encoder, method=method, target_epsilon=float(epsilon),
                    target_delta=float(delta), public_per_class=int(public_per_class), seed=int(seed),
                    imbalance_ratio=float(les.imbalance_ratio), dataset_kwargs=dict(kw))
    split = _lesson_split(les, cache_dir, public_per_class=public_per_class, seed=seed)
    model = cfg.make_method()
    model.fit(split)
    model.verify_privacy()  # the ledger's check, as for every run
    pred = model.predict(split.X_test)
    err = float(np.mean(pred != split.y_test))
    p = getattr(model, "privacy_", None)
    report = None if p is None else {"epsilon": float(p.epsilon), "delta": float(p.delta),
                                     "mu": None if p.mu is None else float(p.mu)}
    eps_i = per_instance_epsilon(model, delta=float(delta)) if p is not None else None
    return {"method": method, "epsilon_target": float(epsilon), "test_error": err,
            "balanced_accuracy": float(balanced_accuracy(split.y_test, pred, split.n_classes)),
            "minority_accuracy": (None if len(split.minority_classes) == 0 else
                                  float(minority_accuracy(split.y_test, pred, split.minority_classes))),
            "report": report,
            "pdp_epsilon": None if eps_i is None else np.asarray(eps_i, dtype=float),
            "steps": getattr(model, "steps_", None), "sigma": getattr(model, "noise_multiplier_", None),
            "n_private": int(len(split.y_private)), "n_public": int(len(split.y_public)),
            "n_test": int(len(split.y_test)),
            # None: no guard ran; False: the guard kept the public start (the model is Only-Public's)
            "guard_kept_private": (None if getattr(model, "guard_kept_private_", None) is None
                                   else bool(model.guard_kept_private_))}


def guard_note(run: Mapping[str, Any]) -> str:
    """A sentence for a lesson run whose public-start guard kept the public model: its error is
    then Only-Public's at every such ε, and a class would read a flat curve as 'ε costs
    nothing' (the guard is what made it flat). ``""`` otherwise."""
    if run.get("guard_kept_private") is False:
        return (" At this ε the private phase did not beat the public start by more than its noise, so the "
                "public-start guard released the model trained on the public samples only: this error is "
                "Only-Public's. The private phase was discarded, but its ε is still spent: it ran, and the "
                "guard's decision read the private data.")
    return ""


def long_tail_note(counts: Any, error_norm: Any, minority: Any) -> str:
    """Step 1's sentence on a long-tailed lesson, from its numbers: the minority classes' averages
    move further only where their median error says so (it claimed so beside 72 against 130)."""
    c = np.asarray(counts)
    err = np.asarray(error_norm, dtype=float)
    mino = np.zeros(len(c), bool)
    mino[list(minority)] = True
    lo, hi = int(c.min()), int(c.max())
    em, eo = float(np.median(err[mino])), float(np.median(err[~mino])) if (~mino).any() else float("nan")
    head = (f"The private data are long-tailed: a minority class has **{lo}** row{'s' if lo != 1 else ''} against "
            f"**{hi}** for the largest (owner's view). ")
    nums = f"median error **{em:.2g}** on the minority classes, **{eo:.2g}** on the others"
    if em > eo:
        return head + f"The same noise on a smaller sum moves its average further: {nums}."
    return (head + f"Here the minority averages did not move further ({nums}): at this ε the noise, which is "
            "the same for every class, outweighs what the count changes.")


def pdp_spread_note(eps_i: Any, epsilon: float) -> str:
    """How to read a lesson's per-instance ε: unequal where the spread is a real share of the
    budget, 'everyone lost about the whole budget' where it is not (a 0.2 % spread read as
    'samples the model fits well cost less')."""
    e = np.asarray(eps_i, dtype=float)
    spread = float(e.max() - e.min()) / float(epsilon) if len(e) and epsilon > 0 else 0.0
    if spread < 0.05:
        return (f"Here everyone lost nearly the whole budget (the spread is {100 * spread:.1f} % of ε): almost every "
                "sample's gradient was clipped at almost every step, so no one was treated better.")
    return ("Samples whose gradients stayed below the clipping threshold (ones the model already fits well) "
            "cost less; those clipped at every step cost the whole budget.")


class _Report:
    """Attribute view of a ``lesson_run`` report for :func:`mixdp_core.accounting.max_tpr`."""

    def __init__(self, d: dict[str, Any]):
        self.epsilon, self.delta, self.mu = d["epsilon"], d["delta"], d.get("mu")


def report_object(report: dict[str, Any] | None) -> Any:
    """The object :func:`~mixdp_core.accounting.max_tpr` / ``tradeoff_sentence`` take."""
    return None if report is None else _Report(report)


#: Methods the lesson trains at every ε of the grid (paragon once: it has no ε).
LESSON_METHODS: tuple[str, ...] = ("adamix", "fully_private")


class LessonCache:
    """The lesson's trainings, computed once per server in a background thread.

    :meth:`start` queues every (method, ε) of the grid, the given ε first, so each lesson step
    can draw what is ready within a second and fill in the rest as it arrives (the whole grid
    takes ~3 s on one CPU core for digits, ~15 s for the 100-class synthetic lesson).
    Thread-safe; results are plain dicts from :func:`lesson_run`.
    :meth:`stop` ends the thread after the training in progress (a later :meth:`start` resumes).
    """

    def __init__(self, cache_dir: Any = None, lesson: "str | Lesson" = DEFAULT_LESSON):
        import threading

        self.cache_dir = cache_dir
        self.lesson = as_lesson(lesson)
        self.results: dict[tuple[str, float | None], dict[str, Any]] = {}
        self.errors: dict[tuple[str, float | None], str] = {}
        self._lock = threading.Lock()
        self._thread: Any = None
        self._priority: float | None = None
        self._halt = threading.Event()

    def keys(self) -> list[tuple[str, float | None]]:
        return [("paragon", None)] + [(m, e) for e in LESSON_EPSILONS for m in LESSON_METHODS]

    @property
    def done(self) -> bool:
        return all(k in self.results or k in self.errors for k in self.keys())

    def get(self, method: str, epsilon: float | None) -> dict[str, Any] | None:
        return self.results.get((method, None if method == "paragon" else float(epsilon)))

    def start(self, priority_epsilon: float | None = None) -> None:
        """Start (or re-prioritise) the background computation."""
        import threading

        with self._lock:
            self._priority = priority_epsilon
            self._halt.clear()
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._work, name="mixdp-classroom", daemon=True)
            self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """End the background computation after the training in progress (results so far are
        kept) and wait up to ``timeout`` seconds for it."""
        with self._lock:
            self._halt.set()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _next(self) -> tuple[str, float | None] | None:
        todo = [k for k in self.keys() if k not in self.results and k not in self.errors]
        if not todo:
            return None
        p = self._priority
        if p is not None:
            first = [k for k in todo if k[1] == p]
            if first:
                return first[0]
        return todo[0]

    def _work(self) -> None:
        while True:
            with self._lock:
                if self._halt.is_set():  # stop(): a start() after this starts a new thread
                    self._thread = None
                    return
                k = self._next()
            if k is None:
                return
            method, eps = k
            try:
                self.results[k] = lesson_run(method, eps if eps is not None else 1.0, cache_dir=self.cache_dir,
                                             lesson=self.lesson)
            except Exception as e:  # noqa: BLE001 - shown by the page, never kills the thread
                self.errors[k] = f"{type(e).__name__}: {e}"


def difference_note(err_a: float, err_b: float, n_test: int) -> str:
    """How to read two single trainings' test errors (fractions) on the same ``n_test`` test
    samples: whether their gap exceeds the test set's own spread (two standard errors of the
    difference of two proportions, conservative for the same test set). One training each is
    one split and one noise draw: a gap within the spread is no verdict."""
    import math

    if not n_test:  # a lesson result from before n_test was kept: no spread to state
        return ""
    n = int(n_test)
    se = math.sqrt(err_a * (1 - err_a) / n + err_b * (1 - err_b) / n)
    gap = abs(err_a - err_b)
    if gap <= 2 * se:
        return (f" The {100 * gap:.1f}-point gap is within the test set's spread (±{200 * se:.1f} points, about 95 %, "
                f"{n} test samples): one training each, not a verdict.")
    return f" The gap ({100 * gap:.1f} points) exceeds the test set's spread (±{200 * se:.1f} points, {n} test samples)."
