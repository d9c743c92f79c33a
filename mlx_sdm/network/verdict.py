"""What a verdict means to a user: one place that turns the estimator's :class:`Verdict` into one of
the states of :class:`VerdictStatus` and, in :func:`verdict_words`, its badge and one plain sentence,
each true of the numbers behind it (docs/method.md, "Reading a verdict").

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
    no_verifier    no verifier judged the answer (none fits the model, or verification is off)

Every caller (``generate``, the chat, the store, the server, the review queue, export) reads
:attr:`DocumentVerdict.status` and :func:`verdict_words`; nothing else re-derives the rule or the words.
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
VERDICT_REASONS = (REASON_OUT_OF_DISTRIBUTION, REASON_BELOW_THRESHOLD, REASON_INDEX_FLIPPED,
                   REASON_PREDICTED_UNACCEPTABLE, REASON_NOT_A_TASK, REASON_EMPTY_ANSWER, REASON_NO_CHECKABLE_ANSWER,
                   REASON_SECOND_LOOK_OFF)
#: Why a judged answer is queued for review when its verifier admits no answer at all (Alg. 3 found no
#: region): the estimator's own reason code would name a detail that says nothing about this answer.
REASON_ADMITS_NOTHING = "admits_nothing"
#: The two reasons of an out-of-scope turn with no estimator judgement.
UNJUDGED_OUT_OF_SCOPE = (REASON_NOT_A_TASK, REASON_NO_CHECKABLE_ANSWER)
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


#: A training exemplar's label in words (docs/method.md § 14: label 1 = the document's answer is correct), the one
#: rule the server and the TUI's evidence view both say it by.
EXEMPLAR_LABEL_WORDS = {1: "a correct answer to a similar question", 0: "an incorrect answer to a similar question"}


def exemplar_label_words(label: Any) -> str:
    """A training exemplar's label as a reader says it (any other label: "an example labelled <label>")."""
    try:
        return EXEMPLAR_LABEL_WORDS[int(label)]
    except (TypeError, ValueError, KeyError):
        return f"an example labelled {label}"


def _unlike(verdict: "Verdict") -> bool:
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
    if verdict.reason == REASON_OUT_OF_DISTRIBUTION and not routed and _unlike(verdict):
        return VerdictStatus.OUT_OF_SCOPE
    return VerdictStatus.NOT_VERIFIED


def reason_of(verdict: "Verdict") -> str | None:
    """None when verified; else one of :data:`VERDICT_REASONS`."""
    if verdict.admitted:
        return None if int(verdict.prediction) == ACCEPTABLE else REASON_PREDICTED_UNACCEPTABLE
    return verdict.reason or REASON_BELOW_THRESHOLD


