"""A tokenizer from GGUF metadata alone (no hub access): byte-level BPE tokens and merges, special
tokens and the chat template, built with ``tokenizers`` and wrapped as
transformers ``PreTrainedTokenizerFast`` -> mlx-lm ``TokenizerWrapper``.

Pre-tokenization follows llama.cpp for the ``tokenizer.ggml.pre`` value: SmolLM2 (``smollm``) and
the StarCoder family split every digit on its own before the GPT-2 regex (the same as the
``Digits(individual_digits=True)`` + ``ByteLevel`` pre-tokenizer of SmolLM2's own tokenizer.json).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.tokenizer_utils import TokenizerWrapper

from mlx_sdm.errors import ArtifactError

#: llama.cpp token types (tokenizer.ggml.token_type).
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

#: ``tokenizer.ggml.pre`` values whose llama.cpp pre-tokenizer splits digits one by one before
#: the GPT-2 regex (llama-vocab.cpp: STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA).
DIGIT_SPLIT_PRE = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"}


def _value(metadata: dict[str, Any], key: str) -> Any:
    value = metadata.get(key)
    if isinstance(value, mx.array):
        return value.tolist() if value.ndim else value.item()
    return value


def tokenizer_from_gguf_metadata(metadata: dict[str, Any]) -> TokenizerWrapper:
    """mlx-lm ``TokenizerWrapper`` for a byte-level BPE (``tokenizer.ggml.model == "gpt2"``) GGUF."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    kind = _value(metadata, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ArtifactError(
            f"GGUF tokenizer model is {kind!r}; only byte-level BPE ('gpt2') tokenizers are built from GGUF here. "
            "Load such a model from an mlx-lm folder instead."
        )
    tokens: list[str] = list(metadata["tokenizer.ggml.tokens"])
    merges_raw: list[str] = list(metadata.get("tokenizer.ggml.merges") or [])
    if not merges_raw:
        raise ArtifactError("GGUF metadata has no tokenizer.ggml.merges; cannot build the BPE tokenizer.")
    merges = [tuple(m.split(" ", 1)) for m in merges_raw]
    vocab = {token: index for index, token in enumerate(tokens)}
    token_types = _value(metadata, "tokenizer.ggml.token_type") or [1] * len(tokens)

    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    pre = _value(metadata, "tokenizer.ggml.pre")
    if pre in DIGIT_SPLIT_PRE:
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    else:
        backend.pre_tokenizer = byte_level
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)

    special = [t for t, kind in zip(tokens, token_types) if kind == TOKEN_TYPE_CONTROL]
    user = [t for t, kind in zip(tokens, token_types) if kind == TOKEN_TYPE_USER_DEFINED]
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    if user:
        backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])

    def token_for(key: str) -> str | None:
        index = _value(metadata, f"tokenizer.ggml.{key}")
        return tokens[int(index)] if index is not None else None

    hf = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=token_for("bos_token_id"),
        eos_token=token_for("eos_token_id"),
        unk_token=token_for("unknown_token_id"),
        pad_token=token_for("padding_token_id"),
        add_bos_token=bool(_value(metadata, "tokenizer.ggml.add_bos_token")),
        clean_up_tokenization_spaces=False,
    )
    template = _value(metadata, "tokenizer.chat_template")
    if template:
        hf.chat_template = template
    return TokenizerWrapper(hf)
