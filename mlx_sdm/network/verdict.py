"""What a verdict means to a user: ONE place that turns the estimator's :class:`Verdict` into one of
three states and one plain sentence of why.

    verified       admitted (p_lower >= alpha' = 0.95, Eq. 28) AND the predicted class is
                   "acceptable" (y_hat = 1)
    not_verified   the question is in scope, but the verifier cannot vouch for the answer:
                   p_lower below alpha' ("below_threshold"), the nearest training exemplar's
                   prediction disagrees ("index_flipped", q = 0 by a flip), or admitted as a WRONG
                   answer (y_hat = 0, "predicted_unacceptable")
    out_of_scope   out of distribution (d = 0 or q below the admitted floor with no similar support,
                   spec § 10): the question is unlike anything the verifier was built on. When the
                   question was routed to one of the verifier's own tasks (it starts that task's
                   instruction), the question IS in scope and it is the answer that is unlike the
                   built-on answers (e.g. prose where the task's JSON was expected): not_verified,
                   reason "out_of_distribution", and the sentence says so.

Every caller (``generate``, the chat, the store, the server, the review queue) reads
:attr:`DocumentVerdict.status` / :attr:`DocumentVerdict.verified`; nothing else re-derives the rule.

A verifier folder's ``verifier.json`` may list what it covers::

    "tasks": [{"name": "bbc_topic", "description": "...", "example_prompt": "..."}]

:func:`read_coverage` reads it tolerantly (absent or malformed entries = coverage unknown); the
out-of-scope sentence names those tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from mlx_sdm.calibration.constants import ALPHA_PRIME

if TYPE_CHECKING:  # no MLX import here: the UI and the store read verdicts without loading MLX
    from mlx_sdm.calibration.estimator import Verdict

#: The class index of an "acceptable" answer (spec § 14: label 1 = the document's answer is correct).
ACCEPTABLE = 1
#: Reason codes (the estimator's three, plus an admitted but unacceptable prediction).
REASON_OUT_OF_DISTRIBUTION = "out_of_distribution"
REASON_BELOW_THRESHOLD = "below_threshold"
REASON_INDEX_FLIPPED = "index_flipped"
REASON_PREDICTED_UNACCEPTABLE = "predicted_unacceptable"
VERDICT_REASONS = (REASON_OUT_OF_DISTRIBUTION, REASON_BELOW_THRESHOLD, REASON_INDEX_FLIPPED,
                   REASON_PREDICTED_UNACCEPTABLE)


class VerdictStatus(str, Enum):
    """The three states a user sees."""

    VERIFIED = "verified"
    NOT_VERIFIED = "not_verified"
    OUT_OF_SCOPE = "out_of_scope"

    @property
    def words(self) -> str:
        """The state in plain words ("verified", "not verified", "out of scope")."""
        return self.value.replace("_", " ")


@dataclass(frozen=True)
class VerifierTask:
    """One task a verifier was built on, as its ``verifier.json`` lists it."""

    name: str
    description: str = ""
    example_prompt: str = ""


@dataclass(frozen=True)
class TaskRoute:
    """Where a question goes under a verifier's feature recipe: the system prompt to answer it under
    (so its features match the build) and, for a verifier built on several tasks, the name of the
    task whose instruction the question starts with. ``task`` is None for a single-task verifier and
    for a question that starts no task's instruction. Review labels are kept per (verifier, task)."""

    system: str | None = None
    task: str | None = None


@dataclass(frozen=True)
class VerifierCoverage:
    """What a verifier covers: its tasks (empty = not recorded) and, failing that, the name of the
    one task its manifest mentions (``info.task``)."""

    tasks: tuple[VerifierTask, ...] = ()
    built_on: str | None = None

    @property
    def known(self) -> bool:
        return bool(self.tasks) or bool(self.built_on)

    def sentence(self) -> str:
        """One sentence: what questions this verifier can judge."""
        if self.tasks:
            names = "; ".join(t.description or t.name for t in self.tasks)
            return f"It covers: {names}."
        if self.built_on:
            return f"It was built on the task {self.built_on!r} only."
        return "Its verifier.json does not record which tasks it covers."


def _task_from(entry: Any) -> VerifierTask | None:
    if isinstance(entry, str) and entry.strip():
        return VerifierTask(name=entry.strip())
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"].strip():
        return None
    text = {key: entry.get(key) if isinstance(entry.get(key), str) else "" for key in ("description", "example_prompt")}
    return VerifierTask(name=entry["name"].strip(), **text)


def read_coverage(manifest: Mapping[str, Any] | None) -> VerifierCoverage:
    """Coverage from a parsed ``verifier.json`` (top-level ``tasks``, else ``info.tasks``); entries
    that are not ``{"name": str, ...}`` are skipped, never an error."""
    manifest = manifest or {}
    info = manifest.get("info") if isinstance(manifest.get("info"), Mapping) else {}
    raw = manifest.get("tasks", info.get("tasks"))
    tasks = tuple(t for t in (_task_from(e) for e in (raw if isinstance(raw, Sequence) and not isinstance(raw, str) else ()))
                  if t is not None)
    built_on = info.get("task") if isinstance(info.get("task"), str) else None
    return VerifierCoverage(tasks=tasks, built_on=built_on)


