"""When one turn is at risk: :func:`apply_policy` turns a monitor reading into what the turn does
(docs/monitoring.md, "When a turn pauses"). Each rule looks at this turn only:

- a **degenerate** answer (:func:`mlx_sdm.monitor.online.degenerate.degenerate_answer`: a loop, runs of quotes and
  braces) derailed: the turn pauses for guidance, with the reason in :attr:`MonitorReading.degenerate`;
- the verifier is **confident the answer is wrong** (admitted as wrong: calibrated lower probability at least α′
  that it is wrong, Eq. 28): the turn pauses, with that probability in :attr:`MonitorReading.judged_wrong`;
- AUQ's own ladder (HIGH pauses, CRITICAL aborts, an irreversible tool call pauses) is kept as AUQ decided it,
  except that an answer the verifier vouches for (p_lower >= α′ that it is right) is only logged: AUQ's cumulative
  confidence is a session-wide average, and this turn's own evidence is stronger.

The session's length never pauses a turn. The fused forecast ``p_t`` (the probability that the whole session
succeeds) falls with the number of turns by construction, so it stays a reading; :class:`PausePolicy` is the
forecast threshold ``eval-monitor`` measures (docs/monitoring-eval.md), not a rule the chat applies.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from mlx_sdm.monitor.online.auq_escalation import EscalationAction, UncertaintyLevel
from mlx_sdm.monitor.online.degenerate import degenerate_answer
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.network.verdict import ACCEPTABLE, DocumentVerdict

POLICY_KEY = "policy"
#: Strictness order of the actions (the stricter one wins).
ACTION_ORDER = (EscalationAction.PROCEED, EscalationAction.PROCEED_WITH_LOG, EscalationAction.PAUSE_FOR_HUMAN,
                EscalationAction.ABORT)
LEVEL_ORDER = (UncertaintyLevel.LOW, UncertaintyLevel.MEDIUM, UncertaintyLevel.HIGH, UncertaintyLevel.CRITICAL)


@dataclass(frozen=True)
class PausePolicy:
    """Pause a turn whose fused forecast is below ``threshold``; chosen to pause at most ``pause_rate`` of
    the turns of the corpus named in ``chosen_on`` (:attr:`paused_share` is what it pauses there) (its file, sha256, session count and provenance);
    ``measured``: the cross-fitted held-out figures (share paused, failures caught, with intervals)."""

    threshold: float
    pause_rate: float
    chosen_on: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str = "policy") -> "PausePolicy | None":
        if not data:
            return None
        try:
            threshold, rate = float(data["threshold"]), float(data["pause_rate"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: needs numbers 'threshold' and 'pause_rate' ({exc}); "
                             "rebuild it with `python -m mlx_sdm.monitor.evaluation.policy_choice 0.15`") from None
        if not (0.0 <= threshold <= 1.0 and 0.0 <= rate <= 1.0):
            raise ValueError(f"{where}: threshold {threshold} and pause_rate {rate} must lie in [0, 1]")
        return cls(threshold, rate, dict(data.get("chosen_on") or {}), dict(data.get("measured") or {}))

    @classmethod
    def shipped(cls) -> "PausePolicy | None":
        """The policy shipped in ``fused_monitor.json`` (None when it has none)."""
        from mlx_sdm.monitor.forecast.fused import PARAMS_FILE, datasets_dir

        path = datasets_dir() / PARAMS_FILE
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")).get(POLICY_KEY), f"{path}: {POLICY_KEY}")

    @property
    def paused_share(self) -> float:
        """The share of the corpus's turns this threshold pauses. Below ``pause_rate`` where many turns
        share one forecast: the threshold never pauses more than the rate, so a tie group that would
        cross it stays unpaused."""
        return float(self.measured.get("in_sample_paused", self.pause_rate))

    def pauses(self, p: float | None) -> bool:
        return p is not None and p < self.threshold


def _stricter(a: EscalationAction, b: EscalationAction) -> EscalationAction:
    return max(a, b, key=ACTION_ORDER.index)


def apply_policy(reading: MonitorReading, answer: str, verdict: DocumentVerdict | None = None) -> MonitorReading:
    """The reading with this turn's own risks applied (module docstring); changed in place and returned."""
    found = degenerate_answer(answer)
    wrong = _judged_wrong(verdict)
    if verdict is not None and verdict.verified and found is None and not reading.irreversible \
            and reading.action in (EscalationAction.PAUSE_FOR_HUMAN, EscalationAction.ABORT):
        reading.action = EscalationAction.PROCEED_WITH_LOG  # the verifier vouches for this very answer
        reading.inject_reflection = False
        reading.auq_pause_lifted = True
    if found is not None:
        reading.degenerate = found
        reading.level = max(reading.level, UncertaintyLevel.MEDIUM, key=LEVEL_ORDER.index)
        reading.action = _stricter(reading.action, EscalationAction.PAUSE_FOR_HUMAN)
    if wrong is not None:
        reading.judged_wrong = wrong
        reading.action = _stricter(reading.action, EscalationAction.PAUSE_FOR_HUMAN)
    return reading


def _judged_wrong(verdict: DocumentVerdict | None) -> float | None:
    """The calibrated lower probability that the answer is WRONG, when the verifier admitted that judgement
    (p_lower >= α′ with y_hat = 0, Eq. 28); None otherwise."""
    judged = None if verdict is None else verdict.verdict
    if judged is None or not judged.admitted or int(judged.prediction) == ACCEPTABLE or judged.p_lower is None:
        return None
    return float(judged.p_lower)
