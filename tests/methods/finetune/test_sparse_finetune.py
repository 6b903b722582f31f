"""Tests of sparse DP fine-tuning (Luo et al. 2021): models, mask selection, frozen
weights, masked clipping, accounting of the executed steps, registry behaviour."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from torch import nn

from mixdp_core.errors import ConfigError
from mixdp_core.methods import METHODS, make_method
from mixdp_core.methods.finetune import SparseFinetune
from mixdp_core.methods.finetune.models import ResNet18GN, SmallCNN, build_model, replace_classifier
from mixdp_core.methods.finetune.selection import conv_weights, magnitude_mask, select_parameters
from mixdp_core.methods.finetune.training import dp_sgd_finetune

torch.set_num_threads(1)

# replayable noise: these tests compare runs value for value (the secure default is covered by
# the contract test over every registered method)
FAST = dict(pretrain_epochs=2, epochs=2, batch_size=64, width=8, gn_groups=4, device="cpu", noise="reproducible")


@pytest.fixture(scope="module")
def digits():
    """Digits 0-4 = public/source, 5-9 = private target (relabelled 0-4), 8×8 images."""
    d = load_digits()
    X = d.data.astype(np.float32).reshape(-1, 1, 8, 8)
    y = d.target
    src = np.flatnonzero(y < 5)[:300]
    tgt = np.flatnonzero(y >= 5)
    rng = np.random.default_rng(0)
    rng.shuffle(tgt)
    tr, te = tgt[:200], tgt[200:300]
    return dict(
        Xpub=X[src], ypub=y[src], Xpriv=X[tr], ypriv=y[tr] - 5, Xtest=X[te], ytest=y[te] - 5
    )


@pytest.fixture(scope="module")
def pretrained(digits):
    return SparseFinetune(**FAST).pretrain(digits["Xpub"], digits["ypub"])


def _fit(digits, pretrained, **kw):
    cfg = {**FAST, "target_epsilon": 1.0, **kw}
    m = SparseFinetune(**cfg)
    return m.fit_images(
        None, None, digits["Xpriv"], digits["ypriv"], digits["Xtest"], digits["ytest"], pretrained=pretrained,
        n_classes=5,
    )


# ---------------------------------------------------------------------------- models
def test_resnet18_groupnorm_shapes_and_size():
    m32 = ResNet18GN(3, 10, stem="cifar")
    assert not any(isinstance(x, nn.modules.batchnorm._BatchNorm) for x in m32.modules())
    assert any(isinstance(x, nn.GroupNorm) for x in m32.modules())
    n = sum(p.numel() for p in m32.parameters())
    assert 11.0e6 < n < 11.3e6  # ResNet-18 has ~11.2 M parameters (Sec. 4.1: "≈ 11 million")
    with torch.no_grad():
        assert m32(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
        m224 = build_model("resnet18_224", 3, 7, width=8, gn_groups=4, image_size=224)
        assert m224(torch.zeros(1, 3, 224, 224)).shape == (1, 7)
        assert build_model("auto", 1, 5, width=8, gn_groups=4, image_size=8)(torch.zeros(3, 1, 8, 8)).shape == (3, 5)


def test_replace_classifier_is_fresh_and_zero():
    m = SmallCNN(1, 5, width=8, gn_groups=4)
    replace_classifier(m, 3)
    assert m.classifier.out_features == 3
    assert torch.count_nonzero(m.classifier.weight) == 0


# ---------------------------------------------------------------------------- selection
@pytest.mark.parametrize("fraction", [0.01, 0.1, 0.37])
def test_magnitude_mask_keeps_exactly_p_percent_of_largest(fraction):
    torch.manual_seed(0)
    m = SmallCNN(1, 5, width=8, gn_groups=4)
    masks = magnitude_mask(m, fraction)
    weights = conv_weights(m)
    assert masks.keys() == weights.keys()
    total = sum(w.numel() for w in weights.values())
    kept = sum(int(mk.sum()) for mk in masks.values())
    assert kept == round(fraction * total)
    on = torch.cat([w.detach().abs()[masks[n]] for n, w in weights.items()])
    off = torch.cat([w.detach().abs()[~masks[n]] for n, w in weights.items()])
    assert on.min() >= off.max()  # a global threshold t separates kept from frozen


def test_selection_modes_set_requires_grad():
    m = SmallCNN(1, 5, width=8, gn_groups=4)
    n_cls = sum(p.numel() for p in m.classifier.parameters())
    sel = select_parameters(m, "cls")
    assert sel.n_trainable == n_cls and not sel.masks
    assert all(p.requires_grad == n.startswith("classifier.") for n, p in m.named_parameters())
    sel = select_parameters(m, "cls_norm")
    n_norm = sum(p.numel() for x in m.modules() if isinstance(x, nn.GroupNorm) for p in x.parameters())
    assert sel.n_trainable == n_cls + n_norm
    sel = select_parameters(m, "all", conv_fraction=0.05)
    n_conv = sum(w.numel() for w in conv_weights(m).values())
    assert sel.n_trainable == n_cls + n_norm + round(0.05 * n_conv)
    sel = select_parameters(m, "full")
    assert sel.n_trainable == sel.n_total and all(p.requires_grad for p in m.parameters())


def test_mask_is_chosen_on_public_model_only(digits, pretrained):
    a = _fit(digits, pretrained, params="all", conv_fraction=0.05)
    # Different private data (other samples, shuffled labels) -> identical mask.
    rng = np.random.default_rng(1)
    b = SparseFinetune(**{**FAST, "target_epsilon": 1.0, "params": "all", "conv_fraction": 0.05}).fit_images(
        None, None, digits["Xtest"], rng.permutation(digits["ytest"]), pretrained=pretrained, n_classes=5
    )
    expected = magnitude_mask(pretrained.model, 0.05)
    for name, mk in expected.items():
        assert torch.equal(a.masks_[name], mk)
        assert torch.equal(b.masks_[name], mk)


# ---------------------------------------------------------------------------- frozen weights
def _conv_and_norm(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if not n.startswith("classifier.")}


def test_frozen_weights_are_bit_identical_after_training(digits, pretrained):
    public = _conv_and_norm(pretrained.model)
    m = _fit(digits, pretrained, params="all", conv_fraction=0.05, lr_body=0.5)
    after = dict(m.model_.named_parameters())
    changed_trainable = 0
    for name, mk in m.masks_.items():
        before, now = public[name], after[name].detach()
        assert torch.equal(now[~mk], before[~mk]), name  # frozen entries: bit-identical
        changed_trainable += int((now[mk] != before[mk]).sum())
    assert changed_trainable > 0  # the selected entries did move

    cls = _fit(digits, pretrained, params="cls")
    for name, p in cls.model_.named_parameters():
        if not name.startswith("classifier."):
            assert torch.equal(p.detach(), public[name]), name
    assert torch.count_nonzero(cls.model_.classifier.weight) > 0  # the classifier did train

    cn = _fit(digits, pretrained, params="cls_norm", lr_body=0.5)
    for name, p in cn.model_.named_parameters():
        if name in m.masks_:
            assert torch.equal(p.detach(), public[name]), name
    norm_moved = [n for n, p in cn.model_.named_parameters() if "weight" in n and n not in m.masks_
                  and not n.startswith("classifier.") and not torch.equal(p.detach(), public[n])]
    assert norm_moved


def test_masked_entries_neither_count_in_clip_norm_nor_get_noise():
    """One DP-SGD step with q = 1 (everyone sampled), σ = 0, momentum 0: the update must be
    lr · (1/N) Σ_i clip_C(m ⊙ g_i), computed here independently sample by sample."""
    torch.manual_seed(0)
    model = SmallCNN(1, 3, width=4, gn_groups=2)
    replace_classifier(model, 3)
    nn.init.normal_(model.classifier.weight, std=0.5)
    sel = select_parameters(model, "all", conv_fraction=0.2)
    X = torch.randn(6, 1, 8, 8)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    C, lr = 0.05, 1.0
    ref = copy.deepcopy(model)
    names = [n for n, p in ref.named_parameters() if p.requires_grad]
    params = dict(ref.named_parameters())
    total = {n: torch.zeros_like(params[n]) for n in names}
    for i in range(len(X)):
        ref.zero_grad()
        nn.functional.cross_entropy(ref(X[i : i + 1]), y[i : i + 1]).backward()
        g = {n: params[n].grad.clone() * (sel.masks[n] if n in sel.masks else 1) for n in names}
        norm = torch.sqrt(sum((v**2).sum() for v in g.values()))
        f = min(1.0, C / (float(norm) + 1e-6))
        for n in names:
            total[n] += f * g[n]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    steps = dp_sgd_finetune(
        model, sel, X, y, noise_multiplier=0.0, clip_norm=C, sample_rate=1.0, epochs=1,
        lr_cls=lr, lr_body=lr, momentum=0.0, warmup_epochs=0, max_physical_batch_size=4,
        generator=torch.Generator().manual_seed(0),
    )
    assert steps == 1
    for n, p in model.named_parameters():
        expected = before[n] - lr * total[n] / len(X) if n in total else before[n]
        torch.testing.assert_close(p.detach(), expected, rtol=1e-4, atol=1e-6)
    # And with noise: frozen entries still bit-identical.
    model2 = SmallCNN(1, 3, width=4, gn_groups=2)
    replace_classifier(model2, 3)
    sel2 = select_parameters(model2, "all", conv_fraction=0.2)
    before2 = {n: p.detach().clone() for n, p in model2.named_parameters()}
    dp_sgd_finetune(
        model2, sel2, X, y, noise_multiplier=5.0, clip_norm=1.0, sample_rate=0.5, epochs=2,
        lr_cls=0.1, lr_body=0.1, generator=torch.Generator().manual_seed(1),
    )
    for n, mk in sel2.masks.items():
        now = dict(model2.named_parameters())[n].detach()
        assert torch.equal(now[~mk], before2[n][~mk])
        assert not torch.equal(now[mk], before2[n][mk])


# ---------------------------------------------------------------------------- privacy
def test_reported_epsilon_is_the_accountants_for_executed_steps(digits, pretrained):
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

    from mixdp_core import accounting as acc

    # Legacy model (N public, RDP); the default (noisy count, PLD) is tested below.
    m = _fit(digits, pretrained, params="cls_norm", epochs=3, target_epsilon=1.5,
             dataset_size="public", accountant="rdp")
    q = 64 / len(digits["Xpriv"])
    assert m.sample_rate_ == pytest.approx(q)
    assert m.dp_steps_ == 3 * int(1 / q) == m.planned_dp_steps_
    # Poisson batches of mean q·N and the pDP pass over every row: the duration is the owner's
    assert m.timing_owner_only_ is True
    ref = acc.epsilon(acc.PoissonSubsampledGaussian(m.noise_multiplier_, q, m.dp_steps_), delta=1e-5)
    assert m.privacy_.epsilon == pytest.approx(ref, rel=1e-9)
    assert m.privacy_.epsilon <= 1.5 + 1e-9
    # Independent RDP computation (Mironov et al. 2019 bound, Opacus implementation).
    orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 256))
    rdp = compute_rdp(q=q, noise_multiplier=m.noise_multiplier_, steps=m.dp_steps_, orders=orders)
    eps_ind, _ = get_privacy_spent(orders=orders, rdp=rdp, delta=1e-5)
    assert m.privacy_.epsilon == pytest.approx(eps_ind, rel=0.05)
    # Per-epoch records: ε grows, last equals the final report.
    eps = [r.epsilon_spent for r in m.history_]
    assert eps == sorted(eps) and eps[-1] == pytest.approx(m.privacy_.epsilon, rel=1e-6)
    assert [r.step for r in m.history_] == [1, 2, 3]


def test_default_noisy_count_and_pld_match_an_independent_pld(digits, pretrained):
    """Default: q from a noisy count (accounted), σ calibrated with PLD; the reported ε is
    never below an independent dp-accounting PLD computation (finer grid) of the run."""
    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    m = _fit(digits, pretrained, params="cls", epochs=2, target_epsilon=1.5)
    assert m.count_event_ is not None and float(m.n_used_).is_integer()
    assert m.sample_rate_ == pytest.approx(min(1.0, 64 / m.n_used_))
    acc = PLDAccountant(value_discretization_interval=2e-5)
    acc.compose(dp_accounting.PoissonSampledDpEvent(m.sample_rate_, dp_accounting.GaussianDpEvent(m.noise_multiplier_)),
                m.dp_steps_)
    e_ind = m.count_event_.epsilon + acc.get_epsilon(1e-5)  # pure count + steps (basic adaptive composition)
    assert e_ind <= m.privacy_.epsilon <= 1.5
    assert m.privacy_.epsilon == pytest.approx(e_ind, rel=2e-3)  # tight: the budget is used
    assert m.epsilon_rdp_ > m.privacy_.epsilon  # RDP shown beside is looser
    assert "noisy private count" in m.privacy_.mechanism and m.privacy_.accountant == "pld"


def test_stop_request_charges_only_executed_steps(digits, pretrained):
    from mixdp_core import accounting as acc

    full = _fit(digits, pretrained, params="cls", epochs=3)
    stopped = SparseFinetune(**{**FAST, "target_epsilon": 1.0, "params": "cls", "epochs": 3}).fit_images(
        None, None, digits["Xpriv"], digits["ypriv"], pretrained=pretrained, on_step=lambda r: r.step >= 1,
        n_classes=5,
    )
    assert stopped.steps_ == 1 and len(stopped.history_) == 1
    assert stopped.noise_multiplier_ == full.noise_multiplier_
    assert stopped.dp_steps_ == full.dp_steps_ // 3
    ref = stopped.count_event_.epsilon + acc.epsilon(
        acc.PoissonSubsampledGaussian(stopped.noise_multiplier_, stopped.sample_rate_, stopped.dp_steps_),
        delta=1e-5, accountant="pld")
    assert stopped.privacy_.epsilon == pytest.approx(ref, rel=1e-9)
    assert stopped.privacy_.epsilon < full.privacy_.epsilon


# ---------------------------------------------------------------------------- registry / split path
def _digits_split():
    from mixdp_core.data.splits import Split

    d = load_digits()
    X, y = d.data.astype(np.float32), d.target
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    pub = np.concatenate([idx[y[idx] == c][:10] for c in range(10)])
    rest = np.setdiff1d(idx, pub)
    priv, test = rest[:300], rest[300:400]
    return Split(
        X_public=X[pub], y_public=y[pub], X_private=X[priv], y_private=y[priv], X_test=X[test], y_test=y[test],
        class_names=[str(c) for c in range(10)], minority_classes=np.array([0, 1]),
        private_counts=np.bincount(y[priv], minlength=10),
    )


@pytest.mark.parametrize("name", ["sparse_finetune", "sparse_finetune_cls", "sparse_finetune_cls_norm", "dpsgd_full_network"])
def test_registered_methods_fit_split_and_are_reproducible(name):
    split = _digits_split()
    cls = METHODS.get(name)
    assert cls.family == "finetune"
    a = make_method(name, **FAST, target_epsilon=2.0, seed=3)
    assert a.fit(split) is a
    pa = a.predict(split.X_test)
    assert pa.shape == (len(split.y_test),)
    assert a.decision_function(split.X_test).shape == (len(split.y_test), 10)
    assert a.privacy_.epsilon <= 2.0 + 1e-9
    b = make_method(name, **FAST, target_epsilon=2.0, seed=3).fit(split)
    np.testing.assert_array_equal(pa, b.predict(split.X_test))
    np.testing.assert_array_equal(a.decision_function(split.X_test), b.decision_function(split.X_test))
    expected_mode = {"sparse_finetune": "all", "sparse_finetune_cls": "cls",
                     "sparse_finetune_cls_norm": "cls_norm", "dpsgd_full_network": "full"}[name]
    assert a.config.params == expected_mode


@pytest.mark.parametrize(
    "field,value",
    [("params", "conv"), ("conv_fraction", 0.0), ("conv_fraction", 1.5), ("epochs", 0), ("batch_size", 0),
     ("accountant", "moments"), ("clip_norm", -1.0), ("lr_cls", float("nan")), ("arch", "vgg"),
     ("image_shape", (1, 8)), ("target_epsilon", 0.0), ("seed", -1), ("momentum", 1.0)],
)
def test_invalid_config_raises_config_error_naming_field(field, value):
    with pytest.raises(ConfigError) as e:
        make_method("sparse_finetune", **{field: value})
    assert e.value.field == {"target_epsilon": "epsilon"}.get(field, field)


def test_non_image_features_are_rejected_with_image_shape_hint():
    split = _digits_split()
    split.X_public = split.X_public[:, :10]
    with pytest.raises(ConfigError) as e:
        SparseFinetune(**FAST).fit(split)
    assert e.value.field == "image_shape"


def test_full_batch_q1_is_reported_by_the_exact_accountant(digits, pretrained):
    from mixdp_core import accounting as acc

    m = _fit(digits, pretrained, params="cls", batch_size=10_000, epochs=3, target_epsilon=1.0,
             dataset_size="public")
    assert m.sample_rate_ == 1.0 and m.dp_steps_ == 3
    ref = acc.epsilon(acc.PoissonSubsampledGaussian(m.noise_multiplier_, 1.0, 3), delta=1e-5)
    assert m.privacy_.epsilon == pytest.approx(ref, rel=1e-9)
    assert m.privacy_.epsilon <= 1.0 + 1e-9
    # q = 1 is full-batch NoisyGD: 3 Gaussian releases with σ, i.e. μ = sqrt(3)/σ GDP.
    mu = np.sqrt(3) / m.noise_multiplier_
    assert m.privacy_.epsilon == pytest.approx(acc.gaussian_epsilon(mu, delta=1e-5), rel=1e-6)


def test_flattened_rgb_rows_are_read_in_pixels_encoder_order():
    from mixdp_core.methods.finetune.method import _as_images

    imgs = np.random.default_rng(0).normal(size=(5, 3, 4, 4)).astype(np.float32)
    rows = imgs.transpose(0, 2, 3, 1).reshape(5, -1)  # PIL (H, W, C) flattening
    np.testing.assert_array_equal(_as_images(rows, None, "X").numpy(), imgs)
    np.testing.assert_array_equal(_as_images(rows, (3, 4, 4), "X").numpy(), imgs)


def test_split_of_non_pixel_features_is_rejected():
    from mixdp_core.errors import DataError

    split = _digits_split()
    split.meta = {"encoder": "clip_vit_b32"}
    with pytest.raises(DataError, match="pixels"):
        SparseFinetune(**FAST).fit(split)


def test_random_mask_ablation_keeps_the_sparsity_and_differs_from_magnitude():
    import torch

    from mixdp_core.methods.finetune import method as M
    from mixdp_core.methods.finetune.models import build_model
    from mixdp_core.methods.finetune.selection import MASK_KINDS, magnitude_mask, random_mask, select_parameters

    assert M.MASK_KINDS == MASK_KINDS
    torch.manual_seed(0)
    model = build_model("small_cnn", 1, 5, width=8, gn_groups=4, image_size=8)
    mag = magnitude_mask(model, 0.05)
    rnd = random_mask(model, 0.05, seed=1)
    assert sum(int(m.sum()) for m in mag.values()) == sum(int(m.sum()) for m in rnd.values()) > 0
    assert any(not torch.equal(mag[n], rnd[n]) for n in mag)
    assert all(torch.equal(rnd[n], random_mask(model, 0.05, seed=1)[n]) for n in rnd)  # seeded, data-free
    sel = select_parameters(model, "all", conv_fraction=0.05, mask="random", mask_seed=1)
    assert all(torch.equal(sel.masks[n], rnd[n]) for n in rnd)
    with pytest.raises(ConfigError) as e:
        make_method("sparse_finetune", mask="lottery")
    assert e.value.field == "mask"


def test_layer_stats_give_kept_shares_from_the_mask_and_the_noise_to_gradient_ratio(digits, pretrained):
    """Luo et al. Fig. 3 / 4 quantities, read where training has them: the share of each
    tensor the mask keeps, and per step noise norm σ C √k against the clipped gradient's."""
    import math

    m = _fit(digits, pretrained, params="all", epochs=2)
    rows = {r["layer"]: r for r in m.layer_stats_}
    for name, mask in m.masks_.items():  # conv weights: the share kept is the mask's
        assert rows[name]["trainable"] == int(mask.sum()) and rows[name]["total"] == mask.numel()
        assert rows[name]["masked"]
    assert {n for n, r in rows.items() if r["masked"]} == set(m.masks_)
    assert all(r["owner_only"] for r in rows.values())
    cls = rows["classifier.weight"]
    assert cls["share_kept"] == 1.0 and cls["gradient_norm_rms"] > 0
    assert cls["noise_norm_per_step"] == pytest.approx(m.noise_multiplier_ * 1.0 * math.sqrt(cls["trainable"]))
    assert cls["noise_to_gradient"] == pytest.approx(cls["noise_norm_per_step"] / cls["gradient_norm_rms"])
    full = _fit(digits, pretrained, params="full", epochs=2)
    big = max((r for r in full.layer_stats_ if r["gradient_norm_rms"]), key=lambda r: r["trainable"])
    # the paper's point: training every parameter puts the largest tensors deep in noise
    assert big["noise_to_gradient"] > 3 * full.layer_stats_[-2]["noise_to_gradient"] > 0


