"""The evidence behind a verdict: the state and why, the nearest training exemplars (text, label in
words), then q, d, ⌊q̃⌋, the prediction and p_lower."""

from __future__ import annotations

from typing import Any, Mapping

from rich.console import Group
from rich.text import Text
from textual.widgets import Static

from mlx_sdm.network.verdict import exemplar_label_words
from tui.format import format_p, reason_label, shorten, verdict_status

EXEMPLAR_TEXT_WIDTH = 72


def _why(verdict: Mapping[str, Any], status: str) -> str:
    if verdict.get("explanation"):
        return str(verdict["explanation"])
    if status == "verified":
        return "Verified: the verifier vouches for this answer."
    why = reason_label(verdict.get("reason"))
    return f"{status.replace('_', ' ').capitalize()}" + (f": {why}." if why else ".")


def evidence_renderable(verdict: Mapping[str, Any], *, text_width: int = EXEMPLAR_TEXT_WIDTH) -> Group:
    """A Rich renderable for a stored verdict dict: the state and why, then the nearest exemplars'
    text with their label in words, then the numbers for those who want them."""
    status = verdict_status(verdict)
    why = _why(verdict, status)  # it opens with the state in words ("Out of scope: ...")
    state, _, rest = why.partition(":")
    head = Text()
    head.append(state + ":", style="bold")
    head.append(rest)
    parts: list[Any] = [head]
    exemplars = list(verdict.get("exemplars") or [])
    if exemplars:
        parts.append(Text("The most similar examples the verifier was built on:", style="italic"))
        for rank, ex in enumerate(exemplars, start=1):
            line = Text(f"{rank}. ")
            line.append(shorten(ex.get("text") or "(no text stored)", text_width))
            line.append(f"\n   {exemplar_label_words(ex.get('label'))}", style="bold")
            line.append(f" (distance {float(ex.get('distance', 0.0)):.3f}, id {shorten(str(ex.get('id', '')), 24)})",
                        style="dim")
            parts.append(line)
    else:
        parts.append(Text("no exemplars were stored with this verdict", style="italic"))
    d = verdict.get("d")
    numbers = Text(style="dim")
    numbers.append(f"prediction {verdict.get('prediction')}   p_lower {format_p(verdict.get('p_lower'))}   "
                   f"q {verdict.get('q')}   d {'—' if d is None else f'{float(d):.3f}'}   ⌊q̃⌋ {verdict.get('q_bin')}")
    softmax = verdict.get("softmax") or []
    if softmax:
        numbers.append("   softmax " + " ".join(f"{float(p):.3f}" for p in softmax))
    parts.append(numbers)
    return Group(*parts)


class EvidencePanel(Static):
    """Hidden until its verdict badge is expanded."""

    def __init__(self, verdict: Mapping[str, Any] | None = None, *, id: str | None = None) -> None:
        super().__init__("", id=id, classes="evidence")
        self.verdict = verdict
        self.shown: Group | None = None
        if verdict is not None:
            self.show_verdict(verdict)

    def show_verdict(self, verdict: Mapping[str, Any]) -> None:
        self.verdict = verdict
        self.shown = evidence_renderable(verdict)
        self.update(self.shown)
