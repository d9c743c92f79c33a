"""Labelled embedding sets and the JSONL reader (rows ``{"id": str, "label": int, "embedding": [...]}``;
a path ending in ``.sdmdataset`` is read as that bundle, sdmdataset.py).

Every problem with the input raises :class:`~mlx_sdm.errors.DataError` naming the file, the line and
the field, and saying how to fix it. Nothing is written before the whole input has been checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlx_sdm.calibration.sdmdataset import is_sdmdataset_path, read_bundle
from mlx_sdm.errors import DataError
from mlx_sdm.jsonl import iter_jsonl_objects

#: Fewer rows of a class than this in the training or calibration file is refused: Alg. 1 splits
#: the pool in half per class, and the eCDFs and Alg. 3 need several points of every class.
MIN_PER_CLASS: int = 5


@dataclass
class LabelledSet:
    """N instances: ids, float32 embeddings [N, D], int64 labels [N] (−1 where unlabelled), texts."""

    ids: list[str]
    embeddings: np.ndarray
    labels: np.ndarray
    texts: list[str | None] | None = None
    path: str | None = None

    def __post_init__(self) -> None:
        self.embeddings = np.ascontiguousarray(self.embeddings, dtype=np.float32)
        self.labels = np.asarray(self.labels, dtype=np.int64)
        if self.embeddings.ndim != 2:
            raise DataError("embeddings must be a 2-D matrix [N, D]", path=self.path, field="embedding")
        if not (len(self.ids) == len(self.embeddings) == len(self.labels)):
            raise DataError(f"ids ({len(self.ids)}), embeddings ({len(self.embeddings)}) and labels "
                            f"({len(self.labels)}) differ in length", path=self.path)
        if self.texts is not None and len(self.texts) != len(self.ids):
            raise DataError("texts and ids differ in length", path=self.path, field="text")

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    def subset(self, index: np.ndarray) -> "LabelledSet":
        index = np.asarray(index, dtype=np.int64)
        return LabelledSet([self.ids[i] for i in index], self.embeddings[index], self.labels[index],
                           None if self.texts is None else [self.texts[i] for i in index], self.path)

    @staticmethod
    def concat(a: "LabelledSet", b: "LabelledSet") -> "LabelledSet":
        texts = None
        if a.texts is not None or b.texts is not None:
            texts = (a.texts or [None] * len(a)) + (b.texts or [None] * len(b))
        return LabelledSet(a.ids + b.ids, np.concatenate([a.embeddings, b.embeddings]),
                           np.concatenate([a.labels, b.labels]), texts)


def parse_label(value, *, path: str | None, line: int | None, field: str = "label") -> int:
    """A class label: a non-negative integer (JSON int, or a float with no fractional part)."""
    if isinstance(value, bool) or value is None:
        raise DataError(f"expected a non-negative integer class label, got {value!r}", path=path, line=line, field=field)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise DataError(f"expected a non-negative integer class label (0..C-1), got {value!r}", path=path, line=line, field=field)
    if value < 0:
        raise DataError(f"class labels are 0..C-1, got {value}", path=path, line=line, field=field)
    return value


def parse_embedding(value, *, path: str | None, line: int | None, width: int | None,
                    width_from: str | None = None) -> list[float]:
    """A finite, non-empty embedding of ``width`` numbers; ``width_from`` says who set that width (the
    estimator the rows are for, the training file), where not the file's own earlier rows."""
    if not isinstance(value, list) or not value:
        raise DataError("expected a non-empty list of numbers", path=path, line=line, field="embedding")
    for i, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise DataError(f"entry {i} is {x!r}, not a number", path=path, line=line, field="embedding")
        if not math.isfinite(x):
            raise DataError(f"entry {i} is {x!r}; embeddings must be finite (no NaN or inf)", path=path, line=line, field="embedding")
    if width is not None and len(value) != width:
        if width_from is not None:
            raise DataError(f"this row has {len(value)} numbers, but {width_from} is {width} wide; embed these rows "
                            "with the model that embedded its rows",
                            path=path, line=line, field="embedding")
        raise DataError(f"has {len(value)} numbers but earlier rows have {width}; every row needs the same width",
                        path=path, line=line, field="embedding")
    return value


