"""ONNX Runtime inference for the convolutional encoders (CPU): export, int8 quantization, sessions.

Contracts:

* :func:`export_onnx` writes a graph whose input ``images`` is a ``(B, S, S, 3)`` **uint8**
  batch (the output of ``TorchImageEncoder.preprocess_image``, stacked) and whose output
  ``features`` is ``(B, D)`` float32. The normalization ``(x / 255 - mean) / std`` and the
  NHWC -> NCHW transpose are part of the graph, so the caller hands over raw pixels.
* Files are written atomically (a temporary file in the destination folder, then
  ``os.replace``): a reader sees no file or a complete one, and two processes exporting the
  same model at once both end with a valid file.
* :func:`quantize_int8` calibrates on :func:`calibration_images`: square crops of the two
  photographs shipped with scikit-learn (``sklearn.datasets.load_sample_images``: a Chinese
  temple and a flower, public images). The calibration never reads the user's data, so an
  int8 feature is still a function of its own image only (what the privacy accounting of
  the methods assumes of features), and the same for every data set.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .._io import stat_identity, sweep_orphans
from .._io import usable_cores  # noqa: F401  (re-exported: efficientnet and the benchmarks read it here)

#: Calibration images for int8 static quantization (crops of scikit-learn's two sample photos).
CALIBRATION_IMAGES = 64
#: Seed of the crop positions and sizes.
CALIBRATION_SEED = 0
#: Identifies the calibration recipe (data, count, seed, method, formats) in file names and
#: feature-cache keys: change it whenever the recipe changes.
CALIBRATION_TAG = (f"sklearn-sample-photos-{CALIBRATION_IMAGES}crops-seed{CALIBRATION_SEED}"
                   "-preprocessed-minmax-qdq-u8s8-perchannel-v2")
#: ONNX opset of the export (the TorchScript exporter of the pinned torch supports 7-20).
OPSET = 17


#: CPU flags (Linux ``/proc/cpuinfo``) of the int8 dot-product instructions onnxruntime's u8s8
#: kernels use: int8 accuracy was measured on such a CPU. Without them (AVX2 only) the kernels
#: use ``vpmaddubsw``, which onnxruntime's documentation says can saturate: on an AVX2-only AMD
#: EPYC the int8 features of random weights at 96 px had cosine 0.81-0.96 to fp32's
#: (``tests/encoders/test_backends.py``), against > 0.95 with VNNI.
INT8_CPU_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def cpu_has_int8_dot(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU reports one of :data:`INT8_CPU_FLAGS` in ``cpuinfo`` (False where
    unknown: not Linux, no such file, another architecture)."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return bool(set(line.split(":", 1)[1].split()) & set(INT8_CPU_FLAGS))
    except OSError:
        pass
    return False


def onnxruntime_available() -> bool:
    """Whether ``onnxruntime`` can be imported (without importing it)."""
    return importlib.util.find_spec("onnxruntime") is not None


def onnxruntime_version() -> str:
    import onnxruntime as ort

    return str(ort.__version__)


def file_digest(path: str | os.PathLike, n_hex: int = 16) -> str:
    """First ``n_hex`` hex digits of the SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:n_hex]


#: (absolute path, size, st_mtime_ns, st_ctime_ns, st_ino) -> SHA-256 hex of the file, so that
#: a weights file (100 MB - 1 GB) is read once per process, not once per cache-key lookup.
_DIGESTS: dict[tuple, str] = {}


def cached_file_digest(path: str | os.PathLike, n_hex: int = 16) -> str:
    """:func:`file_digest` of ``path``, remembered while the file's stat identity (size,
    ``st_mtime_ns``, ``st_ctime_ns``, inode) is unchanged: rewriting the file, even with its
    old mtime put back (``cp -p``, ``rsync -t``), changes its ctime and so re-reads it."""
    p = os.path.abspath(os.fspath(path))
    ident = (p, *stat_identity(os.stat(p)))
    full = _DIGESTS.get(ident)
    if full is None:
        full = file_digest(p, n_hex=64)
        if len(_DIGESTS) > 256:  # a long-lived app process: keep the memo small
            _DIGESTS.clear()
        _DIGESTS[ident] = full
    return full[:n_hex]


