"""Pilot tests of the rest of the UI on the real engine with the tiny model: the stop key and auto-scroll,
MEDIUM logging, a CRITICAL
abort, the review queue (decisions growing the support set, undo, notes, edits, filters), sessions
(rename, open, delete), copy with its fallback, the command palette and the theme picker."""

from __future__ import annotations

import pytest
from textual.widgets import Input, Select

from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.store.turn_writer import Question, TurnWriter
from tests.stored import answer as stored_answer
from tests.test_tui_flows import HIGH_EVERYWHERE, SIZE, answers, make_engine, plain, send, wait_until
from tui.app import SdmChatApp
from tui.screens.prompts import Confirm, CopyFallback, EditText, EscalationPrompt, TextPrompt
from tui.screens.review import ReviewScreen
from tui.screens.sessions import SessionsScreen
from tui.widgets.message import MessageBubble
from tui.widgets.review_list import ReviewList

pytestmark = pytest.mark.asyncio

#: AUQ floors that put every cumulative confidence below 0.9998 at CRITICAL, or in [1e-4, 1) at MEDIUM
#: (docs/monitoring.md, AUQ levels and actions).
CRITICAL_EVERYWHERE = {"auq_thresholds": (1.0, 0.9999, 0.9998)}
MEDIUM_EVERYWHERE = {"auq_thresholds": (1.0, 1e-4, 5e-5)}


async def test_escape_stops_the_answer_and_autoscroll_follows_only_at_the_bottom(store, verifier_dir):
    session = store.create_session("Long").id
    for i in range(10):  # enough history to scroll
        store.add_message(session, "user", f"Q{i}?")
        store.add_turn(session, None, stored_answer(f"A{i}.\n\nMore.", state="no_verifier"))
    # The tiny model never emits end-of-turn and streams thousands of tokens a second on a quiet
    # machine: give it a budget it cannot finish while the test scrolls and presses escape.
    long_answer = 500_000
    engine = make_engine(store, verifier_dir, max_tokens=long_answer, max_context=2 * long_answer)
    try:
        app = SdmChatApp(engine=engine, store=store, session_id=session)
        async with app.run_test(size=SIZE) as pilot:
            log = app.chat.query_one("#chat-log")
            await pilot.pause(0.2)
            assert log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y  # reopened at the bottom
            await pilot.press(*"Tell me a long story.", "enter")
            await wait_until(pilot, lambda: app.chat.active is not None and len(app.chat.active.text) > 0)
            await pilot.pause(0.1)
            assert app.chat.active is not None, "the answer must still be streaming here"
            assert log.scroll_y == log.max_scroll_y  # at the bottom: the view follows the answer
            log.scroll_to(y=0, animate=False)  # what a wheel / scrollbar / page-up does: releases the anchor
            await pilot.pause(0.1)
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.chat.active is None)
            await pilot.pause(0.2)
            assert log.scroll_y == 0 and log.max_scroll_y > 0  # scrolled up: the view stayed put
            answer = [m for m in store.messages(session) if m.role == "assistant"][-1]
            assert answer.status == "cancelled" and 0 < answer.token_count < long_answer, (answer.status, answer.token_count)
            bubble = answers(app)[-1]
            assert bubble.text == answer.text
            assert str(bubble.badge.render()) == "■ stopped"
    finally:
        engine.shutdown()


async def test_a_reopened_session_shows_an_interrupted_answer_and_says_so(tmp_path, verifier_dir):
    db = tmp_path / "chat.db"
    writer = ChatStore(db)
    session = writer.create_session()
    answer_id = TurnWriter(writer.answers, session.id, Question("Tell me a story."), partial=True).message_id
    writer.answers.update_partial(answer_id, "Once upon a time", force=True)
    with writer.db.tx() as conn:  # as a process killed mid-answer leaves it: its writer is gone
        conn.execute("UPDATE messages SET metadata_json = '{\"writer_pid\": -1}' WHERE id = ?", (answer_id,))
    writer.close()
    store = ChatStore(db)
    engine = make_engine(store, verifier_dir)
    try:
        app = SdmChatApp(engine=engine, store=store, session_id=session.id)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.2)
            bubble = answers(app)[-1]
            assert bubble.text == "Once upon a time"
            assert str(bubble.badge.render()).startswith("✘ interrupted")
    finally:
        engine.shutdown()
        store.close()


