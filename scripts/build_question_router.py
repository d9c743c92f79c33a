"""Rebuild the shipped question router (weights/question-router) and print its held-out routing.

    .venv/bin/python scripts/build_question_router.py --out weights/question-router [--cache-dir runs/router-cache]

Logic in mlx_sdm/usecases/question_router.py (prompts: mlx_sdm/network/tasks/router_data.py). Embedding the ~5,900
prompts with MiniLM takes a few minutes on 2 cores; --cache-dir keeps the embeddings for a rebuild.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> int:
    from mlx_sdm.usecases.question_router import build_router

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cache-dir", type=Path, default=None)
    args = p.parse_args()
    router = build_router(cache_dir=args.cache_dir)
    router.save(args.out)
    print(f"task threshold {router.task_threshold:.3f}, open threshold {router.open_threshold:.3f}")
    print(json.dumps(router.measured["held_out"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
