"""Negative and positive vocabulary heads of the SDM network (spec § 15.1, § 16).

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
:func:`load_head` refuses it for another base model.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from mlx_sdm.atomic import atomic_directory
from mlx_sdm.errors import ArtifactError, ModelMismatchError

HEAD_FORMAT_VERSION = 1
HEAD_WEIGHTS_FILE = "positive_head.safetensors"
HEAD_MANIFEST_FILE = "manifest.json"
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "base_model": self.base_model,
            "verifier": self.verifier,
            "data_hash": self.data_hash,
            "epochs": self.epochs,
            "best_epoch": self.best_epoch,
            "metrics": self.metrics,
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
    """Load a positive head written by :func:`save_head` for ``model`` (whose fingerprint is
    ``fingerprint``, e.g. ``LoadedModel.fingerprint``); refuse one trained on another model.

    The result's :meth:`VocabularyHeads.vocab_logits` is the ``head`` hook for generation.
    """
    from mlx_sdm.resources import resolve_artifact

    directory = resolve_artifact(directory)
    manifest = read_head_manifest(directory)
    check_fingerprint(manifest.get("base_model", {}), fingerprint, what="this head", where=str(directory))
    weights_path = directory / HEAD_WEIGHTS_FILE
    try:
        positive = mx.load(str(weights_path))["positive"]
    except (FileNotFoundError, KeyError, ValueError, RuntimeError) as exc:
        raise ArtifactError(f"{weights_path}: cannot read the positive head ({exc}); re-run `mlx-sdm finetune`") from None
    heads = VocabularyHeads(output_head_weight(model), positive)
    object.__setattr__(heads, "manifest", manifest)  # plain attribute, not a parameter
    return heads
