"""The closed forms used by NoisyGD / AdaMix against explicit per-sample gradients (autograd)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mixdp_core.methods._linear import l2_normalize, per_sample_grad_norms, softmax_residual
from mixdp_core.methods.adamix.engine import private_release, theorem3_weight_decay
from mixdp_core.methods.adamix.projection import projection_basis


def _per_sample_grads(X: np.ndarray, y: np.ndarray, W: np.ndarray) -> np.ndarray:
    """(N, D, C) per-sample gradients of the cross-entropy via autograd, one sample at a time."""
    out = []
    for i in range(len(y)):
        w = torch.tensor(W, dtype=torch.float64, requires_grad=True)
        x = torch.tensor(X[i : i + 1], dtype=torch.float64)
        loss = torch.nn.functional.cross_entropy(x @ w, torch.tensor(y[i : i + 1]), reduction="sum")
        (g,) = torch.autograd.grad(loss, w)
        out.append(g.numpy())
    return np.stack(out)


def _problem(N=9, D=6, C=4, seed=0):
    rng = np.random.default_rng(seed)
    X = l2_normalize(rng.standard_normal((N, D)).astype(np.float32)).astype(np.float64)
    y = rng.integers(0, C, N)
    W = rng.standard_normal((D, C))
    return X, y, W


def test_closed_form_grad_norms_equal_autograd():
    X, y, W = _problem()
    X = X * np.linspace(0.5, 2.0, len(y))[:, None]  # non-unit rows too
    E, loss = softmax_residual(X @ W, y)
    g = _per_sample_grads(X, y, W)
    np.testing.assert_allclose(per_sample_grad_norms(X, E), np.linalg.norm(g, axis=(1, 2)), rtol=1e-10)
    ref_loss = [torch.nn.functional.cross_entropy(torch.tensor(X[i:i+1] @ W), torch.tensor(y[i:i+1])).item() for i in range(len(y))]
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-10)


def _clipped(g: np.ndarray, tau: float) -> np.ndarray:
    n = np.linalg.norm(g, axis=(1, 2))
    return g * np.minimum(1.0, tau / n)[:, None, None]


def test_unprojected_release_is_sum_of_clipped_gradients():
    X, y, W = _problem()
    tau = 0.3
    g = _per_sample_grads(X, y, W)
    released, ratio, _ = private_release(X, y, W, tau, None)
    gc = _clipped(g, tau)
    np.testing.assert_allclose(released, gc.sum(0), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(ratio, np.linalg.norm(gc, axis=(1, 2)) / tau, rtol=1e-8)


@pytest.mark.parametrize("k", [1, 2, 4, 5])  # rank(G_pub) = 3 here: sub-basis for k<=3, completion above
def test_projected_release_matches_explicit_projection(k):
    X, y, W = _problem(N=11, D=7, C=4, seed=1)
    Xp, yp, _ = _problem(N=8, D=7, C=4, seed=2)
    Ep, _ = softmax_residual(Xp @ W, yp)
    G_pub = Xp.T @ Ep
    D = X.shape[1]
    B = np.random.default_rng(3).standard_normal((D, D - k))
    basis = projection_basis(G_pub, k, B)
    # explicit orthonormal U (D x k) spanning the same subspace
    if basis.mode == "sub":
        U = basis.U.astype(np.float64)
    else:
        Q = basis.Q.astype(np.float64)
        full = np.linalg.svd(Q, full_matrices=True)[0]
        U = full[:, Q.shape[1]:]
        # the top singular directions of G_pub are inside span(U)
        np.testing.assert_allclose(np.linalg.norm(U.T @ basis.U), np.linalg.norm(basis.U), rtol=1e-5)
    assert U.shape == (D, k)
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-5)
    tau = 0.25
    gc = _clipped(_per_sample_grads(X, y, W), tau)
    proj = np.einsum("dk,ndc->nkc", U, gc)
    released, ratio, _ = private_release(X, y, W, tau, basis)
    np.testing.assert_allclose(released, U @ proj.sum(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ratio, np.linalg.norm(proj, axis=(1, 2)) / tau, rtol=1e-4, atol=1e-6)
    assert np.all(ratio <= 1.0)
    # same basis built from the public QR, X U_r taken from the cached X Q_p
    qr = np.linalg.qr(Xp.T)
    basis2 = projection_basis(G_pub, k, B, public_qr=qr, E_pub=Ep)
    assert basis2.coef is not None
    np.testing.assert_allclose(basis2.project(np.eye(D)), basis.project(np.eye(D)), atol=1e-5)
    released2, ratio2, _ = private_release(X, y, W, tau, basis2, X_Qp=X @ qr[0])
    np.testing.assert_allclose(released2, released, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ratio2, ratio, rtol=1e-4, atol=1e-6)


def test_full_basis_without_noise_equals_unprojected_gradient():
    # C - 1 > D: the public gradient has rank D, so its left-singular basis is all of R^D.
    X, y, W = _problem(N=10, D=3, C=6, seed=4)
    Xp, yp, _ = _problem(N=12, D=3, C=6, seed=5)
    Ep, _ = softmax_residual(Xp @ W, yp)
    basis = projection_basis(Xp.T @ Ep, "rank", None)
    assert basis.dim == 3
    full, r_full, _ = private_release(X, y, W, 0.4, basis)
    plain, r_plain, _ = private_release(X, y, W, 0.4, None)
    np.testing.assert_allclose(full, plain, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r_full, r_plain, rtol=1e-5)


def test_rank_basis_is_public_gradient_column_space():
    X, y, W = _problem(N=10, D=8, C=4, seed=6)
    Ep, _ = softmax_residual(X @ W, y)
    G = X.T @ Ep
    basis = projection_basis(G, "rank", None)
    assert basis.dim == 3  # rows of P - Y sum to 0, so rank <= C - 1
    np.testing.assert_allclose(basis.project(G), G, atol=1e-5)


def test_theorem3_weight_decay_closed_form():
    lam = theorem3_weight_decay(lipschitz=30.0, noise_std=2.0, dim=100, steps=16, ref_distance=5.0)
    # (tau / R) sqrt(2 d / rho) with tau = 1, sigma = 2, rho = T / (2 sigma^2) = 2
    assert lam == pytest.approx((1.0 / 5.0) * math.sqrt(2 * 100 / 2.0))
    full = theorem3_weight_decay(lipschitz=30.0, noise_std=2.0, dim=100, steps=16, ref_distance=5.0, include_optimization=True)
    assert full == pytest.approx(2 * math.sqrt(900 + 400) / (5 * 4))
    # more steps (larger epsilon) -> weaker decay, more noise -> stronger decay
    assert theorem3_weight_decay(lipschitz=30.0, noise_std=2.0, dim=100, steps=64, ref_distance=5.0) < lam
    assert theorem3_weight_decay(lipschitz=30.0, noise_std=4.0, dim=100, steps=16, ref_distance=5.0) > lam


def test_effective_weight_decay_balances_the_ridge_degrees_of_freedom_and_ignores_the_noise_dimension():
    from mixdp_core.methods.adamix.engine import effective_weight_decay

    s, T, R = 0.05, 400, 3.0
    lam = effective_weight_decay(noise_std=s, steps=T, ref_distance=R)
    # the balance it solves: noise term 2 (tr H / λ) s² / (λ T) = decay term λ R² / 2, tr H = 1
    assert 2 * (1.0 / lam) * s**2 / (lam * T) == pytest.approx(lam * R**2 / 2, rel=1e-12)
    # unlike Thm. 3's rule it does not grow with the noise dimension k C
    t3 = [theorem3_weight_decay(lipschitz=1.0, noise_std=s, dim=d, steps=T, ref_distance=R) for d in (10, 128_000)]
    assert t3[1] / t3[0] == pytest.approx(math.sqrt(12_800))
    assert t3[0] < lam < t3[1]  # binds only where k C is large
    assert effective_weight_decay(noise_std=s, steps=8 * T, ref_distance=R) == pytest.approx(lam / 2)


def test_effective_rule_is_used_by_the_smooth_schedule_only(small_split):
    from mixdp_core.errors import ConfigError
    from mixdp_core.methods import make_method

    with pytest.raises(ConfigError, match="weight_decay_rule: 'effective' needs schedule='smooth'"):
        make_method("adamix", schedule="constant", weight_decay_rule="effective")
    base = make_method("adamix", target_epsilon=3.0, noise="reproducible", public_guard=False)
    eff = make_method("adamix", target_epsilon=3.0, noise="reproducible", public_guard=False,
                      weight_decay_rule="effective")
    lam = {}
    for name, m in (("theorem3", base), ("effective", eff)):
        m.fit(small_split)
        lam[name] = [r.extra.get("weight_decay") for r in m.history_ if r.extra and "weight_decay" in r.extra]
    assert lam["theorem3"] and lam["effective"]  # the engine records λ on its step records
    assert max(lam["effective"]) <= max(lam["theorem3"]) + 1e-12 and lam["effective"] != lam["theorem3"]


def test_percentile_linear_equals_numpy_bit_for_bit():
    from mixdp_core.methods.adamix.engine import percentile_linear

    rng = np.random.default_rng(11)
    for n in (1, 2, 3, 7, 30, 101):
        for _ in range(40):
            a = rng.standard_normal(n) ** 2
            if n > 2:
                a[: n // 3] = a[0]  # ties
            for q in (0.0, 1e-9, 10.0, 50.0, 75.0, 90.0, 99.5, 100.0, float(rng.uniform(0, 100))):
                assert percentile_linear(a, q) == float(np.percentile(a, q)), (n, q)


def test_update_shrinkage_is_the_positive_part_james_stein_factor_of_the_public_logits():
    """``s = max(0, 1 - C nu^2 sum ||x||^2 / sum ||x Delta||^2)`` (explicit loops here) and, over
    noise draws, close to the oracle ``q / (q + C nu^2 sum ||x||^2)`` that minimizes the expected
    squared logit error; pure noise is shrunk away, a noise-free update kept whole."""
    from mixdp_core.methods.adamix.engine import update_shrinkage

    rng = np.random.default_rng(0)
    n, D, C, nu = 40, 300, 12, 0.05
    X = l2_normalize(rng.standard_normal((n, D))).astype(np.float64)
    S = 0.3 * rng.standard_normal((D, 3)) @ rng.standard_normal((3, C)) / math.sqrt(D)  # low-rank signal
    S = S + 0.4 * X.T @ rng.standard_normal((n, C)) / n  # and some on the public rows' span
    delta = S + nu * rng.standard_normal((D, C))
    energy = sum(float(np.dot(X[i] @ delta, X[i] @ delta)) for i in range(n))
    noise = C * nu**2 * sum(float(X[i] @ X[i]) for i in range(n))
    assert update_shrinkage(X, delta, nu) == pytest.approx(max(0.0, 1.0 - noise / energy), rel=1e-12)
    q = float(np.sum((X @ S) ** 2))
    oracle = q / (q + noise)
    draws = [update_shrinkage(X, S + nu * rng.standard_normal((D, C)), nu) for _ in range(200)]
    assert 0.1 < oracle < 0.9 and abs(np.mean(draws) - oracle) < 0.05
    # the oracle factor does minimize the realized squared logit error on average
    errs = {s: np.mean([np.sum((X @ ((s - 1) * S + s * nu * rng.standard_normal((D, C)))) ** 2) for _ in range(200)])
            for s in (oracle, 1.0, 0.5 * oracle, min(1.0, 1.5 * oracle))}
    assert min(errs, key=errs.get) == oracle
    assert update_shrinkage(X, nu * rng.standard_normal((D, C)), nu) < 0.1
    assert update_shrinkage(X, S, 0.0) == 1.0 and update_shrinkage(X[:0], delta, nu) == 1.0


def test_released_noise_std_matches_the_realized_noise_of_two_draws():
    """:func:`released_noise_std` (from the step records) against the realized noise: two runs on
    the same split with independent noise differ by ``N_1 - N_2`` (the signal is nearly the same),
    of std ``sqrt(2) nu`` per coordinate; the formula ignores the loss's curvature, so it may
    over-state the noise a little, never much under-state it."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.features.cache import get_features
    from mixdp_core.methods import make_method
    from mixdp_core.methods.adamix.engine import released_noise_std

    fs = get_features("synthetic", "pixels", classes=20, dim=256, train_per_class=30, test_per_class=5,
                      effective_rank=64, separation=6.0)
    sp = make_split(fs, SplitSpec(public_per_class=2, seed=0))
    runs = [make_method("adamix", target_epsilon=3.0, seed=s, noise="reproducible", public_guard=False,
                        update_shrinkage="none").fit(sp) for s in (11, 12)]
    nu = released_noise_std(runs[0].history_, float(runs[0].n_hat_), runs[0].noise_multiplier_)
    realized = float(np.std(runs[0].W_ - runs[1].W_)) / math.sqrt(2.0)
    assert 0.8 * nu < realized < 1.05 * nu


