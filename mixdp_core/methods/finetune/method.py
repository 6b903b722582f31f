"""Sparse DP fine-tuning of a network (Luo, Wu, Adeli, Fei-Fei: "Scalable Differential
Privacy with Sparse Network Finetuning", CVPR 2021), registered in ``METHODS``.

Pipeline (Sec. 4.4, steps 1-4):

1. pre-train a GroupNorm network f^pub on the public/source data, non-privately (SGD with
   momentum, cosine LR, Sec. 5.8);
2. build the transfer model f^prv = {θ_conv, θ_norm, θ_cls^prv} with a fresh classifier for
   the private label set, and select τ (``params``: ``cls`` / ``cls_norm`` / ``all`` with the
   top-``conv_fraction`` conv weights by magnitude *of the public model* / ``full``);
3. fine-tune τ on the private data with DP-SGD (Opacus: Poisson sampling, per-sample
   clipping at ``clip_norm``, Gaussian noise σ·``clip_norm``, virtual batches), σ calibrated
   by :func:`mixdp_core.accounting.calibrate_dpsgd_noise` so that ``epochs`` epochs meet
   (``target_epsilon``, ``target_delta``).

Privacy: neighbouring datasets differ by adding/removing one *private* example; the
public/source data and the mask (a function of the public model only) cost nothing. Each
logical step is a Poisson-subsampled Gaussian mechanism with L2 sensitivity ``clip_norm``
and noise multiplier σ; ``privacy_`` is
``privacy_report(PoissonSubsampledGaussian(σ, q, steps_executed), delta=target_delta)``
for the steps actually executed (a stop request ends the run between epochs).

Dataset size: N is private under add/remove, so by default (``dataset_size="noisy_count"``)
q = min(1, B/N̂) and the gradient normalisation use N̂ = N + Z (two-sided geometric, pure
ε_c-DP, sensitivity 1; ``accounting.noisy_count_event``), and the reported event is
``AdaptiveComposition(count, PoissonSubsampledGaussian(σ, q, steps))`` with σ calibrated to
(ε − ε_c, δ) (basic composition covers q and T chosen from the count). ``"public_bound"`` uses the public bound ``size_bound`` instead;
``"public"`` takes the exact N as public and the report's mechanism says so. σ is
calibrated and ε reported with PLD by default (the RDP ε is kept in ``epsilon_rdp_``).

Per-instance DP (owner-only diagnostic, ``mixdp_core.evaluation.pdp``): every
``pdp_every_ = ceil(1/(q·pdp_overhead))`` steps the clip ratio ``min(‖g_i‖, C)/C`` of every
private row is computed at the current weights and charged, as an individual Poisson-subsampled
Gaussian step (Feldman & Zrnic 2021; Yu et al. 2023), for that step and the following ones up
to the next computation (``pdp_accumulator_``, memory O(N), not O(N·T)). ``pdp_every_ = 1`` is
exact; larger k reuses stale norms, an estimate (metric ``pdp_epsilon_kind``). The extra passes draw no
randomness, so the trained network is the same with or without them.

Data: :meth:`SparseFinetune.fit` trains on a :class:`~mixdp_core.data.splits.Split` whose
feature matrices are flattened images (``pixels`` encoder: digits give 64 = 8×8 values,
reshaped to ``(N, 1, 8, 8)``; ``image_shape`` overrides the inference), with the split's
public samples as the pre-training set. :meth:`SparseFinetune.fit_images` takes image
tensors directly, with a public/source set whose label set may differ from the private
one (e.g. CIFAR-10 classes 0-4 → classes 5-9).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Optional

import numpy as np

from ...errors import ConfigError, DataError
from ...config import SEED_RANGE, SGD_LR_RANGE, Interval, param
from ...randomness import REPRODUCIBLE, noise_rng
from .._private_count import PrivateCountConfig, check_bound, resolve_private_count
from ..base import METHODS, Method, OnStep, PrivacyConfig, StepRecord

#: ``mask`` choices (the same as :data:`.selection.MASK_KINDS`, declared here because that
#: module imports torch and configs must not).
MASK_KINDS = ("magnitude", "random")

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch import nn

# torch, opacus and the model code are imported lazily (inside methods) so that importing
# ``mixdp_core.methods`` to list the registry stays cheap.

#: The allowed values of ``params`` (same as ``selection.PARAM_MODES``, kept torch-free).
PARAM_MODES = ("cls", "cls_norm", "all", "full")


def _params_field(default: str) -> Any:
    """The ``params`` field (one declaration, re-used by the per-mode subclasses' defaults)."""
    return param(default, choices=PARAM_MODES,
                 help="Transfer parameters τ: 'cls' (classifier only), 'cls_norm' (+ GroupNorm affine), 'all' "
                      "(+ top-conv_fraction conv weights by magnitude), 'full' (whole network).")


def _check_arch(value: str) -> None:
    if value != "auto":
        from .models import ARCHITECTURES

        if value not in ARCHITECTURES:
            raise ConfigError("arch", f"must be 'auto' or one of {', '.join(ARCHITECTURES)}, got {value!r}")


def _check_image_shape(value: Any) -> None:
    try:
        shp = tuple(value)
    except TypeError:
        shp = ()
    if len(shp) != 3 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1
                                for v in shp):
        raise ConfigError("image_shape", f"must be None or (C, H, W) positive integers, got {value!r}")


