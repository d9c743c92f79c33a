"""Generation with same-pass hidden capture, document features, delimiters, heads, cancel, truncation."""

from __future__ import annotations

import threading
import warnings

import mlx.core as mx
import numpy as np
import pytest

from mlx_sdm.errors import DataError
from mlx_sdm.lm.features import (
    DELIMITER_END_OF_TURN,
    DELIMITER_JSON_CLOSE,
    delimiter_index,
    document_features_from_hidden,
    force_decode_batch,
    force_decode_document,
    force_decode_features,
)
from mlx_sdm.lm.generation import GenerationConfig, GenerationResult, generate_with_features, stream_generate_features
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.lm.prompt import render_prompt
from mlx_sdm.lm.loading import LoadedModel, model_fingerprint
from tests.tolerance import model_width, reordered_forward_atol

FEVER_PROMPT = (
    "Check the following document for hallucinations and/or factual inaccuracies. Respond using the following "
    'JSON: {"correctness": bool}. DOCUMENT: On June 2017, the following claim was made: Paris is the capital of France.'
)
SYSTEM = "You are a helpful AI assistant."


@pytest.fixture(scope="module")
def tiny():
    from tests.tiny_lm import build_tiny_lm

    model, tokenizer = build_tiny_lm(seed=0)
    return LoadedModel(model, tokenizer, "tiny", model_fingerprint(model, "llama"), max_context=256)


def reference_hidden(lm, ids):
    return np.asarray(lm.model.model(mx.array(ids)[None])[0])


def atol_for(lm, reference: np.ndarray, positions: int) -> float:
    """Rounding-only difference between two evaluation orders of these hidden states (tests/tolerance.py)."""
    args = lm.model.args
    return reordered_forward_atol(np.abs(reference).max(), width=model_width(args, positions), layers=args.num_hidden_layers)


# ------------------------------------------------------------------------------ features (hand-computed)
def test_document_features_are_mean_and_state_before_delimiter():
    hidden = mx.array(np.arange(12, dtype=np.float32).reshape(6, 2))  # positions 0..5
    f = document_features_from_hidden(hidden, prompt_len=3, completion_len=3, delimiter=1,
                                      delimiter_rule=DELIMITER_JSON_CLOSE)
    # delimiter is completion token 1 -> absolute position 4; the state predicting it is position 3
    np.testing.assert_allclose(f.vector, [3.0, 4.0, 6.0, 7.0])  # mean of rows 0..3 = (3, 4); row 3 = (6, 7)
    assert f.positions == 4 and f.delimiter_position == 4 and f.delimiter_kind == "json_close"
    g = document_features_from_hidden(hidden, prompt_len=3, completion_len=3, delimiter=None,
                                      delimiter_rule=DELIMITER_JSON_CLOSE)
    assert g.delimiter_kind == "end_of_completion" and g.positions == 6


def test_delimiter_found_by_token_not_offset(smollm2):
    tok = smollm2.tokenizer
    for completion in ['{"correctness": true}', 'Sure! {"correctness": false} Anything else?', '{"plausible": true}\n\nok']:
        ids = tok.encode(completion, add_special_tokens=False)
        k = delimiter_index(tok, ids, DELIMITER_JSON_CLOSE)
        assert "}" in tok.decode([ids[k]]) and "}" not in tok.decode(ids[:k])
        assert tok.decode(ids[: k + 1]).rstrip().endswith("}")
    assert delimiter_index(tok, tok.encode("no json here", add_special_tokens=False), DELIMITER_JSON_CLOSE) is None
    # a brace before any "{" does not close the unit
    ids = tok.encode('} then {"a": 1}', add_special_tokens=False)
    k = delimiter_index(tok, ids, DELIMITER_JSON_CLOSE)
    assert tok.decode(ids[: k + 1]).endswith('1}')
    assert delimiter_index(tok, ids, DELIMITER_END_OF_TURN) == len(ids)


