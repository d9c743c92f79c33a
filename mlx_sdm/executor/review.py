"""Review decisions as their own service: a label on a queued answer puts that answer's document
features into the verifier's support set at once (``SDMEstimator.add_support``, no retraining), and
the reviewed verifier is saved atomically beside the store. A label joins ONLY the verifier it was
given under (the store keeps that verifier's identity with the decision), never another verifier
that happens to run on the same model, and only the task of it the question was routed to: a
verifier built on several tasks (``FeatureRecipe.task_systems``) judges each task with its own
support set, the base plus that task's labels (built from the base folder when the task is first
judged); unrouted questions (and a single-task verifier) use the base verifier with its unrouted labels.
Decisions stored before tasks were kept (schema < 5) count for every task of their verifier. The service is the
pipeline's :class:`~mlx_sdm.turn.seams.VerifierProvider` (:meth:`ReviewService.verifier_for`): it holds the
verifiers it builds and rebuilds, and changes nothing in the shared ``TurnComponents``.

Runs on the thread that owns MLX (it re-encodes edited completions and rebuilds the estimator).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from mlx_sdm.atomic import atomic_write_text
from mlx_sdm.errors import DataError, MlxSdmError
from mlx_sdm.turn.seams import TurnVerifier
from mlx_sdm.turn.values import TurnComponents, TurnOptions, TurnRequest, last_user_text, previous_user_text
from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.store.records import (
    LABEL_ACCEPTABLE,
    LABEL_UNACCEPTABLE,
    Decision,
    MessageRecord,
    ReviewItem,
    SupportPoint,
    TaskScope,
    support_words,
)

if TYPE_CHECKING:
    from mlx_sdm.calibration.estimator import SDMEstimator
    from mlx_sdm.network.verifier import DocumentVerifier

#: The features of an answer made elsewhere, read as the chat reads that turn (``TurnPipeline.judge_text``).
FeaturesOf = Callable[[TurnRequest, str], "np.ndarray | None"]


def verifier_key(path: str | None) -> str | None:
    """The identity a review label is kept under: the base verifier's resolved folder."""
    return None if path is None else str(Path(path).resolve())


@dataclass
class DecisionResult:
    decision_id: int
    review_id: int
    label: int
    applied: bool  # the point went into the verifier's support set
    support_size: int | None  # ReviewService.support_size after the decision: the count every view shows
    saved_to: str | None  # where the updated verifier was saved (atomically)
    message: str = ""
    replaced: Decision | None = None  # the entry's decision this one replaced (None: it had none)


