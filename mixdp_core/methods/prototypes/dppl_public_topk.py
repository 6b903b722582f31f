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
from ...accounting.calibration import calibrate_em_epsilon
from .dppl_public import DPPLPublicConfig, _PublicBase
from .utilities import sample_topk


@dataclass(frozen=True, kw_only=True)
class DPPLPublicTopKConfig(DPPLPublicConfig):
    """Hyper-parameters of DPPL-PublicK: those of :class:`DPPLPublicConfig` plus ``k``."""

    k: int = param(3, type=int, range=Interval(1, None),
                   help="Prototypes per class (at most the pool size, checked at fit).")


@METHODS.register("dppl_public_topk")
class DPPLPublicTopK(_PublicBase):
    """DPPL-PublicK (Wahdany et al., App. C.3 / C.4).

    Mechanism: per class, an unordered K-set ``S`` of pool rows is drawn with
    ``P[S] ∝ exp(ε_EM · U(S) / (2Δu))``, ``U(S) = min_{s∈S} u_c(s) − u_c,(K)`` (Eq. 5),
    sampled exactly through the rank of the worst member
    (:func:`~.utilities.sample_topk`). ``ΔU = Δu = d_max − d_min`` under add/remove of one
    private sample (Lemma 4); U is not monotone, hence the factor 2: each class's draw is
    ε_EM-DP and the release is ε_EM-DP by parallel composition over classes.

    Fitted attributes: ``prototypes_`` ``(C, K, d)``, ``prototype_indices_`` ``(C, K)``,
    ``epsilon_em_``, ``privacy_``, ``steps_`` (1), ``history_``.
    """

    config_cls = DPPLPublicTopKConfig
    description = "DP prototypes: joint exponential mechanism picks K public prototypes per class (pure ε-DP)"
    paper = "Wahdany et al., Beyond the Mean: DP Prototypes, App. C.3 (after Gillenwater et al. 2022)"
    monotone = False

    def fit(self, split: Any, *, on_step=None, public_pool: np.ndarray | None = None) -> "DPPLPublicTopK":
        from ... import accounting as acc

        cfg = self.config
        self._reset()
        self.epsilon_em_ = calibrate_em_epsilon(
            target_epsilon=cfg.target_epsilon, target_delta=cfg.target_delta,
            monotone=False, calibration=cfg.calibration,
        )
        pool, U = self._utilities(split, public_pool)
        if cfg.k > U.shape[1]:
            raise ConfigError("k", f"must be <= the public pool size {U.shape[1]}, got {cfg.k}")
        rng = np.random.default_rng([cfg.seed, 0x70C])
        sens = cfg.d_max - cfg.d_min
        idx = np.stack([sample_topk(U[c], cfg.k, epsilon=self.epsilon_em_, sensitivity=sens, rng=rng)
                        for c in range(split.n_classes)])
        self.prototype_indices_ = idx
        self.prototypes_ = np.asarray(pool[idx.ravel()], dtype=np.float32).reshape(idx.shape + (pool.shape[1],))
        self._finish(acc.ExponentialMechanism(epsilon=self.epsilon_em_, monotone=False), on_step)
        return self
