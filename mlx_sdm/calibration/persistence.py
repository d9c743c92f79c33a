"""An estimator folder: ``estimator.safetensors`` (adaptor, support exemplars, eCDFs, rescaler, ψ,
offsets, logistic-regression reference) + ``manifest.json`` + ``support.json``, written as one
atomic folder and read back with every check that names what is wrong."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from mlx_sdm.atomic import atomic_directory
from mlx_sdm.calibration.adaptor import SCALING_PER_DIMENSION, Normalization, is_per_dimension
from mlx_sdm.calibration.state import EstimatorState
from mlx_sdm.errors import ArtifactError

FORMAT_VERSION = 1
#: A folder whose adaptor scales its input per dimension (μ, σ vectors in the weights file). An
#: mlx-sdm that predates per-dimension scaling refuses it by this number instead of misreading it;
#: folders with the paper's scalar (μ, σ) keep FORMAT_VERSION and stay readable by older versions.
PER_DIMENSION_FORMAT_VERSION = 2
READ_FORMAT_VERSIONS = (FORMAT_VERSION, PER_DIMENSION_FORMAT_VERSION)
NORMALIZATION_TENSORS = ("normalization.mu", "normalization.sigma")
MANIFEST = "manifest.json"
WEIGHTS = "estimator.safetensors"
SUPPORT = "support.json"


def finite_or_none(x: float) -> float | None:
    """JSON has no infinity: a threshold Alg. 3 did not find (+inf) is stored as null."""
    return float(x) if math.isfinite(x) else None


def format_version(normalization: Normalization) -> int:
    return PER_DIMENSION_FORMAT_VERSION if is_per_dimension(normalization) else FORMAT_VERSION


def normalization_manifest(normalization: Normalization) -> dict:
    """The manifest's ``normalization``: the two scalars, or where the per-dimension vectors are."""
    if is_per_dimension(normalization):
        return {"scaling": SCALING_PER_DIMENSION, "tensors": list(NORMALIZATION_TENSORS)}
    return {"mu": float(normalization[0]), "sigma": float(normalization[1])}


def save_estimator(st: EstimatorState, manifest: dict, directory: str | Path) -> None:
    """safetensors + manifest.json + support.json, written as one atomic folder."""
    from safetensors.numpy import save_file

    tensors = {f"adaptor.{k}": np.ascontiguousarray(v) for k, v in st.params.items()}
    tensors.update({
        "support.exemplars": st.support_exemplars, "support.labels": st.support_labels,
        "support.predictions": st.support_predictions, "rescaler": st.rescaler, "psi": st.psi,
        "offsets": st.offsets, "lr.weight": st.lr_weight, "lr.bias": st.lr_bias,
    })
    for name, arrays in (("dcdf_ca", st.dcdf_ca), ("dcdf_tr", st.dcdf_tr), ("outcdf", st.outcdf),
                         ("cal_q_tilde", st.calibration_q_tilde)):
        for c, arr in enumerate(arrays):
            tensors[f"{name}.{c}"] = np.ascontiguousarray(arr)
    if is_per_dimension(st.normalization):
        tensors.update(zip(NORMALIZATION_TENSORS, (np.asarray(v, dtype=np.float32) for v in st.normalization)))
    manifest = dict(manifest)
    manifest["format_version"] = format_version(st.normalization)
    manifest["normalization"] = normalization_manifest(st.normalization)
    manifest["q_tilde_min_star"] = finite_or_none(st.q_tilde_min_star)
    manifest["q_tilde_min_robust"] = finite_or_none(st.q_tilde_min_robust)
    manifest["threshold_succeeded"] = bool(st.threshold_succeeded)
    manifest["files"] = {"weights": WEIGHTS, "support": SUPPORT}
    with atomic_directory(directory) as tmp:
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(tmp / WEIGHTS),
                  metadata={"format_version": str(FORMAT_VERSION)})
        (tmp / SUPPORT).write_text(json.dumps({"ids": st.support_ids, "texts": st.support_texts}), encoding="utf-8")
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")


