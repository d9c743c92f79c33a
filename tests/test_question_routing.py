"""Routing by meaning: the router's rule on hand-made probabilities, its folder, and where a verifier with a
router sends each kind of question (a task's instruction first, then the router's reading), with the words
each case gets. The shipped router on real prompts is in tests/test_open_verifier_smollm2.py."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from mlx_sdm.errors import ArtifactError
from mlx_sdm.network.coverage import RouteKind, TaskRoute
from mlx_sdm.network.question_router import NO_ANSWER_KIND, OPEN_KIND, QuestionRouter, RouteGuess
from mlx_sdm.network.verdict import (
    REASON_NO_CHECKABLE_ANSWER,
    DocumentVerdict,
    VerdictStatus,
)
from mlx_sdm.network.verdict_words import verdict_words
from mlx_sdm.network.verifier import DocumentVerifier, FeatureRecipe

LABELS = ("bbc_topic", NO_ANSWER_KIND, OPEN_KIND)


def _router(task_threshold=0.9, open_threshold=0.6) -> QuestionRouter:
    return QuestionRouter(LABELS, np.eye(3, dtype=np.float32), np.zeros(3, dtype=np.float32), task_threshold,
                          open_threshold)


@pytest.mark.parametrize("row, kind, probability", [
    ((0.95, 0.03, 0.02), "bbc_topic", 0.95),  # a task at or above its threshold
    ((0.85, 0.05, 0.10), NO_ANSWER_KIND, 0.10),  # a task below it: open or not, by P(open)
    ((0.50, 0.05, 0.45), NO_ANSWER_KIND, 0.45),  # P(open) below the open threshold
    ((0.30, 0.05, 0.65), OPEN_KIND, 0.65),
    ((0.00, 0.70, 0.30), NO_ANSWER_KIND, 0.30),  # the probability is always the one the rule compared
    ((0.00, 0.40, 0.60), OPEN_KIND, 0.60),  # exactly at the threshold counts
])
def test_the_rule_on_hand_made_probabilities(row, kind, probability):
    guess = _router().decide(np.array([row], dtype=np.float32))[0]
    assert guess == RouteGuess(kind, pytest.approx(probability))
    assert guess.is_task is (kind == "bbc_topic")


def test_probabilities_are_a_softmax_of_the_linear_scores():
    router = _router()
    p = router.probabilities(np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=np.float32))
    e = np.e
    np.testing.assert_allclose(p[0], [e / (e + 2), 1 / (e + 2), 1 / (e + 2)], rtol=1e-6)
    np.testing.assert_allclose(p[1], [1 / 3] * 3, rtol=1e-6)


def test_folder_round_trip_and_a_clear_error(tmp_path):
    router = _router()
    router.measured = {"held_out": {"open_questions": {"open_questions": 3}}}
    router.follow_up_threshold = 0.7
    router.save(tmp_path / "r")
    back = QuestionRouter.load(tmp_path / "r")
    assert back.labels == LABELS and back.task_threshold == 0.9 and back.open_threshold == 0.6
    assert back.follow_up_threshold == 0.7
    np.testing.assert_array_equal(back.weights, router.weights)
    manifest = json.loads((tmp_path / "r" / "router.json").read_text())
    manifest["labels"] = ["bbc_topic", "open_questions"]
    (tmp_path / "r" / "router.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="router.json: field 'labels'"):
        QuestionRouter.load(tmp_path / "r")


class _Scripted(QuestionRouter):
    """A router whose reading of each question is given (the rule is tested above; here: the verifier's use)."""

    def __init__(self, guesses):
        super().__init__(LABELS, np.eye(3), np.zeros(3), 0.9, 0.6)
        self.guesses = guesses

    def guess(self, question):
        return self.guesses[question]


INSTRUCTION = 'Classify the topic of the following news article. Respond using the following JSON: {"topic": str}.'


def _verifier(with_open=True, guesses=None) -> DocumentVerifier:
    recipe = FeatureRecipe(task_systems=((INSTRUCTION, "You classify news."), ("Decide spam.", "You filter spam.")),
                           task_names=("bbc_topic", "spam"))
    members = {OPEN_KIND: DocumentVerifier(None, {}, FeatureRecipe(delimiter="answer_head", system=None),
                                           tasks=[{"name": OPEN_KIND, "description": "everyday questions"}])} if with_open else {}
    tasks = [{"name": "bbc_topic", "description": "news topics", "example_prompt": INSTRUCTION + " ARTICLE: Oil falls."},
             {"name": "spam", "description": "spam"}]
    return DocumentVerifier(None, {}, recipe, tasks=tasks, members=members, router=_Scripted(guesses or {}))


def test_a_task_instruction_wins_without_asking_the_router():
    route = _verifier().route(INSTRUCTION + " ARTICLE: Arsenal won.")
    assert route.how is RouteKind.INSTRUCTION and route.task == "bbc_topic" and route.probability is None


def test_each_reading_of_the_router_goes_where_it_says():
    verifier = _verifier(guesses={"What is this article about? Arsenal won.": RouteGuess("bbc_topic", 0.97),
                                  "What is 2 plus 2?": RouteGuess(OPEN_KIND, 0.9),
                                  "Write a poem.": RouteGuess(NO_ANSWER_KIND, 0.1)})
    meaning = verifier.route("What is this article about? Arsenal won.")
    assert (meaning.how, meaning.task, meaning.instruction, meaning.system, meaning.probability) == \
        (RouteKind.MEANING, "bbc_topic", INSTRUCTION, "You classify news.", 0.97)
    assert meaning.matched  # answered and judged as that task alone
    open_route = verifier.route("What is 2 plus 2?")
    assert open_route.open_question and open_route.task == OPEN_KIND and open_route.system is None
    assert not open_route.matched  # answered as the everyday chat answers it: the whole conversation
    poem = verifier.route("Write a poem.")
    assert poem.how is RouteKind.NO_CHECKABLE_ANSWER and poem.task is None
    assert verifier.recipe_for(OPEN_KIND).delimiter == "answer_head"
    assert verifier.recipe_for("bbc_topic") is verifier.recipe
    assert [t.name for t in verifier.coverage.tasks] == ["bbc_topic", "spam", OPEN_KIND]


def test_a_verifier_without_an_open_member_leaves_open_questions_out_of_scope():
    route = _verifier(with_open=False, guesses={"What is 2 plus 2?": RouteGuess(OPEN_KIND, 0.9)}).route("What is 2 plus 2?")
    assert route.how is RouteKind.NOT_COVERED and route.task is None


def test_the_words_say_which_case_it_is():
    verifier = _verifier()
    none = DocumentVerdict(None, coverage=verifier.coverage, unjudged=REASON_NO_CHECKABLE_ANSWER,
                           route=TaskRoute(kind=RouteKind.NO_CHECKABLE_ANSWER, probability=0.12))
    words = verdict_words(none)
    assert none.status is VerdictStatus.OUT_OF_SCOPE and words.badge == "○ out of scope · no checkable answer"
    assert "probability 0.12" in words.sentence and "no short answer that can be checked" in words.sentence
    back = DocumentVerdict.from_dict(none.to_dict())
    assert back.status is VerdictStatus.OUT_OF_SCOPE and verdict_words(back).sentence == words.sentence


def _judged(d, admitted, prediction, task, route):
    from mlx_sdm.calibration.row_verdict import Verdict

    v = Verdict(prediction=prediction, p_lower=0.97 if admitted else 0.5, admitted=admitted, q=12, d=d, q_bin=3,
                reason=None if admitted else ("out_of_distribution" if d == 0 else "below_threshold"))
    return DocumentVerdict(v, coverage=_verifier().coverage, task=task, route=route)


def test_an_open_question_unlike_all_it_was_built_on_is_out_of_scope_and_a_task_answer_is_not_verified():
    open_route = TaskRoute(None, OPEN_KIND, kind=RouteKind.OPEN_QUESTION, probability=0.8)
    far_open = _judged(0.0, False, 1, OPEN_KIND, open_route)
    assert far_open.status is VerdictStatus.OUT_OF_SCOPE
    far_task = _judged(0.0, False, 1, "bbc_topic", TaskRoute("s", "bbc_topic", INSTRUCTION))
    assert far_task.status is VerdictStatus.NOT_VERIFIED
    verified = _judged(0.4, True, 1, OPEN_KIND, open_route)
    words = verdict_words(verified)
    assert verified.status is VerdictStatus.VERIFIED
    assert words.sentence.startswith("Verified: calibrated lower probability 0.970")
    assert "Judged as an everyday question with a short answer (question router probability 0.80)." in words.sentence
    meaning = _judged(0.4, False, 1, "bbc_topic", TaskRoute("s", "bbc_topic", INSTRUCTION, RouteKind.MEANING, 0.97))
    assert "read this as the task 'news topics' asked in your own words (probability 0.97)" in verdict_words(meaning).sentence
    assert DocumentVerdict.from_dict(meaning.to_dict()).route.how is RouteKind.MEANING


def test_the_monitor_reads_a_verdict_of_a_verifier_that_admits_nothing_as_unjudged():
    from dataclasses import replace

    from mlx_sdm.monitor.forecast.verdict_monitor import forecast_status

    route = TaskRoute(None, OPEN_KIND, kind=RouteKind.OPEN_QUESTION, probability=0.8)
    judged = _judged(0.4, False, 1, OPEN_KIND, route)
    assert forecast_status(judged) is VerdictStatus.NOT_VERIFIED
    judged = replace(judged, admits_nothing=True)
    assert judged.status is VerdictStatus.NOT_VERIFIED  # what the user reads is unchanged
    assert "cannot vouch for any answer" in verdict_words(judged).sentence
    assert forecast_status(judged) is VerdictStatus.OUT_OF_SCOPE  # what the fused forecast's rates know it as
    assert DocumentVerdict.from_dict(judged.to_dict()).admits_nothing


def test_a_question_planned_twice_is_embedded_once():
    class Counting:
        calls = 0

        def encode(self, texts):
            Counting.calls += 1
            return np.array([[0.0, 0.0, 5.0]] * len(texts), dtype=np.float32)

    router = _router()
    router._embedder = Counting()
    first = router.guess("What is 2 plus 2?")
    assert router.guess("What is 2 plus 2?") == first == RouteGuess(OPEN_KIND, pytest.approx(first.probability))
    assert Counting.calls == 1
    router.guess("Another question?")
    assert Counting.calls == 2


# -- a task asked in a person's own words is asked as the task (network/task_asking.py) --------------------------
ARTICLE_WORDS = "Wenger dejected as Arsenal slump Arsenal manager Arsene Wenger claimed their display was poor."


@pytest.mark.parametrize("message, payload", [
    ("What is this article about? " + ARTICLE_WORDS, ARTICLE_WORDS),  # a leading question
    ("Fact check this: The Eiffel Tower is in Rome.", "The Eiffel Tower is in Rome."),  # a leading colon
    ("Can you tell me what kind of news this is?\n\n" + ARTICLE_WORDS, ARTICLE_WORDS),
    ("Can Aerosmith legally drive in the carpool lane? Yes or no?", "Can Aerosmith legally drive in the carpool lane?"),
    ("Great flight today. Really enjoyed the crew and the food. Positive or negative?",
     "Great flight today. Really enjoyed the crew and the food."),  # a trailing question
    ("Is this spam? Subject: Win", "Is this spam? Subject: Win"),  # the request is longer than the rest: kept whole
    ("Subject: Cheap pills for everyone today only", "Subject: Cheap pills for everyone today only"),  # its own label
    ("Answer yes or no. Can Aerosmith drive in the carpool lane?", "Answer yes or no. Can Aerosmith drive in the carpool lane?"),
    ("  " + ARTICLE_WORDS + "  ", ARTICLE_WORDS),  # no request clause: the whole message
])
def test_the_payload_is_the_message_without_its_request_clause(message, payload):
    from mlx_sdm.network.task_asking import payload_of

    assert payload_of(message) == payload


def test_the_task_question_is_the_task_instruction_its_label_and_the_payload():
    from mlx_sdm.network.encoding import SPAM, TOPIC
    from mlx_sdm.network.task_asking import document_label, task_question

    for fmt in (TOPIC, SPAM):  # the label read from one of the task's prompts gives back the task's own form
        example = fmt.user_message("Some text here.")
        label = document_label(fmt.instruction, example)
        assert label == fmt.document_label
        assert task_question(fmt.instruction, label, " Other text. ") == fmt.user_message("Other text.")
    assert document_label(INSTRUCTION, "Another prompt entirely. ARTICLE: x") is None
    assert document_label(INSTRUCTION, INSTRUCTION + " no label here") is None
    assert task_question("Decide spam.", None, "Buy now") == "Decide spam. Buy now"


def test_a_task_asked_in_own_words_is_routed_with_the_task_question_it_is_asked():
    message = "What is this article about? " + ARTICLE_WORDS
    verifier = _verifier(guesses={message: RouteGuess("bbc_topic", 0.97), "Is this spam? Buy now, cheap pills": RouteGuess("spam", 0.95)})
    route = verifier.route(message)
    assert route.how is RouteKind.MEANING and route.instruction == INSTRUCTION
    assert route.asked == f"{INSTRUCTION} ARTICLE: {ARTICLE_WORDS}"
    assert verifier.route("Is this spam? Buy now, cheap pills").asked == "Decide spam. Buy now, cheap pills"  # no example
    assert verifier.route(INSTRUCTION + " ARTICLE: Oil falls.").asked is None  # the task's own prompt: as typed


def _pipeline(verifier):
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnComponents

    # planning reads only whether the model has adapters (the model itself is not called)
    return TurnPipeline(TurnComponents(lm=SimpleNamespace(adapters=None), verifier=verifier))


def test_the_model_is_asked_the_task_question_and_the_verifier_judges_it():
    message = "What is this article about? " + ARTICLE_WORDS
    verifier = _verifier(guesses={message: RouteGuess("bbc_topic", 0.97)})
    conversation = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                    {"role": "user", "content": message}]
    plan = _pipeline(verifier).plan(conversation)
    asked = [{"role": "system", "content": "You classify news."}, {"role": "user", "content": f"{INSTRUCTION} ARTICLE: {ARTICLE_WORDS}"}]
    assert plan.messages == asked and plan.judged == asked and plan.judge  # the task alone, as its own prompt


