"""The release kernels (numpy, numba, torch) give the same release as the reference (unblocked,
per-sample) computation, for every projection mode and thread / device option."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from mixdp_core.errors import ConfigError, UnknownNameError
from mixdp_core.methods import make_method
from mixdp_core.methods._linear import l2_normalize, softmax_residual
from mixdp_core.methods.adamix import kernels
from mixdp_core.methods.adamix.engine import NoisyGDOptions, NoisyGDProblem, private_release, run_noisygd
from mixdp_core.methods.adamix.kernels import cpu as cpu_kernel
from mixdp_core.methods.adamix.kernels import numba_backend, pools, torch_backend
from mixdp_core.methods.adamix.projection import b_gram, projection_basis


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


def _complement_q(U_r, B):
    """Orthonormal basis of ``(I - U_r U_r^T) B`` by numpy's Householder QR (float64)."""
    U64, B64 = np.asarray(U_r, np.float64), np.asarray(B, np.float64)
    return np.linalg.qr(B64 - U64 @ (U64.T @ B64))[0]


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
        else:  # independent of the engine's R / lazy Q: Householder QR of (I - U_r U_r^T) B
            Q_ref = _complement_q(basis.U, B)
            U = np.linalg.svd(Q_ref, full_matrices=True)[0][:, Q_ref.shape[1]:]
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


@pytest.mark.parametrize("C", [3, 4, 5, 6])
@pytest.mark.parametrize("tau", [0.05, 0.6, 10.0])
def test_fused_kernel_matches_reference(tau, C):
    """The fused one-pass kernel (numba) gives the reference release, ratios and losses for
    every projection mode it supports (C - 1 = 2, 3, 4, 5 shifted classes: the 4 x 3 and 4 x 2
    forward blocks and their remainders; N not a multiple of its 4-row groups, a zero row,
    1 and 3 threads); the modes needing a product X U_r are refused, not guessed."""
    X, y, Xp, yp, W = _data(C=C)
    supported = 0
    for name, basis, kw, U in _cases(X, Xp, yp, W):
        ref, ref_ratio, ref_loss = _reference(X, y, W, tau, U)
        if basis is not None and basis.U.shape[1] > 0 and "X_Qp" not in kw:
            with pytest.raises(ValueError, match="fused"):
                private_release(X, y, W, tau, basis, kernel="numba", **kw)
            continue
        supported += 1
        for threads in (1, 3):
            rel, ratio, loss = private_release(X, y, W, tau, basis, kernel="numba", threads=threads, **kw)
            assert rel.dtype == np.float32, name
            np.testing.assert_allclose(rel, ref, rtol=1e-4, atol=2e-5 * max(1.0, np.abs(ref).max()), err_msg=name)
            np.testing.assert_allclose(ratio, ref_ratio, rtol=1e-4, atol=1e-5, err_msg=name)
            np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-5, err_msg=name)
            assert np.all(ratio <= 1.0)
    assert supported >= 4  # none, rank-qp, 2-qp, 20-qp (complement)


def test_fused_kernel_two_classes_matches_reference():
    """C = 2: one shifted class (the 4 x 2 block with its duplicate column), no projection."""
    X, y, Xp, yp, W = _data(C=2)
    ref, ref_ratio, ref_loss = _reference(X, y, W, 0.3, np.eye(X.shape[1]))
    rel, ratio, loss = private_release(X, y, W, 0.3, None, kernel="numba")
    np.testing.assert_allclose(rel, ref, rtol=1e-4, atol=2e-5 * max(1.0, np.abs(ref).max()))
    np.testing.assert_allclose(ratio, ref_ratio, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-5)


