"""System 2 samples from a local mlx-lm model (docs/monitoring.md, AUQ System 2 sampling; signals of the local model).

:class:`MLXResponseSampler` draws fresh responses to the step's prompt at temperature 0.8, capped at
about 1.5x the original response length. The prompt (all but its last token) is prefilled once into
a prompt cache; each sample continues from it and the cache is trimmed back afterwards, so n samples
cost one prefill plus n decodes.
"""

from __future__ import annotations

import math
from typing import Sequence

import mlx_sdm  # noqa: F401
import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache
from mlx_lm.sample_utils import make_sampler

from mlx_sdm.monitor.online.auq_config import SAMPLING_TEMPERATURE

LENGTH_FACTOR = 1.5  # cap each sample at about 1.5x the original length (docs/monitoring.md, signals of the local model)
MIN_SAMPLE_TOKENS = 8


class MLXResponseSampler:
    """``sample(n) -> list[str]`` of fresh responses (the original response is never one of them)."""

    def __init__(self, model, tokenizer, prompt_tokens: Sequence[int], *, original_length: int = 64,
                 temperature: float = SAMPLING_TEMPERATURE, seed: int | None = None, max_tokens: int | None = None):
        if len(prompt_tokens) == 0:
            raise ValueError("the sampler needs a non-empty prompt")
        self.model, self.tokenizer = model, tokenizer
        self.prompt = list(prompt_tokens)
        self.max_tokens = max_tokens or max(MIN_SAMPLE_TOKENS, math.ceil(LENGTH_FACTOR * original_length))
        self.sampler = make_sampler(temp=temperature)
        self.seed = seed
        self.drawn = 0
        self._cache = None
        self._base = 0

    def _prefill(self) -> None:
        self._cache = make_prompt_cache(self.model)
        if len(self.prompt) > 1:
            self.model(mx.array(self.prompt[:-1])[None], cache=self._cache)
            mx.eval([c.state for c in self._cache])
        self._base = len(self.prompt) - 1

    def _one(self) -> str:
        if self.seed is not None:
            mx.random.seed(self.seed + self.drawn)
        self.drawn += 1
        trimmable = self._cache is not None and can_trim_prompt_cache(self._cache)
        if self._cache is None or not trimmable:
            self._prefill()
        eos = set(getattr(self.tokenizer, "eos_token_ids", None) or [self.tokenizer.eos_token_id])
        out: list[int] = []
        for token, _ in generate_step(mx.array(self.prompt[-1:]), self.model, max_tokens=self.max_tokens,
                                      sampler=self.sampler, prompt_cache=self._cache):
            if token in eos:
                break
            out.append(int(token))
        if can_trim_prompt_cache(self._cache):
            trim_prompt_cache(self._cache, self._cache[0].offset - self._base)
        else:
            self._cache = None
        return self.tokenizer.decode(out)

    def sample(self, n: int) -> list[str]:
        return [self._one() for _ in range(n)]
