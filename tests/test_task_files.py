"""The files a person has, read as a task (network/tasks/task_files.py): a CSV/TSV or JSONL table of a text and a
label column, mlx-lm's chat and completions rows, the task rows; each form detected and said in one line; every
bad file one DataError naming the file, line and column; repeated rows kept once; the same prompt with two answers
refused naming both lines."""

from __future__ import annotations

import json
import re

import pytest

from mlx_sdm.errors import DataError
from mlx_sdm.network.tasks.registry import load_task, user_task
from mlx_sdm.network.tasks.task_files import TableColumns, read_task_file

JUNK = TableColumns(instruction="Is this e-mail junk?")


def _csv(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_csv_of_text_and_label_becomes_the_shipped_tasks_prompts(tmp_path):
    path = _csv(tmp_path / "mail.csv", ["text,label", "Win a prize now,spam", '"Lunch at noon, ok?",ham',
                                        "Cheap pills,spam"])
    task = user_task(path, JUNK)
    items = task.split("pool") + task.split("held_out")
    prompt = next(i.prompt for i in items if i.gold == "ham")
    assert prompt == ('Is this e-mail junk? Respond using the following JSON: {"label": str}, where the label is one '
                      'of ham, spam. TEXT: Lunch at noon, ok?')
    assert task.name == "mail" and task.answer_format.field == "label" and set(task.answer_format.answers) == {"spam", "ham"}
    assert task.prompt_prefix.startswith("Is this e-mail junk? Respond using the following JSON")  # the chat routes by it
    assert task.label_answer('{"label": "ham"}', "ham").correct
    assert len(task.notes) == 1 and "a table of a text column and a label column: 3 rows" in task.notes[0]


def test_a_tsv_with_other_columns_true_false_labels_and_another_field(tmp_path):
    path = _csv(tmp_path / "claims.tsv", ["id\tclaim\tverdict", "1\tThe sky is green\tFALSE", "2\tWater is wet\ttrue"])
    task = user_task(path, TableColumns("claim", "verdict", "Is this claim true", "correct"))
    assert task.answer_format.answers == (True, False) and task.answer_format.field == "correct"
    assert task.split("pool")[0].prompt.startswith('Is this claim true. Respond using the following JSON: {"correct": bool}.')


def test_chat_and_completions_rows_with_json_answers_or_bare_labels(tmp_path):
    ask = 'Is this e-mail junk? Respond using the following JSON: {"junk": bool}. EMAIL: '
    chat = _jsonl(tmp_path / "chat.jsonl", [
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": ask + "win"},
                      {"role": "assistant", "content": '{"junk": true}'}]},
        {"messages": [{"role": "user", "content": ask + "lunch"}, {"role": "assistant", "content": '{"junk": false}'}]}])
    read = read_task_file(chat)
    assert read.form == "chat" and read.field == "junk" and read.system == "Be brief." and read.instruction == ""
    assert [r.prompt for r in read.rows] == [ask + "win", ask + "lunch"] and read.values == (True, False)
    bare = _jsonl(tmp_path / "bare.jsonl", [{"prompt": "win a prize", "completion": "spam"},
                                            {"prompt": "lunch?", "completion": " ham"}])
    read = read_task_file(bare, JUNK)
    assert read.form == "completions" and [r.value for r in read.rows] == ["spam", "ham"]
    assert read.rows[1].prompt.endswith("TEXT: lunch?") and read.rows[1].prompt.startswith("Is this e-mail junk?")
    columns = _jsonl(tmp_path / "cols.jsonl", [{"body": "win", "tag": 1}, {"body": "lunch", "tag": 0}])
    read = read_task_file(columns, TableColumns("body", "tag", "Junk?"))
    assert read.form == "table" and read.values == (1, 0) and '{"label": int}' in read.instruction