def test_fused_kernel_equals_numpy_kernel_at_float32_tolerance():
    """Larger float32 problem: fused and numpy kernels release the same sum (same noise)."""
    rng = np.random.default_rng(5)
    N, D, C = 4099, 96, 10
    X = l2_normalize(rng.standard_normal((N, D)).astype(np.float32))
    y = rng.integers(0, C, N)
    W = (rng.standard_normal((D, C)) * 3.0).astype(np.float32)
    noise = rng.standard_normal((D, C)).astype(np.float32)
    a = private_release(X, y, W, 0.4, None, noise=noise, kernel="numpy")
    b = private_release(X, y, W, 0.4, None, noise=noise, kernel="numba")
    np.testing.assert_allclose(b[0], a[0], rtol=1e-5, atol=1e-5 * np.abs(a[0]).max())
    np.testing.assert_allclose(b[1], a[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b[2], a[2], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("projection", [None, "rank", 20])
def test_noisygd_run_with_fused_kernel_gives_same_weights(monkeypatch, projection):
    """End to end: run_noisygd picks the fused kernel by size (threshold lowered) and gives the
    weights and pDP sums of the numpy kernel."""
    X, y, Xp, yp, W = _data(N=200)
    prob = NoisyGDProblem(X, y, Xp, yp, None, None, W.shape[1])
    opts = NoisyGDOptions(noise_multiplier=3.0, steps=5, target_delta=1e-5, projection_dim=projection, seed=4,
                          noise="reproducible")  # the same draw for both kernels
    W0 = np.zeros_like(W)
    monkeypatch.setattr(cpu_kernel, "FUSED_MIN_BYTES", 1 << 62)
    ref = run_noisygd(prob, W0, W0, opts)
    calls = []
    real = numba_backend.fused_clipped_sum
    monkeypatch.setattr(numba_backend, "fused_clipped_sum", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(cpu_kernel, "FUSED_MIN_BYTES", 0)
    got = run_noisygd(prob, W0, W0, opts)
    assert len(calls) == 5
    np.testing.assert_allclose(got.W, ref.W, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got.pdp_sq_ratio_sum, ref.pdp_sq_ratio_sum, rtol=1e-4, atol=1e-6)


def test_backward_padding_does_not_change_the_release(monkeypatch):
    X, y, Xp, yp, W = _data(C=6)
    outs = []
    for mult in (1, 4, 8):
        monkeypatch.setattr(pools, "BACKWARD_ROW_MULTIPLE", mult)
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
            b = private_release(X, y, W, 0.6, basis, noise=noise, kernel="torch", block_rows=block_rows, **kw)
            for u, v, what in zip(a, b, ("released", "ratio", "loss")):
                np.testing.assert_allclose(v, u, rtol=1e-4, atol=1e-5, err_msg=f"{name} {what}")


@pytest.mark.parametrize("projection", [None, "rank", 20])
def test_noisygd_run_with_torch_kernel_gives_same_weights(monkeypatch, projection):
    X, y, Xp, yp, W = _data(N=200)
    prob = NoisyGDProblem(X, y, Xp, yp, None, None, W.shape[1])
    opts = NoisyGDOptions(noise_multiplier=3.0, steps=5, target_delta=1e-5, projection_dim=projection, seed=4,
                          noise="reproducible")  # the same draw for both kernels
    W0 = np.zeros_like(W)
    ref = run_noisygd(prob, W0, W0, opts)
    got = run_noisygd(prob, W0, W0, dataclasses.replace(opts, device="torch_cpu"))
    np.testing.assert_allclose(got.W, ref.W, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got.pdp_sq_ratio_sum, ref.pdp_sq_ratio_sum, rtol=1e-4, atol=1e-6)


def test_device_resolution():
    assert kernels.kernel_for("cpu") is kernels.get_kernel("cpu")
    assert kernels.resolve_device("torch_cpu") == "torch"
    with pytest.raises(ConfigError, match="device"):
        kernels.resolve_device("tpu")
    small, large = 1 << 20, kernels.AUTO_CUDA_MIN_BYTES
    assert kernels.resolve_device("auto", small) == "cpu"  # never a GPU for a small problem
    if not torch.cuda.is_available():
        assert kernels.resolve_device("auto", large) == "cpu"
        with pytest.raises(ConfigError, match="device"):
            kernels.resolve_device("cuda")
    else:
        assert kernels.resolve_device("auto", large) == "cuda"
    for device in kernels.ENGINE_DEVICES:  # every device option names a registered kernel
        if device != "cuda" or torch.cuda.is_available():
            assert kernels.resolve_device(device) in kernels.KERNELS


def test_auto_picks_cuda_only_when_available_and_large(monkeypatch):
    monkeypatch.setattr(kernels, "_cuda_available", lambda: True)
    assert kernels.resolve_device("auto", kernels.AUTO_CUDA_MIN_BYTES) == "cuda"
    assert kernels.resolve_device("auto", kernels.AUTO_CUDA_MIN_BYTES - 1) == "cpu"
    assert kernels.resolve_device("cpu", 1 << 40) == "cpu"
    monkeypatch.setattr(kernels, "_cuda_available", lambda: False)
    assert kernels.resolve_device("auto", 1 << 40) == "cpu"


def test_kernel_registry_lists_the_real_backends_on_an_unknown_name():
    assert {"cpu", "numpy", "numba", "torch", "cuda"} <= set(kernels.KERNELS)
    assert all(isinstance(kernels.get_kernel(k), kernels.ReleaseKernel) for k in kernels.KERNELS)
    with pytest.raises(UnknownNameError) as e:
        kernels.get_kernel("tpu")
    assert "'tpu'" in str(e.value) and all(k in str(e.value) for k in kernels.KERNELS)
    X, y, Xp, yp, W = _data()
    with pytest.raises(UnknownNameError, match="numpy"):
        private_release(X, y, W, 0.3, None, kernel="fused")


def test_cpu_kernel_picks_numba_only_for_large_supported_problems(monkeypatch):
    X, y, Xp, yp, W = _data()
    Ep, _ = softmax_residual(Xp @ W, yp)
    rank = projection_basis(Xp.T @ Ep, "rank", None)  # X U_r needs a product with X: numpy only
    cpu = kernels.get_kernel("cpu")
    assert cpu.select(X, None, None).name == "numpy"  # small
    monkeypatch.setattr(cpu_kernel, "FUSED_MIN_BYTES", 0)
    assert cpu.select(X, None, None).name == "numba"
    assert cpu.select(X, rank, None).name == "numpy"
    assert cpu.select(X.astype(np.float64), None, None).name == "numpy"
    assert cpu.select(np.asfortranarray(X), None, None).name == "numpy"


def test_the_engine_adds_the_noise_and_projects_whatever_the_kernel():
    """private_release with any ReleaseKernel releases U U^T (S + noise) of that kernel's S:
    the mechanism (noise, projection) is the engine's, not the backend's."""

    class Fixed(kernels.ReleaseKernel):
        name = "fixed"

        def clipped_sum(self, X, y, W, tau, basis, *, ratio_out=None, loss_out=None, **kw):
            return np.full(W.shape, 2.0, np.float32), np.full(len(y), 0.5), np.zeros(len(y))

    X, y, Xp, yp, W = _data()
    noise = np.random.default_rng(1).standard_normal(W.shape).astype(np.float32)
    Ep, _ = softmax_residual(Xp @ W, yp)
    basis = projection_basis(Xp.T @ Ep, 2, None)
    rel, ratio, _ = private_release(X, y, W, 0.3, basis, noise=noise, kernel=Fixed())
    np.testing.assert_array_equal(rel, basis.project(np.full(W.shape, 2.0, np.float32) + noise))
    assert np.all(ratio == 0.5)


def test_config_device_field_cuda_without_gpu_is_one_line_config_error(monkeypatch):
    monkeypatch.setattr(kernels, "_cuda_available", lambda: False)
    with pytest.raises(ConfigError) as e:
        make_method("adamix", device="cuda")
    assert e.value.field == "device" and "\n" not in str(e.value) and "cuda" in str(e.value)
    with pytest.raises(ConfigError, match="device"):
        make_method("ngd", device="tpu")
    assert make_method("adamix").config.device == "auto"


@pytest.mark.parametrize("method", ["adamix", "ngd"])
def test_fit_on_cuda_path_gives_the_cpu_weights(monkeypatch, small_split, method):
    """End to end through ``fit``: ``device="cuda"`` reaches the torch kernel and releases the
    same weights as ``device="cpu"`` for the same seed (same noise draw). Without a GPU the
    CUDA device is simulated by running the torch kernel on the CPU."""
    kw = dict(target_epsilon=2.0, noise_multiplier=5.0, seed=3, noise="reproducible")
    ref = make_method(method, device="cpu", **kw).fit(small_split)
    devices = []
    real = torch_backend.torch_clipped_sum

    def on_cpu(*a, device, **k):
        devices.append(device)
        return real(*a, device="cpu" if not torch.cuda.is_available() else device, **k)

    monkeypatch.setattr(kernels, "_cuda_available", lambda: True)
    monkeypatch.setattr(torch_backend, "torch_clipped_sum", on_cpu)
    got = make_method(method, device="cuda", **kw).fit(small_split)
    # every gradient step (not the noisy count, not the checkpoint test, not the public-start guard)
    n_grad = (ref.steps_ - ref.count_releases_ - (ref.guard_kept_private_ is not None)
              - (getattr(ref, "checkpoint_kept_early_", None) is not None))
    assert devices and set(devices) == {"cuda"} and len(devices) == n_grad
    np.testing.assert_allclose(got.W_, ref.W_, rtol=1e-4, atol=1e-5)
    assert got.steps_ == ref.steps_


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_release_equals_numpy_release():
    X, y, Xp, yp, W = _data()
    noise = np.random.default_rng(9).standard_normal(W.shape).astype(np.float32)
    for name, basis, kw, _ in _cases(X, Xp, yp, W):
        a = private_release(X, y, W, 0.6, basis, noise=noise, **kw)
        b = private_release(X, y, W, 0.6, basis, noise=noise, kernel="cuda", **kw)
        for u, v in zip(a, b):
            np.testing.assert_allclose(v, u, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("k", [1, 2, 7, 30])
def test_fused_row_sq_norms_match_numpy(k):
    """The pDP projection norms ||A_i M||^2 of the fused path (4 rows x 2 columns of M per pass,
    odd k and a row range not a multiple of 4) against float64 numpy."""
    from mixdp_core.methods.adamix.kernels import numba_jit

    if not numba_jit.available():
        pytest.skip("numba not installed")
    rng = np.random.default_rng(k)
    A = rng.standard_normal((203, 80)).astype(np.float32)
    M = rng.standard_normal((80, k)).astype(np.float32)
    lo, hi = 5, 202
    out = np.full(hi - lo, np.nan)
    numba_jit.row_sq_norms(A, np.ascontiguousarray(M.T), lo, hi, out)
    ref = np.square(A[lo:hi].astype(np.float64) @ M.astype(np.float64)).sum(1)
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=1e-6 * ref.max())


def test_shifted_weights_give_the_softmax_of_the_full_logits():
    """Logits relative to the last class (the fused kernel's operand) give the same softmax."""
    from mixdp_core.methods.adamix.kernels import numba_jit

    rng = np.random.default_rng(9)
    X = rng.standard_normal((40, 12)).astype(np.float32)
    W = rng.standard_normal((12, 7)).astype(np.float32)
    VT = numba_jit.shifted_weights(W)
    assert VT.shape == (6, 12) and VT.dtype == np.float32 and VT.flags.c_contiguous
    Z = np.concatenate([X.astype(np.float64) @ VT.T.astype(np.float64), np.zeros((40, 1))], axis=1)
    P = np.exp(Z - Z.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    Zf = X.astype(np.float64) @ W.astype(np.float64)
    Pf = np.exp(Zf - Zf.max(1, keepdims=True))
    Pf /= Pf.sum(1, keepdims=True)
    np.testing.assert_allclose(P, Pf, rtol=1e-5, atol=1e-7)


def test_fused_kernel_exp_is_float32_accurate():
    """The kernel's vectorizable exp (Cody-Waite + Cephes polynomial) against float64 exp."""
    from mixdp_core.methods.adamix.kernels import numba_jit

    if not numba_jit.available():
        pytest.skip("numba not installed")
    x = np.concatenate([np.linspace(-100.0, 0.0, 400_001), -np.logspace(-12, 0, 1000), [0.0]]).astype(np.float32)
    out = np.empty_like(x)
    numba_jit.expf_array(x, out)
    ref = np.exp(x.astype(np.float64))
    ok = x >= -87.0
    assert np.max(np.abs(out[ok] - ref[ok]) / ref[ok]) < 4e-7
    assert np.max(np.abs(out - ref)) < 1.2e-7
    assert out[-1] == 1.0


@pytest.mark.parametrize("basis_kind", ["none", "20-qp"])
def test_fused_release_sensitivity_add_remove_one_row(basis_kind):
    """Add/remove neighbours through the fused kernel (last column rebuilt from the zero row
    sum): the noiseless release moves by at most tau in Frobenius norm (float32 slack), and
    by exactly the removed row's clipped gradient, projected."""
    X, y, Xp, yp, W = _data(N=203, C=6)
    tau = 0.05
    name_basis = {n: (b, kw, U) for n, b, kw, U in _cases(X, Xp, yp, W)}
    basis, kw, U = name_basis[basis_kind]
    full, _, _ = private_release(X, y, W, tau, basis, kernel="numba", **kw)
    for j in (0, 7, 101, 202):
        keep = np.arange(len(y)) != j
        kw_j = {k: v[keep] for k, v in kw.items()}
        part, _, _ = private_release(np.ascontiguousarray(X[keep]), y[keep], W, tau, basis, kernel="numba", **kw_j)
        diff = np.linalg.norm(full.astype(np.float64) - part)
        ref_j, _, _ = _reference(X[j:j + 1], y[j:j + 1], W, tau, U)
        assert diff <= tau * (1 + 1e-4)
        np.testing.assert_allclose(full.astype(np.float64) - part, ref_j, atol=1e-5)


def _complement_basis(D=40, m=12, n_pub=9, C=5, seed=0, B=None):
    rng = np.random.default_rng(seed)
    Xp = l2_normalize(rng.standard_normal((n_pub, D)).astype(np.float32))
    yp = rng.integers(0, C, n_pub)
    W = rng.standard_normal((D, C)).astype(np.float32)
    Ep, _ = softmax_residual(Xp @ W, yp)
    qr = np.linalg.qr(Xp.T.astype(np.float64))
    if B is None:
        B = rng.standard_normal((D, m)).astype(np.float32)
    basis = projection_basis(Xp.T @ Ep, D - B.shape[1], B, public_qr=qr, E_pub=Ep)
    assert basis.mode == "complement" and basis.U.shape[1] == C - 1
    return basis, B, qr


@pytest.mark.parametrize("near_singular", [False, True])
def test_complement_basis_without_qr_spans_the_householder_basis(near_singular):
    """The per-step basis from the Cholesky factor of B^T B - K K^T (no QR of the D x m matrix):
    the lazily formed Q is orthonormal, spans (I - U_r U_r^T) B (projector equal to the one of
    numpy's Householder QR), Q R reproduces that matrix, and project() without Q equals
    V - Q Q^T V. With a column of B almost inside span U_r (an ill-conditioned factor) the
    Householder fallback gives the same guarantees."""
    basis, B, qr = _complement_basis()
    if near_singular:  # B's first column = U_r's first direction + 1e-5 noise: cond(R) ~ 1e5
        B = B.copy()
        B[:, 0] = basis.U[:, 0] + 1e-5 * np.random.default_rng(9).standard_normal(B.shape[0]).astype(np.float32)
        basis = _rebuilt_with(basis, B)
    Q = basis.Q.astype(np.float64)
    m = B.shape[1]
    np.testing.assert_allclose(Q.T @ Q, np.eye(m), atol=2e-5)
    Q_ref = _complement_q(basis.U64, B)
    np.testing.assert_allclose(Q @ Q.T, Q_ref @ Q_ref.T, atol=5e-5)
    Bp = B.astype(np.float64) - basis.U64 @ (basis.U64.T @ B.astype(np.float64))
    np.testing.assert_allclose(basis.Q.astype(np.float64) @ basis.R, Bp, atol=1e-4 * np.abs(Bp).max())
    V = np.random.default_rng(4).standard_normal((B.shape[0], 5)).astype(np.float32)
    P = basis.project(V)
    assert P.dtype == np.float32
    np.testing.assert_allclose(P, V - Q_ref @ (Q_ref.T @ V), atol=5e-5 * np.abs(V).max())


def _rebuilt_with(basis, B):
    """A basis with the same public directions U_r and another B, from projection_basis."""
    B64, BtB, _ = b_gram(B)
    K = B64.T @ basis.U64
    try:  # the Cholesky factor is unusable: it fails or its diagonal spans more than 1e4
        d = np.abs(np.diag(np.linalg.cholesky(BtB - K @ K.T)))
        assert d.min() < d.max() * 1e-4
    except np.linalg.LinAlgError:
        pass
    # drive projection_basis with a G_pub whose left singular vectors are U_r
    G = basis.U64 @ np.diag(np.arange(basis.U64.shape[1], 0, -1.0))
    rebuilt = projection_basis(G, B.shape[0] - B.shape[1], B)
    assert rebuilt._Q is not None  # the Householder fallback formed Q
    return rebuilt


@pytest.mark.parametrize("n_rows", [1, 3, 4, 203])
def test_complement_projection_norms_match_explicit_q(n_rows):
    """||U^T x_i||^2 = ||x||^2 - ||Q^T x||^2 by the low-rank maps of the fused path (the cached
    ||P_B x||^2 and two r-column maps of [X B | X Q_p]; row ranges with and without a 4-row
    remainder, r = 4 odd/even pairs) against float64 with numpy's Householder Q."""
    from mixdp_core.methods.adamix.kernels import numba_jit
    from mixdp_core.methods.adamix.kernels.numba_backend import complement_base, complement_maps

    if not numba_jit.available():
        pytest.skip("numba not installed")
    basis, B, qr = _complement_basis(C=6)
    rng = np.random.default_rng(n_rows)
    X = l2_normalize(rng.standard_normal((n_rows + 5, B.shape[0])).astype(np.float32)) * 1.7
    xn = np.linalg.norm(X.astype(np.float64), axis=1)
    XB = X @ B
    XQp = (X @ qr[0]).astype(np.float32)
    A = np.ascontiguousarray(np.concatenate([XB, XQp], axis=1))
    M1T, M2T = complement_maps(basis, XQp.shape[1])
    base = complement_base(XB, B, xn)
    lo, hi = 2, 2 + n_rows
    out = np.full(n_rows, np.nan)
    numba_jit.sq_norms_lowrank(A, M1T, B.shape[1], M2T, base, lo, hi, out)
    Q_ref = _complement_q(basis.U, B)
    X64 = X[lo:hi].astype(np.float64)
    ref = np.square(xn[lo:hi]) - np.square(X64 @ Q_ref).sum(1)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-6 * np.square(xn).max())
    # no public directions (r = 0): ||U^T x||^2 = ||x||^2 - ||P_B x||^2
    M1T0, M2T0 = complement_maps(basis, 0)
    out0 = np.full(n_rows, np.nan)
    numba_jit.sq_norms_lowrank(np.ascontiguousarray(XB), M1T0, B.shape[1], M2T0, base, lo, hi, out0)
    QB = np.linalg.qr(B.astype(np.float64))[0]
    np.testing.assert_allclose(out0, np.square(xn[lo:hi]) - np.square(X64 @ QB).sum(1), rtol=1e-4,
                               atol=2e-6 * np.square(xn).max())


def _reference_offset(X, y, W, tau, b):
    """Per-sample clipped gradients of the logit-adjusted loss ``-log softmax(x W + b)_y``."""
    X64 = X.astype(np.float64)
    E, loss = softmax_residual(X64 @ W.astype(np.float64) + b.astype(np.float64), y)
    g = np.einsum("nd,nc->ndc", X64, E)
    n = np.linalg.norm(g, axis=(1, 2))
    c = np.minimum(1.0, tau / np.where(n > 0, n, 1.0))
    return (g * c[:, None, None]).sum(0), np.minimum(1.0, c * n / tau), loss


@pytest.mark.parametrize("kernel", ["numpy", "numba", "torch"])
@pytest.mark.parametrize("C", [2, 5, 6])
def test_every_kernel_applies_the_logit_offset(kernel, C):
    """The logit-adjusted release equals the explicit per-sample computation on every backend
    (numba: offsets shifted to the last class like the logits), differs from the plain release
    (the offset is used), and the offset moves no clipped term above tau (sensitivity kept)."""
    X, y, Xp, yp, W = _data(C=C)
    b = np.log(np.linspace(1.0, 9.0, C) / np.linspace(1.0, 9.0, C).sum()).astype(np.float32)
    tau = 0.3
    ref, ref_ratio, ref_loss = _reference_offset(X, y, W, tau, b)
    rel, ratio, loss = private_release(X, y, W, tau, None, kernel=kernel, logit_offset=b)
    scale = max(1.0, np.abs(ref).max())
    np.testing.assert_allclose(rel, ref, rtol=1e-4, atol=2e-5 * scale)
    np.testing.assert_allclose(ratio, ref_ratio, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-5)
    plain, _, _ = private_release(X, y, W, tau, None, kernel=kernel)
    assert np.abs(plain - rel).max() > 1e-2 * scale
    assert np.all(ratio <= 1.0)
    # a constant offset changes nothing (softmax is shift-invariant)
    same, _, _ = private_release(X, y, W, tau, None, kernel=kernel, logit_offset=np.full(C, -2.5, np.float32))
    np.testing.assert_allclose(same, plain, rtol=1e-4, atol=2e-5 * scale)


@pytest.mark.parametrize("kernel", ["numpy", "numba", "torch"])
@pytest.mark.parametrize("C", [2, 5])
def test_every_kernel_writes_the_clipped_residuals_where_asked(kernel, C):
    """``resid_out`` (the guard's leave-one-out tracking) receives ``c_i (p_i - y_i)`` from every
    backend, with and without a logit offset, and asking for it changes nothing released."""
    X, y, _, _, W = _data(C=C)
    tau = 0.3
    for b in (None, np.log(np.linspace(1.0, 9.0, C) / np.linspace(1.0, 9.0, C).sum()).astype(np.float32)):
        E, _ = softmax_residual(X.astype(np.float64) @ W.astype(np.float64)
                                + (0.0 if b is None else b.astype(np.float64)), y)
        n = np.linalg.norm(X.astype(np.float64), axis=1) * np.linalg.norm(E, axis=1)
        ref = E * np.where(n > 0, np.minimum(1.0, tau / np.where(n > 0, n, 1.0)), 1.0)[:, None]  # row 7: x = 0
        out = np.full((len(y), C), np.nan)
        got = private_release(X, y, W, tau, None, kernel=kernel, logit_offset=b, resid_out=out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
        plain = private_release(X, y, W, tau, None, kernel=kernel, logit_offset=b)
        for u, v in zip(got, plain):
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("C", [2, 10])
@pytest.mark.parametrize("tau", [1e-2, 1e-4, 1e-6])
def test_every_kernel_keeps_a_confident_rows_contribution_within_tau(tau, C):
    """A row the model classifies with p_y ~ 1 has residuals ~ 1e-7: in float32 p_y - 1 is
    rounded to 1's ulp, and the fused kernel's last column (minus the sum of the others) was not
    the column whose norm it clipped: one row moved the release by 1.006 tau at tau = 1e-6
    (1.3 tau in a whole run with init_scale='none', public_l2=0). The sensitivity is tau."""
    from mixdp_core.methods.adamix.kernels import get_kernel

    rng = np.random.default_rng(1)
    D = 64
    worst = {k: 0.0 for k in ("numpy", "numba", "torch")}
    for _ in range(60):
        x = rng.standard_normal((1, D))
        x = (x / np.linalg.norm(x)).astype(np.float32)
        y = rng.integers(0, C, 1)
        z = (rng.standard_normal(C) * 0.1).astype(np.float32)
        z[y[0]] += -np.log(tau * rng.uniform(1.5, 20) / (C - 1))  # 1 - p_y a few tau: clipped
        W = np.outer(x[0], z).astype(np.float32)
        for k in worst:
            S = np.asarray(get_kernel(k).clipped_sum(x, y, W, tau, None)[0], np.float64)
            worst[k] = max(worst[k], float(np.linalg.norm(S)) / tau)
    assert all(v <= 1 + 1e-5 for v in worst.values()), worst


def test_the_cpu_kernels_choice_reads_the_released_size_not_the_private_one():
    """AdaMix picked numpy or the fused numba kernel from the private X's bytes: timing and
    rounding changed at an exact-N threshold no accounting covers. The run now passes a size
    from released (the noisy count) or public values, and the choice reads only that."""
    from mixdp_core.methods.adamix.kernels import cpu

    X = np.ones((64, 8), dtype=np.float32)  # tiny: by its own size always numpy
    assert cpu.CpuKernel().select(X, None, None).name == "numpy"
    assert cpu.CpuKernel().sized(cpu.FUSED_MIN_BYTES - 1).select(X, None, None).name == "numpy"
    big = cpu.CpuKernel().sized(cpu.FUSED_MIN_BYTES).select(X, None, None).name
    assert big == ("numba" if numba_backend.available() else "numpy")


def test_the_numpy_blocking_reads_the_released_size_too(monkeypatch):
    """One block or 384-row blocks round differently (2.4e-6 apart), and the choice switched at an
    exact N (8,192 rows at D = 64): a sized CPU kernel blocks by its released size alone."""
    from mixdp_core.methods.adamix.kernels import cpu, numpy_backend

    seen = []
    real = numpy_backend.NumpyKernel.clipped_sum
    monkeypatch.setattr(numpy_backend.NumpyKernel, "clipped_sum",
                        lambda self, *a, **kw: seen.append(kw.get("block_rows")) or real(self, *a, **kw))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 8)).astype(np.float32)
    y = rng.integers(0, 3, 500)
    W = np.zeros((8, 3), np.float32)
    cpu.CpuKernel().sized(1 << 10).clipped_sum(X, y, W, 0.5, None)
    cpu.CpuKernel().sized(numpy_backend.SINGLE_BLOCK_BYTES + 1).clipped_sum(X, y, W, 0.5, None)
    assert seen == [500, numpy_backend.DEFAULT_BLOCK_ROWS]  # from the hint, not from X's 16 KB