def test_iterate_noise_covariance_matches_the_simulated_recursion():
    """:func:`iterate_noise_covariance` (from step records) against the recursion simulated
    directly: ``w_{t+1} = w_t - eta_t (tau_t sigma z_t / n_hat + lambda w_t)`` on pure noise, the
    t-weighted average ``sum 2 t w_t / (T (T + 1))`` and the last iterate ``w_{T+1}``, over many
    independent coordinates. The entries agree within sampling error (3 %); the average's
    variance is :func:`released_noise_std` squared."""
    from mixdp_core.methods.adamix.engine import iterate_noise_covariance, released_noise_std
    from mixdp_core.methods.base import StepRecord

    rng = np.random.default_rng(0)
    T, lam, sigma, n_hat = 30, 0.4, 3.0, 250.0
    eta = np.minimum(0.9, 2.0 / (lam * (np.arange(1, T + 1) + 1.0)))
    tau = rng.uniform(0.5, 1.5, T)
    hist = [StepRecord(step=t + 1, total_steps=T, clip_norm=float(tau[t]),
                       extra={"lr": float(eta[t]), "weight_decay": lam}) for t in range(T)]
    cov = iterate_noise_covariance(hist, n_hat, sigma)
    K = 200_000
    w, avg = np.zeros(K), np.zeros(K)
    for t in range(T):
        avg = avg * (t / (t + 2.0)) + w * (2.0 / (t + 2.0))  # the average includes w_t before its step
        w = w - eta[t] * (tau[t] * sigma * rng.standard_normal(K) / n_hat + lam * w)
    emp = np.cov(np.stack([avg, w]))
    np.testing.assert_allclose(cov, emp, rtol=0.03)
    assert cov[0, 0] == pytest.approx(released_noise_std(hist, n_hat, sigma) ** 2, rel=1e-12)
    assert 0 < cov[0, 1] < np.sqrt(cov[0, 0] * cov[1, 1]) and cov[1, 1] > cov[0, 0]
    assert iterate_noise_covariance(hist[:1], n_hat, sigma) is None


