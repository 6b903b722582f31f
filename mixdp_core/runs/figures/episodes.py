"""The ``episodes`` figure: N-way K-shot episodes (the CD-FSL protocol of Luo et al., CVPR 2021,
Table 2) as a general evaluation of every registered method.

Contract:

* Data: the features of ``ctx.dataset`` under ``ctx.encoder`` (cached like every figure's),
  train and test rows pooled: episodes are drawn from that pool
  (:func:`~mixdp_core.evaluation.episodes.sample_episodes`; seeded, the same episodes for
  every method at a given shot count).
* Private data of each fit = the episode's support set; test = its query set. Each fit gets
  the (ε, δ) target ``epsilon`` / ``delta`` for its own support set.
* Public data: with ``ctx.public_from`` (another domain with the same class names, e.g.
  PACS photo for PACS art), ``public_per_class`` labelled rows per class of that source
  (seeded choice; matched to the target's classes by name) and the whole source as the
  unlabelled pool of DPPL-Public. Without it, ``public_per_class`` rows per class are held
  out of the target's pool as a small labelled public split (never in an episode; also the
  unlabelled pool). ``public_per_class = 0``: no labelled public rows (methods that need them
  are listed as not run).
* ``methods = "all"``: every registered method that fits on feature splits — all but the
  network fine-tuning family (a network pre-trained and DP-fine-tuned per episode; name it in
  ``methods`` to include it, with the ``pixels`` encoder) and text-initialised methods unless
  the features carry CLIP text embeddings. ``method_params`` sets config fields per method;
  methods with a ``noise_multiplier`` field get σ = 20·max(1, 3/ε) unless set (a rule on
  public quantities, as in the ``prototypes`` figure).
* Output: query accuracy (%) per method × shots, mean ± 95 % interval over episodes
  (Student's t · s/√n, :func:`~mixdp_core.evaluation.episodes.mean_ci95`), the ε spent (max over
  episodes), and a sentence comparing with the paper's Table 2 where the data set is one of
  its CD-FSL targets (``cdfsl_cropdiseases``, ``cdfsl_eurosat``, ``cdfsl_isic``).
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Any, Mapping

import numpy as np

from ...config import EPISODE_LIMITS
from ...errors import ConfigError, DataError
from .base import Context, FigureOutput, figure, _lines, _log_axis, _table, test_tuned_footnotes

#: Luo et al. (CVPR 2021), Table 2: 5-way query accuracy at 5 / 20 / 50 shots (60 episodes),
#: ResNet-18 pre-trained on miniImageNet; "Ours" = sparse DP fine-tuning (the table does not
#: state its ε; the paper reports its other results at ε = 0.5, 1, 1.5), the others non-private.
PAPER_TABLE2: dict[str, dict[str, tuple[float, float, float]]] = {
    "cdfsl_cropdiseases": {"MatchingNet": (0.6639, 0.7638, 0.5853), "RelationNet": (0.6899, 0.8045, 0.8508),
                           "ProtoNet": (0.7972, 0.8815, 0.9081), "Ours (sparse DP fine-tuning)": (0.8715, 0.9349, 0.9687)},
    "cdfsl_eurosat": {"MatchingNet": (0.6445, 0.7710, 0.5444), "RelationNet": (0.6131, 0.7443, 0.7491),
                      "ProtoNet": (0.7329, 0.8227, 0.8048), "Ours (sparse DP fine-tuning)": (0.7933, 0.8728, 0.9008)},
    "cdfsl_isic": {"MatchingNet": (0.3674, 0.4572, 0.5458), "RelationNet": (0.3941, 0.4177, 0.4932),
                   "ProtoNet": (0.3957, 0.4950, 0.5199), "Ours (sparse DP fine-tuning)": (0.4648, 0.5979, 0.6377)},
}
PAPER_SHOTS = (5, 20, 50)


#: Upper bounds of the episode protocol's sizes: the library's (each episode is one fit per
#: method and shot count: the paper runs 600; a billion never finished).
_HIGH = {"episodes": EPISODE_LIMITS["n_episodes"], "n_way": EPISODE_LIMITS["n_way"], "n_query": EPISODE_LIMITS["n_query"],
         "shots": EPISODE_LIMITS["k_shot"], "public_per_class": 10_000, "seed": EPISODE_LIMITS["seed"]}


def _int(p: Mapping[str, Any], key: str, low: int) -> int:
    v = p[key]
    high = _HIGH.get(key, 10**6)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or int(v) != v \
            or not low <= v <= high:
        raise ConfigError(key, f"must be an integer in [{low}, {high:,}], got {v!r}")
    return int(v)


def _methods(p: Mapping[str, Any], has_text: bool) -> list[str]:
    """The ``methods`` parameter as registry names (``"all"``: see the module docstring)."""
    from ...methods import METHODS

    if p["methods"] == "all":
        return [n for n, c in METHODS.items() if c.family != "finetune" and (has_text or not c.needs_text)]
    if not isinstance(p["methods"], list) or not p["methods"]:
        raise ConfigError("methods", f"must be \"all\" or a non-empty list of method names, got {p['methods']!r}")
    out = []
    for m in p["methods"]:
        if m not in METHODS:
            raise ConfigError("methods", f"unknown method {m!r}; choose from {', '.join(METHODS.keys())}")
        if METHODS.get(m).needs_text and not has_text:
            raise ConfigError("methods", f"{m!r} needs CLIP text embeddings; encoder has none (use clip_vit_b32)")
        out.append(str(m))
    return out


def _episode_data(ctx: Context, n_pub: int, seed: int) -> dict[str, Any]:
    """Pool, public rows and unlabelled pool of the figure (see the module docstring)."""
    from ...features import get_features

    fs = get_features(ctx.dataset, ctx.encoder, root=ctx.dataset_root, cache_dir=ctx.cache_dir,
                      encoder_kwargs=ctx.encoder_kwargs, progress=ctx.progress, **ctx.dataset_kwargs)
    X = np.concatenate([fs.X_train, fs.X_test]).astype(np.float32)
    y = np.concatenate([fs.y_train, fs.y_test]).astype(np.int64)
    names = list(fs.class_names)
    rng = np.random.default_rng([seed, 0x9B1])  # choice of public rows: public data, no privacy noise

    def per_class(labels: np.ndarray, classes: range) -> np.ndarray:
        return np.sort(np.concatenate([rng.choice(np.flatnonzero(labels == c), size=n_pub, replace=False)
                                       for c in classes])) if n_pub else np.zeros(0, np.int64)

    if ctx.public_from is not None:
        from ...data.datasets import public_source

        # the synthetic public domain needs the run's own options (public_source); a real
        # second domain loads with its defaults
        pub_spec, pub_kw = public_source(ctx.dataset, dict(ctx.dataset_kwargs), ctx.public_from)
        src = get_features(pub_spec, ctx.encoder, cache_dir=ctx.cache_dir, encoder_kwargs=ctx.encoder_kwargs,
                           progress=ctx.progress, **pub_kw)
        Xs = np.concatenate([src.X_train, src.X_test]).astype(np.float32)
        ys_names = np.asarray(src.class_names)[np.concatenate([src.y_train, src.y_test])]
        missing = [c for c in names if c not in set(src.class_names)]
        if missing and n_pub:
            raise ConfigError("public_from", f"{ctx.public_from!r} has no class {missing[0]!r}; labelled public rows "
                                             f"need the target's class names (or --set public_per_class=0)")
        index = {c: i for i, c in enumerate(names)}
        ys = np.asarray([index.get(str(c), -1) for c in ys_names], dtype=np.int64)
        try:
            pub = per_class(ys, range(len(names)))
        except ValueError:
            raise ConfigError("public_per_class", f"{ctx.public_from!r} has fewer than {n_pub} rows of some class") from None
        note = (f"public: {n_pub} labelled rows per class from `{ctx.public_from}` (matched by class name), its "
                f"{len(Xs)} rows the unlabelled pool of DPPL-Public")
        return dict(X=X, y=y, names=names, public=(Xs[pub], ys[pub]), pool=Xs, text=fs.text_embeddings,
                    meta=dict(fs.meta), dim=X.shape[1], note=note)
    try:
        pub = per_class(y, range(len(names)))
    except ValueError:
        raise ConfigError("public_per_class", f"some class has fewer than {n_pub} rows") from None
    keep = np.setdiff1d(np.arange(len(y)), pub)
    note = (f"public: a split of {n_pub} labelled rows per class held out of the pool (never in an episode; also the "
            f"unlabelled pool of DPPL-Public)" if n_pub else "public: none")
    return dict(X=X[keep], y=y[keep], names=names, public=(X[pub], y[pub]) if n_pub else None,
                pool=X[pub] if n_pub else None, text=fs.text_embeddings, meta=dict(fs.meta), dim=X.shape[1],
                note=note)


def _check_method_params(method_params: Mapping[str, Any], methods: list[str]) -> None:
    """Each key a chosen method, each value its config's fields in range (built once, no fit):
    a misspelt method or field was ignored (the table computed on the defaults, exit 0), and a
    value out of range showed the method as "Not run".

    Raises:
        ConfigError: field ``method_params`` (a key that is no chosen method, or not a table), or
            the config's own field (its range)."""
    from ...methods import make_method

    for name, params in method_params.items():
        if name not in methods:
            raise ConfigError("method_params", f"{name!r} is not a chosen method ({', '.join(methods)})")
        if not isinstance(params, dict):
            raise ConfigError("method_params", f"{name}: must be a table of its config's fields, got {params!r}")
        make_method(name, **params)


