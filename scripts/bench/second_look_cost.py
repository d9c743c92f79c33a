"""What the second look costs in a chat turn: the everyday answer (greedy, its judged head of 64 tokens, as the
chat generates it with its KV cache kept) against K answers drawn in one batch from that cache
(``mlx_sdm.lm.sampling.sample_from_cache``), on questions of the open-question pool.

    .venv/bin/python scripts/bench/second_look_cost.py --questions 8 --k 6
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    from mlx_sdm.lm.features import ANSWER_HEAD_TOKENS, DELIMITER_ANSWER_HEAD
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.lm.sampling import DEFAULT_SAMPLES, sample_from_cache
    from mlx_sdm.network.tasks.registry import OPEN_TASK, load_task
    from mlx_sdm.turn.answer import generate_answer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--k", type=int, default=DEFAULT_SAMPLES)
    ap.add_argument("--sample-tokens", type=int, default=ANSWER_HEAD_TOKENS)
    ap.add_argument("--model", default=None)
    args = ap.parse_args(argv)
    lm = load_model(args.model)
    items = load_task(OPEN_TASK).split("pool", size=args.questions + 1)
    answer_s, look_s, tokens, drawn_tokens = [], [], [], []
    for i, item in enumerate(items):
        messages = [{"role": "user", "content": item.prompt}]
        tic = time.perf_counter()
        answer = generate_answer(lm, messages, max_tokens=ANSWER_HEAD_TOKENS, keep_cache=True,
                                 delimiter=DELIMITER_ANSWER_HEAD)
        mid = time.perf_counter()
        drawn = sample_from_cache(lm, answer.cache, answer.cached_tokens[: answer.prompt_tokens], k=args.k,
                                  max_tokens=args.sample_tokens)
        end = time.perf_counter()
        if i == 0:
            continue  # warm-up: the first call compiles and pages the weights in
        answer_s.append(mid - tic)
        look_s.append(end - mid)
        tokens.append(len(answer.token_ids))
        drawn_tokens.append(max(len(t) for t in drawn.token_ids))
    a, s = float(np.median(answer_s)), float(np.median(look_s))
    print(f"{len(answer_s)} questions, K = {args.k}: the answer {a:.2f} s (median; {np.median(tokens):.0f} tokens), "
          f"the second look {s:.2f} s (median; longest drawn answer {np.median(drawn_tokens):.0f} tokens): "
          f"{s / (a + s):.0%} of the turn, {s / a:.2f}x the answer")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