async def test_medium_is_logged_and_the_turn_goes_on(store, verifier_dir):
    engine = make_engine(store, verifier_dir, **MEDIUM_EVERYWHERE)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            bubble = await send(pilot, app, "Is the sky blue?")  # send() also checks no prompt is open
            answer = [m for m in store.messages(app.chat.session_id) if m.role == "assistant"][-1]
            assert answer.status == "done" and answer.monitor.level.value == "medium"
            # MEDIUM is the usual level (departs_from_usual): logged with the turn, no line under it, no toast
            assert not bubble.query_one(".monitor-line").display
            assert app.chat.query_one("#monitor").rows[-1].level == "medium"
            assert not any("MEDIUM" in n.message for n in app._notifications)
    finally:
        engine.shutdown()


async def test_critical_aborts_the_turn_with_an_explanation(store, verifier_dir):
    engine = make_engine(store, verifier_dir, **CRITICAL_EVERYWHERE)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "Delete all my files.")
            answer = [m for m in store.messages(app.chat.session_id) if m.role == "assistant"][-1]
            assert answer.status == "aborted"
            notes = [b for b in app.chat.query(MessageBubble) if b.role == "system"]
            assert [str(b.query_one(".title").render()) for b in notes] == ["monitor · CRITICAL"]
            assert notes[0].text == answer.metadata.explanation and "CRITICAL" in notes[0].text
            assert "CRITICAL" in str(answers(app)[-1].query_one(".monitor-line").render())
            assert any("Aborted" in n.message for n in app._notifications)
            assert [item.reasons[-1] for item in store.review_queue.review_items()] == ["escalated_critical"]
    finally:
        engine.shutdown()


async def test_review_decisions_grow_the_support_set_with_notes_edits_undo_and_filters(store, verifier_dir):
    engine = make_engine(store, verifier_dir, generate_reflection=False, **HIGH_EVERYWHERE)  # every answer is queued
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            for question in ("Oslo is the capital of Norway.", "Athens is the capital of Greece."):
                await pilot.press("ctrl+n")  # a chat each: both answers are judged (a paused chat's next is empty)
                app.chat.query_one("#prompt").focus()
                await pilot.press(*question, "enter")
                await wait_until(pilot, lambda: isinstance(app.screen, EscalationPrompt))
                await pilot.press("escape")  # leave it paused
                await wait_until(pilot, lambda: app.chat.active is None and app.screen is app.chat)
            support = engine.info().support_size
            await pilot.press("ctrl+r")
            await wait_until(pilot, lambda: isinstance(app.screen, ReviewScreen))
            review = app.screen
            table = review.query_one(ReviewList)
            assert len(table.items) == 2 and all(i.decision is None for i in table.items)
            first = table.current_item
            # a: acceptable -> one more point in the verifier's support set, under the decision's id
            await pilot.press("a")
            await wait_until(pilot, lambda: engine.info().support_size == support + 1)
            await pilot.pause(0.1)
            decided = [i for i in store.review_queue.review_items() if i.id == first.id][0].decision
            assert decided is not None and decided.label == 1
            judging = engine._require_review().verifier_for(None)  # the verifier unrouted answers are judged by
            assert engine.call(lambda c: decided.support_id in judging.estimator.support_ids).result(30)
            assert f"support set {support + 1} points" in str(review.query_one("#review-status").render())
            # z: undo -> the point leaves the support set, the item is pending again
            await pilot.press("z")
            await wait_until(pilot, lambda: engine.info().support_size == support)
            await pilot.pause(0.1)
            assert [i for i in store.review_queue.review_items() if i.id == first.id][0].decision is None
            # n then u: a note typed before deciding is saved with the decision
            await pilot.press("n")
            await wait_until(pilot, lambda: isinstance(app.screen, TextPrompt))
            await pilot.press(*"too vague", "enter")
            await pilot.press("u")
            await wait_until(pilot, lambda: engine.info().support_size == support + 1)
            await pilot.pause(0.1)
            decided = [i for i in store.review_queue.review_items() if i.id == first.id][0].decision
            assert (decided.label, decided.note) == (0, "too vague")
            # j moves to the other item; e edits it into an acceptable completion (re-encoded by the engine)
            await pilot.press("j")
            second = table.current_item
            assert second.id != first.id
            await pilot.press("e")
            await wait_until(pilot, lambda: isinstance(app.screen, EditText))
            app.screen.query_one("#edit-area").text = "Athens is the capital of Greece: true."
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: engine.info().support_size == support + 2)
            await pilot.pause(0.1)
            edited = [i for i in store.review_queue.review_items() if i.id == second.id][0].decision
            assert (edited.label, edited.completion) == (1, "Athens is the capital of Greece: true.")
            # filters: a date after today empties the list; the reason filter keeps both escalations
            review.query_one("#filter-since", Input).value = "2099-01-01"
            review.query_one("#filter-since", Input).focus()
            await pilot.press("enter")
            await pilot.pause(0.1)
            assert table.items == []
            review.query_one("#filter-since", Input).value = ""
            review.query_one("#filter-reason", Select).value = "escalated_high"
            await pilot.pause(0.2)
            assert len(table.items) == 2
            review.query_one("#filter-status", Select).value = "pending"
            await pilot.pause(0.2)
            assert table.items == []
    finally:
        engine.shutdown()


