"""The package layers import one way only (the README's architecture table, as a test).

Every ``import`` of a ``mixdp_core`` module, including the lazy ones inside functions, is
read from the source with ``ast``; a layer may import only the layers listed for it.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "mixdp_core"

GROUND = {"errors", "registry", "config", "featureset", "_io", "randomness", "__init__"}
#: layer -> layers it may import (besides itself and the ground floor).
ALLOWED: dict[str, set[str]] = {
    "errors": set(), "registry": set(), "featureset": set(), "_io": set(), "randomness": set(),
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


def _imports(path: Path, pkg_root: Path):
    rel = path.relative_to(pkg_root.parent).with_suffix("")
    mod = ".".join(rel.parts)
    pkg = mod[: -len(".__init__")] if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
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
