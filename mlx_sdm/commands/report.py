"""``mlx-sdm report``: the paper's Table 1 layout for a saved estimator on labelled rows."""

from __future__ import annotations

import argparse
import sys

from mlx_sdm.calibration.data import read_embedding_jsonl
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.evaluation import evaluate, format_table, format_training, plot
from mlx_sdm.errors import MlxSdmError

EPILOG = """
Prints, for the labelled input rows:
  * class-conditional (y=c) and prediction-conditional (ŷ=c) accuracy of the admitted rows and
    the admitted proportion (admitted in the stratum / all rows), and the marginal, for
    no-reject, the plain softmax >= alpha' baseline and the SDM estimator's p_lower;
  * whether every admitted stratum reaches alpha' (the estimator's promise; rejecting
    everything also keeps it);
  * training accuracy, the epoch chosen in each iteration, and a logistic-regression reference.
--plot FILE.png draws a reliability diagram and the admitted accuracy by q~ bin.

example:
  mlx-sdm report --estimator my-estimator test.jsonl --plot report.png
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mlx-sdm report", description="Table-1 calibration report on labelled rows.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--estimator", required=True, metavar="DIR", help="folder written by `mlx-sdm train`")
    p.add_argument("input", metavar="IN.jsonl", help="labelled rows {id, label, embedding}")
    p.add_argument("--plot", metavar="FILE.png", help="write the reliability diagram and q~-bin accuracy here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        est = SDMEstimator.load(args.estimator)
        data = read_embedding_jsonl(args.input, require_label=True, expected_dim=est.input_dim)
        if int(data.labels.max()) >= est.num_classes:
            line = int((data.labels >= est.num_classes).argmax()) + 1
            raise MlxSdmError(f"{args.input}:{line}: field 'label': {int(data.labels[line - 1])} is not a class of this "
                              f"estimator (0..{est.num_classes - 1})")
        ev = evaluate(est, data, name=args.input)
        print(format_table(ev))
        print()
        print(format_training(est.manifest))
        if args.plot:
            plot([ev], args.plot)
            print(f"wrote {args.plot}")
    except MlxSdmError as exc:
        print(f"mlx-sdm report: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
