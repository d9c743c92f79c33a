"""The typed turn: what goes into one turn (:class:`TurnRequest` with :class:`TurnOptions`), how it is
planned (:class:`TurnPlan`), and what streams out of it (:data:`TurnItem`): each
:class:`~mlx_sdm.lm.pieces.TokenPiece`, the verdict (a ``DocumentVerdict``), the ``MonitorReading``, the
``Escalation``, and last the one finished record (:class:`TurnOutcome`). :class:`TurnComponents` is
everything MLX a turn uses. The pipeline that yields a turn is :mod:`mlx_sdm.turn.pipeline`; every
front end is a ``for`` loop over it.
"""

from __future__ import annotations

import hashlib
import json
import re
from enum import Enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Union

import numpy as np

from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.network.coverage import TaskInstruction, TaskRoute, VerifierCoverage
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.lm.prompt import FittedPrompt
from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus
from mlx_sdm.turn.escalation import REFLECTION_PROMPT, Escalation, TurnStatus
from mlx_sdm.turn.answer import GeneratedAnswer
from mlx_sdm.turn.seams import TurnVerifier

from mlx_sdm.lm.defaults import DEFAULT_MAX_TOKENS
from mlx_sdm.monitor.online.embedders import Embedder
from mlx_sdm.monitor.session_file.records import ToolCall

if TYPE_CHECKING:  # MLX types: the UI imports this module without loading MLX
    from mlx_sdm.lm.generation import Head
    from mlx_sdm.lm.loading import LoadedModel

#: Tool calls are read from the answer in the common ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` form.
TOOL_CALL_RE = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
#: The chat-template message shape every caller passes (mlx-lm / OpenAI): {"role", "content"}.
ChatMessage = dict[str, str]


@dataclass
class TurnComponents:
    """Everything MLX a turn uses, built on the thread that owns MLX (``mlx_sdm.usecases.loading``). Shared by the
    turn's parts and never changed by them: which verifier judges a task once review labels joined its support set
    is the review service's (:class:`~mlx_sdm.turn.seams.VerifierProvider`)."""

    lm: LoadedModel
    verifier: TurnVerifier | None = None  # a DocumentVerifier (network/verifier.py)
    verifier_path: str | None = None
    unverifiable_reason: str | None = None  # why there is no verifier
    head: Head | None = None  # hidden -> vocabulary logits (SDM network head)
    head_path: str | None = None
    #: the tasks the head was trained on: it decodes only turns routed to one of them (None: its manifest
    #: names none, and a head the user chose decodes every turn)
    head_tasks: tuple[TaskInstruction, ...] | None = None
    #: a fine-tuned folder's heads, one per task that kept one: each decodes only its own task's turns
    task_heads: tuple[tuple[TaskInstruction, Head], ...] = ()
    #: the tasks the model's LoRA adapters were trained on (a fine-tuned model folder): their questions are answered
    #: under the task's system prompt with the adapters on, also when no verifier routes them
    adapted_tasks: tuple[TaskInstruction, ...] = ()
    embedder: Embedder | None = None  # TRACER sentence embedder; None = lexical fallback

    @property
    def coverage(self) -> VerifierCoverage:
        return self.verifier.coverage if self.verifier is not None else VerifierCoverage()

    @property
    def feature_model(self) -> str:
        """The short id of the model whose hidden states the turn's features are (stored with every vector)."""
        return feature_model_id(self.lm.fingerprint)


def feature_model_id(fingerprint: Mapping[str, Any]) -> str:
    """A short, stable id of the model that computed a feature vector."""
    return hashlib.sha256(json.dumps(dict(fingerprint), sort_keys=True).encode()).hexdigest()[:16]


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
    #: an everyday answer judged by a verifier with a second-look member is judged with K more answers the model
    #: draws to the same question (docs/verifiers.md, the second look); False: by its hidden states alone
    second_look: bool = True


class TurnKind(str, Enum):
    """What the last user message of a request is to the chat's numbering of turns (which the monitor
    follows: its history and sentences name the chat's turn numbers)."""

    QUESTION = "question"  # a new question: a new turn
    AGAIN = "again"  # the last question answered again (regenerated): its turn, and no new user step
    GUIDANCE = "guidance"  # the user's guidance for a paused turn: that turn, the guidance a user step


@dataclass(frozen=True)
class Resampled:
    """An answer given again to the same question, sampled: the answer (message id) it takes the place of
    in the conversation, and the temperature and seed it was drawn with."""

    replaces: int
    temperature: float
    seed: int


