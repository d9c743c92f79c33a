"""``mlx-sdm eval-monitor``: score logged sessions per monitor (TPS, AUROC, AUARC) in one table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mlx_sdm.commands.arguments import CommandParser
from mlx_sdm.errors import MlxSdmError

DEFAULT_WEIGHTS = "linear-front"
DEFAULT_EMBEDDER = "none"
DEFAULT_PLOT_SESSIONS = 30
DEFAULT_FOLDS = 5
DEFAULT_BOOTSTRAP = 1000
DEFAULT_SEED = 0
DEFAULT_CENSOR_BUDGET = 2
DEFAULT_PAUSE_RATE = 0.15  # the shipped policy's rate (mlx_sdm/datasets/fused_monitor.json)
#: ``mlx-sdm eval-monitor shipped-corpus`` reads the session corpus shipped with the package
#: (scripts/session_corpus.py, 400 SmolLM2-135M sessions of the product as it ships).
SHIPPED_CORPUS_NAME = "shipped-corpus"
CLI_EMBEDDERS = ("minilm", "none")  # the chat model's hidden states are used online, by the session engine


def build_parser() -> argparse.ArgumentParser:
    from mlx_sdm.monitor.forecast.scoring import SCHEDULES
    from mlx_sdm.monitor.online.tracer import TracerConfig

    ref = TracerConfig()
    parser = CommandParser(
        prog="mlx-sdm eval-monitor",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Score logged sessions with three monitors and print one table: the AUQ cumulative confidence P_t, "
            "the TRACER prefix risk inverted to a success probability exp(-R_t), and the verifier's p_lower.\n\n"
            "Columns: TPS_log / TPS_brier = trajectory proper score (mean over sessions, larger is better, <= 0; "
            "censored sessions use the censored score, exact when the session logs pi); AUROC = how well the "
            "monitor ranks failed sessions above successful ones (failure positive, 0.5 = chance); AUARC = area "
            "under the accuracy-rejection curve over coverage 0.05..1 (at most 0.95; needs >= 10 labelled sessions).\n\n"
            "Then, when the sessions carry enough outcomes (>= --folds of each), the HELD-OUT table: every monitor "
            "is fitted by k-fold cross-fitting by session (TRACER's weights, the verdict monitor's rates, one weighted "
            "Platt map per monitor, the fusion of AUQ + TRACER + verifier verdicts by stacked Platt) and scored only "
            "on the fold it never saw, against the base rate, with 95% bootstrap intervals over sessions: TPS_log, "
            "TPS_brier, censored TPS_log (sessions cut at --censor-budget agent steps), AUROC, AUARC, T-ECE, and the "
            "paired TPS_log gain over the base rate (a monitor beats the base rate when that interval is above 0)."
        ),
        epilog=(
            "Inputs: a session JSONL as exported by the chat store (mlx-sdm chat --export FILE.jsonl), or a tau2-bench\n"
            "Results JSON (detected by its 'simulations' list; success = reward 1.0).\n\n"
            "examples:\n"
            "  mlx-sdm eval-monitor shipped-corpus --plot monitors.png   # the shipped 400-session corpus\n"
            "  mlx-sdm eval-monitor sessions.jsonl\n"
            "  mlx-sdm eval-monitor sessions.jsonl --plot monitors.png\n"
            "  mlx-sdm eval-monitor airline_results.json --embedder minilm --json\n"
        ),
    )
    parser.add_argument("sessions", nargs="+", help="session JSONL file(s) (.gz too) and/or tau2-bench Results JSON "
                        f"file(s); '{SHIPPED_CORPUS_NAME}' = the session corpus shipped with mlx-sdm")
    parser.add_argument("--weights", default=DEFAULT_WEIGHTS, choices=SCHEDULES, help="TPS step-weight schedule (default %(default)s)")
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER, choices=CLI_EMBEDDERS,
                        help="sentence embedder for TRACER when it must be recomputed: minilm (all-MiniLM-L6-v2) "
                             "or none (Jaccard-only repetition, no coherence gaps). Default %(default)s")
    parser.add_argument("--recompute-tracer", action="store_true",
                        help="recompute TRACER even where the sessions logged it (e.g. with another embedder)")
    parser.add_argument("--alpha", type=float, default=ref.alpha, help="TRACER repetition weight (default %(default)s)")
    parser.add_argument("--beta", type=float, default=ref.beta, help="TRACER action-observation gap weight (default %(default)s)")
    parser.add_argument("--gamma", type=float, default=ref.gamma, help="TRACER user gap weight (default %(default)s)")
    parser.add_argument("--k", type=float, default=ref.k, help="TRACER tail fraction (default %(default)s)")
    parser.add_argument("--w", type=float, default=ref.w, help="TRACER weight of the max (default %(default)s)")
    parser.add_argument("--plot", metavar="FILE.png", help="plot to this PNG: held-out reliability and forecast over "
                        "turns (or, without a held-out table, the logged risk and confidence over turns)")
    parser.add_argument("--folds", type=int, default=DEFAULT_FOLDS, help="cross-fitting folds, by session (default %(default)s)")
    parser.add_argument("--bootstrap", type=int, default=DEFAULT_BOOTSTRAP, help="bootstrap resamples of sessions (default %(default)s)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="bootstrap seed (default %(default)s)")
    parser.add_argument("--censor-budget", type=int, default=DEFAULT_CENSOR_BUDGET,
                        help="agent-step budget of the censored TPS (default %(default)s)")
    parser.add_argument("--no-heldout", action="store_true", help="print only the table of the forecasts as logged")
    parser.add_argument("--plot-sessions", type=int, default=DEFAULT_PLOT_SESSIONS, help="sessions drawn in the plot (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the table as one JSON object")
    _add_product_arguments(parser)
    return parser


def _add_product_arguments(parser: argparse.ArgumentParser) -> None:
    """The pause policy's rate and the provenance check."""
    parser.add_argument("--pause-rate", type=float, default=DEFAULT_PAUSE_RATE,
                        help="with the held-out table, also choose the chat's pause threshold on the fused forecast "
                             "at this share of turns and measure it cross-fitted (default %(default)s; 0 = skip)")
    parser.add_argument("--mix-provenance", action="store_true",
                        help="score sessions made by different products (model, verifier, head, embedder, version) "
                             "together; by default such an input is refused")


