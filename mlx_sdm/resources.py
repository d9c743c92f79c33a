"""Where the shipped artifacts live (default verifier, default head).

In a checkout they are in the top-level ``weights/`` folder; in an installed wheel the build puts
the same files inside the package (``mlx_sdm/weights``), found through ``importlib.resources``.
Every caller asks here; nothing else computes a path to ``weights/``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

DEFAULT_VERIFIER_NAME = "smollm2-fever"
DEFAULT_HEAD_NAME: str | None = None


def weights_root() -> Path:
    """The folder holding the shipped verifiers and heads (package data first, then the checkout)."""
    packaged = Path(str(resources.files("mlx_sdm") / "weights"))
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[1] / "weights"


def shipped(name: str) -> Path:
    """The folder of one shipped artifact, e.g. ``shipped("smollm2-bbc-topic")``."""
    return weights_root() / name


def default_verifier_dir() -> Path:
    return shipped(DEFAULT_VERIFIER_NAME)


def default_head_dir() -> Path | None:
    return shipped(DEFAULT_HEAD_NAME) if DEFAULT_HEAD_NAME else None