def test_a_turn_after_a_task_turn_is_asked_without_the_tasks_json_exchange():
    """A task turn is answered alone; an everyday turn after it is asked the conversation without that exchange
    (its JSON made SmolLM2 answer every later question in JSON), and without a copied JSON answer either; other
    exchanges, and this turn's question, stay."""
    from mlx_sdm.turn.values import is_task_answer, without_task_exchanges

    verifier = _verifier(guesses={"What is the capital of Peru?": RouteGuess(OPEN_KIND, 0.9)})
    conversation = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                    {"role": "user", "content": INSTRUCTION + " ARTICLE: Arsenal won."},
                    {"role": "assistant", "content": '{"topic": "sports"}'},
                    {"role": "user", "content": "What is the boiling point of water?"},
                    {"role": "assistant", "content": '{"topic": "cooking"}}'},
                    {"role": "user", "content": "What is the capital of Peru?"}]
    plan = _pipeline(verifier).plan(conversation)
    assert plan.messages == [conversation[0], conversation[1], conversation[-1]]
    leaning = conversation[:4] + [{"role": "user", "content": "Why did you pick that topic?"}]
    assert without_task_exchanges(leaning) == leaning  # a follow-up that leans on the task turn sees it
    assert without_task_exchanges(conversation[:6] + leaning[-1:]) == conversation[:2] + conversation[4:6] + \
        leaning[-1:]  # only the exchange just before it
    assert is_task_answer(' {"queue": "billing"}\n') and not is_task_answer('Sure: {"a": 1}')
    assert not is_task_answer("{}") and not is_task_answer('{"a": 1} and more') and not is_task_answer("{oops")
    assert without_task_exchanges([{"role": "user", "content": "Give me JSON"}]) == [
        {"role": "user", "content": "Give me JSON"}]  # this turn's question stays whatever it is


