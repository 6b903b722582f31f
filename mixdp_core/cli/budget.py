"""``mixdp budget``: what each private data set has spent over all its runs, and its cap.

Examples::

    mixdp budget                                   # every data set in the store
    mixdp budget --dataset digits --json           # one data set, one JSON object
    mixdp budget --dataset digits --cap 8 [--delta 1e-4]   # refuse runs beyond ε = 8 in total
    mixdp budget --dataset digits --clear-cap

Per data set: the counted private runs (ε, δ, whether their event is stored), the total ε by
basic composition (Σ ε_i at Σ δ_i: holds for adaptively chosen runs; the cap is checked
against it) and by tight composition of the stored events at δ_total (default Σ δ_i; assumes
the runs were fixed in advance), the non-private references flagged (paragon: owner's view,
ε = ∞; Only-Public: cost 0) and the cap. ``mixdp train``, ``mixdp sweep`` and the app refuse,
before anything runs, a run that would take its data set above the cap
(:mod:`mixdp_core.runs.ledger`). With ``--json``: one JSON object per data set on stdout. Bad
arguments: one line naming the flag, exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
from typing import Any

from ..config import DELTA, EPSILON, check_delta
from ..errors import ConfigError, UnknownNameError
from ._common import description, fail, number, pairs

PROG = "mixdp budget"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``budget`` sub-command."""
    p = subparsers.add_parser("budget", help="privacy spent per data set over all runs; set a cap",
                              description=description(__doc__))
    a = p.add_argument
    a("--dataset", default=None, help="dataset spec (e.g. digits, image_folder:/data/x) or a key listed by "
                                      "`mixdp budget`; default: every data set")
    a("--dataset-root", default=None, help="dataset folder, as given to `mixdp train`")
    a("--dataset-arg", action="append", default=[], metavar="KEY=VALUE",
      help="dataset loader option, as given to `mixdp train`; repeatable")
    a("--cap", default=None, metavar="EPS", help=f"set the data set's cap on ε (basic composition): "
                                                 f"{EPSILON.requirement()}")
    a("--delta", default=None, metavar="D", help=f"with --cap: also cap Σ δ: {DELTA.requirement()}")
    a("--clear-cap", action="store_true", help="remove the data set's cap")
    a("--delta-total", default=None, metavar="D",
      help="δ of the tight total (default: Σ δ_i of the data set's private runs)")
    a("--store", default=None, help="run store folder (default $MIXDP_HOME or the user data folder)")
    a("--json", action="store_true", help="one JSON object per data set on stdout")
    p.set_defaults(func=run)
    return p


def _fmt(v: Any, spec: str = ".4g") -> str:
    if v is None:
        return "—"
    if isinstance(v, float) and math.isinf(v):
        return "∞"
    return format(v, spec) if isinstance(v, (int, float)) else str(v)


def render(s: Any) -> list[str]:
    """The text lines of one :class:`~mixdp_core.runs.ledger.LedgerSummary`."""
    out = [f"{s.label}  [{s.dataset_key}]"]
    n = s.n_private
    out.append(f"  spent (basic):  ε = {_fmt(s.epsilon_basic)} at δ = {_fmt(s.delta_basic, '.3g')} "
               f"in {n} private run(s) — Σ ε_i, Σ δ_i: holds for adaptively chosen runs; the cap counts this")
    if n:
        why = ("δ_total ≥ 1: no guarantee left" if s.delta_total >= 1 else "no δ left for the events")
        acc = f" ({s.accountant})" if s.accountant else ""
        tight = (f"ε = {_fmt(s.epsilon_tight)} at δ = {_fmt(s.delta_total, '.3g')}{acc}"
                 if s.epsilon_tight is not None else f"— ({why})")
        out.append(f"  spent (tight):  {tight} — assumes the runs were fixed in advance"
                   + (f"; {s.n_basic_only} run(s) added by basic composition" if s.n_basic_only else ""))
    if s.split_note:
        out.append(f"  splits:         {s.split_note}")
    if s.running:
        out.append(f"  running:        {len(s.running)} run(s), target ε = {_fmt(s.epsilon_running)} in all "
                   f"(charged by the cap check)")
    if s.cap is not None:
        left = s.cap_left
        out.append(f"  cap:            {s.cap.describe()} (basic composition; "
                   + (f"{_fmt(left)} left)" if left >= 0 else f"exceeded by {_fmt(-left)}: further private runs "
                                                               f"are refused)"))
    else:
        out.append(f"  cap:            none (set one: mixdp budget --dataset {s.label.split(', ')[0]} --cap EPS)")
    if s.runs:
        out.append(f"  {'run_id':<26} {'method':<16} {'status':<10} {'ε':>9} {'δ':>9}  event  notes")
        for r in s.runs:
            out.append(f"  {r.run_id:<26} {r.method:<16} {r.status:<10} {_fmt(r.epsilon):>9} "
                       f"{_fmt(r.delta, '.3g'):>9}  {'yes' if r.event else 'no':<5}  {'; '.join(r.flags)}")
    for r in s.references:
        out.append(f"  {r.run_id:<26} {r.method:<16} {r.status:<10} {'∞' if r.kind == 'owner_view' else '0':>9} "
                   f"{'—':>9}  {'—':<5}  {'; '.join(r.flags)}")
    for r in s.running:
        out.append(f"  {r.run_id:<26} {r.method:<16} {r.status:<10} {_fmt(r.epsilon):>9} "
                   f"{_fmt(r.delta, '.3g'):>9}  {'—':<5}  target ε, still running")
    return out


