#!/usr/bin/env python
"""Would a regenerated session corpus change what the fused forecast reads? Sessions made again with the
product as it ships now (scripts/session_corpus.py, same plan seed) are compared with the shipped corpus's
sessions of the same ids: the answers, the labels, each turn's shown status and route, and the fusion
features and p_t the shipped forecast computes from each (the recorded live p_t is not compared: it was made
with the parameters of its day).

    .venv/bin/python scripts/session_corpus.py --out runs/again.jsonl --limit 8
    .venv/bin/python scripts/research/corpus_forecast_diff.py runs/again.jsonl
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sessions", help="session JSONL made again (a subset of the shipped corpus's session ids)")
    args = p.parse_args()

    from mlx_sdm.monitor.forecast.fused import FusedParams, datasets_dir
    from mlx_sdm.monitor.forecast.fusion import fusion_features
    from mlx_sdm.monitor.forecast.signals import session_signals
    from mlx_sdm.monitor.session_file.reader import read_sessions_jsonl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shipped = {s.session_id: s for s in read_sessions_jsonl(datasets_dir() / "session_corpus.jsonl.gz")}
        again = read_sessions_jsonl(args.sessions)
    params = FusedParams.shipped()
    turns = same_answer = same_label = same_shown = 0
    worst_feature = worst_p = 0.0
    for session in again:
        old = shipped[session.session_id]
        for a, b in zip(old.metadata["turns"], session.metadata["turns"]):
            turns += 1
            same_answer += a["answer"] == b["answer"]
            same_label += a["correct"] == b["correct"]
            shown = [((t.get("verdict") or {}).get("status"), t.get("route")) for t in (a, b)]
            same_shown += shown[0] == shown[1]
            if shown[0] != shown[1]:
                print(f"{session.session_id} {b['kind']}: shown {shown[0]} -> {shown[1]}")
        fa, fb = (fusion_features(session_signals(s), params.tracer, params.verdict) for s in (old, session))
        worst_feature = max(worst_feature, float(np.abs(fa - fb).max()))
        worst_p = max(worst_p, float(np.abs(params.stacker.apply(fa) - params.stacker.apply(fb)).max()))
    print(f"{len(again)} sessions, {turns} turns: same answer {same_answer}, same label {same_label}, "
          f"same shown status and route {same_shown}")
    print(f"fusion features: max difference {worst_feature:.2g}; shipped forecast p_t: max difference {worst_p:.2g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
