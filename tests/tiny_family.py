"""Tiny random mlx-lm models of three families (llama, phi3, qwen2) with the tiny tokenizer, saved as mlx-lm model
folders, and a small task file of ours in the task format: what the fine-tuning tests run on.

    folder = save_tiny_family(tmp_path / "base", "qwen2")
    task = write_word_task(tmp_path / "words.jsonl", rows=120)
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx

FAMILIES = ("llama", "phi3", "qwen2")
#: The word task's instruction (every prompt starts with it, so the chat routes its questions by it).
WORD_INSTRUCTION = 'Is the following word a fruit? Respond using the following JSON: {"fruit": bool}.'
FRUITS = ("apple", "pear", "plum", "grape", "lemon", "melon", "peach", "mango", "cherry", "lime")
OTHERS = ("hammer", "chair", "paper", "cloud", "river", "stone", "table", "glass", "shirt", "clock")


def build_family_model(family: str, vocab_size: int, *, seed: int = 0, hidden: int = 32, layers: int = 2):
    from mlx_lm.models import llama, phi3, qwen2

    mx.random.seed(seed)
    common = dict(model_type=family, hidden_size=hidden, num_hidden_layers=layers, intermediate_size=2 * hidden,
                  num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=vocab_size,
                  max_position_embeddings=2048)
    if family == "llama":
        model = llama.Model(llama.ModelArgs(**common, tie_word_embeddings=True))
    elif family == "phi3":
        model = phi3.Model(phi3.ModelArgs(**{**common, "num_key_value_heads": 4}, tie_word_embeddings=False))
    elif family == "qwen2":
        model = qwen2.Model(qwen2.ModelArgs(**common, tie_word_embeddings=True))
    else:
        raise ValueError(family)
    mx.eval(model.parameters())
    model.eval()
    return model


def save_tiny_family(folder: Path, family: str, *, seed: int = 0, bits: int | None = None) -> Path:
    """An mlx-lm model folder (config.json, safetensors, tokenizer files) of a tiny random ``family`` model;
    ``bits``: stored quantized (mlx-lm's layout: what a 4-bit hub model is), as QLoRA trains over it."""
    import mlx.nn as nn
    from mlx_lm.utils import save_config, save_model

    from tests.tiny_lm import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    model = build_family_model(family, len(tokenizer._tokenizer), seed=seed)
    config = dict(vars(model.args))
    if bits is not None:
        nn.quantize(model, group_size=32, bits=bits)
        config["quantization"] = {"group_size": 32, "bits": bits}
    folder.mkdir(parents=True, exist_ok=True)
    save_model(folder, model, donate_model=False)
    save_config(config, config_path=folder / "config.json")
    tokenizer.save_pretrained(folder)
    return folder


def write_word_task(path: Path, rows: int = 120, *, shifted: int = 0) -> Path:
    """``rows`` prompts asking whether a word is a fruit (true for FRUITS), in the task format; ``shifted`` more
    rows marked as a shifted collection (the word in capitals)."""
    lines = []
    words = FRUITS + OTHERS
    for i in range(rows + shifted):
        word = words[i % len(words)]
        shown = word.upper() if i >= rows else word
        row = {"id": f"w{i}", "prompt": f"{WORD_INSTRUCTION} WORD: {shown} {i}", "answer": {"fruit": word in FRUITS}}
        if i >= rows:
            row["split"] = "shifted"
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
