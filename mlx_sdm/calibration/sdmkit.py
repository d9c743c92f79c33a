"""The portable model package ``.sdmkitmodel`` (schema 1) of the ``reexpress-sdm`` SDK and the
Reexpress app: a folder with ``manifest.json``, ``weights.f32`` (little-endian float32: projection
[M, D], its bias [M], classifier [C, M], its bias [C]), ``support.f32`` (exemplars [N, M]),
``support.jsonl`` ({id, label, predictedLabel[, document]} per row) and optionally
``calibration.jsonl``; the manifest holds the configuration, the scalar normalisation, the squared-L2
distance eCDFs, the class-wise q′ eCDFs and the nested regions.

Read, it becomes an estimator of the nested kind (nested.py); an estimator of the nested kind is
written back in the same layout. Anything else is refused with one ArtifactError naming the file and
the field."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from mlx_sdm.atomic import atomic_directory
from mlx_sdm.calibration.constants import ALPHA_PRIME, Q_BINS
from mlx_sdm.calibration.canonical import KIND_NESTED
from mlx_sdm.calibration.nested import NestedSettings, Region
from mlx_sdm.calibration.persistence import FORMAT_VERSION
from mlx_sdm.calibration.sdmdataset import read_folder_json
from mlx_sdm.calibration.state import EstimatorState
from mlx_sdm.errors import ArtifactError

SUFFIX = ".sdmkitmodel"
MANIFEST, WEIGHTS, VECTORS, RECORDS = "manifest.json", "weights.f32", "support.f32", "support.jsonl"
CONFIG_KEYS = ("numberOfClasses", "embeddingDimension", "exemplarDimension", "maxNeighbors", "qOffset", "oodLimit",
               "alphaResolution", "distanceMetric")
PRODUCER = {"name": "mlx-sdm", "version": "1"}
#: Our manifest's fields kept in the package's free-form metadata (restored on load).
MLX_SDM_KEY = "mlxSdm"
OUR_KEYS = ("alpha", "iterations", "config", "training", "source")


def is_sdmkit_path(path: str | Path) -> bool:
    return str(path).rstrip("/").endswith(SUFFIX)


def _fail(root: Path, what: str, fix: str = "re-export it from the app or `sdm train`") -> None:
    raise ArtifactError(f"{root}: {what}; not a readable {SUFFIX} package ({fix})")


def _manifest(root: Path) -> dict:
    m = read_folder_json(root, MANIFEST, _fail, "package")
    if not isinstance(m, dict) or m.get("schemaVersion") != 1:
        _fail(root, f"{MANIFEST} field schemaVersion is {m.get('schemaVersion') if isinstance(m, dict) else m!r}, "
              "this mlx-sdm reads schema 1", "use a newer mlx-sdm")
    for key in ("configuration", "normalization", "distanceCDFs", "rescaledSimilarityCDFs", "regions", "support"):
        if key not in m:
            _fail(root, f"{MANIFEST} has no field {key!r}")
    missing = [k for k in CONFIG_KEYS if k not in m["configuration"]]
    if missing:
        _fail(root, f"{MANIFEST} field configuration lacks {missing}")
    if m["configuration"]["distanceMetric"] != "squaredL2":
        _fail(root, f"configuration.distanceMetric is {m['configuration']['distanceMetric']!r}, only 'squaredL2' "
              "is defined")
    return m


def _f32(root: Path, name: str, count: int, checksums: dict) -> np.ndarray:
    path = root / name
    if not path.is_file():
        _fail(root, f"no {name}")
    data = path.read_bytes()
    if len(data) != 4 * count:
        _fail(root, f"{name} has {len(data)} bytes, the manifest implies {4 * count}", "the copy is truncated")
    if name in checksums and hashlib.sha256(data).hexdigest() != checksums[name]:
        _fail(root, f"{name} does not match its SHA-256 in {MANIFEST}", "the copy is corrupt")
    values = np.frombuffer(data, dtype="<f4").astype(np.float32)
    if not np.all(np.isfinite(values)):
        _fail(root, f"{name} holds a non-finite value")
    return values


def _records(root: Path, count: int, classes: int, checksums: dict) -> list[dict]:
    path = root / RECORDS
    if not path.is_file():
        _fail(root, f"no {RECORDS}")
    data = path.read_bytes()
    if RECORDS in checksums and hashlib.sha256(data).hexdigest() != checksums[RECORDS]:
        _fail(root, f"{RECORDS} does not match its SHA-256 in {MANIFEST}", "the copy is corrupt")
    rows = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            _fail(root, f"{RECORDS} line {number} is not JSON")
        if not isinstance(r, dict) or not isinstance(r.get("id"), str):
            _fail(root, f"{RECORDS} line {number}: field id must be a string")
        for key in ("label", "predictedLabel"):
            value = r.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < classes:
                hint = " (label -99, support-only out-of-distribution rows, is not supported)" if value == -99 else ""
                _fail(root, f"{RECORDS} line {number}: field {key} is {value!r}, expected 0..{classes - 1}{hint}")
        rows.append(r)
    if len(rows) != count:
        _fail(root, f"{RECORDS} has {len(rows)} rows, support.count is {count}")
    return rows


def _cdfs(root: Path, m: dict, key: str, classes: int) -> list[np.ndarray]:
    value = m[key]
    if not isinstance(value, list) or len(value) != classes:
        _fail(root, f"{MANIFEST} field {key} must hold {classes} sorted lists")
    out = [np.asarray(c, dtype=np.float32) for c in value]
    if any(c.ndim != 1 or np.any(np.diff(c) < 0) for c in out):
        _fail(root, f"{MANIFEST} field {key} must hold sorted lists of numbers")
    return out


def load_sdmkit(path: str | Path, expect_input_dim: int | None = None) -> tuple[EstimatorState, dict]:
    """(state, manifest) of a nested-kind estimator read from a ``.sdmkitmodel`` package."""
    root = Path(path)
    m = _manifest(root)
    cfg = m["configuration"]
    c, dim, width = int(cfg["numberOfClasses"]), int(cfg["embeddingDimension"]), int(cfg["exemplarDimension"])
    if expect_input_dim is not None and dim != int(expect_input_dim):
        raise ArtifactError(f"{root}: embeddingDimension {dim} but the embeddings here have dimension "
                            f"{expect_input_dim}; use a model trained on the same embedding model")
    sums = m.get("checksums") or {}
    n = int(m["support"]["count"])
    flat = _f32(root, WEIGHTS, width * dim + width + c * width + c, sums)
    vectors = _f32(root, VECTORS, n * width, sums).reshape(n, width)
    records = _records(root, n, c, sums)
    try:
        regions = tuple(Region(float(r["alpha"]), float(r["minimumRescaledSimilarity"]),
                               tuple(float(x) for x in r["outputThresholds"])) for r in m["regions"])
    except (KeyError, TypeError, ValueError):
        _fail(root, f"{MANIFEST} field regions must hold {{alpha, minimumRescaledSimilarity, outputThresholds}}")
    if any(len(r.thresholds) != c for r in regions):
        _fail(root, f"{MANIFEST} field regions: every outputThresholds needs {c} values")
    settings = NestedSettings(regions, float(cfg["alphaResolution"]), int(cfg["oodLimit"]), float(cfg["qOffset"]),
                              int(cfg["maxNeighbors"]))
    return _state(root, m, flat, vectors, records, settings), _our_manifest(root, m, settings)


def _state(root: Path, m: dict, flat: np.ndarray, vectors: np.ndarray, records: list[dict],
           settings: NestedSettings) -> EstimatorState:
    cfg = m["configuration"]
    c, dim, width = int(cfg["numberOfClasses"]), int(cfg["embeddingDimension"]), int(cfg["exemplarDimension"])
    cuts = np.cumsum([width * dim, width, c * width])
    params = {"g.weight": flat[:cuts[0]].reshape(width, dim), "g.bias": flat[cuts[0]:cuts[1]],
              "linear.weight": flat[cuts[1]:cuts[2]].reshape(c, width), "linear.bias": flat[cuts[2]:]}
    dcdf = _cdfs(root, m, "distanceCDFs", c)
    at_alpha = [r for r in settings.regions if r.alpha >= ALPHA_PRIME - 1e-9]
    return EstimatorState(
        params=params, normalization=(float(m["normalization"]["mean"]), float(m["normalization"]["standardDeviation"])),
        support_ids=[r["id"] for r in records], support_texts=[r.get("document") for r in records],
        support_exemplars=vectors, support_labels=np.array([r["label"] for r in records], np.int64),
        support_predictions=np.array([r["predictedLabel"] for r in records], np.int64),
        dcdf_ca=dcdf, dcdf_tr=list(dcdf), outcdf=[np.zeros(0, np.float32) for _ in range(c)],
        calibration_q_tilde=_cdfs(root, m, "rescaledSimilarityCDFs", c), rescaler=np.eye(c, dtype=np.float32),
        psi=np.array(at_alpha[-1].thresholds if at_alpha else np.zeros(c), np.float32),
        offsets=np.zeros((c, Q_BINS)), q_tilde_min_star=at_alpha[-1].min_q_prime if at_alpha else float("inf"),
        q_tilde_min_robust=at_alpha[-1].min_q_prime if at_alpha else float("inf"),
        threshold_succeeded=bool(at_alpha), lr_weight=np.zeros((dim, c), np.float32),
        lr_bias=np.zeros(c, np.float32))


def _our_manifest(root: Path, m: dict, settings: NestedSettings) -> dict:
    ours = (m.get("metadata") or {}).get(MLX_SDM_KEY) or {}
    return {**_kit_manifest(root, m, settings), **{k: ours[k] for k in OUR_KEYS if k in ours}}


def _kit_manifest(root: Path, m: dict, settings: NestedSettings) -> dict:
    cfg = m["configuration"]
    return {"format_version": FORMAT_VERSION, "estimator": KIND_NESTED, "outcdf_scale": "log_odds",
            "input_dim": int(cfg["embeddingDimension"]), "exemplar_dim": int(cfg["exemplarDimension"]),
            "num_classes": int(cfg["numberOfClasses"]), "alpha": ALPHA_PRIME, "nested": settings.to_manifest(),
            "class_names": list(cfg.get("classNames") or []),
            "source": {"kind": "sdmkitmodel", "path": str(root), "model_id": m.get("modelID"),
                       "producer": m.get("producer"), "representation": m.get("representation")},
            "training": {"support_size": int(m["support"]["count"]), "logistic_regression": {}},
            "sdmkit": {k: m[k] for k in ("modelID", "createdAt", "producer", "representation", "metadata") if k in m}}


def sdmkit_manifest(state: EstimatorState, manifest: dict) -> dict:
    """The ``.sdmkitmodel`` manifest of a nested-kind estimator (checksums are added on write)."""
    if manifest.get("estimator") != KIND_NESTED:
        raise ArtifactError(f"a {manifest.get('estimator')!r} estimator cannot be written as {SUFFIX}: the package "
                            "holds nested regions; train with `--estimator nested`")
    s = NestedSettings.from_manifest(manifest["nested"])
    c, dim, width = int(manifest["num_classes"]), int(manifest["input_dim"]), int(manifest["exemplar_dim"])
    if any(np.ndim(part) != 0 for part in state.normalization):
        raise ArtifactError("a .sdmkitmodel holds one input scale (a mean and a standard deviation), as the SDK "
                            "does; this estimator scales each dimension. Train it with --input-scaling scalar "
                            "to write a .sdmkitmodel, or save it as a folder.")
    kit = manifest.get("sdmkit", {})
    names = manifest.get("class_names") or [f"Class{i}" for i in range(c)]
    return {
        "schemaVersion": 1, "modelID": kit.get("modelID") or str(uuid.uuid4()),
        "createdAt": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "producer": PRODUCER,
        "configuration": {"numberOfClasses": c, "classNames": names, "embeddingDimension": dim,
                          "exemplarDimension": width, "maxNeighbors": s.max_neighbors or 2048,
                          "qOffset": s.q_offset, "oodLimit": s.ood_limit, "alphaResolution": s.resolution,
                          "distanceMetric": "squaredL2", "neighborTieBreak": "supportIndexAscending"},
        "normalization": {"mean": float(state.normalization[0]), "standardDeviation": float(state.normalization[1])},
        "representation": kit.get("representation") or {"provider": "precomputed", "model": None, "revision": None,
                                                         "inputTemplate": None, "fingerprint": "embedding_v1"},
        "weights": {"file": WEIGHTS, "elementCount": width * dim + width + c * width + c},
        "support": {"vectorsFile": VECTORS, "recordsFile": RECORDS, "count": len(state.support_ids)},
        "distanceCDFs": [[float(x) for x in np.asarray(cdf, np.float32)] for cdf in state.dcdf_ca],
        "rescaledSimilarityCDFs": [[float(x) for x in np.asarray(cdf, np.float32)] for cdf in state.calibration_q_tilde],
        "regions": [{"alpha": r.alpha, "minimumRescaledSimilarity": r.min_q_prime,
                     "outputThresholds": list(r.thresholds)} for r in s.regions],
        "metadata": {**(kit.get("metadata") or {}), MLX_SDM_KEY: _our_record(manifest)},
    }


def _our_record(manifest: dict) -> dict:
    """What our manifest adds (α′, the fit's record), kept under metadata.mlxSdm when it is plain JSON."""
    record = {k: manifest[k] for k in OUR_KEYS if k in manifest}
    try:
        json.dumps(record, allow_nan=False)
    except (TypeError, ValueError):
        record = {"alpha": manifest.get("alpha")}
    return record


def save_sdmkit(state: EstimatorState, manifest: dict, path: str | Path) -> None:
    """Write a nested-kind estimator as a ``.sdmkitmodel`` package (one atomic folder)."""
    kit = sdmkit_manifest(state, manifest)
    p = state.params
    flat = np.concatenate([np.asarray(p[k], np.float32).reshape(-1)
                           for k in ("g.weight", "g.bias", "linear.weight", "linear.bias")])
    payloads = {WEIGHTS: flat.astype("<f4").tobytes(),
                VECTORS: np.asarray(state.support_exemplars, "<f4").tobytes(),
                RECORDS: "".join(json.dumps(_record(i, y, yhat, t), separators=(",", ":")) + "\n" for i, y, yhat, t in
                                 zip(state.support_ids, state.support_labels, state.support_predictions,
                                     state.support_texts)).encode("utf-8")}
    kit["checksums"] = {name: hashlib.sha256(data).hexdigest() for name, data in payloads.items()}
    with atomic_directory(path) as tmp:
        for name, data in payloads.items():
            (tmp / name).write_bytes(data)
        (tmp / MANIFEST).write_text(json.dumps(kit, indent=2) + "\n", encoding="utf-8")


def _record(rid: str, label, prediction, text: str | None) -> dict:
    out = {"id": str(rid), "label": int(label), "predictedLabel": int(prediction)}
    if text is not None:
        out["document"] = text
    return out