class ReviewService:
    """Decisions → the loaded verifier's support set (see the module docstring)."""

    def __init__(self, store: ChatStore, components: TurnComponents, *, reviewed_dir: str | None = None,
                 features_of: FeaturesOf | None = None):
        self.store = store
        self.components = components
        self.feature_model = components.feature_model
        self.verifier = verifier_key(components.verifier_path) if components.verifier is not None else None
        self._reviewed_dir = reviewed_dir
        self._features_of = features_of  # reads an edited answer as the chat judges that turn (None: kept unread)
        self._unreadable: set[int] = set()  # edits read_edits got no features for: not read again every sync
        self._base = components.verifier  # the loaded verifier with the unrouted labels (rebuilt by apply_all)
        self._tasks: dict[str, TurnVerifier] = {}  # task -> its DocumentVerifier (the base + that task's labels)
        self._saved_tasks: set[str] = set()

    # -- what is loaded -------------------------------------------------------------------------
    @property
    def support_size(self) -> int | None:
        """The count of the support set (docs/chat.md, "The support set's count"), the one number the
        decision message, the review screen's footer and the status line show: the points the loaded
        verifier was built with, its members' included (the open-question member's own points), plus every
        active label given under it, whatever task it was given for. It moves by one with every decision
        and undo, wherever the label went; None when no verifier is loaded."""
        verifier = self._base
        if verifier is None:
            return None
        held = int(verifier.estimator.support_size) + sum(int(m.estimator.support_size)
                                                           for m in verifier.members.values())
        if self.components.verifier_path is None:
            return held  # no folder to load task sets from: every label went into these sets
        # the unrouted sets hold the unrouted labels; a task's labels live in that task's own copy (a task judged
        # from a second look takes none: see joins_support)
        joined = [p for p in self.all_points() if self.joins_support(None if p.decision.task is None else p.decision.task.name)]
        return held - len(self.points()) + len(joined)

    def reviewed_dir(self, task: str | None = None) -> Path | None:
        """Where the reviewed verifier is saved (a task of a multi-task verifier: a sibling per task)."""
        suffix = "" if task is None else "-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", task)
        if self._reviewed_dir:
            return Path(str(Path(self._reviewed_dir)) + suffix)
        if self.components.verifier_path is None:
            return None
        base = Path(self.components.verifier_path).resolve()
        tag = hashlib.sha256(str(base).encode()).hexdigest()[:8]
        return self.store.path.parent / "verifiers" / f"{base.name}-reviewed-{tag}{suffix}"

    def points(self, task: str | None = None) -> list[SupportPoint]:
        """This verifier's labelled points for questions routed to ``task`` (same model, same verifier,
        same task; decisions stored before tasks were kept count for every task)."""
        return self.store.review_queue.support_points(feature_model=self.feature_model, verifier=self.verifier,
                                         task=TaskScope(task))

    def all_points(self) -> list[SupportPoint]:
        """Every labelled point of this verifier, all tasks."""
        return self.store.review_queue.support_points(feature_model=self.feature_model, verifier=self.verifier)

    def joins_support(self, task: str | None) -> bool:
        """A label of an answer routed to ``task`` can join the support set that judges it. Not for a member that
        judges from a second look: its support points are [agreement features; states] of an answer and the K
        answers drawn with it, and the drawn answers are not kept with the stored answer, so a label cannot be
        made into such a point (it is kept as a training row)."""
        verifier = self._base
        return verifier is None or task is None or verifier.second_look_spec(task) is None

    def verifier_for(self, task: str | None) -> TurnVerifier:
        """The verifier that judges questions routed to ``task`` (:class:`~mlx_sdm.turn.seams.VerifierProvider`):
        the base plus that task's labels only (loaded from the base folder when first asked; unrouted: the base
        with the unrouted labels)."""
        verifier = self._verifier_of(task)
        if verifier is None:
            raise MlxSdmError("no verifier is loaded, so none judges a task's questions")
        return verifier

    def _verifier_of(self, task: str | None) -> TurnVerifier | None:
        components = self.components
        if task is None or self._base is None or components.verifier_path is None:
            return self._base  # no folder to load a clean base from: one support set for all
        if task not in self._tasks:
            verifier = self._load_base()
            if self.joins_support(task):
                _add_points(verifier, task, self.points(task))
            self._tasks[task] = verifier
        return self._tasks[task]

    def _load_base(self) -> DocumentVerifier:
        """The loaded verifier as its folder holds it (no review labels)."""
        from mlx_sdm.network.verifier import DocumentVerifier

        assert self.components.verifier_path is not None
        return DocumentVerifier.load(self.components.verifier_path, expect_fingerprint=self.components.lm.fingerprint)

    # -- support set ----------------------------------------------------------------------------
    def apply_all(self, *, save: bool, reload: bool = True) -> None:
        """(Re)build the support sets: the base verifier (reloaded from disk unless ``reload=False``)
        plus every active decision given under it for unrouted questions; each task's own set is
        rebuilt when that task is next judged. Points a verifier already holds are not added twice."""
        if self._base is None:
            return
        if reload and self.components.verifier_path is not None:
            self._base = self._load_base()
        self._tasks.clear()
        _add_points(self._base, None, self.points())
        if save:
            self.save_all()

    def save(self, task: str | None = None) -> str | None:
        """Save the verifier of ``task`` (None: unrouted questions) with its labels, atomically."""
        target = self.reviewed_dir(task)
        verifier = self._verifier_of(task)
        if target is None or verifier is None:
            return None
        verifier.save(target)  # atomic (estimator.save writes through atomic_directory)
        atomic_write_text(target.parent / (target.name + ".review.json"), json.dumps(
            {"base_verifier": self.components.verifier_path, "task": task,
             "decision_ids": [p.decision.id for p in self.points(task)],
             "support_size": int(_estimator(verifier, task).support_size), "store": str(self.store.path)}, indent=1))
        if task is not None:
            self._saved_tasks.add(task)
        return str(target)

    def save_all(self) -> str | None:
        """Save the unrouted verifier and every task's that has labels or was saved before."""
        tasks = {p.decision.task.name for p in self.all_points() if p.decision.task is not None}
        for task in sorted(t for t in tasks | self._saved_tasks if t is not None):
            self.save(task)
        return self.save()

    # -- decisions ------------------------------------------------------------------------------
    def decide(self, decision: ReviewDecision) -> DecisionResult:
        """Record a decision (:func:`record_review`, the one write path) and put its point into the loaded
        verifier's support set at once: an accepted or rejected answer with its own features, a corrected one
        with the edit's (re-encoded with the model)."""
        recorded = record_review(self.store, decision, self)
        item, message, features, scope = recorded.item, recorded.message, recorded.features, recorded.scope
        stored = recorded.decision
        point_model = self.feature_model if features is not None else message.feature_model
        task = None if scope is None else scope.name

        def result(applied: bool, text: str, saved: str | None = None) -> DecisionResult:
            return DecisionResult(stored.id, item.id, stored.label, applied, self.support_size, saved, text,
                                  recorded.replaced)

        if not item.judged:  # the store keeps it out of every support set (ReviewQueue.support_points)
            return result(False, f"recorded as a training row only: {item.why_a_label_changes_nothing}; "
                                 "the support set is unchanged")
        if self._base is None:
            return result(False, "recorded; no verifier is loaded, so the support set is unchanged")
        if stored.verifier != self.verifier:
            return result(False, "recorded for the verifier that judged this answer; the loaded verifier is another "
                                 "one, so its support set is unchanged")
        if not self.joins_support(task):
            return result(False, "recorded as a training row: this verifier judges everyday answers from a second look "
                                 "(more answers drawn to the question), which is not kept with the answer, so the label "
                                 "cannot join its support set; the support set is unchanged")
        if point_model != self.feature_model or (features is None and message.features is None):
            return result(False, "recorded; the answer's features come from another model, so this verifier cannot "
                                 "use them")
        if recorded.replaced is not None or scope is None:  # the old label must leave / a label of every task: rebuild
            self.apply_all(save=False)
        else:
            target = self.verifier_for(task)  # built from the store: may hold the new point already
            estimator = _estimator(target, task)
            joins = target.support_label(task, stored.label, stored.completion or message.text)
            if joins is None:
                return result(False, "recorded: a rejected answer of a task with more than two answers does not say "
                                     "which answer is right, so it joins no support set (correct it to teach it)")
            if stored.support_id not in estimator.support_ids:
                vector = features if features is not None else message.features
                estimator.add_support(
                    [stored.support_id], np.asarray(vector, dtype=np.float32)[None, :],
                    np.array([joins], dtype=np.int64), [stored.completion or message.text])
        saved = self.save(task) if scope is not None else self.save_all()
        where = "" if task is None else f" of task {task}"
        return result(True, f"added to the support set{where} ({support_words(self.support_size)})", saved)

    def edit_features(self, message: MessageRecord, answer: str) -> np.ndarray | None:
        """An edited answer to ``message``'s question read as the chat reads that turn (no second look: a label joins
        no second-look set); None where no model can read it here or the message has no stored prompt."""
        if self._features_of is None or message.prompt is None:
            return None
        return self._features_of(TurnRequest(message.prompt, TurnOptions(second_look=False)), answer)

    def read_edits(self) -> int:
        """Read the edited answers recorded where no model was loaded (``mlx-sdm review correct``) as the chat reads
        that turn, when this model judged the answer they correct; they join the support sets at the next
        :meth:`apply_all`. Returns how many were read."""
        read = 0
        for decision, message_id in self.store.review_queue.edits_awaiting_features():
            if decision.id in self._unreadable or decision.completion is None:
                continue
            message = self.store.message(message_id)
            if message.feature_model != self.feature_model:
                continue  # another model's answer: that model reads it when it is loaded
            features = self.edit_features(message, decision.completion)
            if features is None:
                self._unreadable.add(decision.id)
                continue
            self.store.review_queue.set_decision_features(decision.id, features, self.feature_model)
            read += 1
        return read

    def task_of(self, message: MessageRecord, given_under: str | None) -> TaskScope | None:
        """The task the answer was judged under: as stored with its verdict, else (an answer stored before
        tasks were kept, judged by the loaded verifier) its question routed again; None: not known."""
        if message.task is not None:
            return message.task
        verifier = self._base
        if verifier is None or given_under != self.verifier or message.prompt is None:
            return None
        return TaskScope(verifier.route(last_user_text(message.prompt), previous_user_text(message.prompt)).task)

    def undo(self) -> DecisionResult | None:
        """Undo the most recent decision and take its point out of the support set."""
        decision = self.store.review_queue.undo_last_decision()
        if decision is None:
            return None
        applied, saved = False, None
        task = None if decision.task is None else decision.task.name
        if self._base is not None:
            self.apply_all(save=False)
            if task is not None:
                self._saved_tasks.add(task)  # its saved copy must lose the undone point too
            unrouted, applied = self.save_all(), True
            target = self.reviewed_dir(task)
            saved = unrouted if task is None or target is None else str(target)
        size = self.support_size
        text = "decision undone" + (f"; {support_words(size)}" if applied else "")
        return DecisionResult(decision.id, decision.review_id, decision.label, applied, size, saved, text)

    def after_delete(self, removed: int) -> None:
        """A deleted session took its decisions with it: rebuild the support sets without them."""
        if removed and self._base is not None:
            self.apply_all(save=False)
            self.save_all()


