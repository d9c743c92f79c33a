"""The open-question task: its label function (on NQ-open's graded answers and hand cases), the questions
made in code, its splits, and the everyday check kept out of its data."""

import json
from pathlib import Path

import pytest

from mlx_sdm.network.tasks.exact_questions import exact_questions
from mlx_sdm.network.tasks.open_label import label_open_answer, normalise_words, person_forms
from mlx_sdm.network.tasks.open_questions import OpenGold, everyday_check
from mlx_sdm.network.tasks.registry import OPEN_TASK, load_task

GRADED = Path(__file__).resolve().parents[2] / "shared" / "data" / "open_qa" / "nq_open" / "NQ-open.efficientqa.test.1.1.jsonl"


@pytest.mark.parametrize("answer, golds, question, right", [
    ("The capital of Japan is Tokyo.", ["Tokyo"], "What is the capital of Japan?", True),
    ("23 + 19 = 32.", ["42"], "What is 23 plus 19?", False),
    ("23 + 19 = 42.", ["42"], "What is 23 plus 19?", True),
    ("8 minus 4 is 5.", ["4"], "What is 8 minus 4?", False),  # the 4 only repeats the question's
    ("8 minus 4 is 4.", ["4"], "What is 8 minus 4?", True),
    ("There are seven days in a week.", ["7"], "How many days are in a week?", True),  # number words
    ("A kilogram has 1,000 grams.", ["1000"], "", True),  # thousands separators
    ("It is 15 metres.", ["5"], "", False),  # whole words only: 5 is not in 15
    ("It takes 1.5 hours.", ["5"], "", False),  # a decimal stays one word
    ("The Eagles won in 2017.", ["the Eagles"], "", True),  # articles dropped on both sides
    ("Mexico is big.", ["Mexico City"], "What is the capital of Mexico?", False),
    # a gold with a type word, read as a person reads it (WebQuestions' Freebase names)
    ("The main language spoken in Mexico is Spanish.", ["Spanish Language"], "what language do they speak in mexico?", True),
    ("They speak Spanish language.", ["Spanish Language"], "", True),
    ("Jamaicans speak Jamaican Creole English.", ["Jamaican Creole English Language"], "", True),
    ("They speak English.", ["Jamaican Creole English Language"], "", False),  # only the whole name, less its type word
    ("He played for Liverpool.", ["Liverpool F.C."], "", True),
    ("She used signs.", ["sign language"], "", False),  # "sign language" is no proper name: its type word stays
    ("Signs, not language.", ["sign language"], "", False),
    ("Obama was born in the United States.", ["United States of America"], "", True),
    ("He lives in the U.S.", ["United States of America"], "", True),
    ("It is in the USA.", ["United States of America"], "", True),
    ("It is in South America.", ["United States of America"], "", False),  # bare "America" is not an alias
    ("Tell us more.", ["United States of America"], "", False),  # nor the pronoun "us"
    ("London is in Britain.", ["United Kingdom"], "", True),
    ("The answer is Spanish.", ["Spanish Language"], "Is Spanish spoken in Spain?", False),  # repeats the question
])
def test_the_label_is_whole_word_containment_beyond_the_question(answer, golds, question, right):
    assert label_open_answer(answer, golds, question) is right


def test_person_forms_drop_a_type_word_only_from_a_proper_name():
    assert person_forms("Spanish Language") == ("Spanish Language", "Spanish")
    assert person_forms("Chinese language") == ("Chinese language", "Chinese")
    assert person_forms("Indo-European languages") == ("Indo-European languages", "Indo-European")
    assert person_forms("Liverpool F.C.") == ("Liverpool F.C.", "Liverpool")
    assert person_forms("sign language") == ("sign language",)
    assert person_forms("Language") == ("Language",)  # nothing left without it
    assert person_forms("Tokyo") == ("Tokyo",)
    assert "America" not in person_forms("United States of America")


def test_normalisation_drops_case_punctuation_and_articles():
    assert normalise_words("The U.S.A.'s  answer: an Apple!") == ["u", "s", "s", "answer", "apple"]  # 'a' is an article


@pytest.mark.skipif(not GRADED.is_file(), reason="needs ../shared/data/open_qa")
def test_the_label_agrees_with_nq_open_graders():
    """EfficientQA test: graders marked predictions definitely correct or incorrect. Containment of the file's
    gold answers is the NQ-open convention: it misses right answers the gold list does not spell (recall is
    low, by design of that convention) but what it counts right the graders counted right (precision)."""
    right = wrong = false_right = missed = 0
    for line in GRADED.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for p in row["def_correct_predictions"]:
            hit = label_open_answer(p, row["answer"], row["question"])
            right += hit
            missed += not hit
        for p in row["def_incorrect_predictions"]:
            hit = label_open_answer(p, row["answer"], row["question"])
            false_right += hit
            wrong += not hit
        # every gold answer itself, as an answer, is labelled right
        assert all(label_open_answer(a, row["answer"]) for a in row["answer"] if normalise_words(a)), row
    precision = right / (right + false_right)
    agreement = (right + wrong) / (right + wrong + false_right + missed)
    # pinned: the label function's behaviour. Reading type words (person_forms) changed one prediction: "everton"
    # for a gold list with "Everton F.C.", which the graders called wrong (before: 168, 585, 4106, 43).
    assert (right, missed, wrong, false_right) == (168, 585, 4105, 44)
    assert precision > 0.79 and agreement > 0.87


def test_made_questions_are_deterministic_and_answerable():
    questions = exact_questions()
    assert questions == exact_questions()
    assert len({q.id for q in questions}) == len(questions)
    for q in questions:
        assert q.answers and all(normalise_words(a) for a in q.answers), q
    families = {q.family for q in questions}
    assert families == {"arithmetic", "units", "counting", "capitals", "facts"}


def test_splits_are_disjoint_and_the_everyday_check_is_kept_out():
    task = load_task(OPEN_TASK)
    assert task.system is None and task.delimiter == "answer_head"
    pool, held, shifted = (task.split(s) for s in ("pool", "held_out", "shifted"))
    assert len(held) == 300 and len(shifted) == 300 and len(pool) > 1500
    ids = [{i.id for i in part} for part in (pool, held, shifted)]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    assert all(i.id.startswith("wq-") for i in shifted)  # WebQuestions: a source held out entirely
    assert not any(i.id.startswith("wq-") for i in pool + held)
    checked = {tuple(normalise_words(q["prompt"])) for q in everyday_check().questions}
    assert len(checked) == 40
    assert not checked & {tuple(normalise_words(i.prompt)) for i in pool + held + shifted}
    gold = pool[0].gold
    assert isinstance(gold, OpenGold) and gold.question == pool[0].prompt


def test_the_task_labels_a_model_answer():
    task = load_task(OPEN_TASK)
    gold = OpenGold("What is 23 plus 19?", ("42",))
    assert task.label_answer("23 + 19 = 42.", gold).correct
    wrong = task.label_answer("23 + 19 = 32.", gold)
    assert not wrong.correct and wrong.well_formed
    assert not task.label_answer("  ", gold).well_formed