# -- a follow-up is read with the question it leans on (network/question_router.py) --------------------------------
@pytest.mark.parametrize("question, leans", [
    ("When did he write it?", True), ("And Germany?", True), ("What about Spain?", True), ("Where is its capital?", True),
    ("How long is it?", True), ("Thanks!", False), ("What is the capital of Peru?", False), ("Good morning!", False),
    ("Anderson?", False), ("Thesis topics?", False),  # words that only contain "and", "the", "he", "it"
])
def test_a_follow_up_leans_on_the_turn_before_by_a_referring_word_or_a_continuing_start(question, leans):
    from mlx_sdm.network.question_router import leans_on_previous

    assert leans_on_previous(question) is leans


@pytest.mark.parametrize("question, asks", [
    ("When did he write it?", True), ("In what year did he invent it?", True), ("And China?", True),
    ("What about Spain?", True), ("how long is it", True), ("Why is that important?", False),
    ("Can you help me plan a trip there?", False), ("Ok, that makes sense.", False), ("", False),
])
def test_a_follow_up_that_is_read_again_asks_for_a_fact(question, asks):
    from mlx_sdm.network.question_router import asks_for_a_fact

    assert asks_for_a_fact(question) is asks


def test_a_follow_up_read_with_the_previous_question_needs_the_follow_up_threshold():
    from mlx_sdm.network.question_router import follow_up_text

    previous = "Who wrote Hamlet?"
    guesses = {"When did he write it?": RouteGuess(NO_ANSWER_KIND, 0.4),
               follow_up_text(previous, "When did he write it?"): RouteGuess(OPEN_KIND, 0.62)}
    router = _Scripted(guesses)
    router.follow_up_threshold = 0.7  # measured on held-out follow-ups apart from single messages
    assert router.read("When did he write it?", previous) == RouteGuess(NO_ANSWER_KIND, 0.4)
    router.follow_up_threshold = 0.6
    assert router.read("When did he write it?", previous).kind == OPEN_KIND
    guesses[follow_up_text(previous, "When did he write it?")] = RouteGuess("bbc_topic", 0.95)  # never a task
    assert router.read("When did he write it?", previous) == RouteGuess(NO_ANSWER_KIND, 0.4)