def _estimator(verifier: TurnVerifier, task: str | None) -> SDMEstimator:
    """The estimator that judges ``task``'s questions: a member verifier's (open questions) or the verifier's own."""
    return verifier.estimator_for(task)


def _add_points(verifier: TurnVerifier, task: str | None, points: list[SupportPoint]) -> None:
    """Add labelled points to the support set of the estimator judging ``task`` (those it already holds are
    skipped), each with the class its member reads a review label as (``support_label``; None: it joins nothing)."""
    estimator = _estimator(verifier, task)
    held = set(estimator.support_ids)
    joining = [(p, verifier.support_label(task, p.label, p.text)) for p in points if p.decision.support_id not in held]
    joining = [(p, label) for p, label in joining if label is not None]
    if joining:
        estimator.add_support([p.decision.support_id for p, _ in joining],
                              np.stack([p.features for p, _ in joining]).astype(np.float32),
                              np.array([label for _, label in joining], dtype=np.int64), [p.text for p, _ in joining])



# -- the one write path -----------------------------------------------------------------------------------------

#: What a person decides of a queued answer, as every front end names it.
ACCEPT, REJECT, CORRECT = "accept", "reject", "correct"
VERBS = (ACCEPT, REJECT, CORRECT)


class ReviewRefused(DataError):
    """A decision that cannot be recorded, in one line naming the entry or field and what to do; ``code`` says
    which (``not_found``, ``already_decided``, ``missing_answer``, ``no_prompt``, ``unknown_decision``) so
    that the server answers 404 / 409 / 400 and the CLI exits 2."""

    def __init__(self, message: str, *, code: str, field: str, path: str | None = None):
        super().__init__(message, field=field, path=path)
        self.code = code


