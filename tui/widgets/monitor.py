"""The session monitor panel: per turn the AUQ level, cumulative confidence P_t and TRACER risk R_t,
with sparklines over turns (docs/monitoring.md, AUQ propagation; TRACER weights).

The fused forecast (``fused_p``, "ok%") is not a column here: it forecasts the whole session's success and falls with
the session's length, so on an ordinary chat it reads "ok 4%" or "ok 0%" where nothing is wrong, and a reader takes it
for this answer's chance of being right. It is kept with each reading (the store, ``generate --explain``,
the JSON's ``fused_p`` and ``fused_message``)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import Label, Sparkline, Static

from mlx_sdm.monitor.online.reading import MonitorReading
from tui.format import format_p, format_risk, level_label

LEVEL_STYLES = {"low": "green", "medium": "yellow", "high": "dark_orange", "critical": "bold red"}


@dataclass(frozen=True)
class PanelRow:
    """One turn's row: AUQ level, P_t, TRACER R_t, the fused forecast p_t and the sentence saying which
    signal moved it (``fused_message``; the panel shows the newest turn's)."""

    turn: int
    level: str | None
    confidence: float | None
    risk: float | None
    fused_p: float | None = None
    fused_message: str = ""

    @classmethod
    def of(cls, turn: int, reading: MonitorReading) -> "PanelRow":
        return cls(turn, reading.level.value, reading.cumulative_confidence, reading.tracer_risk,
                   reading.fused_p, reading.fused.message if reading.fused is not None else "")


class MonitorPanel(VerticalScroll, can_focus=True):  # a tab stop of the chat (its keys scroll it)
    """Toggle it with ctrl+t (or the command palette). Its state is the typed, reactive :attr:`rows`
    (one :class:`PanelRow` per answered turn); :meth:`watch_rows` draws them."""

    rows: reactive[tuple[PanelRow, ...]] = reactive((), init=False)

    def compose(self) -> ComposeResult:
        yield Label("Session monitor", classes="panel-title")
        yield Label("cumulative confidence P", classes="spark-label")
        yield Sparkline([], id="spark-confidence", summary_function=min)
        yield Label("TRACER risk R", classes="spark-label")
        yield Sparkline([], id="spark-risk", summary_function=max)
        yield Static("no turns yet", id="monitor-table")

    def reset(self) -> None:
        self.rows = ()

    def add_turn(self, turn: int, reading: MonitorReading) -> None:
        """Record (or replace) the reading of one turn."""
        self.rows = tuple(sorted([r for r in self.rows if r.turn != turn] + [PanelRow.of(turn, reading)],
                                 key=lambda r: r.turn))

    def watch_rows(self) -> None:
        confidence = [float(r.confidence) for r in self.rows if r.confidence is not None]
        risk = [float(r.risk) for r in self.rows if r.risk is not None]
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
        for r in self.rows:
            level = str(r.level or "").lower()
            table.add_row(
                str(r.turn),
                f"[{LEVEL_STYLES.get(level, 'dim')}]{level_label(r.level)}[/]",
                format_p(r.confidence),
                format_risk(r.risk),
            )
        self.query_one("#monitor-table", Static).update(table)
