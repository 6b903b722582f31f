"""Torch implementation of the NoisyGD / AdaMix private release (CPU or CUDA).

:func:`torch_private_release` has the signature of
:func:`mixdp_core.methods.adamix.engine.private_release` (plus ``device``) and computes the same
quantity: ``U U^T (sum_i clip_tau(g_i) + noise)`` with ``g_i = x_i (p_i - y_i)^T``,
``clip_tau(g) = g min(1, tau/||g||_F)`` and ``||g_i||_F = ||x_i|| ||p_i - y_i||``. The noise
(drawn by the caller, ``N(0, sigma^2 tau^2)`` per coordinate) is added and the projection
applied on the host exactly as in the numpy path, so the mechanism, its sensitivity (``tau``
under add/remove of one private row) and the accounting are unchanged; only the two products
with ``X`` and the per-sample clip factors run in torch.

:func:`resolve_release` maps a device option (the methods' ``device`` field: ``"auto" | "cpu" |
"cuda"``, plus ``"torch_cpu"`` for tests and benchmarks) to a release function, so the NoisyGD
loop switches backend with one config field. ``torch`` is imported only when a torch backend
is actually used (never for ``"cpu"``, nor for ``"auto"`` on a small problem or a machine
without an NVIDIA driver).

Device copies of ``X`` (and of the cached ``XB`` / ``X Q_p``) are kept between steps, keyed by
the identity of the numpy array: the arrays must not be modified in place during a run.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import weakref
from typing import Any, Callable, Optional

import numpy as np

#: The ``device`` options of the method configs.
DEVICES = ("auto", "cpu", "cuda")
#: Options the engine accepts: also ``"torch_cpu"`` (the torch kernel on the CPU: slower than
#: the numpy / fused kernels, kept to test the torch path where no GPU is lent).
ENGINE_DEVICES = DEVICES + ("torch_cpu",)

#: ``"auto"`` picks CUDA only for private features of at least this many bytes. Why: a CUDA run
#: first pays torch's import and the CUDA context (~1-3 s of CPU, the same order as a whole
#: digits run) and one copy of ``X`` to the device, while each CPU step costs ~3-5 streaming
#: passes over ``X`` (``benchmarks/train.py``). At 16 MiB a CPU step is ~5-10 ms, so the
#: calibrated few hundred steps (sigma = 20) take ~the start-up cost: below it the CPU kernel
#: finishes first; CIFAR-10-size features (50,000 x 1,280 float32, 256 MiB) are far above.
#: Chosen from these public orders of magnitude; no GPU was lent to measure it.
AUTO_CUDA_MIN_BYTES = 16 << 20

_CACHE_LOCK = threading.Lock()
_DEVICE_CACHE: dict[tuple[int, str], tuple[Any, Any]] = {}


def _cuda_available() -> bool:
    """Whether torch sees a CUDA device; imports torch only if it could (driver present)."""
    if "torch" not in sys.modules and not (os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia")):
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def check_device(device: Any) -> None:
    """Validator of the configs' ``device`` field: ``"cuda"`` needs a CUDA device now.

    Raises:
        ConfigError: ``("device", ...)``, one line, when ``cuda`` is asked on a machine where
            torch sees no CUDA device (or for an unknown option).
    """
    resolve_device(device)


def resolve_device(device: str = "auto", nbytes: Optional[int] = None) -> str:
    """The kernel for a device option: ``"numpy"`` (numpy / fused CPU kernel of the engine),
    ``"cpu"`` (torch on the CPU) or ``"cuda"``.

    ``"auto"`` is ``"cuda"`` when a CUDA device is usable and ``nbytes`` (the size of the private
    features; None = unknown, taken as large) is at least :data:`AUTO_CUDA_MIN_BYTES`, else
    ``"numpy"``: on a CPU the engine's kernels beat torch (``benchmarks/train.py``, key
    ``torch_cpu_release_over_numpy_release``). ``"cpu"`` is the engine's CPU kernel,
    ``"torch_cpu"`` torch on the CPU.
    """
    from ..errors import ConfigError

    if device not in ENGINE_DEVICES:
        raise ConfigError("device", f"must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "auto":
        if nbytes is not None and nbytes < AUTO_CUDA_MIN_BYTES:
            return "numpy"  # decided before looking for a GPU: small runs never import torch
        return "cuda" if _cuda_available() else "numpy"
    if device == "cuda" and not _cuda_available():
        raise ConfigError("device", "must be 'auto' or 'cpu' on this machine: 'cuda' asked but torch sees no CUDA device")
    return {"cpu": "numpy", "torch_cpu": "cpu"}.get(device, device)


def resolve_release(device: str = "auto", nbytes: Optional[int] = None) -> Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The release function for ``device`` (same signature as ``private_release``); see
    :func:`resolve_device`."""
    dev = resolve_device(device, nbytes)
    if dev == "numpy":
        from .adamix.engine import private_release

        return private_release
    return functools.partial(torch_private_release, device=dev)


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