#: Largest first-stage width a config may ask (a ResNet-18 at 4× the default width already
#: holds about 180 M parameters; 20,000 asked for a 14 GB allocation, 10^6 for 36 TB).
MAX_WIDTH = 256
#: Most public pre-training epochs (the paper's 200, fifty times over; 10^9 ran unbounded).
MAX_PRETRAIN_EPOCHS = 10_000


def _check_device(value: Any) -> None:
    from ...encoders.base import check_device_name  # the one rule for device names (no torch import)

    check_device_name(value)


def _zero_or_at_least_1e_3(value: float) -> None:
    """``pdp_overhead``: 0 (off) or >= 1e-3 (k = ceil(1/(q·overhead)) stays a bounded integer;
    1e-320 overflowed it)."""
    if 0 < value < 1e-3:
        raise ConfigError("pdp_overhead", f"must be 0 (no pDP) or in [0.001, 1000], got {value!r}")


@dataclass(frozen=True, kw_only=True)
class SparseFinetuneConfig(PrivacyConfig, PrivateCountConfig):
    """Hyper-parameters of sparse DP fine-tuning (defaults follow Sec. 5.8 where sensible
    for CPU-sized data; each field declares its range and help below)."""

    params: str = _params_field("all")
    conv_fraction: float = param(0.01, type=float, range=Interval(0.0, 1.0, closed="right"),
                                 help="p, fraction of convolution weights fine-tuned in 'all' mode (paper: 0.01 = 1 %).")
    mask: str = param("magnitude", choices=MASK_KINDS,
                      help="Which conv weights 'all' mode fine-tunes: 'magnitude' (default, the paper's: largest |θ| of "
                           "the public model) or 'random' (the ablation: the same number, uniformly at random by the "
                           "seed; data-independent).")
    arch: str = param("auto", type=str, check=_check_arch,
                      help="'auto' (small_cnn below 32 px, resnet18_32 below 64 px, else resnet18_224) or a key "
                           "of ARCHITECTURES.")
    width: int = param(0, type=int, range=Interval(0, MAX_WIDTH),
                       help="Channels of the first stage; 0 = architecture default (16 for small_cnn, 64 for ResNet-18). "
                            f"At most {MAX_WIDTH} (ResNet-18's widest stage is 8× it: memory grows as its square).")
    gn_groups: int = param(8, type=int, range=Interval(1, MAX_WIDTH),
                           help="GroupNorm groups (reduced to gcd with the channel count).")
    image_shape: Optional[tuple[int, int, int]] = param(
        None, check=_check_image_shape,
        help="(C, H, W) of the flattened feature rows; None infers (1, s, s) from D = s² or (3, s, s) from "
             "D = 3s². Rows are read in the pixels encoder's order (H, W, C), channels last.")
    pretrain_epochs: int = param(30, type=int, range=Interval(0, MAX_PRETRAIN_EPOCHS),
                                 help="Public pre-training epochs (paper: 200); 0 keeps random init. At most "
                                      f"{MAX_PRETRAIN_EPOCHS:,} (the DP epochs are bounded by the step ceiling).")
    pretrain_lr: float = param(0.1, type=float, range=Interval(0.0, None, closed="neither"),
                               help="SGD learning rate of public pre-training (paper: 0.1).")
    pretrain_momentum: float = param(0.9, type=float, range=Interval(0.0, 1.0, closed="left"),
                                     help="SGD momentum of public pre-training (paper: 0.9).")
    pretrain_weight_decay: float = param(1e-4, type=float, range=Interval(0.0, None),
                                         help="Weight decay of public pre-training (paper: 1e-4).")
    pretrain_batch_size: int = param(128, type=int, range=Interval(1, None),
                                     help="Batch size of public pre-training (paper: 128).")
    epochs: int = param(20, type=int, range=Interval(1, None), help="DP-SGD epochs over the private data (paper: 200).")
    batch_size: int = param(256, type=int, range=Interval(1, None),
                            help="Expected logical batch size; sampling rate q = min(1, batch_size / N) "
                                 "(paper: 5000 of 50 000).")
    max_physical_batch_size: int = param(128, type=int, range=Interval(1, None),
                                         help="Physical batch of Opacus' BatchMemoryManager (memory only).")
    clip_norm: float = param(1.0, type=float, range=Interval(0.0, None, closed="neither"),
                             help="Per-sample L2 clip threshold C (paper: 1).")
    lr_cls: float = param(0.8, type=float, range=SGD_LR_RANGE,
                          help="Learning rate of the classifier (paper: 0.8).")
    lr_body: float = param(0.01, type=float, range=SGD_LR_RANGE,
                           help="Learning rate of normalization and convolution parameters (paper: 0.01).")
    momentum: float = param(0.9, type=float, range=Interval(0.0, 1.0, closed="left"),
                            help="SGD momentum of fine-tuning (paper: 0.9, no weight decay).")
    warmup_epochs: float = param(1.0, type=float, range=Interval(0.0, None),
                                 help="Linear LR warm-up length before cosine decay (paper: 1).")
    pdp_overhead: float = param(
        1.0, type=float, range=Interval(0.0, 1000.0), check=_zero_or_at_least_1e_3,
        help="Per-instance DP (owner-only diagnostic) budget: the per-sample gradient norms of all private "
             "rows are recomputed every k = ceil(1/(q·overhead)) DP-SGD steps, at most 'overhead' times the "
             "per-sample gradients training computes (1: about once per epoch, as Yu et al. 2023); k = 1 is "
             "exact, k > 1 an estimate; 0 = no pDP.",
        leaks_private=True,
        privacy_note="the pDP values read every private row's gradient norm and are not covered by the run's "
                     "ε: shown to the data owner only, never released")
    seed: int = param(0, type=int, range=SEED_RANGE,
                      help="Seed of initialisation and shuffling; Poisson sampling and noise use it only with noise='reproducible'.")
    device: str = param("auto", type=str, check=_check_device,
                        help="'auto' (cuda -> mps -> cpu), 'cpu', 'cuda', 'cuda:N' or 'mps'; a device torch does not "
                             "see is refused when the fit starts.")