def _episodes_task(item: tuple[str, int], shared: Mapping[str, Any]) -> dict[str, Any]:
    """All episodes of one (method, shots) cell (a :func:`map_trainings` task); a method that
    cannot fit (no public rows, unreachable budget) is returned with its error."""
    import dataclasses
    import functools

    from ...evaluation.episodes import run_episodes, sample_episodes
    from ...methods import METHODS, make_method

    name, k = item
    d, cfg = shared["data"], shared["config"]
    params = dict(cfg["method_params"].get(name, {}))
    if "noise_multiplier" in {f.name for f in dataclasses.fields(METHODS.get(name).config_cls)}:
        params.setdefault("noise_multiplier", 20.0 * max(1.0, 3.0 / cfg["epsilon"]))
    episodes = sample_episodes(d["y"], cfg["n_way"], k, cfg["n_query"], cfg["episodes"], cfg["seed"])
    try:
        res = run_episodes(functools.partial(make_method, name, **params), d["X"], d["y"], epsilon=cfg["epsilon"],
                           delta=cfg["delta"], n_way=cfg["n_way"], k_shot=k, n_query=cfg["n_query"],
                           seed=cfg["seed"], public=d["public"], public_pool=d["pool"], class_names=d["names"],
                           text_embeddings=d["text"], meta=d["meta"], episodes=episodes)
    except (DataError, ConfigError) as e:
        return {"method": name, "k_shot": k, "error": str(e)}
    spent = [e for e in res.epsilons if e is not None]
    return {"method": name, "k_shot": k, "mean": res.mean, "ci95": res.ci95, "n": len(res.accuracies),
            "accuracies": res.accuracies.tolist(), "epsilon_spent_max": max(spent) if spent else None,
            "seconds_median": statistics.median(res.seconds), "params": params}


