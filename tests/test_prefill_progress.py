"""A long prompt's prefill is reported (mlx-lm's prompt_progress_callback) through the pipeline's observer,
and ``generate``/``chat --plain`` turn that into a progress bar on stderr."""

from __future__ import annotations

import io

from mlx_sdm.app.prefill_progress import PrefillProgress
from mlx_sdm.session.pipeline import TurnPipeline
from mlx_sdm.session.turn import TurnComponents, TurnObserver, TurnOptions, TurnRequest
from tests.tiny_verifier import tiny_loaded_model


class Recorder(TurnObserver):
    def __init__(self):
        self.prefills: list[tuple[int, int]] = []
        self.tokens_before_prefill_done = 0

    def prefill(self, done: int, total: int) -> None:
        self.prefills.append((done, total))

    def token(self, piece) -> None:
        if not self.prefills or self.prefills[-1][0] < self.prefills[-1][1] - 1:
            self.tokens_before_prefill_done += 1


def test_long_prompt_prefill_is_reported_to_the_observer():
    lm = tiny_loaded_model(max_context=8192)
    question = "tell me " * 500  # several prefill steps of 2048 tokens on the tiny tokenizer
    recorder = Recorder()
    TurnPipeline(TurnComponents(lm=lm)).run(
        TurnRequest([{"role": "user", "content": question}], TurnOptions(max_tokens=2, enable_p_true=False, reuse_cache=False)),
        observer=recorder)
    totals = {total for _, total in recorder.prefills}
    assert len(totals) == 1 and totals.pop() > 2048
    done = [d for d, _ in recorder.prefills]
    assert done[0] == 0 and done == sorted(done) and len(done) >= 3  # start, each 2048-token step, the end
    assert done[-1] >= recorder.prefills[-1][1] - 1  # the whole prompt (mlx-lm may leave the last token to step 1)
    assert recorder.tokens_before_prefill_done == 0


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_prefill_bar_only_for_long_prompts():
    out = Terminal()
    short = PrefillProgress(min_tokens=1000, file=out)
    short(0, 10), short(9, 10)
    assert out.getvalue() == "" and short.bar is None
    long = PrefillProgress(min_tokens=1000, file=out)
    for done in (0, 2048, 4095, 4096):  # mlx-lm reports the end twice: no second bar
        long(done, 4096)
    assert out.getvalue().count("reading the prompt:   0%") == 1 and long.bar is None  # closed at the end
    assert long.calls == [(0, 4096), (2048, 4096), (4095, 4096), (4096, 4096)]
    long(0, 4096)  # the next turn's long prompt draws its own bar
    assert long.bar is not None


def test_prefill_bar_prints_nothing_when_piped():
    out = io.StringIO()  # not a terminal: the transient bar would only be redraws in a log
    bar = PrefillProgress(min_tokens=1000, file=out)
    for done in (0, 2048, 4095, 4096):
        bar(done, 4096)
    assert out.getvalue() == "" and bar.bar is None


def test_engine_event_observer_sends_prefill_events_only_for_long_prompts():
    from mlx_sdm.session.events import LONG_PREFILL_TOKENS, PrefillEvent
    from mlx_sdm.session.engine import EventObserver

    sent = []
    observer = EventObserver(sent.append, "s", 1, verifier=None)
    observer.prefill(0, 10), observer.prefill(10, 10)
    assert sent == []
    observer.prefill(0, LONG_PREFILL_TOKENS), observer.prefill(LONG_PREFILL_TOKENS - 1, LONG_PREFILL_TOKENS)
    assert [(e.done, e.total) for e in sent] == [(0, LONG_PREFILL_TOKENS), (LONG_PREFILL_TOKENS - 1, LONG_PREFILL_TOKENS)]
    assert all(isinstance(e, PrefillEvent) and e.kind == "prefill" for e in sent)
