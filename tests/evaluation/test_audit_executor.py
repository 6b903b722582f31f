"""The executor seam: any ``executor(fn, items)`` gives the same audit (threads keep observers apart)."""

from __future__ import annotations

from mixdp_core.evaluation.audit import run_audit
from mixdp_core.evaluation.audit.executor import map_jobs, resolve


def test_map_jobs_order_progress_and_custom_executor():
    seen = []
    calls = []

    def my_executor(fn, items):  # what the sweep engine plugs in: map_trainings(fn, items, backend=...)
        calls.append(len(items))
        return [fn(i) for i in items]

    assert map_jobs(lambda x: x * x, [3, 1, 2], executor=my_executor, progress=lambda d, t: seen.append((d, t))) == [9, 1, 4]
    assert calls == [3] and seen == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert list(resolve("threads", 2)(abs, [-1, -2])) == [1, 2]


def test_threaded_whitebox_audit_equals_sequential(audit_split):
    # replayable noise, so that the two executors can be compared value for value
    kw = dict(attack="canary-whitebox", epsilon=1.0, trials=400, canaries=200, seed=3,
              method_params={"noise": "reproducible"})
    a = run_audit(audit_split, "fully_private", executor="sequential", **kw).summary()
    b = run_audit(audit_split, "fully_private", executor="threads", **kw).summary()
    for k in ("auc", "empirical_epsilon_lower", "empirical_mu_lower", "n_trials"):
        assert a[k] == b[k], k
