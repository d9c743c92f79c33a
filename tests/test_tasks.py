"""The task suite (mlx_sdm/network/tasks): vendored data, deterministic disjoint splits, docs/method.md § 14 labelling,
the user's JSONL tasks and their errors. No model needed."""

from __future__ import annotations

import json

import pytest

from mlx_sdm.errors import DataError
from mlx_sdm.network.tasks.registry import SHIPPED_TASK_NAMES, load_task, load_tasks


@pytest.mark.parametrize("name", SHIPPED_TASK_NAMES)
def test_shipped_task_splits_are_disjoint_deterministic_and_labelled(name):
    task = load_task(name)
    pool, held, shifted = (task.split(s) for s in ("pool", "held_out", "shifted"))
    assert len(pool) > 200 and len(held) >= 50 and len(shifted) >= 50
    assert not {i.id for i in pool} & {i.id for i in held}
    if name not in ("spam", "sentiment"):  # a view of the held-out items: same sources, other prompts
        assert [i.document for i in shifted] == [i.document for i in held]
        assert all(s.prompt != h.prompt for s, h in zip(shifted, held))
    else:  # another collection: no source item in common with the main one
        assert not {i.document for i in shifted} & {i.document for i in pool + held}
    again = load_task(name)
    assert [i.prompt for i in again.split("pool", size=20)] == [i.prompt for i in pool[:20]]
    fmt = task.answer_format
    for item in held[:10] + shifted[:10]:
        assert task.label_answer(json.dumps({fmt.field: item.gold}), item.gold).correct
        wrong = next(a for a in fmt.answers if a != item.gold)
        label = task.label_answer(f"Sure: {json.dumps({fmt.field: wrong})} because", item.gold)
        assert label.well_formed and not label.correct and label.label == 0
        prose = task.label_answer("I think the answer is yes.", item.gold)
        assert not prose.well_formed and not prose.correct
    summary = task.summary()
    assert set(summary) == {"name", "description", "example_prompt"} and fmt.field in summary["example_prompt"]
    assert task.system and fmt.field in task.system


def test_truthful_qa_gold_letter_follows_the_options():
    task = load_task("truthful_qa")
    for view in ("held_out", "shifted"):
        for item in task.split(view, size=15):
            letter_text = item.prompt.split(f"{item.gold}) ", 1)[1]
            correct = next(ex for ex in task.examples()[0] if item.id.split("/")[0] == ex.id).extra["correct"]
            assert letter_text.startswith(correct)


def test_user_jsonl_task(tmp_path):
    path = tmp_path / "capitals.jsonl"
    rows = [{"prompt": f"Capital {i}? JSON {{\"city\": str}}", "answer": {"city": c}, **({"split": "shifted"} if i >= 8 else {})}
            for i, c in enumerate(["Paris", "Rome", "Oslo", "Bern", "Lima", "Kyiv", "Riga", "Doha", "Baku", "Suva"])]
    rows[0]["system"] = "Reply with JSON."
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    task = load_task(str(path))
    assert task.name == "capitals" and task.system == "Reply with JSON."
    assert len(task.split("pool")) + len(task.split("held_out")) == 8 and len(task.split("shifted")) == 2
    item = task.split("pool")[0]
    assert task.label_answer(json.dumps({"city": item.gold}), item.gold).correct
    assert not task.label_answer('{"city": "Atlantis"}', item.gold).well_formed


@pytest.mark.parametrize("row, field", [
    ({"answer": {"a": 1}}, "prompt"),
    ({"prompt": "q", "answer": "yes"}, "answer"),
    ({"prompt": "q", "answer": {"a": 1.5}}, "answer"),
    ({"prompt": "q", "answer": {"a": "x"}, "split": "test"}, "split"),
])
def test_user_jsonl_errors_name_line_and_field(tmp_path, row, field):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": "ok", "answer": {"a": "x"}}) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataError) as err:
        load_task(str(path))
    assert err.value.line == 2 and err.value.field == field


def test_unknown_task_is_one_clear_error():
    with pytest.raises(DataError, match="unknown task 'nope'.*bbc_topic"):
        load_tasks(["nope"])
    with pytest.raises(DataError, match="named twice"):
        load_tasks(["fever", "fever"])