@dataclass(frozen=True)
class TurnRequest:
    """The conversation so far (last message = the user's) and how to answer it. A system message is
    added in front (the verifier's system prompt) unless the conversation has one. ``source``, ``resampled``
    and ``received`` go into the turn's record as they are: who asked, whether it is an answer given again,
    and when the request was made (``time.perf_counter``; the first token's time counts from it)."""

    messages: list[ChatMessage]
    options: TurnOptions = field(default_factory=TurnOptions)
    kind: TurnKind = TurnKind.QUESTION
    source: str | None = None  # who asked: "api:chat" / "api:verify" for the server; None for the chat
    resampled: Resampled | None = None  # an answer given again, sampled (a regenerated answer)
    received: float | None = None  # when it was made (None: when the turn starts)


@dataclass(frozen=True)
class TurnPlan:
    """How one turn is answered and judged, decided before generation from its question alone."""

    route: TaskRoute  # where this turn's question goes (route.matched: it is one of the tasks)
    messages: list[ChatMessage]  # what the model sees (system prompt included)
    judged: list[ChatMessage]  # what the verifier judges the answer against: a system prompt + this question
    head: Head | None  # the SDM-network head this turn decodes with; None = the model's own head
    judge: bool  # the verifier makes an estimator judgement (False: no verifier, or not one of its tasks)
    #: the adapter set switched in for this turn (the task's name: a question of the task it was trained on);
    #: None, the model is exactly the base (lm/adapters.py)
    adapted: str | None = None
    #: what the model reads, rendered and fitted into its context (``TurnPipeline.fit``; None: not fitted yet)
    prompt: FittedPrompt | None = field(default=None, repr=False)

    @property
    def judged_is_generated(self) -> bool:
        """The model saw exactly what the verifier judges, so the generation's features are the verdict's."""
        return self.messages == self.judged


@dataclass(frozen=True)
class AnswerComplete:
    """The answer's last token has been generated and the verifier is now judging it: the moment between
    the last answer :class:`~mlx_sdm.lm.pieces.TokenPiece` and the verdict, yielded only on a
    turn the verifier reads (``TurnPlan.judge``), so a UI can say "verifying" exactly while it does."""

    tokens: int  # how many tokens the answer has


@dataclass(frozen=True)
class CheckingAnswers:
    """The verifier is taking a second look: the model is drawing ``k`` more answers to the same question,
    which the verdict then reads (yielded after :class:`AnswerComplete`, only when the judging verifier has a
    second-look member and ``TurnOptions.second_look`` is on), so a UI can say "checking k more answers"."""

    k: int


@dataclass(frozen=True)
class TurnOutcome:
    """The one record of a finished turn, what the turn made of its request, from the pipeline through the turn
    service and the engine to the screen, and what the store writes and reads back. Built once, at the turn's end,
    and immutable; where a store keeps it is the store's receipt (:class:`~mlx_sdm.store.turn_writer.TurnReceipt`),
    and the KV cache the next turn reuses is handed to whoever keeps it (``TurnPipeline.stream``'s
    ``keep_prefix``), not carried here. The answer is the answer stream's own record
    (:class:`~mlx_sdm.turn.answer.GeneratedAnswer`, its KV cache released), read through it, not copied:
    ``judged_text`` is what the verdict covers; ``unverified_tail`` any text after it (empty when the answer
    stopped at the judged unit)."""

    status: TurnStatus
    answer: GeneratedAnswer = field(repr=False)
    messages: list[ChatMessage]  # what the model saw (system prompt included)
    task: str | None = None  # the verifier's task the question was routed to (TaskRoute.task)
    decoded_with_head: bool = False  # this turn decoded with the SDM-network head (a question of its tasks)
    verdict: DocumentVerdict | None = None  # None: the turn ended before its verdict (stopped, failed)
    monitor: MonitorReading | None = None
    escalation: Escalation = field(default_factory=Escalation)
    reflection: str | None = None  # on a HIGH pause: the model's own statement of its uncertainty
    tool_calls: tuple[ToolCall, ...] = ()
    first_token_s: float | None = None  # from the request (TurnRequest.received: the time it waited included)
    generation_s: float = 0.0
    verifier: str | None = None  # the folder of the verifier that judged it (None: no verifier judged it)
    resampled: Resampled | None = None  # an answer given again, sampled (a regenerated answer)
    source: str | None = None  # who asked: "api:chat" / "api:verify" for the server; None for the chat
    feature_model: str | None = None  # the model whose hidden states ``features`` are (a short fingerprint hash)
    #: a conversation longer than the model's context: what the model read of it (None: all of it)
    prompt_fit: FittedPrompt | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        return self.answer.text

    @property
    def judged_text(self) -> str:
        return self.answer.judged_text

    @property
    def unverified_tail(self) -> str:
        return self.answer.unverified_tail

    @property
    def finish_reason(self) -> str:
        return self.answer.finish_reason

    @property
    def tokens(self) -> list[str]:
        return self.answer.tokens

    @property
    def token_ids(self) -> list[int]:
        return self.answer.token_ids

    @property
    def logprobs(self) -> list[float]:
        return self.answer.logprobs

    @property
    def features(self) -> np.ndarray | None:
        return self.answer.features

    @property
    def prompt_tokens(self) -> int:
        return self.answer.prompt_tokens

    @property
    def reused_tokens(self) -> int:
        return self.answer.reused_tokens

    @property
    def prompt_note(self) -> str:
        """What the model did not read of a conversation longer than its context, in one sentence ("": all read)."""
        if self.prompt_fit is not None:
            return self.prompt_fit.sentence()
        if self.answer.truncated_prompt_tokens:
            return f"The prompt's first {self.answer.truncated_prompt_tokens:,} tokens were left out to fit the model's context."
        return ""

    @property
    def truncated_prompt_tokens(self) -> int:
        """Tokens of the conversation the model did not read (cut to fit its context)."""
        return self.prompt_fit.left_out_tokens if self.prompt_fit is not None else self.answer.truncated_prompt_tokens

    @property
    def verdict_status(self) -> VerdictStatus | None:
        """verified / not verified / out of scope / no verifier (None: the turn made no verdict: it was
        stopped, failed or cut before its end)."""
        return None if self.verdict is None else self.verdict.status

    @property
    def explanation(self) -> str | None:
        """On an abort: why."""
        return self.escalation.explanation

    @property
    def reflection_shown(self) -> str | None:
        """What the user sees on a HIGH pause: the model's statement, else the reflection prompt."""
        return (self.reflection or REFLECTION_PROMPT) if self.escalation.reflect else None