def read_embedding_jsonl(path: str | Path, require_label: bool = True, expected_dim: int | None = None,
                        expected_by: str | None = None) -> LabelledSet:
    """Read ``{"id", "label", "embedding", ["text"]}`` rows (``expected_dim`` wide, set by ``expected_by``,
    e.g. "the estimator est/", when given). Blank lines are skipped; a missing
    ``id`` becomes ``<file name>:<line>``. ``require_label=False`` reads unlabelled rows (label −1)."""
    if is_sdmdataset_path(path):
        return read_embedding_bundle(path, require_label, expected_dim)
    path = str(path)
    ids: list[str] = []
    rows: list[list[float]] = []
    labels: list[int] = []
    texts: list[str | None] = []
    width = expected_dim
    seen: dict[str, int] = {}
    for number, row in iter_jsonl_objects(path, missing="no such file; pass a JSONL file of {id, label, embedding} rows"):
        if "embedding" not in row and ("prompt" in row or "completion" in row):
            _raise_text_row_error(row, path=path, line=number)
        if "embedding" not in row:
            raise DataError("missing; each row needs \"embedding\": [numbers]", path=path, line=number, field="embedding")
        vec = parse_embedding(row["embedding"], path=path, line=number, width=width,
                              width_from=(expected_by or "the estimator") if not rows and expected_dim is not None else None)
        width = len(vec)
        if "label" in row and row["label"] is not None:
            labels.append(parse_label(row["label"], path=path, line=number))
        elif require_label:
            raise DataError("missing; each row needs an integer \"label\" (0..C-1)", path=path, line=number, field="label")
        else:
            labels.append(-1)
        rid = str(row["id"]) if row.get("id") is not None else f"{Path(path).name}:{number}"
        if rid in seen:
            raise DataError(f"id {rid!r} already used on line {seen[rid]}; ids must be unique", path=path, line=number, field="id")
        seen[rid] = number
        ids.append(rid)
        text = row.get("text")
        texts.append(text if isinstance(text, str) else None)
        rows.append(vec)
    if not rows:
        raise DataError("no rows; expected one JSON object per line", path=path)
    return LabelledSet(ids, np.asarray(rows, dtype=np.float32), np.asarray(labels, dtype=np.int64),
                       texts if any(t is not None for t in texts) else None, path)


def read_embedding_bundle(path: str | Path, require_label: bool = True, expected_dim: int | None = None) -> LabelledSet:
    """The rows of a ``.sdmdataset`` bundle (sdmdataset.py) as a LabelledSet: each row needs an
    embedding; label −1 is unlabelled (refused where labels are required), ``document`` is the text."""
    path = str(path)
    bundle = read_bundle(path)
    for number, (row, emb) in enumerate(zip(bundle.rows, bundle.embeddings), start=1):
        if emb is None:
            raise DataError("this row has no cached embedding (no embeddingRow); embed the data set first",
                            path=path, line=number, field="embeddingRow")
        if row["label"] == -99 or (row["label"] == -1 and require_label):
            raise DataError(f"label {row['label']} here, but every row needs a class label 0..C-1", path=path,
                            line=number, field="label")
        if expected_dim is not None and len(emb) != expected_dim:
            raise DataError(f"has {len(emb)} numbers but {expected_dim} are expected", path=path, line=number,
                            field="embedding")
    texts = [r.get("document") if isinstance(r.get("document"), str) else None for r in bundle.rows]
    embeddings = [e for e in bundle.embeddings if e is not None]  # every row has one (checked above)
    return LabelledSet([r["id"] for r in bundle.rows], np.stack(embeddings),
                       np.array([r["label"] for r in bundle.rows], np.int64),
                       texts if any(t is not None for t in texts) else None, path)


