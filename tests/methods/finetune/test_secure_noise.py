"""Sparse DP fine-tuning's secure path (noise != "reproducible"): Opacus' Gaussian noise and
Poisson coins drawn from the product's generator, checked against an independent numpy
recomputation from the same seeded stream."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")


def test_dp_optimizer_noise_is_sigma_times_clip_from_the_given_generator():
    from mixdp_core.methods.finetune.training import _RngDPOptimizer

    lin = torch.nn.Linear(3, 2)
    opt = _RngDPOptimizer(torch.optim.SGD(lin.parameters(), lr=0.1), noise_multiplier=1.7, max_grad_norm=0.5,
                          expected_batch_size=4, rng=np.random.default_rng([7, 1]))
    summed = [torch.full_like(p, 0.25) for p in lin.parameters()]
    for p, s in zip(lin.parameters(), summed):
        p.summed_grad = s.clone()
    opt.add_noise()
    ref = np.random.default_rng([7, 1])  # the same stream, drawn as the optimizer must: per parameter, in order
    for p, s in zip(lin.parameters(), summed):
        z = ref.standard_normal(tuple(s.shape), dtype=np.float32)
        want = s.numpy() + z * np.float32(1.7 * 0.5)
        assert np.allclose(p.grad.detach().numpy(), want, rtol=0, atol=1e-6)


def test_poisson_coins_come_from_the_given_generator():
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler

    from mixdp_core.methods.finetune.training import _draw_sample_from

    sampler = UniformWithReplacementSampler(num_samples=1000, sample_rate=0.05, steps=30)
    _draw_sample_from(sampler, np.random.default_rng([3, 9]))
    got = list(sampler)
    ref = np.random.default_rng([3, 9])
    want = [np.flatnonzero(ref.random(1000) < 0.05).tolist() for _ in range(30)]
    assert got == want and len(got) == 30
    sizes = np.array([len(b) for b in got])
    assert abs(sizes.mean() - 50) < 10  # q * N rows per step on average

