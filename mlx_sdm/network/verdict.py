"""What a verdict is: the one value a turn's verdict travels as, :class:`DocumentVerdict`, from the pipeline
to every front end and the store, and the rule that gives it one of the states of :class:`VerdictStatus`
(docs/method.md, "Reading a verdict"). What a person reads of it is :mod:`mlx_sdm.network.verdict_words`.

    verified       admitted (p_lower >= alpha' = 0.95, Eq. 28) AND the predicted class is
                   "acceptable" (y_hat = 1)
    not_verified   the question is one the verifier judges, but it cannot vouch for the answer:
                   p_lower below alpha' ("below_threshold"), the rescaled output reverses the
                   prediction ("index_flipped"), the nearest training answer does not match (q = 0,
                   "out_of_distribution" with d > 0), the answer is unlike the task's answers (d = 0
                   on a question routed to a task), an empty answer, or admitted as a WRONG answer
                   (y_hat = 0, "predicted_unacceptable")
    out_of_scope   the question starts none of a routing verifier's task instructions
                   ("not_a_task": no estimator judgement is made), or (a verifier without a router)
                   d = 0: farther from what it was built on than its calibration examples
    no_verifier    no verifier judged the answer (none fits the model, or verification is off): the
                   verdict carries why (:meth:`DocumentVerdict.no_verifier`)

Each state carries its reason in the one value (``reason``, and ``why`` for no verifier): no caller passes a
verdict beside a reason. Every caller (``generate``, the chat, the store, the server, the review queue, export)
reads :attr:`DocumentVerdict.status`; nothing else re-derives the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Mapping

from mlx_sdm.calibration.constants import ALPHA_PRIME
from mlx_sdm.network.coverage import RouteKind, TaskRoute, VerifierCoverage, VerifierTask, read_coverage
from mlx_sdm.network.lean import Lean

if TYPE_CHECKING:  # no MLX import here: the UI and the store read verdicts without loading MLX
    from mlx_sdm.calibration.row_verdict import Verdict

#: The class index of an "acceptable" answer (docs/method.md § 14: label 1 = the document's answer is correct).
ACCEPTABLE = 1
#: Reason codes (the estimator's three, plus an admitted but unacceptable prediction).
REASON_OUT_OF_DISTRIBUTION = "out_of_distribution"
REASON_BELOW_THRESHOLD = "below_threshold"
REASON_INDEX_FLIPPED = "index_flipped"
REASON_PREDICTED_UNACCEPTABLE = "predicted_unacceptable"
#: No estimator judgement was made: the question starts none of a routing verifier's task instructions,
#: or the model's answer is empty.
REASON_NOT_A_TASK = "not_a_task"
REASON_EMPTY_ANSWER = "empty_answer"
#: No estimator judgement: the question router reads the message as having no checkable answer.
REASON_NO_CHECKABLE_ANSWER = "no_checkable_answer"
#: No estimator judgement: the member that judges this answer reads a second look, which was turned off.
REASON_SECOND_LOOK_OFF = "second_look_off"
#: No verifier judged the answer (none fits the model, or verification is off); ``DocumentVerdict.why`` says why.
REASON_NO_VERIFIER = "no_verifier"
VERDICT_REASONS = (REASON_OUT_OF_DISTRIBUTION, REASON_BELOW_THRESHOLD, REASON_INDEX_FLIPPED,
                   REASON_PREDICTED_UNACCEPTABLE, REASON_NOT_A_TASK, REASON_EMPTY_ANSWER, REASON_NO_CHECKABLE_ANSWER,
                   REASON_SECOND_LOOK_OFF, REASON_NO_VERIFIER)
#: Why there is no verifier, when nothing more is known (an older stored row, a caller that gave no reason).
NO_VERIFIER_WHY = "no verifier fits this model"
#: Why a judged answer is queued for review when its verifier admits no answer at all (Alg. 3 found no
#: region): the estimator's own reason code would name a detail that says nothing about this answer.
REASON_ADMITS_NOTHING = "admits_nothing"
#: The two reasons of an out-of-scope turn with no estimator judgement.
UNJUDGED_OUT_OF_SCOPE = (REASON_NOT_A_TASK, REASON_NO_CHECKABLE_ANSWER)
#: Every reason of a verdict with no estimator judgement.
UNJUDGED_REASONS = UNJUDGED_OUT_OF_SCOPE + (REASON_EMPTY_ANSWER, REASON_SECOND_LOOK_OFF, REASON_NO_VERIFIER)
#: Older stored spellings of "no verifier judged it".
LEGACY_NO_VERIFIER = ("unverifiable", "none")


class VerdictStatus(str, Enum):
    """The states a user sees, declared once (every layer and the store use this enum)."""

    VERIFIED = "verified"
    NOT_VERIFIED = "not_verified"
    OUT_OF_SCOPE = "out_of_scope"
    NO_VERIFIER = "no_verifier"  # no verifier judged the answer (none fits the model, or verification is off)

    @classmethod
    def read(cls, value: Any) -> "VerdictStatus | None":
        """A stored status word (``unverifiable`` and ``none`` are older spellings of ``no_verifier``)."""
        if isinstance(value, VerdictStatus):
            return value
        if value in LEGACY_NO_VERIFIER:
            return cls.NO_VERIFIER
        return next((s for s in cls if s.value == value), None)

    @property
    def words(self) -> str:
        """The state in plain words ("verified", "not verified", "out of scope")."""
        return self.value.replace("_", " ")


def unlike_built_on(verdict: "Verdict") -> bool:
    """d says the answer is unlike what the verifier was built on: Eq. 6's quantile is 0 (its nearest
    support point is farther than the calibration examples' nearest points)."""
    return float(verdict.d) <= 0.0


