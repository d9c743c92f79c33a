"""Shared fixtures. Importing mlx_sdm first puts the fast BLAS in place before mlx is imported."""

import os

import mlx_sdm  # noqa: F401  (must precede any `import mlx.core`)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest


@pytest.fixture
def tiny_lm():
    """(model, tokenizer): a 2-layer random llama with a real byte-level BPE tokenizer and ChatML."""
    from tests.tiny_lm import build_tiny_lm

    return build_tiny_lm(seed=0)
