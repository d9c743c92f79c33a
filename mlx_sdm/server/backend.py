"""The server's ONE adapter to the session layer: load the model and verifier, answer a chat,
verify an answer made elsewhere, store every served turn in the chat store, and pick up review
decisions made anywhere (the TUI in another process included) before each verdict.

Everything here runs on the model worker's thread (:mod:`mlx_sdm.server.worker`); the HTTP layer
sees only typed results (:mod:`mlx_sdm.server.results`) and :class:`~mlx_sdm.server.wire.ApiError`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from mlx_sdm.session.store import AnswerRecord

from mlx_sdm.server import verdicts
from mlx_sdm.server.results import ServedAnswer, ServedVerdict
from mlx_sdm.server.wire import ApiError, ChatMessage, ChatRequest, TokenLogprob, VerifyRequest

DEFAULT_MAX_TOKENS = 256
API_TITLE_PREFIX = "API · "

#: on_token(piece of text, its logprob entry) -> keep going?
TokenSink = Callable[[str, "TokenLogprob | None"], bool]


@dataclass
class BackendConfig:
    """What the server loads: the chat's own choices (``verifier=None``: the model's default)."""

    model: str | None = None
    verifier: str | None = None
    head: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS  # answer budget when a request gives none
    system_prompt: str | None = None  # None: the verifier's own system prompt, as the chat does
    quantized: bool = False


@dataclass
class Prepared:
    """A request checked against the model's context: the messages the model sees and their token ids."""

    messages: list[dict]
    ids: list[int]
    max_tokens: int


