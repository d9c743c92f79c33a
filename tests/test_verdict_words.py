"""Every sentence a verdict shows is true of the numbers behind it (network/verdict_words.verdict_words):
a property test over many generated verdicts, and the stored form reads back to the same words. Its short line is
at most 20 words with none of the estimator's terms, and its badge holds no numbers."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from mlx_sdm.calibration.row_verdict import Exemplar, Verdict
from mlx_sdm.network.coverage import VerifierCoverage, VerifierTask
from mlx_sdm.network.lean import Lean
from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus
from mlx_sdm.network.verdict_words import verdict_words

COVERAGE = VerifierCoverage(tasks=(VerifierTask("bbc_topic", "Topic of a news article"), VerifierTask("fever")))
OPENINGS = {VerdictStatus.VERIFIED: "Verified:", VerdictStatus.NOT_VERIFIED: "Not verified:",
            VerdictStatus.OUT_OF_SCOPE: "Out of scope:", VerdictStatus.NO_VERIFIER: "No verifier:"}
MARKS = {VerdictStatus.VERIFIED: "✔", VerdictStatus.NOT_VERIFIED: ("✘", "?"), VerdictStatus.OUT_OF_SCOPE: "○",
         VerdictStatus.NO_VERIFIER: "·"}
leans = st.one_of(st.none(), st.builds(Lean, judged=st.integers(0, 1), informative=st.booleans(),
                                       precision=st.floats(0, 1), base_rate=st.floats(0, 1), lower=st.floats(0, 1),
                                       leaned=st.integers(1, 500),
                                       min_lower=st.one_of(st.none(), st.floats(0, 1))))
#: The estimator's terms, none of which the short line or the badge says.
JARGON = re.compile(r"\b(q|d|p|p_lower|q_bin|bin|alpha|α′?)\b\s*=|p_lower|q_bin|support set|\bα|quantile|calibrat")
LINE_OPENINGS = {VerdictStatus.VERIFIED: ("Verified:",), VerdictStatus.NOT_VERIFIED: ("Not verified", "Likely wrong:"),
                 VerdictStatus.OUT_OF_SCOPE: ("Out of scope:",), VerdictStatus.NO_VERIFIER: ("No verifier:",)}

exemplars = st.lists(st.builds(Exemplar, id=st.text(min_size=1, max_size=8), label=st.integers(0, 1),
                               prediction=st.integers(0, 1), distance=st.floats(0, 50), text=st.none()), max_size=5)


@st.composite
def verdicts(draw) -> DocumentVerdict:
    """Verdicts as the estimator makes them: admitted ones have p_lower >= 0.95 and q >= 1; a reason
    only when not admitted; out of distribution means q = 0 or d = 0."""
    prediction = draw(st.integers(0, 1))
    admitted = draw(st.booleans())
    q = draw(st.integers(1, 300)) if admitted else draw(st.integers(0, 300))
    d = draw(st.floats(0.0, 1.0))
    if admitted:
        reason = None
    elif q == 0 or d == 0.0:
        reason = "out_of_distribution"
    else:
        reason = draw(st.sampled_from(["below_threshold", "index_flipped"]))
    # the nested kind carries the α-ladder region (0.0: none); admission at α′ means region α lower >= α′
    ladder = [0.0, 0.55, 0.6, 0.7, 0.8, 0.85, 0.9]
    region = draw(st.sampled_from([None, 0.95] if admitted else [None] + ladder))
    verdict = Verdict(prediction=prediction, p_lower=draw(st.floats(0.95, 1.0)) if admitted else None,
                      admitted=admitted, q=q, d=d, q_bin=draw(st.integers(0, 9)), reason=reason,
                      exemplars=draw(exemplars), region_alpha=region, region_alpha_lower=region)
    return DocumentVerdict(verdict, coverage=COVERAGE, task=draw(st.sampled_from([None, "bbc_topic"])),
                           admits_nothing=draw(st.booleans()) and not admitted, lean=draw(leans))


def numbers_in(text: str) -> set[str]:
    return set(re.findall(r"\d+\.\d{3}", text))


@settings(max_examples=400, deadline=None, derandomize=True)
@given(verdicts())
def test_each_sentence_is_true_of_its_numbers(judged: DocumentVerdict):
    v, words = judged.verdict, verdict_words(judged)
    sentence, badge = words.sentence, words.badge
    assert words.status is judged.status
    assert sentence.startswith(OPENINGS[judged.status]) and badge.startswith(MARKS[judged.status])
    # the short line: at most 20 words, no jargon, no numbers but the promise it keeps; the badge: no numbers
    line = words.line
    assert len(line.split()) <= 20 and line.startswith(LINE_OPENINGS[judged.status]), line
    assert not JARGON.search(line) and not JARGON.search(badge) and not numbers_in(line + badge), (line, badge)
    # a lean is said in the sentence only where it is measured to beat the base rate, toward the verifier's own
    # prediction; on the badge and the line only where a person acting on it is right at least 4 times in 5
    informative = judged.lean is not None and judged.lean.informative and judged.lean.judged == v.prediction and v.q > 0
    shown = informative and judged.lean.min_lower is not None and judged.lean.min_lower >= 0.80
    assert shown == judged.lean_shown
    if "leans toward" in sentence:
        assert informative, (sentence, judged.lean)
    if "leans right" in badge or "leans wrong" in badge or "leans" in line:
        assert shown, (badge, line, judged.lean)
    if "cannot tell" in badge:
        assert not shown and badge.startswith("?")
    if "no better than the base rate" in sentence:  # said only of a lean measured so
        assert judged.lean is not None and not (judged.lean.informative and judged.lean.judged == v.prediction)
    # ✘ only where the numbers call the answer wrong (admitted wrong, a measured lean toward wrong) or it is unlike
    # the task's answers; "?" where the verifier cannot tell
    if judged.status is VerdictStatus.NOT_VERIFIED:
        wrong = (v.admitted and v.prediction == 0) or (shown and v.prediction == 0) or \
            (judged.reason == "out_of_distribution" and v.d <= 0.0)
        assert badge.startswith("✘") == wrong, (badge, judged)
    assert judged.status.words in badge
    # every three-decimal number it prints is one of the verdict's own
    own = {f"{judged.alpha:.2f}0", f"{v.d:.3f}"} | ({f"{v.p_lower:.3f}"} if v.p_lower is not None else set())
    assert numbers_in(sentence) <= own, (sentence, own)
    # "judged differently" only when the nearest neighbour that counts was judged otherwise
    if "judged differently" in sentence:
        assert v.q == 0 and v.exemplars and v.exemplars[0].prediction != v.prediction
    if "misjudged" in sentence:
        assert v.q == 0 and v.exemplars[0].label != v.exemplars[0].prediction
    # "unlike" / "farther" only when d says so (Eq. 6 quantile 0); never the out-of-scope badge when routed
    if "unlike" in sentence or "farther" in sentence:
        assert v.d <= 0.0
    if judged.task is not None:
        assert judged.status is not VerdictStatus.OUT_OF_SCOPE and "out of scope" not in badge
    # "all correct" / "all incorrect" are what q counts: the q nearest answers, correctly judged, with ŷ
    if "were all correct" in sentence:
        assert v.admitted and v.prediction == 1 and f"the {v.q} most similar" in sentence and v.q >= 1
    if "were all incorrect" in sentence:
        assert v.admitted and v.prediction == 0 and v.q >= 1
    if v.admitted and v.prediction == 1:
        assert judged.status is VerdictStatus.VERIFIED and f"{v.p_lower:.3f}" in sentence and badge == "✔ verified"
        assert line == f"Verified: answers like this are right at least {100 * judged.alpha:.0f} % of the time."
    assert ("It covers" in sentence) == (judged.status is VerdictStatus.OUT_OF_SCOPE)
    # a nested region is named only when α′ is not met and the answer is in one, with its own α and ŷ
    region = v.region_alpha_lower
    in_region = judged.status is VerdictStatus.NOT_VERIFIED and region is not None and 0 < region < judged.alpha
    assert ("falls in a region" in sentence) == in_region and "region" not in badge
    if in_region:
        side = "right" if v.prediction == 1 else "wrong"
        assert f"at least {region * 100:.0f} % of the answers judged {side} are {side}" in sentence
    # the stored form reads back to the same words
    again = DocumentVerdict.from_dict(judged.to_dict(), COVERAGE)
    assert verdict_words(again) == words
    assert verdict_words(DocumentVerdict.from_dict(judged.to_dict())) == words  # the stored verdict keeps its coverage


def test_no_verifier_and_unjudged_turns_have_their_own_words():
    off = DocumentVerdict.no_verifier("verification is off (--verifier none)")
    none = verdict_words(off)
    assert none.status is VerdictStatus.NO_VERIFIER and "verification is off" in none.sentence
    assert DocumentVerdict.from_dict(off.to_dict()) == off  # the stored form keeps why
    assert verdict_words(DocumentVerdict.no_verifier()).sentence == "No verifier: no verifier fits this model."
    empty = verdict_words(DocumentVerdict(None, unjudged="empty_answer"))
    assert empty.status is VerdictStatus.NOT_VERIFIED and "empty answer" in empty.sentence
    other = verdict_words(DocumentVerdict(None, coverage=COVERAGE, unjudged="not_a_task"))
    assert other.status is VerdictStatus.OUT_OF_SCOPE and "not one of the verifier's tasks" in other.badge


def test_a_nested_region_below_alpha_prime_is_said_in_words():
    """Where α′ = 0.95 is not met, a nested verifier's region says how often it is right there."""
    v = Verdict(1, None, False, 7, 0.4, 1, "below_threshold", [], region_alpha=0.9, region_alpha_lower=0.9)
    words = verdict_words(DocumentVerdict(v, task="bbc_topic"))
    assert words.status is VerdictStatus.NOT_VERIFIED
    assert "at least 90 % of the answers judged right are right" in words.sentence and "region" not in words.badge
    none = Verdict(1, None, False, 7, 0.4, 1, "below_threshold", [], region_alpha=0.0, region_alpha_lower=0.0)
    assert "region" not in verdict_words(DocumentVerdict(none, task="bbc_topic")).sentence


