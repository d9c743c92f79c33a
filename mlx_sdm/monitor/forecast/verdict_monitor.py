"""The verifier as a monitor: each turn's calibrated verdict turned into a forecast p_t of session success.

Every answer the chat verifies gets a verdict from the SDM verifier (``calibration.verdict.Verdict``:
``p_lower``, ``q``, ``d``, ``admitted``, ``prediction``, ``reason``). Its status word:

- ``verified``: admitted and predicted acceptable; ``p_lower`` is then a calibrated lower bound on the
  probability that the answer is right (SDM paper, the admitted set's accuracy >= alpha');
- ``not_verified``: admitted but predicted unacceptable, or below the threshold (``reason`` says which);
- ``out_of_scope``: the answer lies outside the verifier's support (``reason == "out_of_distribution"``);
- ``none``: no verdict for this turn (no verifier loaded).

The verdict monitor (docs/monitoring.md, combining with the verifier, the verifier's probability ``v_t``) gives each verified turn
``pi_s = p_lower``, each admitted-unacceptable turn ``pi_s = 1 - p_lower`` and every other turn the
turn success rate of its status, fitted on labelled sessions (:func:`fit_verdict_params`; cross-fitted
by ``monitor.crossfit``, never on the sessions it scores). A session succeeds only if every answer is
right, so after agent step t the forecast is ``p_t = prod_{s <= t} pi_s``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from types import SimpleNamespace

from mlx_sdm.monitor.forecast.scoring import EPS
from mlx_sdm.network.verdict import ACCEPTABLE as LABEL_ACCEPTABLE
from mlx_sdm.network.verdict import LEGACY_NO_VERIFIER, UNJUDGED_OUT_OF_SCOPE, DocumentVerdict, VerdictStatus, status_of
#: Turn success rate of a status before any labelled session was seen (no information either way).
PRIOR_TURN_RATE = 0.5
#: Laplace smoothing of the fitted per-status rates: (correct + 1) / (turns + 2).
RATE_SMOOTHING = 1.0


def verdict_status(admitted: bool | None, prediction: int | None, reason: str | None,
                   task: str | None = None, d: float | None = None) -> VerdictStatus:
    """The status word of a verdict: the rule of :func:`mlx_sdm.network.verdict.status_of` (``task``: the
    verifier's task the question was routed to); NO_VERIFIER without a verdict."""
    if admitted is None and prediction is None and reason is None:
        return VerdictStatus.NO_VERIFIER
    if prediction is None:  # no estimator judgement: not one of the verifier's tasks, or an empty answer
        return VerdictStatus.OUT_OF_SCOPE if reason in UNJUDGED_OUT_OF_SCOPE else VerdictStatus.NOT_VERIFIED
    judged = SimpleNamespace(admitted=bool(admitted), prediction=-1 if prediction is None else int(prediction), reason=reason,
                             d=0.0 if d is None else d)  # rows without d: out of distribution read as before
    return VerdictStatus(status_of(judged, task=task).value)


def forecast_status(status: VerdictStatus, admits_nothing: bool) -> VerdictStatus:
    """The status the fused forecast reads. A verifier that admits no answer at all (Alg. 3 found no region)
    vouches for none, so its "not verified" says nothing of this answer; the forecast's per-status rates were
    fitted on sessions in which such turns (everyday questions, before the open-question verifier) were
    unjudged, so it is read as unjudged."""
    return VerdictStatus.OUT_OF_SCOPE if admits_nothing and status is VerdictStatus.NOT_VERIFIED else status


@dataclass(frozen=True)
class TurnVerdict:
    """One turn's calibrated verdict, as the monitor reads it."""

    status: VerdictStatus
    p_lower: float | None = None
    q: int | None = None
    d: float | None = None
    admitted: bool = False
    prediction: int | None = None
    #: The verifier judged the answer "not verified" but vouches for no answer at all; ``status`` is then
    #: what the forecast reads (:func:`forecast_status`), and this keeps what the user was shown.
    admits_nothing: bool = False

    @property
    def shown(self) -> VerdictStatus:
        """The status the user saw for this turn."""
        return VerdictStatus.NOT_VERIFIED if self.admits_nothing else self.status

    @classmethod
    def of(cls, verdict: DocumentVerdict | None) -> "TurnVerdict":
        """The chat's typed verdict (live or read back from the store) as the monitor reads it."""
        if verdict is None:
            return cls(VerdictStatus.NO_VERIFIER)
        judged = verdict.verdict
        if judged is None:
            return cls(verdict.status)
        if verdict.admits_nothing:
            return cls(forecast_status(verdict.status, True), admits_nothing=verdict.status is VerdictStatus.NOT_VERIFIED)
        return cls(verdict.status, judged.p_lower, judged.q, judged.d, bool(judged.admitted), int(judged.prediction))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "TurnVerdict":
        """From ``Verdict.to_dict()``, a stored verdict, or a ``VerifierOutput.to_dict()``; None -> no verdict."""
        if not data:
            return cls(VerdictStatus.NO_VERIFIER)
        admitted = data.get("admitted")
        prediction = data.get("prediction")
        status = data.get("status")
        status = VerdictStatus.read(status) or \
            verdict_status(admitted, prediction, data.get("reason"), data.get("task"), data.get("d"))
        if data.get("admits_nothing"):
            return cls(forecast_status(status, True), admits_nothing=status is VerdictStatus.NOT_VERIFIED)
        return cls(status, data.get("p_lower"), data.get("q"), data.get("d"), bool(admitted),
                   None if prediction is None else int(prediction))

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "p_lower": self.p_lower, "q": self.q, "d": self.d,
                "admitted": self.admitted, "prediction": self.prediction}