@dataclass(frozen=True)
class ReviewDecision:
    """A decision on review-queue entry ``review_id``, as the TUI, ``mlx-sdm review`` and ``POST /v1/reviews/{id}``
    hand it in: ``verb`` accept / reject / correct (``answer``: the corrected answer), a ``note``, and whether it may
    ``replace`` the entry's active decision (the TUI shows it and replaces it with a key; a script must say so)."""

    review_id: int
    verb: str
    answer: str | None = None
    note: str | None = None
    replace: bool = False

    @classmethod
    def of_label(cls, review_id: int, label: int, *, completion: str | None = None, note: str | None = None,
                 replace: bool = True) -> "ReviewDecision":
        """The TUI's form (a label, an edited completion) as a decision."""
        verb = CORRECT if completion is not None else (ACCEPT if label == LABEL_ACCEPTABLE else REJECT)
        if completion is not None and label != LABEL_ACCEPTABLE:
            raise DataError("an edited completion is the acceptable version of the answer: use label 1", field="completion")
        return cls(review_id, verb, completion, note, replace)

    @property
    def label(self) -> int:
        return LABEL_UNACCEPTABLE if self.verb == REJECT else LABEL_ACCEPTABLE


@dataclass(frozen=True)
class RecordedReview:
    """A decision as :func:`record_review` kept it: the stored decision, the entry as it was before, its answer,
    the edit's features (None: not read yet, or no edit), the task it was kept under and the decision it replaced."""

    decision: Decision
    item: ReviewItem
    message: MessageRecord
    features: np.ndarray | None
    scope: TaskScope | None
    replaced: Decision | None


