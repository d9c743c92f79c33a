"""Pilot tests of the chat UI's flows on the REAL session engine with the tiny test model and the tiny
verifier (tests/tiny_lm.py, tests/tiny_verifier.py): stream + badge, unverifiable, evidence, HIGH pause
and resume, export, reopening a session. Review decisions growing the support set: tests/test_tui_actions.py."""

from __future__ import annotations

import dataclasses
import io
import time
from pathlib import Path

import pytest
from rich.console import Console

from mlx_sdm.executor.engine import ChatEngine, EngineConfig
from mlx_sdm.executor.events import TurnRef
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.store.chat_store import ChatStore
from tests.tiny_verifier import tiny_components
from tui.app import SdmChatApp
from tui.messages import TokenArrived
from tui.screens.evidence_screen import EvidenceScreen
from tui.screens.prompts import EscalationPrompt
from tui.widgets.message import MessageBubble

pytestmark = pytest.mark.asyncio

SIZE = (120, 40)
MAX_TOKENS = 10
TURN_TIMEOUT_S = 60.0


def make_engine(store: ChatStore, verifier_dir: Path | None, *, max_context: int = 2048, **config) -> ChatEngine:
    config.setdefault("max_tokens", MAX_TOKENS)
    config.setdefault("embedder", "none")
    config.setdefault("auq_thresholds", LOW_EVERYWHERE)  # the tiny model is unsure of everything: keep turns LOW
    config.setdefault("enable_p_true", False)  # the levels come from the thresholds above; one model call less a turn
    engine = ChatEngine(EngineConfig(**config), store, components=tiny_components(verifier_dir, max_context=max_context))
    engine.ready.result(timeout=120)
    return engine


