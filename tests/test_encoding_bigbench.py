"""Verification encoding (docs/method.md § 14): BIG-bench task.json and user JSONL -> documents; parsing rule."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from mlx_sdm.errors import DataError
from mlx_sdm.network.encoding import (
    FACTCHECK,
    PLAUSIBILITY,
    SYSTEM_PROMPT,
    benchmark_splits,
    encode_task,
    parse_answer,
    read_text_jsonl,
)

#: BIG-bench's own task.json files, where the workspace keeps them beside the checkout (they are not in the
#: repository: mlx_sdm/network/tasks/data ships converted copies). A clone made elsewhere does not have them.
BIGBENCH = Path(__file__).resolve().parents[2] / "shared" / "data" / "bigbench"


def write_task(tmp_path: Path, name: str, examples: list[dict]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "task.json"
    path.write_text(json.dumps({"examples": examples}))
    return path


def test_factcheck_documents_follow_table_8(tmp_path):
    examples = [{"input": f" claim {i} ", "target_scores": {"true": i % 2, "false": 1 - i % 2}} for i in range(40)]
    docs = encode_task(write_task(tmp_path, "fact_checker_fever", examples), seed=0)
    draws = np.random.default_rng(0).random(40) < 0.5  # construct_negative ~ Bernoulli(0.5), seed 0
    for i, (doc, negative) in enumerate(zip(docs, draws)):
        truth = bool(i % 2)
        assert doc.construct_negative == negative and doc.task_label == truth
        assert doc.label == (0 if negative else 1)
        shown = (not truth) if negative else truth
        assert doc.completion == ('{"correctness": true}' if shown else '{"correctness": false}')
        assert doc.prompt == (
            "Check the following document for hallucinations and/or factual inaccuracies. Respond using the "
            f'following JSON: {{"correctness": bool}}. DOCUMENT: claim {i}'
        )
        assert doc.system == SYSTEM_PROMPT
        assert parse_answer(doc.completion, FACTCHECK) == shown
    assert encode_task(write_task(tmp_path, "again", examples), seed=0, task_format=FACTCHECK)[5].label == docs[5].label


def test_sports_uses_plausible_field_and_is_unpaired(tmp_path):
    examples = [{"input": "A scored a goal", "target_scores": {"plausible": 1, "implausible": 0}},
                {"input": "B threw a touchdown in the Stanley Cup", "target_scores": {"plausible": 0, "implausible": 1}}]
    docs = encode_task(write_task(tmp_path, "sports_understanding", examples), seed=1)
    assert len(docs) == 2  # one document per source instance, never a pair
    assert {d.completion for d in docs} <= {'{"plausible": true}', '{"plausible": false}'}
    assert docs[1].task_label is False
    assert all(parse_answer(d.completion, PLAUSIBILITY) == (d.task_label if d.label else not d.task_label) for d in docs)


def test_string_answers_invert_to_another_choice(tmp_path):
    examples = [{"input": "pick", "target_scores": {"red": 1, "green": 0, "blue": 0}} for _ in range(30)]
    docs = encode_task(write_task(tmp_path, "colours", examples), seed=0)
    for d in docs:
        value = json.loads(d.completion)["answer"]
        assert (value == "red") == (d.label == 1)
    assert Counter(d.label for d in docs)[0] > 0


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"correctness": true}', True),
        ('Sure. {"correctness": false} and {"correctness": true}', False),  # first { to first }
        ('{"correctness": 0}', False),  # bool(value)
        ('{"correctness": "no"}', True),  # bool("no") is True, as the rule says
        ('{"correctness": true', None),
        ('{"other": true}', None),
        ("no json", None),
        ('{"correctness": {"nested": 1}}', None),  # first } closes the inner object: invalid JSON
    ],
)
def test_parse_rule(text, expected):
    assert parse_answer(text, FACTCHECK) == expected


@pytest.mark.skipif(not BIGBENCH.is_dir(), reason=f"BIG-bench's task.json files are not at {BIGBENCH}")
def test_real_fever_and_sports_encode():
    fever = encode_task(BIGBENCH / "fact_checker_fever" / "task.json")
    assert len(fever) == 6612 and abs(np.mean([d.label for d in fever]) - 0.5) < 0.02
    pool, test = benchmark_splits(fever, pool_size=100, test_size=50)
    assert not {d.id for d in pool} & {d.id for d in test} and len(test) == 50
    sports = encode_task(BIGBENCH / "sports_understanding" / "task.json")
    assert len(sports) == 1000 and sports[0].completion.startswith('{"plausible": ')


def test_jsonl_rows_and_errors(tmp_path):
    good = tmp_path / "rows.jsonl"
    good.write_text('{"prompt": "Q?", "completion": "A.", "label": 1}\n\n{"id": "x", "prompt": "Q2", "completion": "B", "label": 0, "system": null}\n')
    docs = read_text_jsonl(good)
    assert [(d.id, d.label, d.system) for d in docs] == [("rows-1", 1, SYSTEM_PROMPT), ("x", 0, None)]
    cases = {
        '{"prompt": "Q", "completion": "", "label": 1}': ("field 'completion'", "empty"),
        '{"prompt": "Q", "completion": "A", "label": 2}': ("field 'label'", "not 0 or 1"),
        '{"prompt": "Q", "completion": "A"}': ("field 'label'", "missing"),
        '{"prompt": 3, "completion": "A", "label": 1}': ("field 'prompt'", "string"),
        "{not json": (":1:", "not valid JSON"),
    }
    for line, (where, what) in cases.items():
        bad = tmp_path / "bad.jsonl"
        bad.write_text(line + "\n")
        with pytest.raises(DataError) as info:
            read_text_jsonl(bad)
        assert where in str(info.value) and what in str(info.value) and "bad.jsonl" in str(info.value)
    unlabelled = tmp_path / "u.jsonl"
    unlabelled.write_text('{"prompt": "Q", "completion": "A"}\n')
    assert read_text_jsonl(unlabelled, require_label=False)[0].label == -1


def test_finetune_documents_parse_each_task_with_its_own_rule():
    """Topic answers are strings, not booleans: the fine-tuning documents must score them with
    the topic rule (a regression: they once fell back to the true/false parser)."""
    from mlx_sdm.network.data import from_verification_documents
    from mlx_sdm.network.encoding import TOPIC, encode_examples

    examples = [{"input": "Shares fell sharply.", "target_scores": {"business": 1}},
                {"input": "The match ended 2-1.", "target_scores": {"sports": 1}}]
    docs = from_verification_documents(encode_examples("bbc", examples, TOPIC, seed=0))
    for doc in docs:
        assert doc.parse('{"topic": "%s"} and more' % doc.task_label) == doc.task_label
        assert doc.parse('{"correctness": true}') is None
