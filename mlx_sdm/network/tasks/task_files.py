"""The files a person has, read as one task: what ``finetune --task FILE`` accepts, in four forms, told apart by
the file itself (``build-verifier --tasks FILE`` reads them too, without the flags a table's prompts need):

- **rows** (the task format): JSONL ``{"prompt": "...", "answer": {FIELD: VALUE}}`` (+ ``"id"``, ``"split":
  "shifted"``, ``"system"`` on the first row); every prompt asks for the JSON itself.
- **table**: a CSV or TSV file (``.csv``, ``.tsv``, read with Python's csv module), or JSONL rows of plain
  columns, holding a text column and a label column (``--text-column``, ``--label-column``; default ``text`` and
  ``label``). The prompts are written here, as the shipped tasks phrase theirs: the instruction
  (``--instruction``), then ``Respond using the following JSON: {"label": str}, where the label is one of a, b.``,
  then ``TEXT: <the text>``; the answer is ``{FIELD: label}`` (``--field``, default ``label``). ``true``/``false``
  labels become a boolean answer (``{"label": bool}``).
- **chat**: mlx-lm's ``{"messages": [{"role": ..., "content": ...}, ...]}``: the last assistant message is the
  answer, the user message before it the question, a system message the task's system prompt.
- **completions**: mlx-lm's ``{"prompt": "...", "completion": "..."}``.

In the chat and completions forms the answer is either the task's one-field JSON (``{"label": "spam"}``: the
question is then the prompt as it is, and must ask for that JSON, as a rows-form prompt does) or a bare label
(``spam``: the question is then the text, and the prompt is written as for a table). One file holds one kind.

Rows with the same prompt and the same answer are kept once (a note says how many); the same prompt with two
answers is refused, naming both lines. Every other refusal is one DataError naming the file, line and column.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from mlx_sdm.errors import DataError
from mlx_sdm.jsonl import first_jsonl_object, iter_jsonl_objects

TABLE_SUFFIXES = (".csv", ".tsv")
#: A label column with more distinct values than this is free text, not classes.
MAX_LABELS = 50
#: ... and so is one where most rows' labels appear on that row only (from this many rows on).
FREE_TEXT_MIN_ROWS = 20
#: The word before the text in a written prompt (the shipped tasks say ``EMAIL:``, ``ARTICLE:``, ...).
TEXT_LABEL = "TEXT"
FORMS = {"rows": "task rows ({\"prompt\", \"answer\": {field: value}})",
         "table": "a table of a text column and a label column",
         "chat": "mlx-lm chat rows ({\"messages\": [...]})",
         "completions": "mlx-lm completion rows ({\"prompt\", \"completion\"})"}


@dataclass(frozen=True)
class TableColumns:
    """How a table (or a chat/completions file of bare labels) becomes prompts and JSON answers."""

    text: str = "text"
    label: str = "label"
    instruction: str | None = None  # the question before each text, e.g. "Is this e-mail junk?"
    field: str = "label"  # the answer's JSON field


@dataclass(frozen=True)
class FileRow:
    """One row of the task as the model is asked it: the prompt, the answer value, where it came from."""

    line: int
    id: str
    prompt: str
    value: Any
    shifted: bool = False


@dataclass(frozen=True)
class TaskFile:
    """A file read as a task: its form, rows (repeats dropped), answer field and values, the instruction its
    written prompts start with ("" when the file's prompts are its own), system prompt and notes to show."""

    path: Path
    form: str
    rows: tuple[FileRow, ...]
    field: str
    values: tuple[Any, ...]
    instruction: str = ""
    system: str | None = None
    notes: tuple[str, ...] = field(default=())


def read_task_file(path: Path, columns: TableColumns = TableColumns()) -> TaskFile:
    """The task in ``path``, whatever its form (module docstring); DataError naming file, line and field."""
    form = detect_form(path, columns)
    if form == "table":
        read = _table(path, columns)
    elif form == "rows":
        read = _task_rows(path)
    else:
        read = _pairs(path, form, columns)
    rows, repeats = without_repeats(read.rows, path)
    notes = [form_line(read, len(rows))]
    if repeats:
        notes.append(f"{path}: {repeats} row{'s' if repeats > 1 else ''} repeated an earlier row's prompt and answer: "
                     "kept once")
    return TaskFile(path, form, rows, read.field, read.values, read.instruction, read.system, tuple(notes))


def detect_form(path: Path, columns: TableColumns = TableColumns()) -> str:
    """"table" for a .csv/.tsv file; for JSONL, by the first row's keys."""
    if path.suffix.lower() in TABLE_SUFFIXES:
        return "table"
    first = first_jsonl_object(path)
    if first is None:
        raise DataError("the file is empty; a task needs labelled rows (see `mlx-sdm finetune --help`)", path=str(path))
    if "messages" in first:
        return "chat"
    if "answer" in first:
        return "rows"
    if "prompt" in first and "completion" in first:
        return "completions"
    if columns.text in first or columns.label in first:
        return "table"
    raise DataError(f"not a task file: its first row has the keys {', '.join(first) or 'none'}; give rows "
                    '{"prompt", "answer": {field: value}}, {"messages": [...]}, {"prompt", "completion"}, or a text '
                    "and a label column (--text-column NAME --label-column NAME)", path=str(path), line=1)


def form_line(read: TaskFile, kept: int) -> str:
    """The one line that says how the file was read."""
    shifted = sum(r.shifted for r in read.rows)
    counts = f"{kept} rows" + (f" ({shifted} marked shifted)" if shifted else "")
    how = f"{FORMS[read.form]}: {counts}, answers {{\"{read.field}\": ...}} of {len(read.values)} values"
    if read.instruction:
        how += f"; prompts written as \"{read.instruction} {TEXT_LABEL}: ...\""
    return f"{read.path}: {how}"


# ----------------------------------------------------------------------------------------- the forms
def _task_rows(path: Path) -> TaskFile:
    """The task format: every row checked, one answer field."""
    rows, field_name, system = [], None, None
    for number, row in iter_jsonl_objects(path):
        check_task_row(row, path, number)
        if not rows and isinstance(row.get("system"), str):
            system = row["system"]
        key, value = next(iter(row["answer"].items()))
        if field_name is None:
            field_name = key
        elif key != field_name:
            raise DataError(f"every row must answer the same JSON field; this row names {key!r}, the first named "
                            f"{field_name!r}", path=str(path), line=number, field="answer")
        rows.append(FileRow(number, str(row.get("id", f"{path.stem}-{number}")), row["prompt"], value,
                            row.get("split") == "shifted"))
    _need_rows(rows, path)
    return TaskFile(path, "rows", tuple(rows), field_name or "", _values(r.value for r in rows), system=system)


def check_task_row(row: Any, path: Path, number: int) -> None:
    """One row of the task format: a prompt, a one-field answer of a plain value, a known split."""
    if not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
        raise DataError("must be a non-empty string", path=str(path), line=number, field="prompt")
    answer = row.get("answer")
    if not isinstance(answer, dict) or len(answer) != 1:
        raise DataError('must be a one-field JSON object such as {"answer": "yes"}', path=str(path), line=number,
                        field="answer")
    value = next(iter(answer.values()))
    if not isinstance(value, (bool, str, int)) or isinstance(value, float):
        raise DataError("the answer value must be a string, a boolean or an integer", path=str(path), line=number,
                        field="answer")
    split = row.get("split")
    if split not in (None, "main", "shifted"):
        raise DataError(f"{split!r} is not \"main\" or \"shifted\"", path=str(path), line=number, field="split")


def _table(path: Path, columns: TableColumns) -> TaskFile:
    """A CSV/TSV file or JSONL of plain columns: (line, text, label, shifted) each, then the prompts written."""
    if path.suffix.lower() in TABLE_SUFFIXES:
        records = _csv_records(path)
    else:
        records = list(iter_jsonl_objects(path))
    if not records:
        raise DataError("the table has a header but no rows", path=str(path))
    present = list(records[0][1])
    for wanted, flag in ((columns.text, "--text-column"), (columns.label, "--label-column")):
        if wanted not in present:
            raise DataError(f"no column {wanted!r}; the columns are {', '.join(map(repr, present))}: name the right "
                            f"one with {flag} NAME", path=str(path), field=flag)
    triples = []
    for number, record in records:
        text = record.get(columns.text)
        if not isinstance(text, str) or not text.strip():
            raise DataError("empty text: every row needs a text to answer about (or remove the row)", path=str(path),
                            line=number, field=columns.text)
        label = _label_value(record.get(columns.label), path, number, columns.label)
        triples.append((number, text, label, str(record.get("split", "")).strip() == "shifted"))
    return written(path, "table", triples, columns)


def _csv_records(path: Path) -> list[tuple[int, dict]]:
    """(line number, {column: value}) of each row under the header (UTF-8; a comma- or tab-separated file)."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise DataError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the file as UTF-8 (e.g. iconv -f latin1 "
                        "-t utf-8 IN > OUT)", path=str(path), line=line) from None
    if not text.strip():
        raise DataError("the file is empty; a task needs a header line (e.g. text,label) and labelled rows",
                        path=str(path))
    delimiter = "\t" if path.suffix.lower() == ".tsv" or "\t" in text.splitlines()[0] else ","
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    out = []
    try:
        start = 2
        for record in reader:
            if any((v or "").strip() for k, v in record.items() if k is not None):
                out.append((start, {k: v for k, v in record.items() if k is not None}))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise DataError(f"not a readable table ({exc})", path=str(path), line=reader.line_num) from None
    return out


def _label_value(value: Any, path: Path, number: int, column: str) -> Any:
    """A label as the answer holds it: a string (stripped), a boolean or an integer."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, bool) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise DataError(f"needs a label (a word, true/false or a whole number), got {value!r}", path=str(path), line=number,
                    field=column)