def test_two_iterate_combination_estimates_the_oracle_weights_without_bias():
    """:func:`two_iterate_combination` against the oracle computed from the known signals: with
    the average's and the last iterate's noise-free updates ``S_a, S_L`` and their shared noise
    of known per-coordinate covariance, the weights minimizing the expected squared logit error
    against ``x S_L`` are ``(S^T S + N_E)^{-1} S^T S e_2`` (``S = [x S_a, x S_L]``). Averaged over
    noise draws the estimate is close to them, and the combination's realized error is below the
    last iterate's own and below the one-factor rule's on the average. No noise: the last
    iterate whole; a last iterate that is all noise, or one collinear with the average: ``None``
    (the rule is kept)."""
    from mixdp_core.methods.adamix.engine import two_iterate_combination, update_shrinkage

    rng = np.random.default_rng(1)
    n, D, C = 40, 300, 12
    X = l2_normalize(rng.standard_normal((n, D))).astype(np.float64)
    S_L = 1.5 * X.T @ rng.standard_normal((n, C)) / n + 0.2 * rng.standard_normal((D, C)) / math.sqrt(D)
    S_a = 0.6 * S_L  # the average lags behind the iterate it averages
    cov = np.array([[1.0, 0.9], [0.9, 1.6]]) * 0.03 ** 2
    chol = np.linalg.cholesky(cov)
    YS = np.stack([(X @ S_a).ravel(), (X @ S_L).ravel()], 1)
    N_E = C * float(np.sum(X * X)) * cov
    oracle = np.linalg.solve(YS.T @ YS + N_E, YS.T @ YS @ np.array([0.0, 1.0]))
    est, err = [], {"comb": [], "last": [], "rule": []}
    for _ in range(300):
        Z = chol @ rng.standard_normal((2, D * C))
        da, dl = S_a + Z[0].reshape(D, C), S_L + Z[1].reshape(D, C)
        u, v = two_iterate_combination(X, da, dl, cov)
        est.append((u, v))
        s = update_shrinkage(X, da, math.sqrt(cov[0, 0]))
        for k, M in (("comb", u * da + v * dl), ("last", dl), ("rule", s * da)):
            err[k].append(float(np.sum((X @ (M - S_L)) ** 2)))
    assert 0.2 < oracle[1] < 0.9 and oracle[0] < oracle[1]
    np.testing.assert_allclose(np.mean(est, 0), oracle, atol=0.02)
    assert np.mean(err["comb"]) < 0.8 * np.mean(err["last"]) and np.mean(err["comb"]) < np.mean(err["rule"])
    S_b = S_a + 0.5 * X.T @ rng.standard_normal((n, C)) / n  # an average not collinear with the iterate
    assert two_iterate_combination(X, S_b, S_L, cov * 1e-12) == pytest.approx((0.0, 1.0), abs=1e-6)
    assert two_iterate_combination(X, S_a, S_L, cov) is None  # collinear: the Gram is singular
    pure = chol @ rng.standard_normal((2, D * C))
    assert two_iterate_combination(X, 0.01 * pure[0].reshape(D, C), 0.01 * pure[1].reshape(D, C), cov) is None
    assert two_iterate_combination(X[:0], S_a, S_L, cov) is None


