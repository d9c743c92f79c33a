"""The layering docs/architecture.md draws, enforced: each module imports only from its own layer or the
layers below it (function-level imports included). An upward import fails this test, naming the
file, line and the import; `test_an_upward_import_is_flagged` shows it on a module written for it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Bottom to top. A module's layer is the longest prefix of its dotted name listed here.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("platform", ("mlx_sdm", "mlx_sdm.errors", "mlx_sdm.atomic", "mlx_sdm.blas", "mlx_sdm.jsonl", "mlx_sdm.resources",
                  "mlx_sdm.progress")),
    ("calibration", ("mlx_sdm.calibration",)),
    ("datasets", ("mlx_sdm.datasets",)),  # shipped data sets, loaded as the calibration layer's LabelledSet
    ("lm", ("mlx_sdm.lm",)),
    ("network", ("mlx_sdm.network",)),
    # monitor/, room by room: the session-file format, then the online monitors, the fitted forecast, offline evaluation
    ("monitor.session_file", ("mlx_sdm.monitor", "mlx_sdm.monitor.session_file")),
    ("monitor.online", ("mlx_sdm.monitor.online",)),
    ("monitor.forecast", ("mlx_sdm.monitor.forecast",)),
    ("monitor.evaluation", ("mlx_sdm.monitor.evaluation",)),
    # a turn's three rooms: the turn itself (no thread, store or UI), the SQLite store, the executor that runs both
    ("turn", ("mlx_sdm.turn",)),
    ("store", ("mlx_sdm.store",)),
    ("executor", ("mlx_sdm.executor",)),
    ("usecases", ("mlx_sdm.usecases",)),
    ("server", ("mlx_sdm.server",)),
    ("interfaces", ("mlx_sdm.commands", "mlx_sdm.cli", "mlx_sdm.__main__", "tui")),
)
RANK = {prefix: rank for rank, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes}
NAME = {rank: name for rank, (name, _) in enumerate(LAYERS)}


def layer_of(module: str) -> int | None:
    """The rank of the layer ``module`` belongs to (None for third-party modules)."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in RANK:
            return RANK[prefix]
    return None


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, imported module) for every import statement in the file, nested ones included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names if layer_of(f"{base}.{alias.name}")
                      not in (None, layer_of(base))]
    return sorted(found)


def upward_imports(root: Path, packages: tuple[str, ...] = ("mlx_sdm", "tui")) -> list[str]:
    """Every import of a higher layer, as 'file:line: module (layer) imports target (layer)'."""
    problems = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(path, root)
            own = layer_of(module)
            for line, target in imports_of(path, module):
                theirs = layer_of(target)
                if own is not None and theirs is not None and theirs > own:
                    problems.append(f"{path.relative_to(root)}:{line}: {module} ({NAME[own]}) imports {target} "
                                    f"({NAME[theirs]})")
    return problems


def test_no_module_imports_a_higher_layer():
    assert upward_imports(ROOT) == []


def test_an_upward_import_is_flagged(tmp_path):
    """An online monitor that imports the session layer (the old session-format dependency) or the offline
    evaluation room is caught, nested in a function or not; a downward import is not."""
    online = tmp_path / "mlx_sdm" / "monitor" / "online"
    online.mkdir(parents=True)
    (tmp_path / "mlx_sdm" / "__init__.py").write_text("")
    (tmp_path / "mlx_sdm" / "monitor" / "__init__.py").write_text("")
    (online / "__init__.py").write_text("")
    (online / "bad.py").write_text(
        "from mlx_sdm.calibration.estimator import Verdict\n"
        "def later():\n    from mlx_sdm.executor import format\n"
        "from . import sibling\nfrom ...usecases import loading\n"
        "from ..session_file.records import Session\nfrom ..evaluation import heldout\n"
    )
    problems = upward_imports(tmp_path, packages=("mlx_sdm",))
    assert problems == [
        "mlx_sdm/monitor/online/bad.py:3: mlx_sdm.monitor.online.bad (monitor.online) imports mlx_sdm.executor (executor)",
        "mlx_sdm/monitor/online/bad.py:5: mlx_sdm.monitor.online.bad (monitor.online) imports mlx_sdm.usecases (usecases)",
        "mlx_sdm/monitor/online/bad.py:7: mlx_sdm.monitor.online.bad (monitor.online) imports mlx_sdm.monitor.evaluation "
        "(monitor.evaluation)",
    ]


@pytest.mark.parametrize("module, layer", [
    ("mlx_sdm.errors", "platform"), ("mlx_sdm.calibration.knn", "calibration"), ("mlx_sdm.datasets.spam", "datasets"), ("mlx_sdm.lm.prompt", "lm"),
    ("mlx_sdm.network.verdict", "network"), ("mlx_sdm.monitor.session_file.records", "monitor.session_file"),
    ("mlx_sdm.monitor.online.auq", "monitor.online"), ("mlx_sdm.monitor.evaluation.heldout", "monitor.evaluation"),
    ("mlx_sdm.turn.pipeline", "turn"), ("mlx_sdm.store.chat_store", "store"),
        ("mlx_sdm.executor.engine", "executor"), ("mlx_sdm.usecases.loading", "usecases"), ("tui.app", "interfaces"),
    ("mlx_sdm.commands.chat", "interfaces"),
])
def test_layer_of(module, layer):
    assert NAME[layer_of(module)] == layer
    assert layer_of("numpy.linalg") is None
