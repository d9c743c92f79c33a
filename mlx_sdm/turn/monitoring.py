"""Per-session monitoring glue for the chat engine: AUQ (confidence, level, escalation action;
docs/monitoring.md, AUQ) and TRACER (trajectory risk; docs/monitoring.md, TRACER) over one conversation, fed by what a turn
produced, with P(True) read from the local model reusing the conversation's KV cache.

The monitors themselves live in :mod:`mlx_sdm.monitor`; this module only maps a chat turn onto
their steps (docs/monitoring.md, what a step is: each user message is a user step, each answer an agent step, ``llm_call``
or ``tool_call`` when it proposes tool calls) and rebuilds their state from the store when a
session is reopened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from mlx_sdm.monitor.online.auq_config import SAMPLING_TEMPERATURE
from mlx_sdm.monitor.online.auq import AUQMonitor
from mlx_sdm.monitor.online.auq_escalation import (
    SessionStatus,
    UncertaintyError,
    UncertaintyLevel,
    UncertaintyPolicy,
)
from mlx_sdm.monitor.forecast.policy import apply_policy
from mlx_sdm.monitor.online.reading import HistoryPoint, MonitorReading
from mlx_sdm.monitor.online.tracer import TracerConfig, TracerMonitor
from mlx_sdm.network.verdict import ACCEPTABLE, DocumentVerdict
from mlx_sdm.monitor.session_file.records import SessionStep, ToolCall, TracerOutput
from mlx_sdm.monitor.online.embedders import Embedder
from mlx_sdm.turn.seams import AnswerSampler, TurnMonitor

if TYPE_CHECKING:
    from mlx_sdm.lm.generation import Head
    from mlx_sdm.lm.loading import LoadedModel
    from mlx_sdm.monitor.forecast.fused import OnlineFusedMonitor
    from mlx_sdm.monitor.online.p_true import PTrueScorer

__all__ = ["ChatSampler", "MonitorConfig", "SessionMonitor"]

#: docs/monitoring.md, signals of the local model: cap each semantic sample at about 1.5x the original answer's length.
SAMPLE_LENGTH_FACTOR = 1.5
MIN_SAMPLE_TOKENS = 8
#: The seed of AUQ's own draws (the second look's are drawn with ``lm.sampling.DEFAULT_SEED``).
AUQ_SAMPLE_SEED = 1000


@dataclass
class MonitorConfig:
    """AUQ thresholds (floors on the cumulative confidence P_t, docs/monitoring.md, AUQ levels and actions), the irreversible tool
    names, P(True) on/off and the TRACER weights (docs/monitoring.md, TRACER weights reference defaults)."""

    low_threshold: float = 0.80
    medium_threshold: float = 0.60
    high_threshold: float = 0.40
    irreversible_tool_names: tuple[str, ...] = ()
    enable_p_true: bool = True
    inject_reflection_on_high: bool = True
    enable_semantic_sampling: bool = False  # System 2 (docs/monitoring.md, AUQ System 2 sampling): extra samples, only inside the trigger zone
    cap_with_verifier: bool = True  # docs/monitoring.md, combining with the verifier, the v1 cap: s'_t = min(s_t, v_t) with v_t = the verifier's p_lower
    tracer: TracerConfig = field(default_factory=TracerConfig)

    def policy(self) -> UncertaintyPolicy:
        return UncertaintyPolicy(
            low_threshold=self.low_threshold, medium_threshold=self.medium_threshold, high_threshold=self.high_threshold,
            enable_p_true=self.enable_p_true, irreversible_tool_names=list(self.irreversible_tool_names),
            inject_reflection_on_high=self.inject_reflection_on_high,
            enable_semantic_sampling=self.enable_semantic_sampling,
        )


class SessionMonitor:
    """AUQ + TRACER over one chat session (owned by the engine's thread)."""

    def __init__(self, session_id: str, config: MonitorConfig, *, embedder: Embedder | None = None):
        self.session_id = session_id
        self.config = config
        self.auq = AUQMonitor(config.policy())
        self.auq.start(session_id)
        self.tracer = TracerMonitor(config.tracer, embedder, session_id=session_id)
        self.fused = _fused_monitor()  # the fused forecast p_t and the signal that moved it (reading.fused)
        self.history: list[HistoryPoint] = []  # per answer: level, cumulative confidence, TRACER prefix risk
        #: the chat's turn number: one per question (user step); an answer given again keeps its turn's number
        self.turn = 0

    # -- state -----------------------------------------------------------------------------------
    def replay(self, messages: Sequence[Any]) -> None:
        """Rebuild the monitors from stored messages (a reopened session continues where it was):
        TRACER re-observes every step from the stored tokens and log-probs; AUQ takes the last stored
        cumulative confidence (its EMA state) and the paused status."""
        state = self.auq.belief(self.session_id)
        for m in messages:
            if m.role == "user":
                self.turn += m.kind == "chat"  # the chat numbers its questions, not the guidance given on a pause
                self._observe_user_fused(self.tracer.observe(self._user_step(m.text)))
            elif m.role == "assistant" and m.kind == "chat" and m.monitor:
                calls = list(m.metadata.tool_calls)
                out = self.tracer.observe(self._agent_step(m.text, m.tokens, m.token_logprobs, calls))
                reading = m.monitor
                if self.fused is not None:
                    self.fused.observe_answer(out, reading.auq.to_format() if reading.auq else None,
                                              m.verdict or DocumentVerdict.no_verifier(), turn=max(self.turn, 1))
                if reading.cumulative_confidence is not None:
                    state.cumulative_confidence = float(reading.cumulative_confidence)
                state.step_counter += 1
                state.status = SessionStatus.WAITING_FOR_HUMAN if m.status == "paused" else SessionStatus.RUNNING
                self.history.append(HistoryPoint.of(max(self.turn, 1), reading))

    def observe_user(self, text: str, *, new_turn: bool = True) -> None:
        """A user step; ``new_turn``: a new question (False: guidance for the paused turn)."""
        self.turn += new_turn
        self._observe_user_fused(self.tracer.observe(self._user_step(text)))

    def _observe_user_fused(self, out: TracerOutput | None) -> None:
        if self.fused is not None:
            self.fused.observe_user(out)

    def resume(self, guidance: str) -> None:
        if self.auq.belief(self.session_id).status is SessionStatus.WAITING_FOR_HUMAN:
            self.auq.resume(self.session_id, guidance)

    # -- scoring ---------------------------------------------------------------------------------
    def score_answer(
        self,
        *,
        answer: str,
        tokens: Sequence[str] | None,
        logprobs: Sequence[float] | None,
        tool_calls: Sequence[ToolCall],
        p_true: PTrueScorer | None = None,
        verdict: DocumentVerdict | None = None,
        sampler: AnswerSampler | None = None,
    ) -> MonitorReading:
        """Score one answer; returns its reading (the session's history grows in :attr:`history`)."""
        state = self.auq.belief(self.session_id)
        if state.status is SessionStatus.ABORTED:
            # A chat goes on after a CRITICAL abort (the aborted answer is withheld); P_t is kept,
            # so the next answers have to earn the confidence back.
            state.status = SessionStatus.RUNNING
        if state.status is SessionStatus.WAITING_FOR_HUMAN:  # the user moved on without resuming
            state.status = SessionStatus.RUNNING
        tracer_out = self.tracer.observe(self._agent_step(answer, tokens, logprobs, tool_calls))
        verifier_p = None
        judged = verdict.verdict if verdict is not None else None
        if self.config.cap_with_verifier and judged is not None and judged.p_lower is not None \
                and int(judged.prediction) == ACCEPTABLE:
            verifier_p = float(judged.p_lower)
        step_type = "tool_call" if tool_calls else "llm_call"
        try:
            step = self.auq.score_step(
                self.session_id, step_type, answer, p_true=p_true, tool_names=[c.name for c in tool_calls],
                verifier_p=verifier_p, sampler=sampler,
            )
        except UncertaintyError:
            step = state.step_uncertainties[-1]  # recorded before the raise
        level = step.level
        ran = getattr(p_true, "result", None)  # a PTrueScorer says how much of the KV cache it reused
        reading = MonitorReading(
            level=level,
            action=step.action,
            cumulative_confidence=step.propagated_confidence,
            step_confidence=step.step_confidence,
            tracer_risk=tracer_out.prefix_risk,
            step_risk=tracer_out.r,
            irreversible=bool(step.irreversible),
            inject_reflection=bool(
                level is UncertaintyLevel.HIGH and step_type == "llm_call" and self.config.inject_reflection_on_high
            ),
            critical_below=self.config.high_threshold,
            auq=step,
            tracer=tracer_out,
            p_true=None if ran is None else {"prefilled_tokens": ran.prefilled_tokens,
                                              "reused_tokens": ran.reused_tokens, "cache_restored": ran.cache_restored},
        )
        if self.fused is not None:
            reading.fused = self.fused.observe_answer(tracer_out, step.to_format(), verdict or DocumentVerdict.no_verifier(),
                                                      turn=max(self.turn, 1))
        apply_policy(reading, answer, verdict)  # this turn's own risks: a derailed answer, a verdict that calls it wrong
        self.history.append(HistoryPoint.of(max(self.turn, 1), reading))
        return reading

    # -- steps -----------------------------------------------------------------------------------
    def _user_step(self, text: str) -> SessionStep:
        return SessionStep(step_id=f"user_{len(self.tracer.outputs)}", actor="user", step_type=None, text=text)

    def _agent_step(self, text: str, tokens: Sequence[str] | None, logprobs: Sequence[float] | None,
                    tool_calls: Sequence[ToolCall]) -> SessionStep:
        if tokens is None or logprobs is None or len(tokens) != len(logprobs):
            tokens = logprobs = None
        calls = list(tool_calls)
        return SessionStep(
            step_id=f"{'tool' if calls else 'llm'}_{len(self.tracer.outputs)}", actor="agent",
            step_type="tool_call" if calls else "llm_call", text=text, tool_calls=calls,
            token_logprobs=None if logprobs is None else list(logprobs), tokens=None if tokens is None else list(tokens),
        )


def _fused_monitor() -> OnlineFusedMonitor | None:
    """The online fused monitor with the shipped parameters (None if they cannot be read)."""
    from mlx_sdm.monitor.forecast.fused import FusedParams, OnlineFusedMonitor

    try:
        return OnlineFusedMonitor(FusedParams.shipped())
    except (OSError, ValueError, KeyError):
        return None


class ChatSampler:
    """System 2's response sampler (docs/monitoring.md, AUQ System 2 sampling): more answers to the same chat,
    each capped at ~1.5x the original answer's length (docs/monitoring.md, signals of the local model). Called
    by AUQ only inside the trigger zone, while the answer's KV cache is held.

    One sampling, two readers: the answers the turn's second look drew (``shared``) are read first, so AUQ
    does not draw its own when they suffice; more are drawn in one batch continuing from the answer's prompt
    cache (``lm.sampling.sample_from_cache``: one decode step per token for all of them, no second prefill) at
    AUQ's temperature 0.8. A turn decoded with the SDM-network head (whose logits the cache's model does not
    give) draws each answer afresh through that head."""

    def __init__(self, lm: LoadedModel, messages: list[dict], answer_tokens: int, *, head: Head | None = None,
                 cache: list | None = None, prompt_ids: Sequence[int] = (), shared: Sequence[str] = (),
                 temperature: float = SAMPLING_TEMPERATURE):
        self.lm, self.messages, self.head, self.temperature = lm, messages, head, temperature
        self.cache, self.prompt_ids = cache, list(prompt_ids)
        self.max_tokens = max(MIN_SAMPLE_TOKENS, int(round(SAMPLE_LENGTH_FACTOR * answer_tokens)))
        self._shared = list(shared)
        self.drawn: list[str] = []

    def sample(self, n: int) -> list[str]:
        out, self._shared = self._shared[:n], self._shared[n:]
        if len(out) < n:
            out += self._draw(n - len(out))
        self.drawn.extend(out)
        return out

    def _draw(self, n: int) -> list[str]:
        if self.head is None and self.cache is not None and len(self.prompt_ids) > 1:
            from mlx_sdm.lm.sampling import sample_from_cache

            # a seed per call (AUQ_SAMPLE_SEED + the answers handed out before it): AUQ may ask again for more
            drawn = sample_from_cache(self.lm, self.cache, self.prompt_ids, k=n, temperature=self.temperature,
                                      seed=AUQ_SAMPLE_SEED + len(self.drawn), max_tokens=self.max_tokens)
            return list(drawn.texts)
        from mlx_sdm.turn.answer import generate_answer

        return [generate_answer(self.lm, self.messages, max_tokens=self.max_tokens, temperature=self.temperature,
                                head=self.head, features=False).text for _ in range(n)]


if TYPE_CHECKING:
    def _holds(monitor: SessionMonitor) -> TurnMonitor:
        """The checker's proof that the real monitor is what :class:`~mlx_sdm.turn.seams.TurnMonitor` says (never
        called)."""
        return monitor