def test_force_decoded_features_match_definition(smollm2):
    completion = 'Yes. {"correctness": true} Done.'
    f = force_decode_document(smollm2, FEVER_PROMPT, completion, delimiter=DELIMITER_JSON_CLOSE, system=SYSTEM)
    prompt_ids = render_prompt(smollm2.tokenizer, FEVER_PROMPT, SYSTEM)
    comp = smollm2.tokenizer.encode(completion, add_special_tokens=False)
    k = delimiter_index(smollm2.tokenizer, comp, DELIMITER_JSON_CLOSE)
    h = reference_hidden(smollm2, prompt_ids + comp)  # the whole document, beyond the delimiter too
    last = len(prompt_ids) + k - 1
    expected = np.concatenate([h[: last + 1].mean(0), h[last]])
    np.testing.assert_allclose(f.vector, expected, atol=atol_for(smollm2, expected, len(h)))
    assert f.vector.shape == (2 * 576,) and f.positions == last + 1 and f.prompt_tokens == len(prompt_ids)


# --------------------------------------------------------------------- generation == force-decoding
@pytest.mark.parametrize("rule", [DELIMITER_END_OF_TURN, DELIMITER_JSON_CLOSE])
def test_generated_features_equal_force_decoded(smollm2, rule):
    result = generate_with_features(smollm2, FEVER_PROMPT, GenerationConfig(max_tokens=12, delimiter=rule, system=SYSTEM))
    assert result.tokens and len(result.logprobs) == len(result.tokens)
    assert all(lp <= 0 for lp in result.logprobs)
    forced = force_decode_document(smollm2, FEVER_PROMPT, result.tokens, delimiter=rule, system=SYSTEM)
    assert forced.positions == result.features.positions
    atol = atol_for(smollm2, forced.vector, forced.positions)
    np.testing.assert_allclose(result.features.vector, forced.vector, atol=atol)
    if rule == DELIMITER_END_OF_TURN:  # the text re-tokenizes to the same ids
        again = force_decode_features(smollm2, FEVER_PROMPT, result.text, delimiter=rule, system=SYSTEM)
        np.testing.assert_allclose(result.features.vector, again, atol=atol)


def test_model_talks_sensibly(smollm2):
    result = generate_with_features(smollm2, "What is the capital of France? Answer in one sentence.",
                                    GenerationConfig(max_tokens=16))
    assert "Paris" in result.text
    assert result.finish_reason in {"stop", "length"}


def test_batched_force_decoding_equals_single(smollm2):
    docs = [(FEVER_PROMPT, 'Well {"correctness": true}'), ("Short one?", '{"correctness": false}')]
    batch = force_decode_batch(smollm2, docs, delimiter=DELIMITER_JSON_CLOSE, system=SYSTEM, max_batch_tokens=4096)
    for (p, c), f in zip(docs, batch):
        single = force_decode_document(smollm2, p, c, delimiter=DELIMITER_JSON_CLOSE, system=SYSTEM)
        assert f.positions == single.positions
        np.testing.assert_allclose(f.vector, single.vector, atol=atol_for(smollm2, single.vector, single.positions))


# ------------------------------------------------------------------------------- tiny-model mechanics
def test_stream_yields_pieces_then_result(tiny):
    *pieces, result = stream_generate_features(tiny, "hello world", GenerationConfig(max_tokens=6))
    assert isinstance(result, GenerationResult) and all(isinstance(p, TokenPiece) for p in pieces)
    assert [p.token_id for p in pieces if p.token_id is not None] == result.tokens
    assert "".join(p.text for p in pieces) == result.text == tiny.tokenizer.decode(result.tokens)
    ids = render_prompt(tiny.tokenizer, "hello world")
    h = reference_hidden(tiny, ids + result.tokens)
    n = len(ids) + len(result.tokens)
    # the last token's state predicts the end of turn (generated, or absent after a length stop)
    expected = np.concatenate([h[:n].mean(0), h[n - 1]])
    np.testing.assert_allclose(result.features.vector, expected, atol=atol_for(tiny, expected, n))


def test_head_hook_decodes_from_joint_heads(tiny):
    weight = tiny.model.model.embed_tokens.weight
    vocab = weight.shape[0]
    target = 42

    def joint_head(hidden):
        z = hidden @ weight.T
        bonus = mx.zeros((vocab,)).at[target].add(1e4)
        return mx.concatenate([z, z + bonus], axis=-1)  # [z_neg; z_pos], the positive half prefers `target`

    result = generate_with_features(tiny, "hello", GenerationConfig(max_tokens=4), head=joint_head)
    assert result.tokens == [target] * 4
    # log p = z_t - logsumexp(z), where z_t = z + 1e4 (|z| << 8192, so within [8192, 16384)): exact but
    # for the float32 rounding of two numbers of that size, one spacing (2^-10) each
    assert result.logprobs[0] == pytest.approx(0.0, abs=2 * float(np.spacing(np.float32(1e4))))


