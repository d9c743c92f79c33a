"""Prompt rendering: a user message, a list of chat messages or token ids -> the token ids the model
reads (chat template with ``add_generation_prompt=True``), and fitting a prompt into a context budget.

:func:`fit_prompt` fits every prompt built from a conversation (the answer's, P(True)'s, the reflection's,
the System-2 samples', the verifier's force-decoding) into the model's context:
earlier messages are cut in the middle (their start and end kept) or left out whole, never the template, the
question's start or the builder's own request; the result says what was cut (:meth:`FittedPrompt.sentence`).

Its own module so that generation (``lm/generation.py``) and force-decoding (``lm/features.py``)
both build on it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mlx_sdm.errors import DataError

Prompt = str | Sequence[dict] | Sequence[int]

__all__ = ["FittedPrompt", "MessageCut", "Prompt", "fit_prompt", "render_prompt", "truncate_left"]

#: What stands in a cut message where its middle was (the count of tokens left out is filled in).
CUT_MARK = "\n\n[... {n} tokens left out ...]\n\n"
#: A message is never cut below this many of its own tokens (its start and end); then older ones are left out.
MIN_KEPT_TOKENS = 32
#: Tokens asked beyond the excess at each cut: the mark itself, and the few tokens a cut text can gain when it
#: is tokenized again at the two seams.
CUT_SLACK_TOKENS = 24
#: Rounds of cut-and-render before giving up (one is the rule; a seam can leave a round a few tokens short).
FIT_ROUNDS = 12


def _as_messages(prompt: Prompt, system: str | None) -> list[dict] | None:
    """The chat messages of a prompt (a user string, or messages, with ``system`` in front when they have
    none); None for token ids."""
    if isinstance(prompt, str):
        return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    if len(prompt) and isinstance(prompt[0], dict):
        messages = list(prompt)
        if system and messages[0].get("role") != "system":
            messages = [{"role": "system", "content": system}] + messages
        return messages
    return None


def render_prompt(tokenizer, prompt: Prompt, system: str | None = None) -> list[int]:
    """Token ids of a prompt: a user message string or a list of chat messages is rendered with the
    chat template (``add_generation_prompt=True``); a list of ints is used as is."""
    messages = _as_messages(prompt, system)
    if messages is None:
        ids = [int(t) for t in prompt]
        if not ids:
            raise DataError("the prompt is empty.", field="prompt")
        return ids
    if not any(str(m.get("content") or "").strip() for m in messages if m.get("role") != "system"):
        raise DataError("the prompt is empty (a system prompt alone is not a question).", field="prompt")
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


def truncate_left(ids: list[int], budget: int, what: str = "prompt") -> tuple[list[int], int]:
    """Keep the last ``budget`` ids; returns (ids, number dropped). The caller says what was cut once
    (:meth:`FittedPrompt.sentence`)."""
    if budget <= 0:
        raise DataError(f"no room left for the {what} in the model's context.", field=what)
    dropped = max(0, len(ids) - budget)
    return ids[dropped:], dropped


def splice_cached(tokenizer, cached: Sequence[int], ids: list[int]) -> list[int]:
    """``ids`` (a rendered prompt) starting with the ``cached`` token ids when both say the same text there.

    A conversation is rendered again from its text every turn, but the model may have generated an answer
    in tokens the tokenizer would split differently (a made-up word: "Bouillabadou"); the rendered prompt
    then leaves the KV cache's tokens at that point, and every token after it would be prefilled again
    (the whole conversation, every later turn). When the cached tokens decode to the text the rendered
    prompt holds at that place, the prompt is those cached tokens plus its remaining text tokenized: the
    same text, read in the tokens the model already holds. Otherwise (the texts differ) ``ids`` unchanged."""
    cached = list(cached)
    n = len(cached)
    if not n or ids[:n] == cached:
        return ids
    common = 0
    for a, b in zip(cached, ids):
        if a != b:
            break
        common += 1
    try:
        head = tokenizer.decode(cached[common:])
        rest = tokenizer.decode(ids[common:])
    except Exception:  # a tokenizer that cannot decode a slice: keep the rendered ids
        return ids
    if not head or "\ufffd" in head or not rest.startswith(head):
        return ids
    tail = rest[len(head):]
    tail_ids = list(tokenizer.encode(tail, add_special_tokens=False)) if tail else []
    if tokenizer.decode(tail_ids) != tail:
        return ids
    return cached + tail_ids


@dataclass(frozen=True)
class MessageCut:
    """One message cut in the middle to fit: its place in the prompt as given, and its content's tokens."""

    index: int
    role: str
    tokens: int  # the content's tokens before the cut
    kept_head: int  # its first tokens kept
    kept_tail: int  # its last tokens kept

    @property
    def left_out(self) -> int:
        return self.tokens - self.kept_head - self.kept_tail