@dataclass
class DocumentVerdict:
    """A turn's verdict: the estimator's :class:`Verdict` with its user-facing state, or (``verdict``
    None) why no estimator judgement was made (``unjudged``: not one of a routing verifier's tasks, or
    an empty answer). ``alpha`` is the verifier's α′."""

    verdict: "Verdict | None"
    alpha: float = ALPHA_PRIME
    coverage: VerifierCoverage = field(default_factory=VerifierCoverage)
    #: the verifier's task the question was routed to (TaskRoute.task); None = unrouted / single-task
    task: str | None = None
    unjudged: str | None = None  # REASON_NOT_A_TASK | REASON_NO_CHECKABLE_ANSWER | REASON_EMPTY_ANSWER | REASON_SECOND_LOOK_OFF
    route: TaskRoute | None = None  # how the question was routed (None: not recorded)
    #: the judging estimator found no high-probability region (Alg. 3 failed): it admits no answer at all
    admits_nothing: bool = False
    #: how much the judging verifier's lean toward its prediction is worth on this task (network/lean.py);
    #: None: never measured, so no lean is said
    lean: Lean | None = None

    @property
    def lean_informative(self) -> bool:
        """Its lean toward its own prediction is measured to beat the base rate (network/lean.py, the rule) and this
        answer has support for it: q >= 1, its nearest known answers were judged alike and rightly (Eq. 5). At q = 0
        the nearest known answer disagrees, and the lean is the rescaled output alone."""
        return (self.verdict is not None and self.lean is not None and self.lean.informative
                and self.lean.judged == int(self.verdict.prediction) and int(self.verdict.q) > 0)

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
        if self.verdict is None:
            return VerdictStatus.OUT_OF_SCOPE if self.unjudged in UNJUDGED_OUT_OF_SCOPE else VerdictStatus.NOT_VERIFIED
        return status_of(self.verdict, task=self.task)

    @property
    def verified(self) -> bool:
        return self.status is VerdictStatus.VERIFIED

    @property
    def reason(self) -> str | None:
        return self.unjudged if self.verdict is None else reason_of(self.verdict)

    def explanation(self) -> str:
        """The one plain sentence of :func:`verdict_words`."""
        return verdict_words(self).sentence

    def to_dict(self) -> dict[str, Any]:
        """The estimator's fields plus ``status``, ``verified``, ``reason`` (a reason code, also for an
        admitted wrong answer), ``explanation`` and ``badge``: what ``generate --json`` prints and the store keeps."""
        numbers = self.verdict.to_dict() if self.verdict is not None else {
            "prediction": None, "p_lower": None, "admitted": False, "q": None, "d": None, "q_bin": None,
            "exemplars": [], "softmax": []}
        words = verdict_words(self)
        covers = [{"name": t.name, "description": t.description} for t in self.coverage.tasks]
        route = None if self.route is None else {
            "kind": None if self.route.kind is None else self.route.kind.value, "probability": self.route.probability,
            "system": self.route.system, "task": self.route.task, "instruction": self.route.instruction,
            "asked": self.route.asked}
        return {**numbers, "status": self.status.value, "verified": self.verified, "reason": self.reason,
                "explanation": words.sentence, "badge": words.badge, "task": self.task, "alpha": self.alpha,
                "covers": covers, "built_on": self.coverage.built_on, "route": route,
                "admits_nothing": self.admits_nothing, "lean": None if self.lean is None else self.lean.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None,
                  coverage: VerifierCoverage | None = None) -> "DocumentVerdict | None":
        """A stored verdict dict (``to_dict``, older rows included) back as the typed verdict; None for none."""
        if not data or VerdictStatus.read(data.get("status")) is VerdictStatus.NO_VERIFIER:
            return None
        alpha = float(data.get("alpha") or ALPHA_PRIME)
        # the coverage of the verifier that judged it, as stored with the verdict (older rows: unknown)
        coverage = coverage or read_coverage({"tasks": data.get("covers") or [], "info": {"task": data.get("built_on")}})
        route = _route_from(data.get("route"))
        if data.get("prediction") is None:
            unjudged = data.get("reason") if data.get("reason") in UNJUDGED_OUT_OF_SCOPE + (
                REASON_EMPTY_ANSWER, REASON_SECOND_LOOK_OFF) else \
                REASON_NOT_A_TASK
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


def status_from_dict(data: Mapping[str, Any] | None) -> VerdictStatus | None:
    """The state of a stored verdict dict (older rows carry no ``status``: derived by the same rule);
    None for no dict."""
    if not data:
        return None
    stored = VerdictStatus.read(data.get("status"))
    if stored is not None:
        return stored
    judged = DocumentVerdict.from_dict(data)
    return judged.status if judged is not None else VerdictStatus.NO_VERIFIER



# -- the words ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VerdictWords:
    """What a person reads about a verdict: its state, the one-line badge and one plain sentence."""

    status: VerdictStatus
    badge: str  # e.g. "✔ verified · p_lower 0.973"
    sentence: str  # opens with the state in words ("Not verified: ...")

    @property
    def short(self) -> str:
        """The badge without its mark: "verified · p_lower 0.973"."""
        return self.badge.split(" ", 1)[1] if " " in self.badge else self.badge


