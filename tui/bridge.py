"""The one place that knows the executor's API (``mlx_sdm.executor``): the UI calls the engine
and the store only here.

Engine calls return at once (the engine's single worker thread does the work and owns all MLX
state). The engine calls its listeners on ITS thread with each item and the
:class:`~mlx_sdm.executor.events.TurnRef` it belongs to; :meth:`Bridge.attach` subscribes a listener that
puts the item in its Textual message (:func:`tui.messages.message_for`) and posts it to a Textual widget
(``post_message`` is thread-safe and does not block the engine). Calls that must wait for the engine (a review decision,
an undo, deleting a session, switching the model) block on the engine's future and are made from
Textual thread workers, never from the UI thread.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from textual.message_pump import MessagePump

from mlx_sdm.network.coverage import VerifierCoverage
from mlx_sdm.executor.events import EngineItem, PauseInfo, TurnRef
from mlx_sdm.executor.review import DecisionResult
from mlx_sdm.store.schema import Decision, MessageRecord, ReviewItem, SessionInfo
from mlx_sdm.store.search import SearchHit, SearchQuery, search_sessions
from mlx_sdm.store.chat_store import ChatStore
from tui.messages import message_for

if TYPE_CHECKING:  # the engine module loads the MLX pipeline
    from mlx_sdm.executor.engine import ChatEngine
    from mlx_sdm.turn.values import TurnOutcome

#: How long a UI worker waits for the engine to apply a review decision, an undo or a delete (seconds).
DECISION_TIMEOUT_S = 300.0
#: How long switching the model / verifier / head may take to load (seconds).
SWITCH_TIMEOUT_S = 900.0
EXPORT_SUFFIXES = {"markdown": ".md", "jsonl": ".jsonl"}


@dataclass
class UiInfo:
    """What the status line shows."""

    model: str
    verifier: str | None
    head: str | None
    support_size: int | None
    unverifiable_reason: str | None = None
    ready: bool = True


class Bridge:
    def __init__(self, engine: ChatEngine, store: ChatStore) -> None:
        self.engine = engine
        self._original_engine = engine
        self.store = store
        self.data_dir = Path(store.path).parent
        self._target: MessagePump | None = None
        self._unsubscribe: Callable[[], None] | None = None

    # ----- the engine's items ---------------------------------------------------------------------
    def attach(self, target: MessagePump) -> None:
        """Deliver every item the engine hands its listeners to ``target`` (a Textual widget), each in its
        own Textual message."""
        self._target = target
        if self._unsubscribe is not None:
            self._unsubscribe()

        def post(ref: TurnRef, item: EngineItem) -> None:
            target.post_message(message_for(ref, item))

        self._unsubscribe = self.engine.subscribe(post)

    def close(self) -> None:
        """Stop delivering the engine's items. The engine and store given to the UI belong to the caller (``mlx-sdm chat``
        closes them); an engine the UI started by switching the model is shut down here."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.engine is not self._original_engine:
            self.engine.shutdown(wait=False)

    # ----- engine state -------------------------------------------------------------------------
    def load_error(self) -> str | None:
        """The one line that says why the model or verifier could not be loaded (None while loading or loaded)."""
        ready = self.engine.ready
        if not ready.done() or ready.cancelled() or ready.exception() is None:
            return None
        exc = ready.exception()
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__

    def when_loaded(self, callback: Callable[[], None]) -> bool:
        """Call ``callback()`` on the engine's thread when loading ends; False if it already has."""
        if self.engine.ready.done():
            return False
        self.engine.ready.add_done_callback(lambda _future: callback())
        return True

    @property
    def loading(self) -> bool:
        """The model is still loading: the UI is up and takes messages, which the engine answers once loaded."""
        return self.engine.info() is None and not self.engine.ready.done()  # info is set before "ready" is sent

    def load_state(self) -> str:
        if not self.engine.ready.done():
            return "loading…"
        error = self.load_error()
        return f"not loaded: {error}" if error else "not loaded"

    def info(self) -> UiInfo:
        info = self.engine.info()
        if info is None:
            return UiInfo(model=self.load_state(), verifier=None, head=None, support_size=None, ready=False)
        return UiInfo(
            model=info.model_name,
            verifier=Path(info.verifier_path).name if info.verifier_path else None,
            head=Path(info.head_path).name if info.head_path else None,
            support_size=info.support_size,
            unverifiable_reason=info.unverifiable_reason,
        )

    # ----- turns --------------------------------------------------------------------------------
    def new_session(self, title: str | None = None) -> str:
        info = self.engine.info()
        model = info.model_name if info is not None else None
        verifier = info.verifier_path if info is not None else None
        return self.store.create_session(title, model=model, verifier=verifier).id

    def send(self, session_id: str, text: str) -> Future:
        return self.engine.send(session_id, text)

    def regenerate(self, session_id: str) -> Future:
        """Answer the session's last question again, sampled (its own verdict; both answers kept)."""
        return self.engine.regenerate(session_id)

    def branch_session(self, session_id: str, *, before_message_id: int | None = None,
                       title: str | None = None) -> SessionInfo:
        """A new session continuing ``session_id`` with its messages before ``before_message_id`` (None: all)."""
        return self.store.branch_session(session_id, before_message_id=before_message_id, title=title)

    def resume(self, session_id: str, guidance: str) -> Future:
        return self.engine.resume(session_id, guidance)

    def pending_pause(self, session_id: str) -> PauseInfo | None:
        """The turn of this session waiting for guidance, or None."""
        return self.engine.pending_pause(session_id)

    def cancel(self) -> None:
        self.engine.cancel()

    # ----- store reads and renames (SQLite, no MLX: fine on the UI thread) -----------------------
    def sessions(self) -> list[SessionInfo]:
        return self.store.list_sessions()

    def session(self, session_id: str) -> SessionInfo:
        return self.store.get_session(session_id)

    def messages(self, session_id: str) -> list[MessageRecord]:
        return self.store.messages(session_id)

    def answers_of(self, session_id: str) -> dict[int, TurnOutcome]:
        """The session's answers (message id -> the turn's record, read back as the pipeline yielded it)."""
        return self.store.answers_of(session_id)

    def rename_session(self, session_id: str, title: str) -> SessionInfo:
        return self.store.rename_session(session_id, title)

    def search(self, query: SearchQuery) -> list[SearchHit]:
        return search_sessions(self.store, query)

    def review_items(self, **filters: Any) -> list[ReviewItem]:
        return self.store.review_items(**filters)

    def review_reasons(self) -> list[str]:
        return self.store.review_reasons()

    def last_decision(self) -> Decision | None:
        return self.store.last_decision()

    def export_training_rows(self, path: str | Path) -> int:
        return self.store.export_training_rows(path)

    def coverage(self) -> VerifierCoverage:
        """What the loaded verifier covers (empty until loaded or without a verifier)."""
        info = self.engine.info()
        return info.coverage if info is not None else VerifierCoverage()

    # ----- review (blocking: call from a thread worker) ----------------------------------------
    def decide(self, review_id: int, label: int, *, note: str | None = None,
               completion: str | None = None) -> DecisionResult:
        """Record a decision; the engine adds the point to the verifier's support set."""
        return self.engine.decide(review_id, label, note=note, completion=completion).result(timeout=DECISION_TIMEOUT_S)

    def undo(self) -> DecisionResult | None:
        """Undo the last decision (its point leaves the support set); None when there was none."""
        return self.engine.undo_decision().result(timeout=DECISION_TIMEOUT_S)

    def delete_session(self, session_id: str) -> int:
        return int(self.engine.delete_session(session_id).result(timeout=DECISION_TIMEOUT_S) or 0)

    # ----- export -------------------------------------------------------------------------------
    def export(self, session_id: str, directory: str | Path) -> list[Path]:
        """The session as Markdown and as session JSONL (what ``mlx-sdm eval-monitor`` reads), written atomically."""
        from mlx_sdm.store.export import export_session

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        return [
            Path(export_session(self.store, session_id, directory / f"session-{session_id}{suffix}", fmt))
            for fmt, suffix in EXPORT_SUFFIXES.items()
        ]

    # ----- switching model / verifier / head ----------------------------------------------------
    def switchable(self) -> list[str]:
        config = getattr(self.engine, "config", None)
        return [what for what in ("model", "verifier", "head") if config is not None and hasattr(config, what)]

    def switch_hint(self, what: str) -> str:
        return {
            "model": "smollm2, a local model folder, or a hub id",
            "verifier": "a verifier directory (mlx-sdm train), or none",
            "head": "a head directory (mlx-sdm finetune), or none",
        }[what]

    def switch(self, what: str, value: str) -> None:
        """Start a new engine with ``what`` replaced (it loads on its own thread), then retire the old one.
        A model switch drops the verifier and head choice: they belong to a model (the default verifier is
        looked up again, and answers are unverifiable when none fits)."""
        from mlx_sdm.executor.engine import ChatEngine

        changes: dict[str, Any] = {what: value}
        if what == "model":
            changes.update(verifier=None, head=None)
        new = ChatEngine(replace(self.engine.config, **changes), self.store, components=self.engine.factory)
        try:
            new.ready.result(timeout=SWITCH_TIMEOUT_S)
        except BaseException:
            new.shutdown(wait=False)
            raise
        old, self.engine = self.engine, new
        if self._target is not None:
            self.attach(self._target)
        if old is not self._original_engine:
            old.shutdown(wait=False)
