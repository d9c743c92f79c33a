"""The one turn service behind every front end that stores turns: the chat engine
(:mod:`mlx_sdm.executor.engine`) and the server (:mod:`mlx_sdm.server.backend`) are thin callers of it.

It owns the :class:`~mlx_sdm.turn.pipeline.TurnPipeline`, the
:class:`~mlx_sdm.executor.review.ReviewService` and the one cached KV prefix (a KV cache can be
~100 MB, so one conversation's is kept at a time), and it says once what the store keeps of a turn
(:meth:`TurnService.keep`): the turn's one record, :class:`~mlx_sdm.turn.values.TurnOutcome`, which
the store writes as it is and reads back as the same type. A cancelled turn is stored with no verdict.

Runs on the thread that owns MLX.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Iterator

from mlx_sdm.monitor.session_file.provenance import Provenance, make_provenance
from mlx_sdm.turn.answer import PrefixCache
from mlx_sdm.store.partial_answers import StreamingAnswer
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.turn.pipeline import PrefillCallback, TurnPipeline
from mlx_sdm.turn.seams import TurnMonitor
from mlx_sdm.executor.review import ReviewService
from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.turn.values import ChatMessage, Resampled, TurnComponents, TurnItem, TurnOptions, TurnOutcome, TurnRequest


class TurnService:
    """Pipeline + review service + the one cached KV prefix (see the module docstring)."""

    def __init__(self, store: ChatStore, components: TurnComponents, *, reviewed_dir: str | None = None):
        self.store = store
        self.components = components
        self.pipeline = TurnPipeline(components)
        self.review = ReviewService(store, components, reviewed_dir=reviewed_dir, pipeline=self.pipeline)
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

    def stream(self, request: TurnRequest, *, stop: threading.Event | None = None, monitor: TurnMonitor | None = None,
               conversation: str | None = None, on_prefill: PrefillCallback | None = None) -> Iterator[TurnItem]:
        """One turn through the pipeline (its items, the :class:`TurnOutcome` last), reusing the cached KV
        prefix when it is ``conversation``'s (the server passes None for every request: the pipeline reuses
        it only when the prompt extends it)."""
        prefix = self._prefix[1] if self._prefix is not None and self._prefix[0] == conversation else None
        self._prefix = None  # one cached conversation at a time
        for item in self.pipeline.stream(request, stop=stop, monitor=monitor, prefix=prefix, on_prefill=on_prefill):
            if isinstance(item, TurnOutcome) and item.prefix is not None:
                self._prefix = (conversation, item.prefix)
                item = replace(item, prefix=None)  # the service keeps the one cached prefix; the record goes without
            yield item

    def stream_turn(self, session_id: str, request: TurnRequest, *, stop: threading.Event | None = None,
                    monitor: TurnMonitor | None = None, on_prefill: PrefillCallback | None = None,
                    replaces: int | None = None, seed: int | None = None) -> Iterator[TurnItem]:
        """A chat turn of session ``session_id`` (its user message already stored): the pipeline's items,
        each answer piece also kept in the store as it streams (a kill keeps the partial text, marked
        interrupted); then the answer is stored whole with its verdict, monitor reading and review entry in
        one transaction (status "error" if it fails); the :class:`TurnOutcome` comes last, saying where.
        ``replaces``/``seed``: a regenerated answer, stored with the answer it takes the place of and the seed
        it was sampled with (its temperature is the request's)."""
        streaming = StreamingAnswer(self.store.answers, session_id)
        try:
            for item in self.stream(request, stop=stop, monitor=monitor, conversation=session_id, on_prefill=on_prefill):
                if isinstance(item, TurnOutcome):
                    outcome = item
                    continue
                if isinstance(item, TokenPiece):
                    streaming.token(item)
                yield item
            resampled = None if replaces is None else Resampled(replaces, request.options.temperature,
                                                                     seed if seed is not None else 0)
            outcome = replace(self.keep(outcome, session_id), resampled=resampled)
            message_id = streaming.finish(outcome, provenance=self.provenance)
        except BaseException:
            streaming.fail()
            raise
        yield replace(outcome, message_id=message_id, review_id=self.store.message(message_id).review_id)

    def judge_text(self, messages: list[ChatMessage], completion: str, options: TurnOptions = TurnOptions()) -> TurnOutcome:
        """A completion made elsewhere judged as the chat judges that turn (``/v1/verify``, ``verify_text``):
        :meth:`~mlx_sdm.turn.pipeline.TurnPipeline.judge_text`; the store keeps it only when the caller
        asks (:meth:`keep`)."""
        return self.pipeline.judge_text(TurnRequest(messages, options), completion)

    def forget(self, session_id: str | None = None) -> None:
        """Drop the cached KV prefix (of ``session_id`` only, when given: a deleted session)."""
        if session_id is None or (self._prefix is not None and self._prefix[0] == session_id):
            self._prefix = None

    # ------------------------------------------------------------------ what the store keeps

    def keep(self, outcome: TurnOutcome, session_id: str, *, source: str | None = None) -> TurnOutcome:
        """``outcome`` with where it is kept and what its features are of, for the store to write
        (``source``: who asked, e.g. "api:chat"). The store writes the record itself
        (:func:`~mlx_sdm.store.answer_rows.write_answer`); nothing is copied into another record."""
        return replace(outcome, session_id=session_id, source=source,
                       feature_model=self.review.feature_model if outcome.features is not None else None)

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

