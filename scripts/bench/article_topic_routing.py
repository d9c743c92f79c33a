"""A pasted article's topic asked in everyday words: does the question reach the topic task (bbc_topic)?

Four held-out BBC articles (one business, sports, entertainment and politics story from the task's held-out split,
none of them a payload the router was trained on) are pasted with each phrasing of ``HELD_OUT_TOPIC_PHRASINGS``
(``mlx_sdm/network/tasks/router_data.py``: everyday ways to ask what an article is about, none of them among the
router's training phrasings; the first three are the issue's own words) and routed by the product's one router of a
turn, ``DocumentVerifier.route`` (the shipped suite verifier and its question router). Per phrasing: how many of the
four articles reach the topic task, and where the others went.

    .venv/bin/python scripts/bench/article_topic_routing.py                  # the shipped router
    .venv/bin/python scripts/bench/article_topic_routing.py --router DIR     # another build of it
    .venv/bin/python scripts/bench/article_topic_routing.py --answer         # and ask the model (the chat's turn)

``--answer`` also runs each routed message through the chat's turn (``TurnPipeline``: the shipped model, head and
verifier) and counts the answers that name one of the task's topics ({"topic": ...}) and the right one.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path


def main() -> int:
    from mlx_sdm.network.question_router import QuestionRouter
    from mlx_sdm.network.tasks.router_data import HELD_OUT_TOPIC_PHRASINGS, held_out_topic_articles
    from mlx_sdm.network.verifier import DEFAULT_VERIFIER_DIR, DocumentVerifier

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--router", type=Path, default=None, help="a question router folder (default: the shipped one)")
    p.add_argument("--answer", action="store_true", help="also ask the model through the chat's turn")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    verifier = DocumentVerifier.load(DEFAULT_VERIFIER_DIR)
    if args.router is not None:
        verifier.router = QuestionRouter.load(args.router)
    pipeline = None
    if args.answer:
        from mlx_sdm.turn.pipeline import TurnPipeline
        from mlx_sdm.usecases.loading import load_components

        components = load_components(None)
        components.verifier.router = verifier.router
        pipeline = TurnPipeline(components)
    pasted = held_out_topic_articles()
    total = Counter()
    print("| phrasing | articles | routed to the topic task | elsewhere |" + (" answered with a topic | right |"
                                                                          if pipeline else ""))
    print("|---|---|---|---|" + ("---|---|" if pipeline else ""))
    for phrasing in HELD_OUT_TOPIC_PHRASINGS:
        c, elsewhere = Counter(), Counter()
        for payload, gold in pasted:
            message = phrasing.format(x=payload)
            route = verifier.route(message)
            routed = route.task == "bbc_topic"
            c["asked"] += 1
            c["routed"] += routed
            if not routed:
                elsewhere[route.task or route.how.value] += 1
            if pipeline is not None and routed:
                topic = _asked(pipeline, message)
                c["topic"] += topic is not None
                c["right"] += topic is not None and topic.lower() == gold.lower()
                if args.verbose:
                    print(f"   {message[:60]!r} -> {topic!r} (gold {gold})")
            elif args.verbose:
                print(f"   {message[:60]!r} -> {route.task or route.how.value}")
        total.update(c)
        shown = phrasing.replace("\n", "⏎").replace("{x}", "ARTICLE")
        others = ", ".join(f"{n} to {k}" for k, n in elsewhere.items()) or "—"
        print(f"| {shown!r} | {c['asked']} | **{c['routed']}** | {others} |"
              + (f" {c['topic']} | {c['right']} |" if pipeline else ""))
    print(f"| all {len(HELD_OUT_TOPIC_PHRASINGS)} phrasings | {total['asked']} | **{total['routed']}** "
          f"({total['routed'] / total['asked']:.0%}) | |" + (f" {total['topic']} | {total['right']} |" if pipeline else ""))
    return 0


def _asked(pipeline, message: str) -> str | None:
    """The topic the chat's turn answers ``message`` with (None: no {"topic": ...} in its answer)."""
    from mlx_sdm.network.encoding import first_json_object
    from mlx_sdm.turn.values import TurnOptions, TurnRequest

    options = TurnOptions(enable_p_true=False, generate_reflection=False, reuse_cache=False)
    outcome = pipeline.run(TurnRequest([{"role": "user", "content": message}], options))
    answer = first_json_object(outcome.answer.text)
    return str(answer["topic"]) if isinstance(answer, dict) and answer.get("topic") else None


if __name__ == "__main__":
    raise SystemExit(main())
