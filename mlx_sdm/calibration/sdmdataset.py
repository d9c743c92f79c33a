"""The portable data set bundle ``.sdmdataset`` (schema 1) of the ``reexpress-sdm`` SDK and the
Reexpress app: a folder with ``manifest.json`` (format "reexpress-dataset", rowCount, the SHA-256 of
every file), ``rows.jsonl`` ({id, label, [document], [prompt], [embeddingRow]} per row; label −1 =
unlabelled) and optionally ``embeddings.npy`` (float32 [M, D], C order; row i of the matrix belongs
to the i-th row that has an ``embeddingRow``, which must count 0, 1, …, M−1 in order).

Every problem is one DataError naming the bundle, the file, the line or field, and the fix."""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn

import numpy as np

from mlx_sdm.atomic import atomic_directory
from mlx_sdm.errors import DataError

SUFFIX = ".sdmdataset"
FORMAT = "reexpress-dataset"
MANIFEST, ROWS, EMBEDDINGS = "manifest.json", "rows.jsonl", "embeddings.npy"


@dataclass
class DatasetBundle:
    """The rows of a bundle (as JSON objects, ``embeddingRow`` removed) and, per row, its embedding
    (None where the row has none)."""

    rows: list[dict]
    embeddings: list[np.ndarray | None]
    class_names: list[str] | None = None


def is_sdmdataset_path(path: str | Path) -> bool:
    return str(path).rstrip("/").endswith(SUFFIX)


def _fail(root: Path, what: str, *, line: int | None = None, field: str | None = None,
          fix: str = "re-export the bundle from the app or `sdm dataset`") -> NoReturn:
    raise DataError(f"{what}; not a readable {SUFFIX} bundle ({fix})", path=str(root), line=line, field=field)


def _file(root: Path, entry, name: str) -> bytes:
    if not isinstance(entry, dict) or entry.get("path") != name:
        _fail(root, f"{MANIFEST}: the entry for {name} must be {{\"path\": \"{name}\", \"sha256\": ...}}", field=name)
    path = root / name
    if not path.is_file() or path.is_symlink():
        _fail(root, f"{name} is missing", field=name)
    data = path.read_bytes()
    if "sha256" in entry and hashlib.sha256(data).hexdigest() != entry["sha256"]:
        _fail(root, f"{name} does not match its SHA-256 in {MANIFEST}", field=name, fix="the copy is corrupt")
    return data


def read_folder_json(root: Path, name: str, fail: Callable[[Path, str], None], what: str) -> Any:
    """``root/name`` parsed; else ``fail(root, why)``: no such folder, a file, no such file, not JSON
    (the manifest of a ``.sdmdataset`` bundle and of a ``.sdmkitmodel`` package)."""
    if not root.is_dir():
        fail(root, "no such folder" if not root.exists() else f"is a file, not a {what} folder")
    try:
        return json.loads((root / name).read_text(encoding="utf-8"))
    except FileNotFoundError:
        fail(root, f"no {name}")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        fail(root, f"{name} is not JSON ({exc})")


def _manifest(root: Path) -> dict:
    m = read_folder_json(root, MANIFEST, _fail, "bundle")
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        _fail(root, f"{MANIFEST} field format is not {FORMAT!r}", field="format")
    if m.get("schemaVersion") != 1:
        _fail(root, f"{MANIFEST} field schemaVersion is {m.get('schemaVersion')!r}; this mlx-sdm reads 1",
              field="schemaVersion", fix="use a newer mlx-sdm")
    count = m.get("rowCount")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        _fail(root, f"{MANIFEST} field rowCount must be a positive integer", field="rowCount")
    if not isinstance(m.get("matrices", {}), dict) or set(m.get("matrices", {})) - {"embedding", "attributes"}:
        _fail(root, f"{MANIFEST} field matrices may hold only 'embedding' and 'attributes'", field="matrices")
    return m


def _matrix(root: Path, entry) -> np.ndarray:
    data = _file(root, entry, EMBEDDINGS)
    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(f)
    except ValueError as exc:
        _fail(root, f"{EMBEDDINGS} is not an NPY file ({exc})", field=EMBEDDINGS)
    if dtype != np.dtype("<f4") or fortran or len(shape) != 2 or min(shape) < 1:
        _fail(root, f"{EMBEDDINGS} must be little-endian float32 '<f4', C order, shape (M, D); it is {dtype.str}, "
              f"fortran_order={fortran}, shape {shape}", field=EMBEDDINGS)
    if len(data) - f.tell() != 4 * shape[0] * shape[1]:
        _fail(root, f"{EMBEDDINGS} holds {len(data) - f.tell()} payload bytes, shape {shape} needs "
              f"{4 * shape[0] * shape[1]}", field=EMBEDDINGS)
    values = np.frombuffer(data, dtype="<f4", offset=f.tell()).reshape(shape).astype(np.float32)
    if not np.all(np.isfinite(values)):
        _fail(root, f"{EMBEDDINGS} holds a non-finite value", field=EMBEDDINGS)
    if "shape" in entry and list(entry["shape"]) != list(shape):
        _fail(root, f"{MANIFEST}: matrices.embedding.shape {entry['shape']} but the file has {list(shape)}",
              field="shape")
    return values


