"""``mlx-sdm compress-head``: an SDM-network positive head (``mlx-sdm finetune``'s output) in the compact
form that ships.

A full float32 positive head for SmolLM2 is 49,152 x 576 x 4 B = 113 MB. The compact form stores only its
change from the model's own output head as two float16 factors, ``W_pos = W_ref + U @ V`` (truncated SVD
of ``W_pos - W_ref``; about (|V| + D) x r x 2 B, 6.4 MB at rank 64 for SmolLM2). Its manifest records the
rank and the relative Frobenius error (``low_rank.relative_error``); ``generate``/``chat``/``serve --head
DIR`` load both forms. Check the error before shipping: Adam's updates need not be low-rank.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mlx_sdm.commands.arguments import CommandParser, positive_int

DEFAULT_RANK = 64

EXAMPLES = """
example:
  mlx-sdm compress-head --head sdm-head --out weights/NAME --rank 64
"""


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="mlx-sdm compress-head", description="Store a fine-tuned SDM-network head as its low-rank change from the model's own head.",
                                epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--head", required=True, help="the full head folder mlx-sdm finetune wrote")
    p.add_argument("--out", required=True, help="folder for the compressed head (written atomically)")
    p.add_argument("--rank", type=positive_int, default=DEFAULT_RANK, help="rank r of U @ V, at least 1 (default %(default)s)")
    p.add_argument("--model", default=None,
                   help="the base model (default: the one the head's manifest names; the head must fit it)")
    p.add_argument("--force", action="store_true", help="replace a head already in --out")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mlx_sdm.atomic import check_output_folder
    from mlx_sdm.network.heads import HEAD_MANIFEST_FILE, LOW_RANK_WEIGHTS_FILE, compress_head

    check_output_folder(args.out, force=args.force, artifact_files=(HEAD_MANIFEST_FILE,))  # before loading a model
    model = None
    if args.model is not None:
        from mlx_sdm.lm.loading import load_model

        model = load_model(args.model).model
    manifest = compress_head(args.head, args.out, args.rank, model=model, force=args.force)
    info = manifest["low_rank"]
    size = (Path(args.out) / LOW_RANK_WEIGHTS_FILE).stat().st_size
    print(f"wrote {args.out}: rank {info['rank']}, {size / 1e6:.1f} MB, relative error {info['relative_error']:.4g} of the "
          f"change (truncation alone {info['truncation_error']:.4g}), {info['relative_error_of_head']:.4g} of the head")
    return 0
