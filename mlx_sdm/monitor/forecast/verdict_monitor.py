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
from typing import Mapping, Sequence

from mlx_sdm.monitor.forecast.scoring import EPS
from mlx_sdm.network.verdict import ACCEPTABLE as LABEL_ACCEPTABLE
from mlx_sdm.network.verdict import LEGACY_NO_VERIFIER, DocumentVerdict, VerdictStatus

#: Turn success rate of a status before any labelled session was seen (no information either way).
PRIOR_TURN_RATE = 0.5
#: Laplace smoothing of the fitted per-status rates: (correct + 1) / (turns + 2).
RATE_SMOOTHING = 1.0


def forecast_status(verdict: DocumentVerdict) -> VerdictStatus:
    """The status the fused forecast reads of a turn's verdict. A verifier that admits no answer at all (Alg. 3
    found no region) vouches for none, so its "not verified" says nothing of this answer; the forecast's
    per-status rates were fitted on sessions in which such turns (everyday questions, before the open-question
    verifier) were unjudged, so it is read as unjudged."""
    status = verdict.status
    return VerdictStatus.OUT_OF_SCOPE if verdict.admits_nothing and status is VerdictStatus.NOT_VERIFIED else status


@dataclass(frozen=True)
class VerdictMonitorParams:
    """Turn success rate per status, for turns whose verdict carries no calibrated probability."""

    status_rate: Mapping[str, float] = field(default_factory=lambda: {s.value: PRIOR_TURN_RATE for s in VerdictStatus})

    def __post_init__(self) -> None:  # older files spell "no verifier" as "none" / "unverifiable"
        rates = {(VerdictStatus.NO_VERIFIER.value if k in LEGACY_NO_VERIFIER else k): float(v)
                 for k, v in dict(self.status_rate).items()}
        object.__setattr__(self, "status_rate", rates)


def turn_success_probability(verdict: DocumentVerdict, params: VerdictMonitorParams) -> float:
    """pi_s: the probability that this turn's answer is right, from its verdict: its calibrated p_lower where the
    verifier admitted its judgement, else the turn success rate of its status (:func:`forecast_status`)."""
    judged = verdict.verdict
    if judged is not None and not verdict.admits_nothing and judged.admitted and judged.p_lower is not None:
        p = judged.p_lower if int(judged.prediction) == LABEL_ACCEPTABLE else 1.0 - judged.p_lower
    else:
        p = params.status_rate.get(forecast_status(verdict).value, PRIOR_TURN_RATE)
    return min(max(float(p), EPS), 1.0 - EPS)


def fit_verdict_params(turns: Sequence[tuple[DocumentVerdict, bool]]) -> VerdictMonitorParams:
    """Per-status turn success rates (Laplace-smoothed) from labelled turns (verdict, answer was right)."""
    counts: dict[str, list[float]] = {s.value: [0.0, 0.0] for s in VerdictStatus}
    for verdict, correct in turns:
        c = counts[forecast_status(verdict).value]
        c[0] += float(correct)
        c[1] += 1.0
    return VerdictMonitorParams({k: (ok + RATE_SMOOTHING) / (n + 2 * RATE_SMOOTHING) for k, (ok, n) in counts.items()})


def verdict_forecasts(verdicts: Sequence[DocumentVerdict], params: VerdictMonitorParams) -> list[float]:
    """p_t = prod_{s <= t} pi_s after each agent step (a session succeeds only if every answer is right)."""
    out, p = [], 1.0
    for v in verdicts:
        p *= turn_success_probability(v, params)
        out.append(max(p, EPS))
    return out
