"""The records the chat store reads and writes, and the helpers that map SQLite rows to them (the
schema itself: :mod:`mlx_sdm.store.migrations`). No MLX."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timezone
from typing import Any

import numpy as np

from mlx_sdm.errors import DataError
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.monitor.session_file.provenance import Provenance
from mlx_sdm.network.verdict import (
    LEGACY_NO_VERIFIER,
    REASON_EMPTY_ANSWER,
    REASON_NO_CHECKABLE_ANSWER,
    REASON_NOT_A_TASK,
    DocumentVerdict,
    VerdictStatus,
)
from mlx_sdm.network.verdict_words import verdict_words
from mlx_sdm.store.message_meta import MessageMeta

#: A stored answer's verdict state: a value of ``mlx_sdm.network.verdict.VerdictStatus`` (rows written
#: before it had "no_verifier" say "unverifiable"; ``VerdictStatus.read`` reads both).
VERDICT_STATES = tuple(s.value for s in VerdictStatus) + LEGACY_NO_VERIFIER[:1]

LABEL_ACCEPTABLE = 1
LABEL_UNACCEPTABLE = 0
#: A decision in one word (:attr:`Decision.kind`).
DECISION_ACCEPTED, DECISION_REJECTED, DECISION_CORRECTED = "accepted", "rejected", "corrected"



def now_iso() -> str:
    """UTC timestamp with microseconds; ISO strings sort like the times they name."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def iso_bound(value: str | date | datetime | None, *, end: bool) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc)
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, date):
        return value.isoformat() + ("T23:59:59.999999Z" if end else "T00:00:00.000000Z")
    text = str(value)
    if len(text) == 10 and end:  # a bare date: the whole day
        return text + "T23:59:59.999999Z"
    return text


def dumps_json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)



def loads_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def inserted_id(cur: sqlite3.Cursor) -> int:
    """The id of the row an ``INSERT`` just made (sqlite3 types ``lastrowid`` as optional; an insert sets it)."""
    if cur.lastrowid is None:
        raise DataError("the store inserted no row", field="id")
    return int(cur.lastrowid)


def features_blob(features: np.ndarray | None) -> bytes | None:
    if features is None:
        return None
    array = np.asarray(features, dtype=np.float32).reshape(-1)
    if not np.all(np.isfinite(array)):
        raise DataError("document features contain NaN or infinity; refusing to store them", field="features")
    return array.tobytes()


def features_array(blob: bytes | None) -> np.ndarray | None:
    return None if blob is None else np.frombuffer(blob, dtype=np.float32).copy()


@dataclass(frozen=True)
class TaskScope:
    """The task of its verifier an answer was judged under (``name``: the task the verifier's recipe
    routed the question to; None for a single-task verifier or a question no task's instruction starts).
    A review label joins only the support set its verifier judges that same task with. Where a record
    has no scope at all (``task=None`` on a :class:`Decision` or :class:`MessageRecord`: stored before
    schema 5), its label is kept under its verifier only, for every task of it."""

    name: str | None = None


def task_scope(r: sqlite3.Row, prefix: str = "") -> TaskScope | None:
    """The row's task scope (its ``task``/``task_recorded`` columns, read under ``prefix``), None: none was kept."""
    keys = r.keys()
    if f"{prefix}task_recorded" not in keys or not r[f"{prefix}task_recorded"]:
        return None
    return TaskScope(r[f"{prefix}task"])


#: A message row joined with its verdict, monitor snapshot and review entry (callers add WHERE and ORDER):
#: read as a :class:`MessageRecord` (:func:`message_from_row`) or, for an answer, as its turn's record
#: (``mlx_sdm.store.answer_rows.outcome_from_row``).
MESSAGE_ROWS = (
    "SELECT m.*, v.status AS verdict_status, v.verdict_json, v.verifier, v.task AS verdict_task, "
    "v.task_recorded AS verdict_task_recorded, ms.details_json AS monitor_json, r.id AS review_id, "
    "r.reason AS review_reason "
    "FROM messages m LEFT JOIN verdicts v ON v.message_id = m.id "
    "LEFT JOIN monitor_snapshots ms ON ms.message_id = m.id "
    "LEFT JOIN review_queue r ON r.message_id = m.id "
)