def _pairs(path: Path, form: str, columns: TableColumns) -> TaskFile:
    """mlx-lm's chat or completions rows: (question, answer, system) each; JSON answers or bare labels."""
    pairs, system = [], None
    for number, row in iter_jsonl_objects(path):
        question, answer, row_system = (_chat_turns if form == "chat" else _completion)(row, path, number)
        system = system if system is not None else row_system
        pairs.append((number, question, answer.strip()))
    _need_rows(pairs, path)
    as_json = [_json_answer(answer) for _, _, answer in pairs]
    kinds = {value is not None for value in as_json}
    if len(kinds) > 1:
        bad = next(n for (n, _, _), v in zip(pairs, as_json) if (v is None) != (as_json[0] is None))
        raise DataError("the answers mix one-field JSON and bare labels; give every answer the same way",
                        path=str(path), line=bad, field="answer")
    if as_json[0] is None:  # bare labels: the question is the text, the prompt is written as for a table
        read = written(path, form, [(n, q, a, False) for n, q, a in pairs], columns)
        return TaskFile(path, form, read.rows, read.field, read.values, read.instruction, system)
    names = {next(iter(v)) for v in as_json}
    if len(names) > 1:
        raise DataError(f"every answer must name the same JSON field; found {', '.join(sorted(names))}", path=str(path),
                        field="answer")
    rows = [FileRow(n, f"{path.stem}-{n}", q, next(iter(v.values()))) for (n, q, _), v in zip(pairs, as_json)]
    return TaskFile(path, form, tuple(rows), names.pop(), _values(r.value for r in rows), system=system)


