"""What of a run only the data owner may see, and the public view of a run for exports.

A run's store row keeps everything (the app's charts need it), but some of it is computed on
the private data *without* a DP guarantee: membership-inference scores, per-instance ε, the
exact private count and per-class private counts (the split summary), the exact train loss at
every step, and the minority classes (runs stored before 2026-11-29 chose them from the exact
counts; a store holds both kinds, so every run's are kept owner-only). The reported ε does not cover them.

Every export (``RunStore.export``, the Runs page's download buttons) therefore leaves them
out by default; with ``owner_view=True`` they are included, but only grouped under
``owner_only`` with :data:`OWNER_NOTE` — never flat beside the released values — as the
CLI's ``--json`` does under ``diagnostics``.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

#: Metrics computed on the private data without a DP guarantee: for the data owner only.
DIAGNOSTIC_KEYS = (
    "mia_auc", "mia_advantage", "mia_n_per_side", "pdp_epsilon_min", "pdp_epsilon_median",
    "pdp_epsilon_max", "pdp_epsilon_mean", "n_private", "train_loss",
)
#: Other metrics that read the private data in the clear: the split's per-class counts, the
#: minority classes (from the counts in runs stored before 2026-11-29; from the seed's tail
#: order since), and the grouped block itself.
#: ``features_meta``: the feature cache's record of the data (its ``n_train``, minus the public
#: count, is the exact private count; extraction time grows with it). ``performance_boost``
#: (and its label): a ratio of errors with the paragon's, which two runs' boosts solve for.
OWNER_METRIC_KEYS = DIAGNOSTIC_KEYS + ("split", "minority_classes", "diagnostics", "pdp_owner_only",
                                      "pdp_epsilon_kind", "mia_class_matched", "layer_stats", "features_meta",
                                      "performance_boost", "performance_boost_label", "sec_per_epoch")
#: Prefixes of owner-only metric names (every per-instance-DP and membership-attack figure).
OWNER_PREFIXES = ("pdp_epsilon_", "mia_")
#: Step-record fields computed on the private data in the clear.
OWNER_STEP_KEYS = ("train_loss",)
#: Keys of a step record's ``extra`` computed on the private data in the clear: the AdaMix
#: subspace diagnostic reads the clipped private gradient sum before noise.
#: ``guard_holdout_rows``: the held-out guard part's size, a binomial draw of the exact private count.
#: ``seconds`` / ``pdp_seconds``: fine-tuning's per-epoch timings, which grow with the exact
#: private count (the per-instance-DP pass reads every private row).
OWNER_STEP_EXTRA_KEYS = ("subspace_error_public", "subspace_error_random", "guard_holdout_rows", "seconds",
                         "pdp_seconds")

OWNER_NOTE = (
    "Owner-only diagnostics: computed on the private data without a privacy guarantee "
    "(membership-inference scores, per-instance DP, exact private count and per-class counts, "
    "minority classes (in runs stored before 2026-11-29), train loss, per-layer gradient norms, subspace reconstruction errors of the private "
    "gradients, the feature cache's counts, the performance boost (a ratio with the paragon's error), every "
    "outcome of the non-private paragon). They are not covered by the reported epsilon; do not publish them."
)


#: Timings of a run (seconds), owner-only for every run that reads the private rows
#: (:func:`timing_is_owner_only`): a fit's duration grows with the exact private count (a
#: full-batch gradient, DP-SGD's Poisson batches of mean q·N, a per-instance-DP pass over every
#: row), and some with a secret of the mechanism besides (the hidden number of repetitions of a
#: private selection, ``honest_tuning``): neither is covered by ε. Its ``finished_at`` (and every
#: time after its launch) is left out of public exports for the same reason.
TIMING_KEYS = ("fit_seconds", "wall_seconds")


#: What a public view keeps of a non-private reference that trains on the private rows (the
#: paragon, ε = ∞): what was run, never an outcome (its error is a function of the private rows
#: with no guarantee, docs/privacy.md).
REFERENCE_PUBLIC_KEYS = frozenset({
    "run_id", "method", "dataset", "encoder", "seed", "private", "epsilon", "epsilon_label", "noise",
    "noise_label", "target_epsilon", "target_delta", "delta", "public_per_class", "imbalance_ratio",
    "n_classes", "dim", "n_public", "n_test", "method_config", "worker",
})


def timing_is_owner_only(metrics: Mapping[str, Any]) -> bool:
    """Whether a run's timings (:data:`TIMING_KEYS`, its finish time) are owner-only: a run
    whose method set ``timing_owner_only``, and every run that reads the private rows (a private
    method, or a reference like the paragon); Only-Public's and zero-shot's stay public.
    (Until 2026-11-29 only the first: a review measured DP-SGD's step time growing with N, 0.26
    to 4.79 ms from 290 to 19,990 private rows.)"""
    return bool(metrics.get("timing_owner_only") or metrics.get("private") is True
                or reads_private_in_clear(metrics))


def reads_private_in_clear(metrics: Mapping[str, Any]) -> bool:
    """Whether a run is a non-private reference that trains on the private rows (the paragon:
    ``private`` false and an ε that is not 0; Only-Public and zero-shot have ε = 0)."""
    return metrics.get("private") is False and metrics.get("epsilon") != 0.0


def is_owner_only(key: str) -> bool:
    """Whether metric ``key`` is owner-only (see the module docstring)."""
    return key in OWNER_METRIC_KEYS or key.startswith(OWNER_PREFIXES)


def hidden_from_public(metrics: Mapping[str, Any], key: str) -> bool:
    """Whether ``metrics[key]`` is left out of a public view of this run: an owner-only key, a
    timing of a run whose duration holds a secret, or any outcome of a reference that reads the
    private rows in the clear."""
    return (is_owner_only(key) or (timing_is_owner_only(metrics) and key in TIMING_KEYS)
            or (reads_private_in_clear(metrics) and key not in REFERENCE_PUBLIC_KEYS))


def move_hidden(out: dict[str, Any], metrics: Mapping[str, Any], diag: dict[str, Any]) -> None:
    """Move the keys of a printed summary ``out`` that a public view hides (:func:`hidden_from_public`
    of the run's ``metrics``) into its owner-only block ``diag`` (the stored ``diagnostics``
    block itself is that block, never nested in it): `mixdp train --json` and a sweep's lines."""
    for k in [k for k in out if k in metrics and k != "diagnostics" and hidden_from_public(metrics, k)]:
        diag[k] = out.pop(k)