@dataclass(frozen=True)
class VerdictMonitorParams:
    """Turn success rate per status, for turns whose verdict carries no calibrated probability."""

    status_rate: Mapping[str, float] = field(default_factory=lambda: {s.value: PRIOR_TURN_RATE for s in VerdictStatus})

    def __post_init__(self) -> None:  # older files spell "no verifier" as "none" / "unverifiable"
        rates = {(VerdictStatus.NO_VERIFIER.value if k in LEGACY_NO_VERIFIER else k): float(v)
                 for k, v in dict(self.status_rate).items()}
        object.__setattr__(self, "status_rate", rates)


def turn_success_probability(verdict: TurnVerdict, params: VerdictMonitorParams) -> float:
    """pi_s: the probability that this turn's answer is right, from its verdict."""
    if verdict.admitted and verdict.p_lower is not None:
        p = verdict.p_lower if verdict.prediction == LABEL_ACCEPTABLE else 1.0 - verdict.p_lower
    else:
        p = params.status_rate.get(verdict.status.value, PRIOR_TURN_RATE)
    return min(max(float(p), EPS), 1.0 - EPS)


def fit_verdict_params(turns: Sequence[tuple[TurnVerdict, bool]]) -> VerdictMonitorParams:
    """Per-status turn success rates (Laplace-smoothed) from labelled turns (verdict, answer was right)."""
    counts: dict[str, list[float]] = {s.value: [0.0, 0.0] for s in VerdictStatus}
    for verdict, correct in turns:
        c = counts[verdict.status.value]
        c[0] += float(correct)
        c[1] += 1.0
    return VerdictMonitorParams({k: (ok + RATE_SMOOTHING) / (n + 2 * RATE_SMOOTHING) for k, (ok, n) in counts.items()})


def verdict_forecasts(verdicts: Sequence[TurnVerdict], params: VerdictMonitorParams) -> list[float]:
    """p_t = prod_{s <= t} pi_s after each agent step (a session succeeds only if every answer is right)."""
    out, p = [], 1.0
    for v in verdicts:
        p *= turn_success_probability(v, params)
        out.append(max(p, EPS))
    return out
