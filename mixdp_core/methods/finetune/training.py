"""Training loops: non-private pre-training and masked DP-SGD fine-tuning (Opacus).

DP-SGD (Abadi et al. 2016) as used by Luo et al. (Sec. 3, 5.8): every logical step draws a
Poisson sample of the private set (each example independently with probability ``q``,
Opacus ``DPDataLoader``), computes per-sample gradients (Opacus ``GradSampleModule``),
clips each to L2 norm ``C`` (``clip_norm``), sums them, adds N(0, σ²C²·I) and divides by the
expected batch size ``q·N``. Large logical batches are split into physical batches by
Opacus' ``BatchMemoryManager`` (virtual batches); this changes memory, not the mechanism.

Partial freezing (Sec. 4.4, "for those parameters not in τ ... we simply do not update
those model parameters, thereby not increasing the norm of the effective gradient update"):
Opacus can only freeze whole tensors, so for a conv weight with mask m the loop multiplies
every per-sample gradient by m *before* clipping (frozen entries do not enlarge the clipped
norm) and multiplies the noised gradient by m *before* the SGD update (frozen entries get
neither noise nor update, and stay bit-identical since their momentum buffers stay 0).

Sensitivity / neighbouring relation: add/remove one private example. With the per-sample
clipping above, adding or removing one example changes the summed gradient by at most
``C`` in L2 norm, so each step is the Poisson-subsampled Gaussian mechanism with noise
multiplier σ and sampling rate q, accounted in ``mixdp_core.accounting`` as
``PoissonSubsampledGaussian(σ, q, steps)``.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from .selection import Selection


def per_sample_clip_ratios(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    masks: dict[str, torch.Tensor],
    *,
    clip_norm: float,
    batch_size: int = 256,
    structure: Optional[nn.Module] = None,
) -> torch.Tensor:
    """``r_i = min(‖m ⊙ ∇_τ ℓ(f(x_i), y_i)‖, C)/C`` of every row at the current weights.

    The per-sample gradient over the trainable parameters τ (``requires_grad``), each conv
    weight multiplied by its entry mask ``m`` exactly as the DP-SGD loop does before clipping,
    so ``r_i C`` is the norm of the contribution sample ``i`` would make to a step taken now
    (the per-instance analysis of :class:`~mixdp_core.accounting.pdp.SubsampledGaussianPDP`).
    Computed with ``torch.func`` (``vmap`` of ``grad``), independently of Opacus, in batches
    of ``batch_size`` rows; parameters are not modified. ``structure``: a hook-free copy of
    ``model``'s architecture to run the functional call on (Opacus' full backward hooks on
    ``model`` itself are not functorch-compatible); ``model``'s current values are used.

    Returns:
        ``(N,)`` float64 ratios in ``[0, 1]`` on the CPU.
    """
    from torch.func import functional_call, grad, vmap

    names = [n for n, p in model.named_parameters() if p.requires_grad]
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    device = next(model.parameters()).device
    mk = {n: m.to(device=device, dtype=params[n].dtype) for n, m in masks.items() if n in params}

    def loss_one(ps, x, y):
        out = functional_call(net, (ps, buffers), (x[None],))
        return nn.functional.cross_entropy(out, y[None])

    net = structure if structure is not None else model
    per_sample = vmap(grad(loss_one), in_dims=(None, 0, 0))
    out = []
    was_training = net.training
    net.train()  # the loop's mode (GroupNorm: the same in both)
    for i in range(0, len(images), batch_size):
        xb, yb = images[i : i + batch_size].to(device), labels[i : i + batch_size].to(device)
        g = per_sample(params, xb, yb)
        sq = torch.zeros(len(xb), dtype=torch.float64, device=device)
        for n in names:
            gi = g[n] * mk[n] if n in mk else g[n]
            sq += gi.reshape(len(xb), -1).double().pow(2).sum(1)
        out.append((sq.sqrt() / clip_norm).clamp(max=1.0).cpu())
    net.train(was_training)
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64)


def cosine_warmup_lambda(total_steps: int, warmup_steps: int) -> Callable[[int], float]:
    """LR factor: linear warm-up over ``warmup_steps`` then cosine decay to 0 (Sec. 5.8)."""
    total_steps = max(int(total_steps), 1)
    warmup_steps = max(int(warmup_steps), 0)

    def f(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(total_steps - warmup_steps, 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return f


@torch.no_grad()
def predict_logits(model: nn.Module, images: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """Logits ``(N, C)`` of ``model`` in eval mode, in batches (no gradients)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    outs = [model(images[i : i + batch_size].to(device)).cpu() for i in range(0, len(images), batch_size)]
    model.train(was_training)
    if not outs:
        return torch.zeros((0, model.classifier.out_features))
    return torch.cat(outs)


