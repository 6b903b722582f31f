"""Digits splits for the audit tests (the session fixture ``digits_features`` of tests/conftest.py)."""

from __future__ import annotations

import pytest

from mixdp_core.data.splits import SplitSpec, make_split


@pytest.fixture(scope="session")
def audit_split(digits_features):
    return make_split(digits_features, SplitSpec(public_per_class=5, seed=0))


@pytest.fixture(scope="session")
def audit_split_ir10(digits_features):
    return make_split(digits_features, SplitSpec(public_per_class=5, imbalance_ratio=10.0, seed=0))
