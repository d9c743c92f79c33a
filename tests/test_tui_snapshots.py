"""SVG snapshots of the main screens (pytest-textual-snapshot), made deterministic: the tiny model
decodes greedily from a fixed seed, the store's clock is fixed, the prompt's cursor does not blink,
and nothing on these screens shows a clock or a spinner.

Update after an intended change with ``pytest tests/test_tui_snapshots.py --snapshot-update`` and
look at the SVGs under ``tests/__snapshots__/test_tui_snapshots/`` before committing them."""

from __future__ import annotations

import itertools

import pytest
from textual.widgets import Input

import mlx_sdm.session.store as store_module
from mlx_sdm.session.store import ChatStore
from tests.test_tui_flows import HIGH_EVERYWHERE, make_engine, wait_until
from tests.tiny_verifier import build_tiny_verifier
from tui.app import SdmChatApp
from tui.screens.prompts import EscalationPrompt
from tui.screens.review import ReviewScreen
from tui.widgets.message import MessageBubble

SIZE = (120, 40)
QUESTION = "Paris is the capital of France. Is this claim true or false?"


@pytest.fixture(scope="module")
def verifier_dir(tmp_path_factory):
    return build_tiny_verifier(tmp_path_factory.mktemp("tiny") / "verifier")


@pytest.fixture
def fixed_clock(monkeypatch):
    """Every store timestamp is 2026-01-02 03:04:ss, one second per write."""
    seconds = itertools.count()
    monkeypatch.setattr(store_module, "now_iso", lambda: f"2026-01-02T03:04:{next(seconds) % 60:02d}.000000Z")


@pytest.fixture
def store(tmp_path, fixed_clock):
    store = ChatStore(tmp_path / "chat.db")
    yield store
    store.close()


def steady(app) -> None:
    for widget in app.query(Input):
        widget.cursor_blink = False


async def answered(pilot, text: str = QUESTION) -> None:
    app = pilot.app
    steady(app)
    pilot.app.screen.query_one("#prompt").focus()
    await pilot.press(*text, "enter")
    await wait_until(pilot, lambda: any(b.role == "assistant" for b in app.chat.query(MessageBubble)) and app.chat.active is None)
    await pilot.pause(0.2)


def test_chat_with_an_answer_and_its_evidence(snap_compare, store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    try:

        async def run_before(pilot) -> None:
            await answered(pilot)
            await pilot.press("ctrl+b")
            await pilot.pause(0.2)

        assert snap_compare(SdmChatApp(engine=engine, store=store), terminal_size=SIZE, run_before=run_before)
    finally:
        engine.shutdown()


def test_high_escalation_prompt(snap_compare, store, verifier_dir):
    engine = make_engine(store, verifier_dir, generate_reflection=False, **HIGH_EVERYWHERE)
    try:

        async def run_before(pilot) -> None:
            steady(pilot.app)
            pilot.app.screen.query_one("#prompt").focus()
            await pilot.press(*QUESTION, "enter")
            await wait_until(pilot, lambda: isinstance(pilot.app.screen, EscalationPrompt))
            steady(pilot.app)
            await pilot.pause(0.2)

        assert snap_compare(SdmChatApp(engine=engine, store=store), terminal_size=SIZE, run_before=run_before)
    finally:
        engine.shutdown()


def test_review_queue(snap_compare, store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    try:

        async def run_before(pilot) -> None:
            await answered(pilot)
            await pilot.press("ctrl+r")
            await wait_until(pilot, lambda: isinstance(pilot.app.screen, ReviewScreen))
            steady(pilot.app)
            await pilot.pause(0.2)

        assert snap_compare(SdmChatApp(engine=engine, store=store), terminal_size=SIZE, run_before=run_before)
    finally:
        engine.shutdown()


def test_help(snap_compare, store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    try:

        async def run_before(pilot) -> None:
            steady(pilot.app)
            await pilot.press("f1")
            await pilot.pause(0.2)

        assert snap_compare(SdmChatApp(engine=engine, store=store), terminal_size=SIZE, run_before=run_before)
    finally:
        engine.shutdown()
