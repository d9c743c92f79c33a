"""Typed verdicts and readings for store tests: what the chat stores is a DocumentVerdict and a
MonitorReading, never a dict (JSON only inside SQLite)."""

from __future__ import annotations

from mlx_sdm.monitor.online.auq_escalation import UncertaintyLevel
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.network.verdict import DocumentVerdict


def judged(reason: str | None = "below_threshold", *, p_lower: float | None = 0.1, prediction: int = 1,
           admitted: bool = False, d: float = 0.5, **more) -> DocumentVerdict:
    """An estimator verdict (default: not admitted, below the threshold); ``reason="out_of_distribution"``
    with ``d=0`` reads as out of scope."""
    verdict = DocumentVerdict.from_dict({"prediction": prediction, "p_lower": p_lower, "admitted": admitted,
                                         "reason": reason, "q": 3, "d": d, **more})
    assert verdict is not None
    return verdict


def reading(level: str = "low", **fields) -> MonitorReading:
    return MonitorReading(level=UncertaintyLevel(level), **fields)