async def test_the_review_footer_follows_each_label_of_a_task_question_and_the_status_line_holds_no_count(store, tmp_path):
    """A multi-task verifier: a label given under a task joins that task's set; the decision's toast and the
    review footer show the one count of the support set (ReviewService.support_size) and agree after the decision
    and after its undo; the chat's status line does not carry it (a count that means nothing to whoever chats)."""
    from tests.test_review_task_scope import TASK_A, multi_task_verifier

    engine = make_engine(store, multi_task_verifier(tmp_path / "suite"), generate_reflection=False)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, TASK_A + " Is Paris the capital of France?")
            base = engine.info().support_size
            status = app.chat.query_one("#status-line")
            assert "support set" not in str(status.render())
            await pilot.press("ctrl+r")
            await wait_until(pilot, lambda: isinstance(app.screen, ReviewScreen))
            review = app.screen
            assert review.query_one(ReviewList).current_item is not None, "the task answer was not queued"
            await pilot.press("a")
            footer = review.query_one("#review-status")
            await wait_until(pilot, lambda: f"support set {base + 1} points" in str(footer.render()))
            assert any(f"support set {base + 1} points" in n.message for n in app._notifications)
            assert engine.info().support_size == base + 1
            await pilot.press("z")
            await wait_until(pilot, lambda: f"support set {base} points" in str(footer.render()))
            assert any(f"support set {base} points" in n.message and "undone" in n.message for n in app._notifications)
    finally:
        engine.shutdown()