#: The task name of everyday open questions (network/tasks/registry.OPEN_TASK).
OPEN_QUESTIONS = "open_questions"


def status_of(verdict: "Verdict", *, task: str | None = None) -> VerdictStatus:
    """The rule: verified = admitted and y_hat = 1; out of scope = d = 0 on a question routed to no task or
    judged as an open question (then the question, not only the answer, is unlike what the verifier was
    built on); else not verified (q = 0 with d > 0 is a disagreeing nearest answer, not an unknown
    question; d = 0 on a task's question is an answer unlike the task's answers)."""
    routed = task is not None and task != OPEN_QUESTIONS
    if verdict.admitted and int(verdict.prediction) == ACCEPTABLE:
        return VerdictStatus.VERIFIED
    if verdict.reason == REASON_OUT_OF_DISTRIBUTION and not routed and unlike_built_on(verdict):
        return VerdictStatus.OUT_OF_SCOPE
    return VerdictStatus.NOT_VERIFIED


def reason_of(verdict: "Verdict") -> str | None:
    """None when verified; else one of :data:`VERDICT_REASONS`."""
    if verdict.admitted:
        return None if int(verdict.prediction) == ACCEPTABLE else REASON_PREDICTED_UNACCEPTABLE
    return verdict.reason or REASON_BELOW_THRESHOLD


