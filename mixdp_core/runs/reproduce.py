"""The figure driver of ``mixdp reproduce NAME``: runs a registered figure and writes its files.

Contract (the registry, :class:`Context` and the helpers live in
:mod:`mixdp_core.runs.figures.base` and are re-exported here):

* :func:`figure` registers a ``build(ctx: Context) -> FigureOutput`` function in
  :data:`FIGURES` under a name, with its title, the paper it reproduces, its default
  parameters (overridable, e.g. ``--set seeds=[0]``), optional dataset restriction and chart
  size. The papers' figures live in :mod:`mixdp_core.runs.figures` (one module per family)
  and register themselves when this module is imported (the import at the bottom).
* :class:`Context` gives a figure its data choice, parameters and sweep engine
  (:meth:`Context.spec`, :meth:`Context.sweep`: grids of ``RunConfig`` s through the run store;
  figures whose trainings are not ``RunConfig`` s use :func:`~.sweep.map_trainings`).
* The ``_``-prefixed helpers (``_ms``, ``_cell``, ``_agg``, ``_log_axis``, ``_lines``,
  ``_table``, ``_setup_line``) are the figure modules' shared table/plot vocabulary: means ±
  std over seeds, markdown cells and tables, log-ε axes with a tick at every point.
* :func:`reproduce` runs one figure and writes three files into the output folder:

  - ``<stem>.png`` — the chart (error in %, log-ε axes, legends, error bars = std over seeds),
    plus ``<stem>_<suffix>.png`` for a figure's further charts;
  - ``<stem>.md`` — the table(s) (mean ± std over seeds), setup and code identity, or with
    ``section=`` / ``doc=`` one section of a shared markdown file (:func:`write_section`;
    ``scripts/make_results.sh`` builds every committed table that way);
  - ``<stem>.json`` — every run (run id, config, metrics used) and the aggregated rows.

Every ε shown as "ε spent" is the ε reported by the accounting module for the run as
executed (``metrics["epsilon"]``); the grid's ε are labelled as targets. Runs land in the run
store (reused when identical), so re-running a figure only redraws it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping

from ..errors import ConfigError
from .owner_view import OWNER_NOTE, is_owner_only


# the framework (registry, context, helpers) lives with the figures; re-exported here, where
# callers have always found it
from .figures.base import (  # noqa: E402,F401
    FIGURES, Context, Figure, FigureOutput, figure, _KEEP, _agg, _cell, _lines, _log_axis, _ms, _setup_line, _table,
)


def _write_text(path: Path, text: str) -> None:
    from .._io import atomic_write

    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def write_section(path: Path, section: str, block: str, title: str) -> None:
    """Replace the block between ``<!-- BEGIN AUTO section -->`` and ``<!-- END AUTO section -->``
    of the markdown file ``path`` by ``block`` (appended when absent; the file is created with
    ``# title`` when missing). Everything outside the markers (hand-written reading of the
    results) is kept."""
    import re

    begin, end = f"<!-- BEGIN AUTO {section} -->", f"<!-- END AUTO {section} -->"
    block = f"{begin}\n{block.strip()}\n{end}"
    text = path.read_text() if path.exists() else f"# {title}\n"
    pat = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    text = pat.sub(lambda _: block, text) if pat.search(text) else text.rstrip("\n") + "\n\n" + block + "\n"
    _write_text(path, text)


def writable_dir(path: str | Path, *, field: str = "out") -> Path:
    """Create ``path`` if needed and check that files can be written in it.

    Raises:
        ConfigError: naming ``field``: ``path`` is a file, lies under a device such as
            ``/dev/null``, or cannot be written (permissions, read-only file system).
    """
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise ConfigError(field, f"{str(p)!r} is a file, not a folder; give the folder the figures go to")
    try:
        p.mkdir(parents=True, exist_ok=True)
        import tempfile

        with tempfile.NamedTemporaryFile(dir=p, prefix=".write-check-"):
            pass
    except OSError as e:
        raise ConfigError(field, f"cannot write figures to {str(p)!r}: {e.strerror or e}") from None
    return p


def _is_number(v: Any) -> bool:
    import math

    try:  # an int of 400 digits overflowed float() in isfinite: a traceback, not a line
        return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
    except OverflowError:
        return False


def _param_ranges() -> dict[str, tuple[type, Any]]:
    """The figures' axis parameters that are run fields, with the runs' own declarations
    (``--set ratios=[1e308]`` ran and wrote "IR = 1e+308" tables; ``seeds=[0.5]`` ran seed 0)."""
    from ..config import IMBALANCE_RANGE, RUN_DELTA, RUN_EPSILON, SEED_RANGE, SGD_LR_RANGE, Interval

    pos = Interval(1, None)
    return {"seeds": (int, SEED_RANGE), "seed": (int, SEED_RANGE), "epsilons": (float, RUN_EPSILON.range),
            "epsilon": (float, RUN_EPSILON.range), "detail_epsilon": (float, RUN_EPSILON.range),
            "delta": (float, RUN_DELTA.range), "ratios": (float, IMBALANCE_RANGE),
            # 0: the episodes figure's CD-FSL sections (no labelled public rows); a figure whose
            # runs need one is refused by the runs' own declaration before any run
            "imbalance_ratio": (float, IMBALANCE_RANGE), "public_per_class": (int, Interval(0, None)),
            "private_per_class": (int, pos), "public": (int, pos), "private": (int, pos), "shots": (int, pos),
            # one episode has no spread: its interval is undefined
            "episodes": (int, Interval(2, None)), "lr_body": (float, SGD_LR_RANGE)}


def check_param(key: str, value: Any, default: Any) -> None:
    """Refuse a figure parameter whose type is not its default's (one line naming it), before
    anything runs: a number (finite) where the default is one, ``true``/``false`` for a switch,
    a list of finite numbers where the default lists numbers, a list (of names or tables) where
    it lists names, a table for a table, a name or a list of names for a name. ``None``
    defaults take anything (the figure checks them). Ranges are the figure's and the runs' own
    checks (a bad value stops the figure, exit 2; only a budget no run can meet is skipped)."""
    want = None
    if default is None:
        return
    if isinstance(default, bool):
        ok, want = isinstance(value, bool), "true or false"
    elif isinstance(default, int):  # a count: 2.5 epochs ran 2 while the figure recorded 2.5
        ok, want = _is_number(value) and float(value).is_integer(), "an integer"
    elif isinstance(default, float):
        ok, want = _is_number(value), "a finite number"
    elif isinstance(default, list):
        if default and all(_is_number(d) for d in default):
            ok, want = isinstance(value, list) and bool(value) and all(_is_number(v) for v in value), \
                "a non-empty JSON list of finite numbers, e.g. [1, 3]"
        else:
            ok, want = isinstance(value, list) and bool(value) and all(isinstance(v, (str, dict)) for v in value), \
                'a non-empty JSON list of names, e.g. ["adamix", "ngd"]'
    elif isinstance(default, dict):
        ok, want = isinstance(value, dict), "a JSON table, e.g. {\"noise_multiplier\": 20}"
    elif isinstance(default, str):
        ok = isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
        want = "a name or a JSON list of names"
    else:
        return
    if not ok:
        raise ConfigError(key, f"must be {want}, got {value!r}"[:300])
    from .sweep.spec import MAX_AXIS_VALUES

    if isinstance(value, list) and len(value) > MAX_AXIS_VALUES:
        raise ConfigError(key, f"at most {MAX_AXIS_VALUES} values, got {len(value):,}")
    if isinstance(value, list):  # seeds [0, 0] ran one seed while the report said two (and its t)
        seen: list[Any] = []
        for v in value:
            if not isinstance(v, dict) and any(v == w for w in seen):
                raise ConfigError(key, f"lists {v!r} twice; each value once"[:300])
            seen.append(v)
    declared = _param_ranges().get(key)
    if declared is not None:
        kind, rng = declared
        for v in (value if isinstance(value, list) else [value]):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not float(v).is_integer()) \
                    or v not in rng:
                what = (("integers" if kind is int else "numbers") if isinstance(value, list)
                        else ("an integer" if kind is int else "a number"))
                raise ConfigError(key, f"must be {what} {rng.describe()}, got {v!r}"[:300])


def reproduce(name: str, out_dir: str | Path, *, params: Mapping[str, Any] | None = None,
              command: str | None = None, stem: str | None = None, section: str | None = None,
              doc: str | None = None, **ctx_kw: Any) -> dict[str, Path]:
    """Run figure ``name`` and write ``<out_dir>/<stem>.{png,md,json}`` (plus ``<stem>_<suffix>.png``
    for a figure's further charts, e.g. ``_pdp``); returns the paths.

    Args:
        params: overrides of the figure's defaults (unknown keys are an error naming them).
        command: the command line to record in the markdown.
        stem: file name stem of the outputs (default: the figure's name), so that one figure
            can be committed for several datasets side by side.
        section: write the markdown as the section ``section`` (``### section``, between
            ``<!-- BEGIN/END AUTO section -->`` markers) of ``<out_dir>/<doc>`` instead of a
            file of its own; the rest of that file (hand-written text, other sections) is kept.
        doc: the markdown file of ``section`` (default ``<name>.md``).
        **ctx_kw: :class:`Context` fields (dataset, encoder, public_from, store, backend, workers...).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .runner import versions

    fig_def = FIGURES.get(name)
    extra = sorted(set(params or {}) - set(fig_def.defaults) - {"delta"})
    if extra:
        raise ConfigError(extra[0], f"not a parameter of figure {name!r}; allowed: {', '.join(fig_def.defaults)}")
    for k, v in dict(params or {}).items():  # types before anything runs (a malformed --set was a traceback)
        check_param(k, v, fig_def.defaults.get(k, 1e-5 if k == "delta" else None))
    stem = stem or name
    if not stem.replace("_", "").replace("-", "").replace(".", "").isalnum() or stem.startswith("."):
        raise ConfigError("stem", f"must be a file name of letters, digits, '_', '-', '.', got {stem!r}")
    if doc is not None and (section is None or Path(doc).name != doc or not doc.endswith(".md")):
        raise ConfigError("doc", f"must be a markdown file name (NAME.md) given with --section, got {doc!r}")
    ctx = Context(**ctx_kw)
    if fig_def.own_data:  # its data are its own: an option it would ignore is refused, naming it
        unset = Context()
        for opt in ("dataset", "encoder", "dataset_root", "dataset_kwargs", "encoder_kwargs", "public_from"):
            if getattr(ctx, opt) != getattr(unset, opt):
                raise ConfigError(opt, f"figure {name!r} draws its own data (see its regimes); it takes no {opt}, "
                                       f"got {getattr(ctx, opt)!r}")
    if fig_def.datasets is not None and ctx.dataset.partition(":")[0] not in fig_def.datasets:
        raise ConfigError("dataset", f"figure {name!r} supports {', '.join(fig_def.datasets)} only, got {ctx.dataset!r}")
    ctx.params = {**fig_def.defaults, **dict(params or {})}
    if ctx.store is None:
        from .store import RunStore

        ctx.store = RunStore()
    created = not Path(out_dir).expanduser().exists()
    out_dir = writable_dir(out_dir, field="out")  # before any training: a bad --out loses no work
    t0 = time.perf_counter()
    try:
        out = fig_def.build(ctx)
    except BaseException:
        # a figure that refuses its input (or fails) leaves no empty output folder behind
        if created and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()
        raise
    paths = {"png": out_dir / f"{stem}.png", "md": out_dir / (doc or f"{name}.md" if section else f"{stem}.md"),
             "json": out_dir / f"{stem}.json"}
    charts = [("png", out.draw, fig_def.size)]
    for suffix, (_, draw) in out.extra.items():
        paths[suffix] = out_dir / f"{stem}_{suffix}.png"
        charts.append((suffix, draw, (7, 4.5)))
    for key, draw, size in charts:
        fig = plt.figure(figsize=size)
        draw(fig)
        fig.tight_layout()
        fig.savefig(paths[key], dpi=130)
        plt.close(fig)
    v = versions()
    code = f"git commit `{v.get('git_commit')}`, mixdp_core sources sha256 `{v.get('mixdp_core_source_sha256')}`"
    body = [f"Reproduces: {fig_def.paper}.", "", f"Setup: {out.setup}. Parameters: `{json.dumps(ctx.params)}`.", "",
            f"Generated by `{command or f'mixdp reproduce {name}'}` ({code}).", "", out.markdown, ""]
    owner_keys = _owner_keys(ctx.runs, out.rows)
    if owner_keys or "private" in out.setup:
        # the figures show what the papers show, but some of it is computed on the private rows
        # in the clear: the output says so where it shows them (owner_view.OWNER_NOTE)
        body += [f"**Owner's view.** {OWNER_NOTE} Here: the private sample counts"
                 + (f" and {', '.join(f'`{k}`' for k in owner_keys)}" if owner_keys else "") + ".", ""]
    if ctx.skipped:
        body += ["Not run (no run can meet the budget; shown as –):", ""] + [f"- {m}" for m in ctx.skipped] + [""]
    body += [f"![{fig_def.title}]({paths['png'].name})", ""]
    for suffix, (caption, _) in out.extra.items():
        body += [f"{caption}:", "", f"![{caption}]({paths[suffix].name})", ""]
    if section:
        write_section(paths["md"], section, "\n".join([f"### {section}", ""] + body), fig_def.title)
    else:
        _write_text(paths["md"], "\n".join([f"# {fig_def.title}", ""] + body))
    _write_text(paths["json"], json.dumps(
        {"figure": name, "title": fig_def.title, "paper": fig_def.paper, "dataset": ctx.dataset,
         "encoder": ctx.encoder, "dataset_kwargs": ctx.dataset_kwargs, "encoder_kwargs": ctx.encoder_kwargs,
         "public_from": ctx.public_from, **(out.data or {}), "section": section, "params": ctx.params,
         "code": {k: v.get(k) for k in ("git_commit", "mixdp_core_source_sha256")},
         "seconds": time.perf_counter() - t0, "owner_note": OWNER_NOTE,
         "owner_only_keys": sorted(set(owner_keys) | {"n_private"}),
         "rows": out.rows, "runs": ctx.runs, "skipped": ctx.skipped},
        indent=1, default=str, allow_nan=False))
    return paths


def _owner_keys(runs: Any, rows: Any) -> list[str]:
    """Owner-only metric names (:func:`~mixdp_core.runs.owner_view.is_owner_only`) that a
    figure's runs or rows carry, sorted (``n_private`` aside: every setup line states it)."""
    found: set[str] = set()

    def scan(d: Any) -> None:
        if isinstance(d, Mapping):
            for k, v in d.items():
                if isinstance(k, str) and is_owner_only(k) and k != "n_private":
                    found.add(k)
                scan(v)
        elif isinstance(d, (list, tuple)):
            for v in d:
                scan(v)

    scan(runs)
    scan(rows)
    return sorted(found)


# The papers' figures register themselves in FIGURES on import (one module per family).
from . import figures as _figures  # noqa: E402


def __getattr__(name: str) -> Any:
    """Names that moved to :mod:`mixdp_core.runs.figures` (``ADAMIX_FAMILY``, ``_display``,
    ``_proto_holdout``, ...) stay importable from here, so older importers keep working."""
    for mod in (_figures.adamix, _figures.regimes, _figures.prototypes, _figures.sparse):
        if name in vars(mod):
            return vars(mod)[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
