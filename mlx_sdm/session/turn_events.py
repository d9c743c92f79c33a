"""A :class:`~mlx_sdm.session.pipeline.TurnObserver` that turns a running turn into the engine's
events (:mod:`mlx_sdm.session.events`), in order: tokens → verdict → monitor → escalation →
reflection tokens (the engine sends the finished event with the turn's record)."""

from __future__ import annotations

from typing import Any, Callable

from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.session.escalation import Escalation
from mlx_sdm.session.events import (
    EngineEvent,
    LONG_PREFILL_TOKENS,
    EscalationEvent,
    MonitorEvent,
    PrefillEvent,
    TokenEvent,
    VerdictEvent,
)
from mlx_sdm.session.turn import TokenPiece, TurnObserver


class EventObserver(TurnObserver):
    def __init__(self, emit: Callable[[EngineEvent], None], session_id: str, turn: int, *,
                 verifier: str | None, monitor: Any = None):
        self.emit, self.session_id, self.turn = emit, session_id, turn
        self.verifier_path, self.session_monitor = verifier, monitor

    def prefill(self, done: int, total: int) -> None:
        if total >= LONG_PREFILL_TOKENS:
            self.emit(PrefillEvent(session_id=self.session_id, turn=self.turn, done=int(done), total=int(total)))

    def token(self, piece: TokenPiece) -> None:
        self.emit(TokenEvent(session_id=self.session_id, turn=self.turn, piece=piece))

    def verdict(self, verdict: DocumentVerdict | None, unverifiable_reason: str | None) -> None:
        self.emit(VerdictEvent(session_id=self.session_id, turn=self.turn, verdict=verdict,
                               unverifiable_reason=unverifiable_reason, verifier=self.verifier_path))

    def monitor(self, reading: MonitorReading) -> None:
        history = list(getattr(self.session_monitor, "history", []))
        self.emit(MonitorEvent(session_id=self.session_id, turn=self.turn, reading=reading, history=history))

    def escalation(self, escalation: Escalation) -> None:
        self.emit(EscalationEvent(session_id=self.session_id, turn=self.turn, escalation=escalation))
