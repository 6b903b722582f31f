"""Baselines of the DP-prototypes paper (Wahdany et al., Sec. 5): linear heads on features.

* ``dp_linear_probe`` — DP-SGD (Abadi et al.) on a linear softmax head with Poisson sampling.
* ``dpsgd_global_adapt`` — DPSGD-Global-Adapt (Esipova et al., ICLR 2023, Alg. 2).
* ``dp_ls`` — DP least squares from noisy sufficient statistics (Mehta et al., TMLR 2023).

Implementation path (DP-SGD variants): the *fast closed-form path*, not Opacus. For a linear
softmax head the per-example gradient is the rank-one matrix ``(p_i − y_i) x̃_i^T``
(x̃ = [x, 1]), whose Frobenius norm is ``||p_i − y_i|| · ||x̃_i||``; clipping and summing are
therefore exact matrix products over the Poisson batch, the same arithmetic Opacus performs
with per-sample-gradient hooks, at a fraction of the cost on CPU (one run = a few ms per
step on 2 cores). Privacy accounting is identical (Poisson-subsampled Gaussian, accounting
module); the test suite checks the per-example gradients against autograd.

Common preprocessing (per sample, no privacy cost): features are L2-normalized.
Neighbouring relation for all three: add/remove one private sample.

Dataset size (DP-SGD variants). Under add/remove-one the private count N is itself private,
so q = B/N and T = ⌈epochs/q⌉ must not be computed from the exact N unaccounted.
``dataset_size`` selects how N enters:

* ``"noisy_count"`` (default): N̂ = N + Z, Z two-sided geometric (L1 sensitivity 1 under
  add/remove; pure ε_c-DP with ε_c = ``count_budget_share`` · ε;
  :mod:`mixdp_core.methods._private_count`), released first; q = min(1, B/N̂), T = ⌈epochs/q⌉,
  and the gradient sums are normalised by q·N̂. σ of the steps is calibrated to (ε − ε_c, δ)
  for whatever count came out, and the reported ε adds ε_c (basic composition, which holds
  for a mechanism chosen from an earlier output: ``AdaptiveComposition``).
* ``"public_bound"``: N is replaced by ``size_bound``, a public upper bound given by the user
  (nothing about the data is read); T is then known before the run and checked in
  ``preflight``.
* ``"public"``: the exact N is treated as public (e.g. it is published anyway). This is a
  different privacy model; the privacy report's mechanism text says so
  (``[N_private treated as public]``).

Accounting: σ is calibrated, and ε reported, with the PLD accountant (dp-accounting,
pessimistic discretisation) by default — the tightest sound accountant available here; the
RDP ε of the same run is kept beside it in ``epsilon_rdp_``.
Simplifications (documented): no private hyper-parameter tuning (fixed defaults below,
the paper tunes every method with Optuna without accounting for it); plain momentum SGD;
DP-LS without the paper's feature-covariance preconditioning variants (DP-FC / DP-Newton).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._observe import notify_release
from ..base import METHODS, StepRecord
from ...config import Interval, param
from ...errors import DataError
from ...randomness import noise_rng, snap_release
from .._private_count import PrivateCountConfig, check_bound, resolve_private_count
from ._common import PrototypeFamilyMethod, SeededPrivacyConfig
from ...accounting.calibration import largest_param
from .utilities import l2_normalize


def _augment(X: np.ndarray) -> np.ndarray:
    """L2-normalize rows and append a bias coordinate 1 (so ||x̃|| = sqrt(2))."""
    Xn = l2_normalize(np.asarray(X, dtype=np.float64))
    return np.hstack([Xn, np.ones((len(Xn), 1))])


def _softmax(Z: np.ndarray) -> np.ndarray:
    Z = Z - Z.max(axis=1, keepdims=True)
    E = np.exp(Z)
    return E / E.sum(axis=1, keepdims=True)


def per_example_grad_norms(W: np.ndarray, Xa: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Residuals ``p − y`` and per-example gradient norms of the softmax cross-entropy.

    For the loss ``−log softmax(x̃ W)_y`` the gradient w.r.t. ``W`` (shape ``(d+1, C)``) is
    ``x̃ (p − y)^T``; its Frobenius norm is ``||x̃|| · ||p − y||``.
    """
    R = _softmax(Xa @ W) - Y
    return R, np.linalg.norm(Xa, axis=1) * np.linalg.norm(R, axis=1)


