"""Choosing the chat's pause threshold on a session corpus, cross-fitted.

The policy pauses a turn whose fused forecast ``p_t`` (:mod:`mlx_sdm.monitor.forecast.fusion`) is below a
threshold. The threshold is the ``pause_rate`` quantile of the fused forecasts of the corpus's turns,
so that about that share of turns pause.

Measured without looking at the scored sessions (:func:`choose_policy`): the sessions are split into
``k`` folds (:func:`mlx_sdm.monitor.forecast.fusion.session_folds`); on each, the monitors are fitted and the
threshold chosen on the other folds' turns, and applied to the held-out fold's out-of-fold forecasts.
Reported with 95 % percentile-bootstrap intervals over sessions:

- ``paused``: the share of turns paused (should come out near ``pause_rate``);
- ``failures_caught``: the share of wrong turns that were paused (a turn's ``correct`` label where the
  session carries one, else the session's outcome);
- ``failure_rate_paused`` / ``failure_rate_kept``: how often a paused / a not-paused turn was wrong;
- ``failed_sessions_paused``: the share of failed sessions with at least one paused turn.

The shipped threshold is then chosen the same way on every session of the corpus, with the monitors
fitted on every session (the parameters ``fused_monitor.json`` holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mlx_sdm.monitor.forecast.fusion import DEFAULT_FOLDS, fit_monitors, fusion_features, session_folds
from mlx_sdm.monitor.evaluation.heldout import CONFIDENCE, Interval, _interval
from mlx_sdm.monitor.forecast.signals import SessionSignals

DEFAULT_PAUSE_RATE = 0.15
MEASURES = ("paused", "failures_caught", "failure_rate_paused", "failure_rate_kept", "failed_sessions_paused")
MEASURE_LABELS = {"paused": "share of turns paused", "failures_caught": "wrong turns paused (of all wrong turns)",
                  "failure_rate_paused": "paused turns that were wrong", "failure_rate_kept": "kept turns that were wrong",
                  "failed_sessions_paused": "failed sessions paused at least once"}


@dataclass(frozen=True)
class PolicyChoice:
    """A threshold chosen on a whole corpus and its cross-fitted, held-out measures."""

    threshold: float
    pause_rate: float
    in_sample_paused: float  # the share of the corpus's turns the threshold pauses under the shipped fit
    measured: dict[str, Interval]
    n_sessions: int
    n_turns: int
    folds: int
    n_boot: int
    seed: int

    def measured_dict(self) -> dict:
        return {"folds": self.folds, "bootstrap": self.n_boot, "seed": self.seed, "sessions": self.n_sessions,
                "turns": self.n_turns, "in_sample_paused": round(self.in_sample_paused, 6),
                **{k: v.to_dict() for k, v in self.measured.items()}}


def threshold_at(p: np.ndarray, pause_rate: float) -> float:
    """The largest threshold that pauses (``p < threshold``) at most ``pause_rate`` of ``p``."""
    if not 0.0 < pause_rate < 1.0:
        raise ValueError(f"the pause rate must lie strictly between 0 and 1, got {pause_rate}")
    ordered = np.sort(np.asarray(p, dtype=np.float64))
    allowed = int(np.floor(pause_rate * ordered.size + 1e-9))
    return float(ordered[allowed]) if allowed < ordered.size else float(np.nextafter(ordered[-1], np.inf))


def fused_forecasts(fitted, signals: Sequence[SessionSignals]) -> list[np.ndarray]:
    return [fitted.stacker.apply(fusion_features(s, fitted.tracer_config, fitted.verdict_params)) for s in signals]


def turn_failures(s: SessionSignals) -> np.ndarray:
    """1 where the turn was wrong: its own label where known, else the session's outcome."""
    return np.array([(1 - s.success) if c is None else int(not c) for c in s.turn_correct], dtype=np.int64)


def _held_out_pauses(signals: Sequence[SessionSignals], pause_rate: float, folds: int) -> list[np.ndarray]:
    """Per session, which turns the fold's policy (fitted and chosen without it) pauses."""
    fold = session_folds([s.session_id for s in signals], [s.success for s in signals], folds)
    paused: list[np.ndarray | None] = [None] * len(signals)
    for f in range(folds):
        train = [signals[i] for i in np.flatnonzero(fold != f)]
        fitted = fit_monitors(train)
        threshold = threshold_at(np.concatenate(fused_forecasts(fitted, train)), pause_rate)
        held = np.flatnonzero(fold == f)
        for i, p in zip(held, fused_forecasts(fitted, [signals[i] for i in held])):
            paused[i] = p < threshold
    return paused  # type: ignore[return-value]


def _measures(paused: Sequence[np.ndarray], wrong: Sequence[np.ndarray], failed: np.ndarray) -> dict[str, float]:
    pz, wz = np.concatenate(paused), np.concatenate(wrong)

    def share(num: float, den: float) -> float:
        return float(num / den) if den else float("nan")

    any_paused = np.array([p.any() for p in paused])
    return {"paused": share(pz.sum(), pz.size), "failures_caught": share((pz & (wz == 1)).sum(), wz.sum()),
            "failure_rate_paused": share(wz[pz].sum(), pz.sum()), "failure_rate_kept": share(wz[~pz].sum(), (~pz).sum()),
            "failed_sessions_paused": share((any_paused & (failed == 1)).sum(), failed.sum())}


