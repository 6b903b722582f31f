"""``mixdp audit``: attack a method and bound its ε from below; record the audit in the run store.

Example::

    mixdp audit --dataset digits --encoder pixels --method fully_private --epsilon 4 \\
        --attack canary-whitebox --trials 1000 --json

Attacks: ``loss`` (class-matched loss threshold on one run), ``lira`` / ``rmia`` (K reference
models trained by the method itself on random halves of the private set), ``canary``
(black-box mislabeled canary, one training per trial), ``canary-whitebox`` (Dirac gradient
canaries, NoisyGD family), ``one-run`` (Steinke et al. 2023), ``seed-replay`` (replays each
training from its published seed: alarms on ``--param noise=reproducible``). With ``--json`` exactly one JSON
object is printed on stdout, with ``claimed_epsilon`` from the accounting module,
``empirical_epsilon_lower`` with its ``confidence`` and ``n_trials``, and ``alarm`` (true when a
lower bound exceeds the claim at confidence >= 0.9: a privacy bug; below, ``alarm_note`` says so) and ``note``: the audit is the owner's diagnostic,
computed on the private data without a guarantee (not to be published). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import functools
import contextlib
import json
import sys
from typing import Any

from ..config import RUN_DELTA, RUN_EPSILON, SEED_RANGE
from ..errors import ConfigError, MixDPError, UnknownNameError
from ._common import Progress, description, fail, number, one_line_errors, pairs

ATTACK_CHOICES = ("loss", "lira", "rmia", "canary", "canary-whitebox", "one-run", "seed-replay")


#: Attacks that take ``--trials`` (the most trials one audit may ask for, and the bounds on
#: ``--reference-models`` and ``--canaries``: :func:`mixdp_core.evaluation.audit.check_audit_size`).
TRIAL_ATTACKS = ("canary", "canary-whitebox", "seed-replay")


#: ``--executor`` values: in-process, or the sweep engine's backends.
AUDIT_EXECUTORS = ("sequential", "local", "ray")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``audit`` sub-command."""
    p = subparsers.add_parser("audit", help="privacy audit: membership attacks and empirical ε lower bounds",
                              description=description(__doc__))
    a = p.add_argument
    a("--dataset", default="digits", help="dataset spec, default digits")
    a("--encoder", default="pixels", help="feature extractor, default pixels")
    a("--method", default="fully_private", help="training method, default fully_private")
    a("--epsilon", default="3", help=f"target ε the method is configured with: {RUN_EPSILON.requirement()}, "
                                     "default 3")
    a("--delta", default="1e-5", help=f"target δ: {RUN_DELTA.requirement()}, default 1e-5")
    a("--seed", default="0", help="seed of the split, the trainings and the audit's coins, default 0")
    a("--attack", default="loss", help=f"one of {', '.join(ATTACK_CHOICES)}; default loss")
    from ..config import AUDIT_MAX_CANARIES as MAX_CANARIES, AUDIT_MAX_REFERENCE_MODELS as MAX_REFERENCE_MODELS
    from ..config import AUDIT_DEFAULT_REPLAY_TRIALS as MAX_DEFAULT_REPLAY_TRIALS
    from ..config import AUDIT_MAX_REPLAY_TRIALS as MAX_REPLAY_TRIALS
    from ..config import AUDIT_MAX_TRIALS as MAX_TRIALS

    a("--reference-models", default="16",
      help=f"K reference models (lira, rmia), an integer in [2, {MAX_REFERENCE_MODELS}]; default 16")
    a("--canaries", default="1000", help="canaries per training (canary-whitebox, one-run), an integer in "
                                         f"[10, {MAX_CANARIES:,}]; default 1000")
    a("--trials", default=None, help=f"independent trials, an integer in [4, {MAX_TRIALS:,}] (canary: trainings, "
                                     "default 100; canary-whitebox: canaries in all, default 1000; seed-replay: "
                                     "trials of two trainings each, at most "
                                     f"{MAX_REPLAY_TRIALS:,}, default enough to refute the target ε, at most "
                                     f"{MAX_DEFAULT_REPLAY_TRIALS})")
    a("--confidence", default="0.95", help="confidence of the ε lower bound, in (0, 1), default 0.95; a bound above "
                                           "the claim raises the alarm only at confidence >= 0.9")
    a("--public-per-class", default="5", help="public samples per class, default 5")
    a("--imbalance-ratio", default="1", help="long-tail ratio of the private data (>= 1), default 1")
    a("--param", action="append", default=[], metavar="KEY=VALUE", help="other method config field; repeatable")
    a("--executor", default="sequential",
      help="how the audit's trainings run: sequential (in this process), or on the sweep engine's executors: "
           "local (process pool) or ray (each training a Ray task); default sequential")
    a("--workers", default=None, help="local processes (default: the CPUs available)")
    a("--ray-address", default=None, help="Ray address for --executor ray ('auto', 'host:port'; default: a local Ray)")
    a("--dataset-root", default=None, help="dataset folder")
    a("--cache-dir", default=None, help="feature cache folder")
    a("--store", default=None, help="run store folder (default $MIXDP_HOME or the user data folder)")
    a("--no-store", action="store_true", help="do not record the audit in the run store")
    a("--json", action="store_true", help="print exactly one JSON object on stdout")
    a("--no-progress", action="store_true", help="no progress bars on stderr")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run the ``audit`` sub-command (0 ok, 1 failed, 2 bad arguments)."""
    prog_name = "mixdp audit"
    try:
        if args.attack not in ATTACK_CHOICES:
            raise ConfigError("attack", f"must be one of {', '.join(ATTACK_CHOICES)}, got {args.attack!r}")
        if args.executor not in AUDIT_EXECUTORS:
            raise ConfigError("executor", f"must be one of {', '.join(AUDIT_EXECUTORS)}, got {args.executor!r}")
        from ..evaluation.audit import MAX_CANARIES, MAX_REFERENCE_MODELS, MAX_TRIALS, check_audit_size

        K = number("reference_models", args.reference_models, int, f"an integer in [2, {MAX_REFERENCE_MODELS}]")
        canaries = number("canaries", args.canaries, int, f"an integer in [10, {MAX_CANARIES:,}]")
        trials = number("trials", args.trials, int, f"an integer in [4, {MAX_TRIALS:,}]")
        check_audit_size(reference_models=K, canaries=canaries, trials=trials, attack=args.attack)
        if trials is not None and args.attack not in TRIAL_ATTACKS:
            raise ConfigError("trials", f"not used by --attack {args.attack}; it sets the trials of "
                                        f"{', '.join(TRIAL_ATTACKS)}")
        conf = number("confidence", args.confidence, float, "a number in (0, 1)")
        if not 0 < conf < 1:
            raise ConfigError("confidence", f"must lie in (0, 1), got {args.confidence!r}")
        from ..runs.sweep.executors import check_workers

        workers = number("workers", args.workers, int, "an integer >= 1")
        check_workers(workers, local=args.executor == "local")
        from ..runs.runner import RunConfig

        config = RunConfig(
            dataset=args.dataset, encoder=args.encoder, method=args.method,
            seed=number("seed", args.seed, int, f"an integer {SEED_RANGE.describe()}"),
            target_epsilon=number("epsilon", args.epsilon, float, RUN_EPSILON.requirement()),
            target_delta=number("delta", args.delta, float, RUN_DELTA.requirement()),
            public_per_class=number("public_per_class", args.public_per_class, int, "an integer >= 1"),
            imbalance_ratio=number("imbalance_ratio", args.imbalance_ratio, float, "a number >= 1"),
            method_params=pairs("param", args.param), dataset_root=args.dataset_root,
        )
        from ..evaluation.audit import whitebox_available

        if args.attack == "canary-whitebox" and not whitebox_available(config.method):
            raise ConfigError("attack", "canary-whitebox needs a NoisyGD-family method (fully_private, ngd, adamix, "
                                        f"ppgd) or a DP-SGD linear probe; use canary or one-run for {config.method!r}")
    except (ConfigError, UnknownNameError, TypeError) as e:
        return fail(prog_name, str(e), 2)

    from ..data.splits import make_split
    from ..evaluation.audit import run_audit
    from ..runs.runner import _load_features

    prog = Progress(not args.no_progress)

    def on_progress(done: int, total: int) -> None:
        if prog.enabled:
            b = prog.bar("audit trainings", total, unit="fit")
            b.update(done - b.n)

    with one_line_errors(prog_name, prog, interrupted="interrupted", failures=(MixDPError, ValueError)) as outcome:
        with contextlib.redirect_stdout(sys.stderr):
            feats, pub = _load_features(config, cache_dir=args.cache_dir, progress=prog.features)
            split = make_split(feats, config.split_spec(), public_features=pub)
            kw = config.method_kwargs()
            for k in ("target_epsilon", "target_delta", "seed"):
                kw.pop(k, None)
            executor = args.executor
            if executor != "sequential":  # the sweep engine's executors (one engine for sweeps and audits)
                from ..runs.sweep import map_trainings

                executor = functools.partial(map_trainings, backend=executor, workers=workers,
                                             address=args.ray_address)
            result = run_audit(split, config.method, attack=args.attack, epsilon=config.target_epsilon,
                               delta=config.target_delta, seed=config.seed, method_params=kw,
                               reference_models=K, canaries=canaries, trials=trials, confidence=conf,
                               executor=executor, progress=on_progress)
    if outcome.code is not None:
        return outcome.code
    out = result.summary()
    out.update(dataset=config.dataset, encoder=config.encoder, seed=config.seed,
               target_epsilon=config.target_epsilon, imbalance_ratio=config.imbalance_ratio)
    if not args.no_store:
        from ..runs.audits import AuditStore
        from ..runs.store import RunStore

        store = RunStore(args.store)
        out["audit_id"] = AuditStore(store).save(out, config=config.to_dict(), rocs=result.rocs)
        out["store"] = str(store.root)
    if args.json:
        print(json.dumps(out, allow_nan=False))
    else:
        print(out["note"])
        for k in ("attack", "method", "claimed_epsilon", "empirical_epsilon_lower", "confidence", "n_trials",
                  "alarm", "auc", "tpr_at_fpr_0.001", "tpr_at_fpr_0.01", "advantage", "wall_seconds"):
            v = out.get(k)
            print(f"{k:>24}: {v:.4g}" if isinstance(v, float) else f"{k:>24}: {v}")
        for reason in out.get("alarm_reasons") or ():
            print(f"ALARM: {reason}: privacy bug.")
    return 0
