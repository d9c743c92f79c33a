"""The chat's status line: the model, the verifier and the head once the model is loaded (before that, that it is
loading and that typing works), then what is happening now. The support set's count is the review screen's: it
means something to whoever labels answers, nothing to whoever chats."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from tui.bridge import UiInfo


class StatusLine(Static):
    def show(self, info: UiInfo, *, loading: bool, note: str | None = None) -> None:
        """What is loaded (``info``; ``loading``: the model is still being loaded) and ``note``, one line."""
        if not info.ready:  # the screen is up before the model: say so, and that typing works
            parts = ["loading model… type away: a message is sent when it is ready" if loading else f"model {info.model}"]
        else:
            if info.model_folder:  # a fine-tuned folder: its name says what the verifier and adapters are for
                parts = [f"model {Path(info.model_folder).name} ({info.model}, tuned for {', '.join(t.name or 'a task' for t in info.model_tasks)})",
                         "its own verifier"]
            else:
                parts = [f"model {info.model}", f"verifier {info.verifier or 'none: no verifier judges answers'}"]
            parts += [f"head {info.head}"] if info.head else []
        self.update(" · ".join(parts + ([note] if note else [])))
