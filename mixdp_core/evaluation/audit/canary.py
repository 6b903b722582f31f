r"""Canary audits: empirical lower bounds on ε, black-box and white-box.

**Black-box input canaries** (:func:`blackbox_canary_audit`; Jagielski et al. 2020, Sec. 4;
Nasr et al. 2021, Sec. 3). The canary is a mislabeled sample: a test image (never in the
training data) given a wrong label. Each trial draws a fair coin, trains the audited method
with the canary added to the private rows iff it is heads, and scores the released model with
the canary's logit-scaled confidence ``φ = log(p/(1-p))`` of its (wrong) label. Trials are
independent trainings, so :func:`~.stats.epsilon_lower_bound` (Clopper–Pearson, threshold
chosen on a separate half) applies.

**White-box Dirac gradient canaries for the NoisyGD family** (:func:`whitebox_canary_audit`;
Nasr et al. 2023, "Tight Auditing of Differentially Private Machine Learning", Sec. 4: Dirac
canary gradients and the sum of the observed noisy gradients' projections, which make audits of
full-batch DP-GD nearly tight). The feature space is extended by ``M`` coordinates that every
real row has at 0; canary ``j`` is the row ``e_{D+j}`` with a random label, added to the private
rows iff its coin ``b_j`` is heads. The audited method is then trained **through its own code
path** (``run_noisygd``: its clipping, its noise, its step rule); a white-box observer
(:func:`mixdp_core.methods._observe.observe_releases`) reads every released noisy sum ``R_t`` and
the iterate ``W_t`` and accumulates, for each canary,

.. math:: s_j = \sum_t \langle R_t[D+j, :], u_{j,t} \rangle / τ_t,\qquad
          u_{j,t} = (p_{j,t} - e_{y_j}) / \lVert p_{j,t} - e_{y_j} \rVert,

the projection of the release on the canary's own gradient direction (``p_{j,t}`` = softmax of
``W_t[D+j, :]``, known to the white-box auditor). Row ``D+j`` of ``R_t`` holds only canary ``j``'s
clipped gradient (if included) plus the mechanism's noise, and ``W_t[D+j, :]`` evolves only from
that row (no projection: ``fully_private``, ``ngd``, ``ppgd``), so the ``s_j`` are **independent trials**: ``s_j ~ N(0, σ² T)`` if excluded and
``N(Σ_t r_{j,t}, σ² T)`` if included, where ``r_{j,t} = min(‖g_j‖, τ_t)/τ_t <= 1`` is the canary's
per-instance ratio (exactly 1 when its gradient is clipped). One training therefore yields ``M``
trials; ``trials`` canaries are spread over ``ceil(trials / canaries_per_run)`` trainings. The
bound uses :func:`~.stats.epsilon_lower_bound` on ``(s_j | b_j = 1)`` vs ``(s_j | b_j = 0)``, and the
one-run bound of Steinke et al. (2023) on the first training's canaries is reported beside it.

**One run** (:func:`one_run_audit`; Steinke, Nasr & Jagielski 2023, Alg. 1): ``m`` canaries
each included with probability 1/2 in a *single* training (white-box Dirac canaries for the
NoisyGD family, black-box mislabeled test samples otherwise), bound by their Theorem 5.2.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from .executor import map_jobs
from .jobs import TrainJob, logit_confidence, make_audited_method, run_train_job, with_private
from .stats import epsilon_lower_bound, membership_metrics, one_run_epsilon_lower_bound


def is_noisygd_family(method: Any) -> bool:
    """True for methods trained by ``run_noisygd`` (fully_private, ngd, adamix, ppgd)."""
    from ...methods import METHODS
    from ...methods.adamix import NoisyGDMethod

    cls = METHODS.get(method) if isinstance(method, str) else method
    return issubclass(cls, NoisyGDMethod)


def is_dpsgd_linear(method: Any) -> bool:
    """True for the DP-SGD linear probes (``dp_linear_probe``, ``dpsgd_global_adapt``)."""
    from ...methods import METHODS
    from ...methods.prototypes.baselines import _LinearHead

    cls = METHODS.get(method) if isinstance(method, str) else method
    return issubclass(cls, _LinearHead)


def has_bias_row(method: Any) -> bool:
    """Whether the method's weights end with a bias row shared by every input row (the DP-SGD
    probes: yes; a class may declare ``audit_bias_row = False`` when its features have none)."""
    from ...methods import METHODS

    cls = METHODS.get(method) if isinstance(method, str) else method
    return is_dpsgd_linear(cls) and bool(getattr(cls, "audit_bias_row", True))


def whitebox_available(method: Any) -> bool:
    """Methods whose releases the white-box observer sees."""
    return is_noisygd_family(method) or is_dpsgd_linear(method)


def independent_canary_rows(method: Any, params: dict[str, Any]) -> bool:
    """Whether each Dirac canary's release row is untouched by every other row.

    True for NoisyGD without projection (``fully_private``, ``ngd``, ``ppgd``, ``adamix`` with
    ``projection="none"``, its default). AdaMix's optional projection ``U U^T`` mixes coordinates (and DP-SGD's bias row
    couples canaries), so there the canaries are not independent trials.
    """
    from ...methods import METHODS
    from ...methods.adamix import AdaMix

    cls = METHODS.get(method) if isinstance(method, str) else method
    if is_dpsgd_linear(method):
        # DP-SGD: Poisson coins and noise rows are drawn independently per row, so the canaries'
        # rows are independent iff no row is shared (no bias coordinate) and the step size does
        # not depend on how many canaries were included (a public size bound, not a count).
        return (not has_bias_row(cls)) and params.get("dataset_size") == "public_bound"
    if not is_noisygd_family(method):
        return False
    if issubclass(cls, AdaMix):
        # the projection basis follows w_t, a function of every row: with one, canaries couple.
        # The default is read from the declaration (building a config would probe for a GPU).
        from ...config import default_of, describe

        default = next(default_of(s) for s in describe(cls.config_cls) if s.name == "projection")
        return params.get("projection", default) == "none"
    return True


def _mislabeled_canaries(split: Any, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``m`` test rows (never trained on) with a wrong label (``(y + 1 + k) mod C``)."""
    rng = np.random.default_rng([seed, 0xCA9A])
    n = len(split.y_test)
    idx = rng.choice(n, size=min(m, n), replace=False) if m <= n else rng.integers(0, n, m)
    C = split.n_classes
    y = (split.y_test[idx] + 1 + rng.integers(0, C - 1, idx.size)) % C
    return split.X_test[idx].copy(), y.astype(np.int64)


