"""The one door from a test to a tool under scripts/ (the session corpus, the review-loop benchmark): the
module is loaded from its path under its own name, as Python loads a script's neighbour, so the tool's
``from corpus_plan import ...`` lines resolve once that neighbour is loaded (load it first). The research
probes of scripts/research/ are never loaded: nothing imports them (tests/test_repository_rules.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
RESEARCH = "research"


def load_script(relative: str):
    """``scripts/<relative>`` (e.g. ``"corpus_plan.py"``, ``"bench/review_loop.py"``) as a module named after its file."""
    path = SCRIPTS / relative
    if path.relative_to(SCRIPTS).parts[0] == RESEARCH:
        raise ValueError(f"scripts/{relative} is a research probe: no test imports it")
    name = path.stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before it runs: its dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name]
