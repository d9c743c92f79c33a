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


def share_smollm2(monkeypatch: pytest.MonkeyPatch, loaded) -> None:
    """Make the product's ``load_model`` return ``loaded`` (the session's SmolLM2) for the embedded default,
    so an in-process command or pipeline does not load its own copy (5 s a load on 2 busy cores); any
    other model, and the quantized layout, still load for real. Real loading of the default stays covered
    by the :func:`smollm2` fixture itself and by the CLI tests that run ``python -m mlx_sdm`` in a
    subprocess (tests/test_default_verifies_smollm2.py, tests/test_session_smollm2.py, tests/test_wheel.py)."""
    from mlx_sdm.lm import loading

    real = loading.load_model

    def load_model(name_or_path=None, *, quantized: bool = False):
        key = None if name_or_path is None else str(name_or_path)
        if key in loading.EMBEDDED_ALIASES and not quantized:
            return loaded
        return real(name_or_path, quantized=quantized)

    monkeypatch.setattr(loading, "load_model", load_model)


@pytest.fixture
def smollm2_shared(smollm2, monkeypatch):
    """The session's SmolLM2, also returned by the product's ``load_model()`` during the test (:func:`share_smollm2`)."""
    share_smollm2(monkeypatch, smollm2)
    return smollm2


@pytest.fixture(scope="module")
def verifier_dir(tmp_path_factory):
    """A tiny verifier on the tiny random model (tests/tiny_verifier.py), built once per test module."""
    from tests.tiny_verifier import build_tiny_verifier

    return build_tiny_verifier(tmp_path_factory.mktemp("tiny") / "verifier")


@pytest.fixture
def store(tmp_path):
    """An empty chat store of this test's own."""
    from mlx_sdm.store.chat_store import ChatStore

    store = ChatStore(tmp_path / "chat.db")
    yield store
    store.close()