def test_stacking_shrinkage_is_the_weight_ratio_of_the_public_likelihood():
    """:func:`stacking_shrinkage` against an independent fit (scipy's BFGS on the same two-weight
    softmax likelihood, written out here): the ratio ``b / a`` agrees; it is equivariant in the
    start's logit scale; a pure-noise update gets ``s`` near 0, an update that predicts while the
    start guesses gets the whole update (clipped at 1); no rows: 1."""
    from scipy.optimize import minimize

    from mixdp_core.methods.adamix.engine import stacking_shrinkage

    rng = np.random.default_rng(0)
    n, C = 300, 10
    y = rng.integers(0, C, n)
    onehot = np.eye(C)[y]
    A = 2.0 * onehot + rng.standard_normal((n, C))  # the start: informative
    U = 0.5 * onehot + 0.8 * rng.standard_normal((n, C))  # the update: weaker, noisier

    def nll(w):
        Z = w[0] * A + w[1] * U
        Z = Z - Z.max(1, keepdims=True)
        return -float(np.sum(Z[np.arange(n), y] - np.log(np.exp(Z).sum(1))))

    w = minimize(nll, x0=np.array([1.0, 1.0]), method="BFGS", options={"gtol": 1e-9}).x
    s = stacking_shrinkage(A, U, y)
    assert 0.05 < s < 1.0 and s == pytest.approx(w[1] / w[0], rel=1e-4)
    assert stacking_shrinkage(2.0 * A, U, y) == pytest.approx(2.0 * s, rel=1e-4)  # b / a in the start's units
    assert stacking_shrinkage(A, rng.standard_normal((n, C)), y) < 0.1  # noise: next to nothing kept
    assert stacking_shrinkage(rng.standard_normal((n, C)), U, y) == 1.0  # the start guesses: the whole update
    assert stacking_shrinkage(A[:0], U[:0], y[:0]) == 1.0


