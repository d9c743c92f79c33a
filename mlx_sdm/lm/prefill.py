"""A prompt read in chunks: the forward passes that are not generation (P(True)'s question, the verifier's
force-decoding) feed a long prompt ``PREFILL_STEP_TOKENS`` positions at a time through a KV cache, as mlx-lm's
``generate_step`` prefills the answer's prompt (``GenerationConfig.prefill_step_size``).

Why: attention over L positions in one piece holds an L × L score matrix per head (MLX on a CPU computes
it in float32), so 8,192 tokens of SmolLM2 (9 heads) need 2.4 GB for one layer's scores and 25,000 tokens
22 GB; a chunk of c positions against the cache holds c × L. Causal attention gives every position the same
keys and values either way, so the hidden states are those of the one-piece pass up to float rounding.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import mlx.core as mx

#: Positions fed per forward pass: a chunk's scores are 9 heads × 512 × 8,192 × 4 bytes = 151 MB for
#: SmolLM2 at its full context, and a chunk of a prompt on two CPU cores takes a few seconds, so a
#: progress line moves.
PREFILL_STEP_TOKENS = 512


def prefill_hidden(model: Any, inputs: mx.array | Sequence[int], cache: list | None = None, *,
                   step: int = PREFILL_STEP_TOKENS,
                   on_progress: Callable[[int, int], None] | None = None) -> mx.array:
    """The final normed hidden states ``model.model`` gives ``inputs`` ([B, L] or ids), fed ``step``
    positions at a time through ``cache`` (a fresh one when None); returns [B, L, D], evaluated."""
    from mlx_lm.models.cache import make_prompt_cache

    tokens = inputs if isinstance(inputs, mx.array) else mx.array([list(inputs)])
    cache = cache if cache is not None else make_prompt_cache(model)
    total = int(tokens.shape[1])
    blocks = []
    for start in range(0, total, step):
        hidden = model.model(tokens[:, start:start + step], cache=cache)
        mx.eval(hidden, [c.state for c in cache])  # free the chunk's attention scores before the next
        blocks.append(hidden)
        if on_progress is not None:
            on_progress(min(total, start + step), total)
    return mx.concatenate(blocks, axis=1) if len(blocks) > 1 else blocks[0]