def error_rate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    """Top-1 error in ``[0, 1]``."""
    pred = predict_logits(model, images).argmax(1)
    return float((pred != labels.cpu()).float().mean())


def pretrain(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    *,
    epochs: int,
    lr: float = 0.1,
    momentum: float = 0.9,
    weight_decay: float = 1e-4,
    batch_size: int = 128,
    generator: Optional[torch.Generator] = None,
) -> list[float]:
    """Non-private pre-training on public/source data (Sec. 5.8): SGD with momentum,
    weight decay and cosine LR decay over all epochs; no privacy cost (public data).

    Args:
        model: network to train in place.
        images: ``(N, C, H, W)`` float tensor (already standardised).
        labels: ``(N,)`` int64 tensor.
        epochs: passes over the data (200 in the paper).
        lr, momentum, weight_decay, batch_size: SGD hyper-parameters.
        generator: shuffling RNG.

    Returns:
        Mean training loss per epoch.
    """
    device = next(model.parameters()).device
    model.train()
    for p in model.parameters():
        p.requires_grad_(True)
    loader = DataLoader(
        TensorDataset(images, labels), batch_size=min(batch_size, len(images)), shuffle=True, generator=generator
    )
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine_warmup_lambda(epochs * len(loader), 0))
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for _ in range(epochs):
        tot, n = 0.0, 0
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            sched.step()
            tot += float(loss.detach()) * len(xb)
            n += len(xb)
        losses.append(tot / max(n, 1))
    return losses


@dataclass
class EpochStats:
    """What one DP-SGD epoch did (non-private diagnostics except ``steps``)."""

    epoch: int
    steps: int  # logical DP-SGD steps executed in this epoch
    train_loss: float
    seconds: float
    lr_cls: float
    extra: dict = field(default_factory=dict)


