"""A task asked in a person's own words: each suite task asked in the three held-out
phrasings of mlx_sdm/network/tasks/data/task_phrasings_check.json (written before this was measured) about
held-out examples of the task, through the product's chat turn (`TurnPipeline`: the shipped verifier, router
and head). Per task: how many were routed to the task, answered in the task's JSON, verified, and right (by
the task's gold); then the same examples asked with the task's own instruction, for reference.

    .venv/bin/python scripts/bench/task_in_own_words.py [--per-phrasing 4] [--router DIR] [--head none]

A routed turn is asked as the task's own instruction with the payload the person gave
(mlx_sdm/network/task_asking.py); --verbose prints each question as asked and its answer.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def main() -> int:
    from mlx_sdm.app.loading import load_components
    from mlx_sdm.network.question_router import QuestionRouter
    from mlx_sdm.network.tasks.registry import SHIPPED_TASK_NAMES, load_task
    from mlx_sdm.network.tasks.router_data import task_payload
    from mlx_sdm.network.tasks.vendored import DATA_DIR
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnOptions, TurnRequest

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-phrasing", type=int, default=4, help="held-out examples asked in each phrasing")
    p.add_argument("--router", type=Path, default=None, help="a question router folder (default: the shipped one)")
    p.add_argument("--head", default=None, help="'none' for the model's own head (default: the shipped head)")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    components = load_components(None, head=args.head)
    if args.router is not None:
        components.verifier.router = QuestionRouter.load(args.router)
    pipeline = TurnPipeline(components)
    options = TurnOptions(enable_p_true=False, generate_reflection=False, reuse_cache=False)
    phrasings = json.loads((DATA_DIR / "task_phrasings_check.json").read_text(encoding="utf-8"))["phrasings"]
    rows, totals = [], {"own words": Counter(), "task instruction": Counter()}
    for name in SHIPPED_TASK_NAMES:
        task = load_task(name)
        items = task.split("held_out", size=args.per_phrasing * len(phrasings[name]))
        asked = [(phrasing.format(x=task_payload(name, item.document, item.prompt)), item, "own words")
                 for j, phrasing in enumerate(phrasings[name])
                 for item in items[j * args.per_phrasing:(j + 1) * args.per_phrasing]]
        asked += [(item.prompt, item, "task instruction") for item in items[:args.per_phrasing]]
        counts = {"own words": Counter(), "task instruction": Counter()}
        for message, item, how in asked:
            outcome = pipeline.run(TurnRequest([{"role": "user", "content": message}], options))
            label = task.label_answer(outcome.answer.text, item.gold)
            verdict = outcome.verdict
            c = counts[how]
            c["asked"] += 1
            c["routed"] += outcome.task == name
            c["format"] += label.well_formed
            c["right"] += label.correct
            c["verified"] += verdict is not None and verdict.verified
            c["verified right"] += verdict is not None and verdict.verified and label.correct
            if args.verbose:
                print(f"[{name}/{how}] {outcome.messages[-1]['content'][:150]!r}\n   -> {outcome.answer.text[:80]!r} "
                      f"right={label.correct} status={None if verdict is None else verdict.status.value}")
        for how, c in counts.items():
            totals[how].update(c)
            rows.append((name, how, c))
    rows += [("all tasks", how, c) for how, c in totals.items()]
    print("| task | asked as | asked | routed to the task | answered in the task's JSON | right | verified (of them right) |")
    print("|---|---|---|---|---|---|---|")
    for name, how, c in rows:
        n = c["asked"]
        print(f"| {name} | {how} | {n} | {c['routed']} ({c['routed'] / n:.0%}) | {c['format']} ({c['format'] / n:.0%}) | "
              f"{c['right']} ({c['right'] / n:.0%}) | {c['verified']} ({c['verified right']}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