def record_review(store: ChatStore, decision: ReviewDecision, service: ReviewService | None = None) -> RecordedReview:
    """The one write path of a review decision: the TUI (through :meth:`ReviewService.decide`), ``mlx-sdm review``
    and ``POST /v1/reviews/{id}`` all record it here. ``service``: the loaded model and verifier (None: none is
    loaded, as for ``mlx-sdm review``). A label is kept under the verifier that judged the answer and the task it
    was judged under (where the stored answer does not say: the loaded verifier, the question routed again; with
    nothing loaded, the label counts for every task of its verifier, the rule of decisions stored before tasks were
    kept). An edit is read by the loaded model; with none, it is kept unread and joins a support set once the
    model that judged the answer reads it at its next load (:meth:`ReviewService.read_edits`). The support sets
    themselves are always the store's decisions (:meth:`ReviewQueue.support_points`), so a decision recorded
    with nothing loaded reaches the next chat or server as one made in the TUI does."""
    item = _queued(store, decision.review_id)
    if decision.verb not in VERBS:
        raise ReviewRefused(f"unknown decision {decision.verb!r} for review #{item.id}; use accept, reject or correct",
                            code="unknown_decision", field="decision")
    answer = decision.answer if decision.verb == CORRECT else None
    if decision.verb == CORRECT and (answer is None or not answer.strip()):
        raise ReviewRefused(f"correct needs the corrected answer for review #{item.id}: give its text (an empty answer "
                            "cannot be kept)", code="missing_answer", field="answer")
    old = item.decision
    if old is not None and not decision.replace:
        raise ReviewRefused(
            f"review #{item.id} is already decided: {old.kind} on {old.created_at[:10]}; to change it, decide again "
            "with replace (mlx-sdm review --replace, \"replace\": true on the server), as the TUI does",
            code="already_decided", field="id")
    message = store.message(item.message_id)
    if answer is not None and message.prompt is None:
        raise ReviewRefused(f"review #{item.id} has no stored prompt, so a corrected answer cannot be read as the "
                            "chat reads that turn; accept or reject it instead", code="no_prompt", field="answer")
    features = None if answer is None or service is None else service.edit_features(message, answer)
    given_under = verifier_key(message.verifier) or (service.verifier if service is not None else None)
    scope = service.task_of(message, given_under) if service is not None else message.task
    stored = store.review_queue.record_decision(
        item.id, decision.label, note=decision.note, completion=answer, features=features,
        feature_model=service.feature_model if features is not None and service is not None else None,
        verifier=given_under, task=scope)
    return RecordedReview(stored, item, message, features, scope, old)


def _queued(store: ChatStore, review_id: int) -> ReviewItem:
    """The queue entry ``review_id``, or one line saying there is none and where the ids are listed."""
    found = store.review_queue.review_items(review_id=review_id)
    if not found:
        raise ReviewRefused(f"no review-queue entry with id {review_id} in {store.path}; `mlx-sdm review list` "
                            "(or GET /v1/reviews) shows the ids", code="not_found", field="id")
    return found[0]