def state_digest(module, n_hex: int = 16) -> str:
    """First ``n_hex`` hex digits of the SHA-256 of a module's ``state_dict`` (names, shapes, values)."""
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        a = t.detach().cpu().contiguous().numpy()
        h.update(f"{name}:{a.dtype}:{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:n_hex]


def _tmp_path(dest: Path) -> Path:
    # a process killed mid-export (kill -9) left its temp file here for good: the stale ones (an
    # hour old, never a live writer's) go first
    sweep_orphans(dest.parent, (".*.tmp",))
    sweep_orphans(tempfile.gettempdir(), ("mixdp-quant-*",))
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    os.close(fd)
    return Path(tmp)


def _replace_or_remove(tmp: Path, dest: Path, ok: bool) -> None:
    if ok:
        os.replace(tmp, dest)
    else:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass


def export_onnx(model, dest: str | os.PathLike, *, image_size: int, mean: Sequence[float],
                std: Sequence[float]) -> Path:
    """Export ``model`` (``(B, 3, S, S)`` normalized float -> ``(B, D)``) to ``dest`` with the
    uint8 NHWC input and the normalization folded in (see the module docstring).

    The batch dimension is dynamic; ``S = image_size`` pixels is fixed (the "same" padding of
    the strided convs is computed for it). ``model`` is left in eval mode and unchanged.
    """
    import torch
    from torch import nn

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # (x / 255 - mean) / std = (x - 255 mean) / (255 std), as Sub + Div: the int8 quantizer leaves
    # these alone (it quantizes Mul and Add; a quantized Mul + Add here ran at 124 vs 175
    # images/s at 224 px). Equal statistics on every channel become scalars: onnxruntime
    # broadcasts a (1, 3, 1, 1) operand slowly (145 vs 201 images/s, int8, 224 px, 1 thread).
    offset = [255.0 * m for m in mean]
    divisor = [255.0 * s for s in std]
    shape = (1, 3, 1, 1)
    if len(set(offset)) == 1 and len(set(divisor)) == 1:
        offset, divisor, shape = offset[:1], divisor[:1], ()

    class FromUint8(nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net
            self.register_buffer("offset", torch.tensor(offset, dtype=torch.float32).view(shape))
            self.register_buffer("divisor", torch.tensor(divisor, dtype=torch.float32).view(shape))

        def forward(self, x):
            x = x.permute(0, 3, 1, 2).to(torch.float32)
            return self.net((x - self.offset) / self.divisor)

    wrapper = FromUint8(model).eval()  # export restores each module's mode: keep all in eval
    example = torch.zeros(2, image_size, image_size, 3, dtype=torch.uint8)
    tmp = _tmp_path(dest)
    ok = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's deprecation and tracer notes
            torch.onnx.export(
                wrapper, (example,), str(tmp), input_names=["images"], output_names=["features"],
                dynamic_axes={"images": {0: "batch"}, "features": {0: "batch"}}, opset_version=OPSET,
                do_constant_folding=True, dynamo=False,
            )
        ok = True
    finally:
        model.eval()
        _replace_or_remove(tmp, dest, ok)
    return dest


def calibration_images(preprocess, n: int = CALIBRATION_IMAGES, seed: int = CALIBRATION_SEED) -> np.ndarray:
    """``(n, S, S, 3)`` uint8 calibration batch: random square crops of scikit-learn's two
    sample photos (427 x 640 px each), side 32 px to the full height, alternating photos,
    each passed through ``preprocess`` (the encoder's ``preprocess_image``: resize to S).

    Public images shipped with scikit-learn; nothing of the user's data is read.
    """
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        im = photos[k % len(photos)]
        h, w, _ = im.shape
        side = int(rng.integers(32, min(h, w)))
        y, x = int(rng.integers(0, h - side)), int(rng.integers(0, w - side))
        out.append(preprocess(Image.fromarray(np.ascontiguousarray(im[y : y + side, x : x + side]))))
    return np.stack(out)


def quantize_int8(src: str | os.PathLike, dest: str | os.PathLike, calibration: np.ndarray,
                  batch: int = 16) -> Path:
    """Static int8 quantization of the fp32 graph ``src`` into ``dest`` (atomic).

    The graph is first pre-processed (``quant_pre_process``: symbolic shape inference and
    onnxruntime's graph optimizations; without it the quantized EfficientNet-Lite0 ran at
    114 vs 202 images/s at 224 px, 1 thread), then quantized: QDQ format, per-channel
    symmetric int8 weights, uint8 activations with min/max ranges observed on
    ``calibration`` (uint8 ``(N, S, S, 3)``, the graph's input), fed ``batch`` images at a time.
    """
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.i = 0

        def get_next(self):
            if self.i >= len(calibration):
                return None
            b = np.ascontiguousarray(calibration[self.i : self.i + batch])
            self.i += batch
            return {"images": b}

    import logging

    dest = Path(dest)
    tmp = _tmp_path(dest)
    ok = False
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # the tool logs advice and spurious bias notes on the root logger
    try:
        with tempfile.TemporaryDirectory(prefix="mixdp-quant-") as work:
            pre = os.path.join(work, "pre.onnx")
            quant_pre_process(str(src), pre)
            quantize_static(
                pre, str(tmp), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                calibrate_method=CalibrationMethod.MinMax, calibration_providers=["CPUExecutionProvider"],
            )
        ok = True
    finally:
        logging.disable(previous)
        _replace_or_remove(tmp, dest, ok)
    return dest


def make_session(path: str | os.PathLike, threads: int | None) -> Any:
    """An ``onnxruntime.InferenceSession`` on the CPU with every graph optimization
    (``ORT_ENABLE_ALL``), ``threads`` intra-op threads (``None`` = onnxruntime's default:
    one per physical core), sequential execution and warnings of the graph loader silenced.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.inter_op_num_threads = 1
    if threads is not None:
        so.intra_op_num_threads = int(threads)
    so.log_severity_level = 3  # errors only (the loader lists every unused initializer)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