def public_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics`` without what :func:`hidden_from_public` hides."""
    return {k: v for k, v in metrics.items() if not hidden_from_public(metrics, k)}


def owner_block(metrics: Mapping[str, Any], steps: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The owner-only values of a run, grouped under :data:`OWNER_NOTE`.

    ``steps``: the run's step records; their owner-only fields (and owner-only ``extra``
    keys) come back as ``{"step_<field>": [value per step]}`` (``None`` where a step has none)."""
    out: dict[str, Any] = {"note": OWNER_NOTE}
    for k, v in metrics.items():
        if hidden_from_public(metrics, k) and k != "diagnostics":
            out[k] = v
    steps = list(steps)
    if reads_private_in_clear(metrics) and steps:  # the paragon's records: the owner's view whole
        out["steps"] = [dict(s) for s in steps]
    for f in OWNER_STEP_KEYS:
        if any(f in s for s in steps):
            out[f"step_{f}"] = [s.get(f) for s in steps]
    for f in OWNER_STEP_EXTRA_KEYS:
        if any(f in (s.get("extra") or {}) for s in steps):
            out[f"step_{f}"] = [(s.get("extra") or {}).get(f) for s in steps]
    return out


def diagnostics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The per-run diagnostics (MIA, per-instance DP, exact count, train loss) grouped with
    :data:`OWNER_NOTE`: what the runner stores as ``metrics["diagnostics"]`` and the CLI's
    ``--json`` prints. (The flat keys stay in the run's metrics for the app's charts.)"""
    out: dict[str, Any] = {"note": OWNER_NOTE}
    for k in metrics:
        if k in DIAGNOSTIC_KEYS or k.startswith(OWNER_PREFIXES):
            out[k] = metrics[k]
    return out


def public_steps(steps: Iterable[Mapping[str, Any]], metrics: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Step records without their owner-only fields (nor the owner-only keys of ``extra``); none
    at all for a run that reads the private rows in the clear (:func:`reads_private_in_clear`,
    the paragon): its step records are outcomes (its test error at each step was exported beside
    the metrics that no longer held it)."""
    if metrics is not None and reads_private_in_clear(metrics):
        return []
    out = []
    for s in steps:
        d = {k: v for k, v in s.items() if k not in OWNER_STEP_KEYS}
        if isinstance(d.get("extra"), Mapping):
            d["extra"] = {k: v for k, v in d["extra"].items() if k not in OWNER_STEP_EXTRA_KEYS}
        out.append(d)
    return out


def public_error(error: Any) -> Any:
    """A failed run's error as an export shows it: the exception's type and the field it
    names (``"DataError: y_train"``), without the message. A message may quote the private
    data in the clear (a class's exact count when the public shots do not fit); the full text
    stays in the store and in the owner's view (``owner_only.error``)."""
    if not isinstance(error, str) or not error:
        return error
    head = error.split(": ", 2)
    return ": ".join(head[:2]) + (" (details: owner's view)" if len(head) > 2 else "")
