"""The pause rate by turn index over the shipped session corpus: the chat's escalation rule (mlx_sdm/monitor/forecast/
policy.apply_policy: a turn pauses on its own risks) against the earlier rule that paused on the fused session forecast
(PausePolicy, the threshold eval-monitor measures). A rule that pauses on the turn keeps the rate flat over turns; one
that pauses on a forecast of the whole session's success rises with the session's length.

    .venv/bin/python scripts/bench/pause_by_turn.py            # the table in docs/monitoring.md
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import defaultdict

from mlx_sdm.monitor.forecast.fused import FusedParams, OnlineFusedMonitor, datasets_dir
from mlx_sdm.monitor.forecast.policy import PausePolicy, apply_policy
from mlx_sdm.monitor.forecast.signals import _turn_labels
from mlx_sdm.monitor.online.auq_escalation import EscalationAction, UncertaintyLevel
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.monitor.session_file.reader import read_sessions_jsonl
from mlx_sdm.network.verdict import DocumentVerdict

PAUSING = (EscalationAction.PAUSE_FOR_HUMAN, EscalationAction.ABORT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(datasets_dir() / "session_corpus.jsonl.gz"))
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sessions = read_sessions_jsonl(args.corpus)
    forecast_policy, params = PausePolicy.shipped(), FusedParams.shipped()
    rows: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for session in sessions:
        labels, online, turn = _turn_labels(session), OnlineFusedMonitor(params), 0
        for step in session.steps:
            if step.actor == "user":
                online.observe_user(step.tracer)
                continue
            turn += 1
            label = labels.get(step.step_id, {})
            stored = label.get("verdict") or (step.verifier.to_dict() if step.verifier else None)
            p = online.observe_answer(step.tracer, step.auq, DocumentVerdict.from_dict(stored) or DocumentVerdict.no_verifier()).p
            auq = step.auq
            reading = MonitorReading(level=UncertaintyLevel(auq.level or "low"),
                                     action=EscalationAction(auq.action or "proceed"),
                                     irreversible=bool(auq.irreversible))
            apply_policy(reading, step.text, DocumentVerdict.from_dict(stored))
            row = rows[turn]
            row["turns"] += 1
            row["wrong"] += label.get("correct") is False
            row["forecast"] += forecast_policy.pauses(p)
            row["turn_rule"] += reading.action in PAUSING
            row["degenerate"] += reading.degenerate is not None
            row["judged_wrong"] += reading.judged_wrong is not None
            row["auq"] += reading.action in PAUSING and reading.degenerate is None and reading.judged_wrong is None
    print(f"{len(sessions)} sessions of {args.corpus}\n")
    print("| turn | turns | wrong | paused: session forecast (before) | paused: this turn's risks (now) "
          "| of which a degenerate answer | a verdict confident it is wrong | AUQ HIGH / CRITICAL alone |")
    print("|---|---|---|---|---|---|---|---|")
    for turn in sorted(rows):
        r = rows[turn]
        share = lambda k: f"{100 * r[k] / r['turns']:.1f} %"  # noqa: E731
        print(f"| {turn} | {r['turns']} | {share('wrong')} | {share('forecast')} | {share('turn_rule')} | "
              f"{r['degenerate']} | {r['judged_wrong']} | {r['auq']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