@dataclass(frozen=True)
class DocumentVerdict:
    """A turn's verdict, the one value every layer passes: the estimator's :class:`Verdict` with its
    user-facing state, or (``verdict`` None) why no estimator judgement was made (``unjudged``: not one of a
    routing verifier's tasks, no checkable answer, an empty answer, the second look off, or no verifier, with
    ``why`` in words). ``alpha`` is the verifier's α′. Immutable."""

    verdict: "Verdict | None"
    alpha: float = ALPHA_PRIME
    coverage: VerifierCoverage = field(default_factory=VerifierCoverage)
    #: the verifier's task the question was routed to (TaskRoute.task); None = unrouted / single-task
    task: str | None = None
    unjudged: str | None = None  # one of UNJUDGED_REASONS when ``verdict`` is None
    route: TaskRoute | None = None  # how the question was routed (None: not recorded)
    #: the judging estimator found no high-probability region (Alg. 3 failed): it admits no answer at all
    admits_nothing: bool = False
    #: how much the judging verifier's lean toward its prediction is worth on this task (network/lean.py);
    #: None: never measured, so no lean is said
    lean: Lean | None = None
    why: str | None = None  # no verifier: why there is none, in words ("no verifier fits this model")

    @classmethod
    def no_verifier(cls, why: str | None = None) -> "DocumentVerdict":
        """The verdict of an answer no verifier judged, carrying why (none fits the model, verification is off)."""
        return cls(None, unjudged=REASON_NO_VERIFIER, why=why or NO_VERIFIER_WHY)

    @property
    def lean_informative(self) -> bool:
        """Its lean toward its own prediction is measured to beat the base rate (network/lean.py, the rule) and this
        answer has support for it: q >= 1, its nearest known answers were judged alike and rightly (Eq. 5). At q = 0
        the nearest known answer disagrees, and the lean is the rescaled output alone."""
        return (self.verdict is not None and self.lean is not None and self.lean.informative
                and self.lean.judged == int(self.verdict.prediction) and int(self.verdict.q) > 0)

    @property
    def lean_shown(self) -> bool:
        """Its lean is a word on the badge: :attr:`lean_informative`, and a person acting on it is right at least 4
        times in 5 (:attr:`Lean.shown`, network/lean.py). Otherwise the lean's numbers stay in the evidence."""
        return self.lean_informative and self.lean is not None and self.lean.shown

    @property
    def open_question(self) -> bool:
        """Judged as an everyday open question (d = 0 then means a question unlike those it was built on)."""
        return self.task == OPEN_QUESTIONS

    @property
    def routed_task(self) -> VerifierTask | None:
        """The covered task the question was routed to, when the verifier lists it."""
        if self.task is None:
            return None
        return next((t for t in self.coverage.tasks if t.name == self.task), VerifierTask(name=self.task))

    @property
    def status(self) -> VerdictStatus:
        if self.verdict is None and self.unjudged == REASON_NO_VERIFIER:
            return VerdictStatus.NO_VERIFIER
        if self.verdict is None:
            return VerdictStatus.OUT_OF_SCOPE if self.unjudged in UNJUDGED_OUT_OF_SCOPE else VerdictStatus.NOT_VERIFIED
        return status_of(self.verdict, task=self.task)

    @property
    def verified(self) -> bool:
        return self.status is VerdictStatus.VERIFIED

    @property
    def reason(self) -> str | None:
        return self.unjudged if self.verdict is None else reason_of(self.verdict)

    @property
    def judged(self) -> bool:
        """An estimator judged the answer (False: no verifier, or no judgement was made: ``unjudged`` says why)."""
        return self.verdict is not None

    def to_dict(self) -> dict[str, Any]:
        """The estimator's fields plus ``status``, ``verified``, ``reason`` (a reason code, also for an
        admitted wrong answer) and, with no verifier, ``why``: what the store keeps (the words a person reads are
        added at the front ends: ``verdict_words.verdict_json``)."""
        if self.status is VerdictStatus.NO_VERIFIER:
            return {"status": self.status.value, "verified": False, "reason": REASON_NO_VERIFIER, "why": self.why}
        numbers = self.verdict.to_dict() if self.verdict is not None else {
            "prediction": None, "p_lower": None, "admitted": False, "q": None, "d": None, "q_bin": None,
            "exemplars": [], "softmax": []}
        covers = [{"name": t.name, "description": t.description} for t in self.coverage.tasks]
        route = None if self.route is None else {
            "kind": None if self.route.kind is None else self.route.kind.value, "probability": self.route.probability,
            "system": self.route.system, "task": self.route.task, "instruction": self.route.instruction,
            "asked": self.route.asked}
        return {**numbers, "status": self.status.value, "verified": self.verified, "reason": self.reason,
                "task": self.task, "alpha": self.alpha,
                "covers": covers, "built_on": self.coverage.built_on, "route": route,
                "admits_nothing": self.admits_nothing, "lean": None if self.lean is None else self.lean.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None,
                  coverage: VerifierCoverage | None = None) -> "DocumentVerdict | None":
        """A stored verdict dict (``to_dict``, older rows included) back as the typed verdict; None for no dict."""
        if not data:
            return None
        if VerdictStatus.read(data.get("status")) is VerdictStatus.NO_VERIFIER or (
                data.get("status") is None and all(data.get(k) is None for k in ("admitted", "prediction", "reason"))):
            # (a session file's verifier field with nothing in it: no verifier judged that step)
            return cls.no_verifier(data.get("why") if isinstance(data.get("why"), str) else None)
        alpha = float(data.get("alpha") or ALPHA_PRIME)
        # the coverage of the verifier that judged it, as stored with the verdict (older rows: unknown)
        coverage = coverage or read_coverage({"tasks": data.get("covers") or [], "info": {"task": data.get("built_on")}})
        route = _route_from(data.get("route"))
        if data.get("prediction") is None:
            unjudged = data.get("reason") if data.get("reason") in UNJUDGED_REASONS else REASON_NOT_A_TASK
            return cls(None, alpha, coverage, data.get("task"), unjudged, route)
        from mlx_sdm.calibration.row_verdict import Exemplar, Verdict

        exemplars = [Exemplar(str(e.get("id", "")), int(e.get("label", -1)), int(e.get("prediction", -1)),
                              float(e.get("distance", 0.0)), e.get("text")) for e in data.get("exemplars") or []]
        reason = data.get("reason")
        verdict = Verdict(
            prediction=int(data["prediction"]), p_lower=data.get("p_lower"), admitted=bool(data.get("admitted")),
            q=int(data.get("q") or 0), d=float(data.get("d") or 0.0), q_bin=int(data.get("q_bin") or 0),
            reason=None if reason in (None, REASON_PREDICTED_UNACCEPTABLE) else reason, exemplars=exemplars,
            softmax=[float(x) for x in data.get("softmax") or []], d_nearest=float(data.get("d_nearest") or 0.0),
            q_tilde_lower=float(data.get("q_tilde_lower") or 0.0),
            region_alpha=_optional_float(data.get("region_alpha")),
            region_alpha_lower=_optional_float(data.get("region_alpha_lower")))
        return cls(verdict, alpha, coverage, data.get("task"), route=route, admits_nothing=bool(data.get("admits_nothing")),
                   lean=Lean.from_dict(data.get("lean")))


def _route_from(data: Any) -> TaskRoute | None:
    """A stored ``route`` (``to_dict``) back as the TaskRoute it was."""
    if not isinstance(data, Mapping):
        return None
    kind = next((k for k in RouteKind if k.value == data.get("kind")), None)
    probability = data.get("probability")
    text = {key: data.get(key) if isinstance(data.get(key), str) else None
            for key in ("system", "task", "instruction", "asked")}
    return TaskRoute(kind=kind, probability=None if probability is None else float(probability), **text)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)