@dataclass(frozen=True, kw_only=True)
class DPLinearProbeConfig(SeededPrivacyConfig, PrivateCountConfig):
    """DP-SGD linear probe (each field declares its range and help below)."""

    epochs: int = param(20, type=int, range=Interval(1, 10_000),
                        help="Passes over the private data in expectation; steps T = ceil(epochs / q).")
    expected_batch_size: int = param(256, type=int, range=Interval(1, None),
                                     help="Poisson batch size in expectation; q = min(1, B/n).")
    lr: float = param(2.0, type=float, range=Interval(0.0, 1e4, closed="right"),
                      help="SGD learning rate, momentum 0.9.")
    clip_norm: float = param(1.0, type=float, range=Interval(0.0, 1e6, closed="right"),
                             help="Per-example gradient clip norm C (C0 of Global-Adapt).")


@dataclass(frozen=True, kw_only=True)
class GlobalAdaptConfig(DPLinearProbeConfig):
    """DPSGD-Global-Adapt: the fields of :class:`DPLinearProbeConfig` plus the threshold's."""

    initial_threshold: float = param(1.0, type=float, range=Interval(0.0, 1e6, closed="right"),
                                     help="Z_0, the initial scaling threshold.")
    target_unclipped: float = param(0.9, type=float, range=Interval(0.0, 1.0, closed="right"),
                                    help="γ, target fraction of per-example norms <= Z.")
    threshold_lr: float = param(0.2, type=float, range=Interval(0.0, 100.0, closed="right"),
                                help="η_Z of the geometric update Z <- Z exp(−η_Z (b̄ − γ)).")
    count_noise_ratio: float = param(10.0, type=float, range=Interval(1e-3, 1e6),
                                     help="σ_b / σ_g, noise of the unclipped-count release relative to the "
                                          "gradient noise multiplier.")


