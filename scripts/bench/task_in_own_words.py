"""A task asked in a person's own words: each suite task asked in the three held-out
phrasings of mlx_sdm/network/tasks/data/task_phrasings_check.json (written before this was measured) about
held-out examples of the task, through the product's chat turn (`TurnPipeline`: the shipped verifier, router
and head). Per task: how many were routed to the task, answered with a JSON object holding the task's field,
answered with a valid answer (the field with one of the task's answers), right (by the task's gold) and
verified; then the same examples asked with the task's own instruction, for reference.

    .venv/bin/python scripts/bench/task_in_own_words.py [--per-phrasing 4] [--router DIR] [--head none]

A routed turn is asked as the task's own instruction with the payload the person gave
(mlx_sdm/network/task_asking.py); --verbose prints each question as asked and its answer.

    .venv/bin/python scripts/bench/task_in_own_words.py --payloads-only

counts, without the model, how the payload rule reads every held-out payload of every task in four forms
(bare, after "Is that right?", before it, after "Check this:"): the payload given back exactly, the whole
message kept (request included), or words of the payload lost.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def main() -> int:
    from mlx_sdm.usecases.loading import load_components
    from mlx_sdm.network.encoding import first_json_object
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
    p.add_argument("--payloads-only", action="store_true", help="only the payload rule's reading (no model)")
    args = p.parse_args()
    if args.payloads_only:
        return payloads()
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
            answer = first_json_object(outcome.answer.text)
            c["json"] += isinstance(answer, dict) and task.answer_format.field in answer
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
    print("| task | asked as | asked | routed to the task | the task's JSON field | a valid answer | right | "
          "verified (of them right) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, how, c in rows:
        n = c["asked"]
        print(f"| {name} | {how} | {n} | {c['routed']} ({c['routed'] / n:.0%}) | {c['json']} ({c['json'] / n:.0%}) | "
              f"{c['format']} ({c['format'] / n:.0%}) | {c['right']} ({c['right'] / n:.0%}) | "
              f"{c['verified']} ({c['verified right']}) |")
    return 0


def payloads() -> int:
    from collections import Counter

    from mlx_sdm.network.task_asking import payload_of
    from mlx_sdm.network.tasks.registry import SHIPPED_TASK_NAMES, load_task
    from mlx_sdm.network.tasks.router_data import task_payload

    forms = {"bare": "{x}", "trailing request": "{x} Is that right?", "leading request": "Is that right? {x}",
             "leading colon": "Check this: {x}"}
    counts: dict[str, Counter] = {form: Counter() for form in forms}
    for name in SHIPPED_TASK_NAMES:
        task = load_task(name)
        for item in task.split("held_out"):
            payload = task_payload(name, item.document, item.prompt).strip()
            for form, pattern in forms.items():
                message = pattern.replace("{x}", payload)
                read = payload_of(message)
                counts[form]["exact" if read == payload else "whole message" if read == message.strip() else "lost"] += 1
    print("| form | payloads | given back exactly | whole message kept | payload words lost |")
    print("|---|---|---|---|---|")
    for form, c in counts.items():
        n = sum(c.values())
        print(f"| {form} | {n} | {c['exact']} ({c['exact'] / n:.0%}) | {c['whole message']} | {c['lost']} ({c['lost'] / n:.0%}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
