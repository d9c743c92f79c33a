"""What a benchmark takes from the checkout rather than the installed package: the repository's test
fixtures (tiny models built in code, ``tests/``) and the tools at the top of ``scripts/``. A script run as
``python scripts/bench/NAME.py`` finds this module beside it (Python puts the script's folder first on its
import path, and not ``scripts/`` itself), so both are loaded from their paths."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path, **spec_options):
    """The module at ``path``, registered as ``name`` before it runs (its dataclasses look themselves up there)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path, **spec_options)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def repository_tests():
    """The tests/ package of this checkout (its fixtures are not part of the installed package), imported as
    ``tests`` so its own ``from tests.… import`` lines resolve."""
    folder = ROOT / "tests"
    return _load("tests", folder / "__init__.py", submodule_search_locations=[str(folder)])


def top_level_script(name: str):
    """``scripts/NAME.py``, under its own name, as a script beside it imports it. A tool that imports another
    tool by name needs that one loaded first (``top_level_script("embed_bbc")`` before ``build_topic_verifier``)."""
    return _load(name, ROOT / "scripts" / f"{name}.py")
