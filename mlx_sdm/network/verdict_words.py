"""What a person reads of a verdict: the one presentation module of :class:`DocumentVerdict`. Every front end
says a verdict through it and adds no words of its own. Each verdict has three things to read:

- the **badge** (the TUI's line under an answer): a mark, the state and a few words of why, no numbers;
- the **line** (:attr:`VerdictWords.line`): one short sentence, at most about 20 words, free of the estimator's terms,
  saying what a person can do with the answer. It is the same everywhere a verdict is said in one line: the TUI
  evidence's first line, ``chat --plain`` (:class:`TranscriptVerdicts`), the Markdown export (:func:`verdict_line`),
  ``generate`` (:func:`verdict_report`), the server's ``verdict.reason`` (:func:`verdict_words`, :data:`STOPPED`);
- the **sentence** (:attr:`VerdictWords.sentence`): the evidence, why in full with its numbers (q, d, p_lower, the
  lean's measurement, the router's reading): behind the evidence view (``ctrl+b``/``v``), ``generate --explain``, and
  the JSON's ``explanation``.

A lean ("leans right", "leans wrong") is a word on the badge and in the line only where
:attr:`DocumentVerdict.lean_shown` (network/lean.py: right at least 4 times in 5); a lean that only beats the base
rate is said in the sentence alone. Each sentence is true of the numbers behind it (docs/method.md, "Reading a
verdict"; tests/test_verdict_words.py checks it over generated verdicts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlx_sdm.network.coverage import RouteKind
from mlx_sdm.network.evidence import evidence_of, exemplar_label_words
from mlx_sdm.network.verdict import (
    ACCEPTABLE,
    REASON_EMPTY_ANSWER,
    REASON_INDEX_FLIPPED,
    REASON_NO_CHECKABLE_ANSWER,
    REASON_OUT_OF_DISTRIBUTION,
    REASON_PREDICTED_UNACCEPTABLE,
    REASON_SECOND_LOOK_OFF,
    DocumentVerdict,
    VerdictStatus,
    unlike_built_on,
)

if TYPE_CHECKING:
    from mlx_sdm.calibration.row_verdict import Verdict


@dataclass(frozen=True)
class VerdictWords:
    """What a person reads about a verdict: its state, the badge, the one short line and the evidence's sentence."""

    status: VerdictStatus
    badge: str  # e.g. "✔ verified", "? not verified · cannot tell": no numbers
    line: str  # the one short line (<= about 20 words, no jargon): "Verified: answers like this are right ..."
    sentence: str  # the evidence: why in full, with the numbers; opens with the state in words ("Not verified: ...")
    #: the line says something of the verifier on this model, the same for every answer of its kind (no verifier,
    #: none of its tasks, no checkable answer, a verifier that admits nothing, the second look off), not of this
    #: answer: a transcript says it once and then shows the badge (:class:`TranscriptVerdicts`)
    standing: bool = False

    @property
    def short(self) -> str:
        """The badge without its mark: "verified", "not verified · cannot tell"."""
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
        return ("",
                f"Verified: calibrated lower probability {v.p_lower:.3f} that this answer is right (at least "
                f"{alpha:.2f} required); the {v.q} most similar known answers were all correct and judged so.")
    if reason == REASON_PREDICTED_UNACCEPTABLE:
        return ("likely wrong",
                f"Not verified: the verifier is confident this answer is wrong (calibrated lower probability "
                f"{v.p_lower:.3f} that it is wrong); the {v.q} most similar known answers were all incorrect.")
    if reason == REASON_OUT_OF_DISTRIBUTION and unlike_built_on(v):
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
    return (_lean_badge(dv),
            f"Not verified: its calibrated confidence (q = {v.q}, d = {v.d:.3f}) does not reach the {alpha:.2f} it "
            f"needs to vouch for this answer, but it leans toward it being {_answer_words(v.prediction)}, and that "
            f"lean is measured: {dv.lean.words()}.")