def test_a_follow_up_with_no_checkable_answer_alone_is_read_with_the_previous_question():
    from mlx_sdm.network.question_router import follow_up_text

    previous = "Who wrote Romeo and Juliet?"
    verifier = _verifier(guesses={
        "When did he write it?": RouteGuess(NO_ANSWER_KIND, 0.47),
        follow_up_text(previous, "When did he write it?"): RouteGuess(OPEN_KIND, 0.73),
        "What do you think of it?": RouteGuess(NO_ANSWER_KIND, 0.03),
        follow_up_text(previous, "What do you think of it?"): RouteGuess(NO_ANSWER_KIND, 0.24),
        "Why is it famous?": RouteGuess(NO_ANSWER_KIND, 0.2),  # asks for no fact: never read again
        "Thanks!": RouteGuess(NO_ANSWER_KIND, 0.3),  # refers to nothing: never read with the previous question
        "What is 2 plus 2?": RouteGuess(OPEN_KIND, 0.9),  # judged alone: its reading stands
    })
    follow = verifier.route("When did he write it?", previous)
    assert follow.open_question and follow.probability == 0.73 and follow.asked == f"{previous} When did he write it?"
    assert verifier.route("When did he write it?").how is RouteKind.NO_CHECKABLE_ANSWER  # a first turn: alone
    opinion = verifier.route("What do you think of it?", previous)
    assert opinion.how is RouteKind.NO_CHECKABLE_ANSWER and opinion.probability == 0.03 and opinion.asked is None
    assert verifier.route("Why is it famous?", previous).how is RouteKind.NO_CHECKABLE_ANSWER
    assert verifier.route("Thanks!", previous).how is RouteKind.NO_CHECKABLE_ANSWER
    alone = verifier.route("What is 2 plus 2?", previous)
    assert alone.open_question and alone.asked is None and alone.probability == 0.9


