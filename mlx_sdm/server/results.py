"""Typed values the backend hands the HTTP layer (no MLX, no HTTP): a streamed token and a served answer with its
verdict (the turn's own :class:`~mlx_sdm.network.verdict.DocumentVerdict`, made JSON by :mod:`mlx_sdm.server.verdicts`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.server.verdicts import verdict_body
from mlx_sdm.server.wire import TokenLogprob, usage_object


@dataclass(frozen=True)
class ServedToken:
    """One answer token as the stream sends it: the turn's own piece, and its log-prob with the
    alternatives shaped as OpenAI's logprob entry (None for a detokenizer tail, which has no token)."""

    piece: TokenPiece
    logprob: TokenLogprob | None = None


@dataclass(frozen=True)
class ServedAnswer:
    """One finished (or stopped) completion, built once it is stored: its text, tokens, verdict and where it is."""

    text: str
    finish_reason: str  # stop | length | cancelled
    prompt_tokens: int
    completion_tokens: int
    verdict: DocumentVerdict | None  # None: the answer was stopped before it was judged
    verifier: str | None = None  # the folder of the verifier that judged it
    logprobs: tuple[TokenLogprob, ...] = ()
    session_id: str | None = None
    message_id: int | None = None
    review_id: int | None = None  # its review-queue entry (None: not queued), what POST /v1/reviews/{id} decides
    monitor: dict[str, Any] | None = None  # the turn's monitor reading as JSON (turn/escalation.monitor_payload)
    cached_tokens: int = 0  # prompt tokens whose KV cache came from the previous request
    generation_s: float = 0.0  # decoding time (the verdict comes after it; features are from the same pass)

    def verdict_json(self) -> dict[str, Any]:
        """The answer's ``verdict`` object (:func:`~mlx_sdm.server.verdicts.verdict_body`)."""
        return verdict_body(self.verdict, self.verifier)

    def usage(self) -> dict[str, Any]:
        return usage_object(self.prompt_tokens, self.completion_tokens, self.cached_tokens)
