"""docs/turn.md, the walk of one turn, cannot drift: the files it names exist, each file on the way in
imports the next, each value it names is defined in the module it gives and used by the file it goes to,
and docs/architecture.md walks the same files in the same order."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_layers import imports_of, module_name

ROOT = Path(__file__).resolve().parents[1]
WALK = ROOT / "docs" / "turn.md"
#: The map of the layers, whose numbered walk names the same files (linked) in the same order.
ARCHITECTURE = ROOT / "docs" / "architecture.md"
#: | step | `file` | what it does | `value` or - | `module` or - |
ROW = re.compile(r"^\| (\d+) \| `([^`]+)` \| .* \| (`[^`]+`|[^|]*?) \| (`[^`]+`|-) \|$")


def steps(text: str) -> list[tuple[int, str, str | None, str | None]]:
    """(step, file, the value that crosses to the next file, where it is defined) of every row of the walk."""
    found = []
    for line in text.splitlines():
        match = ROW.match(line)
        if match:
            number, path, value, module = match.groups()
            found.append((int(number), path, value.strip("` ") if value.startswith("`") else None,
                          module.strip("`") if module != "-" else None))
    return found


def defined_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return names


def imported_modules(path: Path) -> set[str]:
    return {target for _, target in imports_of(path, module_name(path, ROOT))}


def walk() -> list[tuple[int, str, str | None, str | None]]:
    return steps(WALK.read_text(encoding="utf-8"))


def test_the_walk_is_numbered_and_names_files_that_exist():
    rows = walk()
    assert [n for n, *_ in rows] == list(range(1, len(rows) + 1)) and len(rows) >= 8
    for _, path, _, module in rows:
        assert (ROOT / path).is_file(), f"docs/turn.md names {path}, which does not exist"
        assert module is None or (ROOT / module).is_file(), f"docs/turn.md names {module}, which does not exist"


def test_each_file_on_the_way_in_imports_the_next():
    text = WALK.read_text(encoding="utf-8")
    way_in = steps(text[: text.index("## The way back")])
    for (_, here, _, _), (_, there, _, _) in zip(way_in, way_in[1:]):
        target = module_name(ROOT / there, ROOT)
        assert target in imported_modules(ROOT / here), f"docs/turn.md: {here} does not import {there}"


def test_each_value_is_defined_where_the_walk_says_and_used_by_the_file_it_goes_to():
    rows = walk()
    for (_, here, value, module), nxt in zip(rows, rows[1:] + [None]):
        if value is None or module is None:
            continue
        assert value in defined_names(ROOT / module), f"docs/turn.md: {value} is not defined in {module}"
        assert nxt is not None and re.search(rf"\b{value}\b", (ROOT / nxt[1]).read_text(encoding="utf-8")), \
            f"docs/turn.md: {value} does not reach {nxt[1] if nxt else 'a next file'}"


def test_the_values_table_names_where_each_value_lives():
    text = WALK.read_text(encoding="utf-8")
    table = text[text.index("## The values"):]
    rows = re.findall(r"^\| `(\w+)` \| `([^`]+)` \|", table, re.MULTILINE)
    assert len(rows) >= 8
    for value, module in rows:
        assert value in defined_names(ROOT / module), f"docs/turn.md: {value} is not defined in {module}"


def test_the_architecture_page_walks_the_same_files_in_the_same_order():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index("## Follow a prompt to the screen")
    section = text[start:text.index("```", start)]
    named = re.findall(r"^\d+\. \[`([^`]+)`\]\(\.\./([^)]+)\)", section, re.MULTILINE)
    assert all(shown == linked for shown, linked in named), "docs/architecture.md links a file under another name"
    assert [shown for shown, _ in named] == [path for _, path, *_ in walk()], \
        "docs/architecture.md's walk and docs/turn.md's are not the same walk"


def test_the_parser_reads_a_row_and_skips_others():
    assert steps("| 3 | `a/b.py` | does x | `TurnRequest` | `a/turn.py` |\n| x | y |\n") == [(3, "a/b.py", "TurnRequest", "a/turn.py")]
    assert steps("| 7 | `a/c.py` | does y | - | - |\n") == [(7, "a/c.py", None, None)]