def run(args: argparse.Namespace) -> int:
    """Run the ``budget`` sub-command (0 ok, 2 bad arguments)."""
    from ..runs import ledger as L
    from ..runs.store import RunStore

    try:
        cap = number("budget_cap", args.cap, float, EPSILON.requirement())
        cap_delta = number("budget_cap_delta", args.delta, float, DELTA.requirement())
        delta_total = number("delta_total", args.delta_total, float, DELTA.requirement())
        if delta_total is not None:  # checked before any cap is written
            check_delta(delta_total, field="delta_total")
        kw = pairs("dataset_arg", args.dataset_arg)
        if (cap is not None or args.clear_cap) and args.dataset is None:
            raise ConfigError("dataset", "required with --cap / --clear-cap (which data set?)")
        if cap is not None and args.clear_cap:
            raise ConfigError("clear_cap", "give either --cap EPS or --clear-cap, not both")
        if cap_delta is not None and cap is None:
            raise ConfigError("delta", "only with --cap (the cap's δ); --delta-total sets the δ of the tight total")
        from ..runs.paths import store_root

        root = store_root(args.store)
        with contextlib.ExitStack() as stack:
            if cap is None and not args.clear_cap and not (root / "runs.sqlite").exists():
                # a read-only question about a store that does not exist: answered from an empty
                # store in a temporary folder (same checks, same output), nothing created at root
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="mixdp-budget-",
                                                                      ignore_cleanup_errors=True))
                what = ("it is a file, not a store folder" if root.is_file()
                        else "a folder without a run store" if root.is_dir() else "it does not exist")
                store, shown = RunStore(tmp), f"{root} ({what})"
            else:
                store = RunStore(args.store)
                shown = str(store.root)
            key = L.find_dataset(store, args.dataset, args.dataset_root, kw) if args.dataset is not None else None
            if cap is not None:
                c = L.set_cap(store, key, cap, cap_delta, dataset=args.dataset)
                print(f"{PROG}: cap of {args.dataset} [{key}] set to {c.describe()}", file=sys.stderr)
            elif args.clear_cap:
                had = L.clear_cap(store, key)
                print(f"{PROG}: cap of {args.dataset} [{key}] " + ("removed" if had else "was not set"),
                      file=sys.stderr)
            if key is not None:
                summaries = [L.dataset_ledger(store, key, delta_total=delta_total)]
            else:
                summaries = L.dataset_ledgers(store, delta_total=delta_total)
    except (ConfigError, UnknownNameError) as e:
        return fail(PROG, str(e), 2)
    for s in summaries:
        if s.cap is not None and s.cap_left is not None and s.cap_left < 0 and cap is not None:
            print(f"{PROG}: note: {s.label} has already spent more than the new cap: every further private run on "
                  f"it is refused", file=sys.stderr)
    try:
        if args.json:
            for s in summaries:
                print(json.dumps(s.to_dict(), allow_nan=False, ensure_ascii=False))
            return 0
        if not summaries:
            print(f"no runs or caps in the store {shown}")
            return 0
        for i, s in enumerate(summaries):
            if i:
                print()
            print("\n".join(render(s)))
        sys.stdout.flush()
    except BrokenPipeError:  # `mixdp budget | head`: the reader has what it wanted
        try:
            sys.stdout = open(os.devnull, "w")  # no second error when the interpreter flushes at exit
        except OSError:
            pass
    return 0