def test_stop_event_cancels(tiny):
    stop = threading.Event()
    seen = []
    config = GenerationConfig(max_tokens=50)
    for chunk in stream_generate_features(tiny, "hello", config, stop=stop):
        seen.append(chunk)
        stop.set()
    result = seen[-1]
    assert isinstance(result, GenerationResult) and result.finish_reason in {"cancelled", "stop"}
    assert len(result.tokens) <= 1


def test_left_truncation_is_reported_in_the_result_and_keeps_delimiter_state(tiny):
    """A prompt past the context loses its start; the result counts it (the turn says it once, in words:
    TurnPipeline.fit)."""
    long_prompt = "hello world " * 400
    config = GenerationConfig(max_tokens=8, max_context=64)
    result = generate_with_features(tiny, long_prompt, config)
    assert result.truncated_prompt_tokens > 0 and result.prompt_tokens == 64 - 8
    assert result.features.truncated_prompt_tokens == result.truncated_prompt_tokens
    assert result.features.positions == result.prompt_tokens + len(result.tokens)


def test_force_decode_truncates_prompt_but_not_completion(tiny):
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        f = force_decode_document(tiny, "hello world " * 400, '{"correctness": true}', delimiter=DELIMITER_JSON_CLOSE,
                                  max_context=48)
    assert f.truncated_prompt_tokens > 0 and f.delimiter_kind == "json_close"
    assert f.positions <= 48
    with pytest.raises(DataError, match="completion"):
        force_decode_document(tiny, "hi", "word " * 100, max_context=16)


def test_empty_completion_and_prompt_are_refused(tiny):
    with pytest.raises(DataError, match="completion is empty"):
        force_decode_features(tiny, "hello", "   ")
    with pytest.raises(DataError, match="completion is empty"):
        force_decode_features(tiny, "hello", [])
    with pytest.raises(DataError, match="prompt is empty"):
        generate_with_features(tiny, [], GenerationConfig(max_tokens=2))


def test_streamed_logprobs_are_log_softmax_of_the_chosen_tokens(tiny):
    """The log-prob gathered inside the step graph (ChosenLogprob, no per-token device sync) equals the
    log-softmax of a full recompute at each generated position, up to reordering (tests/tolerance.py)."""
    result = generate_with_features(tiny, "hello world", GenerationConfig(max_tokens=6))
    ids = render_prompt(tiny.tokenizer, "hello world")
    logits = tiny.model(mx.array(ids + result.tokens)[None])[0].astype(mx.float32)
    logsm = np.asarray(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
    expected = [logsm[len(ids) - 1 + i, t] for i, t in enumerate(result.tokens)]
    scale = float(np.abs(np.asarray(logits)).max())
    np.testing.assert_allclose(result.logprobs, expected, atol=atol_for(tiny, np.array([scale]), len(ids) + 6))


def test_chosen_logprob_gathers_in_sampling_order():
    from mlx_sdm.lm.generation import ChosenLogprob

    chosen = ChosenLogprob()
    rows = mx.log(mx.array([[0.1, 0.7, 0.2]])), mx.log(mx.array([0.5, 0.2, 0.3]))  # generate_step's [1, V], and [V]
    tokens = [chosen(r) for r in rows]
    mx.eval(tokens)
    assert [int(t.item()) for t in tokens] == [1, 0]
    assert chosen.pop() == rows[0][0, 1].item() and chosen.pop() == rows[1][0].item()  # a gather is exact


def test_hidden_states_join_only_the_blocks_the_features_read():
    """The block of the token mlx-lm queued ahead (still computing when generation stops) is left out when
    the features need fewer positions; without a count every block is joined."""
    import mlx.core as mx

    from mlx_sdm.lm.generation import HiddenCapture

    capture = HiddenCapture.__new__(HiddenCapture)  # the block list alone; no model needed
    object.__setattr__(capture, "captured", [mx.full((1, 3, 2), 1.0), mx.full((1, 1, 2), 2.0), mx.full((1, 1, 2), 3.0)])
    assert capture.hidden_states().shape == (5, 2)
    assert capture.hidden_states(4).tolist() == [[1.0, 1.0]] * 3 + [[2.0, 2.0]]
    assert capture.hidden_states(2).shape == (3, 2)  # a block is joined whole; the features slice positions
