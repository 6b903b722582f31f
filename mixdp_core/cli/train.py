"""``mixdp train``: run one experiment from the command line and record it in the run store.

Example::

    mixdp train --dataset digits --encoder pixels --method adamix --epsilon 3 --seed 0 --json

With ``--json`` exactly one JSON object is printed on stdout (errors/accuracies as fractions
in [0, 1]; ``epsilon`` is the ε reported by the accounting module for the run as executed,
``null`` for non-private methods, with the ``accountant`` and ``mechanism`` it refers to and,
for DP-SGD methods, the looser RDP ``epsilon_rdp`` beside it); owner-only diagnostics computed
on the private data without a guarantee (MIA, per-instance DP, the exact private count) sit
under ``diagnostics`` with a note; progress goes to stderr. Invalid arguments print one line
``mixdp train: error: <field>: <what is allowed>`` and exit with status 2; so does a run that
would take its data set above the cap set with ``mixdp budget`` (field ``budget_cap``,
before anything runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from typing import Any

from ..config import IMBALANCE_RANGE, RUN_DELTA, RUN_EPSILON, SEED_RANGE
from ..errors import ConfigError, UnknownNameError
from ._common import Progress, description, fail, number, one_line_errors, pairs

#: Keys of the ``--json`` summary, in order.
SUMMARY_KEYS = (
    "run_id", "status", "method", "dataset", "encoder", "seed", "epsilon", "target_epsilon",
    "epsilon_label", "delta", "mu", "accountant", "epsilon_rdp", "mechanism", "noise", "noise_label",
    "noise_multiplier", "steps",
    "test_error", "balanced_accuracy", "minority_accuracy", "performance_boost", "wall_seconds",
    "reused", "store", "diagnostics",
)

#: Owner-only diagnostics (no DP guarantee), printed only inside ``diagnostics``.
DIAGNOSTIC_SUMMARY_KEYS = (
    "mia_auc", "mia_advantage", "pdp_epsilon_min", "pdp_epsilon_median", "pdp_epsilon_max",
)



def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``train`` sub-command to ``subparsers`` (from ``add_subparsers()``)."""
    p = subparsers.add_parser(
        "train",
        help="train one method on one dataset and record the run",
        description=description(__doc__),
    )
    a = p.add_argument
    a("--dataset", default="digits", help="dataset spec (see `mixdp datasets`), default digits")
    a("--encoder", default="pixels", help="feature extractor (see `mixdp encoders`), default pixels")
    a("--method", default="adamix", help="training method (see `mixdp methods`), default adamix")
    a("--epsilon", default="3", help=f"target ε of the (ε, δ)-DP guarantee: {RUN_EPSILON.requirement()}, default 3")
    a("--delta", default="1e-5", help=f"target δ: {RUN_DELTA.requirement()}, default 1e-5")
    a("--seed", default="0", help=f"seed of the split (and of the noise only with noise=reproducible), an integer "
                                  f"{SEED_RANGE.describe()}, default 0")
    a("--public-per-class", default="5", help="public samples per class (integer >= 1), default 5")
    a("--imbalance-ratio", default="1",
      help=f"long-tail ratio of the private data, a number {IMBALANCE_RANGE.describe()}, default 1")
    a("--public-from", default=None, help="dataset spec providing the public samples (domain shift)")
    a("--noise-multiplier", default=None, help="noise multiplier σ > 0 (NoisyGD-type methods)")
    a("--param", action="append", default=[], metavar="KEY=VALUE",
      help="other method config field (VALUE parsed as JSON, else a string); repeatable; "
           "`mixdp methods --params METHOD` lists them with their ranges")
    a("--dataset-root", default=None, help="dataset folder (default: the loader's)")
    a("--dataset-arg", action="append", default=[], metavar="KEY=VALUE", help="dataset loader option; repeatable")
    a("--encoder-arg", action="append", default=[], metavar="KEY=VALUE",
      help="encoder option, e.g. image_size=128; repeatable")
    a("--weights", default=None, metavar="FILE",
      help="encoder weights file (torchvision state_dict for resnet50, open_clip checkpoint for CLIP, "
           "timm/torch.hub file for dinov2): the offline route when the weights cannot be downloaded")
    a("--cache-dir", default=None, help="feature cache folder (default $MIXDP_CACHE or ~/.cache/mixdp)")
    a("--store", default=None, help="run store folder (default $MIXDP_HOME or the user data folder)")
    a("--label", default=None, help="free-text tag stored with the run")
    a("--reuse", action="store_true", help="reuse a completed identical run instead of training again")
    a("--json", action="store_true", help="print exactly one JSON object on stdout")
    a("--no-progress", action="store_true", help="no progress bars on stderr")
    p.set_defaults(func=run)
    return p