def load_sessions(paths: list[str]):
    from mlx_sdm.monitor.evaluation.tau2 import is_tau2_results, read_tau2_results
    from mlx_sdm.monitor.session_file.reader import read_sessions_jsonl

    sessions = []
    for path in paths:
        p = Path(path)
        if path == SHIPPED_CORPUS_NAME and not p.exists():
            p = shipped_session_corpus()
        is_tau2 = False
        if p.suffix.lower() == ".json" and p.is_file():
            with open(p, encoding="utf-8") as handle:
                head = handle.read(1)
            if head == "{":
                try:
                    is_tau2 = is_tau2_results(json.loads(p.read_text(encoding="utf-8")))
                except json.JSONDecodeError:
                    is_tau2 = False
        sessions.extend(read_tau2_results(p) if is_tau2 else read_sessions_jsonl(p))
    return sessions


def shipped_session_corpus() -> Path:
    """The session corpus in the package's datasets (``mlx_sdm/datasets/session_corpus.jsonl.gz``)."""
    import mlx_sdm.datasets

    return Path(mlx_sdm.datasets.__file__).resolve().parent / "session_corpus.jsonl.gz"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mlx_sdm.monitor.online.embedders import make_embedder
    from mlx_sdm.monitor.evaluation.evaluate import evaluate_sessions, format_table, plot_series
    from mlx_sdm.monitor.evaluation.heldout import format_heldout, heldout_report
    from mlx_sdm.monitor.online.tracer import TracerConfig

    try:
        if args.plot:
            from mlx_sdm.atomic import check_output_file

            check_output_file(args.plot)  # refused now, not after the evaluation
        sessions = load_sessions(args.sessions)
        if not sessions:
            print("mlx-sdm eval-monitor: no sessions in the input", file=sys.stderr)
            return 1
        groups = checked_provenance(sessions, args.mix_provenance)
        config = TracerConfig(alpha=args.alpha, beta=args.beta, gamma=args.gamma, k=args.k, w=args.w)
        embedder = make_embedder(args.embedder)
        report = evaluate_sessions(sessions, tracer_config=config, embedder=embedder, weights=args.weights,
                                   recompute_tracer=args.recompute_tracer)
        heldout, heldout_note = None, "skipped (--no-heldout)"
        if not args.no_heldout:
            try:
                heldout = heldout_report(sessions, folds=args.folds, n_boot=args.bootstrap, seed=args.seed,
                                         weights=args.weights, censor_budget=args.censor_budget)
            except ValueError as exc:
                heldout_note = f"skipped: {exc}"
        choice = pause_choice(heldout, args)
        if args.json:
            print(json.dumps(json_report(report, heldout, heldout_note, choice, groups), indent=2))
        else:
            print(provenance_lines(groups))
            print("As logged (no fitting):")
            print(format_table(report))
            print()
            print(format_heldout(heldout) if heldout is not None else f"Held-out table {heldout_note}")
            if choice is not None:
                from mlx_sdm.monitor.evaluation.policy_choice import format_choice

                print()
                print(format_choice(choice))
        if args.plot and heldout is not None:
            from mlx_sdm.monitor.evaluation.plots import plot_heldout

            plot_heldout(heldout, args.plot)
            print(f"plot written to {args.plot}", file=sys.stderr)
        elif args.plot:
            plot_series(report, sessions, args.plot, args.plot_sessions)
            print(f"plot written to {args.plot}", file=sys.stderr)
    except (MlxSdmError, ValueError) as exc:
        print(f"mlx-sdm eval-monitor: {exc}", file=sys.stderr)
        return 2
    return 0