class SessionBackend:
    """Model, verifier and store behind the server. Build and call it on the worker thread only."""

    def __init__(self, config: BackendConfig, store: Any, components: Callable[[Any], Any] | None = None):
        from mlx_sdm.app.loading import chat_components as load_components
        from mlx_sdm.session.engine import EngineConfig
        from mlx_sdm.session.review import feature_model_id

        engine_config = EngineConfig(model=config.model, verifier=config.verifier, head=config.head, quantized=config.quantized,
                                     embedder="none", enable_p_true=False, system_prompt=config.system_prompt)
        self.config = config
        self.store = store
        self.components = (components or load_components)(engine_config)
        self.lm = self.components.lm
        self.model_id = str(self.lm.name)
        self.max_context = int(getattr(self.lm, "max_context", 2048))
        self.created = int(time.time())
        self.feature_model = feature_model_id(self.lm.fingerprint)
        self._applied_decisions: tuple[int, ...] = ()
        self._sessions: dict[str, str] = {}
        self.sync_reviews()

    # ------------------------------------------------------------------ what the verifier expects

    @property
    def verifier(self) -> Any | None:
        return self.components.verifier

    @property
    def verifier_name(self) -> str | None:
        return self.components.verifier_path if self.verifier is not None else None

    def _recipe(self) -> tuple[str, str | None]:
        """(delimiter rule, system prompt) the verifier's documents were encoded with."""
        from mlx_sdm.session.pipeline import DEFAULT_SYSTEM_PROMPT

        recipe = getattr(self.verifier, "recipe", None)
        delimiter = recipe.delimiter if recipe is not None else "end_of_turn"
        if self.config.system_prompt is not None:
            return delimiter, self.config.system_prompt or None
        return delimiter, (recipe.system if recipe is not None and recipe.system else DEFAULT_SYSTEM_PROMPT)

    def _chat_messages(self, messages: tuple[ChatMessage, ...]) -> list[dict]:
        """The client's messages; when it sends no system message, the verifier's (as the chat does)."""
        out = [{"role": m.role, "content": m.content} for m in messages]
        _, system = self._recipe()
        if system and not any(m.role == "system" for m in messages):
            out.insert(0, {"role": "system", "content": system})
        return out

    # ------------------------------------------------------------------ requests

    def prepare(self, messages: tuple[ChatMessage, ...], max_tokens: int | None) -> Prepared:
        """Render the prompt and check it fits the context with the answer budget (400 naming the field if not)."""
        from mlx_sdm.lm.prompt import render_prompt

        chat = self._chat_messages(messages)
        ids = render_prompt(self.lm.tokenizer, chat)
        room = self.max_context - len(ids)
        if room < 1:
            raise ApiError(400, f"messages are {len(ids)} tokens, longer than the model's context of "
                           f"{self.max_context} tokens; shorten the conversation", param="messages",
                           code="context_length_exceeded")
        if max_tokens is not None and max_tokens > room:
            raise ApiError(400, f"messages ({len(ids)} tokens) plus max_tokens ({max_tokens}) exceed the model's "
                           f"context of {self.max_context} tokens; ask for at most {room}", param="max_tokens",
                           code="context_length_exceeded")
        budget = min(max_tokens or self.config.max_tokens, room)
        return Prepared(messages=chat, ids=ids, max_tokens=budget)

    def complete(self, request: ChatRequest, prepared: Prepared, on_token: TokenSink | None = None) -> ServedAnswer:
        """Generate an answer (features captured in the same pass), judge it, store the turn."""
        from mlx_sdm.lm.generation import GenerationConfig, stream_generate_features

        delimiter, _ = self._recipe()
        capture = _TopCapture(request.top_logprobs, request.temperature)
        config = GenerationConfig(max_tokens=prepared.max_tokens, delimiter=delimiter, sampler=capture,
                                  stop_at_delimiter=delimiter != "end_of_turn", max_context=self.max_context)
        stopped = [False]
        items: list[TokenLogprob] = []
        result = None
        t0 = time.perf_counter()
        for chunk in stream_generate_features(self.lm, prepared.ids, config, head=self.components.head,
                                              stop=lambda: stopped[0]):
            if chunk.result is not None:
                result = chunk.result
                if chunk.text and on_token is not None:  # the detokenizer's flushed tail
                    on_token(chunk.text, None)
                continue
            item = TokenLogprob(self._piece(chunk.token), float(chunk.logprob), capture.top(len(items), self._piece))
            items.append(item)
            if on_token is not None and not on_token(chunk.text, item):
                stopped[0] = True
        generation_s = time.perf_counter() - t0
        cancelled = result.finish_reason == "cancelled"
        t1 = time.perf_counter()
        verdict = verdicts.cancelled() if cancelled else self._judge(result.features.vector if result.tokens else None)
        verify_s = time.perf_counter() - t1
        finish = {"delimiter": "stop", "stop": "stop", "length": "length"}.get(result.finish_reason, "stop")
        answer = ServedAnswer(text=result.text, finish_reason="cancelled" if cancelled else finish,
                              prompt_tokens=len(prepared.ids), completion_tokens=len(result.tokens), verdict=verdict,
                              logprobs=items, verify_s=verify_s, generation_s=generation_s)
        features = None if cancelled or not result.tokens else np.asarray(result.features.vector, dtype=np.float32)
        self._store_turn(request.conversation, request.messages, prepared.messages, answer, features,
                         tokens=[i.token for i in items], source="chat")
        return answer

    def verify(self, request: VerifyRequest) -> ServedAnswer:
        """Force-decode an answer made elsewhere through the local model and judge it; store the turn."""
        from mlx_sdm.lm.features import force_decode_document

        chat = self._chat_messages(request.messages)
        prepared = self.prepare(request.messages, None)
        completion_ids = self.lm.tokenizer.encode(request.completion, add_special_tokens=False)
        if len(prepared.ids) + len(completion_ids) + 1 > self.max_context:
            raise ApiError(400, f"messages ({len(prepared.ids)} tokens) plus completion ({len(completion_ids)} tokens) "
                           f"exceed the model's context of {self.max_context} tokens", param="completion",
                           code="context_length_exceeded")
        delimiter, _ = self._recipe()
        t0 = time.perf_counter()
        document = force_decode_document(self.lm, chat, request.completion, delimiter=delimiter)
        verdict = self._judge(np.asarray(document.vector, dtype=np.float32))
        answer = ServedAnswer(text=request.completion, finish_reason="stop", prompt_tokens=len(prepared.ids),
                              completion_tokens=len(completion_ids), verdict=verdict, verify_s=time.perf_counter() - t0)
        self._store_turn(request.conversation, request.messages, chat, answer,
                         np.asarray(document.vector, dtype=np.float32), tokens=None, source="verify")
        return answer

    # ------------------------------------------------------------------ verdicts and review decisions

    def _judge(self, features: np.ndarray | None) -> ServedVerdict:
        if self.verifier is None:
            return verdicts.no_verifier(self.components.unverifiable_reason)
        if features is None:
            return verdicts.no_features()
        self.sync_reviews()
        verdict = self.verifier.verify_features(np.asarray(features, dtype=np.float32))
        return verdicts.from_estimator(verdict, self.verifier_name)

    def sync_reviews(self) -> bool:
        """Make the support set = the base verifier + every active review decision on this model, when
        the store's decisions changed since last time (the TUI in another process may have decided).
        Returns True when the support set was rebuilt."""
        if self.verifier is None:
            return False
        from mlx_sdm.session.review import verifier_key

        points = self.store.support_points(feature_model=self.feature_model, verifier=verifier_key(self.verifier_name))
        key = tuple(p.decision.id for p in points)
        if key == self._applied_decisions:
            return False
        if self._applied_decisions and self.components.verifier_path is not None:  # start from the base again
            from mlx_sdm.network.verifier import DocumentVerifier

            self.components.verifier = DocumentVerifier.load(self.components.verifier_path,
                                                             expect_fingerprint=self.lm.fingerprint)
        held = set(self.verifier.estimator.support_ids)
        new = [p for p in points if p.decision.support_id not in held]
        if new:
            self.verifier.estimator.add_support(
                [p.decision.support_id for p in new], np.stack([p.features for p in new]).astype(np.float32),
                np.array([p.label for p in new], dtype=np.int64), [p.text for p in new])
        self._applied_decisions = key
        return True

    # ------------------------------------------------------------------ the store

    def session_for(self, conversation: str | None, first_text: str) -> str:
        """The store session of a conversation id (an existing session id is used as is; any other id
        gets its own session, found again by title); no id: a new session per request."""
        if conversation is None:
            return self.store.create_session(API_TITLE_PREFIX + first_text.strip()[:48], model=self.model_id,
                                             verifier=self.verifier_name).id
        if conversation in self._sessions:
            return self._sessions[conversation]
        from mlx_sdm.errors import DataError

        try:
            found = self.store.get_session(conversation).id
        except DataError:
            title = API_TITLE_PREFIX + conversation
            found = next((s.id for s in self.store.list_sessions() if s.title == title), None)
            if found is None:
                found = self.store.create_session(title, model=self.model_id, verifier=self.verifier_name).id
        self._sessions[conversation] = found
        return found

    def _store_turn(self, conversation: str | None, messages: tuple[ChatMessage, ...], prompt: list[dict],
                    answer: ServedAnswer, features: np.ndarray | None, *, tokens: list[str] | None, source: str) -> None:
        """The client's last user message and the answer with its verdict (and review entry when not verified)."""
        user_text = next(m.content for m in reversed(messages) if m.role == "user" and m.content.strip())
        session_id = self.session_for(conversation, user_text)
        self.store.add_message(session_id, "user", user_text, metadata={"source": f"api:{source}"})
        verdict = answer.verdict
        cancelled = answer.finish_reason == "cancelled"
        answer.session_id = session_id
        answer.message_id = self.store.add_answer(AnswerRecord(
            session_id, answer.text, status="cancelled" if cancelled else "done", prompt=prompt, tokens=tokens,
            token_logprobs=[i.logprob for i in answer.logprobs] if tokens is not None else None,
            features=features, feature_model=self.feature_model if features is not None else None,
            verdict_status=None if cancelled else verdicts.store_status(verdict),
            verdict=None if cancelled else verdicts.store_dict(verdict), verifier=self.verifier_name,
            review_reasons=() if cancelled else verdicts.review_reasons(verdict),
            metadata={"finish_reason": answer.finish_reason, "source": f"api:{source}",
                      "verdict_reason": verdict.reason_code},
        ))

    # ------------------------------------------------------------------ tokens

    def _piece(self, token_id: int) -> str:
        return self.lm.tokenizer.decode([int(token_id)])


