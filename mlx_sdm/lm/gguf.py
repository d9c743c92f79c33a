"""Build mlx-lm's llama architecture from a GGUF file read by ``mx.load(path, return_metadata=True)``.

MLX reads GGUF directly: Q4_0/Q4_1/Q8_0 tensors come back in MLX's quantized layout
(``weight`` uint32, ``scales``, ``biases``; group size 32), everything else as plain arrays.
This module maps GGUF tensor names to mlx-lm names, undoes llama.cpp's rotary permutation of the
Q and K projections, and either dequantizes to float32 (the default: faster on CPU) or keeps the
4-bit layout in ``nn.QuantizedLinear`` / ``nn.QuantizedEmbedding`` modules.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama

from mlx_sdm.errors import ArtifactError

#: MLX's GGUF reader returns Q4_0/Q4_1/Q8_0 tensors with this group size.
GGUF_GROUP_SIZE = 32

#: GGUF block-level names -> mlx-lm llama names (inside ``model.layers.N``).
_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


@dataclass
class GGUFModel:
    model: llama.Model
    metadata: dict[str, Any]
    config: dict[str, Any]
    bits: int | None  # the most common kept width (per-layer widths in config['quantization']), None for float32


def _scalar(metadata: dict, key: str, default: Any = None) -> Any:
    if key not in metadata:
        if default is None:
            raise ArtifactError(f"GGUF metadata has no {key!r}; is this a llama-architecture GGUF file?")
        return default
    value = metadata[key]
    if isinstance(value, mx.array):
        return value.item()
    return value


def config_from_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """mlx-lm llama ``ModelArgs`` fields from GGUF ``llama.*`` metadata."""
    arch = _scalar(metadata, "general.architecture")
    if arch != "llama":
        raise ArtifactError(f"GGUF architecture is {arch!r}; only 'llama' GGUF files can be loaded here.")
    hidden = int(_scalar(metadata, "llama.embedding_length"))
    heads = int(_scalar(metadata, "llama.attention.head_count"))
    vocab = metadata.get("llama.vocab_size")
    vocab = int(vocab.item()) if isinstance(vocab, mx.array) else len(metadata["tokenizer.ggml.tokens"])
    return {
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": int(_scalar(metadata, "llama.block_count")),
        "intermediate_size": int(_scalar(metadata, "llama.feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_scalar(metadata, "llama.attention.head_count_kv", heads)),
        "rms_norm_eps": float(_scalar(metadata, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
        "vocab_size": vocab,
        "max_position_embeddings": int(_scalar(metadata, "llama.context_length", 2048)),
        "rope_theta": float(_scalar(metadata, "llama.rope.freq_base", 10000.0)),
        "rope_traditional": False,
        "tie_word_embeddings": True,  # set below from the tensors present
    }


def unpermute_rotary(w: mx.array, n_heads: int) -> mx.array:
    """Undo llama.cpp's ``permute`` of Q/K rows (convert_hf_to_gguf.py, LlamaModel.permute).

    llama.cpp reorders each head's rows from the half-split rotary layout (HF, mlx-lm's
    ``traditional=False``) to the interleaved one: ``reshape(h, 2, d/2, ...).swapaxes(1, 2)``.
    The inverse is ``reshape(h, d/2, 2, ...).swapaxes(1, 2)``. It permutes whole rows, so it applies
    to a quantized weight's packed rows, scales and biases alike.
    """
    rows, cols = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def _rename(weights: dict[str, mx.array], config: dict[str, Any]) -> dict[str, mx.array]:
    out: dict[str, mx.array] = {}
    for name, value in weights.items():
        parts = name.split(".")
        suffix = parts[-1]  # weight | scales | biases | bias
        if parts[0] == "blk":
            layer, key = parts[1], parts[2]
            if key not in _LAYER_NAMES:
                raise ArtifactError(f"GGUF tensor {name!r} has no llama counterpart in mlx-lm.")
            if key in ("attn_q", "attn_k") and suffix != "bias":
                heads = config["num_attention_heads"] if key == "attn_q" else config["num_key_value_heads"]
                value = unpermute_rotary(value, heads)
            out[f"model.layers.{layer}.{_LAYER_NAMES[key]}.{suffix}"] = value
        else:
            key = parts[0]
            if key not in _TOP_NAMES:
                raise ArtifactError(f"GGUF tensor {name!r} has no llama counterpart in mlx-lm.")
            out[f"{_TOP_NAMES[key]}.{suffix}"] = value
    return out


def _quantized_bits(weights: dict[str, mx.array], prefix: str) -> int:
    packed = weights[prefix + ".weight"].shape[-1] * 32
    in_dim = weights[prefix + ".scales"].shape[-1] * GGUF_GROUP_SIZE
    return packed // in_dim


def load_gguf_model(path: str | os.PathLike, *, quantized: bool = False) -> GGUFModel:
    """Load a llama GGUF as an mlx-lm ``llama.Model`` (float32 by default, 4-bit with ``quantized``)."""
    path = os.fspath(path)
    try:
        raw, metadata = mx.load(path, return_metadata=True)
    except Exception as exc:  # mlx raises RuntimeError/ValueError on a bad file
        raise ArtifactError(f"{path}: cannot read as GGUF ({exc}).") from exc
    config = config_from_metadata(metadata)
    weights = _rename(raw, config)
    config["tie_word_embeddings"] = "lm_head.weight" not in weights
    quantized_prefixes = sorted(k[: -len(".scales")] for k in weights if k.endswith(".scales"))
    bits: int | None = None
    layer_bits: dict[str, int] = {}
    if quantized and quantized_prefixes:
        layer_bits = {p: _quantized_bits(weights, p) for p in quantized_prefixes}
        # SmolLM2's Q4_1 file keeps token_embd at Q8_0 and the rest at 4 bits: `bits` is the common width
        bits = max(set(layer_bits.values()), key=list(layer_bits.values()).count)
    else:
        for prefix in quantized_prefixes:
            w = weights.pop(prefix + ".weight")
            scales = weights.pop(prefix + ".scales")
            biases = weights.pop(prefix + ".biases")
            b = (w.shape[-1] * 32) // (scales.shape[-1] * GGUF_GROUP_SIZE)
            weights[prefix + ".weight"] = mx.dequantize(w, scales, biases, group_size=GGUF_GROUP_SIZE, bits=b).astype(
                mx.float32
            )
    for key, value in list(weights.items()):
        if mx.issubdtype(value.dtype, mx.floating) and not key.endswith((".scales", ".biases")):
            weights[key] = value.astype(mx.float32)
    args = llama.ModelArgs.from_dict(config)
    model = llama.Model(args)
    if layer_bits:
        nn.quantize(
            model,
            class_predicate=lambda p, m: (
                {"group_size": GGUF_GROUP_SIZE, "bits": layer_bits[p]} if p in layer_bits and hasattr(m, "to_quantized") else False
            ),
        )
    model.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    model.eval()
    if layer_bits:
        config["quantization"] = {"group_size": GGUF_GROUP_SIZE, "bits": bits,
                                  **{p: {"group_size": GGUF_GROUP_SIZE, "bits": b} for p, b in layer_bits.items() if b != bits}}
    return GGUFModel(model=model, metadata=metadata, config=config, bits=bits)
