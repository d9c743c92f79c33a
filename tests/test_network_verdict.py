"""The one rule for what a verdict means to a user (mlx_sdm/network/verdict.py): three states, a
plain sentence of why, what the verifier covers, read tolerantly from verifier.json."""

from __future__ import annotations

import json

import pytest

from mlx_sdm.calibration.row_verdict import Verdict
from mlx_sdm.network.coverage import VerifierCoverage, VerifierTask, read_coverage
from mlx_sdm.network.lean import Lean, LeanCount, counts_of
from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus
from mlx_sdm.network.verdict_words import verdict_json, verdict_words

TASKS = [{"name": "bbc_topic", "description": "the topic of a BBC news article", "example_prompt": "Classify ..."},
         {"name": "fever", "description": "whether a claim is supported", "example_prompt": "Check ..."}]


MEASURED = {c: Lean(c, True, 0.6, 0.22, 0.49, 60) for c in (0, 1)}


def test_a_lean_is_said_only_where_it_is_measured_to_beat_the_base_rate():
    """The same verdict with a measured lean says in its evidence which way it leans and how often that was right;
    with a lean no better than the base rate (or never measured) it says it cannot tell, under a "?" badge, not "✘".
    A lean that beats the base rate but is right less than 4 times in 5 (60 %) is not a word on the badge."""
    made = verdict(admitted=False, reason="below_threshold", prediction=0)
    told = DocumentVerdict(made, lean=MEASURED[0])
    assert "it leans toward it being wrong, and that lean is measured: 60 % of the 60 held-out answers it leaned " \
        "wrong on were wrong, against 22 % of all answers (at least 49 % at 95 % confidence)" in verdict_words(told).sentence
    assert verdict_words(told).badge == "? not verified · cannot tell" and not told.lean_shown
    assert verdict_words(told).line == "Not verified: the verifier cannot tell whether this answer is right; check it yourself."
    strong = DocumentVerdict(made, lean=Lean(0, True, 0.95, 0.40, 0.86, 200, ("held_out", "shifted"), 0.83))
    assert strong.lean_shown and verdict_words(strong).badge == "✘ not verified · leans wrong"
    assert verdict_words(strong).line.startswith("Likely wrong:") and "4 times in 5" in verdict_words(strong).line
    base_rate = Lean(0, False, 0.88, 0.80, 0.84, 240)
    for lean in (base_rate, None):
        quiet = DocumentVerdict(made, lean=lean)
        assert "leans toward" not in verdict_words(quiet).sentence and "cannot tell" in verdict_words(quiet).sentence
        assert verdict_words(quiet).badge == "? not verified · cannot tell"
    assert "against 80 % of all answers" in verdict_words(DocumentVerdict(made, lean=base_rate)).sentence
    # a measured lean toward the other class says nothing about this prediction
    assert "leans toward" not in verdict_words(DocumentVerdict(made, lean=MEASURED[1])).sentence
    # nor a measured lean where the nearest known answer disagrees (q = 0: no support for it), e.g. "23 + 19 = 32"
    unsupported = DocumentVerdict(verdict(admitted=False, reason="out_of_distribution", q=0, d=0.2), lean=MEASURED[1],
                                  admits_nothing=True)
    assert "leans toward" not in verdict_words(unsupported).sentence and verdict_words(unsupported).badge.startswith("? ")
    assert "does not support its lean (q = 0)" in verdict_words(unsupported).sentence and "base rate" not in verdict_words(unsupported).sentence


def test_a_lean_is_a_word_on_the_badge_only_where_its_lower_bound_is_at_least_080_on_every_split():
    """The badge rule (network/lean.py, LEAN_SHOWN_PRECISION): BBC topic's lean toward right beats the base rate on
    both splits (23 of 24 held out, 19 of 24 shifted) but its shifted lower bound is 0.61, so it is not shown; a lean
    above 0.80 on both splits is. Of the shipped verifier's leans (weights/, measured by scripts/write_leans.py from
    its reports), none is a word on the badge; a lean.json without ``min_lower`` shows none."""
    from mlx_sdm.network.lean import load_leans
    from mlx_sdm.resources import default_verifier_dir

    bbc = [LeanCount("held_out", 1, 24, 23, 24, 40), LeanCount("shifted", 1, 24, 19, 24, 40)]
    lean = Lean.measure(bbc)
    assert lean.informative and lean.min_lower == pytest.approx(0.611, abs=1e-3) and not lean.shown
    sure = Lean.measure([LeanCount("held_out", 1, 100, 97, 50, 200), LeanCount("shifted", 1, 100, 95, 50, 200)])
    assert sure.min_lower >= 0.80 and sure.shown and Lean.from_dict(sure.to_dict()) == sure
    old = {k: v for k, v in sure.to_dict().items() if k != "min_lower"}
    assert not Lean.from_dict(old).shown
    folder = default_verifier_dir()
    shipped = [load_leans(folder), load_leans(folder / "members" / "open_questions")]
    leans = [lean for by_task in shipped for by_class in by_task.values() for lean in by_class.values()]
    assert len(leans) == 16 and all(lean.min_lower is not None for lean in leans)
    assert not any(lean.shown for lean in leans)


