"""The UI's hold on the engine and the store (``mlx_sdm.executor``, ``mlx_sdm.store``).

Screens call the engine and the store through the bridge's attributes (``bridge.engine.send(...)``,
``bridge.store.messages(...)``): :attr:`Bridge.engine` is the engine in use now, replaced when the user
switches the model, so a screen reads it at each call rather than keeping it. The bridge's own methods are
what the UI adds on top of those two objects:

- :meth:`Bridge.attach` delivers the engine's items to a screen. The engine calls its listeners on its
  own thread with each item and the :class:`~mlx_sdm.executor.events.TurnRef` it belongs to; the listener puts
  the item in its Textual message (:func:`tui.messages.message_for`) and posts it (``post_message`` is
  thread-safe and does not block the engine).
- Calls that must wait for the engine (a review decision, an undo, deleting a session, switching the model)
  block on the engine's future with a timeout; they are made from Textual thread workers, never from the UI
  thread. Other engine calls return a future at once (the engine's single worker thread does the work and
  owns all MLX state).
- What the status line shows while and after the model loads, a new session stamped with the model and
  verifier in use, what the verifier covers, the session export and switching the model, verifier or head.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from textual.message_pump import MessagePump

from mlx_sdm.network.coverage import TaskInstruction, VerifierCoverage
from mlx_sdm.executor.events import EngineItem, TurnRef
from mlx_sdm.executor.review import DecisionResult
from mlx_sdm.store.chat_store import ChatStore
from tui.messages import message_for

if TYPE_CHECKING:  # the engine module loads the MLX pipeline
    from mlx_sdm.executor.engine import ChatEngine

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
    ready: bool = True
    model_folder: str | None = None  # a fine-tuned model folder (--model DIR)
    model_tasks: tuple[TaskInstruction, ...] = ()  # ... and the tasks its adapters were trained on


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
            support_size=info.support_size, model_folder=info.model_folder, model_tasks=info.model_tasks,
        )

    # ----- sessions and coverage -------------------------------------------------------------------
    def new_session(self, title: str | None = None) -> str:
        """A new session in the store, stamped with the model and verifier in use (None while loading); its id."""
        info = self.engine.info()
        model = info.model_name if info is not None else None
        verifier = info.verifier_path if info is not None else None
        return self.store.create_session(title, model=model, verifier=verifier).id

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
        """Delete the session on the engine's thread; how many active review decisions went with it (the
        engine rebuilds the verifier's support set without them)."""
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
