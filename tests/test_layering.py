"""Architecture: each layer imports only from the layers above it (DESIGN §1)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "learn_to_shard"
ORDER = ["units", "errors", "jsonio", "arrays", "model", "hardware", "engines", "workload",
         "parallel", "cost", "serving", "search", "fidelity", "report", "api", "sweep", "cli"]
# Same-rank layers must not import each other; units and jsonio may use errors.
RANK = {"errors": 0, "units": 0.5, "jsonio": 0.5, "arrays": 0.5, "model": 1, "hardware": 1,
        "workload": 1, "engines": 1,
        "parallel": 2, "cost": 3, "serving": 3.5, "search": 4, "fidelity": 4.5, "report": 5,
        "api": 6, "sweep": 6.5, "cli": 7}


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


#: Private members a module still reads from another module, as ``module -> names``
#: (``import _X`` for a private name imported by name). This list may only shrink: a new
#: access fails ``test_no_module_reaches_into_another_modules_private_members``, and an entry
#: no longer used fails it too, so it is removed. It is empty: the exact solver's tables
#: (``search/exact_tables.py``) read the per-operator terms through the public methods of
#: ``cost/terms.py``.
ALLOWED_PRIVATE: dict[str, set[str]] = {}
#: Underscore names that are public API by convention (namedtuple, enum).
_PUBLIC_BY_CONVENTION = {"_replace", "_asdict", "_fields", "_make", "_value_", "_name_",
                         "_missing_", "_generate_next_value_"}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _foreign_private(path: Path) -> set[str]:
    """Private names ``path`` uses that it does not define: ``obj._name`` where no function,
    class, assignment or attribute store of this module defines ``_name``, and
    ``from learn_to_shard... import _name``."""
    tree = ast.parse(path.read_text())
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.arg):
            own.add(node.arg)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (
                node.level or (node.module or "").startswith("learn_to_shard")):
            found.update(f"import {a.name}" for a in node.names if _is_private(a.name))
        elif (isinstance(node, ast.Attribute) and _is_private(node.attr)
              and node.attr not in own and node.attr not in _PUBLIC_BY_CONVENTION):
            found.add(node.attr)
    return found


def test_no_module_reaches_into_another_modules_private_members():
    new, stale = [], []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        used = _foreign_private(path)
        allowed = ALLOWED_PRIVATE.get(rel, set())
        new += [f"{rel} uses {name}" for name in sorted(used - allowed)]
        stale += [f"{rel}: {name}" for name in sorted(allowed - used)]
    assert not new, ("private members of another module (make them public API, or move the "
                     "code beside them):\n" + "\n".join(new))
    assert not stale, "no longer used; remove from ALLOWED_PRIVATE:\n" + "\n".join(stale)


def test_private_member_check_sees_attribute_and_import(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("from .model import CostModel, _Link\n"
                   "class A:\n    def __init__(self):\n        self._mine = 1\n"
                   "def f(cm: CostModel, a: A):\n    return cm._layer(a._mine), cm.__class__\n")
    assert _foreign_private(mod) == {"import _Link", "_layer"}
