"""The task suite before and after the shipped default was rebuilt with ``finetune --task``: today's default
install (the plain SmolLM2, the Alg. 4 head ``weights/smollm2-suite-head`` on the tasks it decodes, the verifier
``weights/smollm2-suite``) beside the fine-tuned folder (its LoRA adapters, head and verifier), on every task's
held-out and shifted rows, judged as the chat judges them. Prints the paper's Table 1 cells (the p̂ lower row)
with task accuracy, answers in the JSON and the fraction verified, per task and split.

    .venv/bin/python scripts/bench/suite_before_after.py --folder weights/smollm2-tuned --rows 100
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import mlx_sdm  # noqa: F401  (the fast BLAS before mlx)

SUITE = ("bbc_topic", "fever", "sports_understanding", "strategyqa", "truthful_qa", "spam", "sentiment")


def today(rows: int, cache: Path):
    """Today's default: the plain model, the shipped head where its manifest says it decodes, the suite verifier."""
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.heads import load_head
    from mlx_sdm.network.verifier import DocumentVerifier
    from mlx_sdm.resources import shipped
    from mlx_sdm.usecases.finetune_plan import Variant

    lm = load_model()
    heads = load_head(shipped("smollm2-suite-head"), lm.model, lm.fingerprint)
    decodes = {t.name for t in heads.tasks or ()}
    verifier = DocumentVerifier.load(shipped("smollm2-suite"), expect_fingerprint=lm.fingerprint)
    outcomes = answer(lm, rows, cache, head_for=lambda name: heads.vocab_logits if name in decodes else None,
                      head_tag="smollm2-suite-head")
    return Variant("today (plain + shipped head)", outcomes, verifier)


def tuned(folder: Path, rows: int, cache: Path) -> list:
    """The fine-tuned folder as the chat loads it: each task's adapters in for its turns, its head where it decodes;
    one variant per task, judged by the verifier member that judges that task."""
    from mlx_sdm.usecases.finetune_plan import Variant
    from mlx_sdm.usecases.loading import load_components

    components = load_components(str(folder))
    adapters, verifier = components.lm.adapters, components.verifier
    heads = {t.name: head for t, head in components.task_heads}
    heads.update({t.name: components.head for t in components.head_tasks or ()})
    outcomes = answer(components.lm, rows, cache, head_for=heads.get, head_tag=str(folder),
                      weights_for=lambda task: adapters.use(adapters.serves(task.prompt_prefix.strip())))
    several = verifier is not None and len(verifier.recipe.task_systems) > 1
    judges = {name: verifier.member_for(name) if several else verifier for name in outcomes}
    return [Variant(f"fine-tuned ({folder.name})", {name: outcome}, judges[name]) for name, outcome in outcomes.items()]


def answer(lm, rows: int, cache: Path, *, head_for, head_tag: str, weights_for=None) -> dict:
    """Every suite task's held-out and shifted rows answered (greedy, the task's system prompt, batched, cached)."""
    from mlx_sdm.network.tasks.answers import AnswerSettings, answer_items
    from mlx_sdm.network.tasks.registry import load_tasks
    from mlx_sdm.usecases.build_verifier import DEFAULT_MAX_TOKENS, TaskOutcome

    out = {}
    for task in load_tasks(list(SUITE)):
        head = head_for(task.name)
        settings = AnswerSettings(DEFAULT_MAX_TOKENS, cache_dir=cache, head_tag=head_tag if head is not None else "")
        settings = settings.for_task(task)
        with weights_for(task) if weights_for is not None else contextlib.nullcontext():  # the task's adapters
            held = answer_items(lm, task, task.split("held_out", size=rows), settings, head=head)
            shifted = answer_items(lm, task, task.split("shifted", size=rows), settings, head=head)
        out[task.name] = TaskOutcome(task, [], held, shifted)
    return out


def main() -> None:
    from mlx_sdm.usecases.finetune_report import score_line, score_variant

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", default="weights/smollm2-tuned")
    parser.add_argument("--rows", type=int, default=100, help="held-out and shifted rows per task")
    parser.add_argument("--cache", default="build/suite-before-after.cache")
    args = parser.parse_args()
    scores = score_variant(today(args.rows, Path(args.cache))) + [
        s for variant in tuned(Path(args.folder), args.rows, Path(args.cache)) for s in score_variant(variant)]
    print("| task, split (rows) | model | JSON | task accuracy | verified (right) | y=0 | y=1 | ŷ=0 | ŷ=1 | marginal |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in sorted(scores, key=lambda s: (SUITE.index(s.task), s.split != "held-out")):
        print(score_line(s))
    broken = [v for s in scores for v in s.violations(0.95)]
    print("\nEvery admitted stratum is at least 0.95." if not broken else "\nBelow 0.95: " + "; ".join(broken))


if __name__ == "__main__":
    main()
