"""``mixdp reproduce NAME``: regenerate one of the papers' figures (PNG + markdown table + JSON).

Examples::

    mixdp reproduce --list
    mixdp reproduce adamix_epsilon --out docs/results/reproduce
    mixdp reproduce dppl_imbalance --dataset digits --encoder efficientnet_lite0 --set epsilon=3 --workers 2
    mixdp reproduce fewshot --dataset image_folder --dataset-root /data/PACS/art_painting \
        --public-from image_folder:/data/PACS/photo --encoder efficientnet_lite0 \
        --out docs/results --stem fewshot_pacs --doc fewshot.md --section "PACS photo -> art"
    mixdp reproduce episodes --dataset cdfsl_eurosat --encoder efficientnet_lite0 --set public_per_class=0

Runs go through the sweep engine into the run store (identical runs are reused, so running a
figure again only redraws it). Defaults: the offline ``digits`` data with ``pixels``
features; ``--dataset``/``--encoder`` choose any other. ``--set KEY=VALUE`` overrides a figure
parameter (VALUE parsed as JSON, e.g. ``--set seeds=[0,1]``); ``--list`` shows each figure's
parameters. ``--stem`` names the files (so one figure can be committed for several datasets),
``--section TITLE --doc NAME.md`` writes the tables as one section of a shared markdown file
(``scripts/make_results.sh`` builds ``docs/results/`` that way). Progress (runs done / total)
goes to stderr, the written paths to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
from typing import Any

from ..config import RUN_EPSILON
from ..errors import ConfigError, UnknownNameError
from ._common import Progress, RESUMABLE, description, fail, number, number_list, one_line_errors, pairs

PROG = "mixdp reproduce"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``reproduce`` sub-command."""
    p = subparsers.add_parser("reproduce", help="regenerate a figure of the papers (PNG + table + JSON)",
                              description=description(__doc__))
    a = p.add_argument
    a("name", nargs="?", default=None, help="figure name (see --list)")
    a("--list", action="store_true", help="list the figures and their parameters")
    a("--out", default="reproduce_out", help="output folder (default ./reproduce_out)")
    a("--dataset", default="digits", help="dataset spec, default digits (offline)")
    a("--encoder", default="pixels", help="feature extractor, default pixels")
    a("--dataset-root", default=None, help="dataset folder")
    a("--dataset-arg", action="append", default=[], metavar="KEY=VALUE", help="dataset loader option; repeatable")
    a("--encoder-arg", action="append", default=[], metavar="KEY=VALUE", help="encoder option; repeatable")
    a("--public-from", default=None, metavar="SPEC",
      help="dataset spec of the public samples (domain shift, e.g. image_folder:/data/PACS/photo)")
    a("--stem", default=None, help="file name stem of the outputs (default: the figure name)")
    a("--section", default=None, metavar="TITLE",
      help="write the tables as section TITLE of --doc (hand-written text around it is kept)")
    a("--doc", default=None, metavar="NAME.md", help="markdown file in --out holding --section (default NAME.md "
                                                     "of the figure)")
    a("--seeds", default=None, help="comma-separated seeds (overrides the figure's)")
    a("--epsilons", default=None, help=f"comma-separated target ε (figures with an ε axis), each "
                                       f"{RUN_EPSILON.requirement()}")
    a("--set", action="append", default=[], metavar="KEY=VALUE", help="figure parameter (JSON value); repeatable")
    a("--backend", default="local", help="executor: local (default) or ray")
    a("--workers", default=None, help="local worker processes (default: the CPUs available)")
    a("--ray-address", default=None, help="Ray cluster address (auto, HOST:PORT)")
    a("--store", default=None, help="run store folder (default $MIXDP_HOME or the user data folder)")
    a("--cache-dir", default=None, help="feature cache folder")
    a("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run the ``reproduce`` sub-command (0 ok, 1 a run failed, 2 bad arguments)."""
    from ..runs.reproduce import FIGURES, reproduce
    from ..runs.store import RunStore
    from ..runs.sweep import EXECUTORS

    if args.list:
        for name, f in FIGURES.items():
            print(f"{name:18s} {f.title} [{f.paper}]")
            print(f"{'':18s} parameters: {json.dumps(dict(f.defaults))}"
                  + (f"; datasets: {', '.join(f.datasets)}" if f.datasets else ""))
        return 0
    try:
        if args.name is None:
            raise ConfigError("name", f"give a figure name; choose one of: {', '.join(FIGURES.keys())}")
        fig = FIGURES.get(args.name)
        if args.backend not in EXECUTORS:
            raise ConfigError("backend", f"must be one of {', '.join(EXECUTORS.keys())}, got {args.backend!r}")
        from ..runs.sweep.executors import check_workers

        workers = number("workers", args.workers, int, "an integer >= 1")
        check_workers(workers, local=args.backend == "local")
        params = pairs("set", args.set)
        if args.seeds is not None:
            params["seeds"] = number_list("seeds", args.seeds, int, "integers >= 0")
        if args.epsilons is not None:
            if "epsilons" not in fig.defaults:
                raise ConfigError("epsilons", f"figure {args.name!r} has no ε axis; use --set epsilon=VALUE")
            params["epsilons"] = number_list("epsilons", args.epsilons, float, f"numbers, each {RUN_EPSILON.requirement()}")
            bad = [e for e in params["epsilons"] if e not in RUN_EPSILON.range]
            if bad:  # refused here, by the runs' declaration, not by the first run that meets it
                raise ConfigError("epsilons", f"each must be {RUN_EPSILON.requirement()}, got {bad[0]:g}")
        store = RunStore(args.store)
    except (ConfigError, UnknownNameError) as e:
        return fail(PROG, str(e) if not isinstance(e, UnknownNameError) else f"name: {e}", 2)

    prog = Progress(not args.no_progress)
    state: dict[str, Any] = {}

    def on_start(total: int, reused: int) -> None:
        state["bar"] = prog.bar(f"{args.name}", total, unit="run")
        state["bar"].reset(total=total)

    def on_result(_r: Any) -> None:
        if state.get("bar") is not None:
            state["bar"].update(1)

    command = "mixdp reproduce " + " ".join(shlex.quote(a) for a in sys.argv[2:]) \
        if len(sys.argv) > 2 and sys.argv[1] == "reproduce" else None
    with one_line_errors(PROG, prog, interrupted=RESUMABLE) as outcome:
        with contextlib.redirect_stdout(sys.stderr):
            paths = reproduce(args.name, args.out, params=params, command=command, stem=args.stem,
                              section=args.section, doc=args.doc, public_from=args.public_from, dataset=args.dataset,
                              encoder=args.encoder, dataset_root=args.dataset_root,
                              dataset_kwargs=pairs("dataset_arg", args.dataset_arg),
                              encoder_kwargs=pairs("encoder_arg", args.encoder_arg), store=store,
                              backend=args.backend, workers=workers, address=args.ray_address,
                              cache_dir=args.cache_dir, on_start=on_start, on_result=on_result,
                              progress=prog.features)
    if outcome.code is not None:
        return outcome.code
    for path in dict.fromkeys(paths.values()):
        print(path)
    return 0