#: What a turn yields, in this order: TokenPiece* (answer) → AnswerComplete (on a judged turn) → CheckingAnswers
#: (on a second look) → DocumentVerdict (the verdict)
#: → MonitorReading (with a session's monitor) → Escalation (when escalated) → TokenPiece* (reflection, on a
#: HIGH pause) → TurnOutcome (last). A cancelled turn yields its pieces, then its TurnOutcome.
TurnItem = Union[TokenPiece, AnswerComplete, CheckingAnswers, DocumentVerdict, MonitorReading, Escalation, TurnOutcome]


def parse_tool_calls(text: str) -> tuple[ToolCall, ...]:
    """Tool calls proposed in an answer (``<tool_call>{json}</tool_call>``); malformed blocks are ignored."""
    calls = []
    for block in TOOL_CALL_RE.findall(text):
        try:
            obj = json.loads(block)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str) and obj["name"]:
            args = obj.get("arguments", {})
            calls.append(ToolCall(obj["name"], args if isinstance(args, (dict, str)) else {}))
    return tuple(calls)


def last_user_text(messages: list[ChatMessage]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return message.get("content", "")
    return ""


def is_task_answer(text: str) -> bool:
    """An answer that is one JSON object and nothing else (stray closing braces aside): how a task turn answers."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return False
    try:
        value, end = json.JSONDecoder().raw_decode(stripped)
    except json.JSONDecodeError:
        return False
    return isinstance(value, dict) and bool(value) and not stripped[end:].strip(" \n}")


def without_task_exchanges(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The conversation a turn that is not a task's is asked with: earlier exchanges whose answer is a task's
    answer alone (:func:`is_task_answer`) are left out, with the question that asked them. A task turn is answered
    alone, as its verifier was built; its JSON left in a later turn's history makes a small model answer everything
    in that JSON (SmolLM2-135M answered the 11 everyday turns after one topic question as ``{"topic": ...}``). The
    last user message (this turn's question) is always kept, and so is the exchange just before it when the
    question leans on it ("Why did you pick that topic?": ``leans_on_previous``)."""
    from mlx_sdm.network.question_router import leans_on_previous

    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    last = users[-1] if users else -1
    kept = {users[-2]} if len(users) > 1 and leans_on_previous(str(messages[last].get("content", ""))) else set()
    out: list[ChatMessage] = []
    skip = False
    for i, m in enumerate(messages):
        if skip:
            skip = False
            continue
        following = messages[i + 1] if i + 1 < len(messages) else None
        if m.get("role") == "user" and i != last and i not in kept and following is not None and following.get("role") == "assistant" \
                and isinstance(following.get("content"), str) and is_task_answer(following["content"]):
            skip = True
            continue
        out.append(m)
    return out


def previous_user_text(messages: list[ChatMessage]) -> str | None:
    """The user message before this turn's question (the one a follow-up leans on); None on a first turn."""
    users = [m.get("content", "") for m in messages if m.get("role") == "user"]
    return users[-2] if len(users) > 1 and isinstance(users[-2], str) else None