def _answer_words(prediction: int) -> str:
    return "right" if int(prediction) == ACCEPTABLE else "wrong"


def _nearest_disagrees(verdict: "Verdict", say_lean: bool) -> str:
    """q = 0 with d > 0 (Eq. 5): the nearest training answer is not a correctly judged answer with this
    prediction; say which, from the nearest exemplar when it was kept (this answer's own lean only when it is
    measured to mean something)."""
    mine = f"; this one is judged {_answer_words(verdict.prediction)}" if say_lean else ""
    if verdict.exemplars:
        nearest = verdict.exemplars[0]
        if int(nearest.prediction) != int(verdict.prediction):
            return (f"the most similar known answer was judged differently (it was {exemplar_label_words(nearest.label)}, "
                    f"judged {_answer_words(nearest.prediction)}{mine})")
        if int(nearest.label) != int(nearest.prediction):
            return (f"the verifier misjudged the most similar known answer (it was {exemplar_label_words(nearest.label)}, "
                    f"judged {_answer_words(nearest.prediction)})")
    return "the most similar known answer does not match the verifier's judgement of this one (q = 0)"


#: What the words say instead of a lean that is no better than the base rate (network/lean.py).
NO_LEAN = "on questions like this its lean toward right or wrong is no better than the base rate, so it cannot tell"


def _no_lean_words(dv: DocumentVerdict) -> str:
    """Why no lean is said: never measured, measured but without support in this answer's nearest known answers
    (q = 0), or measured and not above the base rate on every split."""
    lean = dv.lean
    if lean is None:
        return "it cannot tell whether this answer is right (how much its lean means was never measured)"
    if lean.informative and dv.verdict is not None and lean.judged == int(dv.verdict.prediction):
        return ("it cannot tell whether this answer is right: the most similar known answer does not support its "
                "lean (q = 0)")
    side = "right" if lean.judged == 1 else "wrong"
    precision = "n/a" if lean.precision is None else f"{100 * lean.precision:.0f} %"
    return (f"{NO_LEAN}: {precision} of the {lean.leaned} held-out answers it leaned {side} on were {side}, against "
            f"{100 * lean.base_rate:.0f} % of all answers, a margin that does not hold at 95 % confidence on every "
            f"held-out and shifted split")


def _judged_words(dv: DocumentVerdict, alpha: float) -> tuple[str, str]:
    """(badge reason, sentence) for a verdict the estimator made; each clause is read off its numbers, and a lean is
    said only where it is measured to beat the base rate (:attr:`DocumentVerdict.lean_informative`)."""
    v, reason, lean = dv.verdict, dv.reason, dv.lean_informative
    assert v is not None
    if reason is None:
        return (f"p_lower {v.p_lower:.3f}",
                f"Verified: calibrated lower probability {v.p_lower:.3f} that this answer is right (at least "
                f"{alpha:.2f} required); the {v.q} most similar known answers were all correct and judged so.")
    if reason == REASON_PREDICTED_UNACCEPTABLE:
        return ("likely wrong",
                f"Not verified: the verifier is confident this answer is wrong (calibrated lower probability "
                f"{v.p_lower:.3f} that it is wrong); the {v.q} most similar known answers were all incorrect.")
    if reason == REASON_OUT_OF_DISTRIBUTION and _unlike(v):
        far = (f"it is farther from the examples the verifier was built on than its calibration examples are "
               f"(distance quantile d = {v.d:.3f})")
        routed = dv.routed_task
        if routed is not None:
            return ("answer unlike the task's answers",
                    f"Not verified: the question is one this verifier covers ({routed.description or routed.name}), "
                    f"but the answer is unlike the answers it was built on: {far}, so it cannot vouch for it.")
        return ("unlike what it was built on",
                f"Out of scope: {far}, so it makes no judgement. {dv.coverage.sentence()}")
    if reason == REASON_OUT_OF_DISTRIBUTION:
        return ("nearest known answer disagrees", f"Not verified: {_nearest_disagrees(v, lean)}, so it cannot vouch for it.")
    if reason == REASON_INDEX_FLIPPED:
        if not lean:
            return ("cannot tell", f"Not verified: weighed by similarity (q = {v.q}) and distance (d = {v.d:.3f}), its "
                                   f"calibrated output does not support its first reading of this answer; {_no_lean_words(dv)}.")
        return ("its evidence reverses its prediction",
                f"Not verified: weighed by similarity (q = {v.q}) and distance (d = {v.d:.3f}), the verifier's "
                f"calibrated output no longer favours its own prediction that the answer is "
                f"{_answer_words(v.prediction)}, so it cannot vouch for it.")
    if not lean:
        return ("cannot tell", f"Not verified: its calibrated confidence (q = {v.q}, d = {v.d:.3f}) does not reach the "
                               f"{alpha:.2f} it needs to vouch for this answer, and {_no_lean_words(dv)}.")
    return (f"leans {_answer_words(v.prediction)}",
            f"Not verified: its calibrated confidence (q = {v.q}, d = {v.d:.3f}) does not reach the {alpha:.2f} it "
            f"needs to vouch for this answer, but it leans toward it being {_answer_words(v.prediction)}, and that "
            f"lean is measured: {dv.lean.words()}.")