def _paper_lines(ctx: Context, shots: list[int], n_way: int, cell: Mapping[tuple, dict]) -> list[str]:
    """How the reading compares with the paper's Table 2 (measured only on its CD-FSL targets)."""
    from ...methods import METHODS

    key = ctx.dataset.partition(":")[0]
    private = sorted({m for m, _ in cell if METHODS.get(m).private})
    reads = [m for m in dict.fromkeys(m for m, _ in cell) if METHODS.get(m).uses_private_data]
    best = {k: max(((cell[(m, k)]["mean"], m) for m in private if "mean" in cell.get((m, k), {})), default=None)
            for k in shots}
    ran = [m for m in reads if all("mean" in cell.get((m, k), {}) for k in shots)]
    rising = [m for m in ran if all(cell[(m, a)]["mean"] <= cell[(m, b)]["mean"] for a, b in zip(shots, shots[1:]))]
    shape = (f" Accuracy rises with the shots for {len(rising)} of the {len(ran)} methods here that read the support "
             f"set{'' if len(rising) == len(ran) else ' (not: ' + ', '.join(f'`{m}`' for m in ran if m not in rising) + ')'}"
             " (paper: for its sparse DP "
             "fine-tuning and RelationNet on all three targets; MatchingNet and ProtoNet drop from 20 to 50 shots on "
             "some)." if len(shots) > 1 else "")
    if key in PAPER_TABLE2 and n_way == 5 and set(shots) & set(PAPER_SHOTS):
        ref = PAPER_TABLE2[key]["Ours (sparse DP fine-tuning)"]
        parts = []
        for k in shots:
            if k in PAPER_SHOTS and best[k] is not None:
                ours = ref[PAPER_SHOTS.index(k)]
                parts.append(f"{k}-shot: best private method here `{best[k][1]}` {100 * best[k][0]:.1f} % vs the "
                             f"paper's sparse DP fine-tuning {100 * ours:.1f} % ({100 * (best[k][0] - ours):+.1f} pts)")
        lines = ["", "**Paper, Table 2 (5-way query accuracy, %)**", ""]
        lines += _table(["method (paper)"] + [f"{k}-shot" for k in PAPER_SHOTS],
                        [[m] + [f"{100 * v:.1f}" for v in vals] for m, vals in PAPER_TABLE2[key].items()])
        return lines + ["", "Against the paper's Table 2 (its ε is not stated there; its private encoder is a "
                        "ResNet-18 pre-trained on miniImageNet): " + "; ".join(parts) + "." + shape]
    return ["", "Against the paper's Table 2: not measured — its targets (CropDiseases, EuroSAT, ISIC2018; specs "
            "`cdfsl_cropdiseases`, `cdfsl_eurosat`, `cdfsl_isic`) are not available offline, and this stand-in "
            f"(`{ctx.dataset}`{f' at `{ctx.dataset_root}`' if ctx.dataset_root else ''}) is a different task, so only "
            "the protocol and the shape compare, not the numbers."
            + shape]


