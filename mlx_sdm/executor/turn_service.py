"""The ONE turn service behind every front end that stores turns: the chat engine
(:mod:`mlx_sdm.executor.engine`) and the server (:mod:`mlx_sdm.server.backend`) are thin callers of it.

It owns the :class:`~mlx_sdm.turn.pipeline.TurnPipeline`, the
:class:`~mlx_sdm.executor.review.ReviewService` and the one cached KV prefix (a KV cache can be
~100 MB, so one conversation's is kept at a time), and it says once what the store keeps of a turn
(:meth:`TurnService.record`): the answer with its verdict, monitor reading, review reasons and typed
:class:`~mlx_sdm.store.message_meta.MessageMeta`. A cancelled turn is stored with no verdict.

Runs on the thread that owns MLX.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np

from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.monitor.session_file.provenance import Provenance, make_provenance
from mlx_sdm.network.verdict import DocumentVerdict, verdict_words
from mlx_sdm.turn.answer import PrefixCache
from mlx_sdm.turn.escalation import REFLECTION_PROMPT, TurnStatus, verdict_review_reasons
from mlx_sdm.store.message_meta import MessageMeta
from mlx_sdm.store.partial_answers import StreamingAnswer
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.turn.pipeline import PrefillCallback, TurnPipeline
from mlx_sdm.executor.review import ReviewService
from mlx_sdm.store.schema import AnswerRecord, TaskScope, now_iso
from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.turn.values import ChatMessage, TurnComponents, TurnItem, TurnOptions, TurnOutcome, TurnPlan, TurnRequest


@dataclass(frozen=True)
class Verified:
    """A given completion judged as the chat judges that turn (force-decoded): the plan it was judged
    under, its features (None when nothing was judged) and the verdict or why there is none."""

    plan: TurnPlan
    completion: str
    features: np.ndarray | None
    verdict: DocumentVerdict | None
    unverifiable_reason: str | None


class TurnService:
    """Pipeline + review service + the one cached KV prefix (see the module docstring)."""

    def __init__(self, store: ChatStore, components: TurnComponents, *, reviewed_dir: str | None = None):
        self.store = store
        self.components = components
        self.pipeline = TurnPipeline(components)
        self.review = ReviewService(store, components, reviewed_dir=reviewed_dir,
                                    features_for=self.pipeline.features_for)
        self._prefix: tuple[str | None, PrefixCache] | None = None  # (the conversation it belongs to, its cache)
        self._provenance: Provenance | None = None
        self._applied: tuple[int, ...] | None = None
        self.sync_reviews()  # just loaded: the store's review labels join the support sets

    @property
    def verifier_path(self) -> str | None:
        """The loaded verifier's folder (None: no verifier judges answers)."""
        return self.components.verifier_path if self.components.verifier is not None else None

    @property
    def provenance(self) -> Provenance | None:
        """The product answering (model, verifier, head, embedder with checksums; mlx-sdm's version and
        commit), stored with each session's first answer; None when its files cannot be read."""
        if self._provenance is None:
            c = self.components
            try:
                self._provenance = make_provenance(
                    model_name=c.lm.name, fingerprint=getattr(c.lm, "fingerprint", None),
                    verifier_path=self.verifier_path, head_path=c.head_path, embedder=c.embedder,
                    extra={"recorded": "at the session's first answer"})
            except (OSError, ValueError):  # a head or verifier folder without its manifest (e.g. moved)
                return None
        return self._provenance

    # ------------------------------------------------------------------ turns

    def stream(self, request: TurnRequest, *, stop: threading.Event | None = None, monitor: object = None,
               conversation: str | None = None, on_prefill: PrefillCallback | None = None) -> Iterator[TurnItem]:
        """One turn through the pipeline (its items, the :class:`TurnOutcome` last), reusing the cached KV
        prefix when it is ``conversation``'s (the server passes None for every request: the pipeline reuses
        it only when the prompt extends it)."""
        prefix = self._prefix[1] if self._prefix is not None and self._prefix[0] == conversation else None
        self._prefix = None  # one cached conversation at a time
        for item in self.pipeline.stream(request, stop=stop, monitor=monitor, prefix=prefix, on_prefill=on_prefill):
            if isinstance(item, TurnOutcome) and item.prefix is not None:
                self._prefix = (conversation, item.prefix)
                item.prefix = None  # the service keeps the one cached prefix; the record goes on without it
            yield item

    def stream_turn(self, session_id: str, request: TurnRequest, *, stop: threading.Event | None = None,
                    monitor: object = None, on_prefill: PrefillCallback | None = None,
                    replaces: int | None = None, seed: int | None = None) -> Iterator[TurnItem]:
        """A chat turn of session ``session_id`` (its user message already stored): the pipeline's items,
        each answer piece also kept in the store as it streams (a kill keeps the partial text, marked
        interrupted); then the answer is stored whole with its verdict, monitor reading and review entry in
        one transaction (status "error" if it fails); the :class:`TurnOutcome` comes last, saying where.
        ``replaces``/``seed``: a regenerated answer, stored with the answer it takes the place of and the seed
        it was sampled with (its temperature is the request's)."""
        created_at = now_iso()
        streaming = StreamingAnswer(self.store, session_id)
        try:
            for item in self.stream(request, stop=stop, monitor=monitor, conversation=session_id, on_prefill=on_prefill):
                if isinstance(item, TurnOutcome):
                    outcome = item
                    continue
                if isinstance(item, TokenPiece):
                    streaming.token(item)
                yield item
            record = self.record(session_id, outcome, created_at=created_at)
            if replaces is not None:
                record.metadata = replace(record.metadata, replaces=replaces, seed=seed,
                                          temperature=request.options.temperature)
            message_id = streaming.finish(record)
        except BaseException:
            streaming.fail()
            raise
        outcome.session_id, outcome.message_id = session_id, message_id
        outcome.review_id = self.store.message(message_id).review_id
        yield outcome

    def verify(self, messages: list[ChatMessage], completion: str, options: TurnOptions = TurnOptions()) -> Verified:
        """Judge a completion made elsewhere as the chat judges that turn (``/v1/verify``)."""
        plan = self.pipeline.plan(messages, options)
        features = self.pipeline.features_of(plan, completion) if plan.judge else None
        verdict, why = self.pipeline.judge(plan, features, completion, options)
        return Verified(plan, completion, features, verdict, why)

    def forget(self, session_id: str | None = None) -> None:
        """Drop the cached KV prefix (of ``session_id`` only, when given: a deleted session)."""
        if session_id is None or (self._prefix is not None and self._prefix[0] == session_id):
            self._prefix = None

    # ------------------------------------------------------------------ what the store keeps

    def record(self, session_id: str, outcome: TurnOutcome, *, created_at: str | None = None,
               source: str | None = None) -> AnswerRecord:
        """What the store keeps of a turn (``source``: who asked, e.g. "api:chat"); a cancelled turn
        keeps its text and tokens but no verdict, features or review entry."""
        escalation = outcome.escalation
        record = AnswerRecord(session_id, outcome.text, status=outcome.status.value, created_at=created_at,
                              prompt=outcome.messages, tokens=outcome.tokens, token_logprobs=outcome.logprobs,
                              metadata=MessageMeta(finish_reason=outcome.finish_reason, source=source),
                              provenance=self.provenance)
        if outcome.status is TurnStatus.CANCELLED:
            return record
        reflect = escalation.reflect
        meta = replace(
            record.metadata, verdict_reason=outcome.verdict_reason,
            judged_text=outcome.judged_text if outcome.unverified_tail else None,
            explanation=escalation.explanation, tool_calls=tuple(outcome.tool_calls),
            pause_message=escalation.message if outcome.status is TurnStatus.PAUSED else None,
            reflection_prompt=REFLECTION_PROMPT if reflect else None, reflection=outcome.reflection if reflect else None)
        return self._judged(record, outcome.verdict, outcome.features, outcome.task, meta, monitor=outcome.monitor,
                            review_reasons=escalation.review_reasons)

    def record_verified(self, session_id: str, verified: Verified, *, source: str | None = None) -> AnswerRecord:
        """What the store keeps of a judged completion (no tokens: it was read, not generated)."""
        verdict, why = verified.verdict, verified.unverifiable_reason
        record = AnswerRecord(session_id, verified.completion, prompt=verified.plan.messages, provenance=self.provenance)
        meta = MessageMeta(finish_reason="stop", source=source,
                           verdict_reason=verdict.reason if verdict is not None else why)
        return self._judged(record, verdict, verified.features, verified.plan.route.task, meta,
                            review_reasons=verdict_review_reasons(verdict))

    def _judged(self, record: AnswerRecord, verdict: DocumentVerdict | None, features: np.ndarray | None,
                task: str | None, meta: MessageMeta, *, review_reasons: list[str],
                monitor: MonitorReading | None = None) -> AnswerRecord:
        record.features = features
        record.feature_model = None if features is None else self.review.feature_model
        record.verdict_status = verdict_words(verdict).status
        record.verdict = verdict
        record.verifier = self.verifier_path
        record.task = TaskScope(task)
        record.monitor = monitor
        record.review_reasons = review_reasons
        record.metadata = meta
        return record

    # ------------------------------------------------------------------ review decisions

    def sync_reviews(self) -> bool:
        """The support sets = the base verifier + the active review decisions given under it (per task of a
        multi-task verifier), rebuilt when the store's decisions changed since the last sync (the TUI in
        another process may have decided). Returns True when they were rebuilt."""
        if self.components.verifier is None:
            return False
        key = tuple(p.decision.id for p in self.review.all_points())
        if key == self._applied:
            return False
        self.review.apply_all(save=False, reload=self._applied is not None)  # first time: just loaded
        self._applied = key
        return True