class _LinearHead(PrototypeFamilyMethod):
    adaptive = False

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        self._check_fitted()
        return _augment(X) @ self.coef_

    @staticmethod
    def _plan(cfg, n_used: float) -> tuple[float, int]:
        q = min(1.0, cfg.expected_batch_size / max(1.0, n_used))
        return q, int(math.ceil(cfg.epochs / q))

    def preflight(self) -> None:
        """With a public size bound, T is known before the data: check it against the ceiling."""
        from ...accounting.calibration import check_steps

        cfg = self.config
        check_bound(cfg)
        if cfg.dataset_size == "public_bound":
            check_steps(self._plan(cfg, cfg.size_bound)[1], field="epochs",
                        hint="lower epochs or size_bound, or raise expected_batch_size")

    def _event(self, sigma: float, q: float, t: int):
        from ... import accounting as acc

        ev = acc.PoissonSubsampledGaussian(noise_multiplier=sigma, sample_rate=q, steps=t)
        return ev if self.count_event_ is None else acc.AdaptiveComposition(self.count_event_, ev)

    def fit(self, split: Any, *, on_step=None):
        from ... import accounting as acc

        cfg = self.config
        check_bound(cfg)
        self._reset()
        Xa = _augment(split.X_private)
        n, C = len(Xa), split.n_classes
        Y = np.eye(C)[np.asarray(split.y_private)]
        rng = noise_rng(cfg.noise, cfg.seed, 0x5CD)
        # N enters only through n_used (module docstring): a noisy count (accounted), a public
        # bound, or the exact count declared public.
        # the run ledger: budget before the count reads the rows; plan once q and T are known
        ledger = acc.RunLedger(budget_epsilon=cfg.target_epsilon, delta=cfg.target_delta)
        self.ledger_ = ledger
        n_used, self.count_event_ = resolve_private_count(cfg, n, seed=cfg.seed)
        if self.count_event_ is not None:  # its output sets q and T
            ledger.release(self.count_event_, what="noisy private count", chooses_next=True)
        self.n_used_ = n_used
        q, T = self._plan(cfg, n_used)
        delta = cfg.target_delta
        # σ_eff: noise multiplier of the whole per-step release (for Global-Adapt the
        # gradient sum and the unclipped count together form one Gaussian mechanism with
        # 1/σ_eff² = 1/σ_g² + 1/σ_b²). Calibrated (PLD by default) for the composition with
        # the noisy count, if any; T above the step ceiling is refused before any step.
        sigma = float(acc.calibrate_dpsgd_noise(sample_rate=q, steps=T, target_epsilon=cfg.target_epsilon,
                                                 target_delta=delta, accountant=cfg.accountant,
                                                 also=self.count_event_, step_field="epochs"))
        ledger.plan = self._event(sigma, q, T)
        ledger.accountant = cfg.accountant if q < 1.0 else None
        # one step's release (for Global-Adapt: gradient sum and unclipped count, together one
        # Gaussian mechanism of noise multiplier sigma)
        one_step = acc.PoissonSubsampledGaussian(noise_multiplier=sigma, sample_rate=q, steps=1)
        if self.adaptive:
            k = cfg.count_noise_ratio
            sigma_g = sigma * math.sqrt(1.0 + 1.0 / k**2)
            sigma_b = k * sigma_g
        else:
            sigma_g, sigma_b = sigma, None
        W = np.zeros((Xa.shape[1], C))
        V = np.zeros_like(W)
        Z = cfg.initial_threshold if self.adaptive else None
        C0 = cfg.clip_norm
        report_every = max(1, int(round(1.0 / q)))
        self.threshold_history_ = []
        # Per-instance DP (owner-only diagnostic, evaluation/pdp.py; Feldman & Zrnic 2021, Yu et
        # al. 2023): every row's step contribution relative to the accounted sensitivity,
        # from its gradient norm at W_t whether or not it is sampled.
        # Running individual RDP: O(N x 33) memory whatever T (an N x T ratio table was kept before).
        from ...accounting.pdp import SubsampledGaussianPDP

        self.pdp_accumulator_ = SubsampledGaussianPDP(n, sample_rate=q, noise_multiplier=sigma)
        for t in range(1, T + 1):
            all_norms = np.linalg.norm(Xa, axis=1) * np.linalg.norm(_softmax(Xa @ W) - Y, axis=1)
            if self.adaptive:
                r_g = np.minimum(all_norms / Z, 1.0)
                self.pdp_accumulator_.add(sigma * np.sqrt(r_g**2 / sigma_g**2 + (all_norms <= Z) / sigma_b**2))
            else:
                self.pdp_accumulator_.add(np.minimum(all_norms / C0, 1.0))
            mask = rng.random(n) < q
            Xb, Yb = Xa[mask], Y[mask]
            R, norms = per_example_grad_norms(W, Xb, Yb)
            if self.adaptive:
                # ğ_i = min(C0/Z, C0/||g_i||) g_i: scaled if ||g_i|| <= Z, clipped to C0 otherwise.
                s = np.minimum(C0 / Z, C0 / np.maximum(norms, 1e-12))
                unclipped = float(np.sum(norms <= Z))
            else:
                s = np.minimum(1.0, C0 / np.maximum(norms, 1e-12))
            G = Xb.T @ (R * s[:, None]) + rng.normal(0.0, sigma_g * C0, size=W.shape)
            notify_release(t, W, G, C0)  # white-box audits only (methods/_observe.py)
            ledger.release(one_step, what="DP-SGD step")
            G /= q * n_used
            V = 0.9 * V + G
            W = W - cfg.lr * V
            if self.adaptive:
                b_bar = snap_release(unclipped + rng.normal(0.0, sigma_b), sigma_b) / (q * n_used)
                # Post-processing of the released noisy fraction. A tiny Poisson batch makes that
                # fraction very noisy (n_used small), and an unbounded geometric update then
                # underflowed Z to 0 (division by zero at the next step, found on digits): the
                # exponent and Z are kept in a finite range (per-sample norms here are <= sqrt(2)).
                step = float(np.clip(-cfg.threshold_lr * (b_bar - cfg.target_unclipped), -20.0, 20.0))
                Z = float(np.clip(Z * math.exp(step), 1e-6, 1e6))
                self.threshold_history_.append(Z)
            self.steps_ = t
            if t % report_every == 0 or t == T:
                eps_t = self._epsilon_spent(sigma, q, t, T, delta)
                rec = StepRecord(step=t, total_steps=T, clip_norm=C0 if not self.adaptive else float(Z),
                                 epsilon_spent=float(eps_t),
                                 train_loss=float(-np.mean(np.log(_softmax(Xa @ W)[np.arange(n), split.y_private] + 1e-12))))
                if self._emit(on_step, rec):
                    break
        self.coef_ = W
        self.sample_rate_ = q
        self.noise_multiplier_ = sigma
        if not self.steps_:  # no step ran (T = 0 cannot happen: calibration refuses it); charged one
            ledger.release(one_step, what="DP-SGD step (none ran: charged one)")
        ev = ledger.event()
        rep = ledger.report()
        if cfg.dataset_size == "public":
            rep = dataclasses.replace(rep, mechanism=rep.mechanism + " [N_private treated as public: q and T "
                                                                  "set from the exact private count, not accounted]")
        elif cfg.dataset_size == "public_bound":
            rep = dataclasses.replace(rep, mechanism=rep.mechanism + f" [q and T from the public size bound "
                                                                  f"{cfg.size_bound}]")
        else:
            rep = dataclasses.replace(rep, mechanism=rep.mechanism + " [q and T from a noisy private count, "
                                                                  "accounted as a pure first release, basic adaptive composition]")
        self.privacy_ = rep
        self.epsilon_rdp_ = float(acc.epsilon(ev, delta=delta, accountant="rdp"))
        return self

    def _epsilon_spent(self, sigma: float, q: float, t: int, T: int, delta: float) -> float:
        """ε after t steps with the run's accountant (PLD: a coarser pessimistic grid for
        the intermediate points, an upper bound; the last point is the reported value)."""
        from ...accounting.curves import dpsgd_epsilon

        return dpsgd_epsilon(noise_multiplier=sigma, sample_rate=q, steps=t, delta=delta,
                             accountant=self.config.accountant, also=self.count_event_, fast=t < T)


