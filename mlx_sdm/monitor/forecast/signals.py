"""Per-step signals of a logged session, in the arrays the fitted monitors read (no fitting here).

For every agent step of a session: the AUQ cumulative confidence ``P_t`` and P(True) ``c_p`` (docs/monitoring.md, AUQ),
the content surprisal ``U_t`` (docs/monitoring.md, TRACER surprisal), the verifier's verdict (:class:`~mlx_sdm.network.verdict.DocumentVerdict`)
and, where the session carries it, whether that step's answer was right (``metadata["turns"]`` of the
session corpus, ``scripts/session_corpus.py``). For every step (agent and user) the TRACER components
``U, Da, DoA, DoU`` (config-free, so TRACER's weights can be refitted without re-embedding).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlx_sdm.monitor.online.tracer import TracerConfig, prefix_scores, step_risk, tracer_score
from mlx_sdm.monitor.session_file.records import Session
from mlx_sdm.network.verdict import DocumentVerdict

NEUTRAL_CONFIDENCE = 0.5  # AUQ's own missing-signal default (docs/monitoring.md, AUQ System 1 signals) when a step has no AUQ belief


@dataclass(frozen=True)
class SessionSignals:
    session_id: str
    success: int  # Y (1 = success)
    auq: np.ndarray  # [A] P_t per agent step
    p_true: np.ndarray  # [A] c_p per agent step
    surprisal: np.ndarray  # [A] U_t per agent step
    verdicts: tuple[DocumentVerdict, ...]  # [A]
    turn_correct: tuple[bool | None, ...]  # [A] answer right? (None = unknown)
    tracer_parts: np.ndarray  # [N, 4] U, Da, DoA, DoU per step (agent and user)
    agent_index: np.ndarray  # [A] positions of the agent steps among all N steps

    @property
    def n_agent(self) -> int:
        return int(self.agent_index.size)

    def tracer_episode(self, config: TracerConfig) -> float:
        """The episode TRACER score under ``config`` (= the last prefix score)."""
        u, da, doa, dou = self.tracer_parts.T
        r = np.maximum.reduce([u, config.alpha * da, config.beta * doa, config.gamma * dou])
        return tracer_score(r, config.k, config.w)

    def tracer_prefix(self, config: TracerConfig) -> np.ndarray:
        """R_t at each agent step under ``config`` (prefix over all steps, docs/monitoring.md, TRACER risk)."""
        r = [step_risk(*row, config) for row in self.tracer_parts]
        return np.asarray(prefix_scores(r, config.k, config.w), dtype=np.float64)[self.agent_index]


def _turn_labels(session: Session) -> dict[str, dict]:
    turns = session.metadata.get("turns") if isinstance(session.metadata, dict) else None
    return {t["step_id"]: t for t in turns or [] if isinstance(t, dict) and "step_id" in t}


def session_signals(session: Session) -> SessionSignals | None:
    """The signals of a labelled session with at least one agent step and TRACER fields on every step; else None."""
    if session.success is None or not session.steps or any(s.tracer is None for s in session.steps):
        return None
    labels = _turn_labels(session)
    auq, p_true, surprisal, verdicts, correct, index = [], [], [], [], [], []
    for i, step in enumerate(session.steps):
        if step.actor != "agent":
            continue
        a = step.auq
        auq.append(a.propagated_confidence if a is not None and a.propagated_confidence is not None else NEUTRAL_CONFIDENCE)
        p_true.append(a.p_true_confidence if a is not None and a.p_true_confidence is not None else NEUTRAL_CONFIDENCE)
        surprisal.append(step.tracer.U)
        label = labels.get(step.step_id, {})
        stored = label.get("verdict") if "verdict" in label else (step.verifier.to_dict() if step.verifier else None)
        verdicts.append(DocumentVerdict.from_dict(stored) or DocumentVerdict.no_verifier())
        correct.append(label.get("correct"))
        index.append(i)
    if not index:
        return None
    parts = np.array([[s.tracer.U, s.tracer.Da, s.tracer.DoA, s.tracer.DoU] for s in session.steps], dtype=np.float64)
    return SessionSignals(session.session_id, int(session.success), np.asarray(auq, dtype=np.float64),
                          np.asarray(p_true, dtype=np.float64), np.asarray(surprisal, dtype=np.float64),
                          tuple(verdicts), tuple(correct), parts, np.asarray(index, dtype=np.int64))