def dp_sgd_finetune(
    model: nn.Module,
    selection: Selection,
    images: torch.Tensor,
    labels: torch.Tensor,
    *,
    noise_multiplier: float,
    clip_norm: float,
    sample_rate: float,
    epochs: int,
    lr_cls: float,
    lr_body: float,
    momentum: float = 0.9,
    warmup_epochs: float = 1.0,
    max_physical_batch_size: int = 128,
    generator: Optional[torch.Generator] = None,
    on_epoch: Optional[Callable[[EpochStats], bool]] = None,
    n_used: Optional[float] = None,
    pdp_every: int = 0,
    pdp_accumulator: Any = None,
    noise_rng: Any = None,
    layer_stats: Optional[dict] = None,
) -> int:
    """Fine-tune the transfer parameters τ of ``model`` with masked DP-SGD (see module doc).

    Args:
        model: transfer model; ``selection`` must have been made on it (requires_grad set).
        selection: τ and the entry masks.
        images, labels: the private set ``(N, C, H, W)`` / ``(N,)``.
        noise_multiplier: σ (noise std = σ·C on the summed clipped gradient).
        clip_norm: C, per-sample L2 clip threshold.
        sample_rate: Poisson sampling rate q; each epoch runs ``int(1/q)`` logical steps.
        epochs: number of epochs.
        lr_cls: learning rate of the classifier (0.8 in the paper).
        lr_body: learning rate of normalization and convolution parameters (0.01).
        momentum: SGD momentum (no weight decay: it would move frozen entries).
        warmup_epochs: linear LR warm-up length, then cosine decay (Sec. 5.8).
        max_physical_batch_size: physical batch of ``BatchMemoryManager``.
        generator: CPU RNG of the Poisson sampling and (on CPU) of the Gaussian noise; on
            another device the noise RNG lives there, seeded from this one.
        on_epoch: called after every epoch; returning ``True`` stops before the next step.
        n_used: the count gradients are normalised by (q·n_used): a noisy or public count
            of the private samples; ``None`` uses ``len(images)`` (only when N is public).
        pdp_every: per-instance DP (owner-only diagnostic): every ``k = pdp_every`` logical
            steps, before the step, the clip ratios of *all* private rows are computed at the
            current weights (:func:`per_sample_clip_ratios`) and charged for this step and the
            next ``k − 1`` (Yu et al. 2023 compute them once per epoch; ``k = 1`` is exact,
            ``k > 1`` an estimate for the steps in between). 0 = off.
        pdp_accumulator: receives ``add(ratios, steps)`` (a
            :class:`~mixdp_core.accounting.pdp.SubsampledGaussianPDP`); needed iff ``pdp_every``.
        noise_rng: a ``np.random.Generator`` (:func:`mixdp_core.randomness.noise_rng`) that,
            when given, draws both the Poisson sample and the Gaussian noise instead of
            ``generator`` — both are part of the mechanism: amplification by subsampling holds
            only if the sample is as unpredictable as the noise.
        layer_stats: if a dict, filled per trainable parameter with ``{"trainable": k,
            "total": numel, "grad_sq_sum": Σ_t ||summed clipped gradient||², "steps": T}``,
            read in the optimizer's step hook where the clipped sum already exists (no extra
            pass over private data). **Owner's view**: the sums are unnoised private gradients.
            The noise on the same entries has norm ``≈ σ C √k`` per step (Luo et al. 2021, Fig. 3).

    Returns:
        The number of logical DP-SGD steps executed (what the accountant must charge).
    """
    from opacus import GradSampleModule
    from opacus.data_loader import DPDataLoader
    from opacus.optimizers import DPOptimizer
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    N = len(images)
    device = next(model.parameters()).device
    # hook-free twin for the pDP norm passes (functorch cannot run through Opacus' hooks)
    pdp_structure = copy.deepcopy(model) if pdp_every else None
    gsm = GradSampleModule(model, loss_reduction="mean")
    gsm.train()
    named = dict(model.named_parameters())
    trainable = [(n, p) for n, p in named.items() if p.requires_grad]
    cls_names = {f"classifier.{n}" for n, _ in model.classifier.named_parameters()}
    groups = [
        {"params": [p for n, p in trainable if n in cls_names], "lr": lr_cls},
        {"params": [p for n, p in trainable if n not in cls_names], "lr": lr_body},
    ]
    groups = [g for g in groups if g["params"]]
    base = torch.optim.SGD(groups, lr=lr_cls, momentum=momentum, weight_decay=0.0)
    # Normalise by q·N_used (a noisy or public count), never by the exact private N.
    expected_batch = max(sample_rate * (float(n_used) if n_used is not None else N), 1e-12)
    # Poisson sampling draws on the CPU generator; the noise is drawn where the gradients
    # live, so off-CPU it needs a generator on that device (seeded from the CPU one).
    noise_generator = generator
    if generator is not None and device.type != "cpu":
        noise_generator = torch.Generator(device=device)
        noise_generator.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
    optimizer = (DPOptimizer if noise_rng is None else _RngDPOptimizer)(
        base,
        noise_multiplier=noise_multiplier,
        max_grad_norm=clip_norm,
        expected_batch_size=expected_batch,
        loss_reduction="mean",
        generator=noise_generator,
        **({} if noise_rng is None else {"rng": noise_rng}),
    )
    masks = [(named[n], m.to(device=device, dtype=named[n].dtype)) for n, m in selection.masks.items()]

    mask_of = {id(p): m for p, m in masks}
    if layer_stats is not None:
        for n_, p_ in trainable:
            m_ = mask_of.get(id(p_))
            layer_stats[n_] = {"trainable": int(m_.sum()) if m_ is not None else p_.numel(), "total": p_.numel(),
                               "grad_sq_sum": 0.0, "steps": 0, "masked": m_ is not None}

    def mask_noised_grad(opt: DPOptimizer) -> None:
        # After clip + noise + scaling, before the SGD update: no noise on frozen entries.
        if layer_stats is not None:  # the clipped sum (frozen entries already zero), before the noise
            for n_, p_ in trainable:
                g = getattr(p_, "summed_grad", None)
                if g is not None:
                    layer_stats[n_]["grad_sq_sum"] += float(g.detach().pow(2).sum())
                    layer_stats[n_]["steps"] += 1
        for p, m in masks:
            p.grad.mul_(m)

    optimizer.attach_step_hook(mask_noised_grad)

    if N:
        loader = DPDataLoader(TensorDataset(images, labels), sample_rate=sample_rate, generator=generator)
    else:
        # no private row: Opacus' sampler refuses an empty set, so it runs over one placeholder
        # row that it never samples (num_samples 0): every Poisson batch is empty, and each step
        # releases pure noise, as an empty sample of a non-empty set does
        placeholder = TensorDataset(torch.zeros((1, *images.shape[1:]), dtype=images.dtype),
                                    torch.zeros(1, dtype=labels.dtype))
        loader = DPDataLoader(placeholder, sample_rate=sample_rate, generator=generator)
        loader.batch_sampler.num_samples = 0
    if noise_rng is not None:
        _draw_sample_from(loader.batch_sampler, noise_rng)
    steps_per_epoch = len(loader)
    total = steps_per_epoch * epochs
    warmup = int(round(warmup_epochs * steps_per_epoch))
    sched = torch.optim.lr_scheduler.LambdaLR(base, cosine_warmup_lambda(total, warmup))
    loss_fn = nn.CrossEntropyLoss()
    executed = 0
    pdp_masks = {n: m for n, m in selection.masks.items()}
    pdp_state: dict[str, Any] = {"ratios": None, "pending": 0, "seconds": 0.0}

    def pdp_flush() -> None:
        if pdp_state["ratios"] is not None and pdp_state["pending"]:
            pdp_accumulator.add(pdp_state["ratios"].numpy(), pdp_state["pending"])
        pdp_state["pending"] = 0

    def pdp_before_step(step_index: int) -> None:
        # step_index = logical steps executed so far; ratios at w_t for steps t .. t + k - 1
        if step_index % pdp_every == 0:
            pdp_flush()
            t_pdp = time.perf_counter()
            pdp_state["ratios"] = per_sample_clip_ratios(model, images, labels, pdp_masks, clip_norm=clip_norm,
                                                         batch_size=max_physical_batch_size,
                                                         structure=pdp_structure)
            pdp_state["seconds"] += time.perf_counter() - t_pdp

    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        pdp_before = pdp_state["seconds"]
        tot, n, steps = 0.0, 0, 0
        lr_now = base.param_groups[0]["lr"]
        with BatchMemoryManager(
            data_loader=loader, max_physical_batch_size=max_physical_batch_size, optimizer=optimizer
        ) as mem_loader:
            for xb, yb in mem_loader:
                if pdp_every and not optimizer._is_last_step_skipped and pdp_state.get("at") != executed + steps:
                    # first physical batch of a logical step (the previous one was a real step)
                    pdp_state["at"] = executed + steps
                    pdp_before_step(executed + steps)
                optimizer.zero_grad(set_to_none=True)
                if len(xb) == 0:
                    # Empty Poisson sample: the step still releases pure noise.
                    for _, p in trainable:
                        p.grad_sample = torch.zeros((0, *p.shape), device=device, dtype=p.dtype)
                else:
                    xb, yb = xb.to(device), yb.to(device)
                    loss = loss_fn(gsm(xb), yb)
                    with warnings.catch_warnings():
                        # Opacus' hooks on a first layer whose input needs no gradient:
                        # expected and harmless here.
                        warnings.filterwarnings("ignore", message="Full backward hook is firing")
                        loss.backward()
                    tot += float(loss.detach()) * len(xb)
                    n += len(xb)
                    # Mask per-sample gradients *before* clipping (frozen entries do not
                    # count in the clipped norm).
                    for p, m in masks:
                        p.grad_sample.mul_(m)
                optimizer.step()
                if not optimizer._is_last_step_skipped:
                    steps += 1
                    sched.step()
                    if pdp_every:
                        pdp_state["pending"] += 1
        executed += steps
        stats = EpochStats(
            epoch=epoch,
            steps=steps,
            train_loss=tot / max(n, 1),
            seconds=time.perf_counter() - t0,
            lr_cls=lr_now,
            extra={"pdp_seconds": pdp_state["seconds"] - pdp_before},  # included in ``seconds``
        )
        if on_epoch is not None and on_epoch(stats):
            break
    if pdp_every:
        pdp_flush()
    optimizer.zero_grad(set_to_none=True)
    gsm.remove_hooks()
    for p in model.parameters():
        for attr in ("grad_sample", "summed_grad"):
            if hasattr(p, attr):
                delattr(p, attr)
    return executed


