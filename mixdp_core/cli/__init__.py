"""``mixdp`` command line: one parser, one progress helper, one module per command.

Each command lives in its own module of this package, which exposes
``add_parser(subparsers)``; that function adds the sub-command and sets ``func`` to the
function that runs it (``func(args) -> exit status``). :data:`COMMANDS` lists them in the
order ``mixdp --help`` shows. Heavy libraries are imported inside the ``func``\\ s, so
``mixdp --help`` and argument errors stay fast.

Bad arguments give a one-line error naming the field and the allowed values (exit status
2); progress goes to stderr (tqdm), results to stdout.
"""

from __future__ import annotations

import importlib
import sys
from typing import Sequence

from ..errors import MixDPError
from ..registry import Registry
from ._common import OneLineParser, Terminated

#: Sub-command name -> module (relative to this package) that defines it.
COMMANDS: Registry[str] = Registry("command")
for _name, _module in (
    ("datasets", "listing"), ("encoders", "listing"), ("methods", "listing"),
    ("encode", "encode"), ("train", "train"), ("audit", "audit"),
    ("sweep", "sweep"),
    ("reproduce", "reproduce"),
    ("budget", "budget"),
):
    COMMANDS.add(_name, _module)


def build_parser() -> OneLineParser:
    """The ``mixdp`` parser with every registered sub-command."""
    p = OneLineParser(prog="mixdp", description="MixDP Explorer: mixed public/private differentially private learning.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    done: set[str] = set()
    for module in COMMANDS.items():
        mod = module[1]
        if mod in done:
            continue
        done.add(mod)
        importlib.import_module(f"{__name__}.{mod}").add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mixdp`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    prog = f"mixdp {args.command}"
    with _terminate_as_interrupt():
        try:
            return int(args.func(args) or 0)
        except MixDPError as e:
            sys.stderr.write(f"{prog}: error: {e}\n")
            return 2
        except MemoryError as e:  # a size no check foresaw: one line, not a traceback
            sys.stderr.write(f"{prog}: error: out of memory ({str(e) or 'allocation failed'}); lower the data's size "
                             "(classes, rows, dim) or the grid\n")
            return 2
        except KeyboardInterrupt as e:
            sys.stderr.write(f"{prog}: interrupted\n")
            return 143 if isinstance(e, Terminated) else 130


def _terminate_as_interrupt():
    """Context: SIGTERM raises :class:`Terminated` in the main thread while the command runs
    (the previous handler is restored after; elsewhere, a no-op). A run between writing its row
    and the ``try`` that marks it failed takes the exception over and raises it there
    (:func:`mixdp_core.runs.runner.defer_termination`)."""
    import contextlib
    import os
    import signal
    import threading

    @contextlib.contextmanager
    def ctx():
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        me = os.getpid()

        def on_term(signum, frame):
            if os.getpid() != me:  # a forked worker inherited this handler: die as a worker should
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            exc = Terminated("SIGTERM (the process was asked to stop)")
            runner = sys.modules.get("mixdp_core.runs.runner")  # loaded if a run is under way
            if runner is not None and runner.defer_termination(exc):
                return  # a run between its row and its try raises it there (runner.execute)
            raise exc

        old = signal.signal(signal.SIGTERM, on_term)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, old)

    return ctx()
