"""The package layers import one way only (the README's architecture table, as a test).

Every ``import`` of a ``mixdp_core`` module, including the lazy ones inside functions, is
read from the source with ``ast``; a layer may import only the layers listed for it.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "mixdp_core"

GROUND = {"errors", "registry", "config", "featureset", "_io", "randomness", "safe_npz", "__init__"}
#: layer -> layers it may import (besides itself and the ground floor).
ALLOWED: dict[str, set[str]] = {
    "errors": set(), "registry": set(), "featureset": set(), "_io": set(), "randomness": set(), "safe_npz": set(),
    "config": set(),
    "accounting": set(),
    "data": set(),
    "encoders": {"data"},
    "features": {"data", "encoders"},
    "methods": {"accounting", "encoders"},
    "evaluation": {"accounting", "data", "methods"},
    "runs": {"accounting", "data", "encoders", "features", "methods", "evaluation"},
    "app_support": {"accounting", "data", "encoders", "features", "methods", "evaluation", "runs"},
    "cli": {"accounting", "data", "encoders", "features", "methods", "evaluation", "runs"},
}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _from_target(node: ast.ImportFrom, pkg: str) -> str:
    """The absolute module a ``from ... import`` in package ``pkg`` reads from (relative
    levels resolved)."""
    if not node.level:
        return node.module or ""
    base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(path: Path, pkg_root: Path):
    rel = path.relative_to(pkg_root.parent).with_suffix("")
    mod = ".".join(rel.parts)
    pkg = mod[: -len(".__init__")] if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            target = _from_target(node, pkg)
            if target == "mixdp_core":  # ``from .. import accounting``: the names are modules
                for a in node.names:
                    yield node.lineno, f"mixdp_core.{a.name}"
            elif target.startswith("mixdp_core."):
                yield node.lineno, target
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("mixdp_core."):
                    yield node.lineno, a.name


def violations(pkg_root: Path) -> list[str]:
    """``file:line (layer) imports target (layer)`` for every import not allowed above."""
    bad = []
    for path in sorted(pkg_root.rglob("*.py")):
        rel = path.relative_to(pkg_root)
        src = rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 else rel.stem
        if src not in ALLOWED:
            continue
        for line, target in _imports(path, pkg_root):
            dst = _layer(target)
            if dst in (src, "__version__") or dst in GROUND and dst != "config":
                continue
            if dst == "config" and src not in ("errors", "registry", "featureset", "_io"):
                continue
            if dst not in ALLOWED[src]:
                bad.append(f"{rel}:{line} ({src}) imports {target} ({dst})")
    return bad


def test_layers_import_downwards_only():
    bad = violations(PKG)
    assert not bad, "\n".join(bad)


def test_the_layer_check_reports_an_upward_import(tmp_path):
    pkg = tmp_path / "mixdp_core"
    (pkg / "data").mkdir(parents=True)
    (pkg / "data" / "ok.py").write_text("from ..errors import DataError\nfrom .base import X\n")
    (pkg / "data" / "bad.py").write_text("def f():\n    from ..features.cache import get_features\n")
    (pkg / "encoders").mkdir()
    (pkg / "encoders" / "e.py").write_text("from ..data.base import ArrayImageSource\n")
    assert violations(pkg) == ["data/bad.py:2 (data) imports mixdp_core.features.cache (features)"]


# ------------------------------------------------------------------------------ import cycles


def _modules(pkg_root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module and package (its ``__init__.py``) under ``pkg_root``."""
    out = {}
    for path in sorted(pkg_root.rglob("*.py")):
        parts = path.relative_to(pkg_root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph(pkg_root: Path) -> dict[str, dict[str, int]]:
    """``module -> {module it imports: line of the first such import}`` within the package.

    Every static ``import`` counts, at module level or inside a function (a lazy import closes
    a cycle as surely, only later). ``from a.b import c`` imports the module ``a.b.c`` when there
    is one, else ``a.b``. Importing ``a.b.c`` also runs the ``__init__`` of ``a`` and ``a.b``:
    those are edges too, except for the importer's own enclosing packages, which Python has
    already imported (or is importing) before the importer runs; naming one explicitly
    (``from . import name``) is still an edge to it.
    """
    mods = _modules(pkg_root)
    graph: dict[str, dict[str, int]] = {}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        pkg = mod if is_pkg else mod.rpartition(".")[0]
        own = {".".join(mod.split(".")[:i]) for i in range(1, mod.count(".") + 1 + is_pkg)}
        edges: dict[str, int] = {}

        def add(target: str, line: int) -> None:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                q = ".".join(parts[:i])
                if q in mods and q != mod and (q not in own or i == len(parts)):
                    edges[q] = min(edges.get(q, line), line)

        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                target = _from_target(node, pkg)
                for a in node.names:
                    add(f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target, node.lineno)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    add(a.name, node.lineno)
        graph[mod] = edges
    return graph


def import_cycles(pkg_root: Path) -> list[str]:
    """One line per import cycle: ``a (file:line) -> b (file:line) -> ... -> a``, one cycle through
    each strongly connected component of :func:`import_graph` with more than one module."""
    graph = import_graph(pkg_root)
    mods = _modules(pkg_root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    lines = []
    for comp in components:  # shortest cycle back to the component's first module (BFS)
        start, inside = comp[0], set(comp)
        prev: dict[str, str] = {}
        frontier = [start]
        while start not in prev:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in inside and w not in prev:
                        prev[w] = v
                        nxt.append(w)
            frontier = nxt
        path = [start]
        while len(path) == 1 or path[-1] != start:
            path.append(prev[path[-1]])
        path.reverse()
        hops = [f"{a} ({mods[a].relative_to(pkg_root.parent)}:{graph[a][b]})" for a, b in zip(path, path[1:])]
        lines.append(" -> ".join(hops + [start]))
    return lines


def test_no_import_cycles():
    cycles = import_cycles(PKG)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_cycle_check_reports_lazy_and_package_cycles(tmp_path):
    pkg = tmp_path / "mixdp_core"
    (pkg / "m" / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "m" / "__init__.py").write_text("from . import a, e\n")
    (pkg / "m" / "a.py").write_text("from .b import f\n")
    (pkg / "m" / "b.py").write_text("def f():\n    from . import a\n")  # lazy: still a cycle
    (pkg / "m" / "e.py").write_text("from .f import F\n")  # m runs already: no edge back to m
    (pkg / "m" / "f.py").write_text("F = 1\n")
    (pkg / "m" / "sub" / "__init__.py").write_text("from .k import K\n")
    (pkg / "m" / "sub" / "k.py").write_text("from ..c import C\nK = 1\n")
    (pkg / "m" / "sub" / "o.py").write_text("O = 1\n")
    (pkg / "m" / "c.py").write_text("from .sub.o import O\nC = 1\n")  # runs sub/__init__, which needs c
    assert sorted(import_cycles(pkg)) == [
        "mixdp_core.m.a (mixdp_core/m/a.py:1) -> mixdp_core.m.b (mixdp_core/m/b.py:2) -> mixdp_core.m.a",
        "mixdp_core.m.c (mixdp_core/m/c.py:1) -> mixdp_core.m.sub (mixdp_core/m/sub/__init__.py:1)"
        " -> mixdp_core.m.sub.k (mixdp_core/m/sub/k.py:1) -> mixdp_core.m.c",
    ]