@dataclass
class SessionInfo:
    id: str
    title: str
    created_at: str
    updated_at: str
    model: str | None
    verifier: str | None
    message_count: int = 0
    provenance: Provenance | None = None  # recorded with its first answer (None: before the store kept it)
    branch: BranchOrigin | None = None  # where a branch was continued from (None: not a branch)


@dataclass(frozen=True)
class BranchOrigin:
    """Where a branched session came from: the parent session, the last message copied from it, that
    turn's number (0: a branch made before the first turn) and the parent's title when branched (the
    parent may since be renamed or deleted)."""

    session_id: str
    message_id: int | None
    turn: int
    title: str

    def words(self) -> str:
        """"branched from <title>, turn N", as the sessions screen shows it."""
        return f"branched from “{self.title}”, turn {self.turn}" if self.turn else f"branched from “{self.title}”, before turn 1"


@dataclass
class MessageRecord:
    """One message of a session. Assistant answers also carry their verdict and monitor snapshot."""

    id: int
    session_id: str
    role: str  # "user" | "assistant" | "system"
    kind: str  # "chat" | "reflection" | "guidance" | "explanation"
    text: str
    status: str  # "done" | "cancelled" | "paused" | "resumed" | "aborted" | "error" | "in_progress" | "interrupted"
    created_at: str
    finished_at: str | None
    token_count: int | None = None
    logprob_mean: float | None = None
    logprob_min: float | None = None
    tokens: list[str] | None = None
    token_logprobs: list[float] | None = None
    prompt: list[dict] | None = None  # the chat messages the model saw before this answer
    feature_model: str | None = None
    metadata: MessageMeta = MessageMeta()
    verdict_status: VerdictStatus | None = None  # None: no verdict (cancelled, or not an answer)
    verdict: DocumentVerdict | None = None  # read back typed from its stored JSON
    verifier: str | None = None
    task: TaskScope | None = None  # the verifier's task it was judged under (None: no verdict, or stored before)
    monitor: MonitorReading | None = None
    review_id: int | None = None
    _features: bytes | None = field(default=None, repr=False)

    @property
    def features(self) -> np.ndarray | None:
        return features_array(self._features)

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("_features")
        out["metadata"] = self.metadata.to_dict()
        out["verdict_status"] = None if self.verdict_status is None else self.verdict_status.value
        out["verdict"] = None if self.verdict is None else self.verdict.to_dict()
        out["monitor"] = None if self.monitor is None else self.monitor.to_dict()
        return out


