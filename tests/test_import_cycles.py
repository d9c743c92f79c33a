"""No import circles in mlx_sdm/ and tui/: every ``import`` and ``from ... import`` (function-level and
``TYPE_CHECKING`` ones included) is an edge of the module graph, and the graph has no cycle. A cycle fails
the test naming its modules and the file:line of each import; `test_a_cycle_is_named` shows it on modules
written for it.

And no re-export façades: a project name is imported from the module that defines it, never through a
module that only imports it (mlx_sdm/, tui/, tests/ and scripts/ alike)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_layers import module_name

ROOT = Path(__file__).resolve().parents[1]


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    return {module_name(path, root): path for package in packages for path in sorted((root / package).rglob("*.py"))}


def import_edges(root: Path, packages: tuple[str, ...] = ("mlx_sdm", "tui")) -> dict[str, dict[str, str]]:
    """{module: {imported module: "file:line"}} for the modules of ``packages``, only edges between them.
    ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``."""
    files = module_files(root, packages)
    edges: dict[str, dict[str, str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found = edges.setdefault(module, {})
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            for target in targets:
                if target in files and target != module:
                    found.setdefault(target, f"{path.relative_to(root)}:{node.lineno}")
    return edges


def find_cycle(edges: dict[str, dict[str, str]]) -> list[str] | None:
    """One cycle as [m0, m1, ..., m0], or None. Depth-first search, modules and edges in sorted order."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(edges.get(module, {})):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[module] = 2
        path.pop()
        return None

    for module in sorted(edges):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def describe(cycle: list[str], edges: dict[str, dict[str, str]]) -> str:
    return "import cycle: " + " -> ".join(cycle) + "\n" + "\n".join(
        f"  {edges[a][b]}: {a} imports {b}" for a, b in zip(cycle, cycle[1:]))


def test_no_import_cycles():
    edges = import_edges(ROOT)
    assert len(edges) > 100
    cycle = find_cycle(edges)
    assert cycle is None, describe(cycle, edges)


def test_a_cycle_is_named(tmp_path):
    """A cycle through a function-level import and a relative one is found and named; a chain is not a cycle."""
    pkg = tmp_path / "mlx_sdm" / "monitor"
    pkg.mkdir(parents=True)
    (tmp_path / "mlx_sdm" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import numpy\nfrom mlx_sdm.monitor.b import thing\n")
    (pkg / "b.py").write_text("thing = 1\n")
    (pkg / "c.py").write_text("from mlx_sdm.monitor import a\n")
    assert find_cycle(import_edges(tmp_path, ("mlx_sdm",))) is None
    (pkg / "b.py").write_text("thing = 1\ndef later():\n    from . import c\n")
    edges = import_edges(tmp_path, ("mlx_sdm",))
    cycle = find_cycle(edges)
    assert cycle == ["mlx_sdm.monitor.a", "mlx_sdm.monitor.b", "mlx_sdm.monitor.c", "mlx_sdm.monitor.a"]
    assert describe(cycle, edges).splitlines()[1:] == [
        "  mlx_sdm/monitor/a.py:2: mlx_sdm.monitor.a imports mlx_sdm.monitor.b",
        "  mlx_sdm/monitor/b.py:3: mlx_sdm.monitor.b imports mlx_sdm.monitor.c",
        "  mlx_sdm/monitor/c.py:1: mlx_sdm.monitor.c imports mlx_sdm.monitor.a",
    ]


def top_level_names(path: Path) -> tuple[set[str], dict[str, str]]:
    """(names the module defines, {name it imports from a project module: that module}) at its top level
    (inside ``if``/``try`` blocks too)."""
    defined: set[str] = set()
    imported: dict[str, str] = {}
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    nodes = [n for top in tree.body for n in ([top] if not isinstance(top, (ast.If, ast.Try)) else ast.walk(top))]
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in PROJECT:
            imported.update({alias.asname or alias.name: node.module for alias in node.names})
    return defined, imported


PROJECT = ("mlx_sdm", "tui")


def passthrough_imports(root: Path, packages: tuple[str, ...] = ("mlx_sdm", "tui", "tests", "scripts")) -> list[str]:
    """'file:line: from M import X (defined in D)' for every import of a project name through a module M
    that does not define it but imports it from D."""
    files = module_files(root, PROJECT)
    names = {module: top_level_names(path) for module, path in files.items()}
    problems = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
                if not (isinstance(node, ast.ImportFrom) and not node.level and node.module in names):
                    continue
                defined, imported = names[node.module]
                for alias in node.names:
                    if alias.name not in defined and f"{node.module}.{alias.name}" not in files and alias.name in imported:
                        problems.append(f"{path.relative_to(root)}:{node.lineno}: from {node.module} import {alias.name} "
                                        f"(defined in {imported[alias.name]})")
    return problems


def test_names_are_imported_from_where_they_are_defined():
    assert passthrough_imports(ROOT) == []


def test_a_passthrough_import_is_named(tmp_path):
    pkg = tmp_path / "mlx_sdm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "records.py").write_text("class Record:\n    pass\n")
    (pkg / "store.py").write_text("import json\nfrom mlx_sdm.records import Record\nclass Store:\n    pass\n")
    (pkg / "user.py").write_text("from mlx_sdm.store import Store\nfrom mlx_sdm.records import Record\n")
    assert passthrough_imports(tmp_path, ("mlx_sdm",)) == []
    (pkg / "user.py").write_text("def later():\n    from mlx_sdm.store import Record, Store\n")
    assert passthrough_imports(tmp_path, ("mlx_sdm",)) == [
        "mlx_sdm/user.py:2: from mlx_sdm.store import Record (defined in mlx_sdm.records)"]