def test_profile_log_likelihood_maximizes_over_the_scale_and_peaks_at_the_stacking_ratio():
    """:func:`profile_log_likelihood` against an independent computation (the mean log-likelihood
    of ``softmax(a (A + s U))`` on a dense grid of ``a``): equal to 1e-6; ``-log C`` for constant
    logits; and, over ``s``, it is largest at :func:`stacking_shrinkage`'s ratio (the two-weight
    fit's profile), so a check ``L(s) < L(0)`` asks whether ``s`` predicts worse than the start."""
    from mixdp_core.methods.adamix.engine import profile_log_likelihood, stacking_shrinkage

    rng = np.random.default_rng(1)
    n, C = 200, 8
    y = rng.integers(0, C, n)
    onehot = np.eye(C)[y]
    A = 1.5 * onehot + rng.standard_normal((n, C))
    U = 0.6 * onehot + 0.9 * rng.standard_normal((n, C))

    def grid(s):
        # a dense grid of a, refined twice around its best point (the likelihood is concave in
        # a): step 1e-4 at the end, as fine as a 50,001-point grid on [0, 5]
        Z0 = A + s * U

        def ll(a):
            Z = a[:, None, None] * Z0
            Z = Z - Z.max(2, keepdims=True)
            return np.mean(Z[:, np.arange(n), y] - np.log(np.exp(Z).sum(2)), axis=1)

        lo, hi = 0.0, 5.0
        for _ in range(3):
            a = np.linspace(lo, hi, 201)
            v = ll(a)
            i = int(np.argmax(v))
            lo, hi = a[max(i - 2, 0)], a[min(i + 2, a.size - 1)]
        return float(v.max())

    for s in (0.0, 0.3, 1.0):
        assert profile_log_likelihood(A, U, y, s) == pytest.approx(grid(s), abs=1e-6)
    assert profile_log_likelihood(np.zeros((n, C)), np.zeros((n, C)), y, 0.5) == pytest.approx(-np.log(C))
    s_star = stacking_shrinkage(A, U, y)
    assert 0.05 < s_star < 0.95
    top = profile_log_likelihood(A, U, y, s_star)
    assert all(profile_log_likelihood(A, U, y, s) <= top + 1e-9 for s in np.linspace(0, 1, 21))
    bad = -2.0 * onehot + rng.standard_normal((n, C))  # an update that points away from the labels
    assert profile_log_likelihood(A, bad, y, 1.0) < profile_log_likelihood(A, bad, y, 0.0)
    # logits that point away from every label: the best scale is a = 0, the likelihood -log C
    assert profile_log_likelihood(-5.0 * onehot, np.zeros((n, C)), y, 0.0) == pytest.approx(-np.log(C), abs=1e-9)
    # rows the logits separate: the supremum 0 is approached to within the solver's resolution
    from mixdp_core.methods.adamix.engine import PROFILE_LL_TOL

    sep = profile_log_likelihood(3.0 * onehot, np.zeros((n, C)), y, 0.0)
    assert -PROFILE_LL_TOL <= sep <= 0.0