@dataclass
class Decision:
    id: int
    review_id: int
    label: int  # 1 acceptable, 0 unacceptable
    note: str | None
    completion: str | None  # an edited, acceptable completion (label 1), or None
    created_at: str
    undone_at: str | None
    feature_model: str | None = None
    verifier: str | None = None  # the verifier the label was given under (its resolved folder)
    task: TaskScope | None = None  # ... and the task of it (None: recorded before tasks were kept: every task)
    _features: bytes | None = field(default=None, repr=False)

    @property
    def features(self) -> np.ndarray | None:
        return features_array(self._features)

    @property
    def support_id(self) -> str:
        """The id this decision's point has in the verifier's support set."""
        return f"review-{self.review_id}-decision-{self.id}"

    @property
    def kind(self) -> str:
        """The decision in one word, as every front end says it: ``corrected`` (an edited answer, label 1),
        ``accepted`` (1) or ``rejected`` (0)."""
        if self.completion is not None:
            return DECISION_CORRECTED
        return DECISION_ACCEPTED if self.label == LABEL_ACCEPTABLE else DECISION_REJECTED

    @property
    def awaits_features(self) -> bool:
        """An edited answer recorded where no model could read it (``mlx-sdm review correct``): it joins a support
        set only once the model that judged the original has read the edit (at the next chat or serve load), never
        with the original answer's features."""
        return self.completion is not None and self._features is None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form ``mlx-sdm review`` and ``/v1/reviews`` print."""
        return {"decision": self.kind, "label": self.label, "answer": self.completion, "note": self.note,
                "task": None if self.task is None else self.task.name, "decided_at": self.created_at}


@dataclass
class ReviewItem:
    id: int
    message_id: int
    session_id: str
    session_title: str
    reason: str  # comma-separated when several apply, e.g. "below_threshold,escalated_high"
    created_at: str
    prompt: str  # the user message the answer replied to
    answer: str
    verdict_status: VerdictStatus | None
    verdict: DocumentVerdict | None
    monitor: MonitorReading | None
    decision: Decision | None  # the latest decision that is not undone
    task: TaskScope | None = None  # the verifier's task the answer was judged under (None: not kept)

    @property
    def reasons(self) -> list[str]:
        return [r for r in self.reason.split(",") if r]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of a queue entry, the same for ``mlx-sdm review list`` and ``GET /v1/reviews``: the
        question (``prompt``) and ``answer``, the verdict's state and its short line (the words every front end
        says it in), the task, why it was queued, and the active decision (null: pending)."""
        verdict = self.verdict
        return {
            "id": self.id, "prompt": self.prompt, "answer": self.answer,
            "task": None if self.task is None else self.task.name,
            "status": "pending" if self.decision is None else "decided",
            "verdict_status": None if self.verdict_status is None else self.verdict_status.value,
            "verdict_reason": None if verdict is None else verdict_words(verdict).line,
            "judged": self.judged, "not_judged_because": self.why_a_label_changes_nothing,
            "reasons": self.reasons, "created_at": self.created_at,
            "session_id": self.session_id, "session_title": self.session_title, "message_id": self.message_id,
            "decision": None if self.decision is None else self.decision.to_dict(),
        }

    @property
    def judged(self) -> bool:
        """A verifier judged this answer (an estimator verdict), so a label joins that verifier's support set
        (an everyday answer: the open-question member's) and can change later verdicts."""
        return verifier_judged(self.verdict_status, self.verdict)

    @property
    def why_a_label_changes_nothing(self) -> str | None:
        """Why no verifier judged this answer, in plain words (None when one did): a label on it joins no
        support set that judges such answers, so it changes no verdict."""
        if self.judged:
            return None
        verdict = self.verdict
        why = UNJUDGED_WORDS.get(verdict.unjudged if verdict is not None else None, UNJUDGED_WORDS[None])
        return f"{why}, so a label changes no verdict"


def verifier_judged(status: VerdictStatus | None, verdict: DocumentVerdict | None) -> bool:
    """The rule of what a review label can change: an answer a verifier's estimator judged. Not judged: no
    verdict stored, no verifier, or a verdict without an estimator judgement (not a task, no checkable
    answer, an empty answer). A stored state without its numbers (older rows) is taken as judged."""
    if verdict is not None:
        return verdict.verdict is not None
    return status in (VerdictStatus.VERIFIED, VerdictStatus.NOT_VERIFIED, VerdictStatus.OUT_OF_SCOPE)


#: Why no verifier judged an answer (DocumentVerdict.unjudged; None: no verdict at all), in plain words.
UNJUDGED_WORDS = {
    None: "no verifier judged this answer (none fits the model, verification was off, or the turn ended before "
          "the verdict)",
    REASON_NOT_A_TASK: "the question is none of the verifier's tasks, so no verifier judged the answer",
    REASON_NO_CHECKABLE_ANSWER: "the question router read the message as having no checkable answer, so no "
                                "verifier judged the answer",
    REASON_EMPTY_ANSWER: "the answer was empty (or whitespace only), so no verifier judged it",
}


