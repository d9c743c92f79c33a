"""What switching LoRA adapters per turn costs in a chat (the adapters answer their tasks' turns, every other turn is
the base model's): the switch itself; the first token of an everyday turn that follows a task turn against one that
follows an everyday turn; and the first token of a task turn that follows an everyday turn against one that follows
a task turn.

A task turn is answered alone (its task's prompt, none of the conversation), so it neither reads nor replaces the
conversation's cached KV prefix (turn/pipeline.py): the everyday turn after it prefills its new tokens only, as
after an everyday turn, and a task turn prefills its own prompt whatever came before.

    .venv/bin/python scripts/bench/adapter_switch.py --model weights/smollm2-tuned --turns 6
    .venv/bin/python scripts/bench/adapter_switch.py --adapters DIR/adapters/bbc_topic --task bbc_topic --turns 4

``--follow-ups``: everyday questions that lean on the turn before (see FOLLOW_UPS), in place of standalone ones.
``--model``: a fine-tuned model folder (its first adapted task, asked with its verifier's example prompt);
``--adapters`` + ``--task``: one shipped task's adapter folder (what ``mlx-sdm finetune --task`` writes) on the
embedded SmolLM2, asked with the task's first held-out prompt.
"""

from __future__ import annotations

import argparse
import statistics
import time

import mlx_sdm  # noqa: F401  (the fast BLAS before mlx)

#: Everyday questions that stand alone (``leans_on_previous`` reads none as a follow-up), so an everyday turn reads
#: the same conversation after a task turn as after an everyday one (``without_task_exchanges`` leaves the task
#: exchanges out): what differs is the switch alone.
EVERYDAY = ["What is the capital of Japan?", "What is the population of Tokyo?", "Name a famous temple in Kyoto.",
            "What food is Osaka known for?", "What is the weather like in Tokyo in spring?",
            "How do I get from Osaka to Kyoto?"]
#: ``--follow-ups``: questions that lean on the turn before. After a task turn such a question reads that task's
#: exchange too (new tokens to prefill), and the next turn leaves it out again, so the conversation as the model
#: reads it no longer starts with the cached tokens and is prefilled whole: a cost of the conversation's rendering,
#: not of the switch.
FOLLOW_UPS = ["What is the capital of Japan?", "And what is its population?", "Name a famous temple there.",
              "What food is it known for?", "What is the weather like in spring?", "How do I get there from Osaka?"]
#: What each mode's conversation asks in a round ("E": an everyday question, "T": a task question) and which of its
#: turns' first tokens it measures (from the second round on: the first everyday turn has no cache to reuse).
MODES = {
    "everyday after everyday": ("E", "E"),
    "everyday after task": ("TE", "E"),
    "task after everyday": ("ET", "T"),
    "task after task": ("T", "T"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a fine-tuned model folder")
    parser.add_argument("--adapters", help="one task's adapter folder, on the embedded SmolLM2 (with --task)")
    parser.add_argument("--task", help="the shipped task the --adapters folder answers")
    parser.add_argument("--turns", type=int, default=6, help="rounds per mode")
    parser.add_argument("--follow-ups", action="store_true", help="everyday questions that lean on the turn before")
    args = parser.parse_args()
    if bool(args.model) == bool(args.adapters) or bool(args.adapters) != bool(args.task):
        parser.error("give --model DIR, or --adapters DIR with --task NAME")
    components, asked = _components(args, args.turns)
    print(f"switching the adapters in or out: {_switch_ms(components.lm.adapters):.3f} ms")
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnOptions

    options = TurnOptions(max_tokens=24, enable_p_true=False)
    everyday = FOLLOW_UPS if args.follow_ups else EVERYDAY
    medians = {mode: _first_tokens(Chat(TurnPipeline(components), options), mode, args.turns, asked, everyday)
               for mode in MODES}
    print(f"ratio everyday after task / after everyday: "
          f"{medians['everyday after task'] / medians['everyday after everyday']:.2f}; "
          f"task after everyday / after task: {medians['task after everyday'] / medians['task after task']:.2f}")


def _first_tokens(chat: "Chat", mode: str, turns: int, asked: list[str], everyday: list[str]) -> float:
    """One conversation of ``turns`` rounds of ``mode``; prints and returns the measured turns' median first token
    (s), with the prompt tokens they prefilled and read from the cache (what explains a difference)."""
    round_, measured = MODES[mode]
    firsts, fed, cached = [], [], []
    for i in range(turns):
        for kind in round_:
            outcome = chat.turn(asked[i % len(asked)] if kind == "T" else everyday[i % len(everyday)])
            if kind == measured and i:
                answer = outcome.answer
                firsts.append(outcome.first_token_s)
                fed.append(answer.prompt_tokens - answer.reused_tokens)
                cached.append(answer.reused_tokens)
    median = statistics.median(firsts)
    print(f"first token, {mode}: median {median * 1e3:.0f} ms ({len(firsts)} turns; on average "
          f"{statistics.mean(fed):.0f} prompt tokens prefilled, {statistics.mean(cached):.0f} from the cache)")
    return median


def _components(args, turns: int):
    """(the turn's components, the task questions the task turns ask: each round another, where there are
    several, so a task turn after a task turn is not the same question answered word for word again)."""
    if args.model:
        from mlx_sdm.usecases.loading import load_components

        components = load_components(args.model)
        task = components.adapted_tasks[0]
        example = next((t["example_prompt"] for t in components.verifier.tasks if t.get("name") == task.name),
                       None) if components.verifier is not None else None
        return components, [example or f"{task.instruction} Hello."]
    from mlx_sdm.lm.adapters import attach_adapters
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.coverage import TaskInstruction
    from mlx_sdm.network.tasks.registry import load_task
    from mlx_sdm.turn.values import TurnComponents

    task, lm = load_task(args.task), load_model()
    instruction = task.answer_format.instruction
    lm.adapters = attach_adapters(lm.model, args.adapters, instructions=(instruction,))
    tasks = (TaskInstruction(instruction, task.system, task.name),)
    return TurnComponents(lm=lm, adapted_tasks=tasks), [item.prompt for item in task.split("held_out", size=turns)]


def _switch_ms(adapters) -> float:
    """One task's set in, then the base model's own modules back, a thousand times: ms per switch."""
    started = time.perf_counter()
    first = next(iter(adapters.sets))
    for _ in range(1000):
        adapters.switch(first)
        adapters.switch(None)
    return (time.perf_counter() - started) / 2000 * 1e3


class Chat:
    """One conversation's turns, keeping the KV prefix between them as the chat's turn service does."""

    def __init__(self, pipeline, options):
        self.pipeline, self.options, self.prefix, self.messages = pipeline, options, None, []

    def turn(self, question: str):
        from mlx_sdm.turn.values import TurnRequest

        self.messages.append({"role": "user", "content": question})
        prefix, self.prefix = self.prefix, None
        outcome = self.pipeline.run(TurnRequest(list(self.messages), self.options), prefix=prefix,
                                    keep_prefix=self._keep)
        self.messages.append({"role": "assistant", "content": outcome.answer.text})
        return outcome

    def _keep(self, kept) -> None:
        self.prefix = kept


if __name__ == "__main__":
    main()
