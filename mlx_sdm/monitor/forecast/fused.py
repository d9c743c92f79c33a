"""The fused forecast online, for the chat: p_t of session success after each answer, and the signal
that moved it most ("the verifier could not vouch for turn 3").

The parameters (TRACER weights, verdict rates, the stacked Platt model of :mod:`mlx_sdm.monitor.forecast.fusion`)
are fitted on the whole shipped session corpus and shipped as ``mlx_sdm/datasets/fused_monitor.json``
(:func:`build_shipped_params`; its held-out quality is the cross-fitted table of ``mlx-sdm eval-monitor
shipped-corpus``). The forecast is calibrated to that corpus (SmolLM2-135M, mixed tasks, 10 % of sessions
fully right). The file also holds the chat's pause policy, a threshold on p_t chosen on that corpus at a
stated pause rate (:mod:`mlx_sdm.monitor.forecast.policy`, :mod:`mlx_sdm.monitor.evaluation.policy_choice`,
which rebuilds this file: ``python -m mlx_sdm.monitor.evaluation.policy_choice [RATE]``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from mlx_sdm.monitor.forecast.fusion import (
    FUSION_FEATURES,
    FittedMonitors,
    Stacker,
    fit_monitors,
    fusion_features,
    strongest_signal,
)
from mlx_sdm.monitor.forecast.signals import SessionSignals
from mlx_sdm.monitor.online.reading import FusedReading
from mlx_sdm.monitor.online.tracer import TracerConfig
from mlx_sdm.monitor.session_file.records import AUQOutput, TracerOutput
from mlx_sdm.monitor.forecast.verdict_monitor import VerdictMonitorParams
from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus

PARAMS_FILE = "fused_monitor.json"
PARAMS_VERSION = 1
NEUTRAL_CONFIDENCE = 0.5

#: What the verifier did with the turn, by the status the user was shown: the verifier signal's words say
#: that, whichever way it moved p_t (an unjudged turn is not one the verifier "could not vouch for").
VERIFIER_WORDS = {
    VerdictStatus.VERIFIED: "the verifier vouched for turn {turn}",
    VerdictStatus.NOT_VERIFIED: "the verifier could not vouch for turn {turn}",
    VerdictStatus.OUT_OF_SCOPE: "turn {turn} was outside what the verifier covers (not judged)",
    VerdictStatus.NO_VERIFIER: "no verifier judged turn {turn}",
}
#: Plain words for the other signals that can move the forecast most, by direction (lowered, raised).
SIGNAL_WORDS = {
    "p_true": ("the model doubted its own answer in turn {turn}", "the model stood by its answer in turn {turn}"),
    "auq": ("AUQ confidence fell at turn {turn}", "AUQ confidence rose at turn {turn}"),
    "tracer": ("TRACER's trajectory risk rose at turn {turn}", "TRACER's trajectory risk fell at turn {turn}"),
    "surprisal": ("the model was unsure of its words in turn {turn}", "the model was sure of its words in turn {turn}"),
}
#: At the first answer nothing came before it to rise or fall from: a signal's contribution is measured
#: against the corpus average (the stacker's standardisation), and the words say so.
FIRST_ANSWER_WORDS = {
    "auq": ("AUQ confidence is below the usual at turn {turn}", "AUQ confidence is above the usual at turn {turn}"),
    "tracer": ("TRACER's trajectory risk is above the usual at turn {turn}",
               "TRACER's trajectory risk is below the usual at turn {turn}"),
}


def datasets_dir() -> Path:
    import mlx_sdm.datasets

    return Path(mlx_sdm.datasets.__file__).resolve().parent


def params_to_dict(fitted: FittedMonitors) -> dict[str, Any]:
    st = fitted.stacker
    c = fitted.tracer_config
    return {"version": PARAMS_VERSION, "weights": fitted.weights,
            "tracer": {"alpha": c.alpha, "beta": c.beta, "gamma": c.gamma, "k": c.k, "w": c.w},
            "verdict_status_rate": dict(fitted.verdict_params.status_rate),
            "stacker": {"names": list(st.names), "intercept": st.intercept, "coef": st.coef.tolist(),
                        "mean": st.mean.tolist(), "std": st.std.tolist(), "fallback": st.fallback}}


@dataclass(frozen=True)
class FusedParams:
    tracer: TracerConfig
    verdict: VerdictMonitorParams
    stacker: Stacker

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FusedParams":
        s = data["stacker"]
        if tuple(s["names"]) != FUSION_FEATURES:
            raise ValueError(f"fused monitor parameters name features {s['names']}, expected {list(FUSION_FEATURES)}")
        stacker = Stacker(float(s["intercept"]), np.asarray(s["coef"], dtype=np.float64),
                          np.asarray(s["mean"], dtype=np.float64), np.asarray(s["std"], dtype=np.float64),
                          tuple(s["names"]), bool(s["fallback"]))
        return cls(TracerConfig(**data["tracer"]), VerdictMonitorParams(dict(data["verdict_status_rate"])), stacker)

    @classmethod
    def shipped(cls) -> "FusedParams":
        return cls.from_dict(json.loads((datasets_dir() / PARAMS_FILE).read_text(encoding="utf-8")))


def build_shipped_params(corpus: str | Path | None = None) -> dict[str, Any]:
    """Fit every monitor on the whole shipped corpus; what ``fused_monitor.json`` holds."""
    import warnings

    from mlx_sdm.monitor.session_file.reader import read_sessions_jsonl
    from mlx_sdm.monitor.forecast.signals import session_signals

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sessions = read_sessions_jsonl(corpus or datasets_dir() / "session_corpus.jsonl.gz")
    signals = [s for s in map(session_signals, sessions) if s is not None]
    return params_to_dict(fit_monitors(signals))


class OnlineFusedMonitor:
    """Feed it every step of a chat in order (user steps' and answers' TRACER outputs, each answer's AUQ
    belief and verdict); :meth:`observe_answer` returns the :class:`FusedReading` of that answer."""

    def __init__(self, params: FusedParams):
        self.params = params
        self._parts: list[list[float]] = []  # U, Da, DoA, DoU per step
        self._agent: list[int] = []
        self._auq: list[float] = []
        self._p_true: list[float] = []
        self._verdicts: list[DocumentVerdict] = []
        self._last_features: np.ndarray | None = None

    @staticmethod
    def _tracer_row(tracer: TracerOutput | None) -> list[float]:
        return [0.0 if tracer is None else float(getattr(tracer, k) or 0.0) for k in ("U", "Da", "DoA", "DoU")]

    def observe_user(self, tracer: TracerOutput | None) -> None:
        self._parts.append(self._tracer_row(tracer))

    def observe_answer(self, tracer: TracerOutput | None, auq: AUQOutput | None, verdict: DocumentVerdict,
                       turn: int | None = None) -> FusedReading:
        """The answer's TRACER features, AUQ belief (None: AUQ did not score it) and verdict, as the chat
        makes them or a session file records them. ``turn``: the chat's turn number the words name (a turn
        answered again has several answers); default, the count of answers observed."""
        self._agent.append(len(self._parts))
        self._parts.append(self._tracer_row(tracer))
        self._auq.append(_prob(auq.propagated_confidence if auq is not None else None))
        self._p_true.append(_prob(auq.p_true_confidence if auq is not None else None))
        self._verdicts.append(verdict)
        signals = SessionSignals("live", 0, np.asarray(self._auq), np.asarray(self._p_true),
                                 np.asarray([p[0] for p in (self._parts[i] for i in self._agent)]),
                                 tuple(self._verdicts), (None,) * len(self._agent), np.asarray(self._parts, dtype=np.float64),
                                 np.asarray(self._agent, dtype=np.int64))
        features = fusion_features(signals, self.params.tracer, self.params.verdict)[-1:]
        p = float(self.params.stacker.apply(features)[0])
        first = self._last_features is None
        name, delta = strongest_signal(self.params.stacker, features, self._last_features)
        self._last_features = features
        return FusedReading(p, name, delta, signal_words(name, delta, self._verdicts[-1], turn or len(self._agent), first))


def signal_words(name: str, delta: float, verdict: DocumentVerdict, turn: int, first: bool) -> str:
    """The sentence for the signal that moved p_t most at answer ``turn`` (``delta``: its change in logit)."""
    if name == "verifier":
        return VERIFIER_WORDS[verdict.status].format(turn=turn)
    phrases = FIRST_ANSWER_WORDS.get(name, SIGNAL_WORDS[name]) if first else SIGNAL_WORDS[name]
    return phrases[0 if delta < 0 else 1].format(turn=turn)


def _prob(x: Any) -> float:
    return NEUTRAL_CONFIDENCE if x is None else float(x)