@dataclass
class SupportPoint:
    """A decision as the verifier's support set sees it."""

    decision: Decision
    features: np.ndarray
    label: int
    text: str


def support_words(size: int | None) -> str:
    """The support set's count (``ReviewService.support_size``, docs/chat.md "The support set's count") in the
    words the decision message, the review screen's footer and the status line share."""
    return "support set: no verifier" if size is None else f"support set {size} points"


def split_sql(script: str) -> list[str]:
    """The statements of a migration script. A ``;`` ends a statement only where SQLite says the text so far
    is one whole statement (``sqlite3.complete_statement``): a trigger's ``BEGIN ...; END`` body stays whole."""
    statements, pending = [], ""
    for piece in script.split(";"):
        pending = f"{pending};{piece}" if pending else piece
        if sqlite3.complete_statement(pending + ";"):
            if pending.strip():
                statements.append(pending.strip())
            pending = ""
    return statements + ([pending.strip()] if pending.strip() else [])


def session_from_row(r: sqlite3.Row) -> SessionInfo:
    return SessionInfo(
        id=r["id"],
        title=r["title"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        model=r["model"],
        verifier=r["verifier"],
        message_count=int(r["message_count"]),
        provenance=_provenance(r),
        branch=_branch(r),
    )


def _branch(r: sqlite3.Row) -> BranchOrigin | None:
    keys = r.keys()
    if "parent_session_id" not in keys or r["parent_session_id"] is None:
        return None
    return BranchOrigin(r["parent_session_id"], r["parent_message_id"], int(r["parent_turn"] or 0), r["parent_title"] or "")


def _provenance(r: sqlite3.Row) -> Provenance | None:
    stored = loads_json(r["provenance_json"]) if "provenance_json" in r.keys() else None
    return Provenance.from_dict(stored, where=f"session {r['id']} provenance") if stored else None


def message_from_row(r: sqlite3.Row) -> MessageRecord:
    return MessageRecord(
        id=int(r["id"]),
        session_id=r["session_id"],
        role=r["role"],
        kind=r["kind"],
        text=r["text"],
        status=r["status"],
        created_at=r["created_at"],
        finished_at=r["finished_at"],
        token_count=r["token_count"],
        logprob_mean=r["logprob_mean"],
        logprob_min=r["logprob_min"],
        tokens=loads_json(r["tokens_json"]),
        token_logprobs=loads_json(r["logprobs_json"]),
        prompt=loads_json(r["prompt_json"]),
        feature_model=r["feature_model"],
        metadata=MessageMeta.from_dict(loads_json(r["metadata_json"])),
        verdict_status=VerdictStatus.read(r["verdict_status"]),
        verdict=stored_verdict(r),
        verifier=r["verifier"],
        task=task_scope(r, "verdict_"),
        monitor=stored_reading(r),
        review_id=r["review_id"],
        _features=r["features"],
    )


def stored_verdict(r: sqlite3.Row) -> DocumentVerdict | None:
    """The row's verdict JSON read back as the typed verdict (the SQLite edge)."""
    return DocumentVerdict.from_dict(loads_json(r["verdict_json"]))


def stored_reading(r: sqlite3.Row) -> MonitorReading | None:
    """The row's monitor-snapshot JSON read back as the typed reading (the SQLite edge)."""
    return MonitorReading.from_dict(loads_json(r["monitor_json"]))


def decision_from_row(r: sqlite3.Row) -> Decision:
    return Decision(
        id=int(r["id"]),
        review_id=int(r["review_id"]),
        label=int(r["label"]),
        note=r["note"],
        completion=r["completion"],
        created_at=r["created_at"],
        undone_at=r["undone_at"],
        feature_model=r["feature_model"],
        verifier=r["verifier"] if "verifier" in r.keys() else None,
        task=task_scope(r),
        _features=r["features"],
    )
