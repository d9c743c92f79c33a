"""F1: what every key does."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from mlx_sdm.turn.escalation import ladder_words

HELP_TEXT = f"""\
# mlx-sdm chat

A question that starts one of the verifier's task instructions (the command palette inserts them), or asks
for one in your own words (the topic of a pasted article, whether an e-mail is spam), is answered and judged
as that task alone; every other question is answered by the plain model with the whole conversation. The
badge under each answer says **verified** (answers like this are right at least 95 % of the time), **not
verified** with a word on why (likely wrong, cannot tell, unlike the task's answers), **out of scope** (no
checkable answer, or not one of the verifier's tasks), or **no verifier**; it holds no numbers. `ctrl+b`
(wherever the focus is), a click on the badge, or enter on a focused answer expands the evidence in words:
the verdict's one short line, why (with its numbers), and the nearest training exemplars with their labels.
`v` on a focused answer (tab focuses it) or on its badge opens the evidence full screen with the raw
numbers (the prediction, p_lower, q, d, ⌊q̃⌋).

The session monitor scores each turn (AUQ level and cumulative confidence P, TRACER risk R: the panel, ctrl+t).
{ladder_words()}

| key | chat |
|---|---|
| enter | send the message |
| escape | stop the answer being generated; on a message, back to the input |
| tab / shift+tab | move between the input, the last answer and the monitor panel |
| up / down | on a message: the previous / next message (home / end: the first / last) |
| ctrl+b or f2 | expand / collapse the evidence of the focused answer (else the last; f2 inside tmux, whose prefix is ctrl+b); enter on a focused answer does too; `v` on a focused answer or its badge opens it full screen with the raw numbers |
| ctrl+t | show / hide the session monitor panel |
| ctrl+o | sessions: open, rename (r), delete (d), new (n) |
| ctrl+n | new chat |
| ctrl+r | review queue |
| ctrl+s | export this session (Markdown and session JSONL) |
| ctrl+y | copy the last answer (or the focused message) |
| ctrl+g | regenerate the last answer (sampled; both answers stay, each with its own verdict) |
| ctrl+up | edit and resend a question (in a new branch; the original stays) |
| ctrl+f | branch: continue from an earlier turn in a new session |
| f3 | what the verifier covers: its tasks, one example prompt each (also `mlx-sdm chat --list-tasks`) |
| ctrl+p | command palette (also: switch model / verifier / head, theme) |
| f12 | save an SVG screenshot (in `<store dir>/screenshots`, or `$MLX_SDM_SCREENSHOT_DIR`) |
| f1 | this help (a key typed on a message, `?` too, goes into the input) |
| ctrl+q | quit |

| key | review queue |
|---|---|
| j / k | next / previous item |
| a / u | mark acceptable / unacceptable (goes into the support set at once) |
| n | add a note |
| e | edit the answer into an acceptable completion |
| z | undo the last decision |
| f | focus the filters (session, reason, date) |
| escape | back to the chat |
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,f1,question_mark", "close", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog wide help"):
            yield Markdown(HELP_TEXT)

    def action_close(self) -> None:
        self.dismiss(None)
