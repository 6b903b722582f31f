"""DPPL-Public: privately selected public prototypes (paper Sec. 4.2, Alg. 1, App. D.1).

For every class the exponential mechanism picks one candidate of a *public* pool whose
utility is the clipped sum of cosine similarities to the class's private features (Eq. 14).
Pure ε-DP (add/remove one private sample), parallel composition over classes.

Privacy conventions (``calibration`` config field). The ε slider is an (ε, δ) target that
means the same for every method of the library:

* ``"pure"`` (default): ε_EM is the largest ε whose guarantee, as computed by the
  accounting module for the ε-DP exponential mechanism at the user's δ, is <= target. A
  pure ε-DP mechanism is (ε, δ)-DP for every δ, so this is ε_EM = target_epsilon unless the
  accountant finds a tighter (ε, δ) curve.
* ``"zcdp"`` (the paper's official code): take the largest ρ with
  ``zcdp_to_epsilon(ρ, δ) <= target_epsilon`` (the budget a ρ-zCDP method gets) and run the
  EM at ``ε_EM = sqrt(8ρ)``, i.e. the bounded-range conversion ρ = ε²/8 (Cesar & Rogers;
  paper Lemma 3). The paper's plots then label the run with ε = sqrt(2ρ) (the naive
  ρ = ε²/2 inversion), which is *not* an (ε, δ) guarantee of the EM; this library never
  reports that number as ε.

Every run reports ``privacy_`` (ε at the user's δ, ρ = ε_EM²/8 zCDP and the pure ε).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ConfigError, DataError
from ..adamix.configs import device_param
from ..base import METHODS, StepRecord
from ...config import Interval, param
from ...randomness import noise_rng
from ._common import PrototypeFamilyMethod, SeededPrivacyConfig
from ...accounting.calibration import calibrate_em_epsilon
from .utilities import (
    PRECISIONS,
    clips,
    cosine_scores,
    load_public_pool,
    public_utilities,
    utilities_plan,
    sample_em,
    validate_pool_spec,
)


@dataclass(frozen=True, kw_only=True)
class DPPLPublicConfig(SeededPrivacyConfig):
    """Hyper-parameters of DPPL-Public (each field declares its range and help below).

    ``fit(..., public_pool=array)`` overrides ``public_pool`` with an in-memory pool.
    """

    d_min: float = param(0.0, type=float, range=Interval(0.0, 2.0, closed="left"),
                         help="Lower clip of 1 + cos, 0 <= d_min < d_max; the sensitivity is d_max − d_min.")
    d_max: float = param(2.0, type=float, range=Interval(0.0, 2.0, closed="right"),
                         help="Upper clip of 1 + cos, at most 2 (defaults 0 and 2: no clipping).")
    public_pool: str = param("split", type=None, check=validate_pool_spec,
                             help="'split' (the labelled public split, labels discarded) or a path to an .npz "
                                  "with an (N, d) array X.")
    calibration: str = param("pure", choices=("pure", "zcdp"),
                             help="'pure': ε_EM calibrated so the EM's (ε, δ) meets the target; 'zcdp': via "
                                  "ρ = ε_EM²/8 (module docstring).")
    block_size: int | None = param(None, type=int, range=Interval(1, 2**20),
                                   help="Pool rows per block of the utility computation (None: automatic).")

    device: str = device_param(
        help="Where the utilities (the cosine products of every private row with every pool candidate) run: "
             "'cpu' (numpy), 'cuda' (torch on the GPU; refused when torch sees none), 'auto' (CUDA when torch "
             "sees a GPU and the products take >= 1e11 multiply-adds, else cpu). The exponential mechanism is "
             "drawn on the host from the same utilities, so the release and ε are the same on every device.")
    precision: str = param("auto", choices=PRECISIONS,
                           help="Arithmetic of the clipped utilities' cosine products on the CPU: 'fp32'; 'bf16' "
                                "(bfloat16 products, clip and float32 class sums in torch: ~4x faster where the CPU "
                                "has AMX-BF16 units; each summand stays clipped, so ε is unchanged; the "
                                "utilities move by rounding, at most 3·2^-9 per summand, and the selection's "
                                "distribution by a total variation of 0.4 % at ε = 1, 2.1 % at ε = 8, measured); "
                                "'auto' (bf16 on such a CPU for clipped utilities of >= 1e11 multiply-adds, else "
                                "fp32). The run records which ran (utilities_precision_).")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.d_min < self.d_max:  # cross-field constraint
            raise ConfigError("d_min", f"must lie in [0, {self.d_max}), got {self.d_min!r}")


class _PublicBase(PrototypeFamilyMethod):
    monotone: bool = True

    def _utilities(self, split: Any, public_pool: np.ndarray | None):
        cfg = self.config
        pool = load_public_pool(cfg.public_pool, split, public_pool)
        d = int(np.shape(split.X_private)[1])
        # Where and in what arithmetic the utilities run changes their rounding, so it must not
        # depend on the private count (neighbours either side of a size threshold would get
        # differently rounded utilities, outside the mechanism's sensitivity): the plan is
        # sized on public quantities, the pool standing in for the private rows.
        n_pool = int(pool.shape[0])
        _, self.utilities_precision_ = utilities_plan(cfg.device, cfg.precision,
                                                      clipping=clips(cfg.d_min, cfg.d_max),
                                                      n_private=n_pool, n_pool=n_pool, dim=d)
        U = public_utilities(
            split.X_private, split.y_private, pool, n_classes=split.n_classes,
            d_min=cfg.d_min, d_max=cfg.d_max, block_size=cfg.block_size, device=cfg.device,
            precision=self.utilities_precision_, plan_rows=n_pool,
        )
        if not np.all(np.isfinite(U)):  # a memory-mapped pool is not scanned for NaN up front
            raise DataError("public_pool: contains NaN or infinite values (found in its utilities)")
        # the pool the draw was over, for the per-instance ε (evaluation/pdp.py): an in-memory
        # pool given to fit is not the config's
        self.public_pool_used_ = pool
        return pool, U

    def _finish(self, event, on_step) -> None:
        from ... import accounting as acc

        # one exponential-mechanism selection per class (disjoint rows: parallel, counted once),
        # already sampled by the caller; the plan is the calibrated event itself
        ledger = acc.RunLedger(budget_epsilon=self.config.target_epsilon, delta=self.config.target_delta,
                               plan=event)
        ledger.release(event, what="exponential mechanism (one prototype per class)")
        self.ledger_ = ledger
        self.privacy_ = ledger.report()
        self.steps_ = 1
        self._emit(on_step, StepRecord(step=1, total_steps=1, epsilon_spent=float(self.privacy_.epsilon),
                                       extra={"epsilon_em": float(self.epsilon_em_)}))

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        self._check_fitted()
        return cosine_scores(X, self.prototypes_)


@METHODS.register("dppl_public")
class DPPLPublic(_PublicBase):
    """DPPL-Public (Wahdany et al., Alg. 1): one EM-selected public prototype per class.

    Mechanism: for class ``c``, ``P[j] ∝ exp(ε_EM · u_c(j) / Δu)`` with ``u_c`` of Eq. 14
    (:func:`~.utilities.public_utilities`), ``Δu = d_max − d_min`` its sensitivity (one private
    row moves each utility by at most the clipped range of 1 + cos); ``u_c`` is positively
    monotone under add/remove of one private sample (Lemma 5), so each draw is ε_EM-DP
    (Lemma 2) and the whole release is ε_EM-DP by parallel composition over the disjoint
    classes (Thm. 2). Pure DP: δ = 0; ``privacy_`` also gives (ε, δ) at the user's δ and
    ρ = ε_EM²/8 (bounded range).

    Fitted attributes: ``prototypes_`` ``(C, d)`` (rows of the pool), ``prototype_indices_``
    ``(C,)`` (pool rows), ``epsilon_em_``, ``utilities_max_`` ``(C,)`` (non-private
    diagnostic: best achievable utility), ``privacy_``, ``steps_`` (1), ``history_``.
    """

    config_cls = DPPLPublicConfig
    description = "DP prototypes: exponential mechanism picks a public prototype per class (pure ε-DP)"
    paper = "Wahdany et al., Beyond the Mean: DP Prototypes, Sec. 4.2, Alg. 1, App. D.1"
    monotone = True

    def fit(self, split: Any, *, on_step=None, public_pool: np.ndarray | None = None) -> "DPPLPublic":
        from ... import accounting as acc

        cfg = self.config
        self._reset()
        self.epsilon_em_ = calibrate_em_epsilon(
            target_epsilon=cfg.target_epsilon, target_delta=cfg.target_delta,
            monotone=True, calibration=cfg.calibration,
        )
        pool, U = self._utilities(split, public_pool)
        rng = noise_rng(cfg.noise, cfg.seed, 0xE11)
        sens = cfg.d_max - cfg.d_min
        idx = np.array([sample_em(U[c], epsilon=self.epsilon_em_, sensitivity=sens, monotone=True, rng=rng)
                        for c in range(split.n_classes)])
        self.prototype_indices_ = idx
        self.prototypes_ = np.asarray(pool[idx], dtype=np.float32)
        self.utilities_max_ = U.max(axis=1)
        self._finish(acc.ExponentialMechanism(epsilon=self.epsilon_em_, monotone=True), on_step)
        return self
