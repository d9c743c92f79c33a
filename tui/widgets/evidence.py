"""The evidence behind a verdict: q, d, ⌊q̃⌋, the prediction and the nearest training exemplars."""

from __future__ import annotations

from typing import Any, Mapping

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from tui.format import format_p, reason_label, shorten, verdict_status

EXEMPLAR_TEXT_WIDTH = 72


def evidence_renderable(verdict: Mapping[str, Any], *, text_width: int = EXEMPLAR_TEXT_WIDTH) -> Group:
    """A Rich renderable for a ``Verdict.to_dict()``: the numbers first, then the exemplar table."""
    status = verdict_status(verdict)
    head = Text()
    head.append(status.replace("_", " "), style="bold")
    if verdict.get("reason"):
        head.append(f" ({reason_label(verdict.get('reason'))})")
    head.append(f"   prediction {verdict.get('prediction')}   p_lower {format_p(verdict.get('p_lower'))}")
    numbers = Text()
    d = verdict.get("d")
    numbers.append(f"q {verdict.get('q')}   d {'—' if d is None else f'{float(d):.3f}'}   ⌊q̃⌋ {verdict.get('q_bin')}")
    softmax = verdict.get("softmax") or []
    if softmax:
        numbers.append("   softmax " + " ".join(f"{float(p):.3f}" for p in softmax))
    table = Table(box=None, pad_edge=False, expand=False, show_edge=False, header_style="bold")
    table.add_column("#", justify="right")
    table.add_column("label", justify="right")
    table.add_column("pred", justify="right")
    table.add_column("distance", justify="right")
    table.add_column("id")
    table.add_column("text")
    exemplars = list(verdict.get("exemplars") or [])
    for rank, ex in enumerate(exemplars, start=1):
        table.add_row(
            str(rank),
            str(ex.get("label")),
            str(ex.get("prediction")),
            f"{float(ex.get('distance', 0.0)):.3f}",
            shorten(str(ex.get("id", "")), 18),
            shorten(ex.get("text") or "(no text stored)", text_width),
        )
    parts: list[Any] = [head, numbers]
    if exemplars:
        parts.append(Text("nearest training exemplars", style="italic"))
        parts.append(table)
    else:
        parts.append(Text("no exemplars were stored with this verdict", style="italic"))
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
