"""Typed values the backend hands the HTTP layer (no MLX, no HTTP): a streamed token, a served answer and its verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.network.verdict import VerdictStatus
from mlx_sdm.server.wire import TokenLogprob, usage_object


@dataclass(frozen=True)
class ServedToken:
    """One answer token as the stream sends it: the turn's own piece, and its log-prob with the
    alternatives shaped as OpenAI's logprob entry (None for a detokenizer tail, which has no token)."""

    piece: TokenPiece
    logprob: TokenLogprob | None = None


@dataclass(frozen=True)
class ServedExemplar:
    """One nearest training exemplar behind a verdict."""

    id: str
    label: int
    label_text: str  # the label in words ("a correct answer to a similar question")
    text: str | None
    distance: float

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label, "label_text": self.label_text, "text": self.text,
                "distance": self.distance}


@dataclass(frozen=True)
class ServedVerdict:
    """What the verifier says about one answer: ``status`` (a VerdictStatus value), its badge and sentence
    (network/verdict.verdict_words), the calibrated numbers (None when no verifier judged it) and the
    nearest exemplars."""

    status: str  # a VerdictStatus value
    reason: str  # one plain sentence
    reason_code: str | None  # below_threshold | index_flipped | out_of_distribution | predicted_unacceptable | no_verifier | None
    p_lower: float | None = None
    q: int | None = None
    d: float | None = None
    q_bin: int | None = None
    prediction: int | None = None
    badge: str = ""
    exemplars: tuple[ServedExemplar, ...] = ()
    verifier: str | None = None
    judged: Any = field(default=None, compare=False, repr=False)  # the network layer's DocumentVerdict (None: no verdict)

    @property
    def verified(self) -> bool:
        return self.status == VerdictStatus.VERIFIED.value

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status, "verified": self.verified, "reason": self.reason, "reason_code": self.reason_code,
            "badge": self.badge,
            "p_lower": self.p_lower, "q": self.q, "d": self.d, "q_bin": self.q_bin, "prediction": self.prediction,
            "exemplars": [e.to_json() for e in self.exemplars], "verifier": self.verifier,
        }


@dataclass
class ServedAnswer:
    """One finished (or stopped) completion: its text, tokens, verdict and where it was stored."""

    text: str
    finish_reason: str  # stop | length | cancelled
    prompt_tokens: int
    completion_tokens: int
    verdict: ServedVerdict
    logprobs: list[TokenLogprob] = field(default_factory=list)
    session_id: str | None = None
    message_id: int | None = None
    monitor: dict[str, Any] | None = None  # the turn's monitor reading as JSON (turn/escalation.monitor_payload)
    cached_tokens: int = 0  # prompt tokens whose KV cache came from the previous request
    generation_s: float = 0.0  # decoding time (the verdict comes after it; features are from the same pass)

    def usage(self) -> dict[str, Any]:
        return usage_object(self.prompt_tokens, self.completion_tokens, self.cached_tokens)
