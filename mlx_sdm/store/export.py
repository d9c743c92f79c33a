"""Export a stored session: Markdown for people, the session JSONL (``mlx_sdm/monitor/session_file.py``,
read by ``mlx-sdm eval-monitor``) for scoring. Reads the store only; no MLX."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from mlx_sdm.atomic import atomic_write_text
from mlx_sdm.errors import DataError
from mlx_sdm.monitor.session_file.records import (
    Session,
    SessionStep,
    VerifierOutput,
    step_id_for,
)
from mlx_sdm.monitor.session_file.writer import write_session_jsonl, write_sessions_jsonl
from mlx_sdm.monitor.session_file.provenance import Provenance
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.network.verdict import VerdictStatus
from mlx_sdm.network.verdict_words import exemplar_lines, verdict_line, verdict_words
from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.store.records import MessageRecord

EXPORT_FORMATS = ("markdown", "jsonl")


def monitor_line(monitor: MonitorReading | None) -> str:
    if monitor is None:
        return "monitor: none"
    return (f"monitor: AUQ {monitor.level.value.upper()} cumulative confidence {_num(monitor.cumulative_confidence)}"
            f" · TRACER risk {_num(monitor.tracer_risk)}")


def _num(x) -> str:
    return "n/a" if x is None else f"{float(x):.3f}"


def session_to_markdown(store: ChatStore, session_id: str) -> str:
    info = store.get_session(session_id)
    lines = [f"# {info.title}", "", f"- session: `{info.id}`", f"- created: {info.created_at}"]
    if info.model:
        lines.append(f"- model: {info.model}")
    if info.verifier:
        lines.append(f"- verifier: {info.verifier}")
    if info.branch is not None:
        lines.append(f"- {info.branch.words()} (session `{info.branch.session_id}`)")
    lines.append("")
    for m in store.messages(session_id):
        lines.extend(_message_markdown(m))
    return "\n".join(lines).rstrip() + "\n"


def _message_markdown(m: MessageRecord) -> list[str]:
    if m.role == "user":
        head = "### You" if m.kind != "guidance" else "### You (guidance to resume)"
        return [head, "", m.text, ""]
    if m.role != "assistant":
        return [f"### {m.role.capitalize()} ({m.kind})", "", m.text, ""]
    status = "" if m.status in {"done", "resumed"} else f" ({m.status})"
    meta = m.metadata
    if meta.replaces is not None:  # a regenerated answer: the one before it stays above
        status += f" (regenerated: sampled at temperature {meta.temperature}, seed {meta.seed})"
    out = [f"### Assistant{status}", "", m.text or "_(empty)_", ""]
    out.append(f"> {verdict_line(m.verdict)}  ")
    out.append(f"> {monitor_line(m.monitor)}")
    out.append("")
    if m.verdict is not None and m.verdict.judged:  # the evidence behind the line: why in full, with its numbers
        out += [f"Evidence: {verdict_words(m.verdict).sentence}", ""]
    exemplars = exemplar_lines(m.verdict)
    if exemplars:
        out += ["Nearest training exemplars:", "", *exemplars, ""]
    if meta.reflection_prompt:
        out += ["**Reflection requested** (HIGH uncertainty):", "", f"> {meta.reflection_prompt}", ""]
        if meta.reflection:
            out += ["**The model's reflection:**", "", meta.reflection, ""]
    if meta.explanation:
        out += [f"**Aborted:** {meta.explanation}", ""]
    return out


def session_outcome(messages: list[MessageRecord], decisions: dict) -> tuple[str | None, str | None]:
    """(outcome, termination) of a chat session, docs/monitoring.md, combining with the verifier: success when the session ends
    with a verified answer that the user accepted (or an answer a reviewer marked acceptable) and no
    answer of the session was marked unacceptable; failure when one was, or when the last answer was
    not verified (or out of scope) or aborted; a session left at a pause is abandoned (no outcome); an
    unverifiable, unreviewed last answer leaves the outcome unknown."""
    answers = [m for m in messages if m.role == "assistant" and m.kind == "chat" and m.status != "cancelled"]
    if not answers:
        return None, None
    if any(d.label == 0 for mid, d in decisions.items() if mid in {a.id for a in answers}):
        return "failure", "complete"
    last = answers[-1]
    decided = decisions.get(last.id)
    if decided is not None and decided.label == 1:
        return "success", "complete"
    if last.status == "paused":
        return None, "abandoned"
    if last.status == "aborted" or last.verdict_status in {VerdictStatus.NOT_VERIFIED, VerdictStatus.OUT_OF_SCOPE}:
        return "failure", "complete"
    if last.verdict_status is VerdictStatus.VERIFIED:
        return "success", "complete"
    return None, None


def session_to_format(store: ChatStore, session_id: str) -> Session:
    """The stored session as a :class:`~mlx_sdm.monitor.session_file.Session` (one step per message), with the
    outcome of :func:`session_outcome` so that `mlx-sdm eval-monitor` can score it."""
    info = store.get_session(session_id)
    outcome, termination = session_outcome(store.messages(session_id), store.review_queue.decisions_by_message(session_id))
    steps: list[SessionStep] = []
    turn = 0
    for m in store.messages(session_id):
        if m.role == "user":
            steps.append(SessionStep(step_id=step_id_for(None, "user", len(steps)), actor="user", step_type=None,
                                     text=m.text, turn_index=turn, timestamp=m.created_at))
            continue
        if m.role != "assistant" or m.kind != "chat":
            continue
        mon = m.monitor
        calls = list(m.metadata.tool_calls)
        step_type = "tool_call" if calls else "llm_call"
        tokens, logprobs = m.tokens, m.token_logprobs
        if tokens is None or logprobs is None or len(tokens) != len(logprobs):
            tokens = logprobs = None
        verifier = None
        if m.verdict is not None and m.verdict.status is not VerdictStatus.NO_VERIFIER:
            judged = m.verdict.verdict
            verifier = VerifierOutput(p_lower=judged.p_lower if judged else None,
                                      admitted=bool(judged.admitted) if judged else False, reason=m.verdict.reason,
                                      prediction=int(judged.prediction) if judged else None, task=m.verdict.task)
        auq = mon.auq.to_format() if mon is not None and mon.auq is not None else None
        tracer = mon.tracer if mon is not None else None
        steps.append(SessionStep(
            step_id=step_id_for(step_type, "agent", len(steps)), actor="agent", step_type=step_type, text=m.text,
            tool_calls=calls, token_logprobs=logprobs, tokens=tokens, turn_index=turn, timestamp=m.created_at,
            verifier=verifier, auq=auq, tracer=tracer,
        ))
        turn += 1
    return Session(session_id=info.id, steps=steps, model=info.model, created_at=info.created_at,
                   outcome=outcome, termination=termination,
                   metadata={"title": info.title, "verifier": info.verifier, "exported_by": "mlx-sdm chat"},
                   provenance=info.provenance or store_provenance(info.model, info.verifier))


@functools.lru_cache(maxsize=16)  # one export checksums each verifier folder and asks git once
def store_provenance(model: str | None, verifier: str | None) -> Provenance:
    """For a session stored before the store recorded its provenance: the model's name and the verifier
    folder (checksummed now, at export, when it is still there); the head, the embedder and the model's
    checksum read as unknown."""
    from mlx_sdm.monitor.session_file.provenance import UNKNOWN, Artifact, product_commit, verifier_sha256

    import mlx_sdm

    folder = Path(verifier) if verifier else None
    if folder is None:
        verifier_part = Artifact(None)
    elif folder.is_dir():
        verifier_part = Artifact(folder.name, verifier_sha256(folder))
    else:
        verifier_part = Artifact(folder.name)  # moved or deleted since: no checksum
    return Provenance(Artifact(model), verifier_part, Artifact(UNKNOWN), Artifact(UNKNOWN), mlx_sdm.__version__,
                      product_commit(), {"recorded": "at export, from the chat store"})


def export_all_sessions(store: ChatStore, path: str | os.PathLike) -> int:
    """Every session of the store in one session JSONL (what `mlx-sdm eval-monitor` scores). Returns the count."""
    sessions = [session_to_format(store, s.id) for s in reversed(store.list_sessions())]  # oldest first
    write_sessions_jsonl(path, sessions)
    return len(sessions)


def export_session(store: ChatStore, session_id: str, path: str | os.PathLike, fmt: str | None = None) -> Path:
    """Write a session to ``path`` (atomically). ``fmt``: "markdown" or "jsonl"; default from the suffix."""
    path = Path(path)
    fmt = fmt or ("jsonl" if path.suffix.lower() in {".jsonl", ".json"} else "markdown")
    if fmt not in EXPORT_FORMATS:
        raise DataError(f"unknown export format {fmt!r}; use markdown or jsonl", field="format")
    if fmt == "markdown":
        atomic_write_text(path, session_to_markdown(store, session_id))
    else:
        write_session_jsonl(path, session_to_format(store, session_id))
    return path
