"""Numerics of the DP-prototypes family: blocked utilities, EM and joint top-K EM sampling."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from mixdp_core.errors import ConfigError, DataError
from mixdp_core.methods.prototypes.utilities import (
    avg_pool,
    cosine_scores,
    dense_public_utilities,
    em_log_probs,
    largest_param,
    public_utilities,
    sample_em,
    sample_topk,
    topk_rank_log_probs,
    topk_set_log_prob,
)


def _chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    keep = expected > 0
    assert counts[~keep].sum() == 0, "a zero-probability outcome was sampled"
    return float(stats.chisquare(counts[keep], expected[keep]).pvalue)


@pytest.fixture
def tiny():
    rng = np.random.default_rng(1)
    Xp = rng.normal(size=(60, 7)).astype(np.float32)
    yp = rng.integers(0, 3, size=60)
    pool = rng.normal(size=(257, 7)).astype(np.float32)
    return Xp, yp, pool


@pytest.mark.parametrize("d_min,d_max", [(0.0, 2.0), (0.5, 1.5), (1.0, 2.0), (0.0, 1.2)])
@pytest.mark.parametrize("block", [1, 16, 100, 10_000])
@pytest.mark.parametrize("layout", ["private_major", "pool_major"])
def test_blocked_utilities_equal_dense(tiny, d_min, d_max, block, layout):
    Xp, yp, pool = tiny
    dense = dense_public_utilities(Xp, yp, pool, n_classes=4, d_min=d_min, d_max=d_max)
    blocked = public_utilities(Xp, yp, pool, n_classes=4, d_min=d_min, d_max=d_max, block_size=block,
                               layout=layout)
    assert blocked.shape == (4, 257)
    np.testing.assert_allclose(blocked, dense, rtol=1e-5, atol=1e-4)
    assert np.all(blocked[3] == 0)  # empty class: zero utility everywhere
    assert np.all(blocked >= -1e-5) and np.all(blocked <= np.bincount(yp, minlength=4)[:, None] * (d_max - d_min) + 1e-4)


def _torch_devices():
    torch = pytest.importorskip("torch")
    return ["torch_cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("d_min,d_max", [(0.0, 2.0), (0.5, 1.5), (0.0, 1.2)])
@pytest.mark.parametrize("block", [16, None])
def test_torch_utilities_equal_dense(tiny, d_min, d_max, block):
    """The torch path (CPU here; also CUDA where a GPU is visible) computes the numpy path's
    utilities: same clip, same class sums, blocks that do not divide the pool, an empty class."""
    Xp, yp, pool = tiny
    dense = dense_public_utilities(Xp, yp, pool, n_classes=4, d_min=d_min, d_max=d_max)
    for device in _torch_devices():
        U = public_utilities(Xp, yp, pool, n_classes=4, d_min=d_min, d_max=d_max, block_size=block, device=device)
        assert U.shape == (4, 257) and U.dtype == np.float64
        np.testing.assert_allclose(U, dense, rtol=1e-5, atol=1e-4, err_msg=device)
        assert np.all(U[3] == 0)


def test_utilities_device_auto_and_cuda_check():
    """'auto' keeps small problems on numpy without looking for a GPU; an unknown device or
    'cuda' on a machine without one is a one-line ConfigError naming ``device``."""
    from mixdp_core.methods.prototypes.utilities import AUTO_CUDA_MIN_MACS, utilities_device

    assert utilities_device("auto", n_private=5000, n_pool=1000, dim=512) == "cpu"
    assert 5000 * 1000 * 512 < AUTO_CUDA_MIN_MACS <= 5000 * 1_281_167 * 512  # the ImageNet pool qualifies
    assert utilities_device("cpu", n_private=10**6, n_pool=10**6, dim=10**3) == "cpu"
    with pytest.raises(ConfigError, match="^device: must be one of"):
        utilities_device("tpu", n_private=1, n_pool=1, dim=1)
    from mixdp_core.methods.adamix.kernels import _cuda_available

    if not _cuda_available():
        with pytest.raises(ConfigError, match="^device: .*sees no CUDA device"):
            utilities_device("cuda", n_private=1, n_pool=1, dim=1)


@pytest.mark.parametrize("d_min,d_max", [(0.5, 1.5), (0.3, 1.9), (1.2, 1.8), (0.0, 1.2)])
@pytest.mark.parametrize("block", [7, None])
def test_bf16_utilities_near_dense_and_clipped(d_min, d_max, block):
    """The bf16 path: every class sum within its bound of the float64 reference, 3·2⁻⁹ per summand
    (inputs' and tile's rounding), and typically ~2⁻⁹·√n_c; each summand inside [0, d_max − d_min]
    (bounds rounded inward: d_min − 1 = −0.7 is not a bf16 number), so a class's utility never
    exceeds n_c (d_max − d_min); padding rows (d_min > 1: a zero row would add clip(0) = 0.2)
    subtracted; an empty class is zero; classes of 1 to 400 rows (groups of g rows)."""
    pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    C, D = 6, 48
    mu = rng.normal(size=(C, D))
    y = np.repeat(np.arange(C - 1), [400, 150, 37, 5, 1])  # class 5 empty
    X = (mu[y] + rng.normal(size=(len(y), D))).astype(np.float32)
    pool = (mu[rng.integers(0, C, 333)] + rng.normal(size=(333, D))).astype(np.float32)
    dense = dense_public_utilities(X, y, pool, n_classes=C, d_min=d_min, d_max=d_max)
    U = public_utilities(X, y, pool, n_classes=C, d_min=d_min, d_max=d_max, block_size=block, precision="bf16")
    n_c = np.bincount(y, minlength=C)[:, None]
    err = np.abs(U - dense)
    assert np.all(err <= 3 * 2.0**-9 * n_c + 1e-4)
    assert err.max() > 0  # it is the bf16 path, not fp32 under another name
    assert np.median(err[:5] / np.sqrt(n_c[:5])) < 2.0**-9
    assert np.all(U[5] == 0)
    assert np.all(U >= -1e-6) and np.all(U <= n_c * (d_max - d_min) + 1e-6)


def test_bf16_bounds_round_inward():
    from mixdp_core.methods.prototypes.utilities import _bf16_inward

    torch = pytest.importorskip("torch")
    for x in (-0.7, -0.5, -0.3, -1e-30, 0.0, 1e-30, 0.2, 0.3, 0.7, 0.123456, 1.0, -1.0, 0.9999999):
        up, down = _bf16_inward(x, up=True), _bf16_inward(x, up=False)
        assert down <= x <= up and up - down <= 2.0**-7 * max(abs(x), 2.0**-8)  # one bf16 ulp
        for v in (up, down):  # both are bf16 numbers: a round trip keeps them
            assert torch.tensor(v, dtype=torch.float64).to(torch.bfloat16).double().item() == v


def test_utilities_precision_choice(monkeypatch):
    """'auto' takes bf16 only for big clipped problems on a CPU with bf16 matrix units; an
    unknown precision, or 'bf16' on CUDA, is a one-line ConfigError naming ``precision``."""
    from mixdp_core.methods.prototypes import utilities as ut

    big = dict(n_private=5000, n_pool=1_281_167, dim=512)
    monkeypatch.setattr(ut, "_AMX", True)
    assert ut.utilities_precision("auto", device="cpu", clipping=True, **big) == "bf16"
    assert ut.utilities_precision("auto", device="cpu", clipping=False, **big) == "fp32"
    assert ut.utilities_precision("auto", device="cuda", clipping=True, **big) == "fp32"
    assert ut.utilities_precision("auto", device="cpu", clipping=True, n_private=500, n_pool=1000, dim=64) == "fp32"
    assert ut.utilities_precision("fp32", device="cpu", clipping=True, **big) == "fp32"
    monkeypatch.setattr(ut, "_AMX", False)
    assert ut.utilities_precision("auto", device="cpu", clipping=True, **big) == "fp32"
    assert ut.utilities_precision("bf16", device="cpu", clipping=True, n_private=1, n_pool=1, dim=1) == "bf16"
    with pytest.raises(ConfigError, match="^precision: must be one of"):
        ut.utilities_precision("fp16", device="cpu", clipping=True, **big)
    with pytest.raises(ConfigError, match="^precision: 'bf16' is the CPU"):
        ut.utilities_precision("bf16", device="cuda", clipping=True, **big)
    # bf16 asked for with the default device: the CPU's path, whatever GPU is visible
    assert ut.utilities_plan("auto", "bf16", clipping=True, **big) == ("cpu", "bf16")
    assert ut.utilities_plan("cpu", "auto", clipping=False, **big) == ("cpu", "fp32")


def test_blocked_utilities_from_memmap(tiny, tmp_path):
    Xp, yp, pool = tiny
    path = tmp_path / "pool.npy"
    np.save(path, pool)
    mm = np.load(path, mmap_mode="r")
    np.testing.assert_allclose(
        public_utilities(Xp, yp, mm, n_classes=3, d_min=0.3, d_max=1.9, block_size=50),
        dense_public_utilities(Xp, yp, pool, n_classes=3, d_min=0.3, d_max=1.9), rtol=1e-5, atol=1e-4)


def test_utilities_reject_bad_clip_range_and_shape(tiny):
    Xp, yp, pool = tiny
    with pytest.raises(ConfigError, match="d_min"):
        public_utilities(Xp, yp, pool, n_classes=3, d_min=1.5, d_max=1.0)
    with pytest.raises(DataError, match="features"):
        public_utilities(Xp, yp, pool[:, :3], n_classes=3)


@pytest.mark.parametrize("monotone", [True, False])
def test_em_log_probs_match_formula(monotone):
    u = np.array([0.0, 1.0, 2.5, 2.5, 4.0])
    eps, sens = 0.8, 2.0
    denom = sens if monotone else 2 * sens
    w = np.exp(eps * u / denom)
    np.testing.assert_allclose(np.exp(em_log_probs(u, epsilon=eps, sensitivity=sens, monotone=monotone)), w / w.sum())
    # shift invariance (u − d_min·n_c in Eq. 14 does not change the mechanism)
    np.testing.assert_allclose(em_log_probs(u + 7.0, epsilon=eps, sensitivity=sens, monotone=monotone),
                               em_log_probs(u, epsilon=eps, sensitivity=sens, monotone=monotone))


@pytest.mark.parametrize("monotone", [True, False])
def test_em_sampling_frequencies(monotone):
    u = np.array([0.0, 0.5, 1.0, 3.0, 3.0, 6.0])
    eps, sens = 1.0, 2.0
    denom = sens if monotone else 2 * sens
    p = np.exp(eps * u / denom)
    p /= p.sum()
    rng = np.random.default_rng(123)
    n = 5_000  # the other scale's chi-square p-value is < 1e-280 at this size
    counts = np.bincount([sample_em(u, epsilon=eps, sensitivity=sens, monotone=monotone, rng=rng) for _ in range(n)],
                         minlength=len(u))
    assert _chi2_pvalue(counts, p) > 1e-3
    # the /Δ vs /(2Δ) distinction is detectable with this many draws
    other = np.exp(eps * u / (2 * denom if monotone else denom / 2))
    other /= other.sum()
    assert _chi2_pvalue(counts, other) < 1e-6


def _brute_force_topk(u, k, eps, sens, monotone=False):
    """Set-level exponential mechanism by enumeration: P[S] ∝ exp(scale · (min_S u − u_(K)))."""
    order = np.sort(u)[::-1]
    uk = order[k - 1]
    sets = list(itertools.combinations(range(len(u)), k))
    scale = eps / (sens if monotone else 2 * sens)
    logw = np.array([scale * (min(u[list(S)]) - uk) for S in sets])
    p = np.exp(logw - logw.max())
    return sets, p / p.sum()


@pytest.mark.parametrize("monotone", [False, True])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_topk_set_probabilities_match_joint_em(k, monotone):
    u = np.array([5.0, 1.0, 3.0, 3.0, 0.0, 4.5, 2.0])
    eps, sens = 2.0, 1.5
    sets, p = _brute_force_topk(u, k, eps, sens, monotone)
    lp = np.array([topk_set_log_prob(u, S, k, epsilon=eps, sensitivity=sens, monotone=monotone) for S in sets])
    np.testing.assert_allclose(np.exp(lp), p, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.exp(lp).sum(), 1.0)


@pytest.mark.parametrize("monotone", [False, True])
@pytest.mark.parametrize("k", [2, 3])
def test_topk_sampling_frequencies(k, monotone):
    u = np.array([5.0, 1.0, 3.0, 3.0, 0.0, 4.5])
    eps, sens = 3.0, 1.0
    sets, p = _brute_force_topk(u, k, eps, sens, monotone)
    index = {S: i for i, S in enumerate(sets)}
    rng = np.random.default_rng(7)
    counts = np.zeros(len(sets))
    # 10,000 draws: the weakest rejection below (Eq. 6's weight at k = 3, monotone) has a
    # chi-square of ~160 on 19 degrees of freedom, where p < 1e-6 needs ~60
    for _ in range(10_000):
        S = sample_topk(u, k, epsilon=eps, sensitivity=sens, rng=rng, monotone=monotone)
        assert len(set(S.tolist())) == k
        counts[index[tuple(S.tolist())]] += 1
    assert _chi2_pvalue(counts, p) > 1e-3
    # the other scale (factor 2 vs none) is rejected by the same draws
    _, q = _brute_force_topk(u, k, eps, sens, not monotone)
    assert _chi2_pvalue(counts, q) < 1e-6
    # the paper's Eq. 6 weight binom(y, K) (instead of binom(y-1, K-1)) is a different set
    # distribution, and these draws reject it
    order = np.argsort(-u, kind="stable")
    rank = np.empty(len(u), dtype=int)
    rank[order] = np.arange(1, len(u) + 1)
    uk = u[order][k - 1]
    scale = eps / (sens if monotone else 2 * sens)
    q = np.array([math.comb(max(rank[list(S)]), k) / math.comb(max(rank[list(S)]) - 1, k - 1)
                  * math.exp(scale * (min(u[list(S)]) - uk)) for S in sets])
    assert _chi2_pvalue(counts, q / q.sum()) < 1e-6
    # the authors' code weights rank y by binom(y-1, K) (log_binom of the 0-based position),
    # which gives the exact top-K set probability 0; the joint EM samples it often
    top = index[tuple(sorted(order[:k].tolist()))]
    assert math.comb(k - 1, k) == 0 and counts[top] > 0.05 * counts.sum()


def test_topk_k1_monotone_is_the_plain_exponential_mechanism():
    u = np.array([5.0, 1.0, 3.0, 3.0, 0.0, 4.5, 2.0])
    us = np.sort(u)[::-1]
    np.testing.assert_allclose(topk_rank_log_probs(us, 1, epsilon=1.3, sensitivity=0.7, monotone=True),
                               em_log_probs(us, epsilon=1.3, sensitivity=0.7, monotone=True), atol=1e-12)


def _max_log_ratio(u, u2, k, eps, sens, scale_factor):
    """max over K-sets of |log P_D[S] − log P_D'[S]| by enumeration, P[S] ∝ exp(f·ε·min_S u/Δ)."""
    sets = list(itertools.combinations(range(len(u)), k))
    def logp(v):
        z = np.array([scale_factor * eps * min(v[list(S)]) / sens for S in sets])
        return z - np.logaddexp.reduce(z)
    return float(np.max(np.abs(logp(u) - logp(u2))))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_topk_monotone_scale_is_epsilon_dp_by_enumeration(k):
    """Add one private sample: every utility u_s grows by a_s in [0, Δ] (Lemma 5). Over random
    and extreme a, the monotone scale never exceeds ε; a doubled scale does (the check has teeth)."""
    rng = np.random.default_rng(11)
    eps, sens, N = 1.0, 2.0, 7
    worst, worst_doubled = 0.0, 0.0
    for trial in range(300):
        u = rng.uniform(0, 10, size=N)
        if trial % 3 == 0:
            a = sens * rng.integers(0, 2, size=N).astype(float)   # extreme: each summand 0 or Δ
        else:
            a = rng.uniform(0, sens, size=N)
        for u_d, u_d2 in ((u, u + a), (u + a, u)):                # add and remove
            worst = max(worst, _max_log_ratio(u_d, u_d2, k, eps, sens, 1.0))
            worst_doubled = max(worst_doubled, _max_log_ratio(u_d, u_d2, k, eps, sens, 2.0))
    assert worst <= eps + 1e-9
    assert worst > 0.9 * eps          # the bound is nearly attained
    assert worst_doubled > 1.5 * eps  # an over-scaled sampler is caught