@pytest.mark.parametrize("name, content, columns, message", [
    ("missing.csv", "body,tag\nhello,a\n", JUNK,
     r"missing.csv: field '--text-column': no column 'text'; the columns are 'body', 'tag': name the right one"),
    ("empty.csv", "", JUNK, r"empty.csv: the file is empty"),
    ("empty.jsonl", "\n", JUNK, r"empty.jsonl: the file is empty"),
    ("header.csv", "text,label\n", JUNK, r"header.csv: the table has a header but no rows"),
    ("one.csv", "text,label\na,spam\nb,spam\n", JUNK, r"one.csv: field 'label': every row has the label 'spam'"),
    ("free.csv", "text,label\n" + "".join(f"t{i},reply number {i}\n" for i in range(30)), JUNK,
     r"free.csv: field 'label': looks like free text, not labels: 30 different values in 30 rows"),
    ("blank.csv", "text,label\na,spam\n  ,ham\n", JUNK, r"blank.csv:3: field 'text': empty text"),
    ("noask.csv", "text,label\na,spam\nb,ham\n", TableColumns(), r"noask.csv: field '--instruction': give the question"),
    ("mixed.jsonl", '{"prompt": "a", "completion": "spam"}\n{"prompt": "b", "completion": "{\\"label\\": \\"x\\"}"}\n',
     JUNK, r"mixed.jsonl:2: field 'answer': the answers mix one-field JSON and bare labels"),
    ("odd.jsonl", '{"question": "a"}\n', JUNK, r"odd.jsonl:1: not a task file: its first row has the keys question"),
])
def test_a_bad_file_is_one_line_naming_file_line_and_column(tmp_path, name, content, columns, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as caught:
        user_task(path, columns)
    assert re.search(message, str(caught.value)) and len(str(caught.value).splitlines()) == 1, str(caught.value)


def test_a_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes("text,label\ncaf\u00e9 ok,ham\nna\u00efve,spam\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin.csv:2: not UTF-8 text \(byte 0xe9\); save the file as UTF-8"):
        user_task(path, JUNK)


def test_repeated_rows_are_kept_once_and_two_answers_to_one_prompt_are_refused(tmp_path):
    ask = 'Q? Respond using the following JSON: {"a": bool}. X: '
    rows = [{"prompt": ask + "one", "answer": {"a": True}}, {"prompt": ask + "two", "answer": {"a": False}},
            {"prompt": ask + "one", "answer": {"a": True}}, {"prompt": ask + "one ", "answer": {"a": True}}]
    task = load_task(str(_jsonl(tmp_path / "rep.jsonl", rows)))
    assert len(task.examples()[0]) == 2
    assert task.notes[1].endswith("rep.jsonl: 2 rows repeated an earlier row's prompt and answer: kept once")
    rows.append({"prompt": ask + "two", "answer": {"a": True}})
    with pytest.raises(DataError, match=r"rep.jsonl: field 'answer': lines 2 and 5 have the same prompt with two "
                                        r"answers \(False and True\): keep the right one"):
        load_task(str(_jsonl(tmp_path / "rep.jsonl", rows)))


def test_too_few_rows_names_the_minimum_the_file_needs(tmp_path):
    """A 40-row file is told the count of rows that passes (58 with the defaults), and 58 rows do pass."""
    from pathlib import Path

    from mlx_sdm.usecases.finetune_plan import TaskFinetuneArgs, minimum_rows, split_task

    args = TaskFinetuneArgs(tasks=(), out=Path("x"))
    assert minimum_rows(args) == 58

    def task_of(n):
        lines = ["text,label"] + [f"text number {i},{'ab'[i % 2]}" for i in range(n)]
        return user_task(_csv(tmp_path / "few.csv", lines), JUNK)

    with pytest.raises(DataError, match=r"few.csv: task few has 40 rows; it needs at least 58 \(a fifth is held out "
                                        r".*\): add 18 rows"):
        split_task(task_of(40), args)
    split = split_task(task_of(58), args)
    assert len(split.verifier) == 20 and len(split.train) == 23
    with pytest.raises(DataError):
        split_task(task_of(57), args)


def test_a_split_column_marks_a_tables_shifted_rows(tmp_path):
    lines = ["text,label,split"] + [f"mail {i},{'ab'[i % 2]},{'shifted' if i >= 60 else ''}" for i in range(70)]
    task = user_task(_csv(tmp_path / "mail.csv", lines), JUNK)
    main, shifted = task.examples()
    assert (len(main), len(shifted)) == (60, 10) and "70 rows (10 marked shifted)" in task.notes[0]
    assert sorted(i.prompt.rsplit("TEXT: ", 1)[1] for i in task.split("shifted")) == sorted(f"mail {i}" for i in
                                                                                            range(60, 70))