def test_the_lean_rule_on_counts():
    """THE rule (network/lean.py): the one-sided 95 % Clopper–Pearson lower bound of the lean's precision beats the
    base rate on every split. The open-question member's held-out and shifted Table 1 counts: leaning right
    (36 of 60 right, base 65 of 300; 11 of 41, base 41 of 300) beats it, leaning wrong (211 of 240, base 235 of
    300; 229 of 259, base 259 of 300) does not on the shift."""
    right = [LeanCount("held_out", 1, 60, 36, 65, 300), LeanCount("shifted", 1, 41, 11, 41, 300)]
    wrong = [LeanCount("held_out", 0, 240, 211, 235, 300), LeanCount("shifted", 0, 259, 229, 259, 300)]
    assert right[0].lower == pytest.approx(0.4856, abs=1e-3)  # scipy.stats.beta.ppf(0.05, 36, 25)
    assert right[1].lower == pytest.approx(0.1583, abs=1e-3) and right[1].base_rate == pytest.approx(0.1367, abs=1e-4)
    assert Lean.measure(right).informative and Lean.measure(right).precision == pytest.approx(0.6)
    assert wrong[0].beats_base_rate and not wrong[1].beats_base_rate and not Lean.measure(wrong).informative
    assert counts_of("s", [1, 1, 0, 0, 0], [1, 0, 0, 0, 1]) == [LeanCount("s", 0, 3, 2, 3, 5), LeanCount("s", 1, 2, 1, 2, 5)]


def verdict(*, admitted: bool, prediction: int = 1, reason: str | None = None, p_lower: float | None = 0.97,
            q: int = 4, d: float = 0.6):
    return Verdict(prediction=prediction, p_lower=p_lower if admitted else None, admitted=admitted, q=q, d=d,
                   q_bin=2, reason=None if admitted else reason)


@pytest.mark.parametrize("made, status, reason, words", [
    (verdict(admitted=True), VerdictStatus.VERIFIED, None, "calibrated lower probability 0.970"),
    (verdict(admitted=True, prediction=0), VerdictStatus.NOT_VERIFIED, "predicted_unacceptable", "confident this answer is wrong"),
    (verdict(admitted=False, reason="below_threshold"), VerdictStatus.NOT_VERIFIED, "below_threshold", "does not reach the 0.95"),
    (verdict(admitted=False, reason="index_flipped"), VerdictStatus.NOT_VERIFIED, "index_flipped",
     "no longer favours its own prediction"),
    (verdict(admitted=False, reason="out_of_distribution", q=88, d=0.0), VerdictStatus.OUT_OF_SCOPE, "out_of_distribution",
     "farther from the examples the verifier was built on"),
    (verdict(admitted=False, reason="out_of_distribution", q=0, d=0.4), VerdictStatus.NOT_VERIFIED, "out_of_distribution",
     "most similar known answer"),
])
def test_three_states_and_one_sentence_of_why(made, status, reason, words):
    judged = DocumentVerdict(made, lean=MEASURED[made.prediction])  # a lean measured to beat the base rate
    assert judged.status is status and judged.verified == (status is VerdictStatus.VERIFIED)
    assert judged.reason == reason and words in verdict_words(judged).sentence
    data = verdict_json(judged)
    assert data["status"] == status.value and data["reason"] == reason and data["explanation"] == verdict_words(judged).sentence
    assert DocumentVerdict.from_dict(judged.to_dict()).status is status and "explanation" not in judged.to_dict()
    # an older stored dict without "status" gets the same state by the same rule
    assert DocumentVerdict.from_dict(made.to_dict()).status is status