def test_topk_rejects_k_larger_than_pool():
    with pytest.raises(ConfigError, match="k"):
        sample_topk(np.zeros(3), 4, epsilon=1.0, sensitivity=1.0, rng=np.random.default_rng(0))


def test_avg_pool_and_cosine_scores():
    X = np.arange(14, dtype=np.float32).reshape(2, 7)
    P = avg_pool(X, 3)
    np.testing.assert_allclose(P, [[1, 4, 6], [8, 11, 13]])
    assert avg_pool(X, 1) is X
    protos = np.eye(3, dtype=np.float32)
    s = cosine_scores(np.array([[2.0, 0, 0], [0, 0, 5.0]]), protos)
    np.testing.assert_allclose(s, [[1, 0, 0], [0, 0, 1]], atol=1e-6)
    # K prototypes per class: the score is the mean cosine (Eq. 7)
    pk = np.stack([np.stack([np.eye(3)[0], np.eye(3)[1]]), np.stack([np.eye(3)[2], np.eye(3)[2]])])
    np.testing.assert_allclose(cosine_scores(np.array([[1.0, 0, 0]]), pk), [[0.5, 0.0]], atol=1e-6)


def test_largest_param_bisection():
    x = largest_param(lambda r: r + 2 * math.sqrt(r * math.log(1e5)), target_epsilon=1.0, lo=1e-12, hi=1e6)
    assert x + 2 * math.sqrt(x * math.log(1e5)) <= 1.0
    assert (x * 1.001) + 2 * math.sqrt(x * 1.001 * math.log(1e5)) > 1.0
    with pytest.raises(ConfigError):
        largest_param(lambda r: 10.0, target_epsilon=1.0, lo=1e-3, hi=1.0)
