"""Typed verdicts, readings and turn records for store tests: what the chat stores is the turn's
record (TurnOutcome) with its DocumentVerdict and MonitorReading, never a dict (JSON only inside SQLite)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mlx_sdm.monitor.online.auq_escalation import UncertaintyLevel
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.monitor.session_file.records import ToolCall
from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus
from mlx_sdm.turn.answer import GeneratedAnswer
from mlx_sdm.turn.escalation import Escalation, TurnStatus
from mlx_sdm.turn.values import Resampled, TurnOutcome


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


#: A verdict of each stored state, for tests that need an answer in that state and not its numbers.
VERDICT_OF_STATE = {
    "verified": lambda: judged(None, p_lower=0.97, admitted=True, d=0.1),
    "not_verified": judged,
    "out_of_scope": lambda: judged("out_of_distribution", d=0.0),
    "no_verifier": DocumentVerdict.no_verifier,
}


#: How a turn ends before its verdict (the pipeline yields no verdict for it).
ENDS_WITHOUT_VERDICT = {TurnStatus.CANCELLED, TurnStatus.ERROR, TurnStatus.INTERRUPTED, TurnStatus.IN_PROGRESS}


def answer(text: str, *, status: str | TurnStatus = TurnStatus.DONE,
           state: str | VerdictStatus | None = None,
           verdict: DocumentVerdict | None = None,
           monitor: MonitorReading | None = None, review_reasons: Sequence[str] = (), features=None,
           feature_model: str | None = None, tokens: list[str] | None = None, logprobs: list[float] | None = None,
           prompt: list[dict] | None = None, task: str | None = None, verifier: str | None = None,
           resampled: Resampled | None = None, source: str | None = None, explanation: str | None = None,
           reflection: str | None = None, reflect: bool = False, pause_message: str = "",
           judged_tokens: int | None = None, finish_reason: str = "stop",
           tool_calls: Sequence[ToolCall] = ()) -> TurnOutcome:
    """A turn's record as the pipeline yields it and the store keeps it (``store.add_turn(session, question, it)``).
    ``state``: the verdict state wanted ("verified", "not_verified", "out_of_scope", "no_verifier") when the
    test needs an answer in that state and not particular numbers (a verdict of that state is made)."""
    if state is not None and verdict is None:
        verdict = VERDICT_OF_STATE[str(getattr(state, "value", state))]()
    if verdict is None and TurnStatus(status) not in ENDS_WITHOUT_VERDICT:  # as the pipeline: a finished turn has one
        verdict = DocumentVerdict.no_verifier()
    tokens = list(tokens or [])
    gen = GeneratedAnswer(text, tokens=tokens, logprobs=list(logprobs or []),
                          features=None if features is None else np.asarray(features, dtype=np.float32),
                          finish_reason=finish_reason, cancelled=TurnStatus(status) is TurnStatus.CANCELLED,
                          judged_tokens=len(tokens) if judged_tokens is None else judged_tokens)
    outcome = TurnOutcome(
        TurnStatus(status), gen, messages=list(prompt or []), task=task, verdict=verdict,
        monitor=monitor,
        escalation=Escalation(review_reasons=list(review_reasons), explanation=explanation, reflect=reflect,
                              message=pause_message),
        reflection=reflection, tool_calls=tuple(tool_calls), verifier=verifier, resampled=resampled, source=source, feature_model=feature_model)
    if state is not None and outcome.verdict_status is not None:
        assert outcome.verdict_status.value == str(getattr(state, "value", state)), (state, outcome.verdict_status)
    return outcome