def _draw_sample_from(sampler: Any, rng: Any) -> None:
    """Make Opacus' Poisson sampler draw its masks from ``rng`` (a numpy Generator).

    ``DataLoader`` forbids replacing its ``batch_sampler``; the sampler object itself is
    re-classed to a subclass that differs only in where its coins come from (same ``q``,
    same number of logical steps), so ``BatchMemoryManager`` and the accounting see the
    sampler they expect."""
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler

    class _RngPoissonSampler(UniformWithReplacementSampler):
        def __iter__(self):
            for _ in range(self.steps):
                mask = self._rng.random(self.num_samples) < self.sample_rate
                yield np.flatnonzero(mask).tolist()

    sampler.__class__ = _RngPoissonSampler
    sampler._rng = rng


def _rng_dp_optimizer_cls() -> type:
    from opacus.optimizers import DPOptimizer
    from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

    class RngDPOptimizer(DPOptimizer):
        """Opacus' DPOptimizer with its Gaussian noise drawn from a numpy Generator (the
        secure source of :mod:`mixdp_core.randomness`): std ``σ·C`` per coordinate of the
        summed clipped gradient, exactly as :meth:`DPOptimizer.add_noise`."""

        def __init__(self, *args: Any, rng: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self._rng = rng

        def add_noise(self) -> None:
            std = float(self.noise_multiplier * self.max_grad_norm)
            for p in self.params:
                _check_processed_flag(p.summed_grad)
                ref = p.summed_grad
                z = torch.from_numpy(self._rng.standard_normal(tuple(ref.shape), dtype=np.float32))
                noise = (z * std).to(device=ref.device, dtype=ref.dtype)
                p.grad = (ref + noise).view_as(p)
                _mark_as_processed(p.summed_grad)

    return RngDPOptimizer


def _RngDPOptimizer(*args: Any, **kwargs: Any) -> Any:
    return _rng_dp_optimizer_cls()(*args, **kwargs)
