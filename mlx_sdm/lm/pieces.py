"""The one token value of a streamed answer, with no MLX in it: generation yields it
(:func:`mlx_sdm.lm.generation.stream_generate_features`), the turn yields it, and the chat, the server's
stream and ``generate`` read it as it is (the UI imports it without loading MLX)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenPiece:
    """One streamed token: its decoded text, id and log-prob (None for the detokenizer's flushed tail,
    which has no token of its own), which part of the turn it belongs to, and the most likely
    alternatives when asked for."""

    text: str
    token_id: int | None = None
    logprob: float | None = None
    phase: str = "answer"  # "answer" | "reflection"
    top: tuple[tuple[int, float], ...] = ()  # (token id, log-prob), most likely first (TurnOptions.top_logprobs)
