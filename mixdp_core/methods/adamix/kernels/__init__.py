"""Release kernels of NoisyGD / AdaMix: one interface, several backends.

A kernel (:class:`ReleaseKernel`) computes the part of a step that reads the private rows, the
clipped gradient sum ``S = sum_i clip_tau(g_i)`` (L2 sensitivity ``tau``) with the per-sample
pDP ratios and losses; :func:`mixdp_core.methods.adamix.engine.private_release` adds the
noise and projects, identically for every backend. Registered backends (:data:`KERNELS`):

* ``"numpy"``: blocked numpy (:mod:`.numpy_backend`), every dtype and projection;
* ``"numba"``: the fused one-pass kernel (:mod:`.numba_backend`), where numba is installed;
* ``"cpu"``: numba for large float32 problems it supports, numpy otherwise (:mod:`.cpu`);
* ``"torch"`` / ``"cuda"``: torch on the CPU / on a CUDA device (:mod:`.torch_backend`).

:func:`resolve_device` maps the methods' ``device`` option to one of them. Importing this
package imports neither numba nor torch (each is imported when its kernel first runs).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

from ....errors import ConfigError
from . import cpu, numba_backend, numpy_backend, torch_backend  # noqa: F401  (each registers its kernels)
from .base import KERNELS, ReleaseKernel, get_kernel, register

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
    """The :data:`KERNELS` key a ``device`` option runs on: ``"cpu"``, ``"torch"`` or ``"cuda"``.

    ``"auto"`` is ``"cuda"`` when a CUDA device is usable and ``nbytes`` (the size of the private
    features; None = unknown, taken as large) is at least :data:`AUTO_CUDA_MIN_BYTES`, else
    ``"cpu"``: on a CPU the numpy / numba kernels beat torch (``benchmarks/train.py``, key
    ``torch_cpu_release_over_numpy_release``). ``"torch_cpu"`` is ``"torch"`` (torch on the CPU).

    Raises:
        ConfigError: ``("device", ...)`` for an unknown option, or ``"cuda"`` without a device.
    """
    if device not in ENGINE_DEVICES:
        raise ConfigError("device", f"must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "auto":
        if nbytes is not None and nbytes < AUTO_CUDA_MIN_BYTES:
            return "cpu"  # decided before looking for a GPU: small runs never import torch
        return "cuda" if _cuda_available() else "cpu"
    if device == "cuda" and not _cuda_available():
        raise ConfigError("device", "must be 'auto' or 'cpu' on this machine: 'cuda' asked but torch sees no CUDA device")
    return {"torch_cpu": "torch"}.get(device, device)


def kernel_for(device: str = "auto", nbytes: Optional[int] = None) -> ReleaseKernel:
    """The kernel a run with this ``device`` option uses (:func:`resolve_device`)."""
    return KERNELS.get(resolve_device(device, nbytes))


__all__ = [
    "AUTO_CUDA_MIN_BYTES", "DEVICES", "ENGINE_DEVICES", "KERNELS", "ReleaseKernel", "check_device", "get_kernel",
    "kernel_for", "register", "resolve_device",
]
