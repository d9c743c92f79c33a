"""The server's one adapter to the executor: the chat's own
:class:`~mlx_sdm.executor.turn_service.TurnService`. A chat request is a
:class:`~mlx_sdm.turn.values.TurnRequest` run through it (generate with features in the same pass →
the verifier's :class:`DocumentVerdict`); ``/v1/verify`` is its force-decoding verdict; every served
turn is stored in the chat store as the service records the chat's own (user message + answer +
verdict + review entry in one transaction); review decisions made anywhere (the TUI in another
process included) reach the verifier through the service's ``sync_reviews`` before each verdict.

Everything here runs on the model worker's thread (:mod:`mlx_sdm.server.worker`); the HTTP layer
sees only typed results (:mod:`mlx_sdm.server.results`) and :class:`~mlx_sdm.server.wire.ApiError`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

from mlx_sdm.lm.defaults import DEFAULT_MAX_TOKENS
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.server.results import ServedAnswer, ServedToken
from mlx_sdm.server.wire import ApiError, ChatMessage, ChatRequest, TokenLogprob, VerifyRequest

if TYPE_CHECKING:  # the turn's modules load with the model
    from mlx_sdm.turn.values import TurnOutcome

API_TITLE_PREFIX = "API · "


@dataclass
class BackendConfig:
    """What the server loads: the chat's own choices (``verifier=None``: the model's default)."""

    model: str | None = None
    verifier: str | None = None
    head: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS  # answer budget when a request gives none
    system_prompt: str | None = None  # None: the verifier's own system prompt, as the chat does
    quantized: bool = False
    second_look: bool = True  # everyday answers judged with more answers drawn (a verifier with the member)


@dataclass
class Prepared:
    """A request checked against the model's context: the conversation and its answer budget."""

    messages: list[dict]
    prompt_tokens: int
    max_tokens: int