def _region_words(v: "Verdict", alpha: float) -> str:
    """The nested kind's fallback (docs/estimators.md): where α′ is not met but the answer falls in a
    region of the α ladder by its DKW-lower estimate, that region's promise, which is prediction-
    conditional: among the answers of that region the verifier judges as it judged this one, at least
    a share α are so. Empty for the other kinds and for answers in no region."""
    region = v.region_alpha_lower
    if region is None or not 0.0 < region < alpha:
        return ""
    judged = _answer_words(v.prediction)
    return (f" It falls in a region where at least {region * 100:.0f} % of the answers judged {judged} "
            f"are {judged} (nested region α {region:.2f}, lower estimate), short of the {alpha:.2f} needed to vouch.")


def _admits_nothing_words(dv: DocumentVerdict, alpha: float) -> tuple[str, str]:
    """A verifier whose calibration found no high-probability region (Alg. 3) vouches for no answer: say that first;
    then which way it leans and on what (the q most similar known answers, Eq. 5) only where that lean is measured
    to beat the base rate, else that it cannot tell."""
    v = dv.verdict
    assert v is not None
    nothing = (f"on this model the verifier cannot vouch for any answer (in calibration no group of similar answers "
               f"was at least {alpha * 100:.0f} % right)")
    if not dv.lean_informative:
        return ("cannot tell on this model", f"Not verified: {nothing}, and {_no_lean_words(dv)}.")
    lean = _answer_words(v.prediction)
    known = "correct" if int(v.prediction) == ACCEPTABLE else "incorrect"
    evidence = f"; the {v.q} most similar known answers were {known} and judged so"  # q >= 1: lean_informative
    return (f"leans {lean}", f"Not verified: {nothing}. It leans toward this answer being {lean}, and that lean is "
                             f"measured: {dv.lean.words()}{evidence}.")


def _probability(verdict: DocumentVerdict) -> str:
    p = None if verdict.route is None else verdict.route.probability
    return "" if p is None else f", probability {p:.2f}"


def _route_words(verdict: DocumentVerdict) -> str:
    """How a judged question was routed, when not by its task instruction: asked in a person's own words
    (the router's reading) or an everyday open question."""
    route = verdict.route
    if route is None or route.probability is None:
        return ""
    if route.how is RouteKind.MEANING and verdict.routed_task is not None:
        task = verdict.routed_task
        asked = f", so the model was asked the task's own instruction, “{_clip(route.instruction)}”, with your text" \
            if route.instruction else ""
        return (f" The question router read this as the task {task.description or task.name!r} asked in your own words "
                f"(probability {route.probability:.2f}){asked}.")
    if route.how is RouteKind.OPEN_QUESTION:
        read_with = f", read with the question before it (“{_clip(route.asked)}”)" if route.asked else ""
        return (f" Judged as an everyday question with a short answer{read_with} (question router probability "
                f"{route.probability:.2f}).")
    return ""


