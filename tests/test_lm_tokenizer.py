"""The GGUF-built SmolLM2 tokenizer: round trips, ChatML special ids, agreement with transformers."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.smollm2

CORPUS = [
    "Hello, world!",
    "  leading and trailing spaces  ",
    "tabs\tand\nnew\nlines\r\n",
    "Unicode: café, naïve, Straße, 東京, Ελληνικά, emoji 🙂👍🏽",
    'def f(x):\n    return {"a": [1, 2, 3]}  # comment',
    "Numbers 3.14159, 1e-5, 2024-11-22, 1,000,000 and -42",
    '{"correctness": true}',
    '{"plausible": false}',
    "",
    "   ",
    "<|im_start|> appears as text here",
]


def test_round_trip_recovers_text(smollm2):
    tok = smollm2.tokenizer
    for text in CORPUS:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text, text


def test_digits_split_one_by_one_like_llama_cpp_smollm(smollm2):
    tok = smollm2.tokenizer
    ids = tok.encode("2024", add_special_tokens=False)
    assert [tok.decode([i]) for i in ids] == ["2", "0", "2", "4"]


def test_chat_template_gives_chatml_special_ids(smollm2):
    tok = smollm2.tokenizer
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [0, 1, 2]
    assert tok.eos_token_ids == {2}
    text = tok.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode(text, add_special_tokens=False)

    def enc(t):
        return tok.encode(t, add_special_tokens=False)

    expected = [1] + enc("system\nS") + [2] + enc("\n") + [1] + enc("user\nHi") + [2] + enc("\n") + [1] + enc("assistant\n")
    assert ids == expected
    # no BOS is added (tokenizer.ggml.add_bos_token = false)
    assert tok.encode("Hi")[0] != 1


def test_ids_match_transformers_gguf_tokenizer_builder(smollm2):
    """transformers' own GGUF tokenizer conversion gives the same ids (its file reader needs torch,
    so the metadata is fed from mx.load). transformers keeps GPT-2's regex for pre = "smollm" where
    we split digits first as llama.cpp does; SmolLM2's merges never join digits, so ids agree."""
    mapping = pytest.importorskip("transformers.integrations.gguf.gguf_tokenizer_mapping")
    import mlx.core as mx

    from mlx_sdm.lm.loading import embedded_gguf_path

    _, meta = mx.load(str(embedded_gguf_path()), return_metadata=True)
    tokenizer_dict = {
        "tokenizer_type": "gpt2",
        "pre_tokenizer_type": meta["tokenizer.ggml.pre"],
        "tokens": list(meta["tokenizer.ggml.tokens"]),
        "merges": list(meta["tokenizer.ggml.merges"]),
        "token_type": meta["tokenizer.ggml.token_type"].tolist(),
    }
    theirs, _ = mapping.convert_gguf_tokenizer("llama", tokenizer_dict)
    ours = smollm2.tokenizer
    texts = CORPUS + [
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        "Check the following document for hallucinations and/or factual inaccuracies.",
        "year 2024, 12345678901234567890 and 3.5x",
    ]
    for text in texts:
        assert ours.encode(text, add_special_tokens=False) == theirs.encode(text, add_special_tokens=False).ids, text
