"""What switching LoRA adapters per turn costs in a chat (``--model DIR``: the adapters answer their tasks' turns,
every other turn is the base model's): the switch itself, and the first token of an everyday turn that follows a
task turn (whose KV cache the everyday turn cannot reuse: it was made by other weights) against one that follows an
everyday turn (it reuses the cache).

    .venv/bin/python scripts/bench/adapter_switch.py --model weights/smollm2-tuned --turns 6
"""

from __future__ import annotations

import argparse
import statistics
import time

import mlx_sdm  # noqa: F401  (the fast BLAS before mlx)

EVERYDAY = ["What is the capital of Japan?", "And what is its population?", "Name a famous temple there.",
            "What food is it known for?", "What is the weather like in spring?", "How do I get there from Osaka?"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a fine-tuned model folder")
    parser.add_argument("--turns", type=int, default=6)
    args = parser.parse_args()

    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnOptions
    from mlx_sdm.usecases.loading import load_components

    components = load_components(args.model)
    adapters = components.lm.adapters
    started = time.perf_counter()
    first = next(iter(adapters.sets))  # one task's set in, then the base model's own modules back
    for _ in range(1000):
        adapters.switch(first)
        adapters.switch(None)
    switch_ms = (time.perf_counter() - started) / 2000 * 1e3
    task = components.adapted_tasks[0]
    example = next((t["example_prompt"] for t in components.verifier.tasks if t.get("name") == task.name), None) \
        if components.verifier is not None else None
    options = TurnOptions(max_tokens=24, enable_p_true=False)
    firsts: dict[str, list[float]] = {"after an everyday turn": [], "after a task turn": []}
    for mode in firsts:
        chat = Chat(TurnPipeline(components), options)
        messages: list[dict] = []
        for i in range(args.turns):
            if mode == "after a task turn" and example:
                messages.append({"role": "user", "content": example})
                messages.append({"role": "assistant", "content": chat.turn(messages).answer.text})
            messages.append({"role": "user", "content": EVERYDAY[i % len(EVERYDAY)]})
            outcome = chat.turn(messages)
            messages.append({"role": "assistant", "content": outcome.answer.text})
            if i:  # the first everyday turn has no cache to reuse either way
                firsts[mode].append(outcome.first_token_s)
    print(f"switching the adapters in or out: {switch_ms:.3f} ms")
    for mode, values in firsts.items():
        print(f"first token of an everyday turn {mode}: median {statistics.median(values) * 1e3:.0f} ms "
              f"({len(values)} turns)")


class Chat:
    """One conversation's turns, keeping the KV prefix between them as the chat's turn service does."""

    def __init__(self, pipeline, options):
        self.pipeline, self.options, self.prefix = pipeline, options, None

    def turn(self, messages):
        from mlx_sdm.turn.values import TurnRequest

        prefix, self.prefix = self.prefix, None

        def keep(kept) -> None:
            self.prefix = kept

        return self.pipeline.run(TurnRequest(list(messages), self.options), prefix=prefix, keep_prefix=keep)


if __name__ == "__main__":
    main()
