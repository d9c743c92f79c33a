"""The chat engine: a thin executor on the one thread that owns MLX (:mod:`mlx_sdm.executor.worker`).

A turn is :class:`~mlx_sdm.executor.turn_service.TurnService` (the pipeline generate → verify →
monitor → escalate, the cached KV prefix, the answer stored with its verdict, monitor reading and
review entry in one transaction), shared with the server; this module only adds what a *chat* needs
around it: the conversation so far (from the store), the session's monitor, and the turn's items handed to
its listeners as the pipeline yielded them, each with the :class:`~mlx_sdm.executor.events.TurnRef` it
belongs to (:mod:`mlx_sdm.executor.events`). Review decisions are the service's
:class:`~mlx_sdm.executor.review.ReviewService`.

Callers (the Textual UI, ``mlx-sdm chat --plain``, tests) use methods that queue a job and return a
:class:`concurrent.futures.Future`, and receive the items on the engine's thread (or loop over
:meth:`ChatEngine.stream`).
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
import traceback
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator

from mlx_sdm.errors import DataError, MlxSdmError
from mlx_sdm.executor.conversation import conversation_from, pending_pause
from mlx_sdm.executor.events import (
    ENGINE_REF,
    EngineInfo,
    EngineItem,
    EngineState,
    Listener,
    PauseInfo,
    SupportChange,
    TurnFailed,
    TurnRef,
    prefill_progress,
)
from mlx_sdm.executor.review import DecisionResult, ReviewDecision, ReviewService
from mlx_sdm.store.records import MessageRecord
from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.store.turn_writer import Question, TurnReceipt
from mlx_sdm.turn.values import Resampled, TurnComponents, TurnKind, TurnOptions, TurnRequest
from mlx_sdm.lm.defaults import DEFAULT_MAX_TOKENS
from mlx_sdm.executor.turn_service import TurnService
from mlx_sdm.turn.pipeline import PrefillCallback
from mlx_sdm.executor.worker import MlxWorker

if TYPE_CHECKING:
    from mlx_sdm.turn.monitoring import SessionMonitor

ComponentsFactory = Callable[["EngineConfig"], TurnComponents]


@dataclass
class EngineConfig:
    """How the engine loads and runs. ``verifier=None`` = the default verifier shipped for the model
    (no verifier judges answers when none fits); ``"none"`` turns verification off."""

    model: str | None = None
    verifier: str | None = None
    head: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    system_prompt: str | None = None  # None: the routed task's system prompt, else none of ours (the model's template)
    irreversible_tools: tuple[str, ...] = ()
    quantized: bool = False
    generate_reflection: bool = True  # on HIGH, let the model state its uncertainty before pausing
    reflection_max_tokens: int = 96
    embedder: str = "minilm"  # TRACER sentence embedder: "minilm", "hidden" or "none"
    enable_p_true: bool = True
    semantic_sampling: bool = False  # AUQ System 2 (opt-in)
    auq_thresholds: tuple[float, float, float] = (0.80, 0.60, 0.40)  # floors of LOW / MEDIUM / HIGH on P_t (docs/monitoring.md, AUQ levels and actions)
    reuse_cache: bool = True  # keep the last session's KV cache: a turn prefills only its new tokens
    reviewed_verifier_dir: str | None = None  # where the verifier with review labels is saved; default beside the store
    stop_at_judged_unit: bool = True  # end answers where the verifier's unit ends (the JSON answer)
    second_look: bool = True  # an everyday answer is judged with more answers drawn (a verifier with the member)

    def turn_options(self) -> TurnOptions:
        return TurnOptions(
            max_tokens=self.max_tokens, temperature=self.temperature, system_prompt=self.system_prompt,
            stop_at_judged_unit=self.stop_at_judged_unit, enable_p_true=self.enable_p_true,
            semantic_sampling=self.semantic_sampling, generate_reflection=self.generate_reflection,
            reflection_max_tokens=self.reflection_max_tokens, reuse_cache=self.reuse_cache,
            second_look=self.second_look,
        )


class ChatEngine:
    """Owner of all MLX state; every public method is thread-safe and returns at once.
    ``components(config)`` builds the model and verifier on the engine's thread
    (``mlx_sdm.usecases.loading.chat_components``; tests pass a tiny model)."""

    def __init__(self, config: EngineConfig, store: ChatStore, *, components: ComponentsFactory,
                 listener: Listener | None = None):
        self.config = config
        self.store = store
        self.factory = components
        self._listeners: list[Listener] = [listener] if listener else []
        self._cancel = threading.Event()
        self._turns = itertools.count(1)
        self._info: EngineInfo | None = None
        self._load_error: BaseException | None = None
        self._components: TurnComponents | None = None
        self._service: TurnService | None = None
        self._monitors: dict[str, SessionMonitor] = {}
        self._worker = MlxWorker(on_stop=self._stopped)
        self.ready: Future = self._worker.submit(self._load)

    # ------------------------------------------------------------------ public API (any thread)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Receive every item of every turn, and the engine's own; returns a function that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def info(self) -> EngineInfo | None:
        """What is loaded (None until :attr:`ready` resolves)."""
        return self._info

    @property
    def busy(self) -> bool:
        return self._worker.busy

    def send(self, session_id: str, text: str, *, listener: Listener | None = None) -> Future:
        """Start a turn: the user says ``text`` in session ``session_id``. Resolves to its :class:`TurnReceipt`
        (the turn's record and where the store keeps it)."""
        if not text.strip():
            raise DataError("the message is empty; type something to send", field="text")
        started = time.perf_counter()
        return self._worker.submit(lambda: self._turn(session_id, text, listener, started, guidance_for=None))

    def resume(self, session_id: str, guidance: str, *, listener: Listener | None = None) -> Future:
        """Resume a paused turn with the user's guidance: the model answers again, seeing the
        reflection and the guidance. Resolves to its :class:`TurnReceipt`."""
        started = time.perf_counter()
        return self._worker.submit(lambda: self._resume(session_id, guidance, listener, started))

    def regenerate(self, session_id: str, *, listener: Listener | None = None) -> Future:
        """Answer the session's last question again, sampled (:mod:`mlx_sdm.executor.regeneration`): a new
        answer with its own verdict and monitor reading, stored beside the first. Resolves to its :class:`TurnReceipt`."""
        return self._worker.submit(lambda: self._regenerate(session_id, listener))

    def stream(self, session_id: str, text: str, *, resume: bool = False) -> Iterator[EngineItem]:
        """A turn as the caller's ``for`` loop sees it: each item as the pipeline yielded it, carried from the
        engine's thread (a :class:`~mlx_sdm.executor.events.PrefillProgress` while a long prompt is read),
        and last its :class:`TurnReceipt`; a turn that fails raises its error after its items. A ctrl+c
        (KeyboardInterrupt) while it waits stops the answer at the next token; a second one is raised.
        ``resume``: answer the paused turn with ``text`` as guidance."""
        items: queue.Queue = queue.Queue()
        future = (self.resume if resume else self.send)(session_id, text, listener=lambda _ref, item: items.put(item))
        future.add_done_callback(lambda _: items.put(None))  # a turn refused before it started sends no item
        interrupted = False
        while True:
            try:
                item = items.get()
            except KeyboardInterrupt:  # ctrl+c stops the answer; the turn still ends with its (cancelled) record
                if interrupted:
                    raise
                interrupted = True
                self.cancel()
                continue
            if item is None or isinstance(item, TurnFailed):
                break
            yield item
            if isinstance(item, TurnReceipt):
                break
        future.result()

    def cancel(self) -> None:
        """Stop the running generation at the next token (the partial answer is kept, status "cancelled")."""
        self._cancel.set()

    def pending_pause(self, session_id: str) -> PauseInfo | None:
        """The turn of ``session_id`` waiting for guidance, if any (read from the store; survives restarts)."""
        return pending_pause(self.store.messages(session_id))

    def decide(self, review_id: int, label: int, *, note: str | None = None, completion: str | None = None,
               listener: Listener | None = None) -> Future:
        """Label a review-queue entry (1 acceptable / 0 unacceptable; ``completion`` = an edited,
        acceptable answer), replacing its decision if it has one, as the review screen does. Recorded through the one
        write path (:func:`~mlx_sdm.executor.review.record_review`); the point joins the verifier's support set at
        once. Resolves to a :class:`DecisionResult`."""
        decision = ReviewDecision.of_label(review_id, label, completion=completion, note=note)

        def run() -> DecisionResult:
            result = self._require_service().decide(decision)
            session_id = self.store.review_queue.review_item(review_id).session_id
            self._support_changed(listener, session_id, "added" if result.applied else "skipped", result)
            return result

        return self._worker.submit(run)

    def undo_decision(self, *, listener: Listener | None = None) -> Future:
        """Undo the most recent decision and take its point out of the support set.
        Resolves to a :class:`DecisionResult` (``applied`` = the support set changed) or None."""
        def run() -> DecisionResult | None:
            result = self._require_review().undo()
            if result is not None:
                self._support_changed(listener, None, "removed", result)
            return result

        return self._worker.submit(run)

    def delete_session(self, session_id: str) -> Future:
        """Delete a session; if it held active review decisions, the support set is rebuilt without them."""
        def run() -> int:
            removed = self.store.delete_session(session_id)
            self._monitors.pop(session_id, None)
            self._require_service().forget(session_id)
            self._require_review().after_delete(removed)
            self._refresh_info()
            return removed

        return self._worker.submit(run)

    def call(self, fn: Callable[[TurnComponents], Any]) -> Future:
        """Run ``fn(components)`` on the engine's thread (for scripts and tests that need the model)."""
        return self._worker.submit(lambda: fn(self._require()))

    def shutdown(self, wait: bool = True, timeout: float | None = 30.0) -> None:
        self._cancel.set()
        self._worker.stop(wait, timeout)

    # ------------------------------------------------------------------ worker side

    def _emit(self, listener: Listener | None, ref: TurnRef, item: EngineItem) -> None:
        for call in ([listener] if listener else []) + list(self._listeners):
            try:
                call(ref, item)
            except Exception:  # a broken listener must not kill a turn
                traceback.print_exc()

    def _stopped(self) -> None:
        self._components = self._service = None
        self._monitors.clear()
        self._emit(None, ENGINE_REF, EngineState("stopped", "engine stopped"))

    def _require(self) -> TurnComponents:
        if self._components is None:
            raise self._load_error or MlxSdmError("the chat engine is not loaded")
        return self._components

    def _require_service(self) -> TurnService:
        self._require()
        assert self._service is not None  # built with the components
        return self._service

    def _require_review(self) -> ReviewService:
        return self._require_service().review

    def _load(self) -> EngineInfo:
        self._emit(None, ENGINE_REF, EngineState("loading", "loading model and verifier"))
        try:
            components = self.factory(self.config)
        except BaseException as exc:
            self._load_error = exc
            self._emit(None, ENGINE_REF, EngineState("failed", str(exc) or type(exc).__name__))
            raise
        self._components = components
        self._service = service = TurnService(self.store, components, reviewed_dir=self.config.reviewed_verifier_dir)
        review = service.review
        verified = components.verifier is not None
        reviewed = review.reviewed_dir() if verified else None
        self._info = EngineInfo(
            model_name=components.lm.name, model_fingerprint=dict(components.lm.fingerprint),
            feature_model=review.feature_model, verifier_path=service.verifier_path,
            unverifiable_reason=None if verified else components.unverifiable_reason,
            support_size=review.support_size, reviewed_verifier_path=str(reviewed) if reviewed else None,
            head_path=components.head_path, embedder=components.embedder.name if components.embedder is not None else None,
            max_tokens=self.config.max_tokens, irreversible_tools=list(self.config.irreversible_tools),
            coverage=components.coverage, model_tasks=components.adapted_tasks,
            model_folder=components.lm.adapters.folder if components.lm.adapters is not None else None,
        )
        self._emit(None, ENGINE_REF, EngineState("ready", f"model {components.lm.name} ready"))
        return self._info

    def _refresh_info(self) -> None:
        if self._info is not None and self._service is not None:
            self._info = replace(self._info, support_size=self._service.review.support_size)

    def _support_changed(self, listener: Listener | None, session_id: str | None, action: str,
                         result: DecisionResult) -> None:
        self._refresh_info()
        self._emit(listener, TurnRef(session_id, 0),
                   SupportChange(action, support_size=result.support_size, decision_id=result.decision_id,
                                 message=result.message))

    def _monitor_for(self, session_id: str, messages: list[MessageRecord]) -> SessionMonitor:
        monitor = self._monitors.get(session_id)
        if monitor is None:
            from mlx_sdm.turn.monitoring import MonitorConfig, SessionMonitor

            low, medium, high = self.config.auq_thresholds
            config = MonitorConfig(low_threshold=low, medium_threshold=medium, high_threshold=high,
                                   irreversible_tool_names=tuple(self.config.irreversible_tools),
                                   enable_p_true=self.config.enable_p_true,
                                   enable_semantic_sampling=self.config.semantic_sampling)
            components = self._require()
            monitor = SessionMonitor(session_id, config, embedder=components.embedder)
            monitor.replay(messages)  # a reopened session continues where it was
            self._monitors[session_id] = monitor
        return monitor

    def _resume(self, session_id: str, guidance: str, listener: Listener | None, started: float) -> TurnReceipt:
        if not guidance.strip():
            raise DataError("guidance is empty; tell the model how to go on", field="guidance")
        pause = self.pending_pause(session_id)
        if pause is None:
            raise DataError(f"session {session_id!r} has no paused turn to resume", field="session")
        return self._turn(session_id, guidance, listener, started, guidance_for=pause.message_id)

    def _turn(self, session_id: str, text: str, listener: Listener | None, started: float,
              guidance_for: int | None) -> TurnReceipt:
        service = self._require_service()
        turn = next(self._turns)
        self._cancel.clear()
        with self._reported(session_id, turn, listener):
            self.store.get_session(session_id)
            history = self.store.messages(session_id)  # read once, before this turn writes anything
            monitor = self._monitor_for(session_id, history)
            if guidance_for is not None:
                monitor.resume(text)
            # guidance for a paused turn is part of the next prompt (joined to its question when the paused answer
            # derailed, which the model then does not read again: conversation_from)
            messages = (conversation_from(history, guidance=text) if guidance_for is not None
                        else conversation_from(history) + [{"role": "user", "content": text}])
            # the first token's time counts from the call: the time the turn waited for the engine included
            request = TurnRequest(messages,
                                  self.config.turn_options(),
                                  kind=TurnKind.QUESTION if guidance_for is None else TurnKind.GUIDANCE, received=started)

            def prefill(done: int, total: int) -> None:
                if (progress := prefill_progress(done, total)) is not None:
                    self._emit(listener, TurnRef(session_id, turn), progress)

            receipt = self._stream(service, TurnRef(session_id, turn), request, Question(text, resumes=guidance_for),
                                   monitor, listener, on_prefill=prefill)
        return self._finished(receipt, turn, listener)

    def _regenerate(self, session_id: str, listener: Listener | None) -> TurnReceipt:
        import mlx.core as mx

        from mlx_sdm.executor.regeneration import REGENERATE_TEMPERATURE, regeneration

        service = self._require_service()
        turn = next(self._turns)
        self._cancel.clear()
        with self._reported(session_id, turn, listener):
            history = self.store.messages(session_id)
            again = regeneration(history)
            monitor = self._monitor_for(session_id, history)
            request = TurnRequest(again.messages, replace(self.config.turn_options(), temperature=REGENERATE_TEMPERATURE),
                                  kind=TurnKind.AGAIN,
                                  resampled=Resampled(again.replaces, REGENERATE_TEMPERATURE, again.attempt))
            mx.random.seed(again.attempt)
            receipt = self._stream(service, TurnRef(session_id, turn), request, None, monitor, listener)
        return self._finished(receipt, turn, listener)

    def _stream(self, service: TurnService, ref: TurnRef, request: TurnRequest, question: Question | None,
                monitor: SessionMonitor, listener: Listener | None, *,
                on_prefill: PrefillCallback | None = None) -> TurnReceipt:
        """Loop over the turn's stream: every item but the receipt goes to the listeners as it is; returns the
        receipt (the record and where the store keeps it)."""
        assert ref.session_id is not None
        receipt = None
        for item in service.stream_turn(ref.session_id, request, question, conversation=ref.session_id,
                                        stop=self._cancel, monitor=monitor, on_prefill=on_prefill):
            if isinstance(item, TurnReceipt):
                receipt = item
            else:
                self._emit(listener, ref, item)
        assert receipt is not None  # the turn's stream ends with its receipt
        return receipt

    @contextmanager
    def _reported(self, session_id: str, turn: int, listener: Listener | None) -> Iterator[None]:
        """A turn that fails ends with a :class:`TurnFailed` saying why, and raises."""
        try:
            yield
        except BaseException as exc:
            self._emit(listener, TurnRef(session_id, turn), TurnFailed(str(exc), type(exc).__name__))
            raise

    def _finished(self, receipt: TurnReceipt, turn: int, listener: Listener | None) -> TurnReceipt:
        self._emit(listener, TurnRef(receipt.session_id, turn), receipt)
        return receipt
