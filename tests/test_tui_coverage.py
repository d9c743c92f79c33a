"""A new chat greets in at most five lines; f3 (and ``mlx-sdm chat --list-tasks``) says what the loaded verifier
covers (its tasks, one example prompt each, insertable from the command palette); without recorded tasks it says
so."""

from __future__ import annotations

import asyncio
import json

from textual.widgets import Input

from mlx_sdm.executor.engine import ChatEngine, EngineConfig
from mlx_sdm.store.chat_store import ChatStore
from tests.tiny_verifier import build_tiny_verifier, tiny_components
from tui.app import SdmChatApp
from tui.widgets.message import MessageBubble

TASKS = [{"name": "capitals", "description": "whether a claim about a capital city is true",
          "example_prompt": "Paris is the capital of France. Is this claim true or false?"}]


def run(coro):
    return asyncio.run(coro)


def make(tmp_path, tasks):
    verifier = build_tiny_verifier(tmp_path / "verifier")
    if tasks is not None:
        manifest = json.loads((verifier / "verifier.json").read_text())
        manifest["tasks"] = tasks
        (verifier / "verifier.json").write_text(json.dumps(manifest))
    store = ChatStore(tmp_path / "chat.db")
    engine = ChatEngine(EngineConfig(embedder="none", max_tokens=4), store, components=tiny_components(verifier))
    engine.ready.result(120)
    return engine, store


def coverage_bubbles(app):
    return [b for b in app.chat.query(MessageBubble) if b.role == "system" and "coverage" in b.heading]


def test_a_new_chat_greets_in_five_lines_f3_lists_the_tasks_and_the_palette_inserts_an_example(tmp_path):
    engine, store = make(tmp_path, TASKS)

    async def go():
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=(110, 36)) as pilot:
            await pilot.pause()
            (welcome,) = [b for b in app.chat.query(MessageBubble) if b.role == "system"]
            assert len(welcome.text.splitlines()) <= 5 and "f3" in welcome.text and "1 task" in welcome.text
            assert coverage_bubbles(app) == [] and TASKS[0]["example_prompt"] not in welcome.text
            await pilot.press("f3")  # the task list, behind a key
            await pilot.pause()
            (bubble,) = coverage_bubbles(app)
            assert "whether a claim about a capital city is true" in bubble.text and TASKS[0]["example_prompt"] in bubble.text
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert "What the verifier covers" in titles and "Insert example: capitals" in titles
            app.insert_example(TASKS[0]["example_prompt"])
            await pilot.pause()
            assert app.chat.query_one("#prompt", Input).value == TASKS[0]["example_prompt"]

    try:
        run(go())
    finally:
        engine.shutdown()
        store.close()


def test_unknown_coverage_is_said_plainly(tmp_path):
    engine, store = make(tmp_path, None)

    async def go():
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=(110, 36)) as pilot:
            await pilot.pause()
            assert coverage_bubbles(app) == []  # nothing recorded: the new chat stays empty
            app.show_coverage()
            await pilot.pause()
            (bubble,) = coverage_bubbles(app)
            assert "does not record which tasks it covers" in bubble.text and "out of scope" in bubble.text
            assert not [c for c in app.get_system_commands(app.screen) if c.title.startswith("Insert example")]

    try:
        run(go())
    finally:
        engine.shutdown()
        store.close()


def test_chat_list_tasks_prints_what_the_verifier_covers(tmp_path, capsys):
    from mlx_sdm.commands import chat as chat_cmd

    verifier = build_tiny_verifier(tmp_path / "verifier")
    manifest = json.loads((verifier / "verifier.json").read_text())
    (verifier / "verifier.json").write_text(json.dumps({**manifest, "tasks": TASKS}))
    assert chat_cmd.main(["--list-tasks", "--verifier", str(verifier)]) == 0
    out = capsys.readouterr().out
    assert "- capitals: whether a claim about a capital city is true" in out and TASKS[0]["example_prompt"] in out
