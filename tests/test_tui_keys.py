"""Pilot tests of the chat's keyboard and of what the badge says when, on the real engine with the tiny model
and the tiny verifier: a click gives the keyboard back to the input; a key typed on a focused message goes into
the input ("?" is text, not help); tab walks the input, the last answer and the monitor panel; up / down move
between messages and ctrl+b opens the focused answer's evidence; the badge reads "answering" while tokens
stream, "verifying" between the last token and the verdict, then the verdict; the chat draws and takes a
message before the model has loaded."""

from __future__ import annotations

import threading

import pytest
from textual.widgets import Input

from mlx_sdm.executor.engine import ChatEngine, EngineConfig
from tests.test_tui_flows import LOW_EVERYWHERE, SIZE, answers, make_engine, send, wait_until
from tests.tiny_verifier import tiny_components
from tui.app import SdmChatApp
from tui.screens.evidence_screen import EvidenceScreen
from tui.screens.help import HelpScreen
from tui.widgets.message import MessageBubble
from tui.widgets.verdict_badge import ANSWERING, VERIFYING, VerdictBadge

pytestmark = pytest.mark.asyncio

CLAIM = "Paris is the capital of France. Is this claim true or false?"


@pytest.fixture
def engine(store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    yield engine
    engine.shutdown()


def prompt(app) -> Input:
    return app.chat.query_one("#prompt", Input)


async def test_a_click_on_a_badge_or_message_gives_the_keyboard_back_to_the_input(store, engine):
    app = SdmChatApp(engine=engine, store=store)
    async with app.run_test(size=SIZE) as pilot:
        bubble = await send(pilot, app, CLAIM)
        assert bubble.badge.expandable
        await pilot.click(bubble.badge)
        await pilot.pause(0.1)
        assert bubble.evidence.display, "the click still expands the evidence"
        assert app.focused is prompt(app)
        await pilot.click(bubble.query_one(".title"))
        await pilot.pause(0.1)
        assert app.focused is prompt(app)
        await pilot.press(*"what?")
        assert prompt(app).value == "what?" and app.screen is app.chat


async def test_a_key_typed_on_a_focused_message_lands_in_the_input_and_question_mark_is_text(store, engine):
    app = SdmChatApp(engine=engine, store=store)
    async with app.run_test(size=SIZE) as pilot:
        bubble = await send(pilot, app, CLAIM)
        bubble.focus()
        await pilot.pause()
        await pilot.press("?")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen), "? typed on a message is text, not help"
        assert app.focused is prompt(app) and prompt(app).value == "?"
        answers(app)[0].badge.focus()  # a badge with focus (enter and v stay its keys); a letter is text
        await pilot.press("w", "h", "y")
        assert app.focused is prompt(app) and prompt(app).value == "?why"
        answers(app)[0].badge.focus()  # v is the focused badge's own key: the full evidence, not a letter typed
        await pilot.press("v")
        await wait_until(pilot, lambda: isinstance(app.screen, EvidenceScreen))
        assert prompt(app).value == "?why"
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is app.chat)
        await pilot.press("f1")  # help stays on f1
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)


async def test_tab_walks_the_input_the_last_answer_and_the_monitor_panel(store, engine):
    app = SdmChatApp(engine=engine, store=store)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, CLAIM)
        last = await send(pilot, app, "And Berlin?")
        assert len(app.chat.query(MessageBubble)) >= 4
        panel = app.chat.query_one("#monitor")
        walked = []
        for _ in range(3):
            await pilot.press("tab")
            await pilot.pause()
            walked.append(app.focused)
        assert walked == [last, panel, prompt(app)]
        await pilot.press("shift+tab")
        await pilot.pause()
        assert app.focused is panel
        await pilot.press("ctrl+t")  # the panel hidden: tab goes input → last answer → input
        await pilot.pause()
        prompt(app).focus()
        await pilot.press("tab", "tab")
        await pilot.pause()
        assert app.focused is prompt(app)


async def test_up_down_move_between_messages_and_ctrl_b_opens_the_focused_answers_evidence(store, engine):
    app = SdmChatApp(engine=engine, store=store)
    async with app.run_test(size=SIZE) as pilot:
        first = await send(pilot, app, CLAIM)
        last = await send(pilot, app, "Rome is the capital of Italy. Check the claim.")
        bubbles = list(app.chat.query(MessageBubble))
        await pilot.press("tab")  # the last answer
        await pilot.pause()
        assert app.focused is last
        await pilot.press("up")
        assert app.focused is bubbles[bubbles.index(last) - 1]  # the question before it
        await pilot.press("up")
        assert app.focused is first
        await pilot.press("ctrl+b")
        await pilot.pause()
        assert first.evidence.display and not last.evidence.display, "ctrl+b opens the focused (older) answer's"
        await pilot.press("enter")  # enter on a focused answer collapses it again
        await pilot.pause()
        assert not first.evidence.display
        await pilot.press("down", "down")
        assert app.focused is last
        await pilot.press("home")
        assert app.focused is bubbles[0]
        await pilot.press("end")
        assert app.focused is bubbles[-1]
        await pilot.press("escape")  # back to the input
        await pilot.pause()
        assert app.focused is prompt(app)
        await pilot.press("up")  # in the input, up is the input's own (no message is focused)
        assert app.focused is prompt(app)


