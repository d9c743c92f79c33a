"""The session JSONL format: how a monitored conversation is logged, exported and re-scored; writing it.

Defined once, in this package: the records in :mod:`.records`, reading in :mod:`.reader`, writing
here. The chat store exports it; ``mlx-sdm eval-monitor`` reads it; the tau2-bench
importer (``mlx_sdm.monitor.evaluation.tau2``) produces it.

A file holds one or more sessions. Each session is a ``session`` record followed by its ``step``
records, one JSON object per line::

    {"record": "session", "format_version": 1, "session_id": "s1", "outcome": "success", ...}
    {"record": "step", "session_id": "s1", "step_id": "user_0", "actor": "user", "step_type": null, "text": "..."}
    {"record": "step", "session_id": "s1", "step_id": "llm_1", "actor": "agent", "step_type": "llm_call",
     "text": "...", "token_logprobs": [-0.1, ...], "tokens": [" Hello", ...],
     "verifier": {"p_lower": 0.93, "admitted": true, "reason": null},
     "auq": {"propagated_confidence": 0.61, "level": "medium", ...},
     "tracer": {"U": 0.8, "Da": 0.1, "r": 0.8, "prefix_risk": 0.8, "embedder": "...", ...}}

Step fields follow docs/monitoring.md, session data model (``step_id, actor, step_type, text, tool_calls,
observations, token_logprobs, tokens, hidden``), plus the per-step outputs of the verifier, AUQ
(docs/monitoring.md, AUQ belief state), TRACER (docs/monitoring.md, TRACER) and the TPS forecast ``p_t`` (docs/monitoring.md, TPS forecasts).

Reading is strict about what would silently corrupt scores (probabilities outside [0, 1], NaN,
log-probs > 0, misaligned tokens, steps without a session) and raises :class:`DataError` naming
file, line and field. It warns (:class:`SessionFormatWarning`, again naming file/line/field) about
things it can carry on with: unknown step types (AUQ then uses the "unknown" propagation weight),
unknown keys (kept in ``extra``). Missing log-probs are allowed (``token_logprobs = None``).
"""

from __future__ import annotations
import json
import os
from typing import Iterable

from mlx_sdm.atomic import atomic_write_text
from mlx_sdm.monitor.session_file.reader import validate_session
from mlx_sdm.monitor.session_file.records import Session

# ----------------------------------------------------------------------------------------------
# writing


def session_to_lines(session: Session) -> list[str]:
    lines = [json.dumps(session.header_dict(), ensure_ascii=False, allow_nan=False)]
    for step in session.steps:
        lines.append(json.dumps(step.to_dict(session.session_id), ensure_ascii=False, allow_nan=False))
    return lines


def write_sessions_jsonl(path: str | os.PathLike, sessions: Iterable[Session]) -> None:
    """Write sessions atomically (temporary file + rename): a crash leaves the old file or the new one."""
    lines: list[str] = []
    for session in sessions:
        validate_session(session, str(path), None)
        lines.extend(session_to_lines(session))
    atomic_write_text(path, "\n".join(lines) + ("\n" if lines else ""))


def write_session_jsonl(path: str | os.PathLike, session: Session) -> None:
    """Write one session atomically."""
    write_sessions_jsonl(path, [session])
