"""The second look's data: for open questions, the greedy answer as the everyday chat gives it (the model's chat
template, no system prompt, its first 64 tokens: the judged head) with its hidden-state features, and K answers
drawn in one batch from that answer's prompt cache (``mlx_sdm.lm.sampling``), every one labelled by
``label_open_answer``. One JSON row per question is appended to OUT (resumable: questions already in OUT are
skipped), with a progress bar.

    .venv/bin/python scripts/research/second_look_answers.py --out /tmp/second_look.jsonl \
        --pool 300 --held-out 100 --shifted 100 --k 6

Rows: {"id", "split", "question", "golds", "greedy", "greedy_logprobs", "finish_reason", "greedy_label", "greedy_label_before",
"features" (the member's [mean(h); h_delimiter]), "samples", "sample_logprobs", "sample_labels", "seconds"}.
``greedy_label_before`` is the label without ``person_forms`` (gold containment as written).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

DEFAULT_POOL = 400
DEFAULT_HELD_OUT = 150
DEFAULT_SHIFTED = 150
DEFAULT_BATCH = 16
DEFAULT_SAMPLE_TOKENS = 32


def main(argv: list[str] | None = None) -> None:
    from mlx_sdm.lm.features import ANSWER_HEAD_TOKENS, DELIMITER_ANSWER_HEAD
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.lm.prompt import render_prompt
    from mlx_sdm.lm.sampling import DEFAULT_SAMPLES, DEFAULT_SEED, DEFAULT_TEMPERATURE, sample_for_prompts
    from mlx_sdm.network.tasks.batched import generate_batch
    from mlx_sdm.network.tasks.open_label import gold_in, label_open_answer
    from mlx_sdm.network.tasks.registry import OPEN_TASK, load_task
    from mlx_sdm.progress import progress_bar

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default=None)
    ap.add_argument("--pool", type=int, default=DEFAULT_POOL)
    ap.add_argument("--held-out", type=int, default=DEFAULT_HELD_OUT)
    ap.add_argument("--shifted", type=int, default=DEFAULT_SHIFTED)
    ap.add_argument("--k", type=int, default=DEFAULT_SAMPLES)
    ap.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--sample-tokens", type=int, default=DEFAULT_SAMPLE_TOKENS,
                    help="tokens per drawn answer (its first sentence holds what agreement reads)")
    ap.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="questions answered and sampled together")
    args = ap.parse_args(argv)

    task = load_task(OPEN_TASK)
    splits = [[(s, it) for it in task.split(s, size=n)]
              for s, n in (("pool", args.pool), ("held_out", args.held_out), ("shifted", args.shifted))]
    # interleaved in proportion, so a run stopped early still holds every split in its share
    items = [pair for _, pair in sorted(((i / len(part), pair) for part in splits for i, pair in enumerate(part)),
                                        key=lambda t: t[0])]
    done = set()
    if args.out.is_file():
        for line in args.out.read_text(encoding="utf-8").splitlines():
            try:
                done.add(json.loads(line)["id"])
            except (json.JSONDecodeError, KeyError):
                pass  # a row cut by a kill: answered again
    todo = [(s, it) for s, it in items if it.id not in done]
    lm = load_model(args.model)
    bar = progress_bar(total=len(items), desc="questions", unit="question")
    bar.update(len(items) - len(todo))
    with args.out.open("a", encoding="utf-8") as out:
        for start in range(0, len(todo), args.batch):
            chunk = todo[start:start + args.batch]
            tic = time.perf_counter()
            prompts = [it.prompt for _, it in chunk]
            # the greedy answers as the everyday chat gives them: chat template, no system prompt, the judged head
            greedy = generate_batch(lm, prompts, max_tokens=ANSWER_HEAD_TOKENS, delimiter=DELIMITER_ANSWER_HEAD)
            rendered = [render_prompt(lm.tokenizer, p) for p in prompts]
            drawn = sample_for_prompts(lm, rendered, k=args.k, temperature=args.temperature, seed=args.seed,
                                       max_tokens=args.sample_tokens,
                                       forced=[g.tokens[: args.sample_tokens] for g in greedy])
            seconds = (time.perf_counter() - tic) / len(chunk)
            for (split, item), answer, (samples, greedy_lps) in zip(chunk, greedy, drawn):
                golds, question = list(item.gold.answers), item.gold.question
                row = {"id": item.id, "split": split, "question": question, "golds": golds, "greedy": answer.text,
                       "greedy_logprobs": list(greedy_lps),  # of its first --sample-tokens tokens "finish_reason": answer.finish_reason,
                       "greedy_label": label_open_answer(answer.text, golds, question),
                       "greedy_label_before": any(gold_in(answer.text, g, question) for g in golds),
                       "features": [round(float(v), 6) for v in answer.features.vector],
                       "samples": list(samples.texts), "sample_logprobs": list(samples.mean_logprobs),
                       "sample_labels": [label_open_answer(t, golds, question) for t in samples.texts],
                       "seconds": seconds}
                out.write(json.dumps(row) + "\n")
            out.flush()
            os.fsync(out.fileno())
            bar.update(len(chunk))
    bar.close()


if __name__ == "__main__":
    main()