def read_manifest(directory: Path, expect_input_dim: int | None) -> dict:
    """The folder's manifest; ArtifactError for a missing or corrupt one, another format version or
    an input dimension other than ``expect_input_dim``."""
    mpath = directory / MANIFEST
    if not mpath.is_file():
        raise ArtifactError(f"{directory}: no {MANIFEST}; not an SDM estimator folder (make one with `mlx-sdm train`)")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{mpath}: corrupt manifest ({exc.msg})") from exc
    version = manifest.get("format_version")
    if version not in READ_FORMAT_VERSIONS:
        raise ArtifactError(f"{mpath}: format_version {version!r}, but this mlx-sdm reads format_version "
                            f"{' or '.join(map(str, READ_FORMAT_VERSIONS))}; retrain with `mlx-sdm train` or use the "
                            "matching mlx-sdm version")
    if expect_input_dim is not None and int(manifest.get("input_dim", -1)) != int(expect_input_dim):
        raise ArtifactError(f"{mpath}: input_dim {manifest.get('input_dim')} but the embeddings here have dimension "
                            f"{expect_input_dim}; use an estimator trained on the same embedding model")
    return manifest


def load_estimator(directory: str | Path, expect_input_dim: int | None = None) -> tuple[EstimatorState, dict]:
    """(state, manifest) of a saved estimator; refuses another format version or dimension with ArtifactError."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    directory = Path(directory)
    manifest = read_manifest(directory, expect_input_dim)
    try:
        t = load_file(str(directory / WEIGHTS))
        support = json.loads((directory / SUPPORT).read_text(encoding="utf-8"))
    except (OSError, ValueError, SafetensorError) as exc:  # SafetensorError: a truncated or corrupt file
        raise ArtifactError(f"{directory}: cannot read the estimator files ({exc}); the folder is corrupt or "
                            "incomplete: copy it again or rebuild it with `mlx-sdm train`") from exc
    c, dim, m = int(manifest["num_classes"]), int(manifest["input_dim"]), int(manifest["exemplar_dim"])
    params = {k[len("adaptor."):]: v for k, v in t.items() if k.startswith("adaptor.")}
    g = params.get("g.weight")
    if g is None or g.shape != (m, dim) or t["support.exemplars"].shape[1:] != (m,) or t["rescaler"].shape != (c, c):
        raise ArtifactError(f"{directory}: weight shapes do not match the manifest's dimensions "
                            f"(input_dim {dim}, exemplar_dim {m}, num_classes {c}); the folder is corrupt")
    normalization = read_normalization(directory, manifest, t, dim)

    def _inf(x):
        return float("inf") if x is None else float(x)

    state = EstimatorState(
        params=params, normalization=normalization,
        support_ids=list(support["ids"]), support_texts=list(support["texts"]),
        support_exemplars=t["support.exemplars"], support_labels=t["support.labels"],
        support_predictions=t["support.predictions"],
        dcdf_ca=[t[f"dcdf_ca.{i}"] for i in range(c)], dcdf_tr=[t[f"dcdf_tr.{i}"] for i in range(c)],
        outcdf=[t[f"outcdf.{i}"] for i in range(c)], calibration_q_tilde=[t[f"cal_q_tilde.{i}"] for i in range(c)],
        rescaler=t["rescaler"], psi=t["psi"], offsets=t["offsets"],
        q_tilde_min_star=_inf(manifest["q_tilde_min_star"]), q_tilde_min_robust=_inf(manifest["q_tilde_min_robust"]),
        threshold_succeeded=bool(manifest["threshold_succeeded"]), lr_weight=t["lr.weight"], lr_bias=t["lr.bias"])
    return state, manifest


def read_normalization(directory: Path, manifest: dict, tensors: dict, dim: int) -> Normalization:
    """(μ, σ) of a saved folder: two floats, or two float32 vectors [input_dim] from the weights file."""
    norm = manifest["normalization"]
    if norm.get("scaling") != SCALING_PER_DIMENSION:
        return float(norm["mu"]), float(norm["sigma"])
    vectors = tuple(tensors.get(name) for name in NORMALIZATION_TENSORS)
    if any(v is None or v.shape != (dim,) for v in vectors):
        raise ArtifactError(f"{directory}: the per-dimension input scaling ({', '.join(NORMALIZATION_TENSORS)}) is "
                            f"missing or not of length input_dim {dim}; the folder is corrupt: rebuild it with "
                            "`mlx-sdm train`")
    return vectors