def _chat_turns(row: dict, path: Path, number: int) -> tuple[str, str, str | None]:
    messages = row.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise DataError('must be a list of {"role", "content"} messages', path=str(path), line=number, field="messages")
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    users = [m for m in messages[:last or 0] if m.get("role") == "user"]
    if last is None or not users:
        raise DataError("needs a user message and, after it, the assistant's answer", path=str(path), line=number,
                        field="messages")
    system = next((m.get("content") for m in messages if m.get("role") == "system"), None)
    question, answer = users[-1].get("content"), messages[last].get("content")
    if not isinstance(question, str) or not question.strip() or not isinstance(answer, str) or not answer.strip():
        raise DataError("the user message and the answer must be non-empty text", path=str(path), line=number,
                        field="messages")
    return question, answer, system if isinstance(system, str) else None


def _completion(row: dict, path: Path, number: int) -> tuple[str, str, str | None]:
    for key in ("prompt", "completion"):
        if not isinstance(row.get(key), str) or not row[key].strip():
            raise DataError("must be a non-empty string", path=str(path), line=number, field=key)
    return row["prompt"], row["completion"], None


def _json_answer(text: str) -> dict | None:
    """A one-field JSON object of a plain value, or None (then the answer is a bare label)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(value, dict) and len(value) == 1 and isinstance(next(iter(value.values())), (bool, str, int)) \
            and not isinstance(next(iter(value.values())), float):
        return value
    return None


# ----------------------------------------------------------------------------------------- the prompts written
def written(path: Path, form: str, triples: list[tuple[int, str, Any, bool]], columns: TableColumns) -> TaskFile:
    """Texts and labels → the shipped tasks' prompt (instruction, the JSON asked for, the text) and answers."""
    if not columns.instruction or not columns.instruction.strip():
        raise DataError('give the question asked before each text: --instruction "Is this e-mail junk?" (the chat '
                        "sends a question that starts with it to this task)", path=str(path), field="--instruction")
    labels = [label for _, _, label, _ in triples]
    check_classes(labels, path, columns.label)
    boolean = all(isinstance(v, bool) or str(v).lower() in ("true", "false") for v in labels)
    if boolean:
        labels = [v if isinstance(v, bool) else str(v).lower() == "true" for v in labels]
    values = _values(labels)
    instruction = answer_instruction(columns.instruction, columns.field, values, boolean)
    rows = [FileRow(n, f"{path.stem}-{n}", f"{instruction} {TEXT_LABEL}: {text.strip()}", label, shifted)
            for (n, text, _, shifted), label in zip(triples, labels)]
    return TaskFile(path, form, tuple(rows), columns.field, values, instruction)


