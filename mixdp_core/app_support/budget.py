"""The data set's privacy ledger in one sentence, for the Train and Runs pages.

The numbers come from :mod:`mixdp_core.runs.ledger` (the rules are there: which runs count,
basic vs tight composition, the cap); this module only words them, so that the pages hold no
accounting code. Every function returns text and never raises on a bad store entry: the
sentence then says what is wrong (a page must still draw).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Optional, Sequence

from ..errors import MixDPError
from ..runs import ledger as L


def _g(x: Optional[float]) -> str:
    return "—" if x is None else f"{x:.3g}"


def budget_sentence(s: L.LedgerSummary, *, name: Optional[str] = None) -> str:
    """One line: "This data set has spent ε = … (basic composition; … tight) in N private runs · cap …".

    ``name``: say "Data set <name>" instead of "This data set" (the Runs page lists several).
    """
    who = f"Data set `{name}`" if name else "This data set"
    n = s.n_private
    if n == 0:
        text = f"{who} has spent ε = 0 (no private run yet)"
    else:
        tight = (f"; {_g(s.epsilon_tight)} tight at δ = {s.delta_total:.2g}" if s.epsilon_tight is not None
                 else "")
        text = (f"{who} has spent ε = {_g(s.epsilon_basic)} (basic composition, δ = {s.delta_basic:.2g}{tight}) "
                f"in {n} private run{'s' if n != 1 else ''}")
        if s.n_basic_only:
            text += f" ({s.n_basic_only} without a stored event: basic only)"
    if s.running:
        text += f" + {len(s.running)} running (target ε = {_g(s.epsilon_running)})"
    if s.n_splits > 1:  # the totals bound the rows private in every split only
        text += (f" · {s.n_splits} different splits: rows public in one are private in another, so the total "
                 "covers only rows private in every split")
    owner = sum(r.kind == L.KIND_OWNER_VIEW for r in s.references)
    if owner:
        text += f" · {owner} non-private reference run{'s' if owner != 1 else ''} (owner's view, not private)"
    if s.cap is None:
        text += " · no cap"
    else:
        left = s.cap_left
        text += f" · cap {s.cap.describe()} (" + (f"{_g(left)} left)" if left >= 0 else "exceeded: private runs "
                                                                                        "are refused)")
    return text


def dataset_budget_line(store: Any, dataset: str, dataset_kwargs: Optional[Mapping[str, Any]] = None,
                        dataset_root: Optional[str] = None) -> str:
    """The sentence for the data set a form is about to train on (the Train page)."""
    try:
        key = L.dataset_key(dataset, dataset_root, dataset_kwargs)
        return budget_sentence(L.dataset_ledger(store, key))
    except MixDPError as e:  # e.g. a cap edited by hand: say so, keep the page
        return f"Privacy spent on this data set: unavailable ({e})"


def set_dataset_cap(store: Any, dataset: str, dataset_kwargs: Optional[Mapping[str, Any]] = None,
                    epsilon: Optional[float] = None, *, dataset_root: Optional[str] = None) -> tuple[bool, str]:
    """Set (``epsilon``) or remove (``None``) the cap of the data set a form trains on, the
    same cap ``mixdp budget --cap`` sets; returns ``(ok, one line for the page)``. A bad ε
    gives ``(False, "budget_cap: must be …")`` and changes nothing."""
    try:
        key = L.dataset_key(dataset, dataset_root, dataset_kwargs)
        if epsilon is None:
            had = L.clear_cap(store, key)
            return True, "Cap removed." if had else "This data set had no cap."
        cap = L.set_cap(store, key, epsilon, dataset=dataset)
        spent = L.dataset_ledger(store, key)
        note = (" It is below what the data set has already spent: every further private run is refused."
                if spent.cap_left is not None and spent.cap_left < 0 else "")
        return True, f"Cap set: {cap.describe()} in total on this data set.{note}"
    except MixDPError as e:
        return False, str(e)


def runs_budget_lines(store: Any, records: Iterable[Any], *, limit: int = 5) -> list[str]:
    """One sentence per data set among ``records`` (the Runs page's filtered runs), most
    spent first, at most ``limit`` (then one line saying how many more)."""
    try:
        keys = []
        for r in records:
            try:
                k = L.config_dataset_key(r.config, r.metrics, cwd=L._record_cwd(r))
            except MixDPError:
                continue
            if k not in keys:
                keys.append(k)
        if not keys:
            return []
        by_key = {s.dataset_key: s for s in L.dataset_ledgers(store)}
        shown = sorted((by_key[k] for k in keys if k in by_key), key=lambda s: -s.epsilon_basic)
    except MixDPError as e:
        return [f"Privacy spent per data set: unavailable ({e})"]
    lines = [budget_sentence(s, name=s.label) for s in shown[:limit]]
    if len(shown) > limit:
        lines.append(f"… and {len(shown) - limit} more data sets (`mixdp budget` lists them all)")
    return lines


def grid_cost_line(store: Any, configs: Sequence[Any]) -> Optional[str]:
    """What launching a grid of runs would add to its data set's spend, said before the launch:
    the sum of the target ε of its private runs that are not stored yet (stored ones are
    reused: they cost nothing again), by basic composition, beside what the data set has spent
    and its cap. ``None`` for an empty grid."""
    from ..methods import METHODS

    if not configs:
        return None
    by_key: dict[str, list[Any]] = {}
    for c in configs:
        by_key.setdefault(L.config_dataset_key(c), []).append(c)
    lines = []
    for cs in by_key.values():  # one data set per Compare grid; several are said one by one
        new = [c for c in cs if getattr(METHODS.get(c.method), "private", True)
               and store.find_completed(c.config_hash()) is None]
        add = math.fsum(float(c.target_epsilon) for c in new)
        first = cs[0]
        spent = dataset_budget_line(store, first.dataset, first.dataset_kwargs, first.dataset_root)
        if not new:
            lines.append(f"Launching adds ε = 0 (no private run of the grid is left to run: any is stored and "
                         f"reused). {spent}.")
        else:
            lines.append(f"Launching adds up to ε = {_g(add)} to this data set (basic composition over the {len(new)} "
                         f"private run{'s' if len(new) != 1 else ''} not stored yet; each run's target ε, δ as "
                         f"chosen). {spent}.")
    return " ".join(lines)
