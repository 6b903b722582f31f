"""Fixtures of the run tests: a tiny digits FeatureSet and a controllable fake method."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pytest

from mixdp_core.features.featureset import FeatureSet
from mixdp_core.methods.base import METHODS, Method, PrivacyConfig, StepRecord


@pytest.fixture(scope="session")
def digits_features() -> FeatureSet:
    from sklearn.datasets import load_digits

    d = load_digits()
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(d.target))
    tr, te = idx[:1200], idx[1200:]
    X = d.data.astype(np.float32)
    return FeatureSet(X_train=X[tr], y_train=d.target[tr], X_test=X[te], y_test=d.target[te],
                      class_names=[str(i) for i in range(10)], meta={"dataset": "digits", "encoder": "pixels"})


@dataclass(frozen=True, kw_only=True)
class FakeConfig(PrivacyConfig):
    seed: int = 0
    steps: int = 5
    fail_at: int = 0  # raise at this step (0 = never)
    interrupt_at: int = 0  # raise KeyboardInterrupt at this step
    sleep_s: float = 0.0


class FakeMethod(Method):
    """Non-private nearest-class-mean classifier emitting ``steps`` StepRecords."""

    config_cls = FakeConfig
    private = False

    def fit(self, split, *, on_step=None):
        c = self.config
        self.history_, self.steps_ = [], 0
        self.privacy_ = None
        self.noise_multiplier_ = None
        self.pdp_sq_ratio_sum_ = None
        self.means_ = np.stack([split.X_private[split.y_private == k].mean(0) for k in range(split.n_classes)])
        for t in range(1, c.steps + 1):
            if t == c.fail_at:
                raise RuntimeError(f"boom at step {t}")
            if t == c.interrupt_at:
                raise KeyboardInterrupt
            time.sleep(c.sleep_s)
            rec = StepRecord(step=t, total_steps=c.steps, train_loss=1.0 / t)
            self.history_.append(rec)
            self.steps_ = t
            if on_step is not None and on_step(rec):
                break
        return self

    def decision_function(self, X):
        return -((X[:, None, :] - self.means_[None]) ** 2).sum(-1) / 50.0


@pytest.fixture
def fake_method(monkeypatch):
    monkeypatch.setitem(METHODS._items, "_fake", FakeMethod)
    return "_fake"
