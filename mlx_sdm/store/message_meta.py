"""What the store keeps about a message beside its text, verdict and monitor reading: typed
(:class:`MessageMeta`). It becomes a dict only at the SQLite edge (``metadata_json``, through
:meth:`MessageMeta.to_dict` / :meth:`MessageMeta.from_dict`) and the JSON export edge; readers use
its attributes. Keys this version does not know (rows written by another version) are kept in
``extra`` and written back unchanged. No MLX."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from mlx_sdm.monitor.session_file.records import ToolCall


@dataclass(frozen=True)
class MessageMeta:
    """An answer's: how generation ended, who asked, the judged span when text follows it, the escalation's words and the tool calls proposed.
    A user message's: who asked (``source``) or which paused answer it resumes. An answer being
    written: the process writing it."""

    finish_reason: str | None = None  # stop | delimiter | length | cancelled
    source: str | None = None  # who asked: "api:chat" / "api:verify" for the server; None for the chat
    #: written by versions before the verdict carried its own reason (schema < 10): the verdict's reason code, or why
    #: no verifier judged it (migration 10 moves the why into the verdict); not written any more
    verdict_reason: str | None = None
    judged_text: str | None = None  # the span the verdict covers, when text follows it (None: the whole answer)
    explanation: str | None = None  # on an abort: why
    pause_message: str | None = None  # on a pause: what the user is told
    reflection_prompt: str | None = None  # on a HIGH pause: the reflection asked of the model
    reflection: str | None = None  # ... and the model's statement of its uncertainty
    tool_calls: tuple[ToolCall, ...] = ()  # proposed in the answer
    resumes: int | None = None  # guidance: the paused answer's message id
    replaces: int | None = None  # a regenerated answer: the answer (message id) it takes the place of in the conversation
    temperature: float | None = None  # a sampled answer (a regenerated one): its temperature ...
    seed: int | None = None  # ... and the random seed it was sampled with
    writer_pid: int | None = None  # an answer being written: the writing process (interrupted when it is gone)
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys of another version, kept as they were

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON object: the fields that are set, then ``extra``'s keys."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "extra" and value is not None and value != ():
                out[f.name] = [c.to_dict() for c in value] if f.name == "tool_calls" else value
        return {**dict(self.extra), **out}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "MessageMeta":
        """A stored object (None: an empty one); unknown keys go to ``extra``."""
        if not data:
            return cls()
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {k: v for k, v in data.items() if k in known}
        if "tool_calls" in values:
            values["tool_calls"] = tuple(ToolCall(c["name"], c.get("arguments", {}), c.get("id"))
                                         for c in values["tool_calls"] or ()
                                         if isinstance(c, dict) and isinstance(c.get("name"), str))
        return cls(**values, extra={k: v for k, v in data.items() if k not in known})
