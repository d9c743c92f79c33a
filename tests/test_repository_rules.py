"""Rules about how the repository is laid out: the README is a guide (at most 300 lines, the rest in
docs/), scripts/ runs against the installed package (no ``sys.path`` edits), no test imports a script,
and no message of the product sends a user to a script (a wheel has no scripts/). Each check also runs
on a sample written to break it, so it is shown to fire."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300
#: Calls that load a module from a path or name; one whose arguments mention scripts/ imports a script.
LOADERS = {"spec_from_file_location", "run_path", "run_module", "import_module", "SourceFileLoader"}
#: A project work item cited by number ("issue 19", "issues 18 and 20"): the product speaks of itself.
WORK_ITEM = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
#: A path on some machine (not in the repository): /tmp, /work, /home, /Users, /opt, /var, /mnt.
MACHINE_PATH = re.compile(r"(?<![\w.$/-])/(?:tmp|work|home|Users|opt|var|mnt)/")
#: Product files that still name a script in a message, waiting for their owner's change. The list only
#: shrinks: test_the_pending_list_holds_only_real_offenders fails once a file here is clean.
PENDING: set[str] = set()


def sys_path_edits(source: str) -> list[int]:
    """Lines that touch ``sys.path`` (insert, append, assignment, ``site.addsitedir``)."""
    tree = ast.parse(source)
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) \
                and node.value.id == "sys":
            lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "addsitedir":
            lines.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "sys.path" in node.value:
            lines.append(node.lineno)  # code run by another interpreter
    return sorted(set(lines))


def script_imports(source: str) -> list[int]:
    """Lines that import from scripts/ (an import statement, or a loader call naming the folder)."""
    tree = ast.parse(source)
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "scripts" or a.name.startswith("scripts.") for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "scripts":
            lines.append(node.lineno)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in LOADERS and any(isinstance(c, ast.Constant) and isinstance(c.value, str) and "scripts" in c.value
                                       for c in ast.walk(node)):
                lines.append(node.lineno)
    return lines


def _docstring_nodes(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, kinds) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def script_mentions(source: str) -> list[int]:
    """Lines of string literals (not docstrings, not comments) that name a file under scripts/."""
    tree = ast.parse(source)
    docs = _docstring_nodes(tree)
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and "scripts/" in n.value and id(n) not in docs]


def work_items(source: str) -> list[int]:
    """Lines that cite a project work item by its number (code, comments, messages and reports alike)."""
    return [n for n, line in enumerate(source.splitlines(), 1) if WORK_ITEM.search(line)]


def machine_paths(source: str) -> list[int]:
    """Lines that name a path outside the repository."""
    return [n for n, line in enumerate(source.splitlines(), 1) if MACHINE_PATH.search(line)]


def _offenders(folders: tuple[str, ...], check, pattern: str = "*.py") -> dict[str, list[int]]:
    found = {}
    for folder in folders:
        for path in sorted((ROOT / folder).rglob(pattern)):
            lines = check(path.read_text(encoding="utf-8"))
            if lines:
                found[path.relative_to(ROOT).as_posix()] = lines
    return found


def test_the_readme_is_a_guide_of_at_most_300_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (f"README.md has {lines} lines (at most {README_MAX_LINES}): move measurements, "
                                       "method and notes to a topic file in docs/ and link it")


def test_scripts_do_not_edit_sys_path():
    assert _offenders(("scripts",), sys_path_edits) == {}, "scripts/ must import the installed package"


def test_no_test_imports_a_script():
    assert _offenders(("tests",), script_imports) == {}, "move what the test needs into the package"


def test_no_product_message_names_a_script():
    found = {f: lines for f, lines in _offenders(("mlx_sdm", "tui"), script_mentions).items() if f not in PENDING}
    assert found == {}, "a wheel has no scripts/: name a command (mlx-sdm ...) or a file the install has"


def test_no_work_item_numbers_in_the_product_or_its_tools():
    found = _offenders(("mlx_sdm", "tui", "scripts"), work_items)
    assert found == {}, "say what the code does, not which work item asked for it"


def test_no_machine_paths_in_the_docs():
    found = {**_offenders(("docs",), machine_paths, "*.md"), **({"README.md": machine_paths(
        (ROOT / "README.md").read_text(encoding="utf-8"))} if machine_paths((ROOT / "README.md").read_text(encoding="utf-8")) else {})}
    assert found == {}, "docs name files in the repository (or a placeholder such as $SDK_VENV, work/)"


def test_the_pending_list_holds_only_real_offenders():
    for name in PENDING:
        assert script_mentions((ROOT / name).read_text(encoding="utf-8")), f"{name} is clean: drop it from PENDING"


def test_each_check_fires_on_a_sample_written_to_break_it():
    assert sys_path_edits("import sys\nsys.path.insert(0, 'x')\n") == [2]
    assert sys_path_edits("import sys\nCODE = 'import sys; sys.path.append(1)'\n") == [2]
    assert sys_path_edits("import sys\nprint(sys.argv)\n") == []
    assert script_imports("from scripts.review_loop import main\n") == [1]
    assert script_imports("import scripts.x\n") == [1]
    assert script_imports("import importlib.util as u\nu.spec_from_file_location('m', 'scripts/x.py')\n") == [2]
    assert script_imports("from mlx_sdm.app import review_loop\n") == []
    assert script_mentions('"""Built by scripts/x.py."""\nMSG = "rebuild it with scripts/x.py"\n') == [2]
    assert script_mentions('MSG = f"rebuild {1} with scripts/x.py"\n') == [1]
    assert script_mentions('"""scripts/x.py"""\n# scripts/y.py\n') == []
    assert work_items('"""Built for issue 19 item 6."""\nx = 1  # see issues 18 and 20\nissued = 3\n') == [1, 2]
    assert machine_paths("spec: `/work/shared/spec.md`\nrun `--work /tmp/gaps`\n`mlx_sdm/lm/x.py`, $PWD/work/x, /usr/bin/time\n") == [1, 2]