def answer_instruction(question: str, field_name: str, values: tuple, boolean: bool) -> str:
    """``Is this e-mail junk? Respond using the following JSON: {"label": bool}.`` (with ``, where the label is one
    of a, b.`` for words): the sentence the shipped tasks and examples/mail_triage.jsonl use."""
    question = question.strip()
    question += "" if question[-1] in ".?!:" else "."
    if boolean:
        return f'{question} Respond using the following JSON: {{"{field_name}": bool}}.'
    kind = "int" if all(isinstance(v, int) for v in values) else "str"
    listed = ", ".join(str(v) for v in sorted(values, key=str))
    return f'{question} Respond using the following JSON: {{"{field_name}": {kind}}}, where the {field_name} is one of {listed}.'


def check_classes(labels: list, path: Path, column: str) -> None:
    """A label column holds a few classes, at least two: not one value, not free text."""
    counts = Counter(json.dumps(v) for v in labels)
    if len(counts) < 2:
        raise DataError(f"every row has the label {labels[0]!r}; a task needs at least two labels to learn and to "
                        "check", path=str(path), field=column)
    once = sum(1 for n in counts.values() if n == 1)
    if len(counts) > MAX_LABELS or (len(labels) >= FREE_TEXT_MIN_ROWS and once > len(labels) / 2):
        raise DataError(f"looks like free text, not labels: {len(counts)} different values in {len(labels)} rows "
                        f"({once} on one row only); a label column holds a few classes (at most {MAX_LABELS}): name "
                        "it with --label-column NAME", path=str(path), field=column)


def without_repeats(rows: Iterable[FileRow], path: Path) -> tuple[tuple[FileRow, ...], int]:
    """Rows with the same prompt and answer kept once (the first); the same prompt with two answers refused."""
    first: dict[str, FileRow] = {}
    kept, repeats = [], 0
    for row in rows:
        seen = first.setdefault(row.prompt.strip(), row)
        if seen is row:
            kept.append(row)
        elif seen.value == row.value and type(seen.value) is type(row.value):
            repeats += 1
        else:
            raise DataError(f"lines {seen.line} and {row.line} have the same prompt with two answers ({seen.value!r} "
                            f"and {row.value!r}): keep the right one", path=str(path), field="answer")
    return tuple(kept), repeats


def _values(values: Iterable[Any]) -> tuple[Any, ...]:
    """The answer values in first-seen order (booleans as (True, False), as the suite's formats hold them)."""
    seen = list(dict.fromkeys((type(v).__name__, v) for v in values))
    found = tuple(v for _, v in seen)
    return (True, False) if found and all(isinstance(v, bool) for v in found) else found


def _need_rows(rows: list, path: Path) -> None:
    if not rows:
        raise DataError("the file is empty; a task needs labelled rows (see `mlx-sdm finetune --help`)", path=str(path))
