r"""Per-instance DP of full-batch NoisyGD / AdaMix (Wang 2019; AdaMix App. C, Prop. 14).

Per-instance DP (Wang 2019, "Per-instance differential privacy") measures the privacy loss
of one concrete sample z_i in one concrete dataset. For a composition of T Gaussian steps
with noise σ·τ_t at step t, sample i's contribution at step t has norm
``r_{i,t} · τ_t`` with r_{i,t} = ‖contribution_{i,t}‖/τ_t ≤ 1 after clipping, and the run is
μ_i-per-instance-GDP with (AdaMix Prop. 14; the composition of pGDP follows from GDP
composition restricted to {D, D ∪ {z_i}})

.. math:: μ_i = \frac{1}{σ}\sqrt{\sum_t r_{i,t}^2},

hence (ε_i, δ)-pDP with ε_i = ``gaussian_epsilon(μ_i, δ)``. A sample clipped at every step
has r_{i,t} = 1, μ_i = √T/σ and ε_i equals the run's ε; samples whose gradients are below
the clip norm get a smaller ε_i. pDP values are data-dependent diagnostics, not a DP
guarantee: releasing them is not private.
"""

from __future__ import annotations

import math

import numpy as np

from . import _validate as V
from .gaussian import gaussian_epsilon


def pdp_ratio_sq(contribution_norms: np.ndarray, *, clip_norm: float) -> np.ndarray:
    """r² for one step: ``(min(‖g_i‖, τ)/τ)²`` for per-sample norms ``‖g_i‖`` (vectorized).

    Accumulate it over steps (``sum_sq += pdp_ratio_sq(norms_t, clip_norm=tau_t)``) and pass
    the sum to :func:`pdp_epsilon`.
    """
    n = V.array_nonnegative("contribution_norms", contribution_norms)
    tau = V.positive("clip_norm", clip_norm)
    r = np.minimum(n / tau, 1.0)
    return r * r


def pdp_epsilon(sum_sq_ratios: np.ndarray, *, noise_multiplier: float, delta: float) -> np.ndarray:
    """Per-instance ε_i at δ from Σ_t r_{i,t}² (AdaMix Prop. 14), vectorized.

    Args:
        sum_sq_ratios: array of Σ_t r_{i,t}² ≥ 0, any shape (one entry per sample).
        noise_multiplier: σ > 0 (noise std / clip norm, the same at every step).
        delta: δ in (0, 1).

    Returns:
        ε_i ≥ 0, same shape as ``sum_sq_ratios`` (10⁵ samples take ~0.2 s).
    """
    s = V.array_nonnegative("sum_sq_ratios", sum_sq_ratios)
    sig = V.positive("noise_multiplier", noise_multiplier)
    d = V.open_unit("delta", delta)
    mu = np.sqrt(s) / sig
    return np.asarray(gaussian_epsilon(mu, delta=d), dtype=np.float64).reshape(s.shape)


def pdp_epsilon_gaussian_steps(ratios: np.ndarray, noise_multipliers: np.ndarray, *, delta: float,
                               extra_mu_sq: float = 0.0) -> np.ndarray:
    r"""Per-instance ε_i of a composition of Gaussian steps with different noise multipliers.

    Step ``t`` has noise multiplier ``σ_t`` (noise std / sensitivity) and sample ``i``'s share
    of the sensitivity is ``r_{i,t} ∈ [0, 1]``; by GDP composition (Dong, Roth & Su 2022,
    Cor. 3.3) restricted to {D, D ± z_i} (as in AdaMix Prop. 14) sample ``i`` is
    ``μ_i = sqrt(Σ_t (r_{i,t}/σ_t)² + extra_mu_sq)``-pGDP, hence (ε_i, δ)-pDP with
    ``ε_i = gaussian_epsilon(μ_i, δ)``.

    Args:
        ratios: ``(N, T)`` r_{i,t}.
        noise_multipliers: ``(T,)`` σ_t > 0.
        delta: δ in (0, 1).
        extra_mu_sq: μ² of mechanisms every sample is charged in full (e.g. a noisy count).
    """
    r = np.clip(np.asarray(ratios, dtype=np.float64), 0.0, 1.0)
    s = np.asarray(noise_multipliers, dtype=np.float64).reshape(1, -1)
    if r.ndim != 2 or r.shape[1] != s.shape[1]:
        raise ValueError(f"ratios: expected shape (N, {s.shape[1]}), got {r.shape}")
    mu = np.sqrt(np.sum((r / s) ** 2, axis=1) + float(extra_mu_sq))
    d = V.open_unit("delta", delta)
    return np.asarray(gaussian_epsilon(mu, delta=d), dtype=np.float64).reshape(mu.shape)