@METHODS.register("dp_linear_probe")
class DPLinearProbe(_LinearHead):
    """DP-SGD linear probe (baseline of Wahdany et al., Sec. 5; Abadi et al. 2016).

    Mechanism: per step, a Poisson(q) batch B; per-example gradients clipped to ``clip_norm``
    (sensitivity C under add/remove of one private row), summed, plus ``N(0, σ² C² I)``:
    ``W ← W − η (Σ_{i∈B} clip(g_i, C) + N(0, σ²C² I)) / (q n̂)`` (Abadi et al. 2016, Alg. 1);
    before the steps, by
    default, a noisy private count (two-sided geometric, pure ε_c-DP, sensitivity 1 under
    add/remove) sets q and T. σ is calibrated by the accounting module (PLD) so that the
    Poisson-subsampled Gaussian × T meets (ε − ε_c, δ) whatever the count was; basic
    adaptive composition gives (ε, δ) for the run (``accounting.AdaptiveComposition``).
    Closed-form per-example gradients (module docstring). ``noise_multiplier_`` = σ.
    """

    config_cls = DPLinearProbeConfig
    description = "DP-SGD on a linear head (Poisson sampling, closed-form per-example clipping)"
    paper = "Baseline in Wahdany et al., Sec. 5 (DP-SGD, Abadi et al. 2016)"


