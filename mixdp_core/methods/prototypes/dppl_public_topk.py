"""DPPL-PublicK: K public prototypes per class with the joint exponential mechanism (App. C.3).

Classification by the mean cosine distance to the K prototypes of each class (Eq. 7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ConfigError
from ..base import METHODS
from ...config import Interval, param
from ...randomness import noise_rng
from ...accounting.calibration import calibrate_em_epsilon
from .dppl_public import DPPLPublicConfig, _PublicBase
from .utilities import sample_topk


@dataclass(frozen=True, kw_only=True)
class DPPLPublicTopKConfig(DPPLPublicConfig):
    """Hyper-parameters of DPPL-PublicK: those of :class:`DPPLPublicConfig` plus ``k`` and ``sampling``."""

    k: int = param(
        1, type=int, range=Interval(1, None),
        help="Prototypes per class (at most the pool size, checked at fit). Default 1, from public facts: a "
             "K-set costs the joint mechanism about (K−1)·log(pool size) nats of ε·gap/Δu (the binom(y−1, K−1) "
             "count of worse sets), the paper's App. C.4.1 finds the best K small at strict budgets and K = 10 "
             "only for ρ > 100, and K = 1 is exactly DPPL-Public. K > 1 lost to K = 1 at every ε <= 3 measured in "
             "docs/results/prototypes_fidelity.md; never set K above the pool's candidates per class.")
    sampling: str = param(
        "monotone", choices=("monotone", "paper"),
        help="Scale of the joint exponential mechanism: 'monotone' (default) samples P[S] ∝ exp(ε·min_S u/Δu), "
             "ε-DP because the paper's −u_(K) shift is the same for every set and min_S u is monotone "
             "(Lemma 2; K = 1 is then exactly DPPL-Public); 'paper' uses App. C.3's factor 2, "
             "exp(ε·U(S)/(2Δu)), for reproducing the paper.")


@METHODS.register("dppl_public_topk")
class DPPLPublicTopK(_PublicBase):
    """DPPL-PublicK (Wahdany et al., App. C.3 / C.4).

    Mechanism: per class, an unordered K-set ``S`` of pool rows is drawn with
    ``P[S] ∝ exp(ε_EM · U(S) / Δu)`` (``sampling='monotone'``) or ``exp(ε_EM · U(S) / (2Δu))``
    (``'paper'``), ``U(S) = min_{s∈S} u_c(s) − u_c,(K)`` (Eq. 5), sampled exactly through the
    rank of the worst member (:func:`~.utilities.sample_topk`). Sensitivity under add/remove
    of one private sample: ``ΔU = Δu = d_max − d_min`` (Lemma 4). U is not monotone, but
    ``U(S) − U(S')`` does not depend on ``u_(K)``, so the distribution is that of the
    exponential mechanism of the monotone ``min_{s∈S} u_c(s)`` (sensitivity Δu): ε_EM-DP at the
    monotone scale (Lemma 2), and ε_EM-DP with the paper's factor 2 a fortiori. The release is
    ε_EM-DP by parallel composition over the disjoint classes.

    Regime note: a K-set costs the mechanism about ``log binom(y−1, K−1) ≈ (K−1) log N_pool``
    nats of utility (``ε · gap / Δu``) before it prefers the best sets over the many mediocre
    ones; with a few public samples per class (e.g. 2 of a 200-sample pool) K >= 2 therefore
    loses to K = 1 (DPPL-Public), and K above the class's candidates forces other classes'
    samples into every set. Hence the default ``k = 1`` (see the field's help).

    Fitted attributes: ``prototypes_`` ``(C, K, d)``, ``prototype_indices_`` ``(C, K)``,
    ``k_`` (K used), ``epsilon_em_``, ``privacy_``, ``steps_`` (1), ``history_``.
    """

    config_cls = DPPLPublicTopKConfig
    description = ("DP prototypes: joint exponential mechanism picks K public prototypes per class (pure ε-DP); "
                   "default K = 1 (= DPPL-Public): K > 1 pays a set-count penalty and only helps at large budgets")
    paper = "Wahdany et al., Beyond the Mean: DP Prototypes, App. C.3 (after Gillenwater et al. 2022)"

    @property
    def monotone(self) -> bool:  # type: ignore[override]
        return self.config.sampling == "monotone"

    def fit(self, split: Any, *, on_step=None, public_pool: np.ndarray | None = None) -> "DPPLPublicTopK":
        from ... import accounting as acc

        cfg = self.config
        self._reset()
        self.epsilon_em_ = calibrate_em_epsilon(
            target_epsilon=cfg.target_epsilon, target_delta=cfg.target_delta,
            monotone=self.monotone, calibration=cfg.calibration,
        )
        pool, U = self._utilities(split, public_pool)
        k = int(cfg.k)
        if k > U.shape[1]:
            raise ConfigError("k", f"must be <= the public pool size {U.shape[1]}, got {k}")
        rng = noise_rng(cfg.noise, cfg.seed, 0x70C)
        sens = cfg.d_max - cfg.d_min
        idx = np.stack([sample_topk(U[c], k, epsilon=self.epsilon_em_, sensitivity=sens, rng=rng,
                                    monotone=self.monotone)
                        for c in range(split.n_classes)])
        self.k_ = k
        self.prototype_indices_ = idx
        self.prototypes_ = np.asarray(pool[idx.ravel()], dtype=np.float32).reshape(idx.shape + (pool.shape[1],))
        self._finish(acc.ExponentialMechanism(epsilon=self.epsilon_em_, monotone=self.monotone), on_step)
        return self