@dataclass
class PretrainedNetwork:
    """A public pre-trained network f^pub and the input standardisation it was trained with.

    Attributes:
        model: the network (classifier over the public label set).
        mean, std: ``(C_in,)`` per-channel statistics of the public images (public data,
            so free to use); inputs are standardised as ``(x - mean) / std``.
        image_shape: ``(C, H, W)``.
        seconds: wall time of pre-training.
        losses: mean training loss per pre-training epoch.
    """

    model: "nn.Module"
    mean: "torch.Tensor"
    std: "torch.Tensor"
    image_shape: tuple[int, int, int]
    seconds: float = 0.0
    losses: Optional[list[float]] = None


def _as_images(X: Any, image_shape: Optional[tuple[int, int, int]], name: str) -> "torch.Tensor":
    """``(N, D)`` flattened rows, ``(N, H, W)`` or ``(N, C, H, W)`` -> float32 NCHW tensor."""
    import torch

    t = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    # after the cast: a value past float32's range is inf here, and one non-finite private
    # pixel turned the whole network into NaN once its row was sampled (Opacus clips NaN to NaN)
    if t.numel() and not bool(torch.isfinite(t).all()):
        raise DataError(f"{name}: contains NaN or infinite values (in float32)")
    if t.ndim == 4:
        if image_shape is not None and tuple(t.shape[1:]) != tuple(image_shape):
            raise DataError(f"{name}: images have shape {tuple(t.shape[1:])}, expected {tuple(image_shape)}")
        return t.contiguous()
    if t.ndim == 3:
        if image_shape is not None and (1,) + tuple(t.shape[1:]) != tuple(image_shape):
            # a (1, 12, 64) array gave one prediction from a model trained on 8 × 8 images
            raise DataError(f"{name}: images have shape {tuple(t.shape[1:])}, expected {tuple(image_shape)}")
        return t.unsqueeze(1).contiguous()
    if t.ndim != 2:
        raise DataError(f"{name}: expected (N, D) flattened images or (N, C, H, W), got shape {tuple(t.shape)}")
    D = t.shape[1]
    if image_shape is None:
        s = math.isqrt(D)
        s3 = math.isqrt(D // 3) if D % 3 == 0 else 0
        if s * s == D:
            image_shape = (1, s, s)
        elif s3 and 3 * s3 * s3 == D:
            image_shape = (3, s3, s3)
        else:
            raise ConfigError(
                "image_shape",
                f"must be given: {name} has {D} features, which is neither s² nor 3·s² "
                "(sparse fine-tuning needs pixel features, e.g. the 'pixels' encoder)",
            )
    if int(np.prod(image_shape)) != D:
        if name == "X":  # at predict time the shape is the fitted model's: the rows are what is wrong
            raise DataError(f"X: has {D} features, the model was fitted on images of shape {tuple(image_shape)}")
        raise ConfigError("image_shape", f"{tuple(image_shape)} does not match {D} features of {name}")
    c, h, w = image_shape
    # Rows are flattened in the pixels encoder's (H, W, C) order (PIL arrays, channels last).
    return t.reshape(len(t), h, w, c).permute(0, 3, 1, 2).contiguous()


def _as_labels(y: Any, n: int, name: str) -> "torch.Tensor":
    import torch

    t = torch.as_tensor(np.asarray(y), dtype=torch.int64)
    if t.ndim != 1 or len(t) != n:
        raise DataError(f"{name}: expected {n} labels, got shape {tuple(t.shape)}")
    if n and int(t.min()) < 0:
        raise DataError(f"{name}: labels must be >= 0")
    return t


#: The privacy paragraph of every class of the family (the brief asks each mechanism's docstring to
#: state its sensitivity, neighbouring relation and equation; appended below each class).
DPSGD_PRIVACY_DOC = """

    Privacy: neighbours add or remove one *private* example. Each logical DP-SGD step releases
    ``Σ_{i∈B} clip(g_i, C) + N(0, σ²C² I)`` on the trainable entries, B a Poisson sample of rate q:
    L2 sensitivity C = ``clip_norm`` per step (Abadi et al. 2016, Alg. 1; Luo et al. 2021,
    Sec. 4.4 step 3); composed with the private count's release (module docstring) by the PLD
    accountant of :mod:`mixdp_core.accounting`.
"""


class SparseFinetune(Method):
    """DP fine-tuning of a sparse subset τ of a public pre-trained GroupNorm network.

    Fitted attributes (besides the ones of :class:`~mixdp_core.methods.base.Method`):
        model_: the private network f^prv.
        public_model_: the public network f^pub before fine-tuning (for inspection).
        masks_: conv weight name -> bool mask chosen on the public model (``"all"`` mode).
        n_trainable_, n_params_: entries in τ and in the whole network.
        sample_rate_: Poisson rate q; dp_steps_: logical DP-SGD steps executed;
        planned_dp_steps_: steps the noise was calibrated for.
        epoch_seconds_: wall time of each DP epoch (pDP norm passes included; their share is
            ``extra["pdp_seconds"]`` of each history record); pretrain_seconds_: of pre-training.
        pdp_every_, pdp_accumulator_: per-instance DP recording (module docstring).
        layer_stats_: per trainable tensor, kept share, noise and clipped-gradient norms and their ratio
            (:func:`layer_table`; owner's view).
        mean_, std_, image_shape_: input standardisation and shape.
    """

    config_cls: ClassVar[type] = SparseFinetuneConfig
    family: ClassVar[str] = "finetune"
    input_kind: ClassVar[str] = "images"  # flattened images or (N, C, H, W): _as_images checks them
    description: ClassVar[str] = (
        "DP-SGD fine-tuning of classifier + GroupNorm + top-p% conv weights of a public pre-trained network"
    )
    paper: ClassVar[str] = "Luo et al., Scalable DP with Sparse Network Finetuning, CVPR 2021, Sec. 4.4"
    private: ClassVar[bool] = True
    #: Small config for fast tests (contract test, smoke runs).
    test_config: ClassVar[dict[str, Any]] = dict(
        pretrain_epochs=2, epochs=2, batch_size=64, width=8, gn_groups=4, device="cpu"
    )

    # ------------------------------------------------------------------ helpers
    def preflight(self) -> None:
        """With a public size bound the DP-SGD step count is known before the data: refuse it
        above the step ceiling (``MIXDP_MAX_STEPS``)."""
        cfg = self.config
        check_bound(cfg)
        if cfg.dataset_size == "public_bound":
            from ...accounting import check_steps

            q = min(1.0, cfg.batch_size / cfg.size_bound)
            check_steps(int(1 / q) * cfg.epochs, field="epochs",
                        hint="lower epochs or size_bound, or raise batch_size")

    def _device(self) -> str:
        """The torch device of the fit: ``device`` if torch sees it (a one-line ConfigError
        naming ``device`` otherwise), else cuda -> mps -> cpu."""
        from ...encoders.base import select_device

        return select_device(None if self.config.device == "auto" else self.config.device)

    def _build(self, in_channels: int, num_classes: int, image_size: int) -> "nn.Module":
        from .models import build_model

        cfg = self.config
        arch = cfg.arch
        if arch == "auto":
            arch = "small_cnn" if image_size < 32 else ("resnet18_32" if image_size < 64 else "resnet18_224")
        width = cfg.width or (16 if arch == "small_cnn" else 64)
        return build_model(arch, in_channels, num_classes, width=width, gn_groups=cfg.gn_groups, image_size=image_size)

    def pretrain(self, public_images: Any, public_labels: Any) -> PretrainedNetwork:
        """Step 1: non-private pre-training on public/source images (no privacy cost).

        Args:
            public_images: ``(N, C, H, W)`` (or ``(N, H, W)``) pixel array.
            public_labels: ``(N,)`` ints; the public label set may differ from the private.

        Returns:
            A :class:`PretrainedNetwork` reusable by several :meth:`fit_images` calls
            (e.g. the four ``params`` modes at three ε share one pre-training).
        """
        import torch

        from .training import pretrain

        cfg = self.config
        X = _as_images(public_images, cfg.image_shape, "public_images")
        y = _as_labels(public_labels, len(X), "public_labels")
        if len(X) == 0:
            raise DataError("public_images: pre-training needs at least one public image")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            gen = torch.Generator().manual_seed(cfg.seed)
            mean = X.mean(dim=(0, 2, 3))
            std = X.std(dim=(0, 2, 3)).clamp_min(1e-6)
            Xs = (X - mean[None, :, None, None]) / std[None, :, None, None]
            model = self._build(X.shape[1], int(y.max()) + 1, X.shape[2]).to(self._device())
            t0 = time.perf_counter()
            losses = pretrain(
                model,
                Xs,
                y,
                epochs=cfg.pretrain_epochs,
                lr=cfg.pretrain_lr,
                momentum=cfg.pretrain_momentum,
                weight_decay=cfg.pretrain_weight_decay,
                batch_size=cfg.pretrain_batch_size,
                generator=gen,
            )
        return PretrainedNetwork(
            model=model.cpu(),
            mean=mean,
            std=std,
            image_shape=tuple(int(v) for v in X.shape[1:]),
            seconds=time.perf_counter() - t0,
            losses=losses,
        )

    def _standardise(self, X: "torch.Tensor") -> "torch.Tensor":
        return (X - self.mean_[None, :, None, None]) / self.std_[None, :, None, None]

    # ------------------------------------------------------------------ fitting
    def fit(self, split: Any, *, on_step: OnStep | None = None) -> "SparseFinetune":
        """Pre-train on ``split.X_public`` (flattened images), DP-fine-tune on
        ``split.X_private``; ``split.X_test`` gives the per-epoch test error."""
        encoder = (split.meta or {}).get("encoder")
        if encoder is not None and encoder != "pixels":
            raise DataError(
                f"X_public: sparse fine-tuning trains the network on images, but the split holds "
                f"{encoder!r} features; encode the dataset with the 'pixels' encoder"
            )
        shape = self.config.image_shape
        Xp = _as_images(split.X_public, shape, "X_public")
        shape = tuple(Xp.shape[1:])
        return self.fit_images(
            Xp,
            split.y_public,
            _as_images(split.X_private, shape, "X_private"),
            split.y_private,
            _as_images(split.X_test, shape, "X_test"),
            split.y_test,
            on_step=on_step,
            n_classes=split.n_classes,
        )

    def fit_images(
        self,
        public_images: Any,
        public_labels: Any,
        private_images: Any,
        private_labels: Any,
        test_images: Any = None,
        test_labels: Any = None,
        *,
        on_step: OnStep | None = None,
        pretrained: PretrainedNetwork | None = None,
        n_classes: int | None = None,
    ) -> "SparseFinetune":
        """Run steps 1-4 on image tensors.

        Args:
            public_images, public_labels: public/source set for pre-training (ignored when
                ``pretrained`` is given); its label set may differ from the private one.
            private_images, private_labels: the private target set ``(N, C, H, W)`` /
                ``(N,)``; every privacy guarantee is about these.
            test_images, test_labels: optional held-out set for the per-epoch test error.
            on_step: receives a :class:`StepRecord` per epoch; return ``True`` to stop.
            pretrained: a :class:`PretrainedNetwork` from :meth:`pretrain` to reuse (it is
                deep-copied, never modified).
            n_classes: the target's number of classes (required: public knowledge, e.g. the
                dataset's class names; never read off the private labels, whose ``max + 1``
                would be an unaccounted, data-dependent output shape; the source's label set
                may differ from the target's).

        Returns:
            self.
        """
        import torch

        from .models import replace_classifier
        from .selection import select_parameters
        from .training import EpochStats, dp_sgd_finetune, error_rate

        cfg = self.config
        # a failed refit must not leave the previous model beside the new ledger
        self._reset()
        self.model_ = None
        # the fit's duration grows with the exact private count (Poisson batches of mean q·N, and
        # the per-instance-DP pass over every private row): its timings are the owner's, as its
        # per-epoch seconds are (runs/owner_view.py)
        self.timing_owner_only_ = True
        if (test_images is None) != (test_labels is None):
            raise ConfigError("test_labels", "give test_images and test_labels together, or neither")
        if pretrained is None:
            pretrained = self.pretrain(public_images, public_labels)
        Xpriv = _as_images(private_images, pretrained.image_shape, "private_images")
        ypriv = _as_labels(private_labels, len(Xpriv), "private_labels")
        N = len(Xpriv)
        # No refusal at N = 0: failing on 0 private rows and running on 1 would tell the two
        # neighbouring data sets apart with certainty. The noisy count stays >= 1, and Poisson
        # sampling over no rows draws empty batches, whose steps release pure noise.
        # The class count is public and given: never read off the private labels (max + 1 would
        # be an unaccounted, data-dependent output shape), nor off the source's label set, which
        # may differ from the target's.
        if n_classes is None or isinstance(n_classes, bool) or int(n_classes) < 2:
            raise ConfigError("n_classes", f"give the target's number of classes (an integer >= 2, public: e.g. its "
                                           f"class names), got {n_classes!r}")
        C = int(n_classes)
        if N and int(ypriv.max()) >= C:
            raise DataError(f"private_labels: labels must lie in [0, {C - 1}]")
        Xtest = ytest = None
        if test_images is not None:
            Xtest = _as_images(test_images, pretrained.image_shape, "test_images")
            ytest = _as_labels(test_labels, len(Xtest), "test_labels")

        from ... import accounting as acc
        from ...accounting.pdp import SubsampledGaussianPDP

        self.mean_, self.std_ = pretrained.mean.clone(), pretrained.std.clone()
        self.image_shape_ = pretrained.image_shape
        self.pretrain_seconds_ = pretrained.seconds
        self.classes_ = np.arange(C)
        # The ledger: the budget is declared before the count reads the private rows; the plan
        # (the count, then the steps it chose) once q and T are known. Each release is recorded
        # where it happens and privacy_ is the ledger's.
        ledger = acc.RunLedger(budget_epsilon=cfg.target_epsilon, delta=cfg.target_delta)
        self.ledger_ = ledger
        n_used, count_ev = resolve_private_count(cfg, N, seed=cfg.seed)
        if count_ev is not None:  # its output sets q and T: the steps are chosen adaptively
            ledger.release(count_ev, what="noisy private count", chooses_next=True)
        self.n_used_ = n_used
        self.count_event_ = count_ev
        q = min(1.0, cfg.batch_size / n_used)
        steps_per_epoch = int(1 / q)
        planned = steps_per_epoch * cfg.epochs
        sigma = float(
            acc.calibrate_dpsgd_noise(
                sample_rate=q,
                steps=planned,
                target_epsilon=cfg.target_epsilon,
                target_delta=cfg.target_delta,
                accountant=cfg.accountant,
                also=count_ev,
                step_field="epochs",
            )
        )

        # report with the accountant the noise was calibrated with (exact GDP for q = 1)
        ledger.accountant = cfg.accountant if q < 1.0 else None
        steps_plan = acc.PoissonSubsampledGaussian(sigma, q, planned)
        ledger.plan = acc.AdaptiveComposition(count_ev, steps_plan) if count_ev is not None else steps_plan
        one_step = acc.PoissonSubsampledGaussian(sigma, q, 1)

        def eps_after(t: int, fast: bool) -> float:
            return acc.dpsgd_epsilon(noise_multiplier=sigma, sample_rate=q, steps=t, delta=cfg.target_delta,
                                     accountant=cfg.accountant, also=count_ev, fast=fast)

        # pDP (owner-only): norm passes every k steps cost N per-sample gradients against q·N per
        # step, i.e. a share 1/(q·k) of training's per-sample gradients; k keeps it <= overhead.
        self.pdp_every_ = (max(1, math.ceil(1.0 / (q * cfg.pdp_overhead) - 1e-9))
                           if cfg.pdp_overhead > 0 else 0)
        self.pdp_accumulator_ = (SubsampledGaussianPDP(N, sample_rate=q, noise_multiplier=sigma)
                                 if self.pdp_every_ else None)

        device = self._device()
        Xs = self._standardise(Xpriv)
        Xts = self._standardise(Xtest) if Xtest is not None else None

        history: list[StepRecord] = []
        epoch_seconds: list[float] = []
        executed_total = [0]
        layer_raw: dict = {}

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed + 1)
            gen = torch.Generator().manual_seed(cfg.seed + 1)
            self.public_model_ = copy.deepcopy(pretrained.model)
            model = copy.deepcopy(pretrained.model).to(device)
            replace_classifier(model, C)
            selection = select_parameters(model, cfg.params, conv_fraction=cfg.conv_fraction, mask=cfg.mask,
                                          mask_seed=cfg.seed)
            self.masks_ = {n: m.detach().cpu().clone() for n, m in selection.masks.items()}
            self.n_trainable_ = selection.n_trainable
            self.n_params_ = selection.n_total

            def on_epoch(st: EpochStats) -> bool:
                executed_total[0] += st.steps
                if st.steps:
                    ledger.release(one_step, what="DP-SGD step", count=int(st.steps))
                epoch_seconds.append(st.seconds)
                test_err = error_rate(model, Xts, ytest) if Xts is not None else None
                eps = eps_after(executed_total[0], fast=executed_total[0] < planned) if executed_total[0] > 0 \
                    else (acc.epsilon(count_ev, delta=cfg.target_delta) if count_ev is not None else 0.0)
                rec = StepRecord(
                    step=st.epoch,
                    total_steps=cfg.epochs,
                    train_loss=st.train_loss,
                    test_error=test_err,
                    clip_norm=cfg.clip_norm,
                    epsilon_spent=eps,
                    extra={
                        "lr": float(st.lr_cls),
                        "seconds": float(st.seconds),
                        "pdp_seconds": float(st.extra.get("pdp_seconds", 0.0)),
                        "dp_steps": float(executed_total[0]),
                    },
                )
                history.append(rec)
                return bool(on_step(rec)) if on_step is not None else False

            executed = dp_sgd_finetune(
                model,
                selection,
                Xs,
                ypriv,
                noise_multiplier=sigma,
                clip_norm=cfg.clip_norm,
                sample_rate=q,
                epochs=cfg.epochs,
                lr_cls=cfg.lr_cls,
                lr_body=cfg.lr_body,
                momentum=cfg.momentum,
                warmup_epochs=cfg.warmup_epochs,
                max_physical_batch_size=cfg.max_physical_batch_size,
                generator=gen,
                on_epoch=on_epoch,
                n_used=n_used,
                pdp_every=self.pdp_every_,
                pdp_accumulator=self.pdp_accumulator_,
                noise_rng=None if cfg.noise == REPRODUCIBLE else noise_rng(cfg.noise, cfg.seed + 1, 0xD5),
                layer_stats=layer_raw,
            )
        for p in model.parameters():
            p.requires_grad_(False)
        model.eval()
        self.model_ = model
        self.noise_multiplier_ = sigma
        self.sample_rate_ = q
        self.dp_steps_ = int(executed)
        self.planned_dp_steps_ = planned
        self.steps_ = len(history)
        self.history_ = history
        self.epoch_seconds_ = epoch_seconds
        self.layer_stats_ = layer_table(layer_raw, sigma=sigma, clip_norm=cfg.clip_norm)
        self.pdp_sq_ratio_sum_ = None
        if not executed_total[0]:  # stopped before a step: charged one (the UI's smallest unit; an upper bound)
            ledger.release(one_step, what="DP-SGD step (stopped before any: charged one)")
        ev = ledger.event()
        rep = ledger.report()
        note = {"noisy_count": " [q and T from a noisy private count, accounted as a pure first release, basic adaptive composition]",
                "public_bound": f" [q and T from the public size bound {cfg.size_bound}]",
                "public": " [N_private treated as public: q and T set from the exact private count, not accounted]"}
        import dataclasses as _dc

        self.privacy_ = _dc.replace(rep, mechanism=rep.mechanism + note[cfg.dataset_size])
        self.epsilon_rdp_ = float(acc.epsilon(ev, delta=cfg.target_delta, accountant="rdp"))
        return self

    # ------------------------------------------------------------------ inference
    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """Logits ``(N, C)`` for flattened image rows ``(N, D)`` or images ``(N, C, H, W)``."""
        if getattr(self, "model_", None) is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit() first")
        from .training import predict_logits

        imgs = _as_images(X, self.image_shape_, "X")
        return predict_logits(self.model_, self._standardise(imgs)).numpy()


