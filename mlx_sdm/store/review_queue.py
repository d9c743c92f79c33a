"""The review queue and its decisions, a part of :class:`~mlx_sdm.store.chat_store.ChatStore`: queued
answers, labels (a new decision on an entry supersedes the old one; undo), the labelled points the
verifier's support set takes, and training rows."""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path
from typing import Any

import numpy as np

from mlx_sdm.atomic import atomic_write_text
from mlx_sdm.calibration.sdmdataset import is_sdmdataset_path, write_bundle
from mlx_sdm.errors import DataError
from mlx_sdm.store.database import Database
from mlx_sdm.store.records import (
    LABEL_ACCEPTABLE,
    LABEL_UNACCEPTABLE,
    Decision,
    ReviewItem,
    SupportPoint,
    TaskScope,
    decision_from_row,
    features_array,
    features_blob,
    inserted_id,
    iso_bound,
    now_iso,
    stored_reading,
    stored_verdict,
    task_scope,
    verifier_judged,
)
from mlx_sdm.network.verdict import VerdictStatus


class ReviewQueue:
    """The review queue of a chat store's database (:class:`~mlx_sdm.store.database.Database`)."""

    def __init__(self, db: Database):
        self.db = db

    @property
    def path(self) -> Path:
        return self.db.path

    def review_items(
        self,
        *,
        session_id: str | None = None,
        reason: str | None = None,
        since: str | date | datetime | None = None,
        until: str | date | datetime | None = None,
        status: str = "all",
        review_id: int | None = None,
        judged: bool | None = None,
        task: str | None = None,
    ) -> list[ReviewItem]:
        """Review-queue entries, newest first. ``status``: "pending" (no active decision), "decided" or "all";
        ``since``/``until``: ISO timestamps or dates (a bare date covers its whole day); ``task``: only answers
        judged under that task of their verifier; ``judged``: True, only
        answers a verifier judged (what a label can change: :attr:`ReviewItem.judged`); False, only the others
        (listed apart, each saying why a label changes nothing); None, both."""
        if status not in {"pending", "decided", "all"}:
            raise DataError(f"unknown review status {status!r}; use pending, decided or all", field="status")
        where, params = _review_filters(session_id, reason, since, until, review_id)
        if task is not None:
            where.append("v.task = ?")
            params.append(task)
        rows = self.db.query(
            "SELECT r.*, s.title AS session_title, m.text AS answer, m.prompt_json, "
            "v.status AS verdict_status, v.verdict_json, v.task AS verdict_task, v.task_recorded AS verdict_task_recorded, "
            "ms.details_json AS monitor_json, "
            "(SELECT u.text FROM messages u WHERE u.session_id = m.session_id AND u.role = 'user' AND u.id < m.id "
            " ORDER BY u.id DESC LIMIT 1) AS user_text "
            "FROM review_queue r JOIN messages m ON m.id = r.message_id JOIN sessions s ON s.id = r.session_id "
            "LEFT JOIN verdicts v ON v.message_id = m.id LEFT JOIN monitor_snapshots ms ON ms.message_id = m.id "
            + ("WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY r.created_at DESC, r.id DESC",
            params,
        )
        decisions = self._active_decisions_by_review()
        items = []
        for r in rows:
            decision = decisions.get(int(r["id"]))
            if status == "pending" and decision is not None or status == "decided" and decision is None:
                continue
            item = ReviewItem(
                id=int(r["id"]), message_id=int(r["message_id"]), session_id=r["session_id"],
                session_title=r["session_title"], reason=r["reason"], created_at=r["created_at"],
                prompt=r["user_text"] or "", answer=r["answer"], verdict_status=VerdictStatus.read(r["verdict_status"]),
                verdict=stored_verdict(r), monitor=stored_reading(r), decision=decision,
                task=task_scope(r, "verdict_"),
            )
            if judged is None or item.judged == judged:
                items.append(item)
        return items

    def review_item(self, review_id: int) -> ReviewItem:
        for item in self.review_items(review_id=review_id):
            return item
        raise DataError(f"no review-queue entry with id {review_id}", path=str(self.path), field="review")

    def review_reasons(self) -> list[str]:
        """Every reason present in the queue (for the filter list)."""
        found: set[str] = set()
        for (reason,) in self.db.query("SELECT DISTINCT reason FROM review_queue"):
            found.update(r for r in reason.split(",") if r)
        return sorted(found)

    def _active_decisions_by_review(self) -> dict[int, Decision]:
        rows = self.db.query("SELECT * FROM decisions WHERE undone_at IS NULL ORDER BY id")
        return {int(r["review_id"]): decision_from_row(r) for r in rows}  # the latest wins

    def record_decision(
        self,
        review_id: int,
        label: int,
        *,
        note: str | None = None,
        completion: str | None = None,
        features: np.ndarray | None = None,
        feature_model: str | None = None,
        verifier: str | None = None,
        task: TaskScope | None = None,
    ) -> Decision:
        """Label a queued answer. A new decision on an already decided entry supersedes the old one
        (the old one is marked undone in the same transaction). ``verifier`` and ``task``: where the
        label was given (``task`` None: not known, the label then counts for every task of ``verifier``)."""
        if label not in (LABEL_ACCEPTABLE, LABEL_UNACCEPTABLE):
            raise DataError(f"label must be 1 (acceptable) or 0 (unacceptable), got {label!r}", field="label")
        if completion is not None and not completion.strip():
            raise DataError("an edited completion cannot be empty", field="completion")
        if completion is not None and label != LABEL_ACCEPTABLE:
            raise DataError("an edited completion is the acceptable version of the answer: use label 1", field="completion")
        stamp = now_iso()
        with self.db.tx() as conn:
            if conn.execute("SELECT 1 FROM review_queue WHERE id = ?", (review_id,)).fetchone() is None:
                raise DataError(f"no review-queue entry with id {review_id}", path=str(self.path), field="review")
            conn.execute("UPDATE decisions SET undone_at = ? WHERE review_id = ? AND undone_at IS NULL", (stamp, review_id))
            cur = conn.execute(
                "INSERT INTO decisions(review_id, label, note, completion, created_at, features, feature_model, verifier, "
                "task, task_recorded) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (review_id, int(label), note, completion, stamp, features_blob(features), feature_model, verifier,
                 None if task is None else task.name, int(task is not None)),
            )
            decision_id = inserted_id(cur)
        return self.decision(decision_id)

    def decisions_by_message(self, session_id: str) -> dict[int, Decision]:
        """The active decision on each reviewed answer of a session, keyed by message id."""
        rows = self.db.query(
            "SELECT d.*, r.message_id AS reviewed_message FROM decisions d JOIN review_queue r ON r.id = d.review_id "
            "WHERE r.session_id = ? AND d.undone_at IS NULL ORDER BY d.id",
            (session_id,),
        )
        return {int(r["reviewed_message"]): decision_from_row(r) for r in rows}

    def decision(self, decision_id: int) -> Decision:
        rows = self.db.query("SELECT * FROM decisions WHERE id = ?", (decision_id,))
        if not rows:
            raise DataError(f"no decision with id {decision_id}", path=str(self.path), field="decision")
        return decision_from_row(rows[0])

    def last_decision(self) -> Decision | None:
        rows = self.db.query("SELECT * FROM decisions WHERE undone_at IS NULL ORDER BY id DESC LIMIT 1")
        return decision_from_row(rows[0]) if rows else None

    def undo_last_decision(self) -> Decision | None:
        """Undo the most recent active decision (its entry goes back to pending). Returns it, or None."""
        with self.db.tx() as conn:
            row = conn.execute("SELECT * FROM decisions WHERE undone_at IS NULL ORDER BY id DESC LIMIT 1").fetchone()
            if row is None:
                return None
            conn.execute("UPDATE decisions SET undone_at = ? WHERE id = ?", (now_iso(), row["id"]))
        return self.decision(int(row["id"]))

    def support_points(self, feature_model: str | None = None, verifier: str | None = None,
                       task: TaskScope | None = None) -> list[SupportPoint]:
        """Active decisions as labelled support points, oldest first. ``feature_model`` keeps only those
        whose features were computed by that model (features of another model mean nothing to its
        verifier); ``verifier`` (a resolved verifier folder) only labels given under that verifier
        (older decisions without one: the verifier that judged the answer); ``task`` only labels given
        under that task of it (decisions stored before tasks were kept count for every task). A label on an
        answer no verifier judged (:attr:`ReviewItem.judged` False) is no support point: no support set judges
        such answers, so it would change no verdict (it stays a training row)."""
        rows = self.db.query(
            "SELECT d.*, m.features AS message_features, m.feature_model AS message_model, m.text AS answer, "
            "v.verifier AS judged_by, v.status AS verdict_status, v.verdict_json "
            "FROM decisions d JOIN review_queue r ON r.id = d.review_id JOIN messages m ON m.id = r.message_id "
            "LEFT JOIN verdicts v ON v.message_id = m.id WHERE d.undone_at IS NULL ORDER BY d.id"
        )
        points = []
        for r in rows:
            decision = decision_from_row(r)
            if decision.awaits_features:  # an edit no model has read yet: not the original answer's point
                continue
            blob, model = (r["features"], r["feature_model"]) if r["features"] is not None else (r["message_features"], r["message_model"])
            features = features_array(blob)
            if features is None or (feature_model is not None and model != feature_model):
                continue
            if not verifier_judged(VerdictStatus.read(r["verdict_status"]), stored_verdict(r)):
                continue
            given_under = decision.verifier or (str(Path(r["judged_by"]).resolve()) if r["judged_by"] else None)
            if verifier is not None and given_under != verifier:
                continue
            if task is not None and decision.task is not None and decision.task != task:
                continue
            points.append(
                SupportPoint(decision=decision, features=features, label=decision.label, text=decision.completion or r["answer"])
            )
        return points

    def edits_awaiting_features(self) -> list[tuple[Decision, int]]:
        """Active edited answers recorded where no model could read them (:attr:`Decision.awaits_features`), each with
        the id of the answer it corrects, oldest first: a loaded model reads them (:meth:`set_decision_features`)."""
        rows = self.db.query(
            "SELECT d.*, r.message_id AS reviewed_message FROM decisions d JOIN review_queue r ON r.id = d.review_id "
            "WHERE d.undone_at IS NULL AND d.completion IS NOT NULL AND d.features IS NULL ORDER BY d.id")
        return [(decision_from_row(r), int(r["reviewed_message"])) for r in rows]

    def set_decision_features(self, decision_id: int, features: np.ndarray, feature_model: str | None) -> None:
        """Keep the features a model read of a decision's edited answer (the decision itself is unchanged)."""
        with self.db.tx() as conn:
            conn.execute("UPDATE decisions SET features = ?, feature_model = ? WHERE id = ?",
                         (features_blob(features), feature_model, decision_id))

    def training_rows(self) -> list[dict]:
        """Active decisions as training rows ``{"prompt", "completion", "label"}`` for `mlx-sdm train`/`finetune`.
        An edited completion gives label 1 for the edit; the original answer keeps the decision's label
        only when it was not edited (an edit says the original was not acceptable as written: label 0)."""
        rows = self.db.query(
            "SELECT d.*, m.text AS answer, "
            "(SELECT u.text FROM messages u WHERE u.session_id = m.session_id AND u.role = 'user' AND u.id < m.id "
            " ORDER BY u.id DESC LIMIT 1) AS user_text "
            "FROM decisions d JOIN review_queue r ON r.id = d.review_id JOIN messages m ON m.id = r.message_id "
            "WHERE d.undone_at IS NULL ORDER BY d.id"
        )
        out = []
        for r in rows:
            prompt = r["user_text"] or ""
            if r["completion"] is not None:
                out.append({"prompt": prompt, "completion": r["completion"], "label": LABEL_ACCEPTABLE})
                out.append({"prompt": prompt, "completion": r["answer"], "label": LABEL_UNACCEPTABLE})
            else:
                out.append({"prompt": prompt, "completion": r["answer"], "label": int(r["label"])})
        return out

    def export_training_rows(self, path: str | Path) -> int:
        """Write :meth:`training_rows` as JSONL (atomically), or as a ``.sdmdataset`` bundle when the
        path ends so (rows {id, label, prompt, document}, no embeddings). Returns the number of rows."""
        rows = self.training_rows()
        if is_sdmdataset_path(path):
            write_bundle(path, [{"id": f"review-{i}", "label": r["label"], "prompt": r["prompt"],
                                 "document": r["completion"]} for i, r in enumerate(rows, start=1)],
                         class_names=["unacceptable", "acceptable"], metadata={"source": "mlx-sdm review decisions"})
            return len(rows)
        atomic_write_text(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        return len(rows)


def _review_filters(session_id: str | None, reason: str | None, since: Any, until: Any,
                    review_id: int | None) -> tuple[list[str], list[Any]]:
    """SQL conditions and their parameters for :meth:`ReviewQueue.review_items`."""
    where: list[str] = []
    params: list[Any] = []
    if review_id is not None:
        where.append("r.id = ?")
        params.append(int(review_id))
    if session_id is not None:
        where.append("r.session_id = ?")
        params.append(session_id)
    if reason:
        where.append("(',' || r.reason || ',') LIKE ?")
        params.append(f"%,{reason},%")
    lo, hi = iso_bound(since, end=False), iso_bound(until, end=True)
    if lo is not None:
        where.append("r.created_at >= ?")
        params.append(lo)
    if hi is not None:
        where.append("r.created_at <= ?")
        params.append(hi)
    return where, params
