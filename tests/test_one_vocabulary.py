"""The verdict's status vocabulary is declared once (mlx_sdm/network/verdict.VerdictStatus): no other
module of the product declares a status enum or spells a status word as a string literal (SQL in the
store's migrations and comments aside)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "mlx_sdm" / "network" / "verdict.py"
WORDS = {"verified", "not_verified", "out_of_scope", "no_verifier", "unverifiable"}


def _declarations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    keys = {id(k) for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys if k is not None}
    keys |= {id(n.slice) for n in ast.walk(tree) if isinstance(n, ast.Subscript)}  # field names ("verified": bool)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name.endswith("Status") and any(
                isinstance(b, ast.Attribute) and b.attr == "Enum" or isinstance(b, ast.Name) and b.id == "Enum"
                for b in node.bases):
            values = {getattr(s.value, "value", None) for s in node.body if isinstance(s, ast.Assign)}
            if values & WORDS:
                found.append(f"{path.name}:{node.lineno} class {node.name}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in WORDS and id(node) not in keys:
            found.append(f"{path.name}:{node.lineno} {node.value!r}")
    return found


def test_the_status_vocabulary_is_declared_once():
    offenders = []
    for path in sorted([*(ROOT / "mlx_sdm").rglob("*.py"), *(ROOT / "tui").rglob("*.py")]):
        if path != HOME:
            offenders += _declarations(path)
    assert offenders == [], "use mlx_sdm.network.verdict.VerdictStatus: " + ", ".join(offenders)


def test_the_check_fires():
    sample = ROOT / "tests" / "__pycache__" / "status_sample.py"
    sample.parent.mkdir(exist_ok=True)
    sample.write_text('from enum import Enum\nclass TurnStatus(str, Enum):\n    A = "verified"\n'
                      'x = "out_of_scope"\nrow = {"verified": True}\n')
    try:  # the class, its value and the loose word; a field named "verified" is not a status word
        assert len(_declarations(sample)) == 3
    finally:
        sample.unlink()