def test_out_of_scope_says_what_the_verifier_covers():
    judged = DocumentVerdict(verdict(admitted=False, reason="out_of_distribution", d=0.0),
                             coverage=read_coverage({"tasks": TASKS}))
    text = verdict_words(judged).sentence
    assert text.startswith("Out of scope:") and "the topic of a BBC news article" in text and "whether a claim" in text
    # other states do not list the tasks
    assert "covers" not in verdict_words(DocumentVerdict(verdict(admitted=True), coverage=judged.coverage)).sentence
    # a question routed to none of a routing verifier's tasks: out of scope with no estimator numbers
    unrouted = DocumentVerdict(None, coverage=VerifierCoverage(tasks=(VerifierTask("spam"),)), unjudged="not_a_task")
    assert unrouted.status is VerdictStatus.OUT_OF_SCOPE and "It covers: spam." in verdict_words(unrouted).sentence
    assert DocumentVerdict.from_dict(unrouted.to_dict()).status is VerdictStatus.OUT_OF_SCOPE


def test_coverage_is_read_tolerantly():
    assert read_coverage(None) == VerifierCoverage() and not read_coverage({}).known
    assert "does not record" in read_coverage({}).sentence()
    got = read_coverage({"tasks": TASKS + [{"description": "no name"}, 7, "sports"], "info": {"task": "bbc_news"}})
    assert [t.name for t in got.tasks] == ["bbc_topic", "fever", "sports"] and got.tasks[0].example_prompt == "Classify ..."
    assert read_coverage({"tasks": "not a list"}).tasks == ()
    assert read_coverage({"info": {"task": "bbc_news"}}).sentence() == "It was built on the task 'bbc_news' only."
    assert read_coverage({"info": {"tasks": TASKS[:1]}}).tasks[0].name == "bbc_topic"  # also under info


def test_a_verifier_keeps_its_tasks_through_save_and_load(tmp_path):
    from mlx_sdm.network.verifier import DocumentVerifier
    from tests.tiny_verifier import build_tiny_verifier

    path = build_tiny_verifier(tmp_path / "v")
    loaded = DocumentVerifier.load(path)
    assert not loaded.coverage.known  # the tiny verifier records no tasks
    loaded.tasks = TASKS
    loaded.save(tmp_path / "with-tasks")
    manifest = json.loads((tmp_path / "with-tasks" / "verifier.json").read_text())
    assert manifest["tasks"] == TASKS
    again = DocumentVerifier.load(tmp_path / "with-tasks")
    assert [t.name for t in again.coverage.tasks] == ["bbc_topic", "fever"]


def test_exemplar_label_words_one_rule_for_server_and_tui():
    from mlx_sdm.network.evidence import exemplar_label_words
    from mlx_sdm.server import verdicts
    from tui.widgets import evidence_panel as evidence

    assert exemplar_label_words(1) == "a correct answer to a similar question"
    assert exemplar_label_words("0") == "an incorrect answer to a similar question"
    assert exemplar_label_words(None) == "an example labelled None"
    assert exemplar_label_words(7) == "an example labelled 7"
    from mlx_sdm.network.evidence import EvidenceItem

    assert verdicts.exemplar_label_words is exemplar_label_words
    assert EvidenceItem(1, "e", "q", "a", 0, 0, 1.0).label_words == exemplar_label_words(0)
    assert "evidence_of" in vars(evidence)  # the TUI reads exemplars through the one evidence module
    assert not hasattr(verdicts, "LABEL_WORDS")  # the words live in mlx_sdm/network/evidence.py only


def test_an_answer_unlike_the_built_on_ones_to_a_covered_question_is_not_verified_not_out_of_scope():
    """Out of distribution, but the question was routed to one of the verifier's tasks: the question is in
    scope, the ANSWER is unlike (e.g. prose where the task's JSON was expected). Not verified, and the
    sentence names the task instead of listing everything the verifier covers."""
    coverage = read_coverage({"tasks": TASKS})
    made = verdict(admitted=False, reason="out_of_distribution", d=0.0)
    routed = DocumentVerdict(made, coverage=coverage, task=TASKS[0]["name"])
    assert routed.status is VerdictStatus.NOT_VERIFIED and routed.reason == "out_of_distribution"
    text = verdict_words(routed).sentence
    assert text.startswith("Not verified:") and TASKS[0]["description"] in text and "It covers" not in text
    data = routed.to_dict()
    assert data["status"] == "not_verified" and data["task"] == TASKS[0]["name"]
    stored = dict(data)
    del stored["status"]  # a row without the status word gets the same state by the same rule
    assert DocumentVerdict.from_dict(stored).status is VerdictStatus.NOT_VERIFIED
    # the same verdict on an unrouted question stays out of scope
    assert DocumentVerdict(made, coverage=coverage).status is VerdictStatus.OUT_OF_SCOPE
    # a routed question that the verifier admits is verified as before
    assert DocumentVerdict(verdict(admitted=True), coverage=coverage, task=TASKS[0]["name"]).verified
