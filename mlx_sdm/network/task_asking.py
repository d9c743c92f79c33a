"""A task asked in a person's own words, asked again as the task: the task's own instruction with the
person's payload (the article, the e-mail, the tweet), so the model answers in the task's format and the
verifier judges the kind of document it was built on (docs/verifiers.md, "Routing by meaning").

    payload_of("What is this article about? Wenger dejected as ...")      # "Wenger dejected as ..."
    task_question(instruction, "ARTICLE", "Wenger dejected as ...")        # "Classify ... ARTICLE: Wenger ..."

The rule for the payload (:func:`payload_of`): a person's request is one short clause at either end of the
message. A first clause that ends in "?", ":" or a line break ("Is this email spam? ...", "Fact check
this: ...") is the request when it has at most ``MAX_REQUEST_WORDS`` words (at least two before a colon: "Subject:"
is the e-mail's own) and the rest has at least as many; else a last clause that ends in "?" ("... Positive or negative?") under the same two conditions;
else the whole message is the payload (the request is then read along with it, never a word of the
payload dropped on a guess). A payload whose last sentence has no end mark loses it to a trailing request
("... signed Roma defender Vincent Is that right?" reads "Vincent Is that right?" as the request): measured in
docs/verifiers.md. No MLX here.
"""

from __future__ import annotations

import re

#: The most words a person's request clause has ("Is the following email legitimate or spam?" has 7).
MAX_REQUEST_WORDS = 12
#: Where a leading request ends: its first "?", ":" or line break, followed by the payload.
_LEADING = re.compile(r"^(?P<request>[^?:\n]*[?:\n])(?P<rest>.*)$", re.S)
#: The last clause: after the last sentence end (". ", "? ", "! ", ": " or a line break), ending in "?".
_TRAILING = re.compile(r"^(?P<rest>.*[.?!:\n])\s+(?P<request>[^.?!:\n]+\?)\s*$", re.S)
#: A task's document label in its prompt: the capitalised word(s) and colon after the instruction ("ARTICLE:").
_LABEL = re.compile(r"^\s*([A-Z][A-Z_-]*(?: [A-Z][A-Z_-]*)*):\s")


def _words(text: str) -> int:
    return len(text.split())


def _is_request(request: str, rest: str) -> bool:
    """A clause is the request when it is short and the payload beside it is at least as long; one that ends in a
    colon has at least two words ("Fact check this:"; one word and a colon is the payload's own label, "Subject:")."""
    fewest = 2 if request.rstrip().endswith(":") else 1
    return fewest <= _words(request) <= MAX_REQUEST_WORDS and _words(rest) >= _words(request)


def payload_of(message: str) -> str:
    """The payload of a task asked in a person's words: the message without its request clause (the rule
    of the module docstring); the whole message when no clause is clearly the request."""
    text = message.strip()
    leading = _LEADING.match(text)
    if leading and _is_request(leading["request"], leading["rest"]):
        return leading["rest"].strip()
    trailing = _TRAILING.match(text)
    if trailing and _is_request(trailing["request"], trailing["rest"]):
        return trailing["rest"].strip()
    return text


def is_bare_request(message: str) -> bool:
    """The message is one short request clause and nothing else ("Can you tell me what this is about?"): at most
    ``MAX_REQUEST_WORDS`` words, no sentence end or line break before its last character. It carries no document,
    so a task whose prompts label a document (an ARTICLE, an EMAIL) is not asked with it (``DocumentVerifier.route``)."""
    text = message.strip()
    return 0 < _words(text) <= MAX_REQUEST_WORDS and not re.search(r"[.?!:\n]", text[:-1])


def document_label(instruction: str, example_prompt: str) -> str | None:
    """The label a task's prompts put before the payload ("ARTICLE", "EMAIL"), read from one of its prompts
    (the verifier's ``tasks[].example_prompt``); None when the prompt has none after the instruction."""
    text = example_prompt.strip()
    if not instruction or not text.startswith(instruction):
        return None
    match = _LABEL.match(text[len(instruction):])
    return match.group(1) if match else None


def task_question(instruction: str, label: str | None, payload: str) -> str:
    """The task's own prompt for ``payload``: its instruction, its document label, the payload (the form
    of ``TaskFormat.user_message``: one space after the colon)."""
    return f"{instruction} {label}: {payload.strip()}" if label else f"{instruction} {payload.strip()}"
