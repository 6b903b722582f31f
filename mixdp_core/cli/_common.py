"""What every ``mixdp`` sub-command shares: the one-line parser, argument parsing, progress.

* :class:`OneLineParser`: argparse whose errors are one line, ``mixdp <cmd>: error: <field>:
  <what is allowed>``, exit status 2 (no usage block).
* :func:`number`, :func:`pairs`: parse text arguments into numbers / ``KEY=VALUE`` dicts,
  raising :class:`~mixdp_core.errors.ConfigError` that names the field.
* :class:`Progress`: the tqdm bars (on stderr; stdout is reserved for results) used by
  ``encode``, ``train`` and every command that trains or extracts.
* :func:`fail`: print the one-line error and return the exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

from ..errors import ConfigError, MixDPError, UnknownNameError


class OneLineParser(argparse.ArgumentParser):
    """Argument parser whose errors are one line (no usage block), exit status 2."""

    def error(self, message: str):  # noqa: D102
        self.exit(2, f"{self.prog}: error: {message}\n")


def fail(prog: str, message: str, code: int) -> int:
    """Print ``<prog>: error: <message>`` on stderr and return ``code``."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code


#: Ctrl-C message of the commands whose finished runs are stored and reused on a rerun.
RESUMABLE = "interrupted; finished runs are stored, run the same command to resume"


class Outcome:
    """Exit status set by :func:`one_line_errors` (``None`` while nothing went wrong)."""

    code: int | None = None


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``timeout``) delivered as an interrupt, so that every ``finally`` and
    ``except BaseException`` runs: a run being trained is marked failed at once instead of
    staying ``running`` until the next store opens. Exit status 143 (128 + SIGTERM)."""


@contextlib.contextmanager
def one_line_errors(prog: str, progress: "Progress", *, interrupted: str = "interrupted",
                    failures: tuple[type[BaseException], ...] = (MixDPError,)):
    """Turn what a command's work raises into its one-line error and exit status.

    Ctrl-C → 130 (with ``interrupted``), a bad argument found late (``ConfigError``, unknown
    name) → 2, a failed run (``failures``) → 1; the progress bars are closed either way.
    Usage: ``with one_line_errors(PROG, prog) as outcome: ...`` then
    ``if outcome.code is not None: return outcome.code``.
    """
    outcome = Outcome()
    try:
        yield outcome
    except KeyboardInterrupt as e:
        outcome.code = fail(prog, interrupted, 143 if isinstance(e, Terminated) else 130)
    except (ConfigError, UnknownNameError) as e:
        outcome.code = fail(prog, str(e), 2)
    except failures as e:
        outcome.code = fail(prog, str(e), 1)
    finally:
        progress.close()


def number(field: str, text: Any, kind: type, allowed: str) -> Any:
    """``text`` as an ``int`` or ``float`` (``None`` stays ``None``).

    Raises:
        ConfigError: ``text`` is not a number of that kind (NaN is refused), naming ``field``
            and ``allowed``.
    """
    from ..config import parse_number

    return parse_number(field, text, kind, allowed)


def number_list(field: str, text: Any, kind: type, allowed: str) -> list[Any]:
    """A comma-separated list of numbers (e.g. ``--epsilons 0.5,1,3``); see :func:`number`."""
    items = [t.strip() for t in str(text).split(",")]
    if not any(items) or not all(items):  # '1,,2' is a typo, not a two-point grid
        raise ConfigError(field, f"must be a comma-separated list of {allowed} without empty items, got {text!r}")
    return [number(field, t, kind, allowed) for t in items]


def pairs(field: str, items: list[str]) -> dict[str, Any]:
    """``["k=v", ...]`` as a dict; each value parsed as JSON, else kept as a string."""
    out: dict[str, Any] = {}
    for it in items:
        key, sep, val = it.partition("=")
        if not sep or not key.strip():
            raise ConfigError(field, f"must look like KEY=VALUE, got {it!r}")
        try:
            out[key.strip()] = json.loads(val)
        except ValueError:
            out[key.strip()] = val
    return out


class Progress:
    """tqdm bars on stderr, one per named task (feature extraction, training steps, runs).

    Args:
        enabled: ``False`` draws nothing (``--no-progress``, or ``--json`` pipelines).
    """

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.bars: dict[str, Any] = {}

    def bar(self, name: str, total: int, unit: str = "it"):
        """The bar called ``name`` (created on first use; its total follows ``total``)."""
        from tqdm.std import tqdm  # not tqdm.auto: same bar in a terminal, without its asyncio import (~25 ms CPU)

        b = self.bars.get(name)
        if b is None:
            b = self.bars[name] = tqdm(total=total, desc=name, unit=unit, file=sys.stderr, leave=False,
                                       dynamic_ncols=True, disable=not self.enabled)
        if total and b.total != total:
            b.total = total
        return b

    def features(self, split: str, done: int, total: int) -> None:
        """Feature-extraction callback ``(split, done, total)``."""
        if self.enabled:
            b = self.bar(f"encode {split}", total, unit="img")
            b.update(done - b.n)

    def step(self, rec: Any) -> None:
        """Training callback: a :class:`~mixdp_core.methods.base.StepRecord`."""
        if self.enabled:
            b = self.bar("train", rec.total_steps, unit="step")
            b.update(rec.step - b.n)
            post = {}
            if rec.epsilon_spent is not None:
                post["eps"] = f"{rec.epsilon_spent:.3g}"
            if rec.test_error is not None:
                post["err"] = f"{rec.test_error:.3f}"
            if post:
                b.set_postfix(post, refresh=False)

    def close(self) -> None:
        for b in self.bars.values():
            b.close()
        self.bars.clear()


def description(doc: str | None) -> str:
    """A sub-command's ``--help`` description: the first paragraph of its module docstring,
    without reST's double backquotes (``--help`` printed them raw)."""
    return (doc or "").split("\n\n")[0].replace("``", "")
