"""``mlx-sdm export DIR --out OUT``: a fine-tuned folder (``mlx-sdm finetune --task``'s) as one plain mlx-lm model,
its adapters fused into the base (``usecases/export_model.py``), with ``--gguf`` a GGUF file beside it. The
verifier does not travel with it, and the command says so."""

from __future__ import annotations

import argparse

from mlx_sdm.commands.arguments import CommandParser

EXAMPLES = """
The exported folder loads anywhere mlx-lm runs, with no adapters and no mlx-sdm:
  mlx_lm.generate --model OUT --prompt "Is this e-mail junk? ..."
Its answers are not verified: the verifier reads the tuned model through mlx-sdm, so it stays in DIR
(mlx-sdm chat --model DIR / serve --model DIR give verified answers).

examples:
  mlx-sdm export junk-model --out junk-mlx
  mlx-sdm export junk-model --out junk-mlx --gguf       # also OUT/model.gguf (llama-family models)
  mlx-sdm export news-model --task bbc_topic --out topic-mlx
"""


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="mlx-sdm export", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
                      description="Write a fine-tuned folder as one plain mlx-lm model: its adapters fused into "
                                  "the base model (mlx-lm's fuse), and with --gguf a GGUF file too.")
    p.add_argument("folder", metavar="DIR", help="the folder `mlx-sdm finetune --task ... --out DIR` wrote")
    p.add_argument("--out", required=True, metavar="OUT", help="a new folder for the plain model")
    p.add_argument("--task", metavar="NAME", help="the task whose adapters to fuse, where the folder keeps one set a "
                                                  "task (default: the folder's only set)")
    p.add_argument("--gguf", action="store_true", help="also write OUT/model.gguf (mlx-lm's export: llama-family "
                                                       "models, unquantized)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mlx_sdm.usecases.export_model import NO_VERIFIER, export_folder

    result = export_folder(args.folder, args.out, task=args.task, gguf=args.gguf)
    print(f"wrote {result.out}: the base model with {result.adapters} fused in ({result.architecture}); load it with "
          f"mlx_lm.generate --model {result.out}")
    if result.gguf is not None:
        print(f"wrote {result.gguf} (GGUF)")
    print(f"note: {NO_VERIFIER}")
    return 0
