"""Rules about how the repository is laid out: the README is a guide (at most 150 lines of at most 160
characters, the rest in docs/), every relative link of the README and docs/ reaches its file and heading,
scripts/ is sorted by job (set-up, test and artifact tools at its top, benchmarks in bench/, research probes
in research/) and runs against the installed package (no ``sys.path`` edits), the product imports no
script, a test reaches a script only through tests/scripts_side.py, nothing imports a research probe, and
no message of the product sends a user to a script (a wheel has no scripts/). Each check also runs on a
sample written to break it, so it is shown to fire."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 150
README_MAX_LINE_CHARS = 160
#: scripts/ by job: its top level (set-up and test scripts, tools that rebuild shipped artifacts) and two folders.
SCRIPTS_TOP_MAX_FILES = 20
SCRIPT_FOLDERS = {"bench", "research"}
#: The one module of tests/ that loads a script (tests/scripts_side.py).
SCRIPTS_DOOR = "tests/scripts_side.py"
#: A markdown link or image: [text](target) with a relative or absolute target, no title.
LINK = re.compile(r"!?\[[^\]]*\]\(([^()\s]+)\)")
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


def research_imports(source: str, probes: set[str]) -> list[int]:
    """Lines that import a research probe: by its name (``probes``: the modules of scripts/research/), as
    ``scripts.research...``, or through a loader call that names research/."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if (name in LOADERS or name == "load_script") and any(
                    isinstance(c, ast.Constant) and isinstance(c.value, str) and "research/" in c.value for c in ast.walk(node)):
                lines.append(node.lineno)
            continue
        else:
            continue
        if any(n.split(".")[0] in probes or n.startswith("scripts.research") for n in names):
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


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a page: lower case, punctuation dropped (not ``-`` or ``_``),
    spaces made ``-``; a repeated heading gets ``-1``, ``-2``, ..."""
    anchors: set[str] = set()
    for line in _outside_code(markdown).splitlines():
        if match := re.match(r"^#{1,6}\s+(.*?)\s*#*$", line):
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            anchor, n = slug, 0
            while anchor in anchors:
                n += 1
                anchor = f"{slug}-{n}"
            anchors.add(anchor)
    return anchors


def _outside_code(markdown: str) -> str:
    """The page without its fenced code blocks (a link there is an example, not a link)."""
    return re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """'target (why)' for each relative link of ``page`` whose file or heading does not exist."""
    text = page.read_text(encoding="utf-8")
    found = []
    for target in LINK.findall(_outside_code(text)):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists() or root.resolve() not in [where, *where.parents]:
            found.append(f"{target} (no such file)")
        elif anchor and where.suffix == ".md" and anchor not in heading_anchors(where.read_text(encoding="utf-8")):
            found.append(f"{target} (no such heading)")
    return found


def _offenders(folders: tuple[str, ...], check, pattern: str = "*.py") -> dict[str, list[int]]:
    found = {}
    for folder in folders:
        for path in sorted((ROOT / folder).rglob(pattern)):
            lines = check(path.read_text(encoding="utf-8"))
            if lines:
                found[path.relative_to(ROOT).as_posix()] = lines
    return found


def test_the_readme_is_a_guide_of_at_most_150_lines_of_at_most_160_characters():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.count("\n")
    assert lines <= README_MAX_LINES, (f"README.md has {lines} lines (at most {README_MAX_LINES}): move measurements, "
                                       "method and notes to a topic file in docs/ and link it")
    long = [n for n, line in enumerate(text.splitlines(), 1) if len(line) > README_MAX_LINE_CHARS]
    assert long == [], f"README.md lines {long} are over {README_MAX_LINE_CHARS} characters: say less, or link docs/"


def test_relative_links_of_the_readme_and_docs_reach_their_file_and_heading():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = {page.relative_to(ROOT).as_posix(): broken_links(page) for page in pages}
    assert {page: links for page, links in found.items() if links} == {}


def test_scripts_are_sorted_by_job():
    top = [p.name for p in (ROOT / "scripts").iterdir() if p.is_file()]
    folders = {p.name for p in (ROOT / "scripts").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert len(top) <= SCRIPTS_TOP_MAX_FILES, f"scripts/ has {len(top)} files at its top: benchmarks go to bench/, probes to research/"
    assert folders == SCRIPT_FOLDERS, f"scripts/ has the folders {sorted(folders)}; expected {sorted(SCRIPT_FOLDERS)}"


def test_scripts_do_not_edit_sys_path():
    assert _offenders(("scripts",), sys_path_edits) == {}, "scripts/ must import the installed package"


def test_the_product_imports_no_script():
    assert _offenders(("mlx_sdm", "tui"), script_imports) == {}, "a wheel has no scripts/: move the code into the package"


def test_a_test_reaches_a_script_only_through_one_door():
    found = {f: lines for f, lines in _offenders(("tests",), script_imports).items() if f != SCRIPTS_DOOR}
    assert found == {}, f"load a scripts-side tool with {SCRIPTS_DOOR}'s load_script"


def test_nothing_imports_a_research_probe():
    probes = {p.stem for p in (ROOT / "scripts" / "research").glob("*.py")}
    found = {f: lines for f, lines in _offenders(("mlx_sdm", "tui", "tests", "scripts"), lambda s: research_imports(s, probes)).items()
             if not f.startswith("scripts/research/")}
    assert found == {}, "scripts/research/ holds one-off probes: what a tool or test needs lives outside it"


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
    assert script_imports("from mlx_sdm.usecases import review_loop\n") == []
    assert research_imports("from choose_defaults import LOADERS\nimport scripts.research.x\n", {"choose_defaults"}) == [1, 2]
    assert research_imports("x = load_script('research/probe.py')\ny = load_script('bench/review_loop.py')\n", set()) == [1]
    assert research_imports("from corpus_plan import check_everyday\n", {"choose_defaults"}) == []
    assert script_mentions('"""Built by scripts/x.py."""\nMSG = "rebuild it with scripts/x.py"\n') == [2]
    assert script_mentions('MSG = f"rebuild {1} with scripts/x.py"\n') == [1]
    assert script_mentions('"""scripts/x.py"""\n# scripts/y.py\n') == []
    assert work_items('"""Built for issue 19 item 6."""\nx = 1  # see issues 18 and 20\nissued = 3\n') == [1, 2]
    assert machine_paths("spec: `/work/shared/spec.md`\nrun `--work /tmp/gaps`\n`mlx_sdm/lm/x.py`, $PWD/work/x, /usr/bin/time\n") == [1, 2]


def test_the_link_check_fires_on_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Side by side (scripts/x.py)\n## Side by side (scripts/x.py)\n")
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/a.md#side-by-side-scriptsxpy) [ok](docs/a.md#side-by-side-scriptsxpy-1) "
                    "[web](https://x.org/y) ![img](docs/a.md)\n[gone](docs/b.md) [bad](docs/a.md#nope)\n"
                    "```\n[in code](nowhere.md)\n```\n")
    assert broken_links(page, tmp_path) == ["docs/b.md (no such file)", "docs/a.md#nope (no such heading)"]