def build_config(args: argparse.Namespace):
    """The :class:`~mixdp_core.runs.runner.RunConfig` described by parsed ``args``."""
    from ..runs.runner import RunConfig

    params = pairs("param", args.param)
    sigma = number("noise_multiplier", args.noise_multiplier, float, "a number > 0")
    if sigma is not None:
        if not sigma > 0 or math.isinf(sigma):
            raise ConfigError("noise_multiplier", f"must be a finite number > 0, got {args.noise_multiplier!r}")
        params["noise_multiplier"] = sigma
    return RunConfig(
        dataset=args.dataset,
        encoder=args.encoder,
        method=args.method,
        seed=number("seed", args.seed, int, f"an integer {SEED_RANGE.describe()}"),
        target_epsilon=number("epsilon", args.epsilon, float, RUN_EPSILON.requirement()),  # range: RunConfig
        target_delta=number("delta", args.delta, float, RUN_DELTA.requirement()),
        public_per_class=number("public_per_class", args.public_per_class, int, "an integer >= 1"),
        imbalance_ratio=number("imbalance_ratio", args.imbalance_ratio, float, "a number >= 1"),
        public_from=args.public_from,
        method_params=params,
        dataset_root=args.dataset_root,
        dataset_kwargs=pairs("dataset_arg", args.dataset_arg),
        encoder_kwargs=_encoder_kwargs(args),
    )


def _encoder_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``--encoder-arg`` pairs plus ``--weights FILE`` (as ``pretrained``, checked to exist)."""
    from pathlib import Path

    ekw = pairs("encoder_arg", args.encoder_arg)
    if "weights" in ekw:
        ekw["pretrained"] = ekw.pop("weights")
    if getattr(args, "weights", None):
        ekw["pretrained"] = args.weights
    w = ekw.get("pretrained")
    if isinstance(w, str) and ("/" in w or w.endswith((".pt", ".pth", ".bin", ".safetensors"))):
        p = Path(w).expanduser()
        if not p.is_file():
            raise ConfigError("weights", f"weights file {str(p)!r} does not exist" + (" (it is a folder)" if p.is_dir() else ""))
        ekw["pretrained"] = str(p.resolve())
    return ekw


def summary(record: Any, *, store_root: str, reused: bool) -> dict[str, Any]:
    """The ``--json`` object of a finished run record."""
    from ..runs.owner_view import move_hidden
    from ..runs.runner import DIAGNOSTICS_NOTE
    from ..runs.store import export_target_epsilon

    m = record.metrics
    out = {k: m.get(k) for k in SUMMARY_KEYS}
    priv = m.get("privacy") or {}
    out["accountant"] = priv.get("accountant")
    out["mechanism"] = priv.get("mechanism")
    diag = {"note": DIAGNOSTICS_NOTE}
    diag.update({k: m.get(k) for k in DIAGNOSTIC_SUMMARY_KEYS})
    diag["n_private"] = m.get("n_private")
    # what a public view hides (owner_view.hidden_from_public): the performance boost (a ratio with
    # the paragon's error), a duration that depends on the mechanism's hidden secret, every
    # outcome of the paragon
    move_hidden(out, m, diag)
    out["diagnostics"] = diag
    out.update(run_id=record.run_id, status=record.status, method=record.method,
               dataset=record.dataset, encoder=record.encoder, seed=record.seed,
               target_epsilon=export_target_epsilon(record), reused=reused, store=store_root)  # None: a reference has no budget
    return out


def run(args: argparse.Namespace) -> int:
    """Run the ``train`` sub-command; returns the exit status (0 ok, 1 run failed, 2 bad args)."""
    from ..runs.runner import execute
    from ..runs.store import RunStore

    try:
        config = build_config(args)
        config.preflight()  # the budget, once (execute trusts the remembered check)
    except (ConfigError, UnknownNameError, TypeError) as e:
        return fail("mixdp train", str(e), 2)
    from ..runs.ledger import check_cap

    store = RunStore(args.store)
    try:  # the data set's cap (`mixdp budget`): refused before anything runs or is stored
        check_cap(store, config, reuse=args.reuse)
    except ConfigError as e:
        return fail("mixdp train", str(e), 2)
    prog = Progress(not args.no_progress)
    before = {r.run_id for r in store.list_runs(config_hash=config.config_hash(), status="completed")} \
        if args.reuse else set()
    with one_line_errors("mixdp train", prog, interrupted="interrupted; the run is marked failed") as outcome:
        with contextlib.redirect_stdout(sys.stderr):  # stdout is reserved for the result
            run_id = execute(config, store=store, on_record=prog.step, cache_dir=args.cache_dir,
                             progress=prog.features, reuse=args.reuse, label=args.label)
    if outcome.code is not None:
        return outcome.code
    rec = store.get_run(run_id)
    out = summary(rec, store_root=str(store.root), reused=run_id in before)
    if args.json:
        print(json.dumps(out, allow_nan=False))
    else:
        from ..data.datasets import carries_features

        for k in SUMMARY_KEYS:
            if k not in out:  # moved under diagnostics (an owner-only timing)
                continue
            v = out.get(k)
            if k == "diagnostics":
                print(f"{'diagnostics':>20}: (owner-only, no DP guarantee: do not publish)")
                for dk, dv in v.items():
                    if dk != "note":
                        print(f"{dk:>20}: {dv:.4g}" if isinstance(dv, float) else f"{dk:>20}: {dv}")
                continue
            if k == "encoder" and carries_features(config.dataset):
                v = f"{v} (not used: the dataset's rows are features)"
            print(f"{k:>20}: {v:.4g}" if isinstance(v, float) else f"{k:>20}: {v}")
    return 0 if rec.status == "completed" else 1
