"""Pilot test of what a person reads of a verdict in the real app (issue 41): the badge holds no numbers and no lean
word the 4-in-5 rule does not allow; the evidence (ctrl+b, wherever the focus is) opens with the verdict's one short
line, the same line ``chat --plain`` and the server say, and holds the numbers and the lean's measurement; ``v`` on a
focused message (Tab focuses the message, not its badge) opens the full evidence screen with the raw numbers instead
of typing a "v" into the input."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from mlx_sdm.calibration.row_verdict import Exemplar, Verdict
from mlx_sdm.executor.engine import ChatEngine, EngineConfig
from mlx_sdm.network.lean import Lean
from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.network.verdict_words import verdict_line, verdict_words
from tests.test_tui_flows import LOW_EVERYWHERE, MAX_TOKENS, SIZE, plain, send, wait_until
from tests.tiny_verifier import tiny_components
from tui.app import SdmChatApp
from tui.screens.evidence_screen import EvidenceScreen

pytestmark = pytest.mark.asyncio

#: Not verified, leaning right with the open-question member's measured lean: 60 % precision beats the base rate
#: (it is in the evidence) but its lowest split's lower bound is 0.16, so it is no word on the badge.
LEAN = Lean(1, True, 0.6, 0.217, 0.486, 60, ("held-out", "shifted"), 0.158)
VERDICT = Verdict(prediction=1, p_lower=None, admitted=False, q=4, d=0.412, q_bin=1, reason="below_threshold",
                  exemplars=[Exemplar("tiny-2", 1, 1, 2.879, "Paris is the capital of Spain. Is this claim true or false?")],
                  softmax=[0.31, 0.69])


class LeaningVerifier:
    """The tiny verifier (support, coverage: real) whose ``judge`` gives :data:`VERDICT` with :data:`LEAN`."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def judge(self, features, explain: int = 5, *, task: str | None = None, route=None, answer=None) -> DocumentVerdict:
        return DocumentVerdict(VERDICT, alpha=self._real.estimator.alpha, coverage=self._real.coverage, lean=LEAN)


@pytest.fixture
def engine(store, verifier_dir):
    real_factory = tiny_components(verifier_dir)

    def factory(engine_config):
        components = real_factory(engine_config)
        components.verifier = LeaningVerifier(components.verifier)
        return components

    engine = ChatEngine(EngineConfig(max_tokens=MAX_TOKENS, embedder="none", auq_thresholds=LOW_EVERYWHERE,
                                     enable_p_true=False), store, components=factory)
    engine.ready.result(timeout=120)
    yield engine
    engine.shutdown()


async def test_the_badge_says_the_short_words_and_the_evidence_holds_the_numbers(store, engine):
    app = SdmChatApp(engine=engine, store=store)
    async with app.run_test(size=SIZE) as pilot:
        bubble = await send(pilot, app, "Paris is the capital of France. Is this claim true or false?")
        words = verdict_words(bubble.badge.verdict)
        badge = str(bubble.badge.render())
        assert badge == "▸ ? not verified · cannot tell", badge  # no numbers, no "leans right" (60 %: not 4 in 5)
        assert "q =" not in badge and "p_lower" not in badge and "leans" not in badge
        assert words.line == "Not verified: the verifier cannot tell whether this answer is right; check it yourself."
        assert verdict_line(bubble.badge.verdict) == f"verdict: {words.line}"  # what --plain and the export say
        # ctrl+b with the input focused: the evidence, opening with the line, then the numbers and the lean
        prompt = app.chat.query_one("#prompt", Input)
        assert app.focused is prompt
        await pilot.press("ctrl+b")
        await pilot.pause()
        assert bubble.evidence.display and prompt.value == ""
        shown = plain(bubble.evidence.shown)
        assert shown.lstrip().startswith("Not verified: the verifier cannot tell")
        assert "q = 4, d = 0.412" in " ".join(shown.split()) and "60 % of the 60 held-out answers" in " ".join(shown.split())
        assert "Paris is the capital of Spain" in shown
        # tab focuses the answer (not its badge); v there opens the full evidence with the raw numbers
        await pilot.press("tab")
        await pilot.pause()
        assert app.focused is bubble
        await pilot.press("v")
        await wait_until(pilot, lambda: isinstance(app.screen, EvidenceScreen))
        full = " ".join(plain(app.screen.shown).split())
        assert "raw numbers: prediction 1 (right)" in full and "q 4" in full and "d 0.412" in full
        assert prompt.value == "", "v opened the evidence; it was not typed into the input"
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is app.chat)
        prompt.focus()
        await pilot.press("v")  # in the input, v is text
        await pilot.pause()
        assert prompt.value == "v" and app.screen is app.chat