class _TopCapture:
    """A sampler for mlx-lm's ``generate_step`` that also keeps, per step, the ``k`` most likely
    tokens and their log-probs (lazily; read back in token order). Greedy at temperature 0."""

    def __init__(self, k: int, temperature: float):
        self.k = k
        self._sample = None
        if temperature > 0:
            from mlx_lm.sample_utils import make_sampler

            self._sample = make_sampler(temp=temperature)
        self._steps: list[tuple[Any, Any]] = []

    def __call__(self, logprobs):
        import mlx.core as mx

        if self.k:
            best = mx.argpartition(-logprobs, kth=self.k - 1, axis=-1)[..., : self.k]
            values = mx.take_along_axis(logprobs, best, axis=-1)
            order = mx.argsort(-values, axis=-1)
            self._steps.append((mx.take_along_axis(best, order, axis=-1), mx.take_along_axis(values, order, axis=-1)))
        if self._sample is not None:
            return self._sample(logprobs)
        return mx.argmax(logprobs, axis=-1)

    def top(self, index: int, piece: Callable[[int], str]) -> tuple[tuple[str, float], ...]:
        if not self.k or index >= len(self._steps):
            return ()
        ids, values = self._steps[index]
        return tuple((piece(int(i)), float(v)) for i, v in zip(ids.reshape(-1).tolist(), values.reshape(-1).tolist()))
