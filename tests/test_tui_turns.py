"""Pilot tests of what the chat does with an earlier turn, on the real engine with the tiny model:
regenerate (a second, sampled answer with its own badge; both kept), copy of that answer, branch (a new
session from an earlier turn that says where it came from) and edit and resend (a branch before the
question, the prompt filled with it; the original unchanged)."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Input

from tests.test_tui_flows import SIZE, answers, make_engine, send, wait_until
from tui.app import SdmChatApp
from tui.screens.sessions import SessionsScreen
from tui.screens.turns import TurnPicker

pytestmark = pytest.mark.asyncio


async def test_regenerate_adds_a_sampled_answer_with_its_own_badge_and_keeps_the_first(store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            first = await send(pilot, app, "Is Paris the capital of France?")
            await pilot.press("ctrl+g")
            await wait_until(pilot, lambda: len(answers(app)) == 2 and app.chat.active is None)
            await pilot.pause(0.1)
            old, new = answers(app)
            assert old is first and new.badge is not None and new.badge.resolved and old.badge.resolved
            assert "answer 2 (sampled)" in new.heading
            stored = [m for m in store.messages(app.chat.session_id) if m.role == "assistant"]
            assert len(stored) == 2 and stored[1].metadata.replaces == stored[0].id and stored[1].metadata.seed == 1
            assert stored[1].text == new.text and stored[0].text == old.text
            await pilot.press("ctrl+y")  # copy: the latest answer
            assert app.clipboard == new.text
            session = app.chat.session_id
            await app.chat.open_session(session)  # reopened: both answers, the second titled as such
            await pilot.pause(0.2)
            assert [b.heading for b in answers(app)] == ["assistant · turn 1", "assistant · turn 1 · answer 2 (sampled)"]
            assert "Regenerate answer" in [c.title for c in app.get_system_commands(app.screen)]
    finally:
        engine.shutdown()


async def test_regenerate_with_nothing_to_regenerate_says_so(store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("ctrl+g")
            await pilot.pause(0.2)
            assert answers(app) == [] and app.chat.active is None
    finally:
        engine.shutdown()


async def test_branch_continues_from_an_earlier_turn_in_a_new_session(store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "First question?")
            await send(pilot, app, "Second question?")
            parent = app.chat.session_id
            parent_title = store.get_session(parent).title
            await pilot.press("ctrl+f")
            await wait_until(pilot, lambda: isinstance(app.screen, TurnPicker))
            await pilot.press("k", "enter")  # from the last turn up to turn 1
            await wait_until(pilot, lambda: app.chat.session_id not in (None, parent))
            branch = store.get_session(app.chat.session_id)
            assert branch.branch.session_id == parent and branch.branch.turn == 1
            assert branch.title == f"branch · {parent_title}" and app.chat.title == branch.title
            assert [m.text for m in store.messages(branch.id) if m.role == "user"] == ["First question?"]
            assert len(answers(app)) == 1 and answers(app)[0].badge.resolved  # the copied answer keeps its badge
            bubble = await send(pilot, app, "A different second question?")  # the branch goes on by itself
            assert bubble.badge.resolved and len(store.messages(parent)) == 4
            await pilot.press("ctrl+o")
            await wait_until(pilot, lambda: isinstance(app.screen, SessionsScreen))
            table = app.screen.query_one(DataTable)
            row = table.get_row(branch.id)
            assert row[-1] == f"turn 1 of “{parent_title[:13]}…”"
            assert table.get_row(parent)[-1] == ""
    finally:
        engine.shutdown()


async def test_edit_and_resend_sends_the_edited_question_in_a_branch(store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "First question?")
            await send(pilot, app, "Second question?")
            parent = app.chat.session_id
            await pilot.press("ctrl+up")
            await wait_until(pilot, lambda: isinstance(app.screen, TurnPicker))
            await pilot.press("enter")  # the last question
            await wait_until(pilot, lambda: app.chat.session_id not in (None, parent))
            prompt = app.chat.query_one("#prompt", Input)
            assert prompt.value == "Second question?" and prompt.has_focus
            branch = app.chat.session_id
            assert store.get_session(branch).branch.turn == 1
            assert store.get_session(branch).title.startswith("edit of turn 2 · ")
            await pilot.press(*" Edited.")
            before = len(answers(app))
            await pilot.press("enter")
            await wait_until(pilot, lambda: len(answers(app)) > before and app.chat.active is None)
            assert [m.text for m in store.messages(branch) if m.role == "user"] == ["First question?",
                                                                                   "Second question? Edited."]
            assert [m.text for m in store.messages(parent) if m.role == "user"] == ["First question?", "Second question?"]
            assert answers(app)[-1].badge.resolved
    finally:
        engine.shutdown()


async def test_the_palette_regenerates(store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "Is Paris the capital of France?")
            await pilot.press("ctrl+p")
            await pilot.pause(0.1)
            await pilot.press(*"Regenerate answer")
            await pilot.pause(0.3)
            await pilot.press("enter")
            await wait_until(pilot, lambda: len(answers(app)) == 2 and app.chat.active is None)
            assert answers(app)[1].badge.resolved
    finally:
        engine.shutdown()