@METHODS.register("dpsgd_global_adapt")
class DPSGDGlobalAdapt(_LinearHead):
    """DPSGD-Global-Adapt (Esipova et al., ICLR 2023, Alg. 2) on a linear head.

    Mechanism, per Poisson(q) step: per-example gradients are *scaled* by ``C0/Z`` when
    ``||g_i|| <= Z`` and clipped to ``C0`` otherwise (each contribution has norm <= C0),
    summed plus ``N(0, σ_g² C0² I)``; the number of unscaled-norm examples ``Σ 1[||g_i|| <= Z]``
    (sensitivity 1) is released with ``N(0, σ_b²)`` and drives
    ``Z <- Z exp(−η_Z (b̄ − γ))``. Both releases form one Gaussian mechanism with
    ``1/σ² = 1/σ_g² + 1/σ_b²`` on the subsample (add/remove one sample), accounted as a
    Poisson-subsampled Gaussian with multiplier σ (``noise_multiplier_``), composed with the
    noisy private count that sets q and T (default; see ``dataset_size``), calibrated (PLD)
    to the target. Simplification: linear head only, fixed hyper-parameters.
    """

    config_cls = GlobalAdaptConfig
    description = "DPSGD-Global-Adapt: scale instead of clip, adaptive threshold (Esipova et al. 2023)"
    paper = "Esipova et al., Disparate impact in DP from gradient misalignment, ICLR 2023, Alg. 2"
    adaptive = True


#: Largest feature dimension DP-LS takes: it builds and solves a (D+1) x (D+1) system, several
#: float64 copies (measured: D = 8,192 took 2.2 GB and 10.5 s; D = 65,536 would ask 160 GB).
DPLS_MAX_DIM = 8192


@dataclass(frozen=True, kw_only=True)
class DPLSConfig(SeededPrivacyConfig):
    """DP least squares (each field declares its range and help below)."""

    cov_fraction: float = param(0.5, type=float, range=Interval(1e-3, 0.999),
                                help="Share of ρ spent on the feature second moment.")
    reg: float = param(1.0, type=float, range=Interval(0.0, 1e8), help="Ridge λ0 added to the noisy second moment.")
    noise_reg: float = param(3.0, type=float, range=Interval(0.0, 1e4),
                             help="Multiple of the expected spectral norm of the covariance noise (2 σ_A sqrt(d+1)) "
                                  "added to λ, keeping the system well conditioned.")


#: L2 sensitivity of DP-LS's released upper triangle of ``Σ x̃ x̃^T`` (see :class:`DPLS`).
DPLS_COV_SENSITIVITY = math.sqrt(0.75)


