"""Fixtures of the app tests: a fresh run store per test, jobs run synchronously."""

from __future__ import annotations

import os

import pytest

from .helpers import APP, ROOT, TIMEOUT


@pytest.fixture(autouse=True)
def _stop_lessons(monkeypatch):
    """Stop the Classroom's background lesson trainings a test started, when it ends.

    Why: the thread would train on through the next tests, taking their CPU, and while any
    thread runs the sweep engine's local pools use a forkserver whose workers re-import
    ``__main__`` (the last page script AppTest ran): 8-10 s per pool on a loaded machine."""
    from mixdp_core.app_support.classroom import LessonCache

    started = []
    start = LessonCache.start

    def recorded(self, *args, **kwargs):
        started.append(self)
        return start(self, *args, **kwargs)

    monkeypatch.setattr(LessonCache, "start", recorded)
    yield
    for cache in started:
        cache.stop(timeout=120)


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
