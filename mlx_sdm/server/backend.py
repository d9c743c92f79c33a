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
from mlx_sdm.server.wire import ApiError, ChatMessage, ChatRequest, ReviewQuery, TokenLogprob, VerifyRequest

if TYPE_CHECKING:  # the turn's modules load with the model
    from mlx_sdm.executor.review import ReviewDecision
    from mlx_sdm.lm.prompt import FittedPrompt
    from mlx_sdm.store.chat_store import ChatStore
    from mlx_sdm.store.turn_writer import Question
    from mlx_sdm.turn.monitoring import SessionMonitor
    from mlx_sdm.turn.values import TurnComponents, TurnOptions, TurnPlan, TurnRequest

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


@dataclass(frozen=True)
class Prepared:
    """A request made a turn, once: its request (the conversation with its options and answer budget) and its plan,
    routed and rendered into the model's context, which the pipeline streams as it is."""

    request: TurnRequest
    plan: TurnPlan
    prompt_tokens: int  # what the model reads of the conversation (the system message the plan adds included)


class SessionBackend:
    """Pipeline, review service and store behind the server. Build and call it on the worker thread only."""

    def __init__(self, config: BackendConfig, store: ChatStore,
                 components: Callable[[BackendConfig], TurnComponents] | None = None):
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

    def options(self, max_tokens: int, temperature: float = 0.0, top_logprobs: int = 0, *,
                monitored: bool = False) -> TurnOptions:
        """Turn options of a served answer: P(True) only for a monitored answer, no reflection (nobody is there to
        give guidance: a paused turn is reported in ``monitor``)."""
        from mlx_sdm.turn.values import TurnOptions

        return TurnOptions(max_tokens=max_tokens, temperature=temperature, system_prompt=self.config.system_prompt,
                           enable_p_true=monitored, generate_reflection=False, top_logprobs=top_logprobs,
                           second_look=self.config.second_look)

    def monitor(self) -> SessionMonitor:
        """The chat's session monitor for one request (its reading is of the request's own turn, as ``generate``'s)."""
        from mlx_sdm.turn.monitoring import MonitorConfig, SessionMonitor

        return SessionMonitor("api", MonitorConfig(), embedder=self.components.embedder)

    # ------------------------------------------------------------------ requests

    def prepare(self, request: ChatRequest) -> Prepared:
        """The request's turn, planned once: routed, its prompt (with the system message the plan adds) rendered
        and checked to fit the context with the answer budget (a 400 naming the field if not), then fitted; the
        stream reads this plan as it is."""
        plan, rendered = self._planned(request.messages)
        room = self.max_context - len(rendered.ids)
        if room < 1:
            raise ApiError(400, f"messages are {len(rendered.ids)} tokens, longer than the model's context of "
                           f"{self.max_context} tokens; shorten the conversation", param="messages",
                           code="context_length_exceeded")
        if request.max_tokens is not None and request.max_tokens > room:
            raise ApiError(400, f"messages ({len(rendered.ids)} tokens) plus max_tokens ({request.max_tokens}) exceed "
                           f"the model's context of {self.max_context} tokens; ask for at most {room}",
                           param="max_tokens", code="context_length_exceeded")
        options = self.options(min(request.max_tokens or self.config.max_tokens, room), request.temperature,
                               request.top_logprobs, monitored=True)
        turn = self._request(request.messages, options, "api:chat")
        return Prepared(turn, self.service.pipeline.fit(plan, options, rendered), len(rendered.ids))

    def complete(self, request: ChatRequest, prepared: Prepared) -> ServedAnswer:
        """:meth:`stream` run to its end: the served answer (its last item)."""
        for item in self.stream(request, prepared):
            pass
        assert isinstance(item, ServedAnswer)
        return item

    def stream(self, request: ChatRequest, prepared: Prepared,
               stop: threading.Event | None = None) -> Iterator[ServedToken | ServedAnswer]:
        """One turn through the turn service, kept as the chat keeps one (question and answer in one
        transaction, at the end): each answer token as it comes, then the answer, judged and stored. Setting
        ``stop`` (the client went away) ends the answer at the next token."""
        from mlx_sdm.store.turn_writer import TurnReceipt
        from mlx_sdm.turn.escalation import TurnStatus, monitor_payload

        self.sync_reviews()
        session_id, question = self._question(request.conversation, request.messages, "api:chat")
        logprobs: list[TokenLogprob] = []
        for item in self.service.stream_turn(session_id, prepared.request, question, partial=False,
                                             plan=prepared.plan, stop=stop or threading.Event(), monitor=self.monitor()):
            if isinstance(item, TurnReceipt):
                receipt = item
            elif isinstance(item, TokenPiece) and item.phase == "answer":
                served = ServedToken(item, self._logprob(item))
                if served.logprob is not None:
                    logprobs.append(served.logprob)
                yield served
        outcome = receipt.outcome
        cancelled = outcome.status is TurnStatus.CANCELLED
        finish = "cancelled" if cancelled else ("length" if outcome.finish_reason == "length" else "stop")
        yield ServedAnswer(text=outcome.text, finish_reason=finish, prompt_tokens=outcome.prompt_tokens,
                           completion_tokens=len(outcome.tokens), verdict=outcome.verdict, verifier=self.verifier_name,
                           logprobs=tuple(logprobs), session_id=receipt.session_id, message_id=receipt.message_id,
                           review_id=receipt.review_id,
                           cached_tokens=outcome.reused_tokens, generation_s=outcome.generation_s,
                           monitor=None if cancelled else monitor_payload(outcome.monitor, outcome.escalation))

    def verify(self, request: VerifyRequest) -> ServedAnswer:
        """Force-decode an answer made elsewhere through the local model, judge it (planned once), store the turn."""
        self.sync_reviews()
        plan, rendered = self._planned(request.messages)
        completion_tokens = len(self.lm.tokenizer.encode(request.completion, add_special_tokens=False))
        if len(rendered.ids) + completion_tokens + 1 > self.max_context:
            raise ApiError(400, f"messages ({len(rendered.ids)} tokens) plus completion ({completion_tokens} "
                           f"tokens) exceed the model's context of {self.max_context} tokens", param="completion",
                           code="context_length_exceeded")
        session_id, question = self._question(request.conversation, request.messages, "api:verify")
        turn = self._request(request.messages, self.options(1), "api:verify")
        receipt = self.service.judge_turn(session_id, turn, question, request.completion, plan=plan)
        return ServedAnswer(text=request.completion, finish_reason="stop", prompt_tokens=len(rendered.ids),
                            completion_tokens=completion_tokens, verdict=receipt.outcome.verdict,
                            verifier=self.verifier_name, session_id=receipt.session_id, message_id=receipt.message_id,
                            review_id=receipt.review_id)

    def _planned(self, messages: tuple[ChatMessage, ...]) -> tuple[TurnPlan, FittedPrompt]:
        """The conversation's plan (routed once) and what the model is asked in it, rendered whole (once)."""
        pipeline = self.service.pipeline
        plan = pipeline.plan(_chat(messages), self.options(1))
        return plan, pipeline.render(plan)

    @staticmethod
    def _request(messages: tuple[ChatMessage, ...], options: TurnOptions, source: str) -> TurnRequest:
        from mlx_sdm.turn.values import TurnRequest

        return TurnRequest(_chat(messages), options, source=source)

    # ------------------------------------------------------------------ review decisions

    def sync_reviews(self) -> bool:
        """Review decisions made anywhere since the last verdict join the support sets
        (:meth:`TurnService.sync_reviews`). Returns True when they were rebuilt."""
        return self.service.sync_reviews()

    def reviews(self, query: ReviewQuery) -> list[dict[str, Any]]:
        """``GET /v1/reviews``: the queue entries, each in the JSON form ``mlx-sdm review list`` prints."""
        items = self.store.review_queue.review_items(status=query.status, task=query.task)
        return [item.to_dict() for item in items[:query.limit]]

    def decide(self, decision: ReviewDecision) -> dict[str, Any]:
        """``POST /v1/reviews/{id}``: the decision recorded through the one write path the review screen and
        ``mlx-sdm review`` use, and put into the served verifier's support set at once."""
        self.sync_reviews()  # decisions made elsewhere first, so that this one lands on the store's sets
        result = self.service.decide(decision)
        entry = self.store.review_queue.review_item(decision.review_id)
        assert entry.decision is not None  # just recorded
        return {"object": "review.decision", "id": decision.review_id, "decision": entry.decision.kind,
                "replaced": None if result.replaced is None else result.replaced.kind, "applied": result.applied,
                "support_size": result.support_size, "message": result.message, "entry": entry.to_dict()}

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
                titled = next((s.id for s in self.store.list_sessions() if s.title == title), None)
                found = titled or self.store.create_session(title, model=self.model_id, verifier=self.verifier_name).id
            self._sessions[conversation] = found
        return self._sessions[conversation]

    def _question(self, conversation: str | None, messages: tuple[ChatMessage, ...],
                  source: str) -> tuple[str, Question]:
        """The store session of the request and the question its turn answers: the client's last user message."""
        from mlx_sdm.store.turn_writer import Question

        text = next(m.content for m in reversed(messages) if m.role == "user" and m.content.strip())
        return self.session_for(conversation, text), Question(text, source=source)

    def _logprob(self, piece: TokenPiece) -> TokenLogprob | None:
        """A token's log-prob and alternatives as OpenAI's logprob entry (the HTTP edge); None for a
        detokenizer tail, which has no token."""
        if piece.token_id is None or piece.logprob is None:
            return None
        return TokenLogprob(self._piece(piece.token_id), float(piece.logprob),
                            tuple((self._piece(i), lp) for i, lp in piece.top))

    def _piece(self, token_id: int) -> str:
        return self.lm.tokenizer.decode([int(token_id)])


def _chat(messages: tuple[ChatMessage, ...]) -> list[dict[str, str]]:
    """The request's messages in the chat-template shape the turn takes."""
    return [{"role": m.role, "content": m.content} for m in messages]