def choose_policy(signals: Sequence[SessionSignals], pause_rate: float = DEFAULT_PAUSE_RATE, *,
                  folds: int = DEFAULT_FOLDS, n_boot: int = 1000, seed: int = 0) -> PolicyChoice:
    """The threshold on the whole corpus and its cross-fitted measures (module docstring)."""
    signals = list(signals)
    if len(signals) < 2 * folds:
        raise ValueError(f"choosing a pause policy needs at least {2 * folds} labelled sessions, got {len(signals)}")
    paused = _held_out_pauses(signals, pause_rate, folds)
    wrong = [turn_failures(s) for s in signals]
    failed = np.array([1 - s.success for s in signals])
    point = _measures(paused, wrong, failed)
    rng = np.random.default_rng(seed)
    boot = {k: np.empty(n_boot) for k in MEASURES}
    for b, idx in enumerate(rng.integers(0, len(signals), size=(n_boot, len(signals)))):
        values = _measures([paused[i] for i in idx], [wrong[i] for i in idx], failed[idx])
        for k in MEASURES:
            boot[k][b] = values[k]
    fitted = fit_monitors(signals)
    all_p = np.concatenate(fused_forecasts(fitted, signals))
    threshold = threshold_at(all_p, pause_rate)
    return PolicyChoice(threshold, pause_rate, float(np.mean(all_p < threshold)),
                        {k: _interval(point[k], boot[k], CONFIDENCE) for k in MEASURES},
                        len(signals), int(all_p.size), folds, n_boot, seed)


def format_choice(choice: PolicyChoice) -> str:
    def cell(iv: Interval) -> str:
        return f"{100 * iv.value:.1f}% [{100 * iv.low:.1f}, {100 * iv.high:.1f}]"

    lines = [f"Pause policy: pause a turn whose fused forecast p_t < {choice.threshold:.4f} "
             f"(chosen to pause {100 * choice.pause_rate:.0f}% of turns; on the whole corpus it pauses "
             f"{100 * choice.in_sample_paused:.1f}% of {choice.n_turns} turns)",
             f"Held out ({choice.folds}-fold cross-fitting by session, {choice.n_sessions} sessions; "
             f"95% bootstrap interval, {choice.n_boot} resamples, seed {choice.seed}):", "",
             "| measure | held-out value [95% interval] |", "|---|---|"]
    lines += [f"| {MEASURE_LABELS[k]} | {cell(choice.measured[k])} |" for k in MEASURES]
    return "\n".join(lines)


def corpus_signals(path) -> tuple[list, list[SessionSignals]]:
    """(sessions, signals of the labelled ones) of a session corpus file."""
    import warnings

    from mlx_sdm.monitor.session_file.reader import read_sessions_jsonl
    from mlx_sdm.monitor.forecast.signals import session_signals

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sessions = read_sessions_jsonl(path)
    return sessions, [s for s in map(session_signals, sessions) if s is not None]


def shipped_params_with_policy(corpus, pause_rate: float = DEFAULT_PAUSE_RATE, *, folds: int = DEFAULT_FOLDS,
                               n_boot: int = 1000, seed: int = 0) -> tuple[dict, PolicyChoice]:
    """What ``fused_monitor.json`` holds: the fused monitor fitted on every session of ``corpus`` and the
    pause policy chosen on it (:class:`mlx_sdm.monitor.forecast.policy.PausePolicy`, key ``"policy"``), naming the
    corpus (file, sha256, sessions, provenance) it was chosen on."""
    from pathlib import Path

    from mlx_sdm.monitor.forecast.fusion import fit_monitors as fit
    from mlx_sdm.monitor.forecast.fused import params_to_dict
    from mlx_sdm.monitor.forecast.policy import POLICY_KEY, PausePolicy
    from mlx_sdm.monitor.session_file.provenance import describe, file_sha256, provenance_groups

    sessions, signals = corpus_signals(corpus)
    choice = choose_policy(signals, pause_rate, folds=folds, n_boot=n_boot, seed=seed)
    chosen_on = {"file": Path(corpus).name, "sha256": file_sha256(corpus), "sessions": len(signals),
                 "provenance": [{"sessions": g.sessions, "made_by": describe(g.provenance),
                                 "provenance": g.provenance.to_dict() if g.provenance else None}
                                for g in provenance_groups(sessions)]}
    params = params_to_dict(fit(signals))
    params[POLICY_KEY] = PausePolicy(choice.threshold, pause_rate, chosen_on, choice.measured_dict()).to_dict()
    return params, choice


if __name__ == "__main__":  # rebuild the shipped parameters and pause policy: python -m mlx_sdm.monitor.evaluation.policy_choice [RATE]
    import json
    import sys

    from mlx_sdm.atomic import atomic_write_text
    from mlx_sdm.monitor.forecast.fused import PARAMS_FILE, datasets_dir

    rate = float(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PAUSE_RATE
    params, choice = shipped_params_with_policy(datasets_dir() / "session_corpus.jsonl.gz", rate)
    atomic_write_text(datasets_dir() / PARAMS_FILE, json.dumps(params, indent=1, sort_keys=True) + "\n")
    print(format_choice(choice))
    print(f"wrote {datasets_dir() / PARAMS_FILE}")