def test_the_reported_contradictions_are_gone():
    """The words say "judged differently" above five exemplars that all agree, and "unlike the answers it was
    built on" for an answer that was exactly the task's JSON (d > 0)."""
    agree = [Exemplar(f"e{i}", 1, 1, 1.0 + i) for i in range(5)]
    flipped = DocumentVerdict(Verdict(1, None, False, 12, 0.4, 1, "index_flipped", agree), task="bbc_topic")
    assert "judged differently" not in verdict_words(flipped).sentence
    misjudged = [Exemplar("m", 0, 1, 0.5)] + agree
    near = DocumentVerdict(Verdict(1, None, False, 0, 0.01, 0, "out_of_distribution", misjudged), task="bbc_topic")
    assert "unlike" not in verdict_words(near).sentence and "misjudged" in verdict_words(near).sentence
    assert near.status is VerdictStatus.NOT_VERIFIED


@settings(max_examples=300, deadline=None, derandomize=True)
@given(verdicts(), st.booleans())
def test_the_monitor_panel_names_what_the_verifier_did_with_the_turn(judged: DocumentVerdict, admits_nothing: bool):
    """The fused forecast's sentence when the verifier moved p_t most: "vouched" only for a verified turn,
    "could not vouch" only for a turn shown as not verified (also by a verifier that vouches for no answer,
    which the forecast reads as unjudged), "outside what the verifier covers" only for an unjudged one."""
    from dataclasses import replace

    from mlx_sdm.monitor.forecast.fused import signal_words

    judged = replace(judged, admits_nothing=admits_nothing and not judged.verdict.admitted)
    shown = judged.status
    for turn_verdict in (judged, DocumentVerdict.from_dict(judged.to_dict())):
        for delta in (-0.4, 0.4):
            words = signal_words("verifier", delta, turn_verdict, 3, first=False)
            assert ("vouched for turn 3" in words) == (shown is VerdictStatus.VERIFIED), (shown, words)
            assert ("could not vouch for turn 3" in words) == (shown is VerdictStatus.NOT_VERIFIED), (shown, words)
            assert ("outside what the verifier covers" in words) == (shown is VerdictStatus.OUT_OF_SCOPE), (shown, words)
    unjudged = DocumentVerdict(None, coverage=COVERAGE, unjudged="not_a_task")
    assert "outside what the verifier covers" in signal_words("verifier", -1.0, unjudged, 2, first=True)
    assert signal_words("verifier", -1.0, DocumentVerdict.no_verifier(), 2, first=True) == "no verifier judged turn 2"