@METHODS.register("dp_ls")
class DPLS(PrototypeFamilyMethod):
    """DP-LS (Mehta et al., TMLR 2023: "Differentially private image classification from features"; a baseline of
    Wahdany et al., Sec. 5): ridge regression on one-hot targets from noisy sufficient statistics.
    Neighbours add or remove one private row; the two releases below are Gaussian mechanisms
    with the stated L2 sensitivities, composed as ρ-zCDP.

    With ``x̃ = [x/||x||, 1]/sqrt(2)`` (``||x̃|| = 1``) and one-hot ``y`` (``||y|| = 1``):

    * ``A = Σ x̃ x̃^T`` — what is released is its upper triangle (diagonal included), ``A + E``
      with ``E`` symmetric and an i.i.d. ``N(0, σ_A²)`` upper triangle. Adding/removing one
      row moves those ``D(D+1)/2`` coordinates by ``x̃_i x̃_j`` (i ≤ j), of squared L2 norm
      ``(||x̃||⁴ + Σ x̃_i⁴)/2 = (1 + Σ x̃_i⁴)/2 ≤ 3/4`` (the last coordinate is 1/√2, the others
      hold squared norm 1/2, so ``Σ x̃_i⁴ ≤ 1/4 + 1/4``): sensitivity
      :data:`DPLS_COV_SENSITIVITY` ``= √¾``, attained by a row on one axis;
    * ``b = Σ x̃ y^T`` — sensitivity ``||x̃||·||y|| = 1``; released with ``N(0, σ_b²)``.

    ``σ_A = √¾/sqrt(2 ρ f)``, ``σ_b = 1/sqrt(2 ρ (1−f))`` (each a Gaussian mechanism with
    noise multiplier ``1/sqrt(2 ρ f)``, resp. ``1/sqrt(2 ρ (1−f))``, in units of its
    sensitivity), ρ the largest budget whose (ε, δ)
    (accounting module, composition of the two Gaussians) is within the target; weights
    ``W = (A + E + λ I)^{-1} (b + noise)``, ``λ = reg + noise_reg · 2 σ_A sqrt(d+1)``.
    """

    config_cls = DPLSConfig
    description = "DP least squares from noisy sufficient statistics (Mehta et al. 2023)"
    paper = "Mehta et al., Differentially private image classification from features, TMLR 2023"

    @staticmethod
    def _stats(X: np.ndarray) -> np.ndarray:
        return _augment(X) / math.sqrt(2.0)

    def _event(self, rho: float):
        from ... import accounting as acc

        f = self.config.cov_fraction
        return acc.Composition([
            acc.GaussianMechanism(noise_multiplier=1.0 / math.sqrt(2.0 * rho * f)),
            acc.GaussianMechanism(noise_multiplier=1.0 / math.sqrt(2.0 * rho * (1 - f))),
        ])

    def fit(self, split: Any, *, on_step=None) -> "DPLS":
        from ... import accounting as acc

        cfg = self.config
        self._reset()
        d = int(np.shape(split.X_private)[1]) + 1  # the augmented dimension, before any allocation
        if d > DPLS_MAX_DIM + 1:
            raise DataError(f"X_private: dp_ls solves a noisy (D+1) x (D+1) system (memory ~ 5·8·D² bytes, time ~ "
                            f"D³): D = {d - 1:,} is above its limit of {DPLS_MAX_DIM:,} (DPLS_MAX_DIM); reduce the "
                            f"dimension (another encoder, or image_size) or use another method")
        delta = cfg.target_delta
        rho = largest_param(lambda r: acc.epsilon(self._event(r), delta=delta),
                            target_epsilon=cfg.target_epsilon, lo=1e-10, hi=1e6)
        Xs = self._stats(split.X_private)
        D, C = Xs.shape[1], split.n_classes
        Y = np.eye(C)[np.asarray(split.y_private)]
        sA = DPLS_COV_SENSITIVITY / math.sqrt(2.0 * rho * cfg.cov_fraction)
        sb = 1.0 / math.sqrt(2.0 * rho * (1 - cfg.cov_fraction))
        ledger = acc.RunLedger(budget_epsilon=cfg.target_epsilon, delta=delta, plan=self._event(rho))
        self.ledger_ = ledger
        rng = noise_rng(cfg.noise, cfg.seed, 0x715)
        E = np.triu(rng.normal(0.0, sA, size=(D, D)))
        E = E + np.triu(E, 1).T
        A = Xs.T @ Xs + E
        ledger.release(acc.GaussianMechanism(noise_multiplier=sA, sensitivity=DPLS_COV_SENSITIVITY),
                       what="noisy second moment (upper triangle)")
        b = Xs.T @ Y + rng.normal(0.0, sb, size=(D, C))
        ledger.release(acc.GaussianMechanism(noise_multiplier=sb), what="noisy Xᵀ Y")
        lam = cfg.reg + cfg.noise_reg * 2.0 * sA * math.sqrt(D)
        self.coef_ = np.linalg.solve(A + lam * np.eye(D), b)
        self.rho_ = rho
        self.noise_multiplier_ = (sA, sb)
        self.steps_ = 1
        self.privacy_ = ledger.report()
        self._emit(on_step, StepRecord(step=1, total_steps=1, epsilon_spent=float(self.privacy_.epsilon)))
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        self._check_fitted()
        return self._stats(X) @ self.coef_
