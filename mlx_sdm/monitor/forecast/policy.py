"""The chat's escalation policy, as measured: ONE function,
:func:`apply_policy`, turns a monitor reading into what the turn does beyond the AUQ ladder:

- a **degenerate** answer (:func:`mlx_sdm.monitor.online.degenerate.degenerate_answer`) is raised to at least
  MEDIUM and logged, with the reason carried in :attr:`MonitorReading.degenerate`;
- a turn whose **fused forecast** ``p_t`` is below the policy's threshold pauses for a human, with
  :attr:`MonitorReading.forecast_pause` saying why. The threshold is chosen on a session corpus at a
  stated pause rate (:mod:`mlx_sdm.monitor.evaluation.policy_choice`) and shipped beside the fused monitor's
  parameters (``fused_monitor.json``, key ``"policy"``).

Neither rule lowers what AUQ decided: the action is the stricter of the two.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from mlx_sdm.monitor.online.auq_escalation import EscalationAction, UncertaintyLevel
from mlx_sdm.monitor.online.degenerate import degenerate_answer
from mlx_sdm.monitor.online.reading import ForecastPause, MonitorReading

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


def apply_policy(reading: MonitorReading, answer: str, policy: PausePolicy | None) -> MonitorReading:
    """The reading with the degenerate-answer rule and the measured pause applied (module docstring);
    the reading is changed in place and returned."""
    found = degenerate_answer(answer)
    if found is not None:
        reading.degenerate = found
        reading.level = max(reading.level, UncertaintyLevel.MEDIUM, key=LEVEL_ORDER.index)
        reading.action = _stricter(reading.action, EscalationAction.PROCEED_WITH_LOG)
    p = reading.fused_p
    if policy is not None and policy.pauses(p):
        reading.forecast_pause = ForecastPause(float(p), policy.threshold, policy.paused_share)
        reading.action = _stricter(reading.action, EscalationAction.PAUSE_FOR_HUMAN)
    return reading