class SessionBackend:
    """Pipeline, review service and store behind the server. Build and call it on the worker thread only."""

    def __init__(self, config: BackendConfig, store: Any, components: Callable[[Any], Any] | None = None):
        from mlx_sdm.usecases.loading import load_components
        from mlx_sdm.executor.turn_service import TurnService

        self.config = config
        self.store = store
        self.components = components(config) if components is not None else load_components(
            config.model, verifier=config.verifier, head=config.head, embedder="none", quantized=config.quantized)
        self.lm = self.components.lm
        self.service = TurnService(store, self.components)  # the store's review labels join the support sets
        self.model_id = str(self.lm.name)
        self.max_context = int(self.lm.max_context)
        self.created = int(time.time())
        self._sessions: dict[str, str] = {}

    @property
    def verifier_name(self) -> str | None:
        return self.service.verifier_path

    def options(self, max_tokens: int, temperature: float = 0.0, top_logprobs: int = 0, *, monitored: bool = False):
        """Turn options of a served answer: P(True) only for a monitored answer, no reflection (nobody is there to
        give guidance: a paused turn is reported in ``monitor``)."""
        from mlx_sdm.turn.values import TurnOptions

        return TurnOptions(max_tokens=max_tokens, temperature=temperature, system_prompt=self.config.system_prompt,
                           enable_p_true=monitored, generate_reflection=False, top_logprobs=top_logprobs,
                           second_look=self.config.second_look)

    def monitor(self) -> Any:
        """The chat's session monitor for one request (its reading is of the request's own turn, as ``generate``'s)."""
        from mlx_sdm.turn.monitoring import MonitorConfig, SessionMonitor

        return SessionMonitor("api", MonitorConfig(), embedder=self.components.embedder)

    # ------------------------------------------------------------------ requests

    def prepare(self, messages: tuple[ChatMessage, ...], max_tokens: int | None) -> Prepared:
        """Check the prompt (with the system message the pipeline adds) fits the context with the answer
        budget; a 400 naming the field if not."""
        from mlx_sdm.lm.prompt import render_prompt

        chat = [{"role": m.role, "content": m.content} for m in messages]
        ids = render_prompt(self.lm.tokenizer, self.service.pipeline.plan(chat, self.options(1)).messages)
        room = self.max_context - len(ids)
        if room < 1:
            raise ApiError(400, f"messages are {len(ids)} tokens, longer than the model's context of "
                           f"{self.max_context} tokens; shorten the conversation", param="messages",
                           code="context_length_exceeded")
        if max_tokens is not None and max_tokens > room:
            raise ApiError(400, f"messages ({len(ids)} tokens) plus max_tokens ({max_tokens}) exceed the model's "
                           f"context of {self.max_context} tokens; ask for at most {room}", param="max_tokens",
                           code="context_length_exceeded")
        return Prepared(messages=chat, prompt_tokens=len(ids), max_tokens=min(max_tokens or self.config.max_tokens, room))

    def complete(self, request: ChatRequest, prepared: Prepared) -> ServedAnswer:
        """:meth:`stream` run to its end: the served answer (its last item)."""
        for item in self.stream(request, prepared):
            pass
        assert isinstance(item, ServedAnswer)
        return item

    def stream(self, request: ChatRequest, prepared: Prepared,
               stop: threading.Event | None = None) -> Iterator[ServedToken | ServedAnswer]:
        """One turn through the turn service: each answer token as it comes, then the answer, judged and
        stored. Setting ``stop`` (the client went away) ends the answer at the next token."""
        from mlx_sdm.turn.escalation import TurnStatus, monitor_payload
        from mlx_sdm.turn.values import TurnOutcome, TurnRequest

        self.sync_reviews()
        options = self.options(prepared.max_tokens, request.temperature, request.top_logprobs, monitored=True)
        logprobs: list[TokenLogprob] = []
        for item in self.service.stream(TurnRequest(prepared.messages, options), stop=stop or threading.Event(),
                                        monitor=self.monitor()):
            if isinstance(item, TurnOutcome):
                outcome = item
            elif isinstance(item, TokenPiece) and item.phase == "answer":
                served = ServedToken(item, self._logprob(item))
                if served.logprob is not None:
                    logprobs.append(served.logprob)
                yield served
        cancelled = outcome.status is TurnStatus.CANCELLED
        finish = "cancelled" if cancelled else ("length" if outcome.finish_reason == "length" else "stop")
        session_id, message_id = self._store_turn(request.conversation, request.messages, outcome, "api:chat")
        yield ServedAnswer(text=outcome.text, finish_reason=finish, prompt_tokens=outcome.prompt_tokens,
                           completion_tokens=len(outcome.tokens), verdict=outcome.verdict, verifier=self.verifier_name,
                           logprobs=tuple(logprobs), session_id=session_id, message_id=message_id,
                           cached_tokens=outcome.reused_tokens, generation_s=outcome.generation_s,
                           monitor=None if cancelled else monitor_payload(outcome.monitor, outcome.escalation))

    def verify(self, request: VerifyRequest) -> ServedAnswer:
        """Force-decode an answer made elsewhere through the local model, judge it, store the turn."""
        self.sync_reviews()
        prepared = self.prepare(request.messages, None)
        completion_tokens = len(self.lm.tokenizer.encode(request.completion, add_special_tokens=False))
        if prepared.prompt_tokens + completion_tokens + 1 > self.max_context:
            raise ApiError(400, f"messages ({prepared.prompt_tokens} tokens) plus completion ({completion_tokens} "
                           f"tokens) exceed the model's context of {self.max_context} tokens", param="completion",
                           code="context_length_exceeded")
        verified = self.service.judge_text(prepared.messages, request.completion, self.options(1))
        session_id, message_id = self._store_turn(request.conversation, request.messages, verified, "api:verify")
        return ServedAnswer(text=request.completion, finish_reason="stop", prompt_tokens=prepared.prompt_tokens,
                            completion_tokens=completion_tokens, verdict=verified.verdict, verifier=self.verifier_name,
                            session_id=session_id, message_id=message_id)

    # ------------------------------------------------------------------ review decisions

    def sync_reviews(self) -> bool:
        """Review decisions made anywhere since the last verdict join the support sets
        (:meth:`TurnService.sync_reviews`). Returns True when they were rebuilt."""
        return self.service.sync_reviews()

    # ------------------------------------------------------------------ the store

    def session_for(self, conversation: str | None, first_text: str) -> str:
        """The store session of a conversation id (an existing session id is used as is; any other id
        gets its own session, found again by title); no id: a new session per request."""
        from mlx_sdm.errors import DataError

        if conversation is None:
            return self.store.create_session(API_TITLE_PREFIX + first_text.strip()[:48], model=self.model_id,
                                             verifier=self.verifier_name).id
        if conversation not in self._sessions:
            try:
                found = self.store.get_session(conversation).id
            except DataError:
                title = API_TITLE_PREFIX + conversation
                found = next((s.id for s in self.store.list_sessions() if s.title == title), None)
                found = found or self.store.create_session(title, model=self.model_id, verifier=self.verifier_name).id
            self._sessions[conversation] = found
        return self._sessions[conversation]

    def _store_turn(self, conversation: str | None, messages: tuple[ChatMessage, ...], outcome: TurnOutcome,
                    source: str) -> tuple[str, int]:
        """The client's last user message and the turn's record, all in one transaction (a kill between them
        leaves neither). Returns (session id, answer message id)."""
        from mlx_sdm.store.message_meta import MessageMeta

        user_text = next(m.content for m in reversed(messages) if m.role == "user" and m.content.strip())
        session_id = self.session_for(conversation, user_text)
        _, message_id = self.store.add_turn(user_text, self.service.keep(outcome, session_id, source=source),
                                            user_metadata=MessageMeta(source=source), provenance=self.service.provenance)
        return session_id, message_id

    def _logprob(self, piece: TokenPiece) -> TokenLogprob | None:
        """A token's log-prob and alternatives as OpenAI's logprob entry (the HTTP edge); None for a
        detokenizer tail, which has no token."""
        if piece.token_id is None:
            return None
        return TokenLogprob(self._piece(piece.token_id), float(piece.logprob),
                            tuple((self._piece(i), lp) for i, lp in piece.top))

    def _piece(self, token_id: int) -> str:
        return self.lm.tokenizer.decode([int(token_id)])