def layer_table(raw: Mapping[str, Mapping[str, float]], *, sigma: float, clip_norm: float) -> list[dict[str, Any]]:
    """Per trainable parameter tensor: entries kept by the mask (``share_kept``, public: the mask
    is a function of the public model), the noise norm added per step on those entries
    ``σ C √k`` and the RMS over steps of the summed clipped gradient's norm on them, and their
    ratio ``noise_to_gradient`` (Luo et al. 2021, Fig. 3: why training every parameter fails —
    the noise grows with √k, the signal does not). **Owner's view**: the gradient norms are
    unnoised private quantities (``owner_only`` is set on every row)."""
    rows = []
    for name, r in raw.items():
        k, steps = int(r["trainable"]), int(r["steps"])
        grad_rms = math.sqrt(r["grad_sq_sum"] / steps) if steps else None
        noise = float(sigma) * float(clip_norm) * math.sqrt(k)
        rows.append({"layer": name, "trainable": k, "total": int(r["total"]), "masked": bool(r.get("masked", False)),
                     "share_kept": k / max(int(r["total"]), 1), "noise_norm_per_step": noise,
                     "gradient_norm_rms": grad_rms,
                     "noise_to_gradient": (noise / grad_rms) if grad_rms else None, "owner_only": True})
    return rows