async def test_the_badge_says_answering_then_verifying_then_the_verdict(store, engine, monkeypatch):
    shown: list[str] = []
    append, update = MessageBubble.append, VerdictBadge.update

    async def appended(self, piece):  # what the badge says while each token lands
        await append(self, piece)
        if self.badge is not None:
            shown.append(str(self.badge.render()))

    def updated(self, *args, **kwargs):  # and every time its words change
        update(self, *args, **kwargs)
        shown.append(str(self.render()))

    monkeypatch.setattr(MessageBubble, "append", appended)
    monkeypatch.setattr(VerdictBadge, "update", updated)
    app = SdmChatApp(engine=engine, store=store)
    async with app.run_test(size=SIZE) as pilot:
        bubble = await send(pilot, app, CLAIM)
    words = [w for i, w in enumerate(shown) if i == 0 or w != shown[i - 1]]
    assert words == [ANSWERING, VERIFYING, str(bubble.badge.render())], words
    assert bubble.badge.resolved


async def test_a_second_look_says_how_many_more_answers_it_checks(store, engine, monkeypatch):
    """With a verifier that takes a second look, the badge goes answering → verifying → checking K more answers →
    the verdict (the member's judgement is stood in for by the verifier's own, on the same features)."""
    from mlx_sdm.network.second_look import SecondLookSpec
    from mlx_sdm.network.verifier import DocumentVerifier
    from tui.widgets.verdict_badge import checking_text

    def judge_second_look(self, features, look, embed, explain=5, *, task, route=None):
        assert len(look.drawn) == 2  # the K answers the turn drew
        return self.document_verdict(self.member_for(task).verify_features(features, explain), task=task, route=route)

    monkeypatch.setattr(DocumentVerifier, "second_look_spec", lambda self, task: SecondLookSpec(k=2, max_tokens=4))
    monkeypatch.setattr(DocumentVerifier, "judge_second_look", judge_second_look)
    shown: list[str] = []
    update = VerdictBadge.update

    def updated(self, *args, **kwargs):
        update(self, *args, **kwargs)
        shown.append(str(self.render()))

    monkeypatch.setattr(VerdictBadge, "update", updated)
    app = SdmChatApp(engine=engine, store=store)
    async with app.run_test(size=SIZE) as pilot:
        bubble = await send(pilot, app, CLAIM)
    words = [w for i, w in enumerate(shown) if i == 0 or w != shown[i - 1]]
    assert words[-3:] == [VERIFYING, checking_text(2), str(bubble.badge.render())], words
    assert checking_text(2) == "… verifying · checking 2 more answers" and bubble.badge.resolved


async def test_the_chat_draws_and_takes_a_message_before_the_model_has_loaded(store, verifier_dir):
    release = threading.Event()
    load = tiny_components(verifier_dir)

    def slow(config):  # a model that takes as long to load as the test wants
        release.wait(timeout=120)
        return load(config)

    config = EngineConfig(max_tokens=10, embedder="none", auq_thresholds=LOW_EVERYWHERE, enable_p_true=False)
    engine = ChatEngine(config, store, components=slow)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.2)
            assert not engine.ready.done(), "the screen is up while the model still loads"
            status = str(app.chat.query_one("#status-line").render())
            assert "loading" in status, status
            assert app.focused is prompt(app)
            await pilot.press(*"Hello before the model?", "enter")
            await pilot.pause(0.2)
            bubble = answers(app)[-1]
            assert "waiting for the model" in str(bubble.badge.render())
            assert "sent when it is ready · yours is waiting" in str(app.chat.query_one("#status-line").render())
            release.set()
            await wait_until(pilot, lambda: bubble.badge.resolved and app.chat.active is None)
            assert bubble.text and store.messages(app.chat.session_id)[-1].text == bubble.text
    finally:
        release.set()
        engine.shutdown()


async def test_ctrl_up_right_after_ctrl_b_opens_the_picker_and_escape_closes_it(store, engine):
    """ctrl+b (the last answer's evidence) then ctrl+up: the question picker opens at once, and escape closes it;
    f2 opens the evidence too (inside tmux, ctrl+b is tmux's prefix and never reaches the app)."""
    from tui.screens.turns import TurnPicker

    app = SdmChatApp(engine=engine, store=store)
    async with app.run_test(size=SIZE) as pilot:
        bubble = await send(pilot, app, CLAIM)
        await pilot.press("f2")
        await pilot.pause()
        assert bubble.evidence.display
        await pilot.press("ctrl+b")
        await pilot.pause()
        assert not bubble.evidence.display
        await pilot.press("ctrl+up")
        await wait_until(pilot, lambda: isinstance(app.screen, TurnPicker))
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, TurnPicker))
        await pilot.press("escape")  # on the chat: escape with nothing streaming leaves the keyboard in the input
        await pilot.pause()
        assert app.focused is prompt(app)
