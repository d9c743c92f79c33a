"""Everyday questions, side by side: the product's chat turn (shipped default verifier and head) and plain
mlx-lm (`stream_generate` with the model's chat template), greedy, on the checked everyday prompts of
`mlx_sdm/datasets/everyday_prompts.json`. Prints each answer pair, then how many are right by the prompt's
check, how many are degenerate (mlx_sdm/monitor/online/degenerate.py) and how many are token for token the same.

    .venv/bin/python scripts/bench/bench_everyday.py --max-tokens 96
    .venv/bin/python scripts/bench/bench_everyday.py --system "You are a helpful assistant. Answer briefly and accurately."

`--system` measures what a system prompt of your own does to the same prompts (on both sides).

`--check40` instead runs the checked-in everyday check (mlx_sdm/network/tasks/data/everyday_check_40.json,
written before the open-question verifier was built): each of the 40 questions and 15 prompts with no
checkable answer through the product's chat turn, with its verdict, and counts how many are judged,
verified (and whether any verified answer is wrong) and left without a verdict:

    .venv/bin/python scripts/bench/bench_everyday.py --check40
    .venv/bin/python scripts/bench/bench_everyday.py --check40 --verifier DIR   # e.g. a suite with a second-look member

It prints the mean time of a turn and, for a verifier that takes a second look, how many turns drew one
(`--no-second-look`: the same turns without it, for the second look's share of a turn).
"""

from __future__ import annotations

import argparse


def main() -> int:
    from mlx_lm import stream_generate

    from checkout import top_level_script  # beside this script
    from mlx_sdm.usecases.loading import load_components
    from mlx_sdm.monitor.online.degenerate import degenerate_answer
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnOptions, TurnRequest

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--system", default=None, help="a system prompt for both sides (default: none of ours)")
    p.add_argument("--check40", action="store_true", help="the everyday check with verdicts (see above)")
    p.add_argument("--verifier", default=None, help="--check40 with this verifier folder (default: the shipped one)")
    p.add_argument("--no-second-look", action="store_true", help="--check40 without the second look (its time alone)")
    args = p.parse_args()
    if args.check40:
        return check40(args.max_tokens, args.verifier, second_look=not args.no_second_look)
    pipeline = TurnPipeline(load_components(None))
    lm = pipeline.components.lm
    options = TurnOptions(max_tokens=args.max_tokens, system_prompt=args.system, reuse_cache=False)
    corpus_plan = top_level_script("corpus_plan")  # the session corpus's everyday prompts and their checks
    check_everyday, prompts = corpus_plan.check_everyday, corpus_plan.everyday_prompts()
    counts = {"product": [0, 0], "mlx-lm": [0, 0]}
    same = 0
    for item in prompts:
        messages = [{"role": "user", "content": item.prompt}]
        ours = pipeline.run(TurnRequest(messages, options))
        plain_messages = ([{"role": "system", "content": args.system}] if args.system else []) + messages
        text = lm.tokenizer.apply_chat_template(plain_messages, add_generation_prompt=True, tokenize=False)
        responses = list(stream_generate(lm.model, lm.tokenizer, text, max_tokens=args.max_tokens))
        tokens = [r.token for r in responses]
        tokens = tokens[:-1] if tokens and tokens[-1] in lm.tokenizer.eos_token_ids else tokens
        plain = lm.tokenizer.decode(tokens)
        same += ours.token_ids == tokens
        for name, answer in (("product", ours.text), ("mlx-lm", plain)):
            right, degenerate = check_everyday(item.check, answer, item.prompt).correct, degenerate_answer(answer) is not None
            counts[name][0] += right
            counts[name][1] += degenerate
            print(f"{name:8} {'right' if right else 'wrong'} {'degenerate' if degenerate else '':10} "
                  f"{item.prompt[:40]!r} -> {answer[:80]!r}", flush=True)
    for name, (right, degenerate) in counts.items():
        print(f"{name}: {right}/{len(prompts)} right, {degenerate} degenerate")
    print(f"token for token the same: {same}/{len(prompts)}")
    return 0


def check40(max_tokens: int, verifier: str | None = None, *, second_look: bool = True) -> int:
    import time
    from collections import Counter

    from checkout import top_level_script  # beside this script
    from mlx_sdm.usecases.loading import load_components
    from mlx_sdm.network.tasks.open_questions import everyday_check
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import CheckingAnswers, TurnOptions, TurnRequest
    from mlx_sdm.network.verdict_words import verdict_words

    pipeline = TurnPipeline(load_components(None, verifier=verifier))
    options = TurnOptions(max_tokens=max_tokens, reuse_cache=False, second_look=second_look)
    seconds, looked = [], 0

    def turn(prompt: str):
        nonlocal looked
        tic = time.perf_counter()
        for got in pipeline.stream(TurnRequest([{"role": "user", "content": prompt}], options)):
            looked += isinstance(got, CheckingAnswers)
        seconds.append(time.perf_counter() - tic)
        return got

    check = everyday_check()
    check_everyday = top_level_script("corpus_plan").check_everyday
    statuses, right_by_status = Counter(), Counter()
    print("| question | answer (first 60 characters) | right by its check | verdict |")
    print("|---|---|---|---|")
    for item in check.questions:
        got = turn(item["prompt"])
        right = check_everyday(item["check"], got.text, item["prompt"]).correct
        status = got.verdict.status.value
        statuses[status] += 1
        right_by_status[status] += right
        print(f"| {item['prompt']} | {got.text[:60]!r} | {'right' if right else 'wrong'} | {status} |", flush=True)
    judged = statuses["verified"] + statuses["not_verified"]
    print(f"40 questions: {sum(right_by_status.values())} answered right; judged {judged}/40 "
          f"({statuses['verified']} verified, {right_by_status['verified']} of them right; "
          f"{statuses['not_verified']} not verified, {right_by_status['not_verified']} of them right); "
          f"out of scope {statuses['out_of_scope']}")
    no_verdict = Counter()
    for item in check.no_checkable_answer:
        got = turn(item["prompt"])
        no_verdict[got.verdict.status.value] += 1
        print(f"  {item['prompt']!r}: {got.verdict.status.value} ({verdict_words(got.verdict).sentence[:90]}...)", flush=True)
    print(f"15 prompts with no checkable answer: {dict(no_verdict)}")
    print(f"{len(seconds)} turns, mean {sum(seconds) / len(seconds):.1f} s each; {looked} took a second look")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