async def test_sessions_rename_open_and_delete(store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "First chat.")
            first = app.chat.session_id
            await pilot.press("ctrl+n")
            await pilot.pause(0.1)
            assert app.chat.session_id is None and not app.chat.query(MessageBubble)
            await send(pilot, app, "Second chat.")
            second = app.chat.session_id
            await pilot.press("ctrl+o")
            await wait_until(pilot, lambda: isinstance(app.screen, SessionsScreen))
            # the newest session is listed first: rename it
            await pilot.press("r")
            await wait_until(pilot, lambda: isinstance(app.screen, TextPrompt))
            app.screen.query_one(Input).value = ""
            await pilot.press(*"Renamed", "enter")
            await pilot.pause(0.1)
            assert store.get_session(second).title == "Renamed" and app.chat.title == "Renamed"
            # open the older one
            await pilot.press("j", "enter")
            await wait_until(pilot, lambda: app.chat.session_id == first)
            assert [b.text for b in app.chat.query(MessageBubble) if b.role == "user"] == ["First chat."]
            # delete it (the one on screen): the chat moves to a new, empty session
            await pilot.press("ctrl+o")
            await wait_until(pilot, lambda: isinstance(app.screen, SessionsScreen))
            await pilot.press("j", "d")
            await wait_until(pilot, lambda: isinstance(app.screen, Confirm))
            await pilot.press("y")
            await wait_until(pilot, lambda: [s.id for s in store.list_sessions()] == [second])
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.chat.session_id is None)
    finally:
        engine.shutdown()


async def test_copy_writes_a_file_and_falls_back_to_selectable_text(store, verifier_dir, monkeypatch):
    engine = make_engine(store, verifier_dir)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            bubble = await send(pilot, app, "Copy me.")
            await pilot.press("ctrl+y")
            path = store.path.parent / "clipboard.txt"
            assert path.read_text() == bubble.text
            assert app.clipboard == bubble.text  # what went out by OSC 52
            monkeypatch.setenv("TERM_PROGRAM", "Apple_Terminal")  # OSC 52 does not reach its clipboard
            await pilot.press("ctrl+y")
            await wait_until(pilot, lambda: isinstance(app.screen, CopyFallback))
            assert app.screen.query_one("#copy-area").text == bubble.text
    finally:
        engine.shutdown()


async def test_command_palette_and_theme_picker(store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    try:
        app = SdmChatApp(engine=engine, store=store, theme="nord")
        async with app.run_test(size=SIZE) as pilot:
            assert app.theme == "nord"
            titles = [c.title for c in app.get_system_commands(app.screen)]
            for wanted in ("New chat", "Open review queue", "Export session", "Export review labels", "Toggle monitor panel",
                           "Switch model", "Switch verifier", "Switch head", "Theme"):
                assert wanted in titles
            await pilot.press("ctrl+p")
            await pilot.pause(0.1)
            await pilot.press(*"monitor panel")
            await pilot.pause(0.3)
            await pilot.press("enter")
            await wait_until(pilot, lambda: not app.chat.query_one("#monitor").display)
            await pilot.press("ctrl+p")
            await pilot.pause(0.1)
            await pilot.press(*"review queue")
            await pilot.pause(0.3)
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, ReviewScreen))
    finally:
        engine.shutdown()



async def test_a_turn_that_cannot_run_fails_visibly(store, tmp_path):
    from mlx_sdm.executor.engine import ChatEngine, EngineConfig
    from tests.tiny_verifier import tiny_components

    # the verifier folder does not exist: the engine never loads, and says so
    engine = ChatEngine(EngineConfig(embedder="none"), store, components=tiny_components(tmp_path / "missing"))
    try:
        with pytest.raises(Exception):
            engine.ready.result(timeout=60)
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            assert "not loaded" in str(app.chat.query_one("#status-line").render())
            await pilot.press(*"Hello?", "enter")
            await wait_until(pilot, lambda: answers(app) and str(answers(app)[-1].badge.render()) != "… answering")
            assert str(answers(app)[-1].badge.render()) == "✘ failed" and app.chat.active is None
            assert any("missing" in n.message for n in app._notifications)
    finally:
        engine.shutdown()


async def test_f12_saves_an_svg_of_the_screen_in_the_screenshot_folder(store, verifier_dir, tmp_path, monkeypatch):
    folder = tmp_path / "shots"
    monkeypatch.setenv("MLX_SDM_SCREENSHOT_DIR", str(folder))
    engine = make_engine(store, verifier_dir)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "Picture me.")
            await pilot.press("f12")
            await wait_until(pilot, lambda: any(p.stat().st_size > 0 for p in folder.glob("*.svg")))
            (svg,) = folder.glob("*.svg")
            assert svg.read_text(encoding="utf-8").startswith("<svg") and "Picture" in svg.read_text(encoding="utf-8")
    finally:
        engine.shutdown()