def test_tracked_public_pull_is_the_leave_one_out_change_of_the_released_average():
    """``NoisyGDOptions.track_public_pull`` (``update_shrinkage="public_likelihood"``): public row j's
    tracked pull is the change of its own logits in the released average when the row is left out
    of the public gradient, everything else (noise draws, n_hat, clip, decay) kept. Within 3 %
    against runs without each row (rows barely interact, D >> N); a wrong recursion (no decay, the
    wrong average weights) is off by far more. Tracking changes nothing of the run."""
    import dataclasses

    from mixdp_core.methods.adamix.engine import NoisyGDOptions, NoisyGDProblem, run_noisygd

    rng = np.random.default_rng(0)
    N, D, C = 40, 300, 8
    M = 0.3 * rng.standard_normal((C, D))
    y, yp = rng.integers(0, C, N), np.repeat(np.arange(C), 2)
    X = l2_normalize((M[y] + rng.standard_normal((N, D))).astype(np.float32))
    Xp = l2_normalize((M[yp] + rng.standard_normal((len(yp), D))).astype(np.float32))
    W0 = np.zeros((D, C), np.float32)
    opts = NoisyGDOptions(noise_multiplier=0.5, steps=30, target_delta=1e-5, schedule="smooth", n_hat=N + len(yp),
                          n_hat_private=N, weight_decay=0.05, noise="reproducible", clip="fixed", clip_norm=1.0,
                          track_public_pull=True)

    def run(keep, track=True):
        prob = NoisyGDProblem(X, y, Xp[keep], yp[keep], None, None, C)
        return run_noisygd(prob, W0, W0, dataclasses.replace(opts, track_public_pull=track))

    full = run(np.ones(len(yp), bool))
    assert full.public_pull.shape == (len(yp), C)
    for j in range(5):
        keep = np.ones(len(yp), bool)
        keep[j] = False
        actual = Xp[j] @ full.W - Xp[j] @ run(keep).W
        assert np.linalg.norm(full.public_pull[j] - actual) < 0.03 * np.linalg.norm(actual), j
        assert actual[yp[j]] > 0  # the row pulls its own class up: the in-sample optimism removed
    untracked = run(np.ones(len(yp), bool), track=False)
    assert untracked.public_pull is None and np.array_equal(untracked.W, full.W)