@dataclass(frozen=True)
class FittedPrompt:
    """A prompt fitted into ``budget`` tokens (:func:`fit_prompt`): the ids the model reads, the messages they
    render (None for a prompt given as ids), and what was left out to get there."""

    ids: tuple[int, ...]
    messages: tuple[dict, ...] | None
    budget: int
    rendered_tokens: int  # the prompt as given, rendered
    cuts: tuple[MessageCut, ...] = ()
    dropped_messages: int = 0  # earlier messages left out whole
    dropped_ids: int = 0  # a prompt given as ids: its first ids left out
    context: int = 0  # the model's context the budget was taken from (for the sentence; 0: the budget)

    @property
    def was_cut(self) -> bool:
        return bool(self.cuts or self.dropped_messages or self.dropped_ids)

    @property
    def left_out_tokens(self) -> int:
        """How many fewer tokens the model reads than the prompt as given has (the cut marks count as read)."""
        return max(0, self.rendered_tokens - len(self.ids)) if self.was_cut else 0

    def sentence(self) -> str:
        """What was left out, in one sentence ("" when nothing was): the numbers behind it are this value's."""
        if not self.was_cut:
            return ""
        context = self.context or self.budget
        why = (f"more than the model reads at once ({context:,}-token context, with room kept for the answer)")
        last = self.cuts[-1] if self.cuts else None
        if (last is not None and len(self.cuts) == 1 and not self.dropped_messages and self.messages is not None
                and last.index == len(self.messages) - 1 and last.role == "user"):
            return (f"Your message is {last.tokens:,} tokens, {why}: the model read its first {last.kept_head:,} and "
                    f"last {last.kept_tail:,} tokens; the {last.left_out:,} between were left out.")
        parts = [f"the middle {c.left_out:,} tokens of the {c.role} message {c.index + 1}" for c in self.cuts]
        if self.dropped_messages:
            parts.append(f"the {self.dropped_messages} earliest message{'s' if self.dropped_messages > 1 else ''}")
        if self.dropped_ids:
            parts.append(f"its first {self.dropped_ids:,} tokens")
        return f"The prompt is {self.rendered_tokens:,} tokens, {why}: left out were {'; '.join(parts)}."


@dataclass
class _Content:
    """A message's content as token ids and how many of its first and last ones are kept."""

    ids: list[int]
    head: int
    tail: int

    def text(self, tokenizer) -> str:
        n = len(self.ids)
        head = tokenizer.decode(self.ids[: self.head]).rstrip("\ufffd")  # a seam inside a character loses it
        tail = tokenizer.decode(self.ids[n - self.tail:]).lstrip("\ufffd") if self.tail else ""
        return head + CUT_MARK.format(n=n - self.head - self.tail) + tail


