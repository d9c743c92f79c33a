"""``mlx-sdm verify``: run a saved SDM estimator over JSONL rows and write one verdict per row."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from mlx_sdm.atomic import atomic_write_text
from mlx_sdm.calibration.data import LabelledSet, read_embedding_jsonl
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.commands.arguments import CommandParser, non_negative_int
from mlx_sdm.network.verdict import VerdictStatus

DEFAULT_EXPLAIN = 0
OUTPUT_FIELDS = ("id", "prediction", "p_lower", "admitted", "q", "d", "q_bin", "reason")

EPILOG = """
Input rows: {"id": str, "embedding": [float, ...]} ("label" is allowed and ignored), or, for a
document verifier, {"id": str, "prompt": str, "completion": str} (force-decoded by its model).
Output rows, one per input, in order:
  {"id", "prediction", "p_lower" (null when rejected), "admitted", "q", "d", "q_bin", "reason"}
reason is null when admitted, else "out_of_distribution" (q = 0 or d = 0),
"index_flipped" (an sdm/rescaler/lower-bound argmax disagreed with the prediction) or
"below_threshold" (q~_lower below q~_min or p_lower below the class threshold psi).
--explain K adds "exemplars": the K nearest training exemplars (id, label, prediction, distance, text).

example:
  mlx-sdm verify --estimator my-estimator new.jsonl --out verdicts.jsonl --explain 3
"""


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="mlx-sdm verify", description="Calibrated verdicts for embedding rows or (prompt, completion) rows.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--estimator", required=True, metavar="DIR", help="folder written by `mlx-sdm train`, or a .sdmkitmodel package")
    p.add_argument("input", metavar="IN.jsonl", help="rows to verify")
    p.add_argument("--out", required=True, metavar="OUT.jsonl", help="verdicts, one JSON object per line (atomic write)")
    p.add_argument("--explain", type=non_negative_int, default=DEFAULT_EXPLAIN, metavar="K",
                   help="add the K nearest exemplars, 0 or more (default %(default)s)")
    # text rows {"prompt", "completion"} with a document verifier (mlx_sdm.network.verifier)
    p.add_argument("--model", default=None, help="text rows: LM to force-decode with (default: the verifier's own)")
    p.add_argument("--quantized", action="store_true", help="text rows: keep the GGUF's 4-bit weights")
    return p


def verify_rows(estimator: SDMEstimator, rows: LabelledSet, explain: int = 0) -> list[dict]:
    """One output dict per input row (used by this command and by the text-row path)."""
    out = []
    for rid, verdict in zip(rows.ids, estimator.predict(rows.embeddings, explain=explain)):
        row = {"id": rid, "prediction": verdict.prediction, "p_lower": verdict.p_lower, "admitted": verdict.admitted,
               "q": verdict.q, "d": verdict.d, "q_bin": verdict.q_bin, "reason": verdict.reason}
        if verdict.region_alpha is not None:  # the nested kind
            row.update(region_alpha=verdict.region_alpha, region_alpha_lower=verdict.region_alpha_lower)
        if explain > 0:
            row["exemplars"] = [e.to_dict() for e in verdict.exemplars]
        out.append(row)
    return out


def write_jsonl(path: str, rows: list[dict]) -> None:
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mlx_sdm.atomic import check_output_file
    from mlx_sdm.usecases.verifiers import is_verifier_dir, verify_text_rows

    check_output_file(args.out)  # before any model work: a folder or an unwritable path is one line

    if is_verifier_dir(args.estimator):  # a document verifier: text rows, force-decoded with its model
        out = verify_text_rows(args.estimator, args.input, model=args.model, quantized=args.quantized,
                               explain=args.explain)
        write_jsonl(args.out, out)
        counts = Counter(r["status"] for r in out)
        states = ", ".join(f"{counts[s.value]} {s.value.replace('_', ' ')}" for s in VerdictStatus if counts[s.value])
        print(f"{len(out)} rows judged: {states}; wrote {args.out}")
        return 0
    est = SDMEstimator.load(args.estimator)
    rows = read_embedding_jsonl(args.input, require_label=False, expected_dim=est.input_dim,
                                expected_by=f"the estimator {args.estimator}")
    out = verify_rows(est, rows, args.explain)
    write_jsonl(args.out, out)
    admitted = sum(r["admitted"] for r in out)
    print(f"{len(out)} rows read, {admitted} admitted at p_lower >= alpha' ({admitted / max(len(out), 1):.1%}); "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
