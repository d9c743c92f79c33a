"""For scripts that need the repository's test fixtures (tiny models built in code): the checkout's
``tests/`` package, imported as ``tests`` so its own ``from tests.… import`` lines resolve. A script
run as ``python scripts/NAME.py`` finds this module beside it (Python puts the script's folder first)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def repository_tests():
    """The tests/ package of this checkout (its fixtures are not part of the installed package)."""
    if "tests" not in sys.modules:
        folder = Path(__file__).resolve().parents[1] / "tests"
        spec = importlib.util.spec_from_file_location("tests", folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        module = importlib.util.module_from_spec(spec)
        sys.modules["tests"] = module
        spec.loader.exec_module(module)
    return sys.modules["tests"]
