"""Shared fixtures. Importing mlx_sdm first puts the fast BLAS in place before mlx is imported."""

import os

# The suite checks float32 semantics on every device: MLX runs float32 matmuls as TF32 (10-bit mantissa)
# on CUDA GPUs unless this is 0, which would make tolerances derived for float32 meaningless
# (tests/tolerance.py). Set before MLX is imported; a test that wants TF32 can set it explicitly.
os.environ.setdefault("MLX_ENABLE_TF32", "0")

import mlx_sdm  # noqa: F401  (must precede any `import mlx.core`)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest


@pytest.fixture
def tiny_lm():
    """(model, tokenizer): a 2-layer random llama with a real byte-level BPE tokenizer and ChatML."""
    from tests.tiny_lm import build_tiny_lm

    return build_tiny_lm(seed=0)


@pytest.fixture(scope="session")
def smollm2():
    """The embedded SmolLM2-135M-Instruct (float32), loaded once per test session (a LoadedModel)."""
    from mlx_sdm.errors import MissingDependencyError
    from mlx_sdm.lm.loading import load_model

    try:
        return load_model()
    except MissingDependencyError as exc:  # setup installs it; say how when it is missing
        pytest.skip(str(exc))
