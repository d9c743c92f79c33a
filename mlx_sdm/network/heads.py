"""Negative and positive vocabulary heads of the SDM network (docs/method.md § 15.1, § 16).

The reference head W_ref, the negative head W_neg and the positive head W_pos all start as clones of
the LM's output head (or of the tied input embedding when the model ties them, as SmolLM2 does).
W_ref and W_neg stay frozen; only W_pos trains, in float32. Because both frozen heads are the same
untouched matrix, they share one array here (no second copy in memory).

Scoring during fine-tuning is over the joint 2|V| logits ``[z_neg; z_pos]``; targets of verified
(y = 1) documents are shifted by |V|. Greedy decoding over the joint distribution maps back to the
vocabulary with ``argmax mod |V|``: :meth:`VocabularyHeads.vocab_logits` returns
``max(z_neg, z_pos)`` per token, whose argmax is exactly that token, so it plugs into any greedy
decoder (the ``head`` hook of :mod:`mlx_sdm.lm.generation`).

A trained head is saved as ``positive_head.safetensors`` + ``manifest.json`` (atomic) and
:func:`load_head` refuses it for another base model. A second, compact on-disk form (for shipping a
head: a full float32 SmolLM2 head is 113 MB) stores only the change from the model's own head,
``W_pos = W_ref + U @ V`` (U: |V| x r, V: r x D, float16), from a truncated SVD of ``W_pos - W_ref``
(:func:`compress_head`, ``mlx-sdm compress-head``); its manifest says ``"head_format":
"low_rank_delta"`` and records the rank and the relative Frobenius error. :func:`load_head` reads both.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from mlx_sdm.atomic import atomic_directory, check_output_folder
from mlx_sdm.errors import ArtifactError, DataError, ModelMismatchError
from mlx_sdm.network.coverage import TaskInstruction, read_task_instructions

HEAD_FORMAT_VERSION = 1
HEAD_WEIGHTS_FILE = "positive_head.safetensors"
HEAD_MANIFEST_FILE = "manifest.json"
#: ``manifest["head_format"]``: the full float32 matrix (what ``mlx-sdm finetune`` writes; also when the key
#: is absent) or the low-rank change from the model's own head (:func:`compress_head`).
HEAD_FORMAT_FULL = "full"
HEAD_FORMAT_LOW_RANK = "low_rank_delta"
LOW_RANK_WEIGHTS_FILE = "positive_head_lowrank.safetensors"
#: fingerprint keys that must agree between the model a head was trained on and the one loading it.
FINGERPRINT_KEYS = ("architecture", "hidden_size", "vocab_size", "num_layers", "head_sha256")


def _dequantized_weight(layer: nn.Module) -> mx.array:
    """The (V, D) weight of an Embedding/Linear or of their quantized forms, as float32."""
    weight = layer.weight
    if hasattr(layer, "scales"):
        weight = mx.dequantize(
            weight,
            layer.scales,
            getattr(layer, "biases", None),
            group_size=layer.group_size,
            bits=layer.bits,
            mode=getattr(layer, "mode", "affine"),
        )
    return weight.astype(mx.float32)


def output_head_weight(model: nn.Module) -> mx.array:
    """The LM's output projection as a float32 (|V|, D) matrix: ``lm_head`` when the model has
    its own (Phi-3), else the tied input embedding (SmolLM2, the tiny test llama)."""
    lm_head = getattr(model, "lm_head", None)
    if lm_head is not None:
        return _dequantized_weight(lm_head)
    inner = getattr(model, "model", None)
    embed = getattr(inner, "embed_tokens", None) if inner is not None else None
    if embed is None:
        raise ArtifactError(
            f"{type(model).__name__} has neither `lm_head` nor `model.embed_tokens`; the SDM network "
            "needs an mlx-lm model whose output head it can clone"
        )
    return _dequantized_weight(embed)


def head_sha256(weight: mx.array) -> str:
    """Hash of a head matrix (float32 bytes), the `head_sha256` of a model fingerprint."""
    return hashlib.sha256(np.asarray(weight.astype(mx.float32)).tobytes()).hexdigest()


@dataclass(frozen=True)
class LowRankChange:
    """W_pos − W_ref = U @ V of a shipped head (float32 factors), valid for exactly the ``positive`` array it
    was loaded with: greedy decoding then computes z_pos = z_neg + (h Vᵀ) Uᵀ, one |V|×r and one r×D product
    instead of a second |V|×D one. (A plain object, not an MLX parameter.)"""

    u: mx.array  # (|V|, r)
    v: mx.array  # (r, D)
    positive: mx.array  # the W_pos these factors describe; training replaces it, which retires them


class VocabularyHeads(nn.Module):
    """W_ref = W_neg (frozen, shared) and W_pos (trainable float32), each (|V|, D)."""

    def __init__(self, reference: mx.array, positive: mx.array | None = None):
        super().__init__()
        reference = reference.astype(mx.float32)
        self.negative = reference  # W_neg: frozen clone; also serves as W_ref (identical, never trained)
        self.positive = mx.array(reference) if positive is None else positive.astype(mx.float32)
        if self.positive.shape != self.negative.shape:
            raise ArtifactError(
                f"positive head has shape {tuple(self.positive.shape)} but the model's head is "
                f"{tuple(self.negative.shape)}; it was trained for another model"
            )
        self.freeze(keys=["negative"], strict=True)

    @classmethod
    def from_model(cls, model: nn.Module) -> "VocabularyHeads":
        return cls(output_head_weight(model))

    @property
    def reference(self) -> mx.array:
        return self.negative

    @property
    def vocab_size(self) -> int:
        return int(self.negative.shape[0])

    @property
    def hidden_size(self) -> int:
        return int(self.negative.shape[1])

    def __call__(self, hidden: mx.array) -> tuple[mx.array, mx.array]:
        """(z_neg, z_pos) for hidden states (..., D); z_neg is also z_ref (§ 15.1)."""
        hidden = hidden.astype(mx.float32)
        z_neg = mx.stop_gradient(hidden @ self.negative.T)
        z_pos = hidden @ self.positive.T
        return z_neg, z_pos

    def joint_logits(self, hidden: mx.array) -> mx.array:
        """[z_neg; z_pos] over 2|V| (§ 15.1)."""
        z_neg, z_pos = self(hidden)
        return mx.concatenate([z_neg, z_pos], axis=-1)

    def vocab_logits(self, hidden: mx.array) -> mx.array:
        """Logits over |V| whose argmax is ``argmax([z_neg; z_pos]) mod |V|`` (greedy joint decoding).

        ``max(z_neg, z_pos)`` keeps, for every token, its larger half; ties between the halves pick
        the token of the negative half first, as first-index argmax over the joint vector does.
        """
        change = getattr(self, "low_rank_change", None)
        if change is not None and change.positive is self.positive:  # a shipped head, untouched since loading
            hidden = hidden.astype(mx.float32)
            z_neg = hidden @ self.negative.T
            return mx.maximum(z_neg, z_neg + (hidden @ change.v.T) @ change.u.T)
        z_neg, z_pos = self(hidden)
        return mx.maximum(z_neg, z_pos)


def joint_greedy_token(joint_logits: mx.array, vocab_size: int) -> mx.array:
    """Greedy decoding over the joint distribution, mapped back to the vocabulary (§ 15.7)."""
    return mx.argmax(joint_logits, axis=-1) % vocab_size


@dataclass
class HeadManifest:
    base_model: dict[str, Any]
    verifier: dict[str, Any]
    data_hash: str
    epochs: int
    best_epoch: int
    metrics: dict[str, Any]
    format_version: int = HEAD_FORMAT_VERSION
    #: the tasks the head was trained on ([{"name", "instruction", "system"}]): it decodes only turns whose
    #: question starts one of these instructions (coverage.match_instruction); empty = not recorded
    tasks: list[dict[str, Any]] = field(default_factory=list)
    #: of those, the tasks it decodes (:func:`tasks_the_head_improves`); None = every task it was trained on
    decodes: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "head_format": HEAD_FORMAT_FULL,
            "base_model": self.base_model,
            "verifier": self.verifier,
            "data_hash": self.data_hash,
            "epochs": self.epochs,
            "best_epoch": self.best_epoch,
            "metrics": self.metrics,
            **({"tasks": list(self.tasks)} if self.tasks else {}),
            **({"decodes": list(self.decodes)} if self.decodes is not None else {}),
        }


def check_fingerprint(found: dict[str, Any], expected: dict[str, Any], *, what: str, where: str) -> None:
    """Raise ModelMismatchError naming the first fingerprint field that differs."""
    for key in FINGERPRINT_KEYS:
        if key in found and key in expected and found[key] != expected[key]:
            raise ModelMismatchError(
                f"{where}: {what} was built for another model ({key} {found[key]!r}, the loaded model "
                f"has {expected[key]!r}); load the model it was built on, or rebuild it for this one"
            )


def save_head(directory: str | Path, heads: VocabularyHeads, manifest: HeadManifest) -> Path:
    """Write the positive head and its manifest atomically into ``directory``."""
    directory = Path(directory)
    with atomic_directory(directory) as tmp:
        mx.save_safetensors(str(tmp / HEAD_WEIGHTS_FILE), {"positive": heads.positive})
        (tmp / HEAD_MANIFEST_FILE).write_text(json.dumps(manifest.to_dict(), indent=2, sort_keys=True))
    return directory


def read_head_manifest(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / HEAD_MANIFEST_FILE
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise ArtifactError(f"{path}: no head manifest; pass the folder `mlx-sdm finetune` wrote") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: corrupt head manifest ({exc}); re-run `mlx-sdm finetune`") from None
    if manifest.get("format_version") != HEAD_FORMAT_VERSION:
        raise ArtifactError(
            f"{path}: field 'format_version' is {manifest.get('format_version')!r}, this mlx-sdm reads "
            f"{HEAD_FORMAT_VERSION}; re-run `mlx-sdm finetune` with this version"
        )
    return manifest


def load_head(directory: str | Path, model: nn.Module, fingerprint: dict[str, Any]) -> VocabularyHeads:
    """Load a positive head written by :func:`save_head` or :func:`compress_head` for ``model`` (whose
    fingerprint is ``fingerprint``, e.g. ``LoadedModel.fingerprint``); refuse one trained on another model.
    A low-rank head is rebuilt in float32 against ``model``'s own head (``head_sha256`` ties it to that head).

    The result's :meth:`VocabularyHeads.vocab_logits` is the ``head`` hook for generation.
    """
    from mlx_sdm.resources import resolve_artifact

    directory = resolve_artifact(directory)
    manifest = read_head_manifest(directory)
    check_fingerprint(manifest.get("base_model", {}), fingerprint, what="this head", where=str(directory))
    reference = output_head_weight(model)
    head_format = manifest.get("head_format", HEAD_FORMAT_FULL)
    if head_format == HEAD_FORMAT_LOW_RANK:
        u, v = _low_rank_factors_of(directory / LOW_RANK_WEIGHTS_FILE, reference, manifest.get("low_rank", {}))
        positive = reference + u @ v
        mx.eval(positive)  # materialised once for training and scoring; decoding uses U, V (LowRankChange)
    elif head_format == HEAD_FORMAT_FULL:
        weights_path = directory / HEAD_WEIGHTS_FILE
        try:
            positive = mx.load(str(weights_path))["positive"]
        except (FileNotFoundError, KeyError, ValueError, RuntimeError) as exc:
            raise ArtifactError(f"{weights_path}: cannot read the positive head ({exc}); re-run `mlx-sdm finetune`") from None
    else:
        raise ArtifactError(f"{directory / HEAD_MANIFEST_FILE}: field 'head_format' is {head_format!r}; this mlx-sdm reads "
                            f"{HEAD_FORMAT_FULL!r} and {HEAD_FORMAT_LOW_RANK!r}")
    heads = VocabularyHeads(reference, positive)
    try:
        tasks = read_task_instructions(manifest.get("tasks"), where=str(directory / HEAD_MANIFEST_FILE))
        tasks = decoded_tasks(tasks, manifest.get("decodes"), where=str(directory / HEAD_MANIFEST_FILE))
    except ValueError as exc:
        raise ArtifactError(str(exc)) from None
    object.__setattr__(heads, "manifest", manifest)  # plain attributes, not parameters
    object.__setattr__(heads, "tasks", tasks)  # None: the manifest names no tasks
    if head_format == HEAD_FORMAT_LOW_RANK:
        object.__setattr__(heads, "low_rank_change", LowRankChange(u, v, heads.positive))
    return heads


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _low_rank_factors_of(path: Path, reference: mx.array, info: dict[str, Any]) -> tuple[mx.array, mx.array]:
    """U, V in float32 from a :func:`compress_head` file, checked against its manifest entry."""
    fix = "rebuild it with `mlx-sdm compress-head`"
    try:
        matches = _file_sha256(path) == info.get("sha256")
        arrays = mx.load(str(path)) if matches else {}
    except (OSError, ValueError, RuntimeError) as exc:
        raise ArtifactError(f"{path}: cannot read the low-rank positive head ({exc}); {fix}") from None
    if not matches:
        raise ArtifactError(f"{path}: the file does not match the sha256 its manifest records (corrupt or truncated); {fix}")
    u, v = arrays.get("u"), arrays.get("v")
    rows, cols = reference.shape
    if (u is None or v is None or u.ndim != 2 or v.ndim != 2 or u.shape[0] != rows or v.shape[1] != cols
            or u.shape[1] != v.shape[0] or u.shape[1] != info.get("rank")):
        raise ArtifactError(f"{path}: expected factors 'u' ({rows}, r) and 'v' (r, {cols}) with r = the manifest's rank "
                            f"{info.get('rank')!r}; {fix}")
    return u.astype(mx.float32), v.astype(mx.float32)


def low_rank_factors(delta: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray, float]:
    """float16 ``U`` (|V|, r) and ``V`` (r, D) whose product is the rank-``rank`` truncated SVD of ``delta``
    (√s on each side, so both stay in float16's range), and that truncation's relative Frobenius error
    ``sqrt(sum of the discarded s²) / ||delta||_F`` (0 for a zero ``delta``)."""
    u, s, vt = np.linalg.svd(np.asarray(delta, dtype=np.float32), full_matrices=False)
    root = np.sqrt(s[:rank])
    left, right = u[:, :rank] * root, root[:, None] * vt[:rank]
    limit = float(np.finfo(np.float16).max)
    if not (np.isfinite(left).all() and np.isfinite(right).all()) or max(np.abs(left).max(), np.abs(right).max()) > limit:
        raise ArtifactError("the head's change from the model's head does not fit float16 factors (too large or not finite)")
    total = float(np.sum(s.astype(np.float64) ** 2))
    truncation = float(np.sqrt(np.sum(s[rank:].astype(np.float64) ** 2) / total)) if total > 0 else 0.0
    return left.astype(np.float16), right.astype(np.float16), truncation


def _manifest_model(manifest: dict[str, Any]) -> nn.Module:
    """The base model a head manifest names: the finetune config's ``model``, else ``base_model.name``."""
    from mlx_sdm.lm.loading import load_model

    config = manifest.get("metrics", {}).get("config", {})
    spec = config.get("model") if isinstance(config, dict) and "model" in config else manifest.get("base_model", {}).get("name")
    return load_model(spec).model


def compress_head(head_dir: str | Path, out_dir: str | Path, rank: int, *, model: nn.Module | None = None,
                  force: bool = False) -> dict[str, Any]:
    """Write the full positive head in ``head_dir`` as ``W_ref + U @ V`` (rank ``rank``, at most min(|V|, D))
    into ``out_dir``, atomically; returns the new manifest. ``model`` is the base model (default: the one
    the head's manifest names, loaded with ``mlx_sdm.lm.loading.load_model``); the head must fit it.

    The manifest is the source's with ``head_format: "low_rank_delta"`` and ``low_rank``: ``rank``, ``dtype``,
    ``relative_error`` (``||W_pos - (W_ref + U V)||_F / ||W_pos - W_ref||_F`` with U, V as stored, i.e. what
    :func:`load_head` rebuilds), ``truncation_error`` (the SVD truncation alone), ``relative_error_of_head``
    (the same error over ``||W_pos||_F``), ``full_head_sha256`` (the source W_pos) and ``sha256`` (the file).
    """
    from mlx_sdm.resources import resolve_artifact

    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise DataError(f"must be a whole number of at least 1, got {rank!r}", field="rank")
    head_dir = resolve_artifact(head_dir)
    manifest = read_head_manifest(head_dir)
    if manifest.get("head_format", HEAD_FORMAT_FULL) != HEAD_FORMAT_FULL:
        raise ArtifactError(f"{head_dir}: is already a compressed head; compress the full head `mlx-sdm finetune` wrote")
    check_output_folder(out_dir, force=force, artifact_files=(HEAD_MANIFEST_FILE,))
    model = _manifest_model(manifest) if model is None else model
    reference = output_head_weight(model)
    fingerprint = {"vocab_size": int(reference.shape[0]), "hidden_size": int(reference.shape[1]),
                   "head_sha256": head_sha256(reference)}
    heads = load_head(head_dir, model, fingerprint)
    positive, delta = np.asarray(heads.positive), np.asarray(heads.positive - heads.reference)
    rank = min(rank, *delta.shape)
    u, v, truncation = low_rank_factors(delta, rank)
    error = float(np.linalg.norm(delta - u.astype(np.float32) @ v.astype(np.float32)))
    delta_norm, head_norm = float(np.linalg.norm(delta)), float(np.linalg.norm(positive))
    low_rank = {"rank": rank, "dtype": "float16", "relative_error": error / delta_norm if delta_norm else 0.0,
                "truncation_error": truncation, "relative_error_of_head": error / head_norm if head_norm else 0.0,
                "full_head_sha256": head_sha256(heads.positive)}
    with atomic_directory(Path(out_dir)) as tmp:
        mx.save_safetensors(str(tmp / LOW_RANK_WEIGHTS_FILE), {"u": mx.array(u), "v": mx.array(v)})
        low_rank["sha256"] = _file_sha256(tmp / LOW_RANK_WEIGHTS_FILE)
        manifest = dict(manifest, head_format=HEAD_FORMAT_LOW_RANK, low_rank=low_rank)
        (tmp / HEAD_MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return manifest


# ---------------------------------------------------------------------------- which tasks a head decodes


def tasks_the_head_improves(rows: Iterable[tuple[str, str, bool, float]]) -> list[str]:
    """The tasks whose answers the head makes better than the model's own, from a before/after report:
    ``rows`` of (task, split, with the head?, task accuracy). A task qualifies when the head's held-out
    accuracy is above the untuned model's and no other split's is below it. On the rest the head
    decodes nothing: the product must not make an answer worse than the plain model's, and a head
    trained on several tasks can break the answers of those it did not learn (the shipped suite head
    loops on ``{"topic": "{`` for spam, FEVER and three more; weights/smollm2-suite-head/report.md)."""
    acc: dict[tuple[str, str], dict[bool, float]] = {}
    for task, split, with_head, accuracy in rows:
        acc.setdefault((task, split), {})[bool(with_head)] = float(accuracy)
    tasks = sorted({task for task, _ in acc})
    out = []
    for task in tasks:
        splits = {split: pair for (t, split), pair in acc.items() if t == task and len(pair) == 2}
        held_out = splits.get("held_out")
        if held_out is None or held_out[True] <= held_out[False]:
            continue
        if all(pair[True] >= pair[False] for pair in splits.values()):
            out.append(task)
    return out


def decoded_tasks(tasks: tuple[TaskInstruction, ...] | None, decodes: Any, *,
                  where: str = "manifest") -> tuple[TaskInstruction, ...] | None:
    """The manifest's ``tasks`` narrowed to its ``decodes`` list (absent: all of them). Each name in
    ``decodes`` must be one of the tasks, or the head could be taken to decode a task it never learnt."""
    if decodes is None:
        return tasks
    if not isinstance(decodes, list) or not all(isinstance(n, str) for n in decodes):
        raise ValueError(f"{where}: field 'decodes' must be a list of task names")
    known = {t.name for t in tasks or ()}
    unknown = [n for n in decodes if n not in known]
    if unknown:
        raise ValueError(f"{where}: field 'decodes' names {unknown}, which are not among the head's 'tasks' "
                         f"({sorted(n for n in known if n)}); name only tasks the head was trained on")
    return tuple(t for t in tasks or () if t.name in decodes)
