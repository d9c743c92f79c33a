"""How an answer is decoded: greedy (the default: task and everyday turns, whose verdicts are calibrated on greedy
answers, token for token as plain mlx-lm) or sampled with a repetition penalty, through mlx-lm's own
``make_sampler`` and ``make_logits_processors``, so that writing turns do not loop.

- :data:`WRITING`: a turn with no checkable answer (a poem, a note, advice: nothing the verifier judges) is decoded
  with the sampling the SmolLM2-Instruct model card recommends (temperature 0.2, top_p 0.9) plus mlx-lm's repetition
  penalty, from a fixed seed so the same conversation gets the same answer. Greedy decoding loops on such requests
  (a poem looped until the monitor paused it).
- :data:`LOOP_RETRY`: a writing turn whose answer still starts to loop (the monitor's loop rule,
  ``monitor/online/degenerate.py``, trips on it while it streams) is stopped there and goes on once from the text
  already shown with a stronger repetition penalty over a longer context and another seed, before any pause.
- :data:`NO_REPEAT`: the one retry of a follow-up whose answer came out as the previous answer word for word: greedy,
  with a repetition penalty over a context long enough to hold the previous answer in the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Decoding:
    """A decoding other than greedy: mlx-lm's sampler (``temperature``, ``top_p``; 0: greedy) and logits processors
    (``repetition_penalty`` over the last ``repetition_context_size`` tokens), from ``seed`` when one is given."""

    temperature: float = 0.0
    top_p: float = 0.0
    repetition_penalty: float | None = None
    repetition_context_size: int = 20
    seed: int | None = None

    def sampler(self) -> Callable[[Any], Any] | None:
        """mlx-lm's sampler for these settings (None: greedy)."""
        if self.temperature <= 0:
            return None
        from mlx_lm.sample_utils import make_sampler

        return make_sampler(temp=self.temperature, top_p=self.top_p)

    def logits_processors(self) -> list[Callable[[Any, Any], Any]]:
        """mlx-lm's logits processors for these settings (none without a repetition penalty)."""
        if self.repetition_penalty is None:
            return []
        from mlx_lm.sample_utils import make_logits_processors

        return make_logits_processors(repetition_penalty=self.repetition_penalty,
                                      repetition_context_size=self.repetition_context_size)


#: SmolLM2-Instruct's model card: temperature 0.2, top_p 0.9; with mlx-lm's repetition penalty (1.1, its usual value).
WRITING = Decoding(temperature=0.2, top_p=0.9, repetition_penalty=1.1, seed=0)
#: A follow-up that returned the previous answer verbatim is asked once more with this (greedy, penalised repeats).
NO_REPEAT = Decoding(repetition_penalty=1.3, repetition_context_size=512)
#: A writing turn's loop, stopped as it starts, goes on once with this (the card's sampling, a stronger penalty).
LOOP_RETRY = Decoding(temperature=0.2, top_p=0.9, repetition_penalty=1.3, repetition_context_size=256, seed=1)