def json_report(report, heldout, heldout_note: str, choice, groups) -> dict:
    """What ``--json`` prints: the table as logged, the held-out table, the pause policy, the provenance."""
    from mlx_sdm.monitor.evaluation.heldout import heldout_to_dict

    return {
        "sessions": report.n_sessions, "labelled": report.n_labelled, "censored": report.censored,
        "weights": report.weights, "excluded_from_tps": report.excluded_from_tps,
        "tracer_embedder": report.tracer_embedder, "tracer_missing_logprobs": report.tracer_missing_logprobs,
        "monitors": [{"monitor": r.monitor, "sessions": r.sessions, "tps_sessions": r.tps_sessions,
                      "tps_log": _num(r.tps_log), "tps_brier": _num(r.tps_brier), "auroc": _num(r.auroc),
                      "auarc": _num(r.auarc), "notes": r.notes} for r in report.rows],
        "heldout": heldout_to_dict(heldout) if heldout is not None else {"note": heldout_note},
        "pause_policy": None if choice is None else {"threshold": choice.threshold,
                                                     "pause_rate": choice.pause_rate, **choice.measured_dict()},
        "provenance": [{"sessions": g.sessions, "provenance": g.provenance.to_dict() if g.provenance else None}
                       for g in groups],
    }


def pause_choice(heldout, args):
    """The pause policy chosen on the held-out report's sessions (None without a held-out table or with
    --pause-rate 0)."""
    if heldout is None or not args.pause_rate:
        return None
    from mlx_sdm.monitor.evaluation.policy_choice import choose_policy

    return choose_policy(heldout.signals, args.pause_rate, folds=args.folds, n_boot=args.bootstrap, seed=args.seed)


def checked_provenance(sessions: list, mix: bool) -> list:
    """The input's provenance groups; more than one raises MixedProvenanceError unless ``mix``."""
    from mlx_sdm.monitor.session_file.provenance import check_single_provenance, provenance_groups

    groups = provenance_groups(sessions)
    if not mix:
        check_single_provenance(groups)
    return groups


def provenance_lines(groups: list) -> str:
    from mlx_sdm.monitor.session_file.provenance import describe

    lines = ["Made by" + (" (several products, --mix-provenance):" if len(groups) > 1 else ":")]
    lines += [f"  {g.sessions} sessions: {describe(g.provenance)}" for g in groups]
    return "\n".join(lines) + "\n"


def _num(x: float) -> float | None:
    return None if x != x else round(x, 6)


if __name__ == "__main__":
    sys.exit(main())
