"""Architecture: each layer imports only from the layers above it (DESIGN §1)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "learn_to_shard"
ORDER = ["units", "errors", "jsonio", "model", "hardware", "workload", "parallel", "cost", "search",
         "report", "api", "sweep", "cli"]
# Same-rank layers must not import each other; units and jsonio may use errors.
RANK = {"errors": 0, "units": 0.5, "jsonio": 0.5, "model": 1, "hardware": 1, "workload": 1,
        "parallel": 2, "cost": 3, "search": 4, "report": 5, "api": 6, "sweep": 6.5, "cli": 7}


def _layer(rel: Path) -> str | None:
    top = rel.parts[0]
    name = top[:-3] if top.endswith(".py") else top
    return name if name in RANK else None


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    pkg_parts = path.relative_to(PKG).parts[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg_parts[: len(pkg_parts) - node.level + 1])
                mod = base + (node.module.split(".") if node.module else [])
                if mod:
                    found.add(mod[0])
                else:
                    found.update(a.name for a in node.names)
            elif node.module and node.module.startswith("learn_to_shard."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("learn_to_shard."):
                    found.add(a.name.split(".")[1])
    return found


def test_imports_flow_one_way():
    bad = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        me = _layer(rel)
        if me is None:
            continue
        for dep in _imports(path):
            if dep in RANK and dep != me and RANK[dep] >= RANK[me]:
                bad.append(f"{rel} ({me}) imports {dep}")
    assert not bad, "layering broken:\n" + "\n".join(bad)
