"""The evidence behind a verdict in words: its one short line, then why in full with its numbers, the nearest training exemplars (text, label in
words); the raw numbers (the prediction, p_lower, q, d, ⌊q̃⌋, softmax) only in the full-screen view (``v``)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text
from textual.widgets import Static

from mlx_sdm.network.evidence import evidence_of
from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.network.verdict_words import verdict_words
from tui.format import format_p, shorten

EXEMPLAR_TEXT_WIDTH = 72
#: Ids are cut in the inline panel; the full evidence screen (a wide ``text_width``) shows them whole.
INLINE_ID_WIDTH = 24


def evidence_renderable(verdict: DocumentVerdict, *, text_width: int = EXEMPLAR_TEXT_WIDTH, raw: bool = False) -> Group:
    """A Rich renderable for a verdict: its short line, then the evidence's sentence (``verdict_words``), the shared
    instruction once, each exemplar by what tells it apart (question, answer, label in words); ``raw``: then the
    numbers for those who want them (else a hint where to find them)."""
    words = verdict_words(verdict)
    judged = verdict.verdict  # None: no estimator judgement (not one of the verifier's tasks, an empty answer)
    state, _, rest = words.line.partition(":")
    head = Text()
    head.append(state + ":", style="bold")
    head.append(rest)
    parts: list[Any] = [head]
    if words.sentence != words.line:  # the evidence: why in full, with the numbers and the lean's measurement
        parts.append(Text(words.sentence))
    evidence = evidence_of(judged.exemplars if judged is not None else [])
    whole_ids = text_width > EXEMPLAR_TEXT_WIDTH
    if evidence.items:
        title = "The most similar examples the verifier was built on"
        parts.append(Text(title + (f", each a question starting “{shorten(evidence.instruction, text_width)}”:"
                                   if evidence.instruction else ":"), style="italic"))
        for item in evidence.items:
            line = Text(f"{item.rank}. ")
            line.append(shorten(item.question, text_width))
            if item.answer:
                line.append(f"\n   answer {shorten(item.answer, text_width)}")
            line.append(f"\n   {item.label_words}", style="bold")
            item_id = item.id if whole_ids else shorten(item.id, INLINE_ID_WIDTH)
            line.append(f" (distance {item.distance:.3f}, id {item_id})", style="dim")
            parts.append(line)
    elif judged is not None:
        parts.append(Text("no exemplars were stored with this verdict", style="italic"))
    if judged is not None and raw:
        numbers = Text(style="dim")
        numbers.append(f"raw numbers: prediction {judged.prediction} ({'right' if judged.prediction == 1 else 'wrong'})   "
                       f"p_lower {format_p(judged.p_lower)}   q {judged.q}   d {judged.d:.3f}   ⌊q̃⌋ {judged.q_bin}")
        if judged.softmax:
            numbers.append("   softmax " + " ".join(f"{float(p):.3f}" for p in judged.softmax))
        parts.append(numbers)
    elif judged is not None:
        parts.append(Text("v on the badge shows the raw numbers (prediction, p_lower, q, d, ⌊q̃⌋)", style="dim italic"))
    return Group(*parts)


class EvidencePanel(Static):
    """Hidden until its verdict badge is expanded."""

    def __init__(self, verdict: DocumentVerdict | None = None, *, id: str | None = None) -> None:
        super().__init__("", id=id, classes="evidence")
        self.verdict = verdict
        self.shown: Group | None = None
        if verdict is not None:
            self.show_verdict(verdict)

    def show_verdict(self, verdict: DocumentVerdict) -> None:
        self.verdict = verdict
        self.shown = evidence_renderable(verdict)
        self.update(self.shown)
