"""The one place that knows the session layer's API: the UI calls the engine and the store only here.

Engine calls return at once (the engine's worker thread does the work); the engine calls back on its
thread, and :meth:`Bridge._poster` re-posts each event to a Textual widget as :class:`EngineUpdate`
(``post_message`` is thread-safe and does not block the engine). Calls that must wait for the engine
(a review decision, an undo, switching the model) block on the engine's future and are made from
Textual thread workers, never from the UI thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tui.messages import EngineUpdate

#: How long a UI worker waits for the engine to apply a review decision or an undo (seconds).
DECISION_TIMEOUT_S = 120.0


@dataclass
class UiInfo:
    """What the status line shows."""

    model: str
    verifier: str | None
    head: str | None
    support_size: int | None
    unverifiable_reason: str | None = None


class Bridge:
    def __init__(self, engine: Any, store: Any) -> None:
        self.engine = engine
        self.store = store
        self.data_dir = Path(store.path).parent

    # ----- engine state -------------------------------------------------------------------------
    def info(self) -> UiInfo:
        info = self.engine.info
        verifier = info.verifier_path
        return UiInfo(
            model=info.model_name,
            verifier=Path(verifier).name if verifier else None,
            head=Path(info.head_path).name if info.head_path else None,
            support_size=info.support_size,
            unverifiable_reason=info.unverifiable_reason,
        )

    def _poster(self, target: Any) -> Callable[[Any], None]:
        def post(event: Any) -> None:
            target.post_message(EngineUpdate(event))

        return post

    # ----- turns --------------------------------------------------------------------------------
    def new_session(self) -> str:
        info = self.engine.info
        return self.store.create_session(model=info.model_name, verifier=info.verifier_path).id

    def send(self, session_id: str, text: str, target: Any) -> Any:
        return self.engine.submit(session_id, text, on_event=self._poster(target))

    def resume(self, session_id: str, guidance: str, target: Any) -> Any:
        return self.engine.resume(session_id, guidance, on_event=self._poster(target))

    def abort_paused(self, session_id: str) -> None:
        self.engine.abort(session_id)

    def cancel(self) -> None:
        self.engine.cancel()

    # ----- review -------------------------------------------------------------------------------
    def decide(self, review_id: int, label: int, *, note: str | None = None, completion: str | None = None) -> int | None:
        """Record a decision and add it to the verifier's support set; returns the new support size."""
        future = self.engine.decide(review_id, label, note=note, completion=completion)
        result = future.result(timeout=DECISION_TIMEOUT_S)
        return result.support_size

    def undo(self) -> Any:
        """Undo the last decision (and take its point out of the support set); returns the undone decision or None."""
        future = self.engine.undo_last_decision()
        return future.result(timeout=DECISION_TIMEOUT_S)

    # ----- sessions -----------------------------------------------------------------------------
    def delete_session(self, session_id: str) -> None:
        self.engine.delete_session(session_id).result(timeout=DECISION_TIMEOUT_S)

    def export(self, session_id: str, directory: Path) -> tuple[Path, Path]:
        """Markdown and session JSONL of one session, written atomically into ``directory``."""
        from mlx_sdm.session.export import export_markdown, export_session_jsonl

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        md = export_markdown(self.store, session_id, directory / f"{session_id}.md")
        jsonl = export_session_jsonl(self.store, session_id, directory / f"{session_id}.jsonl")
        return Path(md), Path(jsonl)

    # ----- switching ----------------------------------------------------------------------------
    def switchable(self) -> list[str]:
        return [what for what in ("model", "verifier", "head") if callable(getattr(self.engine, f"switch_{what}", None))]

    def switch_hint(self, what: str) -> str:
        return {
            "model": "smollm2, a local folder, or a hub id",
            "verifier": "a verifier directory (from mlx-sdm train)",
            "head": "a head directory (from mlx-sdm finetune)",
        }[what]

    def switch(self, what: str, value: str) -> None:
        getattr(self.engine, f"switch_{what}")(value).result(timeout=600)

    def close(self) -> None:
        """Nothing to release: the engine and store belong to the caller (``mlx-sdm chat`` closes them)."""
