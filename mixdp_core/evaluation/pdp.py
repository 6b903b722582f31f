"""Per-instance DP (pDP) losses of every method family, computed along the realised run.

**Owner-only diagnostic, not a released guarantee.** ε_i depends on the private data; the
JSON, the store (``pdp_owner_only``) and the UI say so. Families:

* NoisyGD / AdaMix (below; AdaMix App. C, Prop. 14).
* DPPL-Mean: CoinPress steps are Gaussian mechanisms; sample ``j``'s share of step ``t``'s
  sensitivity is ``r = (‖proj(x_j) - c‖ + R)/(2R)`` (replace-one) or ``‖proj(x_j) - c‖/R``
  (add/remove, plus the noisy count charged in full); ``μ_j = sqrt(Σ_t (r_{j,t}/σ_t)²)``
  (:func:`~mixdp_core.accounting.pdp.pdp_epsilon_gaussian_steps`).
* DP-SGD linear probes (``dp_linear_probe``, ``dpsgd_global_adapt``): the individual privacy
  loss of the Poisson-subsampled Gaussian at sensitivity ``r_{i,t} = min(‖g_i(w_t)‖, C)/C``
  for every row at every step (Feldman & Zrnic 2021; Yu et al. 2023), accounted with the
  run's own accountant family — PLD by default (dominating per-row profiles), RDP for RDP
  runs — so that no ε_i exceeds the run's ε without any clipping
  (:class:`~mixdp_core.accounting.pdp.SubsampledGaussianPDP`).
* Sparse fine-tuning (``sparse_finetune*``, ``dpsgd_full_network``): the same individual RDP,
  with the clip ratios of all private rows computed by ``torch.func`` every ``k`` steps
  (``pdp_overhead`` bounds their cost; ``k = 1`` exact, ``k > 1`` an **estimate**, the
  metric ``pdp_epsilon_kind`` says which), accumulated per sample in O(N) memory
  (:class:`~mixdp_core.accounting.pdp.SubsampledGaussianPDP`). The noisy private count, if
  any, is charged to every sample in full and added as the run adds it (here and for the
  linear probes).
* DP-LS: both statistics are Gaussian mechanisms; a row moves the released upper triangle of
  ``A`` by ``sqrt((‖x̃‖⁴ + Σ_j x̃_j⁴)/2) ≤ √¾`` (the accounted sensitivity, reached by rows on
  one axis) and ``b`` by ``‖x̃‖ = 1``, so ε_i ≤ ε with equality for the worst-case rows.
* DPPL-Public: the exponential mechanism's exact per-instance loss
  ``max_j |log P_D(j) - log P_{D∖z_i}(j)|`` (:func:`~mixdp_core.accounting.pdp.pdp_epsilon_exponential`),
  a pure (δ = 0) ε_i.
* DPPL-Public-TopK: the joint top-K exponential mechanism's exact per-instance loss
  ``max_S |log P_D[S] - log P_{D∖z_i}[S]|`` over all K-sets, found without enumerating them
  (:func:`~mixdp_core.accounting.pdp.pdp_epsilon_topk_exponential`; pure, δ = 0).
* No per-instance analysis (:data:`PDP_UNAVAILABLE` says why): non-private methods and
  methods that read no private data.

Per-instance DP of NoisyGD-type methods (AdaMix paper, App. C, Prop. 14).

For a full-batch noisy gradient method with noise ``N(0, σ² τ_t² I)`` and a per-sample
gradient clipped to ``τ_t`` (sensitivity ``τ_t`` under add/remove-one-sample), the step-t
contribution of sample ``i`` has norm ``r_{i,t} τ_t`` with ratio ``r_{i,t} ∈ [0, 1]`` (after
clipping and projection). Composing the T Gaussian steps gives sample ``i`` a per-instance
Gaussian-DP parameter ``μ_i = sqrt(Σ_t r_{i,t}²) / σ``, turned into ``ε_i`` at the run's δ
with the Gaussian-mechanism formula. The method provides ``Σ_t r_{i,t}²``
(``pdp_sq_ratio_sum_``); the conversion is :func:`mixdp_core.accounting.pdp_epsilon`.

pDP values depend on the private data and must not be released without further care; they
are shown only to the data owner.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

#: Quantiles reported in run metrics (``pdp_epsilon_q05`` ... ).
PDP_QUANTILES: dict[str, float] = {
    "min": 0.0,
    "q05": 0.05,
    "q25": 0.25,
    "median": 0.5,
    "q75": 0.75,
    "q95": 0.95,
    "max": 1.0,
}


#: Why a method has no per-instance analysis (shown by the audit page).
PDP_UNAVAILABLE: dict[str, str] = {
    "sparse_finetune": "the run was trained with pdp_overhead = 0 (no per-sample gradient norms recorded)",
    "paragon": "non-private: no guarantee to refine (ε = ∞)",
    "only_public": "reads no private data (ε_i = 0)",
    "zero_shot": "reads no private data (ε_i = 0)",
}
for _m in ("sparse_finetune_cls", "sparse_finetune_cls_norm", "dpsgd_full_network"):
    PDP_UNAVAILABLE[_m] = PDP_UNAVAILABLE["sparse_finetune"]


def per_instance_epsilon(model: Any, *, delta: float, split: Any = None) -> np.ndarray | None:
    """ε_i of every private sample for a fitted model, or ``None`` if it does not apply.

    Args:
        model: a fitted :class:`~mixdp_core.methods.base.Method`.
        delta: δ of the (ε_i, δ)-pDP statements (the run's target δ).
        split: the split it was trained on (needed by DP-LS and DPPL-Public).

    Returns:
        ``(N_private,)`` array of ε_i in the order of ``split.X_private``.
    """
    sq = getattr(model, "pdp_sq_ratio_sum_", None)
    sigma = getattr(model, "noise_multiplier_", None)
    if sq is not None and sigma is not None:
        from ..accounting import pdp_epsilon

        return np.asarray(pdp_epsilon(np.asarray(sq, dtype=np.float64), noise_multiplier=float(sigma),
                                      delta=float(delta)))
    # Not clipped to the run's ε: every family's analysis below stays under it by itself
    # (tests/evaluation/test_pdp_families.py checks it per family).
    return _family_pdp(model, delta=delta, split=split)


def _family_pdp(model: Any, *, delta: float, split: Any) -> np.ndarray | None:
    from ..accounting import pdp as P

    name = type(model).__name__
    ratios = getattr(model, "pdp_step_ratios_", None)
    if name == "DPPLMean" and ratios is not None:
        sig = np.asarray(model.noise_multiplier_, dtype=np.float64)
        extra = 0.0
        if model.config.neighbouring == "add_remove":  # the noisy count comes first, charged in full
            extra, sig = 1.0 / sig[0] ** 2, sig[1:]
        return P.pdp_epsilon_gaussian_steps(ratios, sig, delta=delta, extra_mu_sq=extra)
    if name == "DPLS" and split is not None:
        xs = model._stats(split.X_private)
        nrm = np.linalg.norm(xs, axis=1)
        # what the row moves in the released upper triangle of A (sensitivity √¾ at worst) and in b
        r_A = np.sqrt((nrm**4 + np.sum(xs**4, axis=1)) / 2.0)
        sA, sb = model.noise_multiplier_
        return P.pdp_epsilon_gaussian_steps(np.stack([r_A, nrm], axis=1), np.array([sA, sb]), delta=delta)
    if name == "DPPLPublic" and split is not None:
        return _dppl_public_pdp(model, split)
    if name == "DPPLPublicTopK" and split is not None:
        return _dppl_public_topk_pdp(model, split)
    acc = getattr(model, "pdp_accumulator_", None)
    if acc is not None:  # DP-SGD probes and sparse fine-tuning: running individual RDP (sparse
        # fine-tuning computes the norms every pdp_every_ steps; the probes at every step)
        # the release that chose q and T (the noisy count), read from the run ledger
        led = getattr(model, "ledger_", None)
        first = (next((r.event for r in led.releases if r.chooses_next), None) if led is not None
                 else getattr(model, "count_event_", None))
        return acc.epsilon(delta=delta, also=first,
                           accountant=getattr(getattr(model, "config", None), "accountant", "pld"))
    return None


def _public_shares(model: Any, split: Any, max_cells: float) -> tuple[np.ndarray, np.ndarray, float] | None:
    """``(U, V, Δu)``: per-class utilities ``(C, P)`` and each private sample's share ``(N, P)``.

    ``V[i, j] = clip(1 + cos(x_i, p_j), d_min, d_max) − d_min ∈ [0, Δu]`` is what sample ``i``
    adds to its class's utility of candidate ``j`` (Eq. 14), so ``U[y_i] − V[i]`` are the
    utilities without it (add/remove neighbours). ``None`` above ``max_cells`` entries.
    """
    from ..methods.prototypes.utilities import l2_normalize, load_public_pool, public_utilities

    cfg = model.config
    # the pool the run drew from (an in-memory pool given to fit is not the config's)
    pool = getattr(model, "public_pool_used_", None)
    if pool is None:
        pool = load_public_pool(cfg.public_pool, split, None)
    if pool.shape[0] * len(split.y_private) > max_cells:  # before the float64 copy
        return None
    pool = np.asarray(pool, dtype=np.float64)
    # the utilities the run drew from (bf16 products where it recorded them; each sample's
    # share below stays exact, so U[y_i] - V[i] is the bf16 utility without i to rounding)
    U = public_utilities(split.X_private, split.y_private, pool, n_classes=split.n_classes,
                         d_min=cfg.d_min, d_max=cfg.d_max, precision=getattr(model, "utilities_precision_", "fp32"))
    cos = l2_normalize(np.asarray(split.X_private, np.float64)) @ l2_normalize(pool).T
    V = np.clip(1.0 + cos, cfg.d_min, cfg.d_max) - cfg.d_min
    return U, V, cfg.d_max - cfg.d_min


def _per_class(split: Any, one_class: Callable[[int, np.ndarray], np.ndarray]) -> np.ndarray:
    """ε_i of every private row from a per-class mechanism: a row enters only its own class's
    draw (parallel composition), so ``one_class(c, rows)`` gives the ε_i of class ``c``'s rows."""
    out = np.zeros(len(split.y_private))
    for c in range(split.n_classes):
        rows = np.flatnonzero(split.y_private == c)
        if rows.size:
            out[rows] = one_class(c, rows)
    return out


def _dppl_public_pdp(model: Any, split: Any, max_cells: float = 5e7) -> np.ndarray | None:
    """Exact per-instance ε_i of the per-class exponential mechanism of DPPL-Public."""
    from ..accounting import pdp as P
    from ..methods.prototypes.utilities import em_log_probs

    got = _public_shares(model, split, max_cells)
    if got is None:
        return None
    U, V, sens = got

    def one_class(c: int, rows: np.ndarray) -> np.ndarray:
        lp = em_log_probs(U[c], epsilon=model.epsilon_em_, sensitivity=sens, monotone=True)
        lpw = np.stack([em_log_probs(U[c] - V[i], epsilon=model.epsilon_em_, sensitivity=sens, monotone=True)
                        for i in rows])
        return P.pdp_epsilon_exponential(lp, lpw)

    return _per_class(split, one_class)


def _dppl_public_topk_pdp(model: Any, split: Any, max_cells: float = 5e7) -> np.ndarray | None:
    """Exact per-instance ε_i of DPPL-PublicK's per-class joint top-K exponential mechanism.

    Sample ``i`` only enters its own class's draw (parallel composition over classes), so
    ε_i is that draw's exact pure per-instance loss
    (:func:`~mixdp_core.accounting.pdp.pdp_epsilon_topk_exponential`), with the sampler's
    own exponent: ``ε_EM/Δu`` (``sampling="monotone"``) or ``ε_EM/(2Δu)`` (``"paper"``), read
    from the fitted method's ``monotone``.
    """
    from ..accounting import pdp as P

    got = _public_shares(model, split, max_cells)
    if got is None:
        return None
    U, V, sens = got
    return _per_class(split, lambda c, rows: P.pdp_epsilon_topk_exponential(
        U[c], V[rows], k=model.config.k, epsilon=model.epsilon_em_, sensitivity=sens, monotone=bool(model.monotone)))


def pdp_kind(model: Any) -> str:
    """How ε_i was obtained: ``"exact"`` (the realised run's per-instance analysis), or
    ``"estimate"`` (sparse fine-tuning with norms every ``k > 1`` steps: the steps in between
    reuse the last norms, Yu et al. 2023)."""
    k = getattr(model, "pdp_every_", None)
    if getattr(model, "pdp_accumulator_", None) is not None and k and k > 1:
        return f"estimate (per-sample norms every {int(k)} steps, reused in between)"
    return "exact"


def pdp_summary(eps_i: np.ndarray | None) -> dict[str, float | None]:
    """Quantiles and mean of ε_i as ``{"pdp_epsilon_min": ..., "pdp_epsilon_mean": ...}``."""
    keys = [f"pdp_epsilon_{k}" for k in PDP_QUANTILES] + ["pdp_epsilon_mean"]
    if eps_i is None or len(eps_i) == 0:
        return {k: None for k in keys}
    e = np.asarray(eps_i, dtype=np.float64)
    out: dict[str, float | None] = {
        f"pdp_epsilon_{k}": float(np.quantile(e, q)) for k, q in PDP_QUANTILES.items()
    }
    out["pdp_epsilon_mean"] = float(e.mean())
    return out