async def test_the_review_queue_lists_apart_what_no_verifier_judged_and_offers_no_label_there(store, verifier_dir):
    """The review list holds what a label can change (answers a verifier judged); an answer no verifier
    judged is listed apart (the "not judged" filter), says why, and `a` there records nothing."""
    from mlx_sdm.network.verdict import DocumentVerdict

    engine = make_engine(store, verifier_dir, generate_reflection=False, **HIGH_EVERYWHERE)
    try:
        session = store.create_session("haiku")
        store.add_message(session.id, "user", "Write a haiku about autumn.")
        store.add_turn(session.id, None, stored_answer("leaves fall", state="out_of_scope",
                                       verdict=DocumentVerdict(None, unjudged="no_checkable_answer"),
                                       review_reasons=["no_checkable_answer"])).message_id
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            app.chat.query_one("#prompt").focus()
            await pilot.press(*"Oslo is the capital of Norway.", "enter")
            await wait_until(pilot, lambda: isinstance(app.screen, EscalationPrompt))
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.chat.active is None and app.screen is app.chat)
            support = engine.info().support_size
            await pilot.press("ctrl+r")
            await wait_until(pilot, lambda: isinstance(app.screen, ReviewScreen))
            review = app.screen
            table = review.query_one(ReviewList)
            assert len(table.items) == 1 and table.items[0].judged  # the judged answer only
            footer = str(review.query_one("#review-status").render())
            assert "1 pending" in footer and "1 not judged, listed apart" in footer
            review.query_one("#filter-judged", Select).value = "unjudged"
            await wait_until(pilot, lambda: len(table.items) == 1 and not table.items[0].judged)
            table.focus()
            detail = " ".join(plain(review.query_one("#review-item").content).split())
            assert "no checkable answer" in detail and "changes no verdict" in detail
            await pilot.press("a")
            await pilot.pause(0.2)
            assert any("not labelled" in n.message and "changes no verdict" in n.message for n in app._notifications)
            assert store.review_queue.last_decision() is None and engine.info().support_size == support
    finally:
        engine.shutdown()


async def test_the_review_queue_says_what_reviews_of_a_fine_tuned_models_tasks_can_teach_it(store, tmp_path):
    """With a fine-tuned model loaded, the review footer counts the labelled answers of its tasks and names the
    command that trains it again on them (finetune --from-reviews); answers to anything else do not count."""
    from dataclasses import replace

    from mlx_sdm.executor.engine import ChatEngine, EngineConfig
    from mlx_sdm.network.coverage import TaskInstruction
    from tests.stored import judged
    from tests.tiny_verifier import tiny_components

    words = TaskInstruction('Is the following word a fruit? Respond using the following JSON: {"fruit": bool}.',
                            None, "words")
    factory = tiny_components(None)
    engine = ChatEngine(EngineConfig(max_tokens=8, embedder="none", enable_p_true=False), store,
                        components=lambda config: replace(factory(config), adapted_tasks=(words,)))
    engine.ready.result(timeout=120)
    try:
        session = store.create_session("fruit")
        for question in (f"{words.instruction} WORD: plum", "How are you?"):
            store.add_message(session.id, "user", question)
            store.add_turn(session.id, None, stored_answer('{"fruit": false}', state="not_verified", verdict=judged(),
                                                           review_reasons=["below_threshold"]))
        for item in store.review_queue.review_items():
            store.review_queue.record_decision(item.id, 0)
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("ctrl+r")
            await wait_until(pilot, lambda: isinstance(app.screen, ReviewScreen))
            footer = " ".join(str(app.screen.query_one("#review-status").render()).split())
            assert "1 reviewed answer of this model's tasks can teach it: `mlx-sdm finetune --from-reviews" in footer
    finally:
        engine.shutdown()
