"""Only-Public's ridge selection on public rows: approximate class-balanced leave-one-out
(``select_l2_loo``) and the ``l2_rule`` option of ``only_public``."""

import dataclasses

import numpy as np
import pytest
from scipy.optimize import minimize

from mixdp_core.methods import make_method
from mixdp_core.methods import _linear
from mixdp_core.methods._linear import (
    L2_PATH, ONE_SHOT_L2, PUBLIC_L2, fit_logistic_spectral, l2_normalize, loo_logits_alo, loo_ridge_path, select_l2_loo,
    softmax_residual, spectral_rows,
)


def _rows(sep: float, shuffle_labels: bool, seed: int = 0, C: int = 5, k: int = 4, D: int = 30):
    """k rows per class around random class means (``sep`` apart); optionally labels unrelated to rows."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(C), k)
    X = sep * rng.normal(size=(C, D))[y] + rng.normal(size=(len(y), D))
    if shuffle_labels:
        y = rng.permutation(y)
    return l2_normalize(X), y


def _balanced_refit_logits(Z, y, C, B, l2, i):
    """Exact refit without row i, the other rows of its class weighted k/(k-1) (ALO's target)."""
    N, r = Z.shape
    w = np.ones(N)
    R = np.flatnonzero(y == y[i])
    w[R] = len(R) / (len(R) - 1)
    w[i] = 0.0

    def f(b):
        Bm = b.reshape(r, C)
        E, loss = softmax_residual(Z @ Bm, y)
        return (w * loss).sum() / N + 0.5 * l2 * np.sum(Bm * Bm), ((Z.T @ (w[:, None] * E)) / N + l2 * Bm).ravel()

    b = minimize(f, B.ravel(), jac=True, method="L-BFGS-B", options={"maxiter": 5000, "gtol": 1e-11}).x
    return Z[i] @ b.reshape(r, C)


def _newton_step_logits(Z, y, C, B, l2, i):
    """One Newton step of the balanced refit objective from B, with the full rC x rC Hessian."""
    N, r = Z.shape
    E, _ = softmax_residual(Z @ B, y)
    P = E.copy()
    P[np.arange(N), y] += 1
    R = np.flatnonzero(y == y[i])
    w = np.zeros(N)
    w[R] = 1.0 / (len(R) - 1)
    w[i] = -1.0
    H, g = N * l2 * np.eye(r * C), np.zeros(r * C)
    for j in range(N):
        J = np.kron(Z[j][:, None], np.eye(C))  # vec(B) row-major -> logits of row j
        A = np.diag(P[j]) - np.outer(P[j], P[j])
        H += (1.0 + w[j]) * J @ A @ J.T
        g += w[j] * J @ E[j]
    return Z[i] @ (B.ravel() - np.linalg.solve(H, g)).reshape(r, C)


@pytest.mark.parametrize("keep_q", [True, False], ids=["Q-buffer", "M-inverse-buffer"])
def test_alo_is_the_newton_step_and_exact_at_a_strong_ridge(keep_q, monkeypatch):
    """Both of loo_logits_alo's buffers (every Q_c kept, or M_c^-1 Z^T when C N^2 exceeds the
    cell bound) give the Newton step of the balanced refit."""
    import mixdp_core.methods._linear as lin

    if not keep_q:
        monkeypatch.setattr(lin, "LOO_MAX_CELLS", 4 * 20 * 20 - 1)  # C N^2 = 4 x 20^2: just over
    X, y = _rows(1.0, False, C=4, k=5, D=8)
    y[-1] = 0  # unequal class sizes
    sp = spectral_rows(X)
    c = lambda v: v - v.mean()  # logits up to the softmax's shift
    for l2 in (1.0, 1e-2):
        B = fit_logistic_spectral(sp.Z, y, 4, sp.s, l2=l2, max_iter=5000, tol=1e-10)
        full, alo = sp.Z @ B, loo_logits_alo(sp.Z, y, 4, B, l2)
        for i in (0, 7, len(y) - 1):
            np.testing.assert_allclose(c(alo[i]), c(_newton_step_logits(sp.Z, y, 4, B, l2, i)), atol=1e-8)
            exact = c(_balanced_refit_logits(sp.Z, y, 4, B, l2, i))
            if l2 == 1.0:  # nearly quadratic over the step: one Newton step is the refit
                np.testing.assert_allclose(c(alo[i]), exact, atol=1e-4)
            else:  # weaker ridge: an approximation, but far closer to the refit than the full fit
                assert np.abs(c(alo[i]) - exact).max() < 0.5 * np.abs(c(full[i]) - exact).max()


def test_selection_is_deterministic_and_returns_a_path_value(digits_split):
    X = l2_normalize(digits_split.X_public)
    a = select_l2_loo(X, digits_split.y_public, 10)
    assert a == select_l2_loo(X.copy(), digits_split.y_public.copy(), 10)
    assert a in L2_PATH


def test_ties_go_to_the_strongest_ridge():
    # identical rows, balanced labels: B = 0 and uniform LOO predictions at every ridge
    X = np.ones((12, 5)) / np.sqrt(5)
    y = np.repeat(np.arange(4), 3)
    res = loo_ridge_path(X, y, 4)
    np.testing.assert_allclose(res.log_loss, np.log(4), atol=1e-9)
    assert select_l2_loo(X, y, 4) == max(L2_PATH)


def test_one_shot_falls_back_and_singleton_classes_are_not_scored():
    rng = np.random.default_rng(0)
    X = l2_normalize(rng.normal(size=(6, 10)))
    y = np.arange(6)  # 1 shot per class: no held-out row keeps its class
    assert loo_ridge_path(X, y, 6) is None
    assert select_l2_loo(X, y, 6) == ONE_SHOT_L2
    assert select_l2_loo(X, y, 6, fallback=0.5) == 0.5
    X2, y2 = _rows(2.0, False, C=3, k=3)
    X2, y2 = np.vstack([X2, X[:1, :10].repeat(3, 1)]), np.append(y2, 3)  # + a class of one row
    res = loo_ridge_path(X2, y2, 4)
    assert res is not None and list(res.scored) == list(range(9))


def test_identical_rows_fall_back_instead_of_failing_in_lapack(digits_split):
    """Constant features span nothing (rank 0): LAPACK's potri failed on the 0×0 inverse, with a
    traceback, in only_public, ngd and adamix; the leave-one-out path is skipped instead."""
    X, y = np.zeros((6, 10)), np.repeat(np.arange(3), 2)
    assert loo_ridge_path(X, y, 3) is None
    assert select_l2_loo(X, y, 3, fallback=0.5) == 0.5
    split = dataclasses.replace(digits_split, X_public=np.ones_like(digits_split.X_public))
    assert np.isfinite(make_method("only_public").fit(split).decision_function(split.X_test)).all()


def test_beyond_the_size_bound_it_falls_back(monkeypatch):
    X, y = _rows(3.0, False)
    monkeypatch.setattr(_linear, "LOO_MAX_CELLS", 10)
    assert loo_ridge_path(X, y, 5) is None
    assert select_l2_loo(X, y, 5, fallback=0.25) == 0.25


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noise_picks_a_stronger_ridge_than_separated_classes(seed):
    separated = select_l2_loo(*_rows(3.0, False, seed), 5)
    noise = select_l2_loo(*_rows(0.0, True, seed), 5)  # labels independent of the rows
    assert noise >= 0.1 > 1e-3 >= separated, (noise, separated)


def test_only_public_rules(digits_split):
    assert make_method("only_public", l2_rule="fixed").fit(digits_split).l2_ == PUBLIC_L2
    m = make_method("only_public").fit(digits_split)  # default: loo
    assert m.config.l2_rule == "loo"
    assert m.l2_ == select_l2_loo(m.feature_map_(digits_split.X_public), digits_split.y_public, 10)  # its input
    assert m.l2_ in L2_PATH
    assert make_method("only_public", l2_rule="loo", l2=0.5).fit(digits_split).l2_ == 0.5  # l2 wins


def test_loo_rule_reads_public_rows_only(digits_split):
    a = make_method("only_public", l2_rule="loo").fit(digits_split)
    rng = np.random.default_rng(3)
    other = dataclasses.replace(
        digits_split, X_private=rng.normal(size=digits_split.X_private.shape).astype(np.float32),
        y_private=rng.permutation(digits_split.y_private))
    b = make_method("only_public", l2_rule="loo").fit(other)
    assert a.l2_ == b.l2_ and np.array_equal(a.W_, b.W_)
    moved = dataclasses.replace(digits_split, X_test=rng.normal(size=digits_split.X_test.shape).astype(np.float32))
    c = make_method("only_public", l2_rule="loo").fit(moved)
    assert a.l2_ == c.l2_ and np.array_equal(a.W_, c.W_)


def test_adamix_starts_from_the_only_public_model_under_every_rule(digits_split, monkeypatch):
    """The public start of AdaMix / NGD uses Only-Public's ridge rule on the same rows: the
    same ridge (so the guard's kept start *is* Only-Public), and the selection is computed once
    per public set however many runs use it."""
    calls = []
    real = _linear.select_l2_loo

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(_linear, "select_l2_loo", counting)
    monkeypatch.setattr(_linear, "_RIDGE_CACHE", {})
    for rule in ("loo", "fixed"):
        op = make_method("only_public", l2_rule=rule).fit(digits_split)
        for name in ("adamix", "ngd"):
            m = make_method(name, target_epsilon=1.0, public_l2_rule=rule, noise="reproducible")
            m.fit(digits_split, on_step=lambda r: True)  # the start is fitted before the first step
            assert m.public_l2_ == op.l2_, (rule, name)
    assert len(calls) == 1  # loo: once for the three fits; fixed: never
    assert make_method("adamix", target_epsilon=1.0, public_l2=0.5, noise="reproducible").fit(
        digits_split, on_step=lambda r: True).public_l2_ == 0.5  # an explicit ridge wins


def test_public_ridge_rejects_an_unknown_rule(digits_split):
    from mixdp_core.errors import ConfigError

    with pytest.raises(ConfigError, match="^l2_rule: must be 'loo' or 'fixed'"):
        _linear.public_ridge(digits_split.X_public, digits_split.y_public, 10, "cv")


def _few_shot_rows(C: int, k: int, D: int = 30, fresh: int = 200, seed: int = 3):
    """``(X, y, X_fresh, y_fresh)``: k unit rows per class of C Gaussian classes in D dimensions
    and ``fresh`` more per class from the same classes (the unseen rows)."""
    rng = np.random.default_rng(seed)
    means = 0.5 * rng.normal(size=(C, D))
    draw = lambda n: (l2_normalize(means[np.repeat(np.arange(C), n)] + rng.normal(size=(C * n, D))),  # noqa: E731
                      np.repeat(np.arange(C), n))
    X, y = draw(k)
    return (X, y, *draw(fresh))


def test_loo_margin_scale_estimates_unseen_rows_margins_where_the_fits_own_overstate_them():
    """``loo_margin_scale`` (the start's margin research hook, tuning_notes.md): on few-shot
    rows (3 per class, D = 30) the weak-ridge fit separates its own rows, so their median margin
    overstates fresh rows' from the same classes several-fold; the ALO estimate lands within a
    factor 2 of the fresh rows' median |margin|, and no row can be scored at 1 shot."""
    from mixdp_core.methods._linear import fit_public, logit_margins as margins, loo_margin_scale

    C, k, l2 = 8, 3, 1e-4
    X, y, Xf, yf = _few_shot_rows(C, k)
    W = fit_public(X, y, C, l2=l2)
    own = float(np.median(margins(X @ W, y)))
    fresh = float(np.median(np.abs(margins(Xf @ W, yf))))
    est = loo_margin_scale(X, y, C, l2)
    assert own > 3 * fresh  # the fit's own margins overstate unseen rows'
    assert 0.5 * fresh < est < 2.0 * fresh
    assert loo_margin_scale(X[::k], y[::k], C, l2) is None  # 1 shot: nothing to hold out


def test_loo_public_logits_predict_fresh_rows_as_well_as_the_fit_does_unlike_its_own_logits():
    """``loo_public_logits`` (the start's side of ``update_shrinkage="public_likelihood"``): the
    held-out rows' logits are those of unseen rows. On 3-shot rows the fit is right on all of its
    own rows; the leave-one-out accuracy lands within 0.15 of the fresh rows' accuracy (the ALO's
    agreement with refits is checked above). 1 shot: ``None``; a class with 1 shot among others
    is not scored."""
    from mixdp_core.methods._linear import fit_public, loo_public_logits

    C, k, l2 = 8, 3, 1e-2
    X, y, Xf, yf = _few_shot_rows(C, k)
    W = fit_public(X, y, C, l2=l2)
    eta, scored = loo_public_logits(X, y, C, l2)
    assert np.array_equal(scored, np.arange(len(y)))
    own = np.mean((X @ W).argmax(1) == y)
    fresh = np.mean((Xf @ W).argmax(1) == yf)
    loo = np.mean(eta.argmax(1) == y)
    assert own == 1.0 and fresh < 0.8 and abs(loo - fresh) < 0.15
    assert loo_public_logits(X[::k], y[::k], C, l2) is None
    first = np.r_[0, np.arange(k, len(y))]  # class 0 keeps 1 row, the others k
    _, sc = loo_public_logits(X[first], y[first], C, l2)
    assert 0 not in sc and len(sc) == len(first) - 1


def test_logit_margins_against_the_numbers_written_out():
    from mixdp_core.methods._linear import logit_margins

    Z = np.array([[2.0, 0.5, 1.0], [0.0, 3.0, -1.0], [1.0, 1.0, 4.0]])
    before = Z.copy()
    np.testing.assert_allclose(logit_margins(Z, np.array([0, 0, 2])), [1.0, -3.0, 3.0])
    np.testing.assert_array_equal(Z, before)  # the caller's logits are not touched