def _lean_badge(dv: DocumentVerdict) -> str:
    """The badge's words for a lean the sentence says: the lean itself only where it is a word on the badge
    (:attr:`DocumentVerdict.lean_shown`: right at least 4 times in 5), else "cannot tell"."""
    assert dv.verdict is not None
    return f"leans {_answer_words(dv.verdict.prediction)}" if dv.lean_shown else "cannot tell"


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
    return (_lean_badge(dv), f"Not verified: {nothing}. It leans toward this answer being {lean}, and that lean is "
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


#: The short lines of the verdicts no estimator made (:attr:`VerdictWords.line`).
LINE_EMPTY = "Not verified: the model gave an empty answer."
LINE_SECOND_LOOK_OFF = "Not verified: checking this needs the second look, which --no-second-look turned off."
LINE_NO_CHECKABLE_ANSWER = "Out of scope: this message has no short answer that can be checked, so nothing was checked."
LINE_NOT_A_TASK = "Out of scope: the verifier does not check this kind of question, so nothing was checked."
#: The short line of a verifier whose calibration admits no answer at all (the same for each of its answers).
LINE_ADMITS_NOTHING = "Not verified: on this model the verifier cannot check answers like this; check it yourself."
#: The short line of an answer the verifier cannot tell about: what a person can do with it.
LINE_CANNOT_TELL = "Not verified: the verifier cannot tell whether this answer is right; check it yourself."


def verdict_words(verdict: DocumentVerdict) -> VerdictWords:
    """The words of a verdict: its badge, its short line and the evidence's sentence. The chat, ``generate``, plain
    chat, the server and export all show these and nothing else."""
    status = verdict.status
    if status is VerdictStatus.NO_VERIFIER:
        return VerdictWords(status, f"· no verifier · {verdict.why}", f"No verifier: {verdict.why}; nothing was checked.",
                            f"No verifier: {verdict.why}.", standing=True)
    if verdict.verdict is None and verdict.unjudged == REASON_EMPTY_ANSWER:
        return VerdictWords(status, "✘ not verified · empty answer", LINE_EMPTY,
                            "Not verified: the model produced an empty answer; there is nothing to verify.")
    if verdict.verdict is None and verdict.unjudged == REASON_SECOND_LOOK_OFF:
        return VerdictWords(status, "? not verified · second look off", LINE_SECOND_LOOK_OFF,
                            "Not verified: this verifier judges an everyday answer from more answers the model draws to "
                            "the same question (the second look), which is turned off, so it makes no judgement; "
                            "without --no-second-look it would.", standing=True)
    if verdict.verdict is None and verdict.unjudged == REASON_NO_CHECKABLE_ANSWER:
        return VerdictWords(status, "○ out of scope · no checkable answer", LINE_NO_CHECKABLE_ANSWER,
                            "Out of scope: this message has no short answer that can be checked (the question router "
                            f"reads it as a greeting, a request for writing, advice or a how-to{_probability(verdict)}), "
                            f"so the verifier makes no judgement. {verdict.coverage.sentence()}", standing=True)
    if verdict.verdict is None:
        routed = verdict.route is not None and verdict.route.probability is not None
        why = ("the question router reads it as none of the kinds of question the verifier covers" if routed else
               "this question starts none of the task instructions the verifier was built on")
        return VerdictWords(status, "○ out of scope · not one of the verifier's tasks", LINE_NOT_A_TASK,
                            f"Out of scope: {why}, so it makes no judgement. {verdict.coverage.sentence()}",
                            standing=True)
    if verdict.admits_nothing and status is VerdictStatus.NOT_VERIFIED:
        short, sentence = _admits_nothing_words(verdict, verdict.alpha)
    else:
        short, sentence = _judged_words(verdict, verdict.alpha)
    sentence += _route_words(verdict)
    if status is VerdictStatus.NOT_VERIFIED:
        sentence += _region_words(verdict.verdict, verdict.alpha)
    badge = f"{_mark(verdict, status)} {status.words}" + (f" · {short}" if short else "")
    line = _judged_line(verdict, status)
    return VerdictWords(status, badge, line, sentence, standing=line == LINE_ADMITS_NOTHING)


def _judged_line(dv: DocumentVerdict, status: VerdictStatus) -> str:
    """The short line of a verdict the estimator made: what a person can do with the answer, read off the same
    state and reason as the sentence, with no numbers but the promise it keeps (α′, the 4-in-5 of a shown lean)."""
    v = dv.verdict
    assert v is not None
    if status is VerdictStatus.VERIFIED:
        return f"Verified: answers like this are right at least {100 * dv.alpha:.0f} % of the time."
    if status is VerdictStatus.OUT_OF_SCOPE:
        return "Out of scope: this is unlike anything the verifier was built on, so nothing was checked."
    if dv.reason == REASON_PREDICTED_UNACCEPTABLE:
        return "Likely wrong: the verifier is confident this answer is wrong; do not rely on it."
    if dv.reason == REASON_OUT_OF_DISTRIBUTION and unlike_built_on(v):
        return "Not verified: this answer is unlike the answers the verifier knows for this task; check it yourself."
    if dv.lean_shown and int(v.prediction) == ACCEPTABLE:
        return "Not verified, but likely right: when the verifier leans right like this, it is right at least 4 times in 5."
    if dv.lean_shown:
        return "Likely wrong: when the verifier leans wrong like this, it is right at least 4 times in 5; check it."
    if dv.admits_nothing:
        return LINE_ADMITS_NOTHING
    return LINE_CANNOT_TELL


#: The badge's marks: vouched for, likely wrong (the numbers say so), cannot tell, out of scope.
MARK_VERIFIED, MARK_WRONG, MARK_CANNOT_TELL, MARK_OUT_OF_SCOPE = "✔", "✘", "?", "○"


def _mark(verdict: DocumentVerdict, status: VerdictStatus) -> str:
    """✘ only where the calibrated numbers call the answer wrong (admitted as wrong, or a lean toward wrong that is a
    word on the badge: :attr:`DocumentVerdict.lean_shown`) or the answer is unlike the task's answers; "?" where the
    verifier cannot tell."""
    if status is VerdictStatus.VERIFIED:
        return MARK_VERIFIED
    if status is VerdictStatus.OUT_OF_SCOPE:
        return MARK_OUT_OF_SCOPE
    v = verdict.verdict
    if v is None or verdict.reason == REASON_PREDICTED_UNACCEPTABLE:
        return MARK_WRONG  # an empty answer, or admitted as wrong
    if verdict.reason == REASON_OUT_OF_DISTRIBUTION and unlike_built_on(v):
        return MARK_WRONG  # a task's question answered unlike any of the task's answers
    if verdict.lean_shown and int(v.prediction) != ACCEPTABLE:
        return MARK_WRONG
    return MARK_CANNOT_TELL


def verdict_line(verdict: DocumentVerdict | None) -> str:
    """The verdict in one line, ``verdict: `` and its short line (:attr:`VerdictWords.line`): what the plain chat prints
    under an answer and the Markdown export writes (None: the turn made no verdict). The numbers are not on it: they
    are the evidence's (:func:`verdict_report` with ``explain``, :func:`verdict_json`, the export's exemplars)."""
    if verdict is None:
        return "verdict: none"
    return f"verdict: {verdict_words(verdict).line}"


class TranscriptVerdicts:
    """The verdict lines of one transcript (a plain chat session), in order: each answer's :func:`verdict_line`,
    except that a standing line (:attr:`VerdictWords.standing`: true of every answer of its kind on this model, such
    as "the verifier cannot check answers like this") is said in full once and then as its state, "Not verified (as
    above)", so a line that carries no news about this answer does not repeat over a session."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    def line(self, verdict: DocumentVerdict | None) -> str:
        if verdict is None:
            return verdict_line(None)
        words = verdict_words(verdict)
        if words.standing and words.line in self._said:
            return f"verdict: {words.line.partition(':')[0]} (as above)"
        self._said.add(words.line)
        return f"verdict: {words.line}"


def exemplar_lines(verdict: DocumentVerdict | None) -> list[str]:
    """The nearest training exemplars behind a verdict, one Markdown list item each (the export's evidence)."""
    judged = verdict.verdict if verdict is not None else None
    out = []
    for e in judged.exemplars if judged is not None else []:
        text = (e.text or "").replace("\n", " ")
        out.append(f"- {exemplar_label_words(e.label)} (judged {_answer_words(e.prediction)}; distance "
                   f"{_num(e.distance)}, id `{e.id}`): {text}")
    return out


def verdict_report(verdict: DocumentVerdict, *, explain: bool = False) -> str:
    """A verdict as ``generate`` prints it: its one line (:func:`verdict_line`); with ``explain`` (``--explain``) the
    evidence under it: the sentence of why, the numbers, then the nearest exemplars by what tells them apart
    (network/evidence.py)."""
    lines = [verdict_line(verdict)]
    if not explain:
        return "\n".join(lines)
    words = verdict_words(verdict)
    lines.append(f"evidence: {words.sentence}")
    judged = verdict.verdict
    if judged is None:
        return "\n".join(lines)
    label = {0: "not acceptable", 1: "acceptable"}.get(judged.prediction, str(judged.prediction))
    p_lower = (f"{judged.p_lower:.4f} (>= alpha' {verdict.alpha})" if judged.p_lower is not None
               else f"— (below alpha' {verdict.alpha})")
    lines += [f"prediction: {judged.prediction} ({label})", f"p_lower: {p_lower}",
              f"q: {judged.q}   d: {judged.d:.4f}   q_bin: {judged.q_bin}"]
    evidence = evidence_of(judged.exemplars)
    if evidence.items:
        lines.append("nearest exemplars" + (f" (each a question starting {evidence.instruction!r}):" if evidence.instruction else ":"))
        for item in evidence.items:
            question = item.question if len(item.question) <= 100 else item.question[:97] + "..."
            lines.append(f"  {item.rank}. {question} => {item.answer}\n     {item.label_words} "
                         f"(judged {'acceptable' if item.prediction == 1 else 'not acceptable'}, distance "
                         f"{item.distance:.3f}, id {item.id})")
    return "\n".join(lines)


def verdict_json(verdict: DocumentVerdict) -> dict[str, Any]:
    """The verdict's stored fields (:meth:`DocumentVerdict.to_dict`) with its words: ``line`` (the short line),
    ``explanation`` (the evidence's sentence, with its numbers) and ``badge``: what ``generate --json`` and ``verify``
    on texts print."""
    words = verdict_words(verdict)
    return {**verdict.to_dict(), "line": words.line, "explanation": words.sentence, "badge": words.badge}


#: The words of an answer stopped before it was finished: nothing was judged (the server's stopped answer).
STOPPED = VerdictWords(VerdictStatus.NOT_VERIFIED, "✘ not verified · stopped",
                       "Not verified: the answer was stopped before it was finished.",
                       "Not verified: the answer was stopped before it was finished.")


def _num(x: Any) -> str:
    return "n/a" if x is None else f"{float(x):.3f}"
