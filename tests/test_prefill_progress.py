"""A long prompt's prefill is reported (mlx-lm's prompt_progress_callback) through the turn's ``on_prefill``,
and ``generate``/``chat --plain`` turn that into a progress bar on stderr."""

from __future__ import annotations

import io

from mlx_sdm.usecases.prefill_progress import PrefillBar
from mlx_sdm.turn.pipeline import TurnPipeline
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.turn.values import TurnComponents, TurnOptions, TurnRequest
from tests.tiny_verifier import tiny_loaded_model


def test_long_prompt_prefill_is_reported_before_the_first_piece():
    lm = tiny_loaded_model(max_context=8192)
    question = "tell me " * 500  # several prefill steps of 2048 tokens on the tiny tokenizer
    prefills: list[tuple[int, int]] = []
    tokens_before_prefill_done = 0
    request = TurnRequest([{"role": "user", "content": question}], TurnOptions(max_tokens=2, enable_p_true=False, reuse_cache=False))
    for item in TurnPipeline(TurnComponents(lm=lm)).stream(request, on_prefill=lambda done, total: prefills.append((done, total))):
        if isinstance(item, TokenPiece) and (not prefills or prefills[-1][0] < prefills[-1][1] - 1):
            tokens_before_prefill_done += 1
    totals = {total for _, total in prefills}
    assert len(totals) == 1 and totals.pop() > 2048
    done = [d for d, _ in prefills]
    assert done[0] == 0 and done == sorted(done) and len(done) >= 3  # start, each 2048-token step, the end
    assert done[-1] >= prefills[-1][1] - 1  # the whole prompt (mlx-lm may leave the last token to step 1)
    assert tokens_before_prefill_done == 0


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_prefill_bar_only_for_long_prompts():
    out = Terminal()
    short = PrefillBar(min_tokens=1000, file=out)
    short(0, 10), short(9, 10)
    assert out.getvalue() == "" and short.bar is None
    long = PrefillBar(min_tokens=1000, file=out)
    for done in (0, 2048, 4095, 4096):  # mlx-lm reports the end twice: no second bar
        long(done, 4096)
    assert out.getvalue().count("reading the prompt:   0%") == 1 and long.bar is None  # closed at the end
    assert long.calls == [(0, 4096), (2048, 4096), (4095, 4096), (4096, 4096)]
    long(0, 4096)  # the next turn's long prompt draws its own bar
    assert long.bar is not None


def test_prefill_bar_prints_nothing_when_piped():
    out = io.StringIO()  # not a terminal: the transient bar would only be redraws in a log
    bar = PrefillBar(min_tokens=1000, file=out)
    for done in (0, 2048, 4095, 4096):
        bar(done, 4096)
    assert out.getvalue() == "" and bar.bar is None


def test_the_engine_sends_prefill_progress_only_for_long_prompts():
    from mlx_sdm.executor.events import LONG_PREFILL_TOKENS, PrefillProgress, prefill_progress

    sent = [p for p in (prefill_progress(0, 10), prefill_progress(10, 10)) if p is not None]
    assert sent == []
    sent = [p for p in (prefill_progress(0, LONG_PREFILL_TOKENS),
                        prefill_progress(LONG_PREFILL_TOKENS - 1, LONG_PREFILL_TOKENS)) if p is not None]
    assert sent == [PrefillProgress(0, LONG_PREFILL_TOKENS), PrefillProgress(LONG_PREFILL_TOKENS - 1, LONG_PREFILL_TOKENS)]
    assert all(type(p) is PrefillProgress for p in sent)
