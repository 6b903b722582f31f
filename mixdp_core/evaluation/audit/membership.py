r"""Membership-inference attacks evaluated on class-matched members and non-members.

* :func:`loss_attack`: the loss-threshold attack (Yeom et al. 2018) on the released model,
  members = private rows, non-members = test rows, **matched per class**
  (:func:`~mixdp_core.evaluation.mia.class_matched_indices`). The unmatched AUC is reported
  beside it: under class imbalance it measures the class prior, not membership.
* :func:`lira_attack`: the Likelihood-Ratio Attack of Carlini et al. 2022 ("Membership
  Inference Attacks From First Principles"), online and offline, plus RMIA (Zarifzadeh et al.
  2024, "Low-Cost High-Power Membership Inference Attacks") from the same reference models.

LiRA setting (Carlini et al., Sec. IV and Alg. 1). The candidate pool is the private set. The
method itself (same ε, δ and hyper-parameters, a fresh noise seed) is trained ``K + 1`` times,
model ``j`` on the rows with ``in[j, i] = 1``, each drawn independently with probability 1/2.
Each model in turn is the target and the ``K`` others are its reference models (leave-one-out,
as in the paper's evaluation). The statistic is the logit-scaled confidence of the true class
(their Eq. (4)), ``φ = log(p_y / (1 - p_y))``. For target ``θ`` and sample ``x``:

* online (Alg. 1): Gaussians ``N(μ_in, σ_in²)`` and ``N(μ_out, σ_out²)`` are fitted to φ over
  the reference models that did / did not train on ``x``; score
  ``Λ = log N(φ(θ, x); μ_in, σ_in²) - log N(φ(θ, x); μ_out, σ_out²)`` (the likelihood ratio);
* offline (Sec. VI-C): only ``N(μ_out, σ_out²)``; score = the one-sided statistic
  ``(φ - μ_out) / σ_out`` (monotone in ``1 - p``-value);
* variance: per example (default) or one global variance per side (Sec. VI-A "fixed variance"),
  used for examples with fewer than 2 IN or OUT reference models.

RMIA (Zarifzadeh et al. 2024, Eq. (3)-(5)): ``LR(x, z) = [p(x|θ)/p(x)] / [p(z|θ)/p(z)]`` with
``p(x) = mean`` of ``p(x|θ_ref)`` over all reference models (online) and population samples
``z`` = the test rows (never trained on); score(x) = fraction of ``z`` with ``LR(x, z) >= γ``,
γ = 1.

Metrics are computed, for each target, on class-matched members and non-members of that target
and pooled over targets. The empirical ε lower bound uses target 0 alone: its ``in`` bits are
independent fair coins drawn before training and its reference models do not depend on them,
which is the setting of the one-run audit (Steinke et al. 2023, Thm. 5.2), so the bound is
valid although the pool's samples share one training run.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ..mia import auc_score, class_matched_indices, cross_entropy_losses
from .executor import map_jobs
from .jobs import TrainJob, logit_confidence, make_audited_method, run_train_job, true_class_prob
from .stats import membership_metrics, one_run_epsilon_lower_bound


def loss_attack(model: Any, split: Any, *, seed: int = 0) -> dict[str, Any]:
    """Class-matched loss-threshold attack on a fitted model (no extra training).

    Returns:
        :func:`~.stats.membership_metrics` of the class-matched sets plus ``auc_unmatched``
        (members and non-members only size-balanced, the legacy evaluation) and
        ``member_index``/``nonmember_index``.
    """
    lp = cross_entropy_losses(model.decision_function(split.X_private), split.y_private)
    lt = cross_entropy_losses(model.decision_function(split.X_test), split.y_test)
    mi, ni = class_matched_indices(split.y_private, split.y_test, seed=seed)
    out = membership_metrics(-lp[mi], -lt[ni], member_labels=split.y_private[mi],
                             nonmember_labels=split.y_test[ni], n_classes=split.n_classes)
    from ..mia import balanced_indices

    bm, bn = balanced_indices(lp.size, lt.size, seed=seed)
    out["auc_unmatched"] = auc_score(-lp[bm], -lt[bn])
    out["member_index"], out["nonmember_index"] = mi, ni
    return out


def _gauss_fit(phi: np.ndarray, mask: np.ndarray, global_variance: bool):
    """Per-example mean and std of φ over the reference models selected by ``mask``."""
    cnt = mask.sum(axis=0)
    w = mask.astype(np.float64)
    mu = (phi * w).sum(axis=0) / np.maximum(cnt, 1)
    dev2 = ((phi - mu) ** 2 * w).sum(axis=0)
    glob = np.sqrt(dev2.sum() / max(1.0, float((cnt - 1).clip(0).sum())))
    sd = np.sqrt(dev2 / np.maximum(cnt - 1, 1))
    sd = np.where((cnt >= 2) & (not global_variance), sd, glob)
    sd = np.maximum(sd, 1e-6)
    mu = np.where(cnt > 0, mu, np.nan)
    return mu, sd


def lira_scores(phi_target: np.ndarray, phi_ref: np.ndarray, in_ref: np.ndarray, *,
                online: bool = True, global_variance: bool = False) -> np.ndarray:
    """LiRA scores (higher = member) of one target (Carlini et al. 2022, Alg. 1).

    Args:
        phi_target: ``(N,)`` φ of the target model on the pool.
        phi_ref: ``(K, N)`` φ of the reference models.
        in_ref: ``(K, N)`` bool, which reference models trained on which sample.
        online: use IN and OUT Gaussians (else OUT only, offline).
        global_variance: one variance per side for all examples.
    """
    mu_out, sd_out = _gauss_fit(phi_ref, ~in_ref, global_variance)
    mu_out = np.where(np.isnan(mu_out), np.nanmean(mu_out), mu_out)
    if not online:
        return (phi_target - mu_out) / sd_out
    mu_in, sd_in = _gauss_fit(phi_ref, in_ref, global_variance)
    mu_in = np.where(np.isnan(mu_in), np.nanmean(mu_in), mu_in)
    from scipy.stats import norm  # lazy: ~0.5 s of CPU, and training runs import this module

    return norm.logpdf(phi_target, mu_in, sd_in) - norm.logpdf(phi_target, mu_out, sd_out)


def rmia_scores(p_target_x: np.ndarray, p_ref_x: np.ndarray, p_target_z: np.ndarray, p_ref_z: np.ndarray,
                *, gamma: float = 1.0) -> np.ndarray:
    """RMIA scores (Zarifzadeh et al. 2024, Eq. (5), online ``p(x)`` = mean over references)."""
    rx = p_target_x / np.maximum(p_ref_x.mean(axis=0), 1e-300)
    rz = np.sort(p_target_z / np.maximum(p_ref_z.mean(axis=0), 1e-300))
    # fraction of z with rx / rz >= gamma  <=>  rz <= rx / gamma
    return np.searchsorted(rz, rx / gamma, side="right") / rz.size


def lira_attack(
    method: Any,
    params: dict[str, Any],
    split: Any,
    *,
    reference_models: int = 16,
    seed: int = 0,
    delta: float = 1e-5,
    confidence: float = 0.95,
    executor: Any = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> dict[str, Any]:
    """LiRA (online/offline, per-example and global variance) and RMIA with K reference models.

    Args:
        method, params: the audited method and its config fields (``target_epsilon``, ...).
        split: the run's split; its private rows are the candidate pool.
        reference_models: K; ``K + 1`` trainings in total (each model is target once).
        seed: seed of the ``in`` coins (and of every model's noise only with ``noise="reproducible"``).
        delta, confidence: of the empirical ε lower bound (one-run bound on target 0).
        executor, progress: see :func:`~.executor.map_jobs`.

    Returns:
        metrics of the main attack (online LiRA, per-example variance) and
        ``variants = {name: metrics}`` for ``lira_online``, ``lira_offline``,
        ``lira_online_global``, ``lira_offline_global``, ``rmia``; ``epsilon_bound`` (from
        online LiRA); ``n_models``.
    """
    K = int(reference_models)
    if K < 2:
        raise ValueError("reference_models must be >= 2")
    X, y = split.X_private, split.y_private
    n = len(y)
    rng = np.random.default_rng([seed, 0x11AA])
    inm = rng.random((K + 1, n)) < 0.5
    jobs = []
    for j in range(K + 1):
        p = dict(params, seed=int(seed) * 1000 + j + 1)
        from .jobs import with_private

        jobs.append(TrainJob(method, p, with_private(split, X[inm[j]], y[inm[j]]), (X, split.X_test)))
    outs = map_jobs(run_train_job, jobs, executor=executor, progress=progress)
    phi = np.stack([logit_confidence(o.scores[0], y) for o in outs])  # (K+1, n)
    px = np.stack([true_class_prob(o.scores[0], y) for o in outs])
    pz = np.stack([true_class_prob(o.scores[1], split.y_test) for o in outs])

    variants = {"lira_online": (True, False), "lira_offline": (False, False),
                "lira_online_global": (True, True), "lira_offline_global": (False, True)}
    pooled: dict[str, tuple[list, list, list, list]] = {k: ([], [], [], []) for k in list(variants) + ["rmia"]}
    scores0 = None
    for j in range(K + 1):
        ref = np.delete(np.arange(K + 1), j)
        mi, ni = class_matched_indices(y[inm[j]], y[~inm[j]], seed=seed + j)
        mem, non = np.flatnonzero(inm[j])[mi], np.flatnonzero(~inm[j])[ni]
        for name, (online, glob) in variants.items():
            s = lira_scores(phi[j], phi[ref], inm[ref], online=online, global_variance=glob)
            if j == 0 and name == "lira_online":
                scores0 = s
            acc = pooled[name]
            acc[0].append(s[mem]); acc[1].append(s[non]); acc[2].append(y[mem]); acc[3].append(y[non])
        s = rmia_scores(px[j], px[ref], pz[j], pz[ref])
        acc = pooled["rmia"]
        acc[0].append(s[mem]); acc[1].append(s[non]); acc[2].append(y[mem]); acc[3].append(y[non])
    res = {name: membership_metrics(np.concatenate(a), np.concatenate(b), member_labels=np.concatenate(c),
                                    nonmember_labels=np.concatenate(d), n_classes=split.n_classes)
           for name, (a, b, c, d) in pooled.items()}
    bound = one_run_epsilon_lower_bound(scores0, inm[0], delta=delta, confidence=confidence)
    out = dict(res["lira_online"])
    out["variants"] = res
    out["epsilon_bound"] = bound
    out["n_models"] = K + 1
    out["report"] = outs[0]
    return out
