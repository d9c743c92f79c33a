"""Universal verification encoding (docs/method.md § 14, Table 8, Listing 2).

A task instance becomes a chat prompt that asks for a one-field JSON answer, and a completion.
For every source instance ``construct_negative ~ Bernoulli(0.5)`` (seeded): if false the completion
is the correct JSON answer and the verification label is y = 1; if true it is the JSON of another
answer (the inverted boolean, or another choice) and y = 0. Prompts are NOT paired: each source
instance appears once.

Sources: BIG-bench ``task.json`` files (``{"examples": [{"input", "target_scores"}]}``) and user
JSONL rows ``{"prompt", "completion", "label"}`` (plus optional ``id``, ``system``).

JSON parsing rule (§ 14): the substring from the first ``{`` to the first ``}`` is ``json.loads``-ed;
a boolean task reads ``bool(value)``; a string task must name one of its answers; anything else is
a parse error, which counts as a wrong task prediction.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlx_sdm.errors import DataError
from mlx_sdm.jsonl import iter_jsonl_objects

#: Listing 2's system message.
SYSTEM_PROMPT = "You are a helpful AI assistant."
#: Paper seed for construct_negative.
ENCODING_SEED = 0
NEGATIVE_PROBABILITY = 0.5

#: target_scores labels that read as booleans.
_TRUE_WORDS = {"true", "yes", "plausible", "correct", "1"}
_FALSE_WORDS = {"false", "no", "implausible", "incorrect", "0"}


@dataclass(frozen=True)
class TaskFormat:
    """How one task is asked and answered: the JSON field, the instruction and the answer type."""

    name: str
    field: str  # JSON key of the answer, e.g. "correctness"
    instruction: str  # text before the document; ends with the JSON schema sentence
    document_label: str  # e.g. "DOCUMENT"
    answers: tuple[Any, ...]  # (True, False) for boolean tasks, the answer strings otherwise

    @property
    def boolean(self) -> bool:
        return set(self.answers) == {True, False}

    def user_message(self, text: str) -> str:
        return f"{self.instruction} {self.document_label}: {text.strip()}"  # single space after the colon

    def completion(self, answer: Any) -> str:
        return json.dumps({self.field: answer})


FACTCHECK = TaskFormat(
    name="factcheck",
    field="correctness",
    instruction=(
        "Check the following document for hallucinations and/or factual inaccuracies. "
        'Respond using the following JSON: {"correctness": bool}.'
    ),
    document_label="DOCUMENT",
    answers=(True, False),
)
PLAUSIBILITY = TaskFormat(
    name="plausibility",
    field="plausible",
    instruction=(
        "Determine whether the following statement is plausible. "
        'Respond using the following JSON: {"plausible": bool}.'
    ),
    document_label="STATEMENT",
    answers=(True, False),
)
#: News topic classification (BBC News, 5 topics as its folders name them): a task where SmolLM2's own
#: document features carry signal, unlike FEVER (scripts/build_topic_verifier.py).
BBC_TOPICS = ("business", "entertainment", "politics", "sports", "tech")
TOPIC = TaskFormat(
    name="topic",
    field="topic",
    instruction=(
        "Classify the topic of the following news article. "
        'Respond using the following JSON: {"topic": str}.'
    ),
    document_label="ARTICLE",
    answers=BBC_TOPICS,
)
#: The task suite's other formats (mlx_sdm/network/tasks): one JSON field each, as § 14 asks.
YES_NO = TaskFormat(
    name="yes_no",
    field="answer",
    instruction=('Answer the following question with true (yes) or false (no). '
                 'Respond using the following JSON: {"answer": bool}.'),
    document_label="QUESTION",
    answers=(True, False),
)
#: Multiple choice with lettered options; the answer is the letter (the suite shows at most 8 options).
CHOICE_LETTERS = ("A", "B", "C", "D", "E", "F", "G", "H")
MULTIPLE_CHOICE = TaskFormat(
    name="multiple_choice",
    field="answer",
    instruction=("Choose the true answer to the following question. "
                 'Respond using the following JSON: {"answer": str}, with the letter of your choice.'),
    document_label="QUESTION",
    answers=CHOICE_LETTERS,
)
SPAM = TaskFormat(
    name="spam",
    field="spam",
    instruction=("Decide whether the following e-mail is spam. "
                 'Respond using the following JSON: {"spam": bool}.'),
    document_label="EMAIL",
    answers=(True, False),
)
#: Listing 2's sentiment prompt, with a tweet in place of the movie review.
SENTIMENT = TaskFormat(
    name="sentiment",
    field="sentiment",
    instruction=("Classify the sentiment of the following tweet. "
                 'Respond using the following JSON: {"sentiment": str}.'),
    document_label="TWEET",
    answers=("negative", "positive"),
)
#: Known BIG-bench task names -> their format.
TASK_FORMATS: dict[str, TaskFormat] = {
    "fact_checker_fever": FACTCHECK,
    "fever": FACTCHECK,
    "fact_checker": FACTCHECK,
    "sports_understanding": PLAUSIBILITY,
    "bbc_topic": TOPIC,
}


@dataclass
class VerificationDocument:
    """One encoded document. ``label`` is the verification label y (1 acceptable, 0 constructed
    negative); ``task_label`` the correct answer; ``prompt`` the user message (rendered later with
    the model's chat template and ``system``)."""

    id: str
    prompt: str
    completion: str
    label: int
    system: str | None = SYSTEM_PROMPT
    task_label: Any = None
    construct_negative: bool | None = None
    task: str | None = None
    document: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _bool_of(label: str) -> bool | None:
    word = label.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    return None


def _generic_format(name: str, labels: list[str]) -> TaskFormat:
    bools = [_bool_of(x) for x in labels]
    if len(labels) == 2 and set(bools) == {True, False}:
        return TaskFormat(name, "answer", 'Answer the following question. Respond using the following JSON: {"answer": bool}.',
                          "QUESTION", (True, False))
    return TaskFormat(name, "answer", 'Answer the following question. Respond using the following JSON: {"answer": str}.',
                      "QUESTION", tuple(labels))


def read_task_json(path: str | Path) -> tuple[str, list[dict]]:
    """(task name, examples) of a BIG-bench ``task.json``; DataError names what is wrong."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError("no such file; pass a BIG-bench task.json", path=str(path)) from None
    except json.JSONDecodeError as exc:
        from mlx_sdm.jsonl import json_error_text

        raise DataError(f"not valid JSON ({json_error_text(exc)})", path=str(path), line=exc.lineno) from None
    examples = data.get("examples") if isinstance(data, dict) else None
    if not isinstance(examples, list) or not examples:
        raise DataError("expected a non-empty list of examples", path=str(path), field="examples")
    for i, ex in enumerate(examples):
        if not isinstance(ex, dict) or not isinstance(ex.get("input"), str) or not isinstance(ex.get("target_scores"), dict):
            raise DataError(f"example {i} needs a string 'input' and a 'target_scores' object", path=str(path),
                            field=f"examples[{i}]")
    name = path.parent.name if path.name.startswith("task") else path.stem
    return name, examples


def task_format_for(name: str, examples: list[dict]) -> TaskFormat:
    if name in TASK_FORMATS:
        return TASK_FORMATS[name]
    labels: list[str] = []
    for ex in examples:
        for label in ex["target_scores"]:
            if label not in labels:
                labels.append(label)
    return _generic_format(name, labels)


def _correct_answer(fmt: TaskFormat, target_scores: dict[str, float]) -> Any:
    best = max(target_scores, key=lambda k: target_scores[k])
    if fmt.boolean:
        value = _bool_of(best)
        if value is None:
            raise ValueError(f"label {best!r} is not a boolean answer")
        return value
    return best


def encode_task(path: str | Path, *, seed: int = ENCODING_SEED, limit: int | None = None,
                task_format: TaskFormat | None = None, system: str | None = SYSTEM_PROMPT) -> list[VerificationDocument]:
    """Encode a BIG-bench task.json: one document per example, y ~ 1 - Bernoulli(0.5) (seeded)."""
    name, examples = read_task_json(path)
    fmt = task_format or task_format_for(name, examples)
    return encode_examples(name, examples, fmt, seed=seed, limit=limit, system=system, path=path)


def encode_examples(name: str, examples: list[dict], fmt: TaskFormat, *, seed: int = ENCODING_SEED,
                    limit: int | None = None, system: str | None = SYSTEM_PROMPT,
                    path: str | Path | None = None) -> list[VerificationDocument]:
    """Encode BIG-bench-style examples ``{"input", "target_scores"[, "id"]}`` from any source (a
    task.json, or e.g. BBC News articles with ``{"input": article, "target_scores": {topic: 1}}``)."""
    rng = np.random.default_rng(seed)
    documents = []
    for i, ex in enumerate(examples[:limit] if limit else examples):
        try:
            answer = _correct_answer(fmt, ex["target_scores"])
        except ValueError as exc:
            raise DataError(str(exc), path=str(path) if path is not None else name,
                            field=f"examples[{i}].target_scores") from None
        negative = bool(rng.random() < NEGATIVE_PROBABILITY)
        if negative:
            others = [a for a in fmt.answers if a != answer]
            given = others[0] if len(others) == 1 else others[int(rng.integers(len(others)))]
        else:
            given = answer
        documents.append(
            VerificationDocument(
                id=f"{name}-{ex.get('id', i)}",
                prompt=fmt.user_message(ex["input"]),
                completion=fmt.completion(given),
                label=0 if negative else 1,
                system=system,
                task_label=answer,
                construct_negative=negative,
                task=fmt.name,
                document=ex["input"],
            )
        )
    return documents


def first_json_object(text: str) -> Any | None:
    """§ 14 parsing rule: the substring from the first ``{`` to the first ``}``, json.loads-ed; None on any error."""
    start = text.find("{")
    end = text.find("}", start + 1) if start >= 0 else -1
    if start < 0 or end < 0:
        return None
    try:
        return json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None


def parse_answer(text: str, fmt: TaskFormat) -> Any | None:
    """§ 14 parsing rule applied to a task: the first JSON object's field; None on any error."""
    obj = first_json_object(text)
    if not isinstance(obj, dict) or fmt.field not in obj:
        return None
    value = obj[fmt.field]
    if fmt.boolean:
        try:
            return bool(value)
        except Exception:
            return None
    return value if value in fmt.answers else None


def read_text_jsonl(path: str | Path, *, require_label: bool = True,
                    default_system: str | None = SYSTEM_PROMPT) -> list[VerificationDocument]:
    """User rows ``{"prompt": str, "completion": str, "label": 0|1}`` (+ optional ``id``, ``system``;
    rows without ``system`` get ``default_system``)."""
    path = Path(path)
    documents: list[VerificationDocument] = []
    for number, row in iter_jsonl_objects(path):
        documents.append(text_row_to_document(row, path=str(path), line=number, require_label=require_label,
                                              default_system=default_system))
    if not documents:
        raise DataError("no rows; expected JSONL lines {\"prompt\", \"completion\", \"label\"}", path=str(path))
    return documents


#: Said where an embedding row {id, label, embedding} is read as a text row.
EMBEDDING_ROW_HINT = ("missing: this file holds embedding rows {id, label, embedding}, but this command needs text rows "
                      "{prompt, completion, label} (a document verifier judges text; embedding rows go with an embedding "
                      "estimator made by `mlx-sdm train` on embedding rows)")


def is_text_row(row: dict) -> bool:
    return isinstance(row, dict) and "prompt" in row and "completion" in row and "embedding" not in row


def text_row_to_document(row: dict, *, path: str | None = None, line: int | None = None,
                         require_label: bool = True, default_system: str | None = SYSTEM_PROMPT) -> VerificationDocument:
    if "embedding" in row and "prompt" not in row:
        raise DataError(EMBEDDING_ROW_HINT, path=path, line=line, field="prompt")
    for key in ("prompt", "completion"):
        if key not in row:
            raise DataError("missing; a text row is {\"prompt\": str, \"completion\": str, \"label\": 0|1}",
                            path=path, line=line, field=key)
        if not isinstance(row[key], str):
            raise DataError(f"must be a string, got {type(row[key]).__name__}", path=path, line=line, field=key)
    if not row["completion"].strip():
        raise DataError("the completion is empty; there is nothing to verify", path=path, line=line, field="completion")
    if not row["prompt"].strip():
        raise DataError("the prompt is empty", path=path, line=line, field="prompt")
    label = row.get("label")
    if label is None:
        if require_label:
            raise DataError("missing; give 1 (acceptable) or 0 (not acceptable)", path=path, line=line, field="label")
        label = -1
    elif isinstance(label, bool) or label not in (0, 1):
        raise DataError(f"{label!r} is not 0 or 1", path=path, line=line, field="label")
    system = row.get("system", default_system)
    if system is not None and not isinstance(system, str):
        raise DataError("must be a string or null", path=path, line=line, field="system")
    return VerificationDocument(
        id=str(row.get("id", f"{Path(path).stem if path else 'row'}-{line}")),
        prompt=row["prompt"],
        completion=row["completion"],
        label=int(label),
        system=system,
    )


def benchmark_splits(documents: list[VerificationDocument], *, pool_size: int, test_size: int,
                     seed: int = ENCODING_SEED) -> tuple[list[VerificationDocument], list[VerificationDocument]]:
    """Disjoint (train ∪ calibration pool, held-out test) from one seeded shuffle of a task's documents."""
    if pool_size + test_size > len(documents):
        raise DataError(f"asked for {pool_size} + {test_size} documents but the task has {len(documents)}")
    order = np.random.default_rng(seed).permutation(len(documents))
    pool = [documents[i] for i in order[:pool_size]]
    test = [documents[i] for i in order[pool_size : pool_size + test_size]]
    return pool, test