def test_the_pipeline_routes_a_follow_up_from_the_conversation_and_judges_it_with_the_question_it_leans_on():
    previous = "Who wrote Romeo and Juliet?"
    verifier = _verifier(guesses={"When did he write it?": RouteGuess(NO_ANSWER_KIND, 0.47),
                                  f"{previous} When did he write it?": RouteGuess(OPEN_KIND, 0.73)})
    conversation = [{"role": "user", "content": previous}, {"role": "assistant", "content": "William Shakespeare."},
                    {"role": "user", "content": "When did he write it?"}]
    plan = _pipeline(verifier).plan(conversation)
    assert plan.route.open_question and plan.judge
    assert plan.messages == conversation  # the model answers the conversation as plain mlx-lm would
    assert plan.judged == [{"role": "user", "content": f"{previous} When did he write it?"}]


#: The issue's own everyday wordings of "what is this article about" (HELD_OUT_TOPIC_PHRASINGS[:3]), never trained on.
ISSUE_TOPIC_PHRASINGS = 3


def test_a_pasted_articles_topic_asked_in_unseen_everyday_words_reaches_the_topic_task():
    """The shipped router (the suite verifier's ``route``): of four held-out articles asked in each of the issue's
    three wordings (none among the router's training phrasings), at least three reach bbc_topic, asked as the task's
    own prompt with the article; the same requests with no article reach no task. The whole table (eight wordings):
    scripts/bench/article_topic_routing.py, docs/chat.md."""
    from mlx_sdm.network.encoding import TOPIC
    from mlx_sdm.network.tasks.router_data import (
        HELD_OUT_TOPIC_PHRASINGS,
        TASK_PHRASINGS,
        held_out_topic_articles,
    )
    from mlx_sdm.network.verifier import DEFAULT_VERIFIER_DIR, DocumentVerifier

    assert not set(HELD_OUT_TOPIC_PHRASINGS) & set(TASK_PHRASINGS["bbc_topic"])  # never trained on
    verifier = DocumentVerifier.load(DEFAULT_VERIFIER_DIR)
    articles = held_out_topic_articles()
    assert len(articles) == 4
    for phrasing in HELD_OUT_TOPIC_PHRASINGS[:ISSUE_TOPIC_PHRASINGS]:
        routes = [verifier.route(phrasing.format(x=payload)) for payload, _ in articles]
        reached = [r for r in routes if r.task == "bbc_topic"]
        assert len(reached) >= 3, (phrasing, [r.how for r in routes])
        for (payload, _), route in zip(articles, routes):
            if route.task == "bbc_topic":
                assert route.asked == TOPIC.user_message(payload)  # the task's own prompt with the article
        bare = verifier.route(phrasing.format(x="").strip())
        assert bare.task is None, phrasing
