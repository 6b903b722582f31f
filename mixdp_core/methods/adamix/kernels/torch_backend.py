"""Torch kernel of the private release, on the CPU (key ``"torch"``) or on CUDA (key ``"cuda"``).

:func:`torch_clipped_sum` computes what every :class:`~.base.ReleaseKernel` computes: the
clipped sum ``S = sum_i clip_tau(g_i)`` with ``g_i = x_i (p_i - y_i)^T``,
``clip_tau(g) = g min(1, tau/||g||_F)`` and ``||g_i||_F = ||x_i|| ||p_i - y_i||`` (L2
sensitivity ``tau`` under add/remove of one private row), the per-instance ratios and the
losses. Only the two products with ``X`` and the per-sample clip factors run in torch; the
noise is drawn and added, and the projection applied, on the host by the engine exactly as
for the CPU kernels, so the mechanism and the accounting are unchanged. ``torch`` is imported
only when a torch kernel runs (never for ``device="cpu"``, nor for ``"auto"`` on a small
problem or a machine without an NVIDIA driver: :func:`~mixdp_core.methods.adamix.kernels.resolve_device`).

Device copies of ``X`` (and of the cached ``XB`` / ``X Q_p``) are kept between steps, keyed by
the identity of the numpy array: the arrays must not be modified in place during a run.
"""

from __future__ import annotations

import importlib.util
import threading
import weakref
from typing import Any, Optional

import numpy as np

from ..._linear import into
from .base import ReleaseKernel, register

_CACHE_LOCK = threading.Lock()
_DEVICE_CACHE: dict[tuple[int, str], tuple[Any, Any]] = {}


def _on_device(a: Optional[np.ndarray], device: str, dtype: Any = None):
    """Torch view (CPU, no copy when possible) or cached device copy of a numpy array."""
    import torch

    if a is None:
        return None
    if device == "cpu":
        t = torch.from_numpy(np.ascontiguousarray(a))
        return t if dtype is None else t.to(dtype)
    key = (id(a), device)
    with _CACHE_LOCK:
        hit = _DEVICE_CACHE.get(key)
        if hit is not None and hit[0]() is a:
            return hit[1]
    t = torch.from_numpy(np.ascontiguousarray(a)).to(device)
    if dtype is not None:
        t = t.to(dtype)
    try:
        ref = weakref.ref(a, lambda _r, k=key: _DEVICE_CACHE.pop(k, None))
    except TypeError:  # not weak-referenceable: do not cache
        return t
    with _CACHE_LOCK:
        _DEVICE_CACHE[key] = (ref, t)
    return t