def torch_private_release(
    X: np.ndarray,
    y: np.ndarray,
    W: np.ndarray,
    tau: float,
    basis: Any,
    *,
    noise: Optional[np.ndarray] = None,
    x_norm: Optional[np.ndarray] = None,
    XB: Optional[np.ndarray] = None,
    X_Qp: Optional[np.ndarray] = None,
    block_rows: Optional[int] = None,
    ratio_out: Optional[np.ndarray] = None,
    loss_out: Optional[np.ndarray] = None,
    threads: Optional[int] = None,
    device: str = "cpu",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Torch version of :func:`mixdp_core.methods.adamix.engine.private_release` (same arguments,
    same returns: ``(released (D, C), ratio (N,), loss (N,))`` as numpy arrays).

    Sensitivity of ``U^T sum_i clip_tau(g_i)`` under add/remove of one row: ``tau``; the noise
    ``noise`` (already scaled by ``sigma * tau``) is added on the host before the projection,
    as in the numpy kernel. ``device``: the torch device, ``"cpu"`` or ``"cuda"`` (``"auto"``
    resolves with :func:`resolve_device`, possibly to the numpy kernel). ``threads`` sets torch's intra-op threads for the call (CPU).
    """
    import torch

    dev = resolve_device(device) if device == "auto" else device
    if dev == "numpy":
        from .adamix.engine import private_release

        return private_release(X, y, W, tau, basis, noise=noise, x_norm=x_norm, XB=XB, X_Qp=X_Qp,
                               block_rows=block_rows, ratio_out=ratio_out, loss_out=loss_out, threads=threads)
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
        b = N if block_rows is None and dev != "cpu" else max(1, int(block_rows or 4096))
        ST = torch.zeros((C, D), dtype=tdt, device=dev)
        ratio_t = torch.empty(N, dtype=torch.float64, device=dev)
        loss_t = torch.empty(N, dtype=torch.float64, device=dev)
        for a in range(0, N, b):
            sl = slice(a, min(N, a + b))
            Xb = Xt[sl]
            Z = Xb @ fused
            logits = Z[:, :C]
            ya = yt[sl]
            logp = torch.log_softmax(logits, dim=1)
            loss_t[sl] = -logp.gather(1, ya[:, None])[:, 0].to(torch.float64)
            E = logp.exp()
            E[torch.arange(E.shape[0], device=dev), ya] -= 1.0
            en = torch.linalg.vector_norm(E.to(torch.float64), dim=1)
            g = xn[sl] * en
            c = torch.clamp(tau / g, max=1.0)  # g = 0 -> inf -> 1
            E = E * c.to(tdt)[:, None]
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
    from ._linear import into

    ratio, loss = into(ratio_out, ratio), into(loss_out, loss)
    noisy = S if noise is None else S + noise
    if basis is not None:
        noisy = basis.project(noisy)
    return noisy, ratio, loss