@pytest.fixture
def engine(store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    yield engine
    engine.shutdown()


async def wait_until(pilot, predicate, timeout: float = TURN_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("the UI did not reach the expected state in time")
        await pilot.pause(0.05)


def plain(renderable) -> str:
    console = Console(width=110, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def answers(app) -> list[MessageBubble]:
    return [b for b in app.chat.query(MessageBubble) if b.role == "assistant"]


async def send(pilot, app, text: str) -> MessageBubble:
    """Type ``text``, press enter, wait until the turn is over; returns the answer's bubble."""
    before = len(answers(app))
    pilot.app.screen.query_one("#prompt").focus()
    await pilot.press(*text, "enter")
    await wait_until(pilot, lambda: len(answers(app)) > before and app.chat.active is None)
    await pilot.pause(0.1)
    assert app.screen is app.chat, f"the turn ended on {app.screen!r}"
    return answers(app)[-1]


async def test_message_streams_and_gets_a_badge(store, verifier_dir):
    engine = make_engine(store, verifier_dir, enable_p_true=True)  # the full turn: generate, verify, P(True), monitor
    try:
        tokens: list[str] = []
        unsubscribe = engine.subscribe(
            lambda ref, item: tokens.append(item.text) if isinstance(item, TokenPiece) and item.phase == "answer" else None)
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            bubble = await send(pilot, app, "Paris is the capital of France. Is this claim true or false?")
            unsubscribe()
            # streamed: several pieces arrived one by one, and the bubble shows exactly what the engine stored
            assert len(tokens) >= 2
            stored = [m for m in store.messages(app.chat.session_id) if m.role == "assistant"]
            assert len(stored) == 1 and bubble.text == stored[0].text == "".join(tokens)
            badge = bubble.badge
            assert badge is not None and badge.resolved
            assert badge.status == stored[0].verdict_status
            shown = str(badge.render())
            if badge.status == "verified":
                assert shown.endswith("✔ verified")  # the numbers are the evidence's, not the badge's
            else:
                words = {"not_verified": ("✘ not verified ·", "? not verified ·"), "out_of_scope": ("○ out of scope ·",)}
                assert any(w in shown for w in words[badge.status])
            assert badge.has_class(badge.status)
            # the panel shows the stored AUQ / TRACER reading of the turn; an ordinary (LOW) turn has no line under it
            monitor = stored[0].monitor
            assert not bubble.query_one(".monitor-line").display
            rows = app.chat.query_one("#monitor").rows
            assert [(r.turn, r.confidence) for r in rows] == [(1, monitor.cumulative_confidence)]
    finally:
        engine.shutdown()


async def test_a_token_crosses_to_the_screen_in_one_envelope(store, verifier_dir, monkeypatch):
    """The Textual message the screen handles for a streamed token holds the very TokenPiece the pipeline
    yielded, beside where it belongs: one envelope from the engine's thread to the screen, no executor
    wrapper in between."""
    from mlx_sdm.turn.pipeline import TurnPipeline
    from tui.screens.chat import ChatScreen

    yielded: list = []
    handled: list = []
    real_stream, real_handler = TurnPipeline.stream, ChatScreen.on_token_arrived

    def stream(self, *args, **kwargs):
        for item in real_stream(self, *args, **kwargs):
            yielded.append(item)
            yield item

    async def on_token_arrived(self, message):
        handled.append(message)
        await real_handler(self, message)

    monkeypatch.setattr(TurnPipeline, "stream", stream)
    monkeypatch.setattr(ChatScreen, "on_token_arrived", on_token_arrived)
    engine = make_engine(store, verifier_dir)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            bubble = await send(pilot, app, "Is Paris the capital of France?")
            pieces = [item for item in yielded if isinstance(item, TokenPiece)]
            assert len(pieces) >= 2 and len(handled) == len(pieces)
            for message, piece in zip(handled, pieces):
                assert type(message) is TokenArrived and message.piece is piece  # the pipeline's own object
                assert message.ref == TurnRef(app.chat.session_id, message.ref.turn) and message.ref.turn > 0
            assert [f.name for f in dataclasses.fields(TokenArrived)] == ["ref", "piece"]  # nothing else travels
            assert bubble.text == "".join(piece.text for piece in pieces)
    finally:
        engine.shutdown()


async def test_unverifiable_when_no_verifier_fits(store):
    engine = make_engine(store, None)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            bubble = await send(pilot, app, "Hello world")
            assert bubble.badge.status == "no_verifier"
            assert str(bubble.badge.render()).startswith("· no verifier")
            assert not bubble.badge.expandable
    finally:
        engine.shutdown()


async def test_expanding_the_badge_shows_the_evidence(store, engine):
    app = SdmChatApp(engine=engine, store=store)
    async with app.run_test(size=SIZE) as pilot:
        bubble = await send(pilot, app, "Rome is the capital of Italy. Check the claim.")
        verdict = store.messages(app.chat.session_id)[-1].verdict.verdict
        assert bubble.evidence is not None and not bubble.evidence.display
        bubble.badge.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert bubble.evidence.display and bubble.badge.expanded
        text = plain(bubble.evidence.shown)
        assert f"⌊q̃⌋ {verdict.q_bin}" not in text and "v on the badge shows the raw numbers" in text  # words inline
        assert verdict.exemplars, "the tiny verifier returns exemplars"
        for exemplar in verdict.exemplars:
            assert exemplar.id[:10] in text
        await pilot.press("enter")
        await pilot.pause()
        assert not bubble.evidence.display
        # v opens the full evidence, exemplar texts uncut
        await pilot.press("v")
        await pilot.pause()
        assert isinstance(app.screen, EvidenceScreen)
        full = plain(app.screen.shown)
        assert f"q {verdict.q}" in full and f"⌊q̃⌋ {verdict.q_bin}" in full  # the raw numbers, behind the toggle
        assert verdict.exemplars[0].text in full.replace("\n", " ").replace("  ", " ") or all(
            word in full for word in verdict.exemplars[0].text.split()
        )


async def test_high_pause_shows_the_reflection_and_resumes_with_guidance(store, verifier_dir):
    # thresholds that put every cumulative confidence in [0, 0.999) at HIGH
    engine = make_engine(store, verifier_dir, **HIGH_EVERYWHERE)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            pilot.app.screen.query_one("#prompt").focus()
            await pilot.press(*"Is Oslo the capital of Norway?", "enter")
            await wait_until(pilot, lambda: isinstance(app.screen, EscalationPrompt))
            prompt = app.screen
            title = str(prompt.query_one(".dialog-title").render())
            paused = [m for m in store.messages(app.chat.session_id) if m.role == "assistant"]
            assert paused[-1].status == "paused"
            # the dialog says what paused it, in the escalation's own words (stored with the answer)
            assert "HIGH" in title and title == paused[-1].metadata.pause_message
            await pilot.pause()
            pilot.app.screen.query_one("#guidance").focus()
            await pilot.press(*"Say you are not sure.", "enter")
            # resumed: a guidance message, then a second answer (which pauses again at these thresholds)
            await wait_until(pilot, lambda: len(answers(app)) == 2 and app.chat.active is None)
            messages = store.messages(app.chat.session_id)
            guidance = [m for m in messages if m.kind == "guidance"]
            assert [g.text for g in guidance] == ["Say you are not sure."]
            assert paused[-1].id in [m.id for m in messages if m.status == "resumed"]
            titles = [str(b.query_one(".title").render()) for b in app.chat.query(MessageBubble)]
            assert "monitor · reflection" in titles and "you · guidance" in titles
            # the second answer paused again: leave it paused (escape) ...
            await wait_until(pilot, lambda: isinstance(app.screen, EscalationPrompt))
            await pilot.press("escape")
            await pilot.pause(0.1)
            assert app.screen is app.chat
            session_id = app.chat.session_id
        # ... and reopening the session asks for the guidance again
        again = SdmChatApp(engine=engine, store=store, session_id=session_id)
        async with again.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(again.screen, EscalationPrompt))
            pause = engine.pending_pause(session_id)
            assert pause is not None and str(again.screen.query_one(".dialog-title").render()) == pause.message != ""
    finally:
        engine.shutdown()


async def test_export_writes_markdown_and_session_jsonl(store, engine, tmp_path):
    from mlx_sdm.monitor.session_file.reader import read_sessions_jsonl

    app = SdmChatApp(engine=engine, store=store, export_dir=tmp_path / "out", title="Spain")
    async with app.run_test(size=SIZE) as pilot:
        bubble = await send(pilot, app, "Madrid is the capital of Spain.")
        await pilot.press("ctrl+s")
        await pilot.pause(0.2)
        session_id = app.chat.session_id
    assert store.get_session(session_id).title == "Spain"
    md = tmp_path / "out" / f"session-{session_id}.md"
    jsonl = tmp_path / "out" / f"session-{session_id}.jsonl"
    assert "Madrid is the capital of Spain." in md.read_text()
    sessions = read_sessions_jsonl(jsonl)
    assert len(sessions) == 1 and sessions[0].session_id == session_id
    agent = [s for s in sessions[0].steps if s.actor == "agent"]
    assert [s.text for s in agent] == [bubble.text]


async def test_reopening_a_session_shows_it_as_it_was(store, engine):
    app = SdmChatApp(engine=engine, store=store)
    async with app.run_test(size=SIZE) as pilot:
        first = await send(pilot, app, "Lisbon is the capital of Portugal.")
        session_id = app.chat.session_id
        shown = (first.text, first.badge.status, str(first.badge.render()))
    store.rename_session(session_id, "Capitals")
    again = SdmChatApp(engine=engine, store=store, session_id=session_id)
    async with again.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        bubbles = again.chat.query(MessageBubble)
        assert [b.role for b in bubbles] == ["user", "assistant"]
        answer = answers(again)[0]
        assert (answer.text, answer.badge.status, str(answer.badge.render())) == shown
        assert again.chat.title == "Capitals"
        # and the conversation goes on in the same session
        await send(pilot, again, "And Vienna?")
        assert len([m for m in store.messages(session_id) if m.role == "assistant"]) == 2


async def test_the_header_shows_the_title_the_first_question_gave_the_session(store, engine):
    app = SdmChatApp(engine=engine, store=store)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Lisbon is the capital of Portugal.")
        stored = store.get_session(app.chat.session_id).title
        assert not stored.startswith("Chat ") and app.chat.title == stored


#: AUQ floors (LOW, MEDIUM, HIGH) on the cumulative confidence (docs/monitoring.md, AUQ levels and actions) that put every turn
#: at LOW, or every turn in [0, 0.9999) at HIGH.
LOW_EVERYWHERE = (1e-6, 5e-7, 0.0)
HIGH_EVERYWHERE: dict = {"auq_thresholds": (1.0, 0.9999, 0.0)}
