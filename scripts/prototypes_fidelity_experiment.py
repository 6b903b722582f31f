"""Fidelity experiment behind docs/results/prototypes_fidelity.md (DP prototypes, few public samples).

usage (repository root; PUB = public samples per class, default 2; the rest of 62 are private):
    PYTHONPATH=$PWD [PUB=10] python scripts/prototypes_fidelity_experiment.py SRC OUT.json VARIANT...
SRC: 'pacs28' — EfficientNet-Lite0 features of PACS as 28 (domain, class) classes, first 62 files
of each folder (sorted by name) for training and the next 18 for test, encoded once with
``mixdp encode --dataset image_folder:/tmp/dppl_pacs28 --encoder efficientnet_lite0``
(a train/ and test/ tree of copies of /tmp/fid/PACS/<domain>/<class>/ named <domain>_<class>);
'synth100' — 100 Gaussian classes, D = 1280, whose mean, within-class covariance shape and
between/within variance ratio are those of the pacs28 features (non-negative after a ReLU).
``others``: DPPL-Mean's default vs the paper split on digits and CIFAR-10 pixels (see others()).
VARIANT: keys of VARIANTS below. Every row: test error (%) of one (variant, seed, ε), δ = 1e-5.
Runs on old code too (a config field it lacks gives error None).
"""
import json, math, os, sys, time
import numpy as np

def load_pacs():
    from mixdp_core.features import get_features
    return get_features("image_folder:/tmp/dppl_pacs28", "efficientnet_lite0")

def synth(fs_ref, C=100, n_train=62, n_test=20, seed=123):
    """Gaussian classes whose mean/within/between second moments match fs_ref (EfficientNet-Lite0)."""
    from mixdp_core.featureset import FeatureSet
    X, y = np.asarray(fs_ref.X_train, np.float64), np.asarray(fs_ref.y_train)
    K = int(y.max()) + 1
    mu = X.mean(0)
    means = np.stack([X[y == c].mean(0) for c in range(K)])
    W = np.concatenate([X[y == c] - means[c] for c in range(K)])
    tw = (W ** 2).sum(1).mean()                       # within-class total variance
    tb = ((means - mu) ** 2).sum(1).mean()            # between-class total variance
    # within-class covariance via the empirical residuals; class offsets with the same shape,
    # scaled to the between/within ratio of the real features
    rng = np.random.default_rng(seed)
    def draw(n, scale):
        return scale * (rng.standard_normal((n, len(W))) @ W) / math.sqrt(len(W))
    off = draw(C, math.sqrt(tb / tw))
    Xtr = np.concatenate([mu + off[c] + draw(n_train, 1.0) for c in range(C)])
    Xte = np.concatenate([mu + off[c] + draw(n_test, 1.0) for c in range(C)])
    Xtr, Xte = np.maximum(Xtr, 0), np.maximum(Xte, 0)  # post-ReLU features are non-negative
    ytr, yte = np.repeat(np.arange(C), n_train), np.repeat(np.arange(C), n_test)
    return FeatureSet(X_train=Xtr.astype(np.float32), y_train=ytr, X_test=Xte.astype(np.float32), y_test=yte,
                      class_names=[f"c{i}" for i in range(C)], meta={"dataset": "synth100", "encoder": "synthetic"})

VARIANTS = {
    "dppl_mean": ("dppl_mean", {}),
    "dppl_mean_paper_split": ("dppl_mean", {"budget_split": (5/64, 7/64, 52/64)}),
    "dppl_mean_one_step": ("dppl_mean", {"budget_split": (1.0,)}),
    "dppl_mean_replace": ("dppl_mean", {"neighbouring": "replace"}),
    "dppl_mean_none": ("dppl_mean", {"feature_norm": "none"}),
    "dppl_public": ("dppl_public", {}),
    "dppl_public_topk": ("dppl_public_topk", {}),
    "topk_k1": ("dppl_public_topk", {"k": 1}),
    "topk_k2": ("dppl_public_topk", {"k": 2}),
    "topk_k3": ("dppl_public_topk", {"k": 3}),
    "topk_k3_paper": ("dppl_public_topk", {"k": 3, "sampling": "paper"}),
    "topk_k2_paper": ("dppl_public_topk", {"k": 2, "sampling": "paper"}),
    "dp_linear_probe": ("dp_linear_probe", {}),
    "nonprivate_mean": None,
}

def others():
    """dppl_mean default vs the paper split where there are more samples per class (5 public, rest private):
    digits pixels and the cached 16-px pixel features of 500 CIFAR-10 images per class."""
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.featureset import FeatureSet
    from mixdp_core.features import get_features
    from mixdp_core.methods import make_method
    f = np.load(os.path.expanduser("~/.cache/mixdp/features/96bfc079953ade20d0676287/features.npz"))
    cifar = FeatureSet(X_train=f["X_train"].astype(np.float32), y_train=f["y_train"],
                       X_test=f["X_test"].astype(np.float32), y_test=f["y_test"],
                       class_names=[str(c) for c in range(10)], meta={})
    for name, fs in (("digits/pixels", get_features("digits", "pixels")), ("cifar10-500/pixels16", cifar)):
        for label, kw in (("default", {}), ("paper split", {"budget_split": (5 / 64, 7 / 64, 52 / 64)})):
            errs = []
            for eps in (0.5, 1.0, 3.0):
                e = [float((make_method("dppl_mean", target_epsilon=eps, seed=s, **kw).fit(sp).predict(sp.X_test)
                            != sp.y_test).mean()) for s in (0, 1)
                     for sp in [make_split(fs, SplitSpec(public_per_class=5, seed=s))]]
                errs.append(f"{100 * np.mean(e):.1f}")
            print(name, label, " / ".join(errs), flush=True)


def main():
    if sys.argv[1] == "others":
        return others()
    src, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    from mixdp_core.data.splits import SplitSpec, make_split
    from mixdp_core.methods import make_method
    ref = load_pacs()
    fs = ref if src == "pacs28" else synth(ref)
    rows = []
    for seed in (0, 1):
        pub = int(os.environ.get("PUB", 2))
        split = make_split(fs, SplitSpec(public_per_class=pub, private_per_class=62 - pub, seed=seed))
        for name in names:
            if name == "nonprivate_mean":
                P = np.stack([split.X_private[split.y_private == c].mean(0) for c in range(split.n_classes)])
                from mixdp_core.methods.prototypes.utilities import cosine_scores
                err = float((cosine_scores(split.X_test, P).argmax(1) != split.y_test).mean())
                rows.append(dict(variant=name, seed=seed, epsilon=None, error=100 * err))
                continue
            meth, kw = VARIANTS[name]
            for eps in (0.5, 1.0, 3.0):
                try:
                    t = time.time()
                    m = make_method(meth, target_epsilon=eps, seed=seed, **kw).fit(split)
                    err = float((m.predict(split.X_test) != split.y_test).mean())
                    rows.append(dict(variant=name, seed=seed, epsilon=eps, error=100 * err,
                                     eps_spent=float(m.privacy_.epsilon), secs=round(time.time() - t, 1)))
                except TypeError as e:  # a config field the old code does not have
                    rows.append(dict(variant=name, seed=seed, epsilon=eps, error=None, note=str(e)[:80]))
                print(rows[-1], flush=True)
    json.dump(rows, open(out, "w"), indent=1)

if __name__ == "__main__":
    main()
