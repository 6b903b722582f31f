"""DPPL-Mean: per-class private means with CoinPress (paper Sec. 4.1, App. A.4, App. C.2).

For every class ``c`` the prototype is a CoinPress estimate (Biswas et al., 2020) of the mean
of the (optionally average-pooled) private features of that class; a test point gets the
label of the nearest prototype in cosine distance.

Regime (why the default is one step; measured in ``docs/results/prototypes_fidelity.md``).
With rows rescaled to norm ``sqrt(d')`` (``feature_norm='sqrt_d'``) and one step, the
prototype is the class sum plus ``N(0, d'/(2ρ) I)``, divided by the noisy count ``ñ``. For a
test point ``x`` (norm ``sqrt(d')``) the noise in its score against a prototype has sd about
``d' / (n sqrt(2ρ))`` while the gap between its class and another is about ``d' · Δcos``: the
signal-to-noise ratio ``n · sqrt(2ρ) · Δcos`` does not depend on ``d'``. CoinPress's later
steps pay off only when a step shrinks the ball (``r_1 < r_0``), roughly
``n · sqrt(2ρ_1) > R_1 γ / sqrt(d')`` (≈ 57 at d' = 1280 under add/remove, twice that
under replace-one): with the paper's split about 800 samples per class at ε = 1 (ρ = 0.036) and
1,500 at ε = 0.5 under add/remove. Below that the radius
grows at each step (the paper's App. C.2 divergence): at d' = 1280, n = 60, ε = 1 (ρ ≈ 0.036,
add/remove) the paper's split with the reference clip radius and no norm cap gives radii
35.8 → 474 → 3479 and a last-step noise norm ≈ 8,800 against class means of norm < 36.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ConfigError, DataError
from ..base import METHODS, StepRecord
from ...config import Interval, param
from ...randomness import noise_rng, snap_release
from ._common import PrototypeFamilyMethod, SeededPrivacyConfig
from ...accounting.calibration import largest_param
from .utilities import avg_pool, cosine_scores, l2_normalize

#: ρ_i / ρ of the three CoinPress steps used in the paper (Sec. 4.1).
PAPER_BUDGET_SPLIT = (5 / 64, 7 / 64, 52 / 64)
#: The default: all of ρ in one step (see ``DPPLMeanConfig.budget_split`` for why).
ONE_STEP_SPLIT = (1.0,)


def gaussian_tailbound(d: int, beta: float) -> float:
    """γ with ``Pr[||N(0, I_d)||_2 <= γ] >= 1 − β`` (Laurent–Massart; CoinPress code).

    ``γ = sqrt(d + 2 sqrt(d log(1/β)) + 2 log(1/β))``.
    """
    lb = math.log(1.0 / beta)
    return math.sqrt(d + 2.0 * math.sqrt(d * lb) + 2.0 * lb)


def _gaussian_noise(rng: np.random.Generator, sd: float, size: int) -> np.ndarray:
    """The only source of noise of CoinPress (isolated so tests can patch it)."""
    return rng.normal(0.0, sd, size=size)


def _noisy_count(n: int, *, neighbouring: str, count_rho: float, rng: np.random.Generator) -> float:
    if neighbouring == "add_remove":
        if count_rho <= 0:  # count_fraction > 0 whose share of ρ underflowed to 0 (5e-324) lands here too
            raise ConfigError("count_fraction", "leaves the noisy count no privacy budget (its share of ρ is 0 "
                                                "in floating point); use a count_fraction of at least 1e-6")
        sd = 1.0 / math.sqrt(2.0 * count_rho)
        # snapped (randomness.snap_release) before it is used: the divisor of the class mean
        return max(snap_release(n + float(_gaussian_noise(rng, sd, 1)[0]), sd), 1.0)
    if neighbouring == "replace":
        return float(n)
    raise ConfigError("neighbouring", f"must be 'replace' or 'add_remove', got {neighbouring!r}")


#: The reference CoinPress code's stand-in for the Gaussian tail of the projection of a point
#: on the direction ``c - μ`` ("3 in place of sqrt(log(2/beta))"; Biswas et al. 2020's
#: ``multivariate_mean_step`` and the DPPL authors' ``lib/coinpress.py`` both use 3).
COINPRESS_DIRECTION_TAIL = 3.0


def clip_radius(r: float, gamma: float, *, centre_norm: float = 0.0, norm_bound: float | None = None) -> float:
    """Projection radius ``R_i`` of one CoinPress step (a function of public/released values only).

    ``R_i = min(sqrt(r² + 2·3·r + γ²), r + γ)``, as in the CoinPress reference code and the
    DPPL authors' code: for ``x = μ + z`` with ``||μ − c|| <= r`` and ``z ~ N(0, I)``,
    ``||x − c||² = ||μ − c||² + 2<μ − c, z> + ||z||² <= r² + 2·3·r + γ²`` with high
    probability, which is tighter than ``(r + γ)²`` whenever γ > 3 (every d >= 3). The paper's
    App. A.4 text states only ``r + γ``.

    ``norm_bound``: when every row is known to have norm ``<= norm_bound`` (``feature_norm =
    'sqrt_d'`` rescales every row to exactly ``sqrt(d)``: public by construction), no point is
    farther than ``||c|| + norm_bound`` from the centre ``c``, so the radius is also capped
    there. The cap clips nothing and only removes noise.
    """
    R = min(math.sqrt(r * r + 2.0 * COINPRESS_DIRECTION_TAIL * r + gamma * gamma), r + gamma)
    if norm_bound is not None:
        R = min(R, centre_norm + norm_bound)
    return R


def coinpress_step(
    X: np.ndarray,
    c: np.ndarray,
    r: float,
    *,
    rho_i: float,
    gamma: float,
    n_eff: float,
    neighbouring: str,
    rng: np.random.Generator,
    norm_bound: float | None = None,
) -> tuple[np.ndarray, float, dict[str, float]]:
    """One CoinPress step (``rho_i``-zCDP); see :func:`coinpress_mean` for the sensitivities."""
    n, d = X.shape
    R = clip_radius(r, gamma, centre_norm=float(np.linalg.norm(c)), norm_bound=norm_bound)
    diff = X - c
    norms = np.linalg.norm(diff, axis=1)
    diff *= np.minimum(1.0, R / np.maximum(norms, 1e-300))[:, None]
    if neighbouring == "replace":
        sd = (2.0 * R / n) / math.sqrt(2.0 * rho_i)
        c_new = c + diff.mean(axis=0) + _gaussian_noise(rng, sd, d)
    else:
        sd_sum = R / math.sqrt(2.0 * rho_i)
        c_new = c + (diff.sum(axis=0) + _gaussian_noise(rng, sd_sum, d)) / n_eff
        sd = sd_sum / n_eff
    r_new = math.sqrt(1.0 / n_eff + sd**2) * gamma
    if norm_bound is not None:
        # the true mean lies in B(0, norm_bound), as every row does: projecting the released centre
        # there (post-processing) only moves it closer, and keeps it finite where a step's share of
        # ρ is tiny against a small class (20 steps on 5 rows grew it to 7e22, then to inf)
        nc = float(np.linalg.norm(c_new))
        if nc > norm_bound:
            c_new *= norm_bound / nc
        r_new = min(r_new, min(nc, norm_bound) + norm_bound)  # within ||c_new|| + bound
    return c_new, r_new, {"clip_radius": R, "noise_sd": sd, "radius": r_new}


def coinpress_mean(
    X: np.ndarray,
    *,
    rhos: tuple[float, ...],
    rng: np.random.Generator,
    beta: float = 0.01,
    c0: np.ndarray | None = None,
    r0: float | None = None,
    neighbouring: str = "replace",
    count_rho: float = 0.0,
    norm_bound: float | None = None,
) -> tuple[np.ndarray, list[dict[str, float]]]:
    """CoinPress private mean of the rows of ``X`` (Biswas et al. 2020, Alg. 1; paper App. A.4).

    Step ``i`` (``ρ_i``-zCDP): project every point onto the ball ``B(c_{i-1}, R_i)``,
    ``R_i = min(sqrt(r_{i-1}² + 6 r_{i-1} + γ²), r_{i-1} + γ)`` (:func:`clip_radius`; γ:
    :func:`gaussian_tailbound`), release the noisy mean, and shrink
    the radius to ``r_i = sqrt(1/n + s_i^2) · γ`` (``s_i``: noise sd per coordinate). Start:
    ``c_0 = 0``, ``r_0 = sqrt(d)``.

    Neighbouring relations and sensitivities (per class; classes are disjoint, so the
    per-class guarantee holds for the whole data set by parallel composition):

    * ``"replace"`` (the paper's and CoinPress's setting): data sets with the same class
      sizes differing in one sample's features; sensitivity of the clipped mean
      ``2 R_i / n``; noise ``N(0, s_i^2 I)``, ``s_i = (2 R_i / n) / sqrt(2 ρ_i)`` (noise
      multiplier ``1/sqrt(2 ρ_i)``). Class sizes ``n`` are treated as public.
    * ``"add_remove"``: add/remove one sample. First a noisy count
      ``ñ = n + N(0, 1/(2 count_rho))`` (sensitivity 1); each step releases the clipped,
      centred *sum* ``Σ (proj(x_j) − c)`` (sensitivity ``R_i``) plus ``N(0, R_i^2/(2ρ_i) I)``
      and sets ``c_i = c_{i-1} + sum / max(ñ, 1)``.

    Either way the run is ``(count_rho + Σ ρ_i)``-zCDP (Gaussian mechanisms, Prop. 1).

    Args:
        X: ``(n, d)`` private points of one class.
        rhos: per-step zCDP budgets ``ρ_i``.
        rng: noise generator.
        beta: tail probability of the clip radius (0.01 in the paper).
        c0, r0: initial centre and radius (default ``0`` and ``sqrt(d)``).
        neighbouring: ``"replace"`` or ``"add_remove"`` (see above).
        count_rho: budget of the noisy count (``"add_remove"`` only, > 0).
        norm_bound: a public bound on every row's norm (``None``: none known); caps the
            projection radius at ``||c|| + norm_bound`` (:func:`clip_radius`), and each released
            centre is projected onto ``B(0, norm_bound)``, where the true mean lies
            (post-processing; it keeps the centres finite when a step's ρ is tiny).

    Returns:
        ``(c_t, history)``: the last released centre and, per step, a dict with
        ``clip_radius``, ``noise_sd`` (sd of the noise in the mean estimate) and ``radius``.
    """
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    if n == 0:
        raise DataError("coinpress_mean: a class has no private samples")
    c = np.zeros(d) if c0 is None else np.asarray(c0, dtype=np.float64).copy()
    r = math.sqrt(d) if r0 is None else float(r0)
    gamma = gaussian_tailbound(d, beta)
    n_eff = _noisy_count(n, neighbouring=neighbouring, count_rho=count_rho, rng=rng)
    history: list[dict[str, float]] = []
    for rho_i in rhos:
        c, r, info = coinpress_step(X, c, r, rho_i=rho_i, gamma=gamma, n_eff=n_eff,
                                    neighbouring=neighbouring, rng=rng, norm_bound=norm_bound)
        history.append(info)
    return c, history


#: At most this many CoinPress steps (``len(budget_split)``): the paper uses 3, and past a few
#: dozen every step's share of ρ is too small to shrink the radius (100 steps at ε = 1 grew it
#: to 3e13, 150 gave non-finite prototypes, 1,000 an OverflowError).
MAX_COINPRESS_STEPS = 20


def _check_budget_split(value: object) -> None:
    bs = tuple(value) if isinstance(value, (tuple, list)) else None
    if not bs or len(bs) > MAX_COINPRESS_STEPS or any(
            not isinstance(f, (int, float, np.floating, np.integer)) or not np.isfinite(f) or f <= 0
            for f in bs) or abs(sum(bs) - 1.0) > 1e-9:
        raise ConfigError(
            "budget_split", f"must be a tuple of 1 to {MAX_COINPRESS_STEPS} positive fractions summing to 1, "
                            f"got {value!r}"[:300]
        )


@dataclass(frozen=True, kw_only=True)
class DPPLMeanConfig(SeededPrivacyConfig):
    """Hyper-parameters of DPPL-Mean (each field declares its range and help below).

    The total zCDP budget ρ is the largest whose (ε, δ) at ``target_delta`` (accounting
    module, composition of the Gaussian releases) is ``<= target_epsilon``.
    """

    budget_split: tuple[float, ...] = param(
        ONE_STEP_SPLIT, check=_check_budget_split,
        help="ρ_i / ρ per CoinPress step, positive, summing to 1; its length is the number of steps t. "
             "Default (1.0,): one step, chosen from public facts only — with feature_norm='sqrt_d' every row has "
             "norm sqrt(d'), the first step's projection radius is that bound (nothing is clipped) and no later "
             "step's radius is smaller (each is >= min(γ(d', β), ||c|| + sqrt(d')) >= sqrt(d')), so the last "
             "step of t > 1 has more noise than one step with all of ρ (one iteration is also the authors' "
             "dp-learning-ff starting value Ps = [ρ]). The paper's 3 steps: (5/64, 7/64, 52/64), for raw "
             "features (feature_norm='none') with over ~1,000 samples per class at ε <= 1 "
             "(docs/results/prototypes_fidelity.md).")
    k_pool: int = param(1, type=int, range=Interval(1, None),
                        help="Average-pooling kernel applied to features before estimation and at prediction "
                             "(reduces d to ceil(d / k_pool)).")
    beta: float = param(0.01, type=float, range=Interval(0.0, 1.0, closed="neither"),
                        help="Tail probability of the Gaussian tail bound γ.")
    neighbouring: str = param(
        "add_remove", choices=("replace", "add_remove"),
        help="'add_remove' (default: the relation every other method is accounted under, so the ε slider "
             "means the same guarantee; noisy class counts) or 'replace' (the paper's and CoinPress's setting: "
             "class sizes public, replace-one neighbours — a different, not directly comparable guarantee).")
    count_fraction: float = param(0.05, type=float, range=Interval(0.0, 1.0, closed="neither"),
                                  help="Fraction of ρ spent on the noisy class counts when neighbouring='add_remove'.")
    feature_norm: str = param(
        "sqrt_d", choices=("none", "sqrt_d"),
        help="Per-sample preprocessing (no privacy cost) after pooling and at prediction: 'none' (the paper: raw "
             "embeddings) or 'sqrt_d' (documented deviation: each row L2-normalized and scaled to norm sqrt(d), "
             "inside CoinPress's initial ball whatever the encoder's feature scale).")


@METHODS.register("dppl_mean")
class DPPLMean(PrototypeFamilyMethod):
    """DPPL-Mean (Wahdany et al., Sec. 4.1): CoinPress class means, nearest cosine prototype.

    Privacy: ρ-zCDP per class (Gaussian mechanisms), ρ-zCDP overall by parallel composition
    over the disjoint classes (Wahdany et al., Sec. 4.1 "Privacy Analysis"; CoinPress, Biswas et
    al. 2020, Alg. 1); reported as (ε, δ) by the accounting module for the steps actually
    executed. Under ``neighbouring="add_remove"`` (default: add or remove one private row) a
    noisy count ``ñ = n + N(0, 1/(2ρ_c))`` (sensitivity 1) is released first and step i
    releases the clipped, centred sum ``Σ_j (proj_i(x_j) − c_{i−1}) + N(0, R_i²/(2ρ_i) I)``
    (L2 sensitivity ``R_i``, the step's clipping radius), ``c_i = c_{i−1} + sum / max(ñ, 1)``;
    under ``"replace"`` (the paper's: class sizes public) the clipped mean has sensitivity
    ``2R_i/n`` (:func:`coinpress_mean`).

    Fitted attributes: ``prototypes_`` ``(C, d')``, ``rho_`` (total zCDP budget spent),
    ``step_rhos_``, ``coinpress_history_`` (per class), ``privacy_``, ``steps_``,
    ``history_``, ``noise_multiplier_`` (per-step noise multipliers, tuple).
    """

    config_cls = DPPLMeanConfig
    description = ("DP prototypes: per-class private means (CoinPress; one step by default, the paper's 3 steps "
                   "diverge below ~1,000 samples per class at ε <= 1), nearest cosine prototype (ρ-zCDP)")
    paper = "Wahdany et al., Beyond the Mean: DP Prototypes, Sec. 4.1 / App. A.4 (CoinPress, Biswas et al. 2020)"

    def _event(self, rho: float, steps: int | None = None):
        """Accounting event of the run: the Gaussian releases with their noise multipliers."""
        from ... import accounting as acc

        return acc.Composition([acc.GaussianMechanism(noise_multiplier=s) for s in self._sigmas(rho, steps)])

    def _rhos(self, rho: float) -> tuple[float, list[float]]:
        cfg = self.config
        fr = np.asarray(cfg.budget_split, dtype=np.float64)
        if cfg.neighbouring == "add_remove":
            return cfg.count_fraction * rho, list((1 - cfg.count_fraction) * rho * fr)
        return 0.0, list(rho * fr)

    def _sigmas(self, rho: float, steps: int | None = None) -> list[float]:
        count_rho, step_rhos = self._rhos(rho)
        rhos = ([count_rho] if count_rho > 0 else []) + step_rhos[: len(step_rhos) if steps is None else steps]
        return [1.0 / math.sqrt(2.0 * r) for r in rhos]

    def fit(self, split: Any, *, on_step=None) -> "DPPLMean":
        from ... import accounting as acc

        cfg = self.config
        self._reset()
        if cfg.k_pool > split.dim:
            raise ConfigError("k_pool", f"must be <= the feature dimension D = {split.dim} (a larger kernel pools "
                                        f"every feature into one), got {cfg.k_pool}")
        delta = cfg.target_delta
        rho = largest_param(
            lambda r: acc.epsilon(self._event(r), delta=delta),
            target_epsilon=cfg.target_epsilon, lo=1e-10, hi=1e6,
        )
        count_rho, step_rhos = self._rhos(rho)
        X = self._features(split.X_private, np.float64)
        y = np.asarray(split.y_private)
        C, d = split.n_classes, X.shape[1]
        groups = [X[y == c] for c in range(C)]
        if cfg.neighbouring == "replace":  # class sizes are public under replace-one: say so
            for c, g in enumerate(groups):
                if len(g) == 0:
                    raise DataError(f"y_private: class {c} has no private samples (neighbouring='replace' "
                                    "needs every class present)")
        # add/remove: an empty class runs like any other (its noisy sum is pure noise over the
        # noisy count): failing on it would reveal, unaccounted, that no private row has the label
        ledger = acc.RunLedger(budget_epsilon=cfg.target_epsilon, delta=delta, plan=self._event(rho))
        self.ledger_ = ledger
        sigmas = self._sigmas(rho)  # noise multipliers: the count's (if any), then each step's
        rng = noise_rng(cfg.noise, cfg.seed, 0xD99)
        gamma = gaussian_tailbound(d, cfg.beta)
        n_eff = [_noisy_count(len(g), neighbouring=cfg.neighbouring, count_rho=count_rho, rng=rng) for g in groups]
        if count_rho > 0:  # one noisy count per class: disjoint rows, parallel, counted once
            ledger.release(acc.GaussianMechanism(noise_multiplier=sigmas[0]), what="noisy class counts")
        centres = np.zeros((C, d))
        radii = [math.sqrt(d)] * C
        self.coinpress_history_ = [[] for _ in range(C)]
        # Per-instance DP (owner-only diagnostic, evaluation/pdp.py): sample j's share of the
        # step's sensitivity, r = (||proj(x_j) - c|| + R)/(2R) (replace) or ||proj(x_j) - c||/R.
        rows = [np.flatnonzero(y == c) for c in range(C)]
        pdp_ratios = np.zeros((len(y), len(step_rhos)))
        bound = self._norm_bound(d)
        for i, rho_i in enumerate(step_rhos, start=1):
            for c in range(C):
                R_c = clip_radius(radii[c], gamma, centre_norm=float(np.linalg.norm(centres[c])), norm_bound=bound)
                dn = np.minimum(np.linalg.norm(groups[c] - centres[c], axis=1), R_c)
                pdp_ratios[rows[c], i - 1] = (dn + R_c) / (2 * R_c) if cfg.neighbouring == "replace" else dn / R_c
                centres[c], radii[c], info = coinpress_step(
                    groups[c], centres[c], radii[c], rho_i=rho_i, gamma=gamma, n_eff=n_eff[c],
                    neighbouring=cfg.neighbouring, rng=rng, norm_bound=bound,
                )
                self.coinpress_history_[c].append(info)
            ledger.release(acc.GaussianMechanism(noise_multiplier=sigmas[(count_rho > 0) + i - 1]),
                           what=f"CoinPress step {i} (one mean per class, disjoint)")
            self.steps_ = i
            eps_i = acc.epsilon(self._event(rho, i), delta=delta)
            rec = StepRecord(step=i, total_steps=len(step_rhos), epsilon_spent=float(eps_i),
                             extra={"rho_spent": float(count_rho + sum(step_rhos[:i]))})
            if self._emit(on_step, rec):
                break
        self.rho_ = float(count_rho + sum(step_rhos[: self.steps_]))
        self.step_rhos_ = tuple(step_rhos[: self.steps_])
        self.noise_multiplier_ = tuple(self._sigmas(rho, self.steps_))
        # the float32 prototypes' squared norms (cosine scores) must stay finite
        if not np.all(np.isfinite(centres)) or np.max(np.abs(centres)) > math.sqrt(np.finfo(np.float32).max / max(d, 1)):
            # only without a norm bound (feature_norm='none'); post-processing of the releases
            raise DataError("budget_split: a CoinPress step's share of ρ is too small for these classes: the "
                            "released means overflowed; use fewer steps (the paper uses 3) or feature_norm='sqrt_d'")
        self.prototypes_ = centres.astype(np.float32)
        self.pdp_step_ratios_ = pdp_ratios[:, : self.steps_]
        self.privacy_ = ledger.report()
        if cfg.neighbouring == "replace":  # a different neighbouring relation: say so in the report
            import dataclasses

            self.privacy_ = dataclasses.replace(self.privacy_, mechanism=self.privacy_.mechanism + (
                " [neighbouring: replace-one (class sizes public), not add/remove: "
                "not comparable with the other methods' epsilon]"))
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        self._check_fitted()
        return cosine_scores(self._features(X, np.float32), self.prototypes_)

    def _norm_bound(self, d: int) -> float | None:
        """Public bound on the rows' norm: ``sqrt(d')`` after ``feature_norm='sqrt_d'``, else none."""
        return math.sqrt(d) if self.config.feature_norm == "sqrt_d" else None

    def _features(self, X: np.ndarray, dtype) -> np.ndarray:
        Z = avg_pool(np.asarray(X, dtype=dtype), self.config.k_pool)
        if self.config.feature_norm == "sqrt_d":
            Z = l2_normalize(Z) * math.sqrt(Z.shape[1])
        return Z
