from mlx_lm import stream_generate


def test_tiny_lm_generates_and_round_trips(tiny_lm):
    model, tokenizer = tiny_lm
    text = 'On June 3, {"correctness": true}'
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hello world"}], add_generation_prompt=True)
    pieces = [r.text for r in stream_generate(model, tokenizer, prompt, max_tokens=8)]
    assert len(pieces) >= 1
