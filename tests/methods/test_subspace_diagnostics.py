"""AdaMix Fig. 6 in the library: reconstruction error of the clipped private gradient sum on the
public-gradient subspace vs a random subspace of the same dimension (owner's view)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mixdp_core.methods import make_method
from mixdp_core.methods.adamix.projection import ProjectionBasis, RandomSubspaces, subspace_errors

KEYS = ("subspace_error_public", "subspace_error_random")


def _diag(m):
    return [h.extra for h in m.history_ if KEYS[0] in h.extra]


def test_errors_on_a_known_subspace():
    rng = np.random.default_rng(0)
    D, k, C = 40, 6, 3
    U = np.linalg.qr(rng.normal(size=(D, k)))[0]
    basis = ProjectionBasis("sub", U.astype(np.float32), k)
    rand = RandomSubspaces(D, seed=1)
    inside = U @ rng.normal(size=(k, C))
    pub, rnd = subspace_errors(inside, basis, rand)
    assert pub < 1e-6 and rnd > 0.8  # a random 6-of-40 subspace keeps about 6/40 of the energy
    orth = (np.eye(D) - U @ U.T) @ rng.normal(size=(D, C))
    assert subspace_errors(orth, basis, rand)[0] == pytest.approx(1.0, abs=1e-6)
    # the random projection is a projection of the right rank, also through its complement
    for kk in (k, D - 3):
        P = rand.project(np.eye(D), kk)
        np.testing.assert_allclose(P @ P, P, atol=1e-10)
        assert np.trace(P) == pytest.approx(kk, abs=1e-8)
    assert all(np.isnan(v) for v in subspace_errors(np.zeros((D, C)), basis, rand))


def test_diagnostic_changes_nothing_released_and_public_beats_random(small_split):
    runs = {d: make_method("adamix", target_epsilon=3.0, noise="reproducible", seed=0, projection="paper",
                           subspace_diagnostics=d).fit(small_split) for d in (False, True)}
    np.testing.assert_array_equal(runs[True].W_, runs[False].W_)
    assert runs[True].privacy_ == runs[False].privacy_
    assert _diag(runs[False]) == []
    rec = _diag(runs[True])
    assert len(rec) >= 2
    pub = np.array([r[KEYS[0]] for r in rec])
    rnd = np.array([r[KEYS[1]] for r in rec])
    assert ((0 <= pub) & (pub <= 1) & (0 <= rnd) & (rnd <= 1)).all()
    assert pub.mean() < rnd.mean()  # the paper: random is generally more than twice as bad


def test_public_gradients_spanning_the_private_ones(small_split):
    """Private rows that are copies of the public rows (same labels): their gradients lie in the
    public gradients' span, so the public subspace reconstructs them far better than a random one."""
    sp = dataclasses.replace(small_split, X_private=np.repeat(small_split.X_public, 3, axis=0),
                             y_private=np.repeat(small_split.y_public, 3))
    m = make_method("adamix", target_epsilon=3.0, noise="reproducible", seed=0, projection="paper",
                    subspace_diagnostics=True).fit(sp)
    rec = _diag(m)
    pub = np.mean([r[KEYS[0]] for r in rec])
    rnd = np.mean([r[KEYS[1]] for r in rec])
    assert pub < 0.5 * rnd, (pub, rnd)


def test_no_projection_no_subspace_error(small_split):
    m = make_method("fully_private", target_epsilon=3.0, subspace_diagnostics=True).fit(small_split)
    assert _diag(m) == []
    m = make_method("adamix", target_epsilon=3.0, subspace_diagnostics=True).fit(small_split)  # default: none
    assert _diag(m) == []


def test_public_exports_leave_the_subspace_errors_out():
    from mixdp_core.runs.owner_view import owner_block, public_steps

    steps = [{"step": 1, "train_loss": 0.5, "extra": {"lr": 0.1, "subspace_error_public": 0.1,
                                                        "subspace_error_random": 0.4, "subspace_dim": 9.0}},
             {"step": 2, "extra": {"lr": 0.1}}]
    pub = public_steps(steps)
    assert pub[0]["extra"] == {"lr": 0.1, "subspace_dim": 9.0} and "train_loss" not in pub[0]
    owner = owner_block({}, steps)
    assert owner["step_subspace_error_public"] == [0.1, None] and owner["step_subspace_error_random"] == [0.4, None]
