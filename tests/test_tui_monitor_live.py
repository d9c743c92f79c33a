"""Pilot test: the monitor panel's ok% column (the fused forecast) fills during a live chat, turn by
turn, with the same numbers a reopened session shows."""

from __future__ import annotations

import pytest

from mlx_sdm.monitor.online.reading import MonitorReading

from tests.test_tui_flows import SIZE, make_engine, plain, send
from mlx_sdm.store.chat_store import ChatStore
from tui.app import SdmChatApp
from tui.widgets.message import MessageBubble

pytestmark = pytest.mark.asyncio


def _ok_column(panel) -> list[str]:
    """The ok% cell of each row of the panel's table, as shown."""
    text = plain(panel.query_one("#monitor-table").content)
    lines = [line.split() for line in text.splitlines() if line.strip() and line.split()[0].isdigit()]
    return [cells[4] for cells in lines]


async def test_the_ok_column_fills_live_and_matches_the_reopened_session(tmp_path, verifier_dir):  # noqa: F811
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
            shown = _ok_column(panel)
            assert shown == [f"{100 * p:.0f}%" for p in live] and "—" not in shown
            # the line under an answer says why this turn was escalated
            bubble = [b for b in app.chat.query(MessageBubble) if b.role == "assistant"][-1]
            bubble.set_monitor(MonitorReading.from_dict(
                {"level": "medium", "cumulative_confidence": 0.9, "tracer_risk": 0.1, "action": "pause_for_human",
                 "degenerate": {"kind": "loop", "reason": "the answer loops: 'a b' repeated 5 times in a row"},
                 "judged_wrong": 0.97}))
            line = str(bubble.query_one(".monitor-line").render())
            assert "· the answer loops: 'a b' repeated 5 times in a row" in line
            assert "· the verifier is confident it is wrong" in line
            session_id = app.chat.session_id
            await app.chat.open_session(None)
            await app.chat.open_session(session_id)  # reopened: the same column from the store
            await pilot.pause(0.1)
            assert _ok_column(app.chat.query_one("#monitor")) == shown
    finally:
        engine.shutdown()
        store.close()