def _clip(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def verdict_words(verdict: DocumentVerdict | None, *, no_verifier_reason: str | None = None) -> VerdictWords:
    """The words of a verdict (None: no verifier judged it, ``no_verifier_reason`` says why). The chat,
    ``generate``, plain chat, the server and export all show these and nothing else."""
    if verdict is None:
        why = no_verifier_reason or "no verifier fits this model"
        return VerdictWords(VerdictStatus.NO_VERIFIER, f"· no verifier · {why}", f"No verifier: {why}.")
    status = verdict.status
    if verdict.verdict is None and verdict.unjudged == REASON_EMPTY_ANSWER:
        return VerdictWords(status, "✘ not verified · empty answer",
                            "Not verified: the model produced an empty answer; there is nothing to verify.")
    if verdict.verdict is None and verdict.unjudged == REASON_SECOND_LOOK_OFF:
        return VerdictWords(status, "? not verified · second look off",
                            "Not verified: this verifier judges an everyday answer from more answers the model draws to "
                            "the same question (the second look), which is turned off, so it makes no judgement; "
                            "without --no-second-look it would.")
    if verdict.verdict is None and verdict.unjudged == REASON_NO_CHECKABLE_ANSWER:
        return VerdictWords(status, "○ out of scope · no checkable answer",
                            "Out of scope: this message has no short answer that can be checked (the question router "
                            f"reads it as a greeting, a request for writing, advice or a how-to{_probability(verdict)}), "
                            f"so the verifier makes no judgement. {verdict.coverage.sentence()}")
    if verdict.verdict is None:
        routed = verdict.route is not None and verdict.route.probability is not None
        why = ("the question router reads it as none of the kinds of question the verifier covers" if routed else
               "this question starts none of the task instructions the verifier was built on")
        return VerdictWords(status, "○ out of scope · not one of the verifier's tasks",
                            f"Out of scope: {why}, so it makes no judgement. {verdict.coverage.sentence()}")
    if verdict.admits_nothing and status is VerdictStatus.NOT_VERIFIED:
        short, sentence = _admits_nothing_words(verdict, verdict.alpha)
    else:
        short, sentence = _judged_words(verdict, verdict.alpha)
    sentence += _route_words(verdict)
    if status is VerdictStatus.NOT_VERIFIED:
        region = _region_words(verdict.verdict, verdict.alpha)
        if region:
            short, sentence = f"{short} · region α {verdict.verdict.region_alpha_lower:.2f}", sentence + region
    return VerdictWords(status, f"{_mark(verdict, status)} {status.words} · {short}", sentence)


#: The badge's marks: vouched for, likely wrong (the numbers say so), cannot tell, out of scope.
MARK_VERIFIED, MARK_WRONG, MARK_CANNOT_TELL, MARK_OUT_OF_SCOPE = "✔", "✘", "?", "○"


def _mark(verdict: DocumentVerdict, status: VerdictStatus) -> str:
    """✘ only where the calibrated numbers call the answer wrong (admitted as wrong, or a lean toward wrong measured
    to beat the base rate) or the answer is unlike the task's answers; "?" where the verifier cannot tell."""
    if status is VerdictStatus.VERIFIED:
        return MARK_VERIFIED
    if status is VerdictStatus.OUT_OF_SCOPE:
        return MARK_OUT_OF_SCOPE
    v = verdict.verdict
    if v is None or verdict.reason == REASON_PREDICTED_UNACCEPTABLE:
        return MARK_WRONG  # an empty answer, or admitted as wrong
    if verdict.reason == REASON_OUT_OF_DISTRIBUTION and _unlike(v):
        return MARK_WRONG  # a task's question answered unlike any of the task's answers
    if verdict.lean_informative and int(v.prediction) != ACCEPTABLE:
        return MARK_WRONG
    return MARK_CANNOT_TELL
