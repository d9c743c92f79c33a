"""How the question router reads held-out factual questions and follow-ups, through the one
router of a turn (``DocumentVerifier.route``), and that prompts with no checkable answer stay out of scope.

    .venv/bin/python scripts/bench/factual_routing.py                          # the shipped router
    .venv/bin/python scripts/bench/factual_routing.py --router DIR             # another build of it
    .venv/bin/python scripts/build_question_router.py --out DIR && .venv/bin/python scripts/bench/factual_routing.py --router DIR

Data: mlx_sdm/network/tasks/data/factual_check.json (100 factual questions, 50 follow-ups that ask a checkable
answer, 20 with none; written before the router was retrained) and the router's own held-out prompts with no
checkable answer. Logic: mlx_sdm/usecases/question_router.py (factual_routing). The everyday check's verdicts need
the model: .venv/bin/python scripts/bench_everyday.py --check40
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> int:
    from mlx_sdm.usecases.question_router import factual_routing
    from mlx_sdm.network.question_router import QuestionRouter
    from mlx_sdm.network.verifier import DEFAULT_VERIFIER_DIR, DocumentVerifier

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--router", type=Path, default=None, help="a question router folder (default: the shipped one)")
    p.add_argument("--verbose", action="store_true", help="list every prompt routed the wrong way")
    args = p.parse_args()
    verifier = DocumentVerifier.load(DEFAULT_VERIFIER_DIR)
    if args.router is not None:
        verifier.router = QuestionRouter.load(args.router)
    print("| held-out set | prompts | judged (open question) | left out of scope (no checkable answer) |")
    print("|---|---|---|---|")
    for name, row in factual_routing(verifier).items():
        if "judged" in row:
            print(f"| {name} | {row['total']} | **{row['judged']}** ({row['judged'] / row['total']:.0%}) | "
                  f"{row['total'] - row['judged']} |")
            wrong = row["missed"]
        else:
            print(f"| {name} | {row['total']} | {row['total'] - row['no_checkable_answer']} | "
                  f"**{row['no_checkable_answer']}** ({row['no_checkable_answer'] / row['total']:.0%}) |")
            wrong = row["given_a_verdict"]
        if args.verbose:
            for prompt in wrong:
                print(f"|   {prompt!r} | | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