def torch_clipped_sum(
    X: np.ndarray,
    y: np.ndarray,
    W: np.ndarray,
    tau: float,
    basis: Any,
    *,
    x_norm: Optional[np.ndarray] = None,
    XB: Optional[np.ndarray] = None,
    X_Qp: Optional[np.ndarray] = None,
    block_rows: Optional[int] = None,
    threads: Optional[int] = None,
    ratio_out: Optional[np.ndarray] = None,
    loss_out: Optional[np.ndarray] = None,
    logit_offset: Optional[np.ndarray] = None,
    resid_out: Optional[np.ndarray] = None,
    device: str = "cpu",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:meth:`~.base.ReleaseKernel.clipped_sum` in torch on ``device`` (``"cpu"`` or ``"cuda"``):
    ``(S (D, C), ratio (N,), loss (N,))`` as numpy arrays.

    ``S`` (L2 sensitivity ``tau`` under add/remove of one row) is accumulated on the device in
    ``X``'s float dtype and copied back; no noise is added here. ``block_rows``: rows per block
    (default: all rows on CUDA, 4096 on the CPU). ``threads`` sets torch's intra-op threads
    for the call (CPU).
    """
    import torch

    dev = device
    N, D = X.shape
    C = W.shape[1]
    ft = np.result_type(X.dtype, np.float32)
    tdt = torch.float64 if ft == np.float64 else torch.float32
    tau = float(tau)
    prev_threads = None
    if dev == "cpu" and threads is not None:
        prev_threads = torch.get_num_threads()
        torch.set_num_threads(int(threads))
    try:
        Xt = _on_device(X if X.dtype == ft else X.astype(ft), dev)
        yt = _on_device(np.asarray(y, dtype=np.int64), dev)
        if x_norm is None:
            xn = torch.linalg.vector_norm(Xt.to(torch.float64), dim=1)
        else:
            xn = _on_device(np.asarray(x_norm, dtype=np.float64), dev)
        Wt = torch.as_tensor(np.asarray(W, dtype=ft), device=dev)
        U_r = basis.U if basis is not None else None
        has_ur = U_r is not None and U_r.shape[1] > 0
        via_qp = has_ur and basis.coef is not None and X_Qp is not None
        complement = basis is not None and basis.mode == "complement"
        fused = torch.cat([Wt, torch.as_tensor(U_r.astype(ft), device=dev)], dim=1) if has_ur and not via_qp else Wt
        if complement:
            if XB is None:
                XB = X @ basis.B
            M = np.linalg.inv(basis.R)
            Mt = torch.as_tensor(M.astype(ft), device=dev)
            UBM = torch.as_tensor((basis.U.T.astype(np.float64) @ basis.B.astype(np.float64) @ M).astype(ft), device=dev)
            XBt = _on_device(XB if XB.dtype == ft else XB.astype(ft), dev)
        if via_qp:
            coef = torch.as_tensor(basis.coef.astype(ft), device=dev)
            XQpt = _on_device(X_Qp if X_Qp.dtype == ft else X_Qp.astype(ft), dev)
        off = None if logit_offset is None else torch.as_tensor(np.asarray(logit_offset, dtype=ft), device=dev)
        b = N if block_rows is None and dev != "cpu" else max(1, int(block_rows or 4096))
        ST = torch.zeros((C, D), dtype=tdt, device=dev)
        ratio_t = torch.empty(N, dtype=torch.float64, device=dev)
        loss_t = torch.empty(N, dtype=torch.float64, device=dev)
        for a in range(0, N, b):
            sl = slice(a, min(N, a + b))
            Xb = Xt[sl]
            Z = Xb @ fused
            logits = Z[:, :C] if off is None else Z[:, :C] + off
            ya = yt[sl]
            logp = torch.log_softmax(logits, dim=1)
            loss_t[sl] = -logp.gather(1, ya[:, None])[:, 0].to(torch.float64)
            E = logp.exp()
            E[torch.arange(E.shape[0], device=dev), ya] -= 1.0
            en = torch.linalg.vector_norm(E.to(torch.float64), dim=1)
            g = xn[sl] * en
            c = torch.clamp(tau / g, max=1.0)  # g = 0 -> inf -> 1
            E = E * c.to(tdt)[:, None]
            if resid_out is not None:
                resid_out[sl] = E.to(torch.float64).cpu().numpy()
            ST.addmm_(E.T, Xb)
            if basis is None:
                r = c * g
            else:
                XU = XQpt[sl] @ coef if via_qp else Z[:, C:]
                if not complement:
                    pn = torch.linalg.vector_norm(XU.to(torch.float64), dim=1)
                else:
                    XQ = XBt[sl] @ Mt
                    if XU.shape[1] > 0:
                        XQ = XQ - XU @ UBM
                    q2 = (XQ.to(torch.float64) ** 2).sum(dim=1)
                    pn = torch.sqrt(torch.clamp(xn[sl] ** 2 - q2, min=0.0))
                r = c * pn * en
            ratio_t[sl] = torch.clamp(r / tau, max=1.0)
        S = ST.T.cpu().numpy()
        ratio = ratio_t.cpu().numpy()
        loss = loss_t.cpu().numpy()
    finally:
        if prev_threads is not None:
            torch.set_num_threads(prev_threads)
    return S, into(ratio_out, ratio), into(loss_out, loss)


class TorchKernel(ReleaseKernel):
    """:meth:`~.base.ReleaseKernel.clipped_sum` by :func:`torch_clipped_sum` on one torch device.

    Args:
        name: the registry key.
        device: ``"cpu"`` (slower than the numpy / numba kernels, kept to test the torch path
            where no GPU is lent) or ``"cuda"``.
    """

    def __init__(self, name: str, device: str):
        self.name = name
        self.device = device

    def clipped_sum(self, X, y, W, tau, basis, **kw):
        # looked up at call time, so a test can stand in for the device function
        return torch_clipped_sum(X, y, W, tau, basis, device=self.device, **kw)


if importlib.util.find_spec("torch") is not None:  # find_spec imports nothing
    register(TorchKernel("torch", "cpu"))
    register(TorchKernel("cuda", "cuda"))