#: A training exemplar's label in words (spec § 14: label 1 = the document's answer is correct), the one
#: rule the server and the TUI's evidence view both say it by.
EXEMPLAR_LABEL_WORDS = {1: "a correct answer to a similar question", 0: "an incorrect answer to a similar question"}


def exemplar_label_words(label: Any) -> str:
    """A training exemplar's label as a reader says it (any other label: "an example labelled <label>")."""
    try:
        return EXEMPLAR_LABEL_WORDS[int(label)]
    except (TypeError, ValueError, KeyError):
        return f"an example labelled {label}"


def status_of(verdict: Verdict, *, routed: bool = False) -> VerdictStatus:
    """THE rule: verified = admitted and y_hat = 1; out of distribution = out of scope unless the question
    was ``routed`` to one of the verifier's tasks (then the answer, not the question, is unlike what it
    was built on: not verified); else not verified."""
    if verdict.admitted and int(verdict.prediction) == ACCEPTABLE:
        return VerdictStatus.VERIFIED
    if verdict.reason == REASON_OUT_OF_DISTRIBUTION and not routed:
        return VerdictStatus.OUT_OF_SCOPE
    return VerdictStatus.NOT_VERIFIED


def reason_of(verdict: Verdict) -> str | None:
    """None when verified; else one of :data:`VERDICT_REASONS`."""
    if verdict.admitted:
        return None if int(verdict.prediction) == ACCEPTABLE else REASON_PREDICTED_UNACCEPTABLE
    return verdict.reason or REASON_BELOW_THRESHOLD


def _why_answer_unlike(task: VerifierTask) -> str:
    """Out of distribution, but the question is one of the verifier's tasks: the answer is what differs."""
    what = task.description or task.name
    return (f"Not verified: the question is one this verifier covers ({what}), but the answer is unlike the "
            "answers it was built on (they give only the JSON the question asks for), so it cannot vouch for it. "
            "Ask again, or rephrase so the answer is just that JSON.")


def _why(reason: str | None, verdict: Verdict, alpha: float) -> str:
    if reason is None:
        return (f"Verified: the verifier vouches for this answer (calibrated lower probability "
                f"{verdict.p_lower:.3f}, at least {alpha:.2f} required), judged against answers to similar questions.")
    if reason == REASON_PREDICTED_UNACCEPTABLE:
        return ("Not verified: the verifier is confident this answer is wrong; it matches answers to similar "
                "questions that were incorrect.")
    if reason == REASON_INDEX_FLIPPED:
        return ("Not verified: the question is like ones the verifier knows, but the most similar known answers "
                "were judged differently from this one, so it cannot vouch for it.")
    if reason == REASON_OUT_OF_DISTRIBUTION:
        return "Out of scope: this question is unlike anything the verifier was built on, so it makes no judgement."
    return ("Not verified: the question is like ones the verifier knows, but its confidence in this answer is "
            f"below the {alpha:.2f} it needs to vouch for it.")


@dataclass
class DocumentVerdict:
    """The estimator's :class:`Verdict` with its user-facing state. ``alpha`` is the verifier's α′."""

    verdict: "Verdict"
    alpha: float = ALPHA_PRIME
    coverage: VerifierCoverage = field(default_factory=VerifierCoverage)
    #: the verifier's task the question was routed to (TaskRoute.task); None = unrouted / single-task
    task: str | None = None

    @property
    def routed_task(self) -> VerifierTask | None:
        """The covered task the question was routed to, when the verifier lists it."""
        if self.task is None:
            return None
        return next((t for t in self.coverage.tasks if t.name == self.task), VerifierTask(name=self.task))

    @property
    def status(self) -> VerdictStatus:
        return status_of(self.verdict, routed=self.task is not None)

    @property
    def verified(self) -> bool:
        return self.status is VerdictStatus.VERIFIED

    @property
    def reason(self) -> str | None:
        return reason_of(self.verdict)

    def explanation(self, covers: VerifierCoverage | None = None) -> str:
        """One plain sentence of why; out of scope adds what the verifier covers instead."""
        routed = self.routed_task
        if self.reason == REASON_OUT_OF_DISTRIBUTION and routed is not None:
            return _why_answer_unlike(routed)
        text = _why(self.reason, self.verdict, self.alpha)
        if self.status is VerdictStatus.OUT_OF_SCOPE:
            text += " " + (covers or self.coverage).sentence()
        return text

    def to_dict(self) -> dict[str, Any]:
        """The estimator's fields plus ``status``, ``verified``, ``reason`` (a reason code, also for an
        admitted wrong answer) and ``explanation``: what ``generate --json`` prints and the store keeps."""
        return {**self.verdict.to_dict(), "status": self.status.value, "verified": self.verified,
                "reason": self.reason, "explanation": self.explanation(), "task": self.task}


def status_from_dict(data: Mapping[str, Any] | None) -> VerdictStatus | None:
    """The state of a stored verdict dict (older rows carry no ``status``: derived by the same rule)."""
    if not data:
        return None
    if data.get("status") in {s.value for s in VerdictStatus}:
        return VerdictStatus(data["status"])
    if data.get("admitted") and int(data.get("prediction", -1)) == ACCEPTABLE:
        return VerdictStatus.VERIFIED
    if data.get("reason") == REASON_OUT_OF_DISTRIBUTION and data.get("task") is None:
        return VerdictStatus.OUT_OF_SCOPE
    return VerdictStatus.NOT_VERIFIED