@figure("episodes", "N-way K-shot episodes (CD-FSL protocol): query accuracy of every method",
        "Luo et al. (CVPR 2021), Table 2 (CD-FSL: 5-way, 5 / 20 / 50 shots, 60 episodes, 15 query per class)",
        figsize=(8, 5.5), n_way=5, shots=[5, 20, 50], n_query=15, episodes=60, epsilon=1.0, public_per_class=5,
        seed=0, methods="all", method_params={})
def _episodes(ctx: Context) -> FigureOutput:
    """Query accuracy of every method over the same seeded episodes at each shot count."""
    from ...evaluation.episodes import sample_episodes
    from ...methods import METHODS

    p = ctx.params
    n_way, n_query, n_ep = _int(p, "n_way", 2), _int(p, "n_query", 1), _int(p, "episodes", 1)
    n_pub, seed = _int(p, "public_per_class", 0), _int(p, "seed", 0)
    if not isinstance(p["shots"], list) or not p["shots"]:
        raise ConfigError("shots", f"must be a non-empty list of integers >= 1, got {p['shots']!r}")
    shots = sorted({_int({"shots": k}, "shots", 1) for k in p["shots"]})  # each an integer >= 1
    eps = p["epsilon"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ConfigError("epsilon", f"must be a number > 0, got {eps!r}")
    if not isinstance(p["method_params"], dict):
        raise ConfigError("method_params", f"must map method names to config fields, got {p['method_params']!r}")
    _check_method_params(p["method_params"], _methods(p, True))  # before the features are read
    data = _episode_data(ctx, n_pub, seed)
    methods = _methods(p, data["text"] is not None)
    for k in shots:  # a clear error before any training when too few classes are large enough
        sample_episodes(data["y"], n_way, k, n_query, 1, seed)
    cfg = {"n_way": n_way, "n_query": n_query, "episodes": n_ep, "seed": seed, "epsilon": float(eps),
           "delta": float(p.get("delta", 1e-5)), "method_params": dict(p["method_params"])}
    items = [(m, k) for m in methods for k in shots]
    _refuse_on_a_capped_data_set(ctx)
    # not charged: every episode draws its own support set and fits it at ε, an evaluation of
    # the methods by the data's owner (as the app's Episodes launch states); its accuracies
    # are not a release of the data set under one ε
    res = ctx.trainings(_episodes_task, items, {"data": data, "config": cfg}, charge=None)
    ctx.runs.extend(res)
    cell = {(r["method"], r["k_shot"]): r for r in res}
    failed = {r["method"]: r["error"] for r in res if "error" in r}

    def acc(m: str, k: int) -> str:
        r = cell[(m, k)]
        return "–" if "error" in r else f"{100 * r['mean']:.1f} ± {100 * r['ci95']:.1f}"

    def spent(m: str) -> str:
        vals = [cell[(m, k)].get("epsilon_spent_max") for k in shots]
        if any("error" in cell[(m, k)] for k in shots):
            return "–"
        if all(v is None for v in vals):
            return "∞ (non-private)" if METHODS.get(m).uses_private_data else "0 (reads no private row)"
        return f"{max(v for v in vals if v is not None):.3f}"

    hdr = ["method"] + [f"{k}-shot" for k in shots] + ["ε spent (max)", "s / fit (median)"]
    md = [f"**{n_way}-way query accuracy (%) over {n_ep} episodes ({n_query} query per class): mean ± 95 % interval "
          f"(Student's t · s/√n), target ε = {float(eps):g} per fit**", ""]
    md += _table(hdr, [[f"`{m}`"] + [acc(m, k) for k in shots] + [spent(m), "–" if m in failed else
                       f"{statistics.median(cell[(m, k)]['seconds_median'] for k in shots):.2f}"] for m in methods])
    if failed:
        md += ["", "Not run (shown as –):", ""] + [f"- `{m}`: {e}" for m, e in failed.items()]
    md += _paper_lines(ctx, shots, n_way, cell)
    md += sum(([""] + [n] for n in test_tuned_footnotes((m, (p["method_params"] or {}).get(m, {}))
                                                        for m in methods)), [])  # DP-LS's †
    rows = [{k: v for k, v in r.items() if k != "accuracies"} for r in res]

    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        _lines(ax, {m: [(k, cell[(m, k)]["mean"], cell[(m, k)]["ci95"]) for k in shots if "mean" in cell[(m, k)]]
                    for m in methods if m not in failed})
        ax.axhline(100.0 / n_way, color="grey", lw=1, ls=":", label=f"chance (1/{n_way})")
        _log_axis(ax, shots)
        ax.set_ylim(0, 100)
        ax.set_xlabel("shots per class (support set = private data; log scale)")
        ax.set_ylabel("query accuracy (%), ± 95 % interval")
        ax.set_title(f"{n_way}-way episodes, target ε = {float(eps):g} per fit", fontsize=10)
        ax.legend(fontsize=6, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.16))

    setup = (f"dataset `{ctx.dataset}`, encoder `{ctx.encoder}` (D = {data['dim']}), {len(data['names'])} classes, "
             f"episode pool {len(data['y'])} rows (train + test pooled); {data['note']}; {n_way}-way, shots {shots}, "
             f"{n_query} query per class, {n_ep} episodes (seed {seed}, the same episodes for every method), "
             f"δ = {cfg['delta']:g}; σ = 20·max(1, 3/ε) for methods with a noise multiplier; dataset options "
             f"`{json.dumps(ctx.dataset_kwargs)}`, encoder options `{json.dumps(ctx.encoder_kwargs)}`; "
             "not charged to the data set's budget: an evaluation by the data's owner, whose support sets are "
             "private rows (its accuracies are the owner's view, not a DP release of the data set)")
    return FigureOutput("\n".join(md), rows, draw, setup)


def _refuse_on_a_capped_data_set(ctx: Context) -> None:
    """The episodes' fits are not charged (an owner's evaluation), so a data set with a budget
    cap refuses them rather than let private fits past the cap uncounted (they ran at ε = 8 on a
    data set capped at 0.5, and the budget still read "0.5 left").

    Raises:
        BudgetError: ``budget_cap``, naming the data set and what to do.
    """
    if ctx.store is None:
        return
    from ...errors import BudgetError
    from ..ledger import dataset_key, effective_cap

    cap = effective_cap(ctx.store, dataset_key(ctx.dataset, ctx.dataset_root, ctx.dataset_kwargs))
    if cap is not None:
        raise BudgetError("budget_cap", f"data set {ctx.dataset!r} has a cap (ε = {cap.epsilon:g}); the episodes "
                                        "figure's fits are an owner's evaluation, not charged to it, so a capped "
                                        "data set refuses them: remove the cap (mixdp budget --clear-cap) or run "
                                        "the episodes on another store")