def test_the_review_queue_names_a_verifier_that_vouches_for_nothing_as_such():
    """A judged answer of a verifier with no high-probability region is queued as such, not under the
    estimator's own reason code (its badge and sentence say the same); other answers keep their reason."""
    from mlx_sdm.turn.escalation import verdict_review_reasons
    from tui.format import reason_label

    v = Verdict(1, None, False, 27, 0.9, 0, "index_flipped", [])
    nothing = DocumentVerdict(v, task="open_questions", admits_nothing=True)
    assert verdict_review_reasons(nothing) == ["admits_nothing"]
    assert reason_label("admits_nothing") == "vouches for no answer on this model"
    assert "cannot vouch for any answer" in verdict_words(nothing).sentence
    assert verdict_words(nothing).badge == "? not verified · cannot tell on this model"  # its lean was never measured
    assert verdict_review_reasons(DocumentVerdict(v, task="bbc_topic")) == ["index_flipped"]


def test_a_transcript_says_a_standing_line_once_then_its_badge():
    """A line true of every answer of its kind on this model (the verifier admits nothing; none of its tasks; no
    checkable answer; no verifier) is said in full the first time, then as its state "(as above)"; a line about this
    answer (verified, cannot tell) is said in full each time. A new transcript says it in full again."""
    from mlx_sdm.network.verdict_words import LINE_ADMITS_NOTHING, TranscriptVerdicts

    v = Verdict(prediction=1, p_lower=None, admitted=False, q=3, d=0.4, q_bin=0, reason="below_threshold")
    nothing = DocumentVerdict(v, task="open_questions", admits_nothing=True)
    judged = DocumentVerdict(v, task="bbc_topic", admits_nothing=False)
    off = DocumentVerdict.no_verifier("verification is off (--verifier none)")
    transcript = TranscriptVerdicts()
    lines = [transcript.line(d) for d in (nothing, judged, nothing, judged, off, off, nothing)]
    assert lines[0] == f"verdict: {LINE_ADMITS_NOTHING}" and verdict_words(nothing).standing
    assert lines[2] == lines[6] == "verdict: Not verified (as above)"
    assert lines[1] == lines[3] == f"verdict: {verdict_words(judged).line}" and not verdict_words(judged).standing
    assert lines[4].startswith("verdict: No verifier:") and lines[5] == "verdict: No verifier (as above)"
    assert TranscriptVerdicts().line(nothing) == lines[0]