def _row(root: Path, line: str, number: int, seen: dict[str, int]) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        _fail(root, f"{ROWS} is not JSON here ({exc.msg})", line=number)
    if not isinstance(row, dict):
        _fail(root, f"{ROWS}: each line must be a JSON object", line=number)
    rid = row.get("id")
    if not isinstance(rid, str) or not rid:
        _fail(root, f"{ROWS}: each row needs a non-empty string id", line=number, field="id")
    if rid in seen:
        _fail(root, f"{ROWS}: id {rid!r} already used on line {seen[rid]}; ids must be unique", line=number, field="id")
    seen[rid] = number
    label = row.get("label")
    if isinstance(label, bool) or not isinstance(label, int) or label < -99 or -99 < label < -1:
        _fail(root, f"{ROWS}: label must be a class index, -1 (unlabelled) or -99, got {label!r}", line=number,
              field="label")
    return row


def read_bundle(path: str | Path) -> DatasetBundle:
    """The rows and embeddings of a ``.sdmdataset`` bundle, checked."""
    root = Path(path)
    m = _manifest(root)
    lines = [ln for ln in _file(root, m.get("rows"), ROWS).decode("utf-8", errors="replace").splitlines() if ln.strip()]
    if len(lines) != m["rowCount"]:
        _fail(root, f"{ROWS} has {len(lines)} rows but rowCount is {m['rowCount']}", field="rowCount")
    matrix = _matrix(root, m["matrices"]["embedding"]) if "embedding" in m.get("matrices", {}) else None
    seen: dict[str, int] = {}
    rows: list[dict] = []
    embeddings: list[np.ndarray | None] = []
    for number, line in enumerate(lines, start=1):
        row = _row(root, line, number, seen)
        ref = row.pop("embeddingRow", None)
        if ref is not None and (matrix is None or ref != sum(e is not None for e in embeddings)):
            _fail(root, f"{ROWS}: embeddingRow {ref!r} out of order (references must count 0, 1, … in row order, "
                  "one per matrix row)", line=number, field="embeddingRow")
        embeddings.append(None if ref is None or matrix is None else matrix[ref])
        rows.append(row)
    if matrix is not None and sum(e is not None for e in embeddings) != len(matrix):
        _fail(root, f"{EMBEDDINGS} has {len(matrix)} rows but {ROWS} references "
              f"{sum(e is not None for e in embeddings)}", field="embeddingRow")
    names = m.get("classNames")
    return DatasetBundle(rows, embeddings, list(names) if isinstance(names, list) else None)


def write_bundle(path: str | Path, rows: list[dict], embeddings: np.ndarray | None = None,
                 class_names: list[str] | None = None, metadata: dict | None = None) -> None:
    """Write ``rows`` (each with a unique string ``id`` and an integer ``label``) and, if given, one
    embedding per row as a ``.sdmdataset`` bundle (one atomic folder)."""
    if not rows:
        raise DataError(f"nothing to write: a {SUFFIX} bundle needs at least one row", path=str(path))
    out_rows = [dict(r) for r in rows]
    matrices = {}
    payloads = {}
    if embeddings is not None:
        emb = np.ascontiguousarray(embeddings, dtype="<f4")
        if emb.ndim != 2 or len(emb) != len(rows) or not np.all(np.isfinite(emb)):
            raise DataError("embeddings must be a finite [rows, D] matrix", path=str(path), field="embedding")
        for i, r in enumerate(out_rows):
            r["embeddingRow"] = i
        buf = io.BytesIO()
        np.lib.format.write_array(buf, emb, version=(1, 0), allow_pickle=False)
        payloads[EMBEDDINGS] = buf.getvalue()
        matrices["embedding"] = {"path": EMBEDDINGS, "dtype": "<f4", "shape": list(emb.shape),
                                 "sha256": hashlib.sha256(payloads[EMBEDDINGS]).hexdigest()}
    payloads[ROWS] = "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in out_rows).encode()
    manifest = {"format": FORMAT, "schemaVersion": 1, "rowCount": len(rows),
                "rows": {"path": ROWS, "sha256": hashlib.sha256(payloads[ROWS]).hexdigest()}, "matrices": matrices}
    if class_names:
        manifest["classNames"] = list(class_names)
    if metadata:
        manifest["metadata"] = dict(metadata)
    with atomic_directory(path) as tmp:
        for name, data in payloads.items():
            (tmp / name).write_bytes(data)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
