"""Tiny data for the DP-prototypes tests: scikit-learn digits pixels (no encoder)."""

from __future__ import annotations

import numpy as np
import pytest

from mixdp_core.data.splits import SplitSpec, make_split
from mixdp_core.features.featureset import FeatureSet


@pytest.fixture(scope="session")
def digits_fs() -> FeatureSet:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(y))
    tr, te = perm[:1300], perm[1300:]
    return FeatureSet(
        X_train=X[tr].astype(np.float32) / 16.0, y_train=y[tr],
        X_test=X[te].astype(np.float32) / 16.0, y_test=y[te],
        class_names=[str(i) for i in range(10)], meta={"dataset": "digits", "encoder": "pixels"},
    )


@pytest.fixture(scope="session")
def digits_split(digits_fs):
    return make_split(digits_fs, SplitSpec(public_per_class=5, imbalance_ratio=1.0, seed=0))


@pytest.fixture(scope="session")
def digits_split_ir(digits_fs):
    return make_split(digits_fs, SplitSpec(public_per_class=5, imbalance_ratio=10.0, seed=0))
