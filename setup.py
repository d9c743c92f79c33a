"""Build hook: the wheel carries the repository's top-level ``weights/`` folder as ``mlx_sdm/weights``.

All metadata is in pyproject.toml. The checkout keeps ``weights/`` where it is (scripts build into it
and the README points at it); ``mlx_sdm/resources.py`` finds the packaged copy first through
``importlib.resources`` and falls back to the checkout's folder, so an installed wheel needs no
checkout. The sdist carries ``weights/`` too (MANIFEST.in), so a wheel built from it is complete.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
WEIGHTS = ROOT / "weights"
PACKAGED_WEIGHTS = ("mlx_sdm", "weights")


class BuildPyWithWeights(build_py):
    """``build_py`` that also copies ``weights/`` to ``<build_lib>/mlx_sdm/weights``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False) or not WEIGHTS.is_dir():
            return  # an editable install reads the checkout's weights/ directly
        target = Path(self.build_lib).joinpath(*PACKAGED_WEIGHTS)
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(WEIGHTS, target, ignore=shutil.ignore_patterns("__pycache__", "*.tmp", ".*"))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        if not getattr(self, "editable_mode", False) and WEIGHTS.is_dir():
            target = Path(self.build_lib).joinpath(*PACKAGED_WEIGHTS)
            outputs += [str(target / f.relative_to(WEIGHTS)) for f in WEIGHTS.rglob("*") if f.is_file()]
        return outputs


setup(cmdclass={"build_py": BuildPyWithWeights})