def test_no_private_row_runs_like_one_row(digits, pretrained):
    """An empty private set was refused while one row ran: the error alone told the two
    neighbouring data sets apart. Both run now, with the same plan and ε; the empty one's
    Poisson batches are all empty (pure-noise steps)."""
    fits = {}
    for n in (0, 1):
        m = SparseFinetune(**{**FAST, "target_epsilon": 1.0, "params": "cls", "epochs": 1}).fit_images(
            None, None, digits["Xpriv"][:n], digits["ypriv"][:n], digits["Xtest"], digits["ytest"],
            pretrained=pretrained, n_classes=5)
        fits[n] = m
        assert m.predict(digits["Xtest"]).shape == (len(digits["ytest"]),)
        assert m.verify_privacy() == pytest.approx(m.privacy_.epsilon)
    assert fits[0].privacy_.epsilon == fits[1].privacy_.epsilon and fits[0].steps_ == fits[1].steps_
    assert fits[0].noise_multiplier_ == fits[1].noise_multiplier_


def test_class_count_is_given_never_read_off_the_private_labels(digits, pretrained):
    """Private labels of classes 0-2 only: the model has the 5 classes it was told (max + 1 of
    the private labels would be an unaccounted output shape); without the count, one line."""
    from mixdp_core.errors import ConfigError

    keep = digits["ypriv"] < 3
    m = SparseFinetune(**{**FAST, "target_epsilon": 1.0, "params": "cls", "epochs": 1}).fit_images(
        None, None, digits["Xpriv"][keep], digits["ypriv"][keep], pretrained=pretrained, n_classes=5)
    assert len(m.classes_) == 5
    with pytest.raises(ConfigError, match="n_classes"):
        SparseFinetune(**{**FAST, "target_epsilon": 1.0}).fit_images(
            None, None, digits["Xpriv"], digits["ypriv"], pretrained=pretrained)

