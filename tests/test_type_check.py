"""The seams a type checker holds: mypy over the turn, the executor, the server, the store and the numeric core
(``[tool.mypy]`` in pyproject.toml names them) finds no error. Each real class is held to the Protocol it implements
there (``turn/seams.py``): a verifier, a session monitor or the review service that drifts from what the turn asks of
it fails this test, naming the file and line."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="needs mypy (pip install -e '.[test]')")
def test_the_checked_packages_have_no_type_errors(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                          "--cache-dir", str(tmp_path / "mypy-cache"), "--no-error-summary"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert run.returncode == 0 and errors == [], "\n".join(errors) or run.stdout + run.stderr
