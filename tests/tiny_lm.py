"""A tiny random mlx-lm model with a real (small) byte-level BPE tokenizer and a ChatML template,
built in code, for fast tests of everything that needs a language model.

    lm = build_tiny_lm(seed=0)           # -> (model, tokenizer) ; tokenizer is mlx-lm's TokenizerWrapper
"""

from __future__ import annotations

import functools

import mlx.core as mx
from mlx_lm.models import llama
from mlx_lm.tokenizer_utils import TokenizerWrapper

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "On June 3, the following claim was made: Paris is the capital of France. Was this claim true or false?",
    'Respond using the following JSON: {"correctness": true} {"correctness": false} {"plausible": true}',
    "The quick brown fox jumps over the lazy dog. Hello world! 0123456789",
    "You are a helpful AI assistant. Check the following document for hallucinations.",
    "system user assistant tool decision I booked a flight to Paris and the hotel",
]


@functools.lru_cache(maxsize=4)
def build_tiny_tokenizer(vocab_size: int = 384) -> TokenizerWrapper:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    hf.chat_template = CHATML_TEMPLATE
    return TokenizerWrapper(hf)


def build_tiny_model(vocab_size: int, *, seed: int = 0, hidden_size: int = 32, num_layers: int = 2, tie: bool = True):
    mx.random.seed(seed)
    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        intermediate_size=2 * hidden_size,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
        vocab_size=vocab_size,
        tie_word_embeddings=tie,
        max_position_embeddings=2048,
    )
    model = llama.Model(args)
    # Larger random weights than the default init, so greedy decoding is not one repeated token.
    model.update(
        {"model": {"embed_tokens": {"weight": mx.random.normal(model.model.embed_tokens.weight.shape) * 0.5}}}
    )
    mx.eval(model.parameters())
    model.eval()
    return model


def build_tiny_lm(seed: int = 0, hidden_size: int = 32, num_layers: int = 2):
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(len(tokenizer._tokenizer), seed=seed, hidden_size=hidden_size, num_layers=num_layers)
    return model, tokenizer