def fit_prompt(tokenizer, prompt: Prompt, budget: int, *, system: str | None = None,
               keep_last: int = 0, context: int = 0) -> FittedPrompt:
    """``prompt`` rendered (:func:`render_prompt`) into at most ``budget`` tokens.

    A prompt that fits is returned as rendered. Otherwise, round by round until it fits: the longest message
    that may be cut loses the middle of its content (its first and last tokens kept, half each; a mark says
    how many tokens are missing), down to ``MIN_KEPT_TOKENS``; when no message can lose more, the earliest
    message is left out whole (with the assistant reply that follows it). Never cut: the last ``keep_last``
    messages (what the caller adds after the conversation: P(True)'s question, the reflection's request);
    never left out: a leading system message and the conversation's last message. Token ids (no messages),
    and a budget too small for what is never cut, lose their first ids (and warn). ``context``: the model's
    context the budget was taken from, named by :meth:`FittedPrompt.sentence`."""
    if budget < 1:
        raise DataError("no room left for the prompt in the model's context.", field="prompt")
    messages = _as_messages(prompt, system)
    if messages is None:
        ids, dropped = truncate_left(render_prompt(tokenizer, prompt), budget)
        return FittedPrompt(tuple(ids), None, budget, len(ids) + dropped, dropped_ids=dropped, context=context)
    ids = render_prompt(tokenizer, messages)
    rendered = len(ids)
    if rendered <= budget:
        return FittedPrompt(tuple(ids), tuple(messages), budget, rendered, context=context)
    current = [dict(m) for m in messages]
    origin = list(range(len(messages)))  # index in ``messages`` of each message in ``current``
    contents: dict[int, _Content] = {}
    dropped = 0
    for _ in range(FIT_ROUNDS):
        excess = len(ids) - budget
        if excess <= 0:
            break
        if not _cut_longest(tokenizer, current, origin, contents, excess, keep_last):
            if not _drop_earliest(current, origin, keep_last):
                break
            dropped = len(messages) - len(current)
        ids = render_prompt(tokenizer, current)
    cuts = tuple(MessageCut(i, str(messages[i].get("role")), len(c.ids), c.head, c.tail)
                 for i, c in sorted(contents.items()) if i in origin)
    # a budget too small for the messages the caller keeps and a cut mark: the rendered ids lose their start
    ids, dropped_ids = truncate_left(ids, budget)
    return FittedPrompt(tuple(ids), tuple(current), budget, rendered, cuts, dropped, dropped_ids, context)


def _cut_longest(tokenizer, current: list[dict], origin: list[int], contents: dict[int, "_Content"], excess: int,
                 keep_last: int) -> bool:
    """Cut ``excess`` (+ slack) tokens from the middle of the longest message that may still lose some."""
    cuttable = range(len(current) - keep_last) if keep_last else range(len(current))
    best, best_kept = None, MIN_KEPT_TOKENS
    for pos in cuttable:
        index = origin[pos]
        if index not in contents:
            text = str(current[pos].get("content") or "")
            ids = list(tokenizer.encode(text, add_special_tokens=False)) if text else []
            if len(ids) <= best_kept:
                continue
            contents[index] = _Content(ids, len(ids), 0)
        content = contents[index]
        kept = content.head + content.tail
        mark = len(tokenizer.encode(CUT_MARK.format(n=len(content.ids)), add_special_tokens=False))
        if kept > best_kept and kept - MIN_KEPT_TOKENS > mark:  # a cut must save more than its mark costs
            best, best_kept = pos, kept
    if best is None:
        return False
    content = contents[origin[best]]
    keep = max(MIN_KEPT_TOKENS, best_kept - excess - CUT_SLACK_TOKENS)
    content.head = (keep + 1) // 2  # the start (an instruction) and the end (a question) alike
    content.tail = keep - content.head
    current[best] = {**current[best], "content": content.text(tokenizer)}
    return True


def _drop_earliest(current: list[dict], origin: list[int], keep_last: int) -> bool:
    """Leave out the earliest message that may go (and the assistant reply right after it)."""
    first = 1 if current and current[0].get("role") == "system" else 0
    last_allowed = len(current) - 1 - keep_last  # the conversation's last message stays
    if first >= last_allowed:
        return False
    count = 2 if first + 1 < last_allowed and current[first + 1].get("role") == "assistant" else 1
    del current[first:first + count]
    del origin[first:first + count]
    return True