@dataclass(frozen=True, kw_only=True)
class SparseFinetuneClsConfig(SparseFinetuneConfig):
    """:class:`SparseFinetuneConfig` with ``params="cls"`` (classifier only)."""

    params: str = _params_field("cls")


@dataclass(frozen=True, kw_only=True)
class SparseFinetuneClsNormConfig(SparseFinetuneConfig):
    """:class:`SparseFinetuneConfig` with ``params="cls_norm"`` (classifier + GroupNorm)."""

    params: str = _params_field("cls_norm")


@dataclass(frozen=True, kw_only=True)
class FullNetworkConfig(SparseFinetuneConfig):
    """:class:`SparseFinetuneConfig` with ``params="full"`` (whole-network DP-SGD)."""

    params: str = _params_field("full")


METHODS.add("sparse_finetune", SparseFinetune)
SparseFinetune.__doc__ = SparseFinetune.__doc__.rstrip() + DPSGD_PRIVACY_DOC


@METHODS.register("sparse_finetune_cls")
class SparseFinetuneCls(SparseFinetune):
    """Ablation: DP-SGD on the fresh classifier only (vanilla transfer, Table 3 "Cls only")."""

    config_cls: ClassVar[type] = SparseFinetuneClsConfig
    description: ClassVar[str] = "DP-SGD on the classifier of a public pre-trained GroupNorm network"


@METHODS.register("sparse_finetune_cls_norm")
class SparseFinetuneClsNorm(SparseFinetune):
    """Ablation: classifier + GroupNorm parameters (Procedure 1, normalization transfer)."""

    config_cls: ClassVar[type] = SparseFinetuneClsNormConfig
    description: ClassVar[str] = "DP-SGD on classifier + GroupNorm of a public pre-trained network"


@METHODS.register("dpsgd_full_network")
class DPSGDFullNetwork(SparseFinetune):
    """Baseline: whole-network DP-SGD fine-tuning from the public pre-trained weights."""

    config_cls: ClassVar[type] = FullNetworkConfig
    description: ClassVar[str] = "DP-SGD on every parameter of a public pre-trained GroupNorm network"


for _cls in (SparseFinetuneCls, SparseFinetuneClsNorm, DPSGDFullNetwork):
    _cls.__doc__ = _cls.__doc__.rstrip() + DPSGD_PRIVACY_DOC
