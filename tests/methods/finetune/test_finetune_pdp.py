"""Per-instance DP of sparse DP fine-tuning: ratios, running individual RDP, labelling."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from mixdp_core import accounting
from mixdp_core.accounting.pdp import SubsampledGaussianPDP, pdp_epsilon_subsampled_gaussian
from mixdp_core.evaluation.pdp import pdp_kind, per_instance_epsilon
from mixdp_core.methods.finetune import SparseFinetune
from mixdp_core.methods.finetune.models import build_model
from mixdp_core.methods.finetune.selection import select_parameters
from mixdp_core.methods.finetune.training import per_sample_clip_ratios

torch.set_num_threads(1)

# replayable noise: these tests compare runs value for value (the secure default is covered by
# the contract test over every registered method)
FAST = dict(pretrain_epochs=1, epochs=2, batch_size=50, width=4, gn_groups=2, device="cpu",
            dataset_size="public", noise="reproducible")


@pytest.fixture(scope="module")
def digits():
    d = load_digits()
    X = d.data.astype(np.float32).reshape(-1, 1, 8, 8)
    y = d.target
    src = np.flatnonzero(y < 5)[:150]
    tgt = np.flatnonzero(y >= 5)[:200]
    return dict(Xpub=X[src], ypub=y[src], Xpriv=X[tgt], ypriv=y[tgt] - 5)


@pytest.fixture(scope="module")
def pretrained(digits):
    return SparseFinetune(**FAST).pretrain(digits["Xpub"], digits["ypub"])


def _fit(digits, pretrained, **kw):
    m = SparseFinetune(**{**FAST, "target_epsilon": 2.0, **kw})
    return m.fit_images(None, None, digits["Xpriv"], digits["ypriv"], pretrained=pretrained, n_classes=5)


def test_clip_ratios_equal_one_backward_pass_per_sample():
    """torch.func ratios vs an independent loop: autograd of each sample's loss, masked, clipped."""
    torch.manual_seed(0)
    model = build_model("small_cnn", 1, 5, width=4, gn_groups=2, image_size=8)
    sel = select_parameters(model, "all", conv_fraction=0.3)
    x, y = torch.randn(13, 1, 8, 8), torch.randint(0, 5, (13,))
    norms = []
    for i in range(len(x)):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        sq = sum(float(((p.grad * sel.masks[n]) if n in sel.masks else p.grad).pow(2).sum())
                 for n, p in model.named_parameters() if p.requires_grad)
        norms.append(np.sqrt(sq))
    clip = float(np.median(norms))  # half the rows clipped, half not: both branches checked
    r = per_sample_clip_ratios(model, x, y, sel.masks, clip_norm=clip, batch_size=4).numpy()
    np.testing.assert_allclose(r, np.minimum(np.array(norms) / clip, 1.0), rtol=1e-4, atol=1e-6)
    assert r.min() < 0.999 and r.max() == 1.0


def test_running_accumulator_equals_the_ratio_matrix_and_the_run_accounting():
    rng = np.random.default_rng(0)
    R = rng.random((6, 40))
    a = SubsampledGaussianPDP(6, sample_rate=0.1, noise_multiplier=1.5)
    for t in range(0, 40, 5):  # ratios every 5 steps, reused for the next 4 (as fit does with k = 5)
        a.add(R[:, t], steps=5)
    ref = pdp_epsilon_subsampled_gaussian(np.repeat(R[:, ::5], 5, axis=1), sample_rate=0.1, noise_multiplier=1.5,
                                          delta=1e-5)
    np.testing.assert_allclose(a.epsilon(delta=1e-5), ref, rtol=1e-12)
    assert a.steps == 40 and a.counts.shape == (6, 33)  # O(N · levels), not O(N · T)
    full = SubsampledGaussianPDP(2, sample_rate=0.1, noise_multiplier=1.5)
    full.add(np.ones(2), steps=40)
    count = accounting.PureDP(epsilon=0.05)
    for acc in ("pld", "rdp"):  # the run's own accountant family: an always-clipped row gets the run's ε
        run = accounting.epsilon(accounting.AdaptiveComposition(count, accounting.PoissonSubsampledGaussian(1.5, 0.1, 40)),
                                 delta=1e-5, accountant=acc)
        assert full.epsilon(delta=1e-5, also=count, accountant=acc)[0] == pytest.approx(run, rel=1e-9)


@pytest.mark.parametrize("overhead", [1000.0, 0.5])
def test_fit_records_pdp_along_the_run_without_changing_it(digits, pretrained, overhead):
    m = _fit(digits, pretrained, pdp_overhead=overhead)
    off = _fit(digits, pretrained, pdp_overhead=0.0)
    for p, p0 in zip(m.model_.parameters(), off.model_.parameters()):  # no randomness drawn
        assert torch.equal(p, p0)
    assert off.pdp_accumulator_ is None and per_instance_epsilon(off, delta=1e-5) is None
    k = m.pdp_every_
    assert k == max(1, int(np.ceil(1.0 / (m.sample_rate_ * overhead) - 1e-9)))
    assert m.pdp_accumulator_.steps == m.dp_steps_  # every executed step charged exactly once
    e = per_instance_epsilon(m, delta=1e-5)
    assert e.shape == (len(digits["ypriv"]),)
    assert np.all(e >= 0) and np.all(e <= m.privacy_.epsilon + 1e-9)
    assert pdp_kind(m) == ("exact" if k == 1 else f"estimate (per-sample norms every {k} steps, reused in between)")


def test_run_metrics_carry_pdp_owner_only_and_the_estimate_label(digits_features):
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.evaluation import evaluate

    split = make_split(digits_features, SplitSpec(public_per_class=5, seed=0))
    m = SparseFinetune(**{**FAST, "target_epsilon": 2.0, "batch_size": 302}).fit(split)  # q = 0.25 as above, k = 4
    ev = evaluate(m, split)
    assert ev.metrics["pdp_owner_only"] is True
    assert ev.metrics["pdp_epsilon_kind"].startswith("estimate (per-sample norms every ")
    assert ev.arrays["pdp_epsilon"].shape == (len(split.y_private),)
    assert ev.metrics["pdp_epsilon_max"] <= ev.metrics["epsilon"] + 1e-9
    layers = ev.metrics["layer_stats"]  # the per-layer chart's data travels with the run, owner-only
    assert layers and all(r["owner_only"] for r in layers)
    assert {r["layer"] for r in layers} >= {"classifier.weight"}