# --------------------------------------------------------------------------- black box


def blackbox_canary_audit(
    method: Any, params: dict[str, Any], split: Any, *, trials: int = 100, seed: int = 0,
    delta: float = 1e-5, confidence: float = 0.95, executor: Any = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> dict[str, Any]:
    """Black-box canary audit: one mislabeled canary, ``trials`` independent trainings."""
    xc, yc = _mislabeled_canaries(split, 1, seed)
    rng = np.random.default_rng([seed, 0xB1B])
    coins = rng.random(int(trials)) < 0.5
    jobs = []
    for i, b in enumerate(coins):
        sp = with_private(split, np.vstack([split.X_private, xc]), np.r_[split.y_private, yc]) if b else split
        jobs.append(TrainJob(method, dict(params, seed=int(seed) * 100003 + i + 1), sp, (xc,)))
    outs = map_jobs(run_train_job, jobs, executor=executor, progress=progress)
    s = np.array([logit_confidence(o.scores[0], yc)[0] for o in outs])
    out = membership_metrics(s[coins], s[~coins])
    out["epsilon_bound"] = epsilon_lower_bound(s[coins], s[~coins], delta=delta, confidence=confidence, seed=seed,
                                               gdp=outs[0].mu is not None)
    out["canary_type"] = "mislabeled test sample (black-box, φ of the wrong label)"
    out["report"] = outs[0]
    return out


def _blackbox_one_run(method, params, split, *, canaries, seed, delta, confidence, executor, progress):
    xc, yc = _mislabeled_canaries(split, canaries, seed)
    coins = np.random.default_rng([seed, 0x0E1]).random(len(yc)) < 0.5
    sp = with_private(split, np.vstack([split.X_private, xc[coins]]), np.r_[split.y_private, yc[coins]])
    (o,) = map_jobs(run_train_job, [TrainJob(method, dict(params, seed=int(seed) + 1), sp, (xc,))],
                    executor=executor, progress=progress)
    s = logit_confidence(o.scores[0], yc)
    out = membership_metrics(s[coins], s[~coins])
    out["epsilon_bound"] = one_run_epsilon_lower_bound(s, coins, delta=delta, confidence=confidence)
    out["canary_type"] = "mislabeled test samples (black-box, one run)"
    out["report"] = o
    return out


# --------------------------------------------------------------------------- white box


@dataclass
class WhiteboxJob:
    """One training with ``M`` Dirac canaries on extra coordinates (picklable)."""

    method: Any
    params: dict[str, Any]
    split: Any
    labels: np.ndarray  # (M,) canary labels
    included: np.ndarray  # (M,) bool coins


@dataclass
class WhiteboxOutput:
    stat: np.ndarray  # (M,) s_j
    steps: int
    mean_ratio: np.ndarray  # (M,) (1/T) sum_t r_{j,t} of the *included* canaries (diagnostic)
    epsilon: Optional[float]
    delta: Optional[float]
    mu: Optional[float]
    profile: Optional[tuple[np.ndarray, np.ndarray]] = None  # claimed (ε_k, δ(ε_k)) where not μ-GDP
    #: the run's ledger (``RunLedger.to_dicts()``): every release the claimed ε covers, of which
    #: the statistic observes the ``steps`` gradient releases only
    ledger: Optional[list] = None


def run_whitebox_job(job: WhiteboxJob) -> WhiteboxOutput:
    """Train with the canaries through the method's own ``run_noisygd`` and observe releases."""
    from ...methods._observe import observe_releases

    bias = has_bias_row(job.method)  # DP-SGD probes append a bias coordinate (last row of W)
    sp = job.split
    D = sp.dim
    M = len(job.labels)
    C = sp.n_classes

    def pad(X):
        return np.hstack([X, np.zeros((len(X), M), np.float32)])

    Xc = np.zeros((M, D + M), np.float32)
    Xc[np.arange(M), D + np.arange(M)] = 1.0
    inc = np.asarray(job.included, bool)
    aug = with_private(sp, np.vstack([pad(sp.X_private), Xc[inc]]), np.r_[sp.y_private, job.labels[inc]],
                       X_public=pad(sp.X_public), X_test=pad(sp.X_test), text_embeddings=None)  # one step: D + M
    Y = np.eye(C)[job.labels]
    stat = np.zeros(M)
    ratio = np.zeros(M)
    steps = [0]

    def observer(t, W, released, tau):
        Wc = np.asarray(W[D:D + M], dtype=np.float64)
        if bias:
            Wc = Wc + np.asarray(W[-1], dtype=np.float64)
        Z = Wc - Wc.max(axis=1, keepdims=True)
        P = np.exp(Z)
        P /= P.sum(axis=1, keepdims=True)
        G = P - Y  # canary gradient rows (unit-norm feature)
        gn = np.linalg.norm(G, axis=1)
        U = G / np.maximum(gn, 1e-300)[:, None]
        stat[:] += np.einsum("ij,ij->i", np.asarray(released[D:D + M], dtype=np.float64), U) / tau
        ratio[:] += np.minimum(gn, tau) / tau
        steps[0] = t

    model = make_audited_method(job.method, job.params)
    with observe_releases(observer):
        model.fit(aug)
    rep = model.privacy_
    ledger = model.ledger_.to_dicts() if getattr(model, "ledger_", None) is not None else None
    return WhiteboxOutput(stat, steps[0], ratio / max(steps[0], 1), float(rep.epsilon), float(rep.delta),
                          None if rep.mu is None else float(rep.mu),
                          claimed_profile(model) if rep.mu is None else None, ledger)


def claimed_profile(model: Any, points: int = 49) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """The claimed privacy profile ``(ε_k, δ(ε_k))`` of a fitted DP-SGD probe, or ``None``.

    The event is the run ledger's (``model.ledger_``: the noisy count, if any, then the
    Poisson-subsampled Gaussian steps as executed, composed basically), δ(ε) from the accountant
    the run reports with (the ledger's: PLD by default for DP-SGD; the module's default for
    subsampled Gaussians is RDP, whose δ(ε) is up to 3× looser, so a wrong PLD claim could never
    have been refuted), or the default's where that is smaller (both are upper bounds), on ``points`` values of ε in ``[0, 4ε + 4]`` (ε the reported one).
    """
    from ... import accounting

    ledger = getattr(model, "ledger_", None)
    if ledger is None or getattr(model, "sample_rate_", None) is None:
        return None
    ev = ledger.event()
    eps = np.linspace(0.0, 4.0 * float(model.privacy_.epsilon) + 4.0, int(points))
    acc = getattr(ledger, "accountant", None)
    # both are sound upper bounds on the same δ(ε): the claim is their minimum (PLD's floor of
    # ~1e-15 from its truncated tail sits above RDP's at large ε)
    return eps, np.array([min(accounting.delta(ev, epsilon=float(e), accountant=acc), accounting.delta(ev, epsilon=float(e)))
                          for e in eps])


def whitebox_canary_audit(
    method: Any, params: dict[str, Any], split: Any, *, trials: int = 1000, canaries_per_run: int = 1000,
    seed: int = 0, delta: float = 1e-5, confidence: float = 0.95, executor: Any = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> dict[str, Any]:
    """White-box Dirac-canary audit of a NoisyGD-family method (see the module docstring).

    AdaMix with its projection: the released sum is ``U U^T (S + noise)``, which mixes the
    canaries' rows, so (as for DP-SGD below) only the one-run bound is reported.

    DP-SGD linear probes (``dp_linear_probe``, ``dpsgd_global_adapt``): the same canaries and
    statistic on the released noisy clipped batch sum ``G_t`` (sensitivity C). There each
    canary is in a step's Poisson batch with probability q only, and its gradient also touches
    the shared bias row, so the canaries' statistics are *not* independent trials: the bound is
    the one-run bound of Steinke et al. (valid under that dependence) on a single training with
    ``trials`` canaries, and no Clopper–Pearson bound is reported. A DP-SGD probe without a bias
    row (``audit_bias_row = False``) trained with ``dataset_size="public_bound"`` has independent
    canary rows (each row's Poisson coins and noise are its own, the step size is public), so its
    canaries are independent trials and get the Clopper–Pearson bound; the mechanism is then not
    Gaussian (q < 1), so the bound is on ε directly (no μ).
    """
    if not whitebox_available(method):
        raise ValueError(f"white-box Dirac canaries need a NoisyGD-family method (fully_private, ngd, adamix, "
                         f"ppgd) or a DP-SGD linear probe; {method!r} is not one")
    if not independent_canary_rows(method, params):
        from ...config import AUDIT_MAX_CANARIES
        from ...errors import ConfigError

        M = int(trials)
        if M > AUDIT_MAX_CANARIES:  # every trial's canary goes into this one training: its size, bounded first
            raise ConfigError("trials", f"the white-box audit of {method!r} puts every trial's canary into one "
                                        f"training (its canaries are not independent trials): at most "
                                        f"{AUDIT_MAX_CANARIES:,}, got {M:,}")
        rng = np.random.default_rng([seed, 0xD5C])
        job = WhiteboxJob(method, dict(params, seed=int(seed) * 1000 + 1), split,
                          rng.integers(0, split.n_classes, M), rng.random(M) < 0.5)
        (o,) = map_jobs(run_whitebox_job, [job], executor=executor, progress=progress)
        b = job.included
        out = membership_metrics(o.stat[b], o.stat[~b])
        out["epsilon_bound"] = one_run_epsilon_lower_bound(o.stat, b, delta=delta, confidence=confidence)
        out["one_run_bound"] = out["epsilon_bound"]
        out["canary_mean_ratio"] = float(o.mean_ratio[b].mean()) if b.any() else None
        out["steps"], out["n_runs"] = o.steps, 1
        out.update(_ledger_fields(o))
        out["canary_type"] = ("Dirac gradient canaries on unused coordinates (white-box, one run: "
                              + ("DP-SGD releases share the bias row)" if is_dpsgd_linear(method)
                                 else "AdaMix's projection mixes coordinates)"))
        out["report"] = o
        return out
    trials = int(trials)
    per = max(1, min(int(canaries_per_run), trials))
    runs = math.ceil(trials / per)
    rng = np.random.default_rng([seed, 0xD1AC])
    jobs = []
    for r in range(runs):
        M = min(per, trials - r * per)
        jobs.append(WhiteboxJob(method, dict(params, seed=int(seed) * 1000 + r + 1), split,
                                rng.integers(0, split.n_classes, M), rng.random(M) < 0.5))
    outs = map_jobs(run_whitebox_job, jobs, executor=executor, progress=progress)
    s = np.concatenate([o.stat for o in outs])
    b = np.concatenate([j.included for j in jobs])
    out = membership_metrics(s[b], s[~b])
    gdp = outs[0].mu is not None
    out["epsilon_bound"] = epsilon_lower_bound(s[b], s[~b], delta=delta, confidence=confidence, seed=seed,
                                               gdp=gdp, profile=None if gdp else outs[0].profile)
    out["one_run_bound"] = one_run_epsilon_lower_bound(outs[0].stat, jobs[0].included, delta=delta,
                                                       confidence=confidence)
    r = np.concatenate([o.mean_ratio[j.included] for o, j in zip(outs, jobs)])
    out["canary_mean_ratio"] = float(r.mean()) if r.size else None
    out["steps"] = outs[0].steps
    out["n_runs"] = runs
    out.update(_ledger_fields(outs[0]))
    out["canary_type"] = ("Dirac gradient canaries on unused coordinates (white-box, "
                          + ("DP-SGD releases without a bias row, claimed privacy profile tested)"
                             if is_dpsgd_linear(method) else "NoisyGD releases)"))
    out["report"] = outs[0]
    return out


def _ledger_fields(o: WhiteboxOutput) -> dict[str, Any]:
    """What the claimed ε covers against what the statistic observes: the run ledger's releases
    (``releases_recorded``, by kind in ``releases``) and the gradient releases read
    (``releases_observed``). The releases not observed (the noisy count, the checkpoint test,
    the guard) are in the claim but not in the test: an audit bound below the claim is expected
    from them alone, never a bound above it."""
    if o.ledger is None:
        return {}
    return {"releases": [{"what": r["what"], "count": r["count"]} for r in o.ledger],
            "releases_recorded": int(sum(r["count"] for r in o.ledger)), "releases_observed": int(o.steps)}


def one_run_audit(
    method: Any, params: dict[str, Any], split: Any, *, canaries: int = 1000, seed: int = 0,
    delta: float = 1e-5, confidence: float = 0.95, executor: Any = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> dict[str, Any]:
    """One-run audit (Steinke et al. 2023): white-box for NoisyGD, black-box otherwise."""
    if whitebox_available(method):
        rng = np.random.default_rng([seed, 0x0E2])
        M = int(canaries)
        job = WhiteboxJob(method, dict(params, seed=int(seed) + 1), split, rng.integers(0, split.n_classes, M),
                          rng.random(M) < 0.5)
        (o,) = map_jobs(run_whitebox_job, [job], executor=executor, progress=progress)
        out = membership_metrics(o.stat[job.included], o.stat[~job.included])
        out["epsilon_bound"] = one_run_epsilon_lower_bound(o.stat, job.included, delta=delta, confidence=confidence)
        out["canary_type"] = "Dirac gradient canaries (white-box, one run)"
        out["report"] = o
        return out
    return _blackbox_one_run(method, params, split, canaries=canaries, seed=seed, delta=delta,
                             confidence=confidence, executor=executor, progress=progress)
