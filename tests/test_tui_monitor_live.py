"""Pilot test: the monitor panel fills during a live chat, turn by turn, with the same rows a reopened session
shows; it shows no "ok%" (the fused forecast of the whole session, which reads "ok 4%" on an ordinary chat: issue 41)
though each reading keeps it; the line under an answer is shown only on a turn that departs from the usual."""

from __future__ import annotations

import pytest

from mlx_sdm.monitor.online.reading import MonitorReading

from tests.test_tui_flows import SIZE, make_engine, plain, send
from mlx_sdm.store.chat_store import ChatStore
from tui.app import SdmChatApp
from tui.widgets.message import MessageBubble

pytestmark = pytest.mark.asyncio


def _rows(panel) -> list[list[str]]:
    """The cells of each row of the panel's table, as shown."""
    text = plain(panel.query_one("#monitor-table").content)
    return [line.split() for line in text.splitlines() if line.strip() and line.split()[0].isdigit()]


async def test_the_panel_fills_live_without_ok_and_matches_the_reopened_session(tmp_path, verifier_dir):  # noqa: F811
    store = ChatStore(tmp_path / "chat.db")
    engine = make_engine(store, verifier_dir)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, app, "Paris is the capital of France. Is this claim true or false?")
            await send(pilot, app, "Why did you pick that?")
            panel = app.chat.query_one("#monitor")
            stored = [m for m in store.messages(app.chat.session_id) if m.role == "assistant"]
            live = [r.fused_p for r in panel.rows]
            assert live == pytest.approx([m.monitor.fused_p for m in stored])
            shown = _rows(panel)
            assert len(shown) == 2 and all(len(cells) == 4 for cells in shown)  # turn, AUQ, P, R
            assert "ok" not in plain(panel.query_one("#monitor-table").content) and None not in live
            # an ordinary turn (LOW) shows no monitor line under its answer
            bubble = [b for b in app.chat.query(MessageBubble) if b.role == "assistant"][-1]
            assert not bubble.query_one(".monitor-line").display
            # the line under an answer says why this turn was escalated
            bubble.set_monitor(MonitorReading.from_dict(
                {"level": "medium", "cumulative_confidence": 0.9, "tracer_risk": 0.1, "action": "pause_for_human",
                 "degenerate": {"kind": "loop", "reason": "the answer loops: 'a b' repeated 5 times in a row"},
                 "judged_wrong": 0.97}))
            line = str(bubble.query_one(".monitor-line").render())
            assert bubble.query_one(".monitor-line").display
            assert "· the answer loops: 'a b' repeated 5 times in a row" in line
            assert "· the verifier is confident it is wrong" in line
            session_id = app.chat.session_id
            await app.chat.open_session(None)
            await app.chat.open_session(session_id)  # reopened: the same column from the store
            await pilot.pause(0.1)
            assert _rows(app.chat.query_one("#monitor")) == shown
    finally:
        engine.shutdown()
        store.close()