class SubsampledGaussianPDP:
    r"""Running individual RDP of DP-SGD, one sample at a time along the realised trajectory.

    Feldman & Zrnic 2021 ("Individual Privacy Accounting via a Rényi Filter", Thm. 3.3 / Sec. 4)
    and Yu et al. 2023 ("Individual Privacy Accounting for Differentially Private Stochastic
    Gradient Descent", Eq. (4)): at step ``t`` sample ``i``'s clipped gradient has norm
    ``r_{i,t} C`` with ``r_{i,t} = min(‖g_i(w_t)‖, C)/C ≤ 1``; the step is, for that sample, a
    Poisson-subsampled Gaussian (add/remove of sample ``i``, sensitivity ``r_{i,t} C``) with
    noise multiplier ``σ / r_{i,t}``, whose RDP ``τ_t(α)`` (the accounting module's
    :func:`~.backends.subsampled_gaussian_rdp`) composes additively; ε_i is the RDP→(ε, δ)
    conversion of ``Σ_t τ_t(α)`` minimised over orders.

    Ratios are rounded *up* to ``levels`` equally spaced values (RDP grows with r, so this is
    conservative); the state is, per sample, the number of steps charged at each level — an
    ``(N, levels + 1)`` integer table whose product with the ``levels`` RDP curves is
    ``Σ_t τ_t(α)``. Memory is ``O(N · levels)`` whatever the number of steps.

    Args:
        n: number of private samples.
        sample_rate, noise_multiplier: q and σ of the run.
        levels: ratio quantisation (32: ratios are over-charged by at most 1/32).
    """

    def __init__(self, n: int, *, sample_rate: float, noise_multiplier: float, levels: int = 32) -> None:
        self.sample_rate = float(sample_rate)
        if not 0.0 < self.sample_rate <= 1.0:
            raise ValueError(f"sample_rate: must lie in (0, 1], got {sample_rate}")
        self.noise_multiplier = V.positive("noise_multiplier", noise_multiplier)
        self.levels = int(levels)
        self.counts = np.zeros((int(n), self.levels + 1), dtype=np.int64)

    @property
    def steps(self) -> int:
        """Steps charged so far (the same for every sample)."""
        return int(self.counts[0].sum()) if len(self.counts) else 0

    def add(self, ratios: np.ndarray, steps: int = 1) -> None:
        """Charge every sample ``steps`` steps at its ratio ``r_i ∈ [0, 1]`` (``(N,)``)."""
        r = np.clip(np.asarray(ratios, dtype=np.float64).ravel(), 0.0, 1.0)
        if r.size != len(self.counts):
            raise ValueError(f"ratios: expected {len(self.counts)} values, got {r.size}")
        lev = np.ceil(r * self.levels - 1e-9).astype(np.int64)  # 0 = no contribution
        self.counts[np.arange(r.size), lev] += int(steps)

    def add_steps(self, ratios: np.ndarray) -> None:
        """Charge the columns of an ``(N, T)`` ratio matrix, one step each."""
        r = np.clip(np.asarray(ratios, dtype=np.float64), 0.0, 1.0)
        lev = np.ceil(r * self.levels - 1e-9).astype(np.int64)
        for i, row in enumerate(lev):
            self.counts[i] += np.bincount(row, minlength=self.levels + 1)

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        """``(N, len(orders))`` accumulated individual RDP ``Σ_t τ_t(α)``."""
        from .backends import subsampled_gaussian_rdp

        grid = np.arange(1, self.levels + 1) / self.levels
        table = np.zeros((self.levels + 1, len(orders)))
        for k in range(1, self.levels + 1):
            table[k] = subsampled_gaussian_rdp(self.sample_rate, self.noise_multiplier / grid[k - 1], orders)
        return self.counts @ table

    def epsilon(self, *, delta: float, also: object = None, accountant: str = "pld") -> np.ndarray:
        """ε_i at δ with the run's accountant family, never above the run's ε.

        ``accountant="pld"`` (or ``"prv"``, also a privacy-loss-distribution accountant):
        each sample's steps form a composition of Poisson-subsampled Gaussians, one block per
        ratio level, accounted with dp-accounting's PLD through dominating profiles
        (:meth:`_pld_epsilon`); where the sample's own RDP bound is smaller, that one (both
        are upper bounds on the same loss). ``"rdp"``: Σ_t τ_t(α) converted at the orders the
        run's RDP accountant uses.

        ``also``: the pure-DP release made before the steps (the noisy count that chose q
        and T), charged in full to every sample and added as the run adds it (basic adaptive
        composition, :class:`~.events.AdaptiveComposition`).
        """
        from .events import _pure

        d = V.open_unit("delta", delta)
        first = 0.0
        if also is not None:
            p = _pure(also)
            if p is None:
                raise ValueError(f"also: must be a pure-DP event (the noisy count), got {also.describe()}")
            first = float(p)
        if self.sample_rate == 1.0:
            # full batch: every step is a Gaussian of sensitivity r_t for the row, so the row is
            # exactly mu_i-GDP, mu_i = sqrt(sum_t r_t^2) / sigma (levels rounded up: an upper
            # bound), whatever accountant the run names (its ε is the same closed form; RDP here
            # reported ε_i above the run's ε, 1.09 against 1.00)
            grid = np.arange(self.levels + 1) / self.levels
            mu = np.sqrt(self.counts @ grid**2) / self.noise_multiplier
            steps = np.asarray(gaussian_epsilon(mu, delta=d), dtype=np.float64)
            steps = np.where(mu > 0, steps, 0.0)
            return first + np.minimum(steps, self._run_epsilon(d, accountant))
        if accountant in ("pld", "prv"):
            # Both are sound upper bounds on each sample's loss; the PLD profile bound keeps
            # every sample at or under the run's (PLD) ε, the per-sample RDP one is often
            # tighter in the middle of the distribution. Integer orders suffice for that
            # second bound (any orders give one): the fractional ones cost ~1.2 s for 1,208
            # rows and moved the median ε_i by 0.2 %.
            steps = np.minimum(self._pld_epsilon(d), self._rdp_epsilon(d, integer_orders=True))
        else:  # an RDP run: the orders its own accountant uses, so a row clipped at every step gets its ε
            steps = self._rdp_epsilon(d)
        # every ratio is at most 1, so each row's loss is dominated by the run's own mechanism: never
        # report more than the run's ε (at σ = 0.06 a row's PLD profile was inf and its RDP bound
        # 12,961 beside a run ε of 980; the docstring promised the cap)
        steps = np.minimum(steps, self._run_epsilon(d, accountant))
        return first + steps

    def _run_epsilon(self, d: float, accountant: str) -> float:
        """The steps' ε of the run itself (every row at ratio 1 at every step), by ``accountant``."""
        from .accountant import epsilon as _epsilon
        from .events import PoissonSubsampledGaussian

        if self.steps == 0:
            return 0.0
        if self.sample_rate == 1.0:  # full batch: the exact closed form, as the run reports it
            return float(gaussian_epsilon(math.sqrt(self.steps) / self.noise_multiplier, delta=d))
        try:
            return float(_epsilon(PoissonSubsampledGaussian(self.noise_multiplier, self.sample_rate, self.steps),
                                  delta=d, accountant=accountant))
        except (ValueError, ArithmeticError, MemoryError):  # no cap from an accountant that cannot say
            return math.inf

    def _rdp_epsilon(self, d: float, *, integer_orders: bool = False) -> np.ndarray:
        from .conversions import INT_ORDERS, RDP_ORDERS, rdp_eps_per_order

        orders = np.asarray(INT_ORDERS if integer_orders else RDP_ORDERS, dtype=np.float64)
        rdp = self.rdp(orders)
        return np.array([max(0.0, float(np.min(rdp_eps_per_order(orders, r, delta=d)))) if r.any() else 0.0
                         for r in rdp])

    def _pld_epsilon(self, d: float, *, pld_levels: int = 16, count_parts: int = 32,
                     groups: int = 96) -> np.ndarray:
        r"""Per-instance PLD ε of every sample, through a few dominating *profiles*.

        A sample's steps are charged at ratio levels; its privacy loss only grows if a step
        moves to a higher level (σ/r smaller) or a zero step becomes a charged one. Each
        sample's tail counts ``S(j) = #{steps at level ≥ j}`` are rounded *up* — levels to
        ``pld_levels`` values, counts to multiples of ``⌈T/count_parts⌉`` (at most T) — so
        its rounded profile dominates it and ε_i is an upper bound; samples share the
        (few) distinct profiles, each accounted once by
        :func:`~.backends.pld_epsilons` on the search grid. A profile clipped at every step
        is the run's own event and gets the run's own value (:func:`~.backends.pld_epsilon`);
        any other profile whose coarse value reaches the run's is recomputed on the run's
        finer grid, so no sample is reported above the run's ε by discretisation alone.
        """
        from .backends import PLD_INTERVAL, pld_epsilon, pld_epsilons

        n = len(self.counts)
        T = self.steps
        if n == 0 or T == 0:
            return np.zeros(n)
        L = self.levels
        to = np.ceil(np.arange(L + 1) * pld_levels / L - 1e-9).astype(np.int64)  # level -> coarse level
        coarse = np.zeros((n, pld_levels + 1), dtype=np.int64)
        for k in range(L + 1):
            coarse[:, to[k]] += self.counts[:, k]
        tail = np.cumsum(coarse[:, :0:-1], axis=1)[:, ::-1]  # (n, pld_levels): steps at level >= j+1
        g = max(1, -(-T // count_parts))
        tail = np.minimum(-(-tail // g) * g, T)
        if groups and len(tail) > groups:
            # Samples with similar loss share one profile: the element-wise max of their group's
            # tail counts (it dominates every member). Groups are consecutive in the order of
            # Σ_t r² (the exact loss of unsampled Gaussian steps, a proxy here), so members are
            # alike and the max stays tight; without groups nearly every sample is its own
            # profile (1,117 of 1,208 on digits: 14 s against 2.6 s with 96 groups).
            w = (2.0 * np.arange(1, tail.shape[1] + 1) - 1.0) / tail.shape[1] ** 2  # Σ_t r² = Σ_j S(j)·w_j
            order = np.argsort(tail @ w, kind="stable")
            gid = np.empty(len(tail), dtype=np.int64)
            gid[order] = np.arange(len(tail)) * groups // len(tail)
            top = np.zeros((groups, tail.shape[1]), dtype=np.int64)
            np.maximum.at(top, gid, tail)
            tail = top[gid]
        profiles, inverse = np.unique(tail, axis=0, return_inverse=True)
        q, s = self.sample_rate, self.noise_multiplier

        def blocks(prof: np.ndarray) -> list:
            c = prof - np.append(prof[1:], 0)
            return [(s * pld_levels / (j + 1), q, int(c[j])) for j in range(pld_levels) if c[j] > 0]

        full = [(s, q, T)]
        run = pld_epsilon(full, delta=d)
        all_blocks = [blocks(p) for p in profiles]
        eps = pld_epsilons(all_blocks, delta=d)
        for i, b in enumerate(all_blocks):
            if b == full:
                eps[i] = run
            elif eps[i] >= run:
                eps[i] = pld_epsilons([b], delta=d, interval=PLD_INTERVAL)[0]
        return eps[np.asarray(inverse).ravel()]


def pdp_epsilon_subsampled_gaussian(ratios: np.ndarray, *, sample_rate: float, noise_multiplier: float,
                                    delta: float, levels: int = 32, also: object = None,
                                    accountant: str = "pld") -> np.ndarray:
    r"""Per-instance ε_i of DP-SGD along the realised trajectory (individual RDP).

    The ``(N, T)`` ratios ``r_{i,t}`` of every sample at every step, charged with
    :class:`SubsampledGaussianPDP` (see there for the analysis and the rounding).

    Args:
        ratios: ``(N, T)`` r_{i,t}.
        sample_rate, noise_multiplier: q and σ of the run.
        delta: δ.
        also: an event every sample is charged in full (the noisy count), or ``None``.
    """
    r = np.atleast_2d(np.asarray(ratios, dtype=np.float64))
    acc = SubsampledGaussianPDP(r.shape[0], sample_rate=sample_rate, noise_multiplier=noise_multiplier,
                                levels=levels)
    acc.add_steps(r)
    return acc.epsilon(delta=delta, also=also, accountant=accountant)


def pdp_epsilon_exponential(log_probs: np.ndarray, log_probs_without: np.ndarray) -> np.ndarray:
    r"""Per-instance (pure) ε_i of one exponential-mechanism draw (Wang 2019, Def. 2.1).

    ``ε_i = max_j |log P_D(j) - log P_{D \ z_i}(j)|`` over all outcomes ``j``.

    Args:
        log_probs: ``(P,)`` log-probabilities of the mechanism on the real data.
        log_probs_without: ``(N, P)`` the same without sample ``i`` (row ``i``).
    """
    lp = np.asarray(log_probs, dtype=np.float64).reshape(1, -1)
    return np.max(np.abs(np.asarray(log_probs_without, dtype=np.float64) - lp), axis=1)


def _topk_log_normaliser(u_desc: np.ndarray, k: int, scale: float) -> np.ndarray:
    """``log Σ_S exp(scale · min_{s∈S} u_s)`` over all K-subsets, rows of ``u_desc`` sorted descending.

    Exactly ``binom(y−1, K−1)`` K-sets have their worst member at rank ``y`` (ties broken by
    position), so the sum over ``binom(P, K)`` sets is a sum over ``P − K + 1`` ranks.
    """
    from scipy.special import gammaln, logsumexp

    u = np.atleast_2d(u_desc)
    y = np.arange(k, u.shape[1] + 1)
    log_count = gammaln(y) - gammaln(k) - gammaln(y - k + 1)
    return logsumexp(log_count[None, :] + scale * u[:, k - 1:], axis=1)


def pdp_epsilon_topk_exponential(utilities: np.ndarray, shares: np.ndarray, *, k: int, epsilon: float,
                                 sensitivity: float, monotone: bool = False) -> np.ndarray:
    r"""Exact per-instance (pure) ε_i of the joint exponential mechanism over unordered K-sets.

    Mechanism (DPPL-PublicK, Wahdany et al. App. C.3): ``P_D[S] ∝ exp(s · min_{j∈S} u_j)``
    over the K-subsets ``S`` of the pool, ``s = ε/(2Δu)`` (``ε/Δu`` if ``monotone``); the
    constant ``−u_(K)`` of Eq. 5 cancels in the normalisation. Neighbouring relation:
    add/remove one private sample ``z_i`` of the class; removing it lowers every utility by
    its share, ``u' = u − v_i`` with ``0 <= v_{i,j} <= Δu`` (sensitivity Δu). Then

    .. math:: \log\frac{P_{D∖z_i}[S]}{P_D[S]} = s\,Δ_i(S) − (\log Z'_i − \log Z),\qquad
              Δ_i(S) = \min_{S} u' − \min_{S} u \in [−Δu, 0],

    affine in Δ_i(S), so Wang's (2019) ``ε_i = max_S |log P_{D∖z_i}[S] − log P_D[S]|`` is
    attained at the largest or the smallest Δ_i(S). Both are found without enumerating the
    ``binom(P, K)`` sets: fix the member ``m`` that is worst under ``u`` (the others come from
    the ranks above it, ``A_m``); the largest Δ keeps the ``K−1`` members of ``A_m`` with the
    largest ``u'``, the smallest Δ includes the member of ``A_m`` with the smallest ``u'``.
    ``log Z`` and ``log Z'_i`` are sums over ranks (``binom(y−1, K−1)`` sets per worst rank y).
    Cost ``O(N · P · K)`` for N samples and P candidates; exact (tested against enumeration of
    every K-subset).

    Args:
        utilities: ``(P,)`` utilities ``u`` of the class on the real data.
        shares: ``(N, P)`` each sample's share ``v_i`` (``u − v_i`` = utilities without it).
        k: set size K (1 <= K <= P).
        epsilon, sensitivity: ε of the mechanism and Δu (the sampler's exponent).
        monotone: whether the sampler used ``ε/Δu`` (monotone utility) instead of ``ε/(2Δu)``.

    Returns:
        ``(N,)`` pure ε_i >= 0 (δ = 0).
    """
    u = np.asarray(utilities, dtype=np.float64).ravel()
    v = np.atleast_2d(np.asarray(shares, dtype=np.float64))
    P = u.size
    k = int(k)
    if not 1 <= k <= P:
        raise ValueError(f"k: must lie in [1, {P}] (pool size), got {k}")
    if v.shape[1] != P:
        raise ValueError(f"shares: expected shape (N, {P}), got {v.shape}")
    scale = float(epsilon) / (float(sensitivity) * (1.0 if monotone else 2.0))
    order = np.argsort(-u, kind="stable")
    us = u[order]  # real utilities, descending
    up = us[None, :] - v[:, order]  # (N, P) utilities without sample i, in the real data's order
    log_z = _topk_log_normaliser(us[None, :], k, scale)[0]
    log_z_without = _topk_log_normaliser(-np.sort(-up, axis=1), k, scale)
    d_lo = np.full(len(v), np.inf)
    d_hi = np.full(len(v), -np.inf)
    run_min = np.full(len(v), np.inf)  # min of u' over the ranks above m
    top = np.full((len(v), max(k - 1, 0)), -np.inf)  # the K−1 largest u' above m, ascending
    for j in range(P):
        if j >= k - 1:
            worst_other_hi = top[:, 0] if k > 1 else np.inf
            d_hi = np.maximum(d_hi, np.minimum(up[:, j], worst_other_hi) - us[j])
            worst_other_lo = run_min if k > 1 else np.inf
            d_lo = np.minimum(d_lo, np.minimum(up[:, j], worst_other_lo) - us[j])
        run_min = np.minimum(run_min, up[:, j])
        if k > 1:
            top = np.sort(np.concatenate([top, up[:, j:j + 1]], axis=1), axis=1)[:, 1:]
    shift = log_z_without - log_z
    return np.maximum(np.abs(scale * d_hi - shift), np.abs(scale * d_lo - shift))
