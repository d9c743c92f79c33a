"""Copying an answer: OSC 52 to the terminal's clipboard, a copy in ``<store dir>/clipboard.txt``, and a
selectable fallback where the terminal is known to drop OSC 52."""

from __future__ import annotations

import os
from pathlib import Path

from textual.screen import Screen

from tui.screens.prompts import CopyFallback

#: Terminals known to drop OSC 52 clipboard writes: copying there opens the selectable fallback at once.
OSC52_BLIND_TERMINALS = {"Apple_Terminal"}
CLIPBOARD_FILE = "clipboard.txt"


def copy_text(screen: Screen, text: str, data_dir: str | Path) -> None:
    """Copy ``text`` (OSC 52), keep it in the store's folder and tell the user where it went."""
    path = Path(data_dir) / CLIPBOARD_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        screen.notify(f"Could not write {path}: {exc}", severity="error")
    screen.app.copy_to_clipboard(text)
    if os.environ.get("TERM_PROGRAM") in OSC52_BLIND_TERMINALS:
        screen.app.push_screen(CopyFallback(text, str(path)))
    else:
        screen.notify(f"Copied (OSC 52). Also saved to {path}; ctrl+p → 'Show copied text' to select it by hand.")
