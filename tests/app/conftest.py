"""Fixtures of the app tests: a fresh run store per test, jobs run synchronously."""

from __future__ import annotations

import os

import pytest

from .helpers import APP, ROOT, TIMEOUT


@pytest.fixture
def app_env(tmp_path, monkeypatch):
    """Fresh MIXDP_HOME (so a fresh job manager), synchronous jobs, cwd at the repo root."""
    home = tmp_path / "home"
    monkeypatch.setenv("MIXDP_HOME", str(home))
    monkeypatch.setenv("MIXDP_APP_SYNC_JOBS", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    monkeypatch.chdir(ROOT)
    return home


@pytest.fixture
def at(app_env):
    """An AppTest of app.py (Home), already run once."""
    from streamlit.testing.v1 import AppTest

    t = AppTest.from_file(APP, default_timeout=TIMEOUT)
    t.run()
    assert not t.exception, t.exception
    return t
