"""The regime family figure (``regimes``): AdaMix and its references on ``synthetic`` data
across classes, dimensions, shots and imbalance (fidelity at scale of AdaMix Table 1).

Registers ``regimes`` in :data:`~mixdp_core.runs.reproduce.FIGURES`. :data:`REGIME_FAMILY`
declares the regimes (development ones may inform a library constant, validation ones are
only reported); :func:`_regime_checks` states the properties (a)-(d) checked on each, from
mean test errors in [0, 1] over seeds.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np

from ...errors import ConfigError
from ..sweep.spec import max_grid_points
from ...evaluation.recommend import noise_quantile
from .base import Context, FigureOutput, figure, _agg, _cell, _log_axis, _table
from .adamix import ADAMIX_FAMILY, NONPRIVATE, _display, _variants, better_reference_error


#: The regime family of ``mixdp reproduce regimes`` (``synthetic`` data, :mod:`mixdp_core.data.synthetic`).
#: ``development`` regimes may be looked at while choosing a library constant; ``validation``
#: regimes are held back and only reported. ``fine_grained_100`` is calibrated on the *shape*
#: a new user met on unseen 102-class few-shot photos (EfficientNet-Lite0 features): Only-Public
#: ≈ 45 %, paragon ≈ 7 %, Fully-Private at ε = 8 ≈ 55–60 % (docs/results/regimes.md).
REGIME_FAMILY: tuple[dict[str, Any], ...] = (
    {"name": "fine_grained_100", "role": "development", "public_per_class": 2, "imbalance_ratio": 1.0,
     "dataset_kwargs": {"classes": 100, "dim": 1280, "train_per_class": 64, "test_per_class": 20,
                        "effective_rank": 200.0, "separation": 10.0, "ambiguity": 0.06, "shared_mean": 2.5}},
    {"name": "many_class_100_d256", "role": "development", "public_per_class": 2, "imbalance_ratio": 1.0,
     "dataset_kwargs": {"classes": 100, "dim": 256, "train_per_class": 64, "test_per_class": 20,
                        "effective_rank": 32.0, "separation": 5.0}},
    {"name": "ten_class_ir10", "role": "development", "public_per_class": 5, "imbalance_ratio": 10.0,
     "dataset_kwargs": {"classes": 10, "dim": 64, "train_per_class": 300, "test_per_class": 50,
                        "effective_rank": 16.0, "separation": 3.0, "shared_mean": 1.0}},
    {"name": "classes_200_d512_1shot", "role": "validation", "public_per_class": 1, "imbalance_ratio": 1.0,
     "dataset_kwargs": {"classes": 200, "dim": 512, "train_per_class": 40, "test_per_class": 10,
                        "effective_rank": 64.0, "separation": 8.0, "ambiguity": 0.05, "shared_mean": 2.0}},
    {"name": "classes_50_d2048_5shot", "role": "validation", "public_per_class": 5, "imbalance_ratio": 1.0,
     "dataset_kwargs": {"classes": 50, "dim": 2048, "train_per_class": 105, "test_per_class": 20,
                        "effective_rank": 400.0, "separation": 12.0, "ambiguity": 0.04, "shared_mean": 3.0}},
    {"name": "classes_20_d128_ir10", "role": "validation", "public_per_class": 3, "imbalance_ratio": 10.0,
     "dataset_kwargs": {"classes": 20, "dim": 128, "train_per_class": 400, "test_per_class": 40,
                        "effective_rank": 24.0, "separation": 4.0, "shared_mean": 1.5, "ambiguity": 0.02}},
    # scarce and imbalanced: the smallest private classes hold about 5 rows (the Classroom's dialled
    # lesson is the development one; docs/results/class_balance.md)
    {"name": "scarce_20_ir10", "role": "development", "public_per_class": 5, "imbalance_ratio": 10.0,
     "dataset_kwargs": {"classes": 20, "dim": 64, "train_per_class": 60, "test_per_class": 20, "separation": 4.0}},
    {"name": "scarce_50_d256_ir10", "role": "validation", "public_per_class": 3, "imbalance_ratio": 10.0,
     "dataset_kwargs": {"classes": 50, "dim": 256, "train_per_class": 60, "test_per_class": 20,
                        "effective_rank": 32.0, "separation": 5.0, "shared_mean": 1.5, "ambiguity": 0.02}},
    # public -> private domain shift (``public_from="synthetic"``: the public rows come from the
    # regime's public domain, class means moved by ``shift``). Added after every library constant
    # was chosen, so validation; ``shift`` and the other options were set from the references
    # alone (Only-Public, paragon, Fully-Private; never AdaMix): ``shift_7_d512`` to the shape of
    # PACS photo -> art (Only-Public ~ 55 %, paragon ~ 15 %), ``shift_100_d512`` to a 100-class
    # few-shot set whose public shots come from elsewhere (Only-Public ~ 50 %, paragon ~ 5 %).
    {"name": "shift_7_d512", "role": "validation", "public_per_class": 2, "imbalance_ratio": 1.0,
     "public_from": "synthetic",
     "dataset_kwargs": {"classes": 7, "dim": 512, "train_per_class": 150, "test_per_class": 50,
                        "effective_rank": 64.0, "separation": 6.0, "shared_mean": 3.0, "ambiguity": 0.15,
                        "shift": 1.5}},
    {"name": "shift_100_d512", "role": "validation", "public_per_class": 2, "imbalance_ratio": 1.0,
     "public_from": "synthetic",
     "dataset_kwargs": {"classes": 100, "dim": 512, "train_per_class": 60, "test_per_class": 20,
                        "effective_rank": 64.0, "separation": 8.0, "shared_mean": 2.0, "ambiguity": 0.05,
                        "shift": 1.0}},
)


#: The ranges :func:`drawn_regime` draws from (the issue's family: ≥ 100 classes among them, D
#: 64–2048, 1–5 public and 10–500 private rows per class, shift, imbalance), each option
#: uniform on its range (``log``: log-uniform; a tuple of values: one of them). ``separation``
#: is drawn relative to ``sqrt(log C)`` (the largest of C − 1 confusions grows like
#: ``sqrt(2 log C)`` noise stds, so more classes need means further apart to stay as
#: distinguishable). The ranges were set before any draw was run and not changed after; every
#: draw is reported, easy ones included (Only-Public near paragon: the private data must then
#: not hurt).
DRAW_RANGES: dict[str, Any] = {
    "classes": ("log", 10, 200),
    "dim": (64, 128, 256, 512, 1024, 2048),
    "public_per_class": (1, 2, 3, 4, 5),
    "private_per_class": ("log", 10, 500),
    "imbalance_ratio": (1.0, 10.0),
    "effective_rank_share": ("uniform", 1 / 16, 1 / 2),  # effective_rank = share · D
    "separation_per_sqrt_log_c": ("uniform", 2.0, 6.0),
    "shared_mean": ("uniform", 0.0, 3.0),
    "ambiguity": ("uniform", 0.0, 0.1),
    "shift": (0.0, 0.0, ("uniform", 0.5, 2.0)),  # one draw in three from a shifted public domain
}
#: At most this many float32 feature values per drawn regime's private domain (train + test rows
#: × D; a shifted draw builds its public domain of the same size and uses k rows of it): bounds a
#: draw's time and memory; larger draws keep their classes and dimension and get fewer rows
#: (halved from 24 M after the references of draws 0–7 had run, before any private method had).
DRAW_MAX_VALUES = 12_000_000


def _draw(g: np.random.Generator, rng_spec: Any) -> Any:
    if isinstance(rng_spec, tuple) and rng_spec and rng_spec[0] in ("log", "uniform"):
        lo, hi = float(rng_spec[1]), float(rng_spec[2])
        return float(np.exp(g.uniform(np.log(lo), np.log(hi)))) if rng_spec[0] == "log" else float(g.uniform(lo, hi))
    v = rng_spec[int(g.integers(len(rng_spec)))]
    return _draw(g, v) if isinstance(v, tuple) else v


def drawn_regime(index: int) -> dict[str, Any]:
    """Regime ``drawn_<index>``: every option drawn from :data:`DRAW_RANGES` by a generator
    seeded with ``index`` alone, so nobody chose it and nobody looked at a method's error on it
    before it was drawn (role ``validation``: drawn after every library constant was chosen).

    Raises:
        ConfigError: ``index`` is not an integer in [0, 10⁶).
    """
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= int(index) < 10**6:
        raise ConfigError("regimes", f"a drawn regime's index must be an integer in [0, 1000000), got {index!r}")
    g = np.random.default_rng([int(index), 0xD4A3])
    d = {k: _draw(g, v) for k, v in DRAW_RANGES.items()}
    C, D = int(round(d["classes"])), int(d["dim"])
    k, n = int(d["public_per_class"]), max(10, int(round(d["private_per_class"])))
    test = 20
    n = min(n, max(10, DRAW_MAX_VALUES // (C * D) - k - test))
    kw: dict[str, Any] = {
        "classes": C, "dim": D, "train_per_class": n + k, "test_per_class": test,
        "effective_rank": round(d["effective_rank_share"] * D, 1),
        "separation": round(d["separation_per_sqrt_log_c"] * float(np.sqrt(np.log(C))), 2),
        "shared_mean": round(d["shared_mean"], 2), "ambiguity": round(d["ambiguity"], 3),
        "data_seed": int(index),
    }
    reg = {"name": f"drawn_{int(index)}", "role": "validation (drawn)", "public_per_class": k,
           "imbalance_ratio": float(d["imbalance_ratio"]), "dataset_kwargs": kw}
    if d["shift"]:
        kw["shift"] = round(float(d["shift"]), 2)
        reg["public_from"] = "synthetic"
        kw["train_per_class"] = n  # the public rows come from the public domain
    return reg


def regime_by_name(name: str) -> dict[str, Any]:
    """A regime of :data:`REGIME_FAMILY` by name, or ``drawn_<i>`` (:func:`drawn_regime`).

    Raises:
        ConfigError: an unknown name (the message lists the family's names).
    """
    by_name = {r["name"]: r for r in REGIME_FAMILY}
    if name in by_name:
        return by_name[name]
    m = re.fullmatch(r"drawn_([0-9]+)", name)
    if m:
        return drawn_regime(int(m.group(1)))
    raise ConfigError("regimes", f"unknown regime {name!r}; choose from {', '.join(by_name)} or drawn_<i> "
                                 "(a regime drawn at random, i >= 0)")


def family_curves(rows: Sequence[Mapping[str, Any]], eps: Sequence[float]) -> dict[str, list]:
    """``{regime: [(ε, AdaMix, Only-Public, Fully-Private), ...]}`` over the figure's ``eps``
    (mean test errors, ``None`` where missing) from the rows the figure writes to its JSON
    (``test_error_mean`` per regime, method and ε)."""
    by = {(r["regime"], r["method"], r["target_epsilon"]): r["test_error_mean"] for r in rows}
    return {reg: [(float(e), by.get((reg, "adamix", float(e))), by.get((reg, "only_public", None)),
                   by.get((reg, "fully_private", float(e)))) for e in eps]
            for reg in dict.fromkeys(r["regime"] for r in rows)}


def family_spread(rows: Sequence[Mapping[str, Any]], eps: Sequence[float]) -> dict[str, list]:
    """``{regime: [AdaMix's seed std of the test error at each of eps, ...]}`` (``None`` where the
    rows carry none: one seed, or a JSON written before the rows held ``test_error_sd``)."""
    by = {(r["regime"], r["target_epsilon"]): r.get("test_error_sd") for r in rows if r["method"] == "adamix"}
    return {reg: [by.get((reg, float(e))) for e in eps] for reg in dict.fromkeys(r["regime"] for r in rows)}


def draw_family(fig: Any, curves: Mapping[str, list], eps: Sequence[float],
                spread: Mapping[str, list] | None = None) -> None:
    """The family chart: AdaMix's test error against ε per regime, Only-Public dotted; with
    ``spread`` (:func:`family_spread`), a bar of ± one standard deviation over the seeds at each
    point (the tables' ± column), so two curves apart by less than their seeds' spread read so."""
    import matplotlib

    ax = fig.add_subplot(1, 1, 1)
    # one colour per regime: the default cycle repeats after ten, and two regimes of a family
    # with more would share their colour and their Only-Public line's
    n = len(curves)
    palette = (list(matplotlib.colormaps["tab10"].colors) if n <= 10 else
               [c for m in ("tab20", "tab20b", "tab20c") for c in matplotlib.colormaps[m].colors])
    for j, (name, pts) in enumerate(curves.items()):
        xs = [e for e, a, _, _ in pts if a is not None]
        ys = [100 * a for _, a, _, _ in pts if a is not None]
        line, = ax.plot(xs, ys, marker="osD^vP"[j % 6], color=palette[j % len(palette)], label=f"{name}: AdaMix")
        sds = (spread or {}).get(name)
        if sds:
            bars = [(e, 100 * a, 100 * sd) for (e, a, _, _), sd in zip(pts, sds) if a is not None and sd is not None]
            if bars:
                ax.errorbar([b[0] for b in bars], [b[1] for b in bars], yerr=[b[2] for b in bars], fmt="none",
                            ecolor=line.get_color(), elinewidth=0.8, capsize=2, alpha=0.6)
        op = pts[0][2] if pts else None
        if op is not None:
            ax.axhline(100 * op, color=line.get_color(), ls=":", lw=1, label=f"{name}: Only-Public (ε = 0)")
    _log_axis(ax, eps)
    ax.set_xlabel("target ε (log scale)")
    ax.set_ylabel("test error (%)")
    ax.set_title("AdaMix across the regime family (dotted: Only-Public)")
    ax.grid(True, alpha=0.3)
    # beside the axes: inside, a family of ten regimes' legend hid the curves it names
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              ncol=1 if n <= 12 else 2)


def _paired_se(per_seed: Mapping[tuple, Mapping[Any, float]], a: tuple, b: tuple | None,
               scale: float = 1.0) -> float | None:
    """Standard error of the mean over seeds of ``per_seed[a] - per_seed[b]`` (``b=None``: of
    ``per_seed[a]``) on the seeds both share, times ``scale``: sd / sqrt(n), paired because every
    method of a regime runs on the same split seeds. ``None`` with fewer than 2 shared seeds."""
    xa = per_seed.get(a) or {}
    xb = (per_seed.get(b) or {}) if b is not None else None
    seeds = [k for k in xa if xb is None or k in xb]
    if len(seeds) < 2:
        return None
    d = np.array([xa[k] - (0.0 if xb is None else xb[k]) for k in seeds], dtype=float)
    return float(scale * d.std(ddof=1) / math.sqrt(len(d)))


def _regime_slack(err: Mapping[tuple, float | None], bal: Mapping[tuple, float | None], eps: Sequence[float],
                  imbalanced: bool, per_seed: Mapping[tuple, Mapping[Any, float]] | None = None,
                  per_seed_bal: Mapping[tuple, Mapping[Any, float]] | None = None,
                  ) -> dict[str, tuple[float, float | None] | None]:
    """How far each fidelity property is from failing in its tightest cell, from mean test errors
    / balanced accuracies over seeds (fractions): ``{property: (slack, standard error)}``, the
    property holding iff ``slack >= 0``; ``None`` where it does not apply or a mean is missing.

    (a) AdaMix <= min(Only-Public, Fully-Private) + 1 pt at every ε: slack ``min_ε bar + 0.01 -
    AdaMix``; (b) AdaMix non-increasing in ε within 1 pt: ``min AdaMix(ε) + 0.01 - AdaMix(ε')``
    over every pair ε < ε' (``eps`` ascending); (c) where paragon <= ½ Only-Public: relative gain over Only-Public
    >= 10 % at ε = 3 and >= 40 % at ε = 8, slack ``min(gain₃ − 0.10, gain₈ − 0.40)``; (d) under
    imbalance, AdaMix's balanced accuracy non-decreasing in ε within 1 pt: ``min bal(ε') + 0.01 −
    bal(ε)`` over every pair. (The family's test sets are class-balanced, where balanced accuracy is
    1 − test error: there (d) is (b) on the same numbers; regimes.md says so.) The standard error is the paired one of the tightest cell's difference over the
    seeds (:func:`_paired_se` on ``per_seed`` / ``per_seed_bal``, ``{(label, ε or None): {seed:
    value}}``; for (c) the difference to Only-Public over Only-Public's mean), ``None`` without
    them. It says whether a ✓ or ✗ is within the seeds' noise; the verdict is the means' alone."""
    ps, pb = per_seed or {}, per_seed_bal or {}
    op, par = err.get(("only_public", None)), err.get(("paragon", None))
    ada = [(e, err.get(("adamix", e))) for e in eps]
    out: dict[str, tuple[float, float | None] | None] = {"a": None, "b": None, "c": None, "d": None}
    worst = lambda cells: min(cells, key=lambda c: c[0])
    if op is not None and all(a is not None for _, a in ada):
        cells = []
        for e, a in ada:
            bar = better_reference_error(err, e)
            ref = ("only_public", None) if bar == op else ("fully_private", e)
            cells.append((bar + 0.01 - a, _paired_se(ps, ("adamix", e), ref)))
        out["a"] = worst(cells)
        if len(ada) > 1:
            # every pair ε < ε', not consecutive ones only: 10.0 / 10.9 / 11.8 / 12.7 % passed the
            # consecutive check (+0.1) while the error rose 2.7 points with the budget
            out["b"] = worst([(a + 0.01 - b, _paired_se(ps, ("adamix", f), ("adamix", e)))
                              for (e, a), (f, b) in itertools.combinations(ada, 2)])
        # Only-Public at 0 % leaves no gain to ask for (a regime shrunk by ``scale`` can get
        # there): (c) does not apply rather than dividing by zero
        if par is not None and op > 0 and par <= 0.5 * op and 3.0 in eps and 8.0 in eps:
            got = dict(ada)
            out["c"] = worst([((op - got[e]) / op - need, _paired_se(ps, ("adamix", e), ("only_public", None), 1 / op))
                              for e, need in ((3.0, 0.10), (8.0, 0.40))])
    if imbalanced:
        b = [(e, bal.get(("adamix", e))) for e in eps]
        if len(b) > 1 and all(v is not None for _, v in b):
            out["d"] = worst([(y + 0.01 - x, _paired_se(pb, ("adamix", f), ("adamix", e)))
                              for (e, x), (f, y) in itertools.combinations(b, 2)])
    return out


def _regime_checks(err: Mapping[tuple, float | None], bal: Mapping[tuple, float | None], eps: Sequence[float],
                   imbalanced: bool) -> dict[str, bool | None]:
    """The fidelity properties (a)–(d) of :func:`_regime_slack` from the means: ✓ iff the
    tightest cell's slack is >= 0 (``None`` where a property does not apply)."""
    return _verdicts(_regime_slack(err, bal, eps, imbalanced))


def _verdicts(slack: Mapping[str, tuple[float, float | None] | None]) -> dict[str, bool | None]:
    """✓ (True) iff a property's tightest slack is >= 0; ``None`` where it does not apply."""
    return {k: None if v is None else v[0] >= 0 for k, v in slack.items()}


def _slack_cell(mark: str, slack: tuple[float, float | None] | None) -> str:
    """A property's mark with its tightest cell's slack ± s.e. in points (``n/a`` alone)."""
    if slack is None:
        return mark
    # snapped to 1e-9 points before rounding to one decimal: the same slack reached by two sums
    # (balanced accuracy's and the error's, equal on a balanced test set) printed 4.6 and 4.5
    return (f"{mark} {round(100 * slack[0], 9):+.1f}"
            + ("" if slack[1] is None else f" ± {round(100 * slack[1], 9):.1f}"))


@figure("regimes", "Regime family: AdaMix and its references across classes, dimensions, shots and imbalance",
        "AdaMix (Golatkar et al. 2022), Table 1, across a regime family (fidelity at scale)",
        epsilons=[0.5, 1, 3, 8], seeds=[0, 1, 2, 3], regimes=[r["name"] for r in REGIME_FAMILY],
        variants=["paragon", "only_public", "fully_private", "ngd", "adamix"], scale=1.0, figsize=(10.0, 4.8),
        own_data=True)
def _regimes(ctx: Context) -> FigureOutput:
    """One grid per regime of :data:`REGIME_FAMILY` (``synthetic`` data; the context's own
    dataset is not used), each with the properties (a)–(d) of :func:`_regime_checks` and how
    often AdaMix's public-start guard released the private model. ``scale`` (0, 1] shrinks
    every regime's classes and rows alike (tests and quick looks; the committed table uses 1)."""
    import dataclasses as _dc

    p = ctx.params
    eps = [float(e) for e in p["epsilons"]]
    chosen = [regime_by_name(str(n)) for n in p["regimes"]]
    names = [r["name"] for r in chosen]
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:  # "drawn_0" and "drawn_00" are one regime: two sections of the same runs
        raise ConfigError("regimes", f"{twice} is listed twice (names that differ only in spelling are one regime)")
    scale = float(p.get("scale", 1.0))
    if not 0.0 < scale <= 1.0:
        raise ConfigError("scale", f"must lie in (0, 1], got {scale!r}")
    variants = _variants(p, ADAMIX_FAMILY)
    md: list[str] = []
    out_rows: list[dict[str, Any]] = []
    summary = []
    plans = []
    for reg in chosen:
        kw = dict(reg["dataset_kwargs"])
        if scale < 1.0:
            kw["classes"] = max(2, int(round(kw["classes"] * scale)))
            kw["dim"] = max(8, int(round(kw["dim"] * scale)))
            kw["train_per_class"] = max(reg["public_per_class"] + 2, int(round(kw["train_per_class"] * scale)))
            kw["test_per_class"] = max(2, int(round(kw["test_per_class"] * scale)))
        sub = _dc.replace(ctx, dataset="synthetic", encoder="pixels", dataset_root=None, dataset_kwargs=kw,
                          public_from=reg.get("public_from"), runs=ctx.runs, skipped=ctx.skipped)
        ir = float(reg["imbalance_ratio"])
        plans.append((reg, kw, sub, ir, sub.spec(
            methods=tuple(variants), epsilons=tuple(eps), seeds=tuple(p["seeds"]),
            public_per_class=(int(reg["public_per_class"]),), imbalance_ratios=(ir,), private_per_class=(None,))))
    # each regime's sweep is within the grid limit; the figure as a whole must be too (200 drawn
    # regimes × 720 runs each started training, one regime's sweep at a time)
    total = sum(spec.n_points() for *_, spec in plans)
    if total > max_grid_points():
        raise ConfigError("regimes", f"{len(plans)} regimes × their grids are {total:,} runs; a figure may hold at "
                                     f"most {max_grid_points():,} (MIXDP_MAX_GRID_POINTS; fewer regimes, seeds or ε)")
    for reg, kw, sub, ir, spec in plans:
        rows = sub.sweep(spec)
        # (mean, seed std, seeds) per (label, ε), a non-private reference's under ε = None (it runs once)
        te = {(lab, None if lab in NONPRIVATE else e): agg
              for (lab, e), agg in _agg(rows, ("label", "target_epsilon"), "test_error").items()}
        err = {k: m for k, (m, _, _) in te.items()}
        sd = {k: s for k, (_, s, _) in te.items()}
        bal = {(lab, None if lab in NONPRIVATE else e): m
               for (lab, e), (m, _, _) in _agg(rows, ("label", "target_epsilon"), "balanced_accuracy").items()}
        # per-seed values, keyed like err / bal: the properties' paired standard errors
        per_seed: dict[str, dict[tuple, dict]] = {"test_error": defaultdict(dict), "balanced_accuracy": defaultdict(dict)}
        for r in rows:
            for metric, d in per_seed.items():
                v = r["metrics"].get(metric)
                if v is not None and math.isfinite(v):
                    d[(r["label"], None if r["label"] in NONPRIVATE else r["target_epsilon"])][r["seed"]] = v
        guard = defaultdict(list)
        for r in rows:
            g = r["metrics"].get("guard_released_private")
            if r["label"] == "adamix" and g is not None:
                guard[r["target_epsilon"]].append(bool(g))
        slack = _regime_slack(err, bal, eps, ir > 1.0, per_seed["test_error"], per_seed["balanced_accuracy"])
        checks = _verdicts(slack)
        md += [f"### `{reg['name']}` ({reg['role']})", "",
               f"`synthetic` {json.dumps(kw)}, {reg['public_per_class']} public per class"
               + (f" from the public domain (`public_from={reg['public_from']!r}`)" if reg.get("public_from") else "")
               + f", imbalance ratio {ir:g}, seeds {list(p['seeds'])}.", ""]
        hdr = ["method"] + [f"ε = {e:g}" for e in eps]
        trs = []
        for v in variants:
            if v.label in NONPRIVATE:
                m = err.get((v.label, None))
                trs.append([_display(v)] + [f"{_cell(m, sd.get((v.label, None)))} (ε = {'∞' if v.label == 'paragon' else '0'})"]
                           * len(eps))
            else:
                trs.append([_display(v)] + [_cell(err.get((v.label, e)), sd.get((v.label, e))) for e in eps])
        trs.append(["AdaMix: guard released the private model"] +
                   [f"{sum(guard[e])}/{len(guard[e])}" if guard[e] else "–" for e in eps])
        md += _table(hdr, trs)
        mark = {True: "✓", False: "✗", None: "n/a"}
        md += ["", "Properties (means over seeds; tightest cell's slack ± s.e. in points): "
               f"(a) AdaMix ≤ min(Only-Public, Fully-Private) + 1 pt: {_slack_cell(mark[checks['a']], slack['a'])} · "
               f"(b) non-increasing in ε (1 pt): {_slack_cell(mark[checks['b']], slack['b'])} · "
               f"(c) many-class few-shot gain (≥ 10 % at ε = 3, ≥ 40 % at ε = 8): {_slack_cell(mark[checks['c']], slack['c'])} · "
               f"(d) balanced accuracy non-decreasing under imbalance: {_slack_cell(mark[checks['d']], slack['d'])}", ""]
        summary.append([f"`{reg['name']}`", reg["role"]] + [_slack_cell(mark[checks[k]], slack[k]) for k in "abcd"])
        for (lab, e), m in err.items():
            out_rows.append({"regime": reg["name"], "role": reg["role"], "method": lab, "target_epsilon": e,
                             # the seeds' std, the tables' ± column (none with one seed)
                             "test_error_mean": m, "test_error_sd": sd[(lab, e)], "n_seeds": te[(lab, e)][2],
                             "guard_released": (sum(guard[e]) / len(guard[e]))
                             if lab == "adamix" and guard.get(e) else None})
    n_seeds = len(list(p["seeds"]))
    t95 = noise_quantile(n_seeds) if n_seeds >= 2 else None
    head = ["**Properties per regime** (✓ holds, ✗ fails, n/a does not apply; after each mark the tightest "
            "cell's slack, negative where it fails, in points (for (c) points of relative gain) ± its standard error "
            "paired over the split seeds: "
            + (f"a slack within about {t95:.3g} standard errors of 0 could flip with other seeds, Student's t at "
               f"{n_seeds} seeds being {t95:.3g} for 95 %)" if t95 is not None
               else "one seed: no standard error, so no mark is beyond the seeds' noise)"), ""]
    head += _table(["regime", "role", "(a)", "(b)", "(c)", "(d)"], summary) + [""]

    def draw(fig: Any) -> None:
        # the JSON's rows: a redraw draws the same
        draw_family(fig, family_curves(out_rows, eps), eps, family_spread(out_rows, eps))

    setup = (f"{len(chosen)} `synthetic` regimes (data model in `mixdp_core/data/synthetic.py`), δ = "
             f"{p.get('delta', 1e-5):g}, seeds {list(p['seeds'])}, scale {scale:g}")
    # the runs were on synthetic regimes, not on the context's dataset: the JSON's header says so
    # (each regime's options: its markdown section; its rows: the row's "regime")
    data = {"dataset": "synthetic", "encoder": "pixels", "dataset_kwargs": None, "encoder_kwargs": {},
            "public_from": None}
    return FigureOutput("\n".join(head + md), out_rows, draw, setup, data=data)
