"""The fast numpy release kernel and the torch kernel give the same release as the reference
(unblocked, per-sample) computation, for every projection mode and thread / device option."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mixdp_core.errors import ConfigError
from mixdp_core.methods import _torch_kernel
from mixdp_core.methods.adamix import engine as noisygd
from mixdp_core.methods._linear import l2_normalize, softmax_residual
from mixdp_core.methods.adamix.engine import NoisyGDOptions, NoisyGDProblem, private_release, projection_basis, run_noisygd


def _data(N=301, D=24, C=5, n_pub=8, seed=0):
    rng = np.random.default_rng(seed)
    X = l2_normalize(rng.standard_normal((N, D)).astype(np.float32))
    X[7] = 0.0  # an all-zero row: g_i = 0, c_i = 1
    y = rng.integers(0, C, N)
    Xp = l2_normalize(rng.standard_normal((n_pub, D)).astype(np.float32))
    yp = rng.integers(0, C, n_pub)
    W = (rng.standard_normal((D, C)) * 2.0).astype(np.float32)
    return X, y, Xp, yp, W


def _reference(X, y, W, tau, U):
    """Explicit sum of clipped per-sample gradients, projected on U (float64)."""
    X64, W64 = X.astype(np.float64), W.astype(np.float64)
    E, loss = softmax_residual(X64 @ W64, y)
    g = np.einsum("nd,nc->ndc", X64, E)
    n = np.linalg.norm(g, axis=(1, 2))
    c = np.minimum(1.0, tau / np.where(n > 0, n, 1.0))
    gc = g * c[:, None, None]
    proj = np.einsum("dk,ndc->nkc", U, gc)
    return U @ proj.sum(0), np.linalg.norm(proj, axis=(1, 2)) / tau, loss


def _cases(X, Xp, yp, W):
    D = X.shape[1]
    Ep, _ = softmax_residual(Xp @ W, yp)
    G = Xp.T @ Ep
    qr = np.linalg.qr(Xp.T.astype(np.float64))
    B = np.random.default_rng(3).standard_normal((D, D - 20)).astype(np.float32)
    out = [("none", None, {}, np.eye(D))]
    for k in ("rank", 2, 20):
        basis = projection_basis(G, k, B if k == 20 else None)
        qbasis = projection_basis(G, k, B if k == 20 else None, public_qr=qr, E_pub=Ep)
        if basis.mode == "sub":
            U = basis.U.astype(np.float64)
        else:
            U = np.linalg.svd(basis.Q.astype(np.float64), full_matrices=True)[0][:, basis.Q.shape[1]:]
        kw = {"XB": X @ B} if basis.mode == "complement" else {}
        out.append((f"{k}", basis, kw, U))
        out.append((f"{k}-qp", qbasis, {**kw, "X_Qp": (X @ qr[0]).astype(np.float32)}, U))
    return out


@pytest.mark.parametrize("tau", [0.05, 0.6, 10.0])
def test_numpy_kernel_matches_reference_all_modes_blocks_threads(tau):
    X, y, Xp, yp, W = _data()
    for name, basis, kw, U in _cases(X, Xp, yp, W):
        ref, ref_ratio, ref_loss = _reference(X, y, W, tau, U)
        for block_rows, threads in ((1, 1), (64, 1), (100, 3), (10_000, 1)):
            rel, ratio, loss = private_release(X, y, W, tau, basis, block_rows=block_rows, threads=threads, **kw)
            assert rel.dtype == np.float32, name
            np.testing.assert_allclose(rel, ref, rtol=1e-4, atol=2e-5 * max(1.0, np.abs(ref).max()), err_msg=name)
            np.testing.assert_allclose(ratio, ref_ratio, rtol=1e-4, atol=1e-5, err_msg=name)
            np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-5, err_msg=name)
            assert np.all(ratio <= 1.0)


def test_backward_padding_does_not_change_the_release(monkeypatch):
    X, y, Xp, yp, W = _data(C=6)
    outs = []
    for mult in (1, 4, 8):
        monkeypatch.setattr(noisygd, "BACKWARD_ROW_MULTIPLE", mult)
        outs.append(private_release(X, y, W, 0.3, None, block_rows=50))
    for o in outs[1:]:
        for a, b in zip(outs[0], o):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_out_arguments_are_filled_and_returned():
    X, y, _, _, W = _data()
    ratio, loss = np.full(len(y), np.nan), np.full(len(y), np.nan)
    _, r, lo = private_release(X, y, W, 0.3, None, ratio_out=ratio, loss_out=loss, block_rows=64)
    assert r is ratio and lo is loss and np.isfinite(ratio).all() and np.isfinite(loss).all()


def test_torch_cpu_release_equals_numpy_release():
    X, y, Xp, yp, W = _data()
    noise = np.random.default_rng(9).standard_normal(W.shape).astype(np.float32) * np.float32(0.6 * 3.0)
    for name, basis, kw, _ in _cases(X, Xp, yp, W):
        a = private_release(X, y, W, 0.6, basis, noise=noise, **kw)
        for block_rows in (None, 64):
            b = _torch_kernel.torch_private_release(X, y, W, 0.6, basis, noise=noise, device="cpu",
                                                    block_rows=block_rows, **kw)
            for u, v, what in zip(a, b, ("released", "ratio", "loss")):
                np.testing.assert_allclose(v, u, rtol=1e-4, atol=1e-5, err_msg=f"{name} {what}")


@pytest.mark.parametrize("projection", [None, "rank", 20])
def test_noisygd_run_with_torch_kernel_gives_same_weights(monkeypatch, projection):
    X, y, Xp, yp, W = _data(N=200)
    prob = NoisyGDProblem(X, y, Xp, yp, None, None, W.shape[1])
    opts = NoisyGDOptions(noise_multiplier=3.0, steps=5, target_delta=1e-5, projection_dim=projection, seed=4)
    W0 = np.zeros_like(W)
    ref = run_noisygd(prob, W0, W0, opts)
    monkeypatch.setattr(noisygd, "private_release", _torch_kernel.resolve_release("cpu"))
    got = run_noisygd(prob, W0, W0, opts)
    np.testing.assert_allclose(got.W, ref.W, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got.pdp_sq_ratio_sum, ref.pdp_sq_ratio_sum, rtol=1e-4, atol=1e-6)


def test_device_resolution():
    assert _torch_kernel.resolve_release("numpy") is private_release
    with pytest.raises(ConfigError):
        _torch_kernel.resolve_device("tpu")
    if not torch.cuda.is_available():
        assert _torch_kernel.resolve_device("auto") == "numpy"
        with pytest.raises(ConfigError):
            _torch_kernel.resolve_device("cuda")
    else:
        assert _torch_kernel.resolve_device("auto") == "cuda"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_release_equals_numpy_release():
    X, y, Xp, yp, W = _data()
    noise = np.random.default_rng(9).standard_normal(W.shape).astype(np.float32)
    for name, basis, kw, _ in _cases(X, Xp, yp, W):
        a = private_release(X, y, W, 0.6, basis, noise=noise, **kw)
        b = _torch_kernel.torch_private_release(X, y, W, 0.6, basis, noise=noise, device="cuda", **kw)
        for u, v in zip(a, b):
            np.testing.assert_allclose(v, u, rtol=1e-4, atol=1e-5, err_msg=name)