def test_secure_runs_with_the_same_seed_differ_and_reproducible_ones_do_not(digits, pretrained):
    def fit(noise):
        m = SparseFinetune(**{**FAST, "target_epsilon": 1.0, "params": "cls", "epochs": 1, "noise": noise})
        m.fit_images(None, None, digits["Xpriv"], digits["ypriv"], pretrained=pretrained, n_classes=5)
        return torch.cat([p.detach().flatten() for p in m.model_.classifier.parameters()])

    assert not torch.equal(fit("secure"), fit("secure"))
    assert torch.equal(fit("reproducible"), fit("reproducible"))


def test_a_non_finite_private_pixel_is_refused_and_a_failed_refit_leaves_no_model(digits, pretrained):
    """One NaN pixel (or a value past float32's range) turned the whole network into NaN once
    its row was sampled, with ε still reported; a refit that fails kept the old model beside
    the new ledger."""
    from mixdp_core.errors import BudgetError, ConfigError, DataError

    bad = digits["Xpriv"].astype(np.float64)
    for v in (np.nan, 1e39):
        bad[3, 0, 2, 2] = v
        with pytest.raises(DataError, match="private_images: contains NaN or infinite"):
            SparseFinetune(**FAST).fit_images(None, None, bad, digits["ypriv"], pretrained=pretrained, n_classes=5)
    m = _fit(digits, pretrained)
    assert m.predict(digits["Xtest"]).shape == (len(digits["ytest"]),)
    m.config = dataclasses.replace(m.config, epochs=10**6)
    with pytest.raises(BudgetError):
        m.fit_images(None, None, digits["Xpriv"], digits["ypriv"], pretrained=pretrained, n_classes=5)
    with pytest.raises(RuntimeError, match="not fitted"):
        m.predict(digits["Xtest"])
    assert m.privacy_ is None and m.history_ == []
    with pytest.raises(ConfigError, match="test_labels"):
        m.fit_images(None, None, digits["Xpriv"], digits["ypriv"], digits["Xtest"], pretrained=pretrained, n_classes=5)
