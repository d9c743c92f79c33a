"""The one turn service behind every front end that stores turns: the chat engine
(:mod:`mlx_sdm.executor.engine`) and the server (:mod:`mlx_sdm.server.backend`) are thin callers of it.

It owns the :class:`~mlx_sdm.turn.pipeline.TurnPipeline`, the
:class:`~mlx_sdm.executor.review.ReviewService` and the one cached KV prefix (a KV cache can be
~100 MB, so one conversation's is kept at a time), and it says once what the store keeps of a turn
(:meth:`TurnService.stream_turn`, the one way a turn is kept): the turn's one record,
:class:`~mlx_sdm.turn.values.TurnOutcome`, which the store writes as it is, with its question, and reads back as
the same type. A cancelled turn is stored with no verdict.

Runs on the thread that owns MLX.
"""

from __future__ import annotations

import threading
from typing import Iterator

import numpy as np

from mlx_sdm.monitor.session_file.provenance import Provenance, make_provenance
from mlx_sdm.turn.answer import PrefixCache
from mlx_sdm.store.turn_writer import Question, TurnReceipt, TurnWriter
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.turn.pipeline import PrefillCallback, TurnPipeline
from mlx_sdm.turn.seams import TurnMonitor
from mlx_sdm.executor.events import KeptTurnItem
from mlx_sdm.executor.review import DecisionResult, ReviewDecision, ReviewService
from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.turn.values import TurnComponents, TurnItem, TurnOutcome, TurnPlan, TurnRequest


class TurnService:
    """Pipeline + review service + the one cached KV prefix (see the module docstring)."""

    def __init__(self, store: ChatStore, components: TurnComponents, *, reviewed_dir: str | None = None):
        self.store = store
        self.components = components
        self.review = ReviewService(store, components, reviewed_dir=reviewed_dir, features_of=self._features_of)
        self.pipeline = TurnPipeline(components, verifiers=self.review)  # the review labels join the verdicts
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
                    model_name=c.lm.name, fingerprint=c.lm.fingerprint,
                    verifier_path=self.verifier_path, head_path=c.head_path, embedder=c.embedder,
                    extra={"recorded": "at the session's first answer"})
            except (OSError, ValueError):  # a head or verifier folder without its manifest (e.g. moved)
                return None
        return self._provenance

    # ------------------------------------------------------------------ turns

    def stream(self, request: TurnRequest, *, plan: TurnPlan | None = None, stop: threading.Event | None = None,
               monitor: TurnMonitor | None = None, conversation: str | None = None,
               on_prefill: PrefillCallback | None = None) -> Iterator[TurnItem]:
        """One turn through the pipeline (its items, the :class:`TurnOutcome` last), reusing the cached KV
        prefix when it is ``conversation``'s (the server passes None for every request: the pipeline reuses
        it only when the prompt extends it) and keeping the one this turn leaves for it."""
        prefix = self._prefix[1] if self._prefix is not None and self._prefix[0] == conversation else None
        self._prefix = None  # one cached conversation at a time

        def keep(kept: PrefixCache) -> None:
            self._prefix = (conversation, kept)

        yield from self.pipeline.stream(request, plan=plan, stop=stop, monitor=monitor, prefix=prefix,
                                        keep_prefix=keep, on_prefill=on_prefill)

    def stream_turn(self, session_id: str, request: TurnRequest, question: Question | None, *, partial: bool = True,
                    conversation: str | None = None, plan: TurnPlan | None = None, stop: threading.Event | None = None,
                    monitor: TurnMonitor | None = None,
                    on_prefill: PrefillCallback | None = None) -> Iterator[KeptTurnItem]:
        """A turn of session ``session_id``, kept the one way the chat and the server keep one
        (:class:`~mlx_sdm.store.turn_writer.TurnWriter`): the pipeline's items as they come, and last, in place of
        the record, the store's :class:`~mlx_sdm.store.turn_writer.TurnReceipt` (the record and where it is kept).
        ``question``: the message the turn answers, written with its answer (None: the turn answers a stored
        question again); ``partial``: keep the answer while it streams (the chat: a kill keeps the partial text,
        marked interrupted; a failed turn is kept with status "error"), else write the question and the answer
        whole at the end (the server). ``conversation``: whose cached KV prefix the turn may reuse (the chat: its
        session; the server: None, any request whose prompt extends it)."""
        writer = TurnWriter(self.store.answers, session_id, question, partial=partial)
        try:
            for item in self.stream(request, plan=plan, stop=stop, monitor=monitor, conversation=conversation,
                                    on_prefill=on_prefill):
                if isinstance(item, TurnOutcome):
                    outcome = item
                    continue
                if isinstance(item, TokenPiece):
                    writer.token(item)
                yield item
            receipt = writer.finish(outcome, provenance=self.provenance)
        except BaseException:
            writer.fail()
            raise
        yield receipt

    def judge_turn(self, session_id: str, request: TurnRequest, question: Question, completion: str, *,
                   plan: TurnPlan | None = None) -> TurnReceipt:
        """A completion made elsewhere (``/v1/verify``) judged as the chat judges that turn
        (:meth:`~mlx_sdm.turn.pipeline.TurnPipeline.judge_texts`; ``plan``: the request's, already made) and kept
        with its question the way a served turn is."""
        (outcome,) = self.pipeline.judge_texts([(request, completion)], plans=None if plan is None else [plan])
        return self.store.add_turn(session_id, question, outcome, provenance=self.provenance)

    def _features_of(self, request: TurnRequest, completion: str) -> np.ndarray | None:
        """An answer made elsewhere (an edited one in review) read as the chat reads that turn."""
        return self.pipeline.judge_text(request, completion).features

    def forget(self, session_id: str | None = None) -> None:
        """Drop the cached KV prefix (of ``session_id`` only, when given: a deleted session)."""
        if session_id is None or (self._prefix is not None and self._prefix[0] == session_id):
            self._prefix = None

    # ------------------------------------------------------------------ review decisions

    def sync_reviews(self) -> bool:
        """The support sets = the base verifier + the active review decisions given under it (per task of a
        multi-task verifier), rebuilt when the store's decisions changed since the last sync (the TUI in
        another process may have decided). Returns True when they were rebuilt."""
        if self.components.verifier is None:
            return False
        self.review.read_edits()  # edits recorded with no model loaded (`mlx-sdm review correct`) become points
        key = self._points_key()
        if key == self._applied:
            return False
        self.review.apply_all(save=False, reload=self._applied is not None)  # first time: just loaded
        self._applied = key
        return True


    def decide(self, decision: ReviewDecision) -> DecisionResult:
        """A review decision (the chat's review screen, ``POST /v1/reviews/{id}``): recorded and put into the
        support sets at once (:meth:`ReviewService.decide`), which then hold what a sync would build."""
        in_sync = self._applied is not None and self._applied == self._points_key()
        result = self.review.decide(decision)
        if in_sync:  # nothing else was decided meanwhile: the sets hold the store's decisions, no rebuild is due
            self._applied = self._points_key()
        return result

    def _points_key(self) -> tuple[int, ...]:
        """Which decisions the support sets hold when they are in step with the store."""
        return tuple(p.decision.id for p in self.review.all_points())
