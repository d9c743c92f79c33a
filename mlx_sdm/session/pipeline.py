"""ONE turn, start to end: a :class:`TurnRequest` (the conversation so far + options) in, a
:class:`TurnOutcome` (answer, the span the verdict covers, :class:`DocumentVerdict`,
:class:`MonitorReading`, :class:`Escalation`) out.

    pipeline = TurnPipeline(components)                 # model, verifier, head: see app/loading.py
    outcome = pipeline.run(TurnRequest([{"role": "user", "content": "..."}]), observer=printer, stop=event)

No thread, store or UI is involved: the CLI (``generate``, ``chat --plain``), the chat engine
(a thin executor on the thread that owns MLX), the server and the tests call this. The steps:

1. generate: stream tokens (log-probs and the document features ``[mean(h_0..h_k); h_k]`` come
   from the same pass, spec § 15.3); by default the answer ends at the unit the verifier judges
   (the closing brace of the JSON answer for ``json_close`` verifiers), so a verdict covers exactly
   the text shown; anything after it is ``unverified_tail``.
2. verify: the verifier's :class:`DocumentVerdict` (verified / not verified / out of scope), or the
   reason there is none (no verifier fits the model).
3. monitor (when the caller passes a session's monitor): AUQ level and cumulative confidence,
   TRACER prefix risk, P(True) reusing the answer's KV cache.
4. escalate: MEDIUM logs, HIGH pauses (the model states its uncertainty), CRITICAL aborts.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from mlx_sdm.monitor.reading import MonitorReading
from mlx_sdm.network.verdict import DocumentVerdict, TaskRoute, VerifierCoverage
from mlx_sdm.session.escalation import REFLECTION_PROMPT, Escalation, TurnStatus, plan_escalation
from mlx_sdm.session.answer import GeneratedAnswer, PrefixCache, TopLogprobs, generate_answer, settle_prefix

DEFAULT_MAX_TOKENS = 256
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Answer briefly and accurately."
#: Tool calls are read from the answer in the common ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` form.
TOOL_CALL_RE = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
#: The chat-template message shape every caller passes (mlx-lm / OpenAI): {"role", "content"}.
ChatMessage = dict[str, str]


@dataclass
class TurnComponents:
    """Everything MLX a turn uses, built on the thread that owns MLX (``mlx_sdm.app.loading``)."""

    lm: Any  # mlx_sdm.lm.loading.LoadedModel
    verifier: Any | None = None  # mlx_sdm.network.verifier.DocumentVerifier
    verifier_path: str | None = None
    unverifiable_reason: str | None = None  # why there is no verifier
    head: Any | None = None  # hidden -> vocabulary logits (SDM network head)
    head_path: str | None = None
    embedder: Any | None = None  # TRACER sentence embedder; None = lexical fallback
    #: task name -> the verifier whose support set holds the review labels of that task (set by the review
    #: service, :class:`~mlx_sdm.session.review.ReviewService`); None: ``verifier`` judges every task
    task_support: Callable[[str], Any] | None = None

    @property
    def coverage(self) -> VerifierCoverage:
        return self.verifier.coverage if self.verifier is not None else VerifierCoverage()

    def verifier_for(self, task: str | None) -> Any | None:
        """The verifier that judges questions routed to ``task``: its support set takes only the review
        labels given under this verifier and that task (``verifier`` itself for unrouted questions)."""
        if self.verifier is None or task is None or self.task_support is None:
            return self.verifier
        return self.task_support(task)


@dataclass(frozen=True)
class TurnOptions:
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    system_prompt: str | None = None  # None: the verifier's own (its documents' distribution), else the default
    stop_at_judged_unit: bool = True  # end the answer where the verifier's unit ends (json_close)
    explain: int = 5  # nearest exemplars kept with the verdict
    enable_p_true: bool = True
    semantic_sampling: bool = False
    generate_reflection: bool = True  # on HIGH, let the model state its uncertainty
    reflection_max_tokens: int = 96
    reuse_cache: bool = True
    top_logprobs: int = 0  # with each token, the k most likely tokens and their log-probs (TokenPiece.top)


@dataclass
class TurnRequest:
    """The conversation so far (last message = the user's) and how to answer it. A system message is
    added in front (the verifier's system prompt) unless the conversation has one."""

    messages: list[ChatMessage]
    options: TurnOptions = field(default_factory=TurnOptions)


@dataclass
class TokenPiece:
    text: str
    token_id: int | None = None
    logprob: float | None = None
    phase: str = "answer"  # "answer" | "reflection"
    top: tuple[tuple[int, float], ...] = ()  # (token id, log-prob), most likely first (TurnOptions.top_logprobs)


class TurnObserver:
    """Streamed progress of a turn; override what you need (the defaults do nothing). Called on the
    thread running the pipeline, in this order: token* → verdict → monitor → escalation → token*
    (reflection)."""

    def prefill(self, done: int, total: int) -> None:
        """``done`` of the answer prompt's ``total`` new tokens are prefilled (called before any token)."""

    def token(self, piece: TokenPiece) -> None: ...

    def verdict(self, verdict: DocumentVerdict | None, unverifiable_reason: str | None) -> None: ...

    def monitor(self, reading: MonitorReading) -> None: ...

    def escalation(self, escalation: Escalation) -> None: ...


@dataclass
class TurnOutcome:
    """Everything a turn produced. ``judged_text`` is what the verdict covers; ``unverified_tail``
    any text after it (empty when the answer stopped at the judged unit)."""

    status: TurnStatus
    text: str
    judged_text: str
    unverified_tail: str
    messages: list[ChatMessage]  # what the model saw (system prompt included)
    task: str | None = None  # the verifier's task the question was routed to (TaskRoute.task)
    verdict: DocumentVerdict | None = None
    unverifiable_reason: str | None = None
    monitor: MonitorReading | None = None
    escalation: Escalation = field(default_factory=Escalation)
    reflection: str | None = None  # on a HIGH pause: the model's own statement of its uncertainty
    tool_calls: list[dict] = field(default_factory=list)
    finish_reason: str = "stop"
    tokens: list[str] = field(default_factory=list)  # decoded piece per generated token
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    features: np.ndarray | None = None
    first_token_s: float | None = None
    generation_s: float = 0.0
    prompt_tokens: int = 0
    reused_tokens: int = 0
    truncated_prompt_tokens: int = 0
    prefix: PrefixCache | None = field(default=None, repr=False)  # reusable by this conversation's next turn

    @property
    def reflection_shown(self) -> str | None:
        """What the user sees on a HIGH pause: the model's statement, else the reflection prompt."""
        return (self.reflection or REFLECTION_PROMPT) if self.escalation.reflect else None

    @property
    def verdict_reason(self) -> str | None:
        """The verdict's reason code, or why there is no verdict."""
        return self.verdict.reason if self.verdict is not None else self.unverifiable_reason


def parse_tool_calls(text: str) -> list[dict]:
    """Tool calls proposed in an answer (``<tool_call>{json}</tool_call>``); malformed blocks are ignored."""
    calls = []
    for block in TOOL_CALL_RE.findall(text):
        try:
            obj = json.loads(block)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str) and obj["name"]:
            args = obj.get("arguments", {})
            calls.append({"name": obj["name"], "arguments": args if isinstance(args, (dict, str)) else {}})
    return calls


class TurnPipeline:
    """generate → verify → monitor → escalate for one turn (see the module docstring)."""

    def __init__(self, components: TurnComponents):
        self.components = components

    # -- the recipe the verifier was built with ------------------------------------------------
    @property
    def delimiter(self) -> str:
        recipe = getattr(self.components.verifier, "recipe", None)
        return recipe.delimiter if recipe is not None else "end_of_turn"

    def route(self, messages: list[ChatMessage] | None) -> TaskRoute:
        """Where the conversation's first user message goes under the verifier's recipe: its system
        prompt and (multi-task verifier) its task; the verdict uses that task's review labels only."""
        verifier = self.components.verifier
        if verifier is None or not hasattr(verifier, "route"):
            return TaskRoute()
        first_user = next((m.get("content") for m in messages or [] if m.get("role") == "user"), None)
        return verifier.route(first_user)

    def system_prompt(self, options: TurnOptions, messages: list[ChatMessage] | None = None) -> str | None:
        if options.system_prompt is not None:
            return options.system_prompt or None
        recipe = getattr(self.components.verifier, "recipe", None)
        if recipe is None:
            return DEFAULT_SYSTEM_PROMPT
        # a multi-task verifier (build-verifier) built each task under its own system prompt: route by the question
        first_user = next((m.get("content") for m in messages or [] if m.get("role") == "user"), None)
        system = recipe.system_for(first_user) if hasattr(recipe, "system_for") else recipe.system
        return system or DEFAULT_SYSTEM_PROMPT

    def with_system(self, messages: list[ChatMessage], options: TurnOptions) -> list[ChatMessage]:
        if messages and messages[0].get("role") == "system":
            return list(messages)
        system = self.system_prompt(options, messages)
        return ([{"role": "system", "content": system}] if system else []) + list(messages)

    # -- the turn -------------------------------------------------------------------------------
    def run(self, request: TurnRequest, *, observer: TurnObserver | None = None,
            stop: threading.Event | None = None, monitor: Any = None,
            prefix: PrefixCache | None = None) -> TurnOutcome:
        """One turn. ``monitor``: the session's :class:`~mlx_sdm.session.monitoring.SessionMonitor`
        (None = no monitoring, e.g. ``generate``); ``prefix``: this conversation's previous KV cache."""
        observer = observer or TurnObserver()
        stop = stop or threading.Event()
        options = request.options
        messages = self.with_system(request.messages, options)
        gen, first_token_s, generation_s = self._generate(messages, options, observer, stop, prefix)
        outcome = TurnOutcome(
            status=TurnStatus.CANCELLED if gen.cancelled else TurnStatus.DONE, text=gen.text,
            judged_text=gen.judged_text, unverified_tail=gen.unverified_tail, messages=messages,
            task=self.route(request.messages).task,
            finish_reason=gen.finish_reason, tokens=gen.tokens, token_ids=gen.token_ids, logprobs=gen.logprobs, features=gen.features,
            first_token_s=first_token_s, generation_s=generation_s, prompt_tokens=gen.prompt_tokens,
            reused_tokens=gen.reused_tokens, truncated_prompt_tokens=gen.truncated_prompt_tokens,
        )
        if monitor is not None:  # TRACER's user step is scored after generation, not before the first token
            monitor.observe_user(_last_user_text(request.messages))
        if gen.cancelled:
            return outcome
        outcome.verdict, outcome.unverifiable_reason = self.verify(gen.features, gen.text, options, task=outcome.task)
        observer.verdict(outcome.verdict, outcome.unverifiable_reason)
        outcome.tool_calls = parse_tool_calls(gen.text)
        if monitor is not None:
            outcome.monitor = self._monitor(monitor, messages, gen, outcome, options)
            observer.monitor(outcome.monitor)
        if options.reuse_cache:
            outcome.prefix = settle_prefix(gen.prefix)
        outcome.escalation = plan_escalation(outcome.monitor, [c["name"] for c in outcome.tool_calls], outcome.verdict)
        outcome.status = outcome.escalation.status
        if outcome.escalation.escalated:
            observer.escalation(outcome.escalation)
        if outcome.escalation.reflect:
            outcome.reflection = self._reflect(messages, gen.text, options, observer, stop)
        return outcome

    def verify(self, features: np.ndarray | None, text: str, options: TurnOptions = TurnOptions(), *,
               task: str | None = None) -> tuple[DocumentVerdict | None, str | None]:
        """The verdict on an answer's features, or (None, why there is none); ``task``: the verifier's
        task the question was routed to (:meth:`route`), whose review labels the support set holds."""
        verifier = self.components.verifier_for(task)
        if verifier is None:
            return None, self.components.unverifiable_reason or "no verifier is loaded"
        if features is None or not text:
            return None, "the model produced an empty answer; there is nothing to verify"
        return verifier.judge(np.asarray(features, dtype=np.float32), explain=options.explain, task=task), None

    def verify_completion(self, messages: list[ChatMessage], completion: str,
                          options: TurnOptions = TurnOptions()) -> tuple[DocumentVerdict | None, str | None]:
        """Verify a given (conversation, completion) by force-decoding (review edits, ``/v1/verify``)."""
        return self.verify(self.features_for(messages, completion, options), completion, options,
                           task=self.route(messages).task)

    def features_for(self, messages: list[ChatMessage], completion: str,
                     options: TurnOptions = TurnOptions()) -> np.ndarray:
        from mlx_sdm.lm.features import force_decode_features

        vector = force_decode_features(self.components.lm, self.with_system(messages, options), completion,
                                       delimiter=self.delimiter)
        return np.asarray(vector, dtype=np.float32)

    # -- steps ----------------------------------------------------------------------------------
    def _generate(self, messages: list[ChatMessage], options: TurnOptions, observer: TurnObserver,
                  stop: threading.Event, prefix: PrefixCache | None) -> tuple[GeneratedAnswer, float | None, float]:
        started = time.perf_counter()
        first: list[float] = []
        top = TopLogprobs(options.top_logprobs) if options.top_logprobs > 0 else None
        count = [0]

        def on_token(piece: str, token_id: int | None, logprob: float | None) -> bool:
            if not first:
                first.append(time.perf_counter() - started)
            alternatives = ()
            if token_id is not None:
                alternatives = top.at(count[0]) if top is not None else ()
                count[0] += 1
            observer.token(TokenPiece(piece, token_id, logprob, top=alternatives))
            return not stop.is_set()

        gen = generate_answer(
            self.components.lm, messages, max_tokens=options.max_tokens, temperature=options.temperature,
            head=self.components.head, on_token=on_token, features=True, keep_cache=True, delimiter=self.delimiter,
            prefix=prefix if options.reuse_cache else None,
            stop_at_delimiter=options.stop_at_judged_unit and self.components.verifier is not None,
            top_logprobs=top, on_prefill=observer.prefill,
        )
        return gen, (first[0] if first else None), time.perf_counter() - started

    def _monitor(self, monitor: Any, messages: list[ChatMessage], gen: GeneratedAnswer, outcome: TurnOutcome,
                 options: TurnOptions) -> MonitorReading:
        lm = self.components.lm
        p_true = sampler = None
        if options.enable_p_true:  # P(True) reuses the answer's KV cache: only the question is prefilled
            from mlx_sdm.monitor.p_true import PTrueScorer

            p_true = PTrueScorer(lm.model, lm.tokenizer, messages + [{"role": "assistant", "content": gen.text}],
                                 cache=gen.cache, cached_tokens=gen.cached_tokens)
        if options.semantic_sampling:
            from mlx_sdm.session.monitoring import ChatSampler

            sampler = ChatSampler(lm, messages, len(gen.token_ids), head=self.components.head)
        return monitor.score_answer(answer=gen.text, tokens=gen.tokens, logprobs=gen.logprobs,
                                    tool_calls=outcome.tool_calls, p_true=p_true, verdict=outcome.verdict,
                                    sampler=sampler)

    def _reflect(self, messages: list[ChatMessage], answer: str, options: TurnOptions, observer: TurnObserver,
                 stop: threading.Event) -> str | None:
        """Monitoring spec § 2.6: on HIGH the model states what it is NOT confident about."""
        if not options.generate_reflection:
            return None
        ask = messages + [{"role": "assistant", "content": answer}, {"role": "system", "content": REFLECTION_PROMPT}]

        def on_token(piece: str, token_id: int | None, logprob: float | None) -> bool:
            observer.token(TokenPiece(piece, token_id, logprob, phase="reflection"))
            return not stop.is_set()

        stated = generate_answer(self.components.lm, ask, max_tokens=options.reflection_max_tokens,
                                 temperature=options.temperature, head=self.components.head, on_token=on_token,
                                 features=False, keep_cache=False, delimiter=self.delimiter)
        return stated.text


def _last_user_text(messages: list[ChatMessage]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return message.get("content", "")
    return ""
