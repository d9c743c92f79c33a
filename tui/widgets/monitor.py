"""The session monitor panel: per turn the AUQ level, cumulative confidence P_t and TRACER risk R_t,
with sparklines over turns (docs/monitoring.md, AUQ propagation; TRACER weights)."""

from __future__ import annotations

from typing import Any, Mapping

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Label, Sparkline, Static

from tui.format import format_p, format_risk, level_label

LEVEL_STYLES = {"low": "green", "medium": "yellow", "high": "dark_orange", "critical": "bold red"}


class MonitorPanel(VerticalScroll, can_focus=False):
    """Toggle it with ctrl+t (or the command palette)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield Label("Session monitor", classes="panel-title")
        yield Label("cumulative confidence P", classes="spark-label")
        yield Sparkline([], id="spark-confidence", summary_function=min)
        yield Label("TRACER risk R", classes="spark-label")
        yield Sparkline([], id="spark-risk", summary_function=max)
        yield Static("no turns yet", id="monitor-table")

    def reset(self) -> None:
        self.rows = []
        self._render_rows()

    def add_turn(self, turn: int, monitor: Mapping[str, Any]) -> None:
        """Record (or replace) the reading of one turn."""
        row = {
            "turn": turn,
            "level": monitor.get("level"),
            "confidence": monitor.get("cumulative_confidence"),
            "risk": monitor.get("tracer_risk"),
            "fused": (monitor.get("extra") or {}).get("fused"),  # fused forecast p_t + the signal that moved it
        }
        self.rows = [r for r in self.rows if r["turn"] != turn] + [row]
        self.rows.sort(key=lambda r: r["turn"])
        self._render_rows()

    def show_history(self, history: list[Mapping[str, Any]], latest: Mapping[str, Any] | None = None) -> None:
        """The engine's whole-session history (``HistoryPoint.to_dict()``: turn, level, cumulative_confidence,
        tracer_risk, fused_p); ``latest``: the newest turn's whole reading, whose fused forecast also says
        what moved it."""
        self.rows = []
        for entry in history:
            fused_p = entry.get("fused_p")
            self.rows.append(
                {
                    "turn": entry.get("turn"),
                    "level": entry.get("level"),
                    "confidence": entry.get("cumulative_confidence"),
                    "risk": entry.get("tracer_risk"),
                    "fused": None if fused_p is None else {"p": fused_p},
                }
            )
        newest = (latest.get("extra") or {}).get("fused") if latest else None
        if newest and self.rows:
            self.rows[-1]["fused"] = newest
        self._render_rows()

    def _render_rows(self) -> None:
        confidence = [float(r["confidence"]) for r in self.rows if r["confidence"] is not None]
        risk = [float(r["risk"]) for r in self.rows if r["risk"] is not None]
        self.query_one("#spark-confidence", Sparkline).data = confidence
        self.query_one("#spark-risk", Sparkline).data = risk
        if not self.rows:
            self.query_one("#monitor-table", Static).update("no turns yet")
            return
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        table.add_column("turn", justify="right")
        table.add_column("AUQ")
        table.add_column("P", justify="right")
        table.add_column("R", justify="right")
        table.add_column("ok%", justify="right")  # the fused forecast: chance the session succeeds
        for r in self.rows:
            level = str(r["level"] or "").lower()
            table.add_row(
                str(r["turn"]),
                f"[{LEVEL_STYLES.get(level, 'dim')}]{level_label(r['level'])}[/]",
                format_p(r["confidence"]),
                format_risk(r["risk"]),
                _percent((r.get("fused") or {}).get("p")),
            )
        latest = next((r["fused"] for r in reversed(self.rows) if r.get("fused")), None)
        body = table
        if latest is not None and latest.get("message"):  # the signal that moved the fused forecast most
            body = Group(table, Text(f"ok {_percent(latest.get('p'))}: {latest['message']}", style="dim"))
        self.query_one("#monitor-table", Static).update(body)


def _percent(p: float | None) -> str:
    return "—" if p is None else f"{100 * float(p):.0f}%"
