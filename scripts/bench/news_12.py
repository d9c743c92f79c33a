"""Twelve news articles written for the purpose (tests/fixtures/news_12.json, in no corpus), asked in the README's
format: how many answers the default install (or ``--model``) gets right and verifies, and whether any verified
answer is wrong.

    .venv/bin/python scripts/bench/news_12.py                      # the default install
    .venv/bin/python scripts/bench/news_12.py --model smollm2      # the plain model with its shipped head
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import mlx_sdm  # noqa: F401  (the fast BLAS before mlx)

ARTICLES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "news_12.json"


def prompts() -> list[tuple[str, str]]:
    """(prompt, gold topic) of each article: the topic task's instruction and the first 40 words, as the suite asks."""
    from mlx_sdm.network.encoding import TOPIC
    from mlx_sdm.network.tasks.registry import BBC_PROMPT_WORDS

    data = json.loads(ARTICLES.read_text())["articles"]
    return [(TOPIC.user_message(" ".join(a["text"].split()[:BBC_PROMPT_WORDS])), a["topic"]) for a in data]


def judge_all(model: str | None = None) -> list[dict]:
    from mlx_sdm.network.encoding import TOPIC, parse_answer
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnOptions, TurnRequest
    from mlx_sdm.usecases.loading import load_components

    pipeline = TurnPipeline(load_components(model))
    out = []
    for prompt, gold in prompts():
        turn = pipeline.run(TurnRequest([{"role": "user", "content": prompt}], TurnOptions(enable_p_true=False)))
        answer = parse_answer(turn.answer.judged_text, TOPIC)
        out.append({"gold": gold, "answer": answer, "right": answer == gold, "status": turn.verdict_status.value if turn.verdict_status else "none"})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a model spec or fine-tuned folder (default: the default install)")
    args = parser.parse_args()
    rows = judge_all(args.model)
    for r in rows:
        print(f"{r['gold']:>13} -> {str(r['answer']):>13}  {'right' if r['right'] else 'WRONG'}  {r['status']}")
    verified = [r for r in rows if r["status"] == "verified"]
    print(f"\n{sum(r['right'] for r in rows)}/12 right, {len(verified)}/12 verified, "
          f"{sum(not r['right'] for r in verified)} verified and wrong")


if __name__ == "__main__":
    main()
