"""The Compare page's selection <-> URL query parameters (shareable, survives a reload).

``?dataset=digits&encoder=pixels&methods=adamix,ngd&epsilons=0.5,1,3&seeds=0,1&delta=1e-05&refs=1
&ppc=5&ir=1``, and where the data need them ``dkw`` (the dataset's loader options as compact
JSON, e.g. a synthetic regime's ``{"classes":20}``) and ``pf`` (the public data's source). Unknown
or invalid values are dropped (with a note for the page), never an error. An encoder weights
file is not in the link (a local file of the owner's machine).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

#: Query keys of the Compare page.
KEYS = ("dataset", "encoder", "methods", "epsilons", "seeds", "delta", "refs", "ppc", "ir", "dkw", "pf")


def _floats(text: str) -> list[float]:
    out = []
    for t in str(text).split(","):
        v = float(t)
        if not (math.isfinite(v) and v > 0):
            raise ValueError(t)
        out.append(v)
    return out


def from_query(q: Mapping[str, str], *, methods: Sequence[str], epsilons: Sequence[float],
               deltas: Sequence[float], max_seed: int = 9, max_ppc: int | None = None,
               max_ir: float | None = None) -> tuple[dict[str, Any], list[str]]:
    """Parse query parameters into a selection ``{key: value}`` (only keys present and
    valid) and the list of keys that were dropped as invalid. ``ppc`` and ``ir`` must lie in
    the Data page's ranges (``max_ppc``, ``max_ir``; default :data:`.forms.MAX_PUBLIC_PER_CLASS`
    and :data:`.forms.MAX_FORM_IMBALANCE_RATIO`)."""
    from .forms import MAX_FORM_IMBALANCE_RATIO, MAX_PUBLIC_PER_CLASS

    max_ppc = MAX_PUBLIC_PER_CLASS if max_ppc is None else int(max_ppc)
    max_ir = MAX_FORM_IMBALANCE_RATIO if max_ir is None else float(max_ir)
    sel: dict[str, Any] = {}
    bad: list[str] = []

    def parse(key: str, fn) -> None:
        if key in q and str(q[key]).strip():
            try:
                sel[key] = fn(str(q[key]))
            except (ValueError, TypeError, KeyError):  # ConfigError is a ValueError
                bad.append(key)

    def _methods(t: str) -> list[str]:
        ms = list(dict.fromkeys(m.strip() for m in t.split(",") if m.strip()))  # each once, in order
        if not ms or any(m not in methods for m in ms):
            raise ValueError(t)
        return ms

    def _eps(t: str) -> list[float]:
        vs = _floats(t)
        grid = {float(e) for e in epsilons}
        if any(v not in grid for v in vs):
            raise ValueError(t)
        return sorted(set(vs))

    def _seeds(t: str) -> list[int]:
        vs = [int(x) for x in t.split(",")]
        if not vs or any(v < 0 or v > max_seed for v in vs):
            raise ValueError(t)
        return sorted(set(vs))

    def _delta(t: str) -> float:
        v = float(t)
        match = [d for d in deltas if math.isclose(d, v, rel_tol=1e-9)]
        if not match:
            raise ValueError(t)
        return match[0]

    def _dataset(t: str) -> str:
        # a shared link may name a file: the same resolution as every other spec, confined to
        # the data root (a link to features:/etc/... is dropped, never read)
        from ..data.paths import resolve_dataset_spec
        from .jobs import app_data_folders

        from ..data.datasets import PATH_NAMED_DATASETS, parse_spec

        name, arg = parse_spec(t.strip())
        if name in PATH_NAMED_DATASETS and not arg:  # names no data: the launch failed with CLI wording
            raise ValueError(t)
        return resolve_dataset_spec(t.strip(), confine=True, also=app_data_folders())

    def _encoder(t: str) -> str:
        from ..encoders import ENCODERS

        if t.strip() not in ENCODERS.keys():
            raise ValueError(t)
        return t.strip()

    def _pos_int(t: str) -> int:
        v = int(t)
        if not 1 <= v <= max_ppc:
            raise ValueError(t)
        return v

    def _ir(t: str) -> float:
        v = float(t)
        if not (math.isfinite(v) and 1 <= v <= max_ir):
            raise ValueError(t)
        return v

    parse("dataset", _dataset)
    parse("encoder", _encoder)
    parse("methods", _methods)
    parse("epsilons", _eps)
    parse("seeds", _seeds)
    parse("delta", _delta)
    parse("refs", lambda t: {"1": True, "true": True, "0": False, "false": False}[t.strip().lower()])
    def _dkw(t: str) -> dict[str, Any]:
        import json

        from ..data.datasets import check_dataset_kwargs

        d = json.loads(t)
        if not isinstance(d, dict) or len(t) > 2000:
            raise ValueError(t)
        check_dataset_kwargs(str(sel.get("dataset") or q.get("dataset") or ""), d)  # the link's dataset takes them
        if "root" in d:  # a path: never from a link
            raise ValueError(t)
        return d

    def _pf(t: str) -> str:
        from ..data.datasets import PATH_NAMED_DATASETS, parse_spec
        from ..data.paths import resolve_dataset_spec
        from .jobs import app_data_folders

        name, arg = parse_spec(t.strip())
        if name in PATH_NAMED_DATASETS and not arg:  # a path kind without its path names no data
            raise ValueError(t)
        return resolve_dataset_spec(t.strip(), confine=True, also=app_data_folders(), field="public_from")

    parse("ppc", _pos_int)
    parse("ir", _ir)
    parse("dkw", _dkw)
    parse("pf", _pf)
    return sel, bad


def to_query(sel: Mapping[str, Any]) -> dict[str, str]:
    """The query parameters of a selection (inverse of :func:`from_query`)."""
    out: dict[str, str] = {}
    for k in KEYS:
        if k not in sel or sel[k] is None:
            continue
        v = sel[k]
        if k == "refs":
            out[k] = "1" if v else "0"
        elif k == "dkw":
            import json

            if v:  # no options: no key (the dataset's defaults)
                out[k] = json.dumps(v, sort_keys=True, separators=(",", ":"))
        elif isinstance(v, (list, tuple)):
            out[k] = ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v)
        elif isinstance(v, float):
            out[k] = f"{v:g}"
        else:
            out[k] = str(v)
    return out


def allowed(key: str, *, epsilons: Sequence[float], deltas: Sequence[float], max_seed: int = 9) -> str:
    """What a link parameter may be, for the page's warning about the ones it ignored (it
    named the keys only: 'Ignored invalid link parameter(s): dataset, epsilons')."""
    from .forms import MAX_FORM_IMBALANCE_RATIO, MAX_PUBLIC_PER_CLASS

    return {
        "dataset": "a registered dataset, or a path under the data root",
        "encoder": "a registered encoder",
        "methods": "comma-separated private methods",
        "epsilons": "comma-separated values of " + ", ".join(f"{e:g}" for e in epsilons),
        "seeds": f"comma-separated integers in [0, {max_seed}]",
        "delta": "one of " + ", ".join(f"{d:g}" for d in deltas),
        "refs": "1 or 0",
        "ppc": f"an integer in [1, {MAX_PUBLIC_PER_CLASS}]",
        "ir": f"a number in [1, {MAX_FORM_IMBALANCE_RATIO:g}]",
        "dkw": "the dataset's loader options as a JSON object (no paths)",
        "pf": "a registered dataset, or a path under the data root",
    }.get(key, "")