def _raise_text_row_error(row: dict, *, path: str, line: int) -> None:
    """A row with "prompt"/"completion" but no "embedding" read as an embedding row: name the real problem."""
    for key in ("prompt", "completion"):
        if key not in row:
            raise DataError("missing; a text row needs \"prompt\" and \"completion\" strings (and \"label\" 0/1 "
                            "for training), an embedding row needs \"embedding\"", path=path, line=line, field=key)
    raise DataError("a text row {prompt, completion} where embedding rows are read: text rows need a document "
                    "verifier (the folder holding verifier.json, made by `mlx-sdm train` on text rows), "
                    "not an embedding estimator", path=path, line=line)


def check_fit_sets(train: LabelledSet, calibration: LabelledSet, min_per_class: int = MIN_PER_CLASS) -> int:
    """Validate a (train, calibration) pair for fitting; returns the number of classes C."""
    if train.dim != calibration.dim:
        raise DataError(f"embeddings have width {calibration.dim} but the training rows have {train.dim}",
                        path=calibration.path, line=1, field="embedding")
    for s in (train, calibration):
        if (s.labels < 0).any():
            line = int(np.argmax(s.labels < 0)) + 1
            raise DataError("every training and calibration row needs a label", path=s.path, line=line, field="label")
    num_classes = int(max(train.labels.max(), calibration.labels.max())) + 1
    if num_classes < 2:
        raise DataError("need at least two classes (labels 0 and 1)", path=train.path, field="label")
    train_ids = set(train.ids)
    for number, rid in enumerate(calibration.ids, start=1):
        if rid in train_ids:
            raise DataError(f"id {rid!r} is also in the training file {train.path}; ids must be unique across both files",
                            path=calibration.path, field="id")
    unseen = np.setdiff1d(calibration.labels, train.labels)
    if unseen.size:  # blame the row that carries the label, in the file that carries it
        line = int(np.argmax(calibration.labels == unseen[0])) + 1
        raise DataError(f"label {int(unseen[0])} never occurs in the training file {train.path}; every class needs "
                        f"rows in both files (labels 0..{num_classes - 1})", path=calibration.path, line=line,
                        field="label")
    _check_no_missing_class(train, calibration, num_classes)
    sets = ((train, "training"), (calibration, "calibration"))
    for s, name in sets:
        counts = np.bincount(s.labels, minlength=num_classes)
        for c in range(num_classes):
            if counts[c] == 0:
                raise DataError(f"class {c} is absent from the {name} set; labels must be 0..{num_classes - 1} "
                                f"with every class present in both files", path=s.path, field="label")
    for s, name in sets:
        counts = np.bincount(s.labels, minlength=num_classes)
        for c in range(num_classes):
            if counts[c] < min_per_class:
                raise DataError(f"class {c} has only {counts[c]} rows in the {name} set; need at least {min_per_class}",
                                path=s.path, field="label")
    return num_classes


def _check_no_missing_class(train: LabelledSet, calibration: LabelledSet, num_classes: int) -> None:
    """Labels are class indices 0..C-1 with C = the largest label + 1: a label above a class no row has
    (a 7 among 0s and 1s) is blamed on the first row that carries it, in the file that has it."""
    present = set(np.unique(np.concatenate([train.labels, calibration.labels])).tolist())
    missing = [c for c in range(num_classes) if c not in present]
    if not missing:
        return
    for s in (train, calibration):
        above = np.nonzero(s.labels > missing[0])[0]
        if above.size:
            label = int(s.labels[above[0]])
            gap = f"class {missing[0]}" if len(missing) == 1 else f"classes {missing[0]}..{missing[-1]}"
            known = ", ".join(str(c) for c in sorted(present) if c != label)
            raise DataError(f"label {label}, but no row has {gap}: labels are class indices 0..C-1 and every class "
                            f"needs rows in both files (the other labels here: {known}); fix this row's label",
                            path=s.path, line=int(above[0]) + 1, field="label")
