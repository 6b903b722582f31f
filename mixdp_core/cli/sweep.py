"""``mixdp sweep``: run a grid of experiments (methods × ε × seeds × ...) into the run store.

Examples::

    mixdp sweep --dataset digits --encoder pixels --methods adamix,ngd,ppgd \\
        --epsilons 0.5,1,3,8 --seeds 0,1 --workers 2 --json
    mixdp sweep --config grid.toml --backend ray --ray-address auto
    mixdp sweep --resume sw-3f9a2c1b0d4e        # continue a killed sweep

Completed identical runs (same config hash) are reused, never recomputed, so running the
same command again resumes a killed sweep. A tqdm bar (runs done / total, ETA) goes to
stderr; with ``--json`` stdout gets one JSON object per run as it lands (``run_id``,
``method``, ``epsilon`` = target ε of the grid point (``null`` for non-private methods),
``epsilon_spent`` = ε from the accounting module for the run as executed, ``seed``,
``test_error``, ``reused``...). Bad arguments: one line naming the flag, exit status 2; so
does a grid whose private runs would take a data set above its cap (``mixdp budget``; field
``budget_cap``, checked for the whole grid before any run starts; reused runs cost nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

from ..config import IMBALANCE_RANGE, RUN_DELTA, RUN_EPSILON, SEED_RANGE
from ..errors import ConfigError, UnknownNameError
from ._common import Progress, RESUMABLE, description, fail, number, number_list, one_line_errors, pairs

PROG = "mixdp sweep"
#: Flags that define a grid: refused with ``--resume`` (argparse ``dest`` names).
GRID_FLAGS = ("config", "dataset", "encoder", "methods", "epsilons", "seeds", "public_per_class", "imbalance_ratio",
              "private_per_class", "delta", "param", "dataset_root", "dataset_arg", "encoder_arg", "public_from")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``sweep`` sub-command."""
    p = subparsers.add_parser("sweep", help="run a grid of experiments (local processes or Ray)",
                              description=description(__doc__))
    a = p.add_argument
    a("--config", default=None, metavar="FILE.toml", help="grid from a TOML file (flags given too override it)")
    a("--resume", default=None, metavar="SWEEP_ID", help="run a stored sweep again (only missing runs train)")
    a("--dataset", default=None, help="dataset spec, default digits")
    a("--encoder", default=None, help="feature extractor(s), comma-separated, default pixels")
    a("--methods", default=None, help="comma-separated methods (see `mixdp methods`), default adamix")
    a("--epsilons", default=None, help="comma-separated target ε of the private methods, each "
                                       f"{RUN_EPSILON.requirement()}; default 1")
    a("--seeds", default=None, help=f"comma-separated seeds, integers {SEED_RANGE.describe()}, default 0")
    a("--public-per-class", default=None, help="comma-separated public shots per class (integers >= 1), default 5")
    a("--imbalance-ratio", default=None,
      help=f"comma-separated imbalance ratios, numbers {IMBALANCE_RANGE.describe()}, default 1")
    a("--private-per-class", default=None, help="comma-separated caps of private samples per class (integers >= 1)")
    a("--delta", default=None, help=f"target δ: {RUN_DELTA.requirement()}, default 1e-5")
    a("--param", action="append", default=[], metavar="KEY=VALUE",
      help="method config field for every method that has it (VALUE parsed as JSON); repeatable")
    a("--dataset-root", default=None, help="dataset folder")
    a("--dataset-arg", action="append", default=[], metavar="KEY=VALUE", help="dataset loader option; repeatable")
    a("--encoder-arg", action="append", default=[], metavar="KEY=VALUE", help="encoder option; repeatable")
    a("--public-from", default=None, help="dataset spec providing the public samples (domain shift)")
    a("--backend", default="local", help="executor: local (process pool, default) or ray")
    a("--workers", default=None, help="local worker processes: an integer in [1, 4 per CPU this process may use] "
                                       "(default: the CPUs available; 1 = inline)")
    a("--ray-address", default=None, help="Ray cluster address: auto, HOST:PORT or ray://HOST:10001 "
                                          "(default: a local Ray for this sweep)")
    a("--ray-ship-code", action="store_true", help="send mixdp_core to the Ray workers (runtime_env py_modules)")
    a("--max-retries", default="2", help="re-runs of a run whose worker died: an integer in [0, 100], default 2")
    a("--no-reuse", action="store_true", help="train again even if identical runs are stored")
    a("--label", default=None, help="free-text tag stored with the new runs")
    a("--cache-dir", default=None, help="feature cache folder")
    a("--store", default=None, help="run store folder (default $MIXDP_HOME or the user data folder)")
    a("--dry-run", action="store_true", help="print the number of runs (and how many are stored) and exit")
    a("--json", action="store_true", help="one JSON object per run on stdout")
    a("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)
    return p


def _csv(text: str | None, flag: str = "methods") -> list[str] | None:
    """Comma-separated names; an empty item (``adamix,,ngd``) is an error naming ``flag``, not
    silently dropped."""
    if text is None:
        return None
    items = [t.strip() for t in text.split(",")]
    if any(not t for t in items) and any(items):
        raise ConfigError(flag, f"must be a comma-separated list of names without empty items, got {text!r}")
    return [t for t in items if t]


def build_spec(args: argparse.Namespace):
    """The :class:`~mixdp_core.runs.sweep.SweepSpec` of the flags (over ``--config``)."""
    from ..runs.sweep import SweepSpec

    d: dict[str, Any] = SweepSpec.from_toml(args.config).to_dict() if args.config else {}
    if args.dataset is not None:
        d["dataset"] = args.dataset
    for flag, key in (("encoder", "encoders"), ("methods", "methods")):
        vals = _csv(getattr(args, flag), flag)
        if vals is not None:
            if not vals:
                raise ConfigError(flag, "must be a comma-separated list of names")
            d[key] = vals
    for flag, key, kind, allowed in (
        ("epsilons", "epsilons", float, f"numbers, each {RUN_EPSILON.requirement()}"),
        ("seeds", "seeds", int, f"integers {SEED_RANGE.describe()}"),
        ("public_per_class", "public_per_class", int, "integers >= 1"),
        ("imbalance_ratio", "imbalance_ratios", float, f"numbers {IMBALANCE_RANGE.describe()}"),
        ("private_per_class", "private_per_class", int, "integers >= 1"),
    ):
        text = getattr(args, flag)
        if text is not None:
            d[key] = number_list(flag, text, kind, allowed)
    for v in d.get("epsilons", []):
        if v not in RUN_EPSILON.range:
            raise ConfigError("epsilons", f"must be numbers, each {RUN_EPSILON.requirement()}, got {v:g}")
    if args.delta is not None:
        d["delta"] = number("delta", args.delta, float, RUN_DELTA.requirement())
    if args.param:
        d["params"] = {**d.get("params", {}), **pairs("param", args.param)}
    if args.dataset_arg:
        d["dataset_kwargs"] = {**d.get("dataset_kwargs", {}), **pairs("dataset_arg", args.dataset_arg)}
    if args.encoder_arg:
        d["encoder_kwargs"] = {**d.get("encoder_kwargs", {}), **pairs("encoder_arg", args.encoder_arg)}
    if args.dataset_root is not None:
        d["dataset_root"] = args.dataset_root
    if args.public_from is not None:
        d["public_from"] = args.public_from
    spec = SweepSpec.from_dict(d)
    spec.check_params_used()
    return spec


def run(args: argparse.Namespace) -> int:
    """Run the ``sweep`` sub-command (0 all runs completed, 1 some failed, 2 bad arguments)."""
    from ..runs.store import RunStore
    from ..runs.sweep import EXECUTORS, resume_spec, run_sweep

    try:
        if args.backend not in EXECUTORS:
            raise ConfigError("backend", f"must be one of {', '.join(EXECUTORS.keys())}, got {args.backend!r}")
        from ..runs.sweep.executors import MAX_RETRIES, check_retries, check_workers

        workers = number("workers", args.workers, int, "an integer >= 1")
        # a local Ray head is this machine too: the same bound as the local pool (12 on 2 CPUs ran
        # 11 training processes at once; 100,000 was accepted)
        check_workers(workers, local=args.backend == "local" or args.ray_address is None)
        retries = number("max_retries", args.max_retries, int, f"an integer in [0, {MAX_RETRIES}]")
        check_retries(retries)
        if args.ray_address is not None and args.backend != "ray":
            raise ConfigError("ray_address", "only with --backend ray")
        if args.ray_address is not None and workers is not None:
            raise ConfigError("workers", "not with --ray-address (the cluster's own resources decide); "
                                         "only for a local pool or a local Ray head")
        if args.ray_ship_code and args.backend != "ray":
            raise ConfigError("ray_ship_code", "only with --backend ray")
        from ..runs.paths import store_root

        root = store_root(args.store)
        # a dry run reads; it does not create a store that is not there (it did)
        store = None if args.dry_run and not args.resume and not root.exists() else RunStore(root)
        if args.resume:
            # the stored sweep is the grid: a grid flag given too was silently ignored
            given = [f for f in GRID_FLAGS if getattr(args, f) not in (None, [])]
            if given:
                raise ConfigError(given[0], f"not with --resume (the stored sweep's grid is run again as it was)")
            spec, configs = resume_spec(store, args.resume)
        else:
            spec = build_spec(args)
            configs = spec.configs()
    except (ConfigError, UnknownNameError) as e:
        return fail(PROG, str(e), 2)
    if args.dry_run:
        stored = 0 if store is None else sum(store.find_completed(c.config_hash()) is not None for c in configs)
        # what the caps would say (a dry run said "fine" to a grid the run then refused): checked
        # on a scratch copy of the store's database, where the sweep file's cap may be applied
        refusal = _dry_run_cap_refusal(store, spec, configs, reuse=not args.no_reuse)
        print(json.dumps({"runs": len(configs), "stored": stored, "refused": refusal}) if args.json else
              f"{len(configs)} runs, {stored} already stored" + (f"; refused: {refusal}" if refusal else ""))
        return 2 if refusal else 0

    try:  # the data sets' caps (`mixdp budget`): the whole grid, before any run starts
        _apply_caps(store, spec, configs, reuse=not args.no_reuse,
                    say=lambda msg: print(f"{PROG}: {msg}", file=sys.stderr))
    except ConfigError as e:
        return fail(PROG, str(e), 2)
    prog = Progress(not args.no_progress)
    stdout = sys.stdout  # results; everything else printed meanwhile goes to stderr
    state: dict[str, Any] = {"bar": None, "failed": 0, "reused": 0}

    def on_start(total: int, reused: int) -> None:
        state["bar"] = prog.bar("sweep", total, unit="run")
        state["bar"].set_postfix({"reused": reused}, refresh=False)

    def on_result(r) -> None:
        state["reused"] += r.reused
        state["failed"] += r.status != "completed"
        bar = state["bar"]
        if bar is not None:
            bar.update(1)
            bar.set_postfix({"reused": state["reused"], "failed": state["failed"]}, refresh=False)
        if args.json and not state.get("closed"):
            try:
                stdout.write(json.dumps(r.summary(), allow_nan=False, default=str) + "\n")
                stdout.flush()
            except BrokenPipeError:  # e.g. `| head`: stop starting runs, keep the finished ones
                state["closed"] = True
        elif r.status != "completed":
            sys.stderr.write(f"{PROG}: run {r.config.method} ε={r.config.target_epsilon:g} seed {r.config.seed} "
                             f"{r.status}: {r.error}\n")

    with one_line_errors(PROG, prog, interrupted=RESUMABLE) as outcome:
        with contextlib.redirect_stdout(sys.stderr):  # stdout is reserved for results
            out = run_sweep(configs, store=store, backend=args.backend, workers=workers, address=args.ray_address,
                            max_retries=retries, ship_code=args.ray_ship_code, spec=spec, sweep_id=args.resume,
                            label=args.label, reuse=not args.no_reuse, cache_dir=args.cache_dir,
                            on_result=on_result, on_start=on_start, progress=prog.features,
                            should_stop=lambda: bool(state.get("closed")))
    if outcome.code is not None:
        return outcome.code
    if state.get("closed"):
        return 0
    msg = (f"sweep {out.sweep_id}: {len(out.results)} runs, {out.n_reused} reused, {out.n_failed} not completed, "
           f"{out.wall_seconds:.1f} s (store {store.root})")
    print(msg, file=sys.stderr if args.json else sys.stdout)
    return 0 if out.n_failed == 0 else 1


def _apply_caps(store: Any, spec: Any, configs: Any, *, reuse: bool, say: Any = None) -> None:
    """The caps' steps before a grid runs: the sweep file's ``budget_cap`` applied to ``store``
    (sets or lowers, never raises; its message to ``say``, before the check), then
    :func:`~mixdp_core.runs.ledger.check_caps` over the whole grid (``BudgetError`` refuses it)."""
    from ..runs.ledger import apply_config_cap, check_caps, dataset_key

    if getattr(spec, "budget_cap", None) is not None:
        msg = apply_config_cap(store, dataset_key(spec.dataset, spec.dataset_root, spec.dataset_kwargs),
                               spec.budget_cap, spec.budget_cap_delta, dataset=spec.dataset)
        if say is not None:
            say(msg)
    check_caps(store, configs, reuse=reuse)


def _dry_run_cap_refusal(store: Any, spec: Any, configs: Any, *, reuse: bool) -> str | None:
    """The budget caps' refusal of this grid, or ``None``: the run's own steps (:func:`_apply_caps`)
    on a scratch copy of the store's database, so a dry run writes nothing."""
    import sqlite3
    import tempfile

    from ..runs.store import RunStore

    with tempfile.TemporaryDirectory(prefix="mixdp-dry-") as tmp:
        if store is not None and store.db_path.exists():
            # sqlite's backup (the write-ahead log included; a file copy could miss it)
            with contextlib.closing(sqlite3.connect(store.db_path)) as src, \
                    contextlib.closing(sqlite3.connect(f"{tmp}/runs.sqlite")) as dst:
                src.backup(dst)
        try:
            _apply_caps(RunStore(tmp), spec, configs, reuse=reuse)
        except ConfigError as e:
            return str(e)
    return None

