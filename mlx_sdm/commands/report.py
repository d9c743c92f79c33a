"""``mlx-sdm report``: the paper's Table 1 layout for a saved estimator on labelled rows."""

from __future__ import annotations

import argparse
import sys

from mlx_sdm.calibration.data import LabelledSet, read_embedding_jsonl
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.evaluation import add_estimator_row, evaluate, format_table, format_training, plot
from mlx_sdm.commands.arguments import CommandParser
from mlx_sdm.errors import MlxSdmError

EPILOG = """
Prints, for the labelled input rows:
  * class-conditional (y=c) and prediction-conditional (ŷ=c) accuracy of the admitted rows and
    the admitted proportion (admitted in the stratum / all rows), and the marginal, for
    no-reject, the plain softmax >= alpha' baseline and the SDM estimator's p_lower (one row per
    --estimator: give a v1 and a v2 estimator to compare the two kinds in one table);
  * for a nested estimator (or a .sdmkitmodel): admission at every alpha of its ladder, by the
    DKW-lower and the centroid region alpha (with --plot also FILE-ladder-N.png);
  * whether every admitted stratum reaches alpha' (the estimator's promise; rejecting
    everything also keeps it);
  * training accuracy, the epoch chosen in each iteration, and a logistic-regression reference.
--plot FILE.png draws a reliability diagram and the admitted accuracy by q~ bin.

examples:
  mlx-sdm report --estimator my-estimator test.jsonl --plot report.png
  mlx-sdm report --estimator est-v1 --estimator est-v2 test.jsonl     # both estimator kinds
"""


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="mlx-sdm report", description="Table-1 calibration report on labelled rows.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--estimator", required=True, metavar="DIR", action="append",
                   help="folder written by `mlx-sdm train` or a .sdmkitmodel package (repeat to compare estimators on the "
                        "same rows)")
    p.add_argument("input", metavar="IN.jsonl",
                   help="labelled rows {id, label, embedding}, or {prompt, completion, label} for a document verifier")
    p.add_argument("--plot", metavar="FILE.png", help="write the reliability diagram and q~-bin accuracy here")
    # a document verifier (made by `mlx-sdm train` on text rows) reads labelled {"prompt", "completion", "label"} rows
    p.add_argument("--model", default=None, help="text rows: LM to force-decode with (default: the verifier's own)")
    p.add_argument("--quantized", action="store_true", help="text rows: keep the GGUF's 4-bit weights")
    return p


def _load(args: argparse.Namespace) -> tuple[list[SDMEstimator], LabelledSet]:
    """The estimators and the labelled rows: embedding rows for estimator folders; text rows,
    force-decoded by the verifier's model, for document verifiers (``verifier.json``)."""
    from mlx_sdm.usecases.verifiers import is_verifier_dir, labelled_text_rows

    kinds = {is_verifier_dir(path) for path in args.estimator}
    if kinds == {True}:
        if len(args.estimator) > 1:
            raise MlxSdmError("compare document verifiers one at a time (one --estimator DIR with text rows)")
        verifier, data = labelled_text_rows(args.estimator[0], args.input, model=args.model, quantized=args.quantized)
        return [verifier.estimator], data
    if len(kinds) > 1:
        raise MlxSdmError("--estimator mixes document verifiers and embedding estimators; compare like with like")
    estimators = [SDMEstimator.load(path) for path in args.estimator]
    data = read_embedding_jsonl(args.input, require_label=True, expected_dim=estimators[0].input_dim,
                                expected_by=f"the estimator {args.estimator[0]}")
    return estimators, data


def _nested_ladders(args: argparse.Namespace, estimators: list[SDMEstimator], data: LabelledSet) -> None:
    """For each estimator of the nested kind: admission at every alpha of its ladder (table), and
    with --plot the same as a plot beside it (FILE-ladder-N.png)."""
    from pathlib import Path

    from mlx_sdm.calibration.ladder_report import format_ladder, ladder_report, plot_ladder

    for n, (path, est) in enumerate(zip(args.estimator, estimators)):
        if est.nested is None:
            continue
        rep = ladder_report(est, data, name=f"{path} on {args.input}")
        print()
        print(format_ladder(rep))
        if args.plot:
            target = Path(args.plot)
            target = target.with_name(f"{target.stem}-ladder-{n}{target.suffix}")
            plot_ladder([rep], str(target))
            print(f"wrote {target}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.plot:
        from mlx_sdm.atomic import check_output_file

        check_output_file(args.plot)
    estimators, data = _load(args)
    est = estimators[0]
    if int(data.labels.max()) >= est.num_classes:
        line = int((data.labels >= est.num_classes).argmax()) + 1
        raise MlxSdmError(f"{args.input}:{line}: field 'label': {int(data.labels[line - 1])} is not a class of this "
                          f"estimator (0..{est.num_classes - 1})")
    for path, other in zip(args.estimator[1:], estimators[1:]):
        if other.input_dim != est.input_dim or other.num_classes != est.num_classes:
            raise MlxSdmError(f"{path}: input_dim {other.input_dim} / {other.num_classes} classes differ from "
                              f"{args.estimator[0]} ({est.input_dim} / {est.num_classes}); compare estimators "
                              f"trained on the same embeddings and classes")
    ev = evaluate(est, data, name=args.input)
    for other in estimators[1:]:
        add_estimator_row(ev, evaluate(other, data, name=args.input))
    print(format_table(ev))
    for path, other in zip(args.estimator, estimators):
        print()
        print(f"{path} (estimator kind {other.kind}):")
        print(format_training(other.manifest))
    if args.plot:
        plot([ev], args.plot)
        print(f"wrote {args.plot}")
    _nested_ladders(args, estimators, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
