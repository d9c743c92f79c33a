"""``mlx-sdm generate "PROMPT"``: answer one prompt with the local LM, then print the verifier's verdict in its one
short line (verified / not verified / out of scope, and what to do with the answer); with ``--explain`` the evidence
under it: why in full, p_lower, q, d and the nearest training exemplars (docs/method.md § 15.7), then the session
monitor's reading of the answer (AUQ level, the fused forecast p_t as the chat's monitor panel shows it, and the
sentence saying what moved it; docs/monitoring.md). An escalation is printed with or without it.
One :class:`~mlx_sdm.turn.pipeline.TurnPipeline` turn, without a store, read by a fresh session monitor
configured as the chat's (so a looping answer carries the chat's warning here too)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import warnings

from mlx_sdm.commands.arguments import MODEL_HELP, NO_SECOND_LOOK_HELP, CommandParser, non_negative_int, positive_int
from mlx_sdm.monitor.online.auq_escalation import EscalationAction
from mlx_sdm.network.verdict import VerdictStatus
from mlx_sdm.network.verdict_words import verdict_json, verdict_report
from mlx_sdm.turn.escalation import monitor_payload

DEFAULT_MAX_TOKENS = 128
DEFAULT_EXPLAIN = 3

EPILOG = """
The answer streams as it is generated; the verifier then reads the final hidden states captured
during that same pass ([mean(h); h_delimiter], no second forward pass). For a verifier built on JSON
answers the answer ends at the JSON unit, so the verdict covers exactly the text printed. It prints the
verdict's one short line ("verdict: Verified: answers like this are right at least 95 % of the time."), the
same line the chat, the server's "reason" and the export say; with --explain, the evidence under it:
  verdict   VERIFIED: the verifier predicts "acceptable" (class 1) AND admits it (p_lower >= alpha' = 0.95,
            Eq. 28); NOT VERIFIED: the question is in scope but the verifier cannot vouch for the answer
            (below alpha', similar answers judged differently, or likely wrong); OUT OF SCOPE: the question
            is unlike anything the verifier was built on (it says what it covers instead)
  p_lower   the calibrated lower probability of the predicted class (only when admitted)
  q, d      similarity (nearest training exemplars that agree) and distance quantile
  exemplars the nearest training documents with their labels
  monitor   the session monitor's reading, as the chat's monitor panel shows it for a first turn: AUQ level,
            cumulative confidence P, TRACER risk R, the fused forecast "ok N%" and what moved it most
An escalation (a degenerate, looping answer; HIGH uncertainty) is printed as the chat says it, with or
without --explain.
--json prints one object ("head": the SDM-network head folder decoded with, or null); its "verdict" carries "status" (verified, not_verified, out_of_scope; no_verifier without one), "badge",
"line" (the short line) and "explanation" (the evidence's sentence) beside the numbers (null when no verifier fits the model: see "unverifiable_reason");
its "monitor" carries "level", "action", "cumulative_confidence", "tracer_risk", "fused_p", "fused_message"
and "escalation" (the message, or null).

examples:
  mlx-sdm generate "Check the following document for hallucinations and/or factual inaccuracies. \\
      Respond using the following JSON: {\\"correctness\\": bool}. DOCUMENT: The Eiffel Tower is in Rome."
  mlx-sdm generate "What is the capital of France?" --verifier none
  mlx-sdm generate "..." --json --explain 5
  mlx-sdm generate --list-tasks                      # what the verifier covers, with example prompts
  mlx-sdm generate "..." --model path/to/mlx_model --verifier my-verifier --head my-head
"""


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="mlx-sdm generate", description="Answer one prompt, then print its verdict.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prompt", nargs="?", default=None, help="the user message (rendered with the model's chat template)")
    p.add_argument("--list-tasks", action="store_true",
                   help="print the tasks the verifier covers, with an example prompt for each, and exit")
    p.add_argument("--model", default=None, help=MODEL_HELP)
    p.add_argument("--quantized", action="store_true", help="keep the GGUF's 4-bit weights (default: float32, faster on CPU)")
    p.add_argument("--verifier", default=None, metavar="DIR|none",
                   help="document verifier folder; default: the shipped one for the model; 'none' to skip verification")
    p.add_argument("--head", default=None, metavar="DIR|none",
                   help="decode from the joint negative+positive heads of an SDM network (made by mlx-sdm finetune, "
                        "full or compressed); default: the head shipped for the embedded model, when there is one "
                        "(kept whatever --verifier says: it belongs to the model); 'none' turns it off")
    p.add_argument("--max-tokens", type=positive_int, default=DEFAULT_MAX_TOKENS,
                   help="answer length limit, at least 1 (default %(default)s)")
    p.add_argument("--system", default=None, help="system prompt for every turn (default: a task question gets its task's, the one the verifier was "
                        "built with; any other question gets none from mlx-sdm, as plain mlx-lm)")
    p.add_argument("--explain", type=non_negative_int, default=None, metavar="K",
                   help="print the evidence under the verdict's line (why, the numbers, the monitor's reading) with the "
                        f"K nearest exemplars, 0 or more (without it: the line alone; --json keeps {DEFAULT_EXPLAIN})")
    p.add_argument("--no-second-look", action="store_true", help=NO_SECOND_LOOK_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return p


def format_monitor(reading, escalation=None) -> str:
    """The monitor's reading as the chat's panel shows it (AUQ, P, R, ok%) and the fused forecast's sentence;
    then the escalation's message when the turn escalated."""
    if reading is None:
        return "monitor: no reading"
    def num(x, decimals):
        return "—" if x is None else f"{float(x):.{decimals}f}"

    ok = "—" if reading.fused_p is None else f"{100 * float(reading.fused_p):.0f}%"
    lines = [f"monitor: AUQ {reading.level.value.upper()} · P {num(reading.cumulative_confidence, 3)} · "
             f"R {num(reading.tracer_risk, 2)} · ok {ok}"]
    if reading.fused is not None and reading.fused.message:
        lines.append(f"ok {ok}: {reading.fused.message}")
    if escalation is not None and escalation.escalated and escalation.message:
        lines.append(escalation.message)
    return "\n".join(lines)


def _payload(args, components, outcome) -> dict:
    verdict = outcome.verdict
    unverified = verdict.status is VerdictStatus.NO_VERIFIER
    return {
        "prompt": args.prompt,
        "answer": outcome.text,
        "judged_text": outcome.judged_text,
        "unverified_tail": outcome.unverified_tail,
        "model": components.lm.name,
        "verifier": components.verifier_path if components.verifier is not None else None,
        "head": components.head_path if outcome.decoded_with_head else None,
        "unverifiable_reason": verdict.why if unverified else None,
        "prompt_note": outcome.prompt_note or None,
        "status": verdict.status.value,
        "verdict": None if unverified else verdict_json(verdict),
        "monitor": monitor_payload(outcome.monitor, outcome.escalation),
        "generation": {"tokens": outcome.token_ids, "finish_reason": outcome.finish_reason,
                       "prompt_tokens": outcome.prompt_tokens,
                       "truncated_prompt_tokens": outcome.truncated_prompt_tokens,
                       "generation_s": outcome.generation_s, "first_token_s": outcome.first_token_s},
    }


def _print_report(components, outcome, *, explain: bool = False) -> None:
    """The verdict's line; with ``explain`` the evidence and the monitor's reading; an escalation always (what
    departs from the usual turn is said, the usual is not)."""
    print()
    print("-" * 60)
    if outcome.prompt_note:
        print(f"note: {outcome.prompt_note}")
    print(verdict_report(outcome.verdict, explain=explain))
    if outcome.verdict.judged:
        if outcome.unverified_tail.strip():
            print(f"note: the verdict covers {outcome.judged_text.strip()!r} only; the rest was not checked")
    escalated = outcome.escalation is not None and outcome.escalation.escalated and outcome.escalation.message
    if explain:
        print(format_monitor(outcome.monitor, outcome.escalation))
    elif escalated and outcome.escalation.action is not EscalationAction.PROCEED_WITH_LOG:
        print(outcome.escalation.message)
    if explain:
        if outcome.decoded_with_head:
            print(f"decoded with the SDM-network head {components.head_path} (the question is one of its tasks)")
        rate = len(outcome.tokens) / outcome.generation_s if outcome.generation_s else 0.0
        print(f"({len(outcome.tokens)} tokens, {rate:.1f} tokens/s, finish: {outcome.finish_reason})")


def list_tasks(verifier: str | None, command: str = "generate", model: str | None = None) -> int:
    """``--list-tasks`` (``generate``'s and ``chat``'s): a fine-tuned folder's tasks (``--model DIR``) with its
    run's numbers, else what the verifier (default: the shipped one) covers, read from its verifier.json."""
    from mlx_sdm.usecases.loading import model_folder_for

    folder = model_folder_for(model) if verifier is None else None  # --model DIR, or the shipped default folder
    if folder is not None:
        return list_folder_tasks(str(folder), command, named=model is not None)
    from pathlib import Path

    from mlx_sdm.usecases.loading import verification_off
    from mlx_sdm.network.coverage import read_coverage
    from mlx_sdm.resources import default_verifier_dir, resolve_artifact

    if verification_off(verifier):
        print(f"mlx-sdm {command}: --verifier {verifier} turns verification off, so there are no tasks to list; "
              "drop --verifier to list the default verifier's tasks, or pass --verifier DIR", file=sys.stderr)
        return 2
    folder = resolve_artifact(verifier) if verifier else default_verifier_dir()
    try:
        manifest = json.loads((Path(folder) / "verifier.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"mlx-sdm {command}: {folder}: cannot read verifier.json ({exc}); pass --verifier DIR", file=sys.stderr)
        return 1
    coverage = read_coverage(manifest)
    print(f"verifier {folder}: {coverage.sentence()}")
    for task in coverage.tasks:
        print(f"- {task.name}: {task.description}")
        if task.example_prompt:
            print(f"  try: mlx-sdm generate {json.dumps(task.example_prompt)}")
    return 0


def list_folder_tasks(folder: str, command: str, named: bool = True) -> int:
    """Each task of a fine-tuned model folder: its held-out task accuracy and the share of its held-out answers
    shown as verified (its run's report), and a prompt to try (``named``: the folder was given with ``--model``;
    else it is the shipped default, loaded with no flag); then the tasks of the verifier it extends."""
    from pathlib import Path

    from mlx_sdm.errors import ArtifactError
    from mlx_sdm.network.coverage import read_coverage
    from mlx_sdm.resources import resolve_artifact
    from mlx_sdm.usecases.finetune_advice import coverage_hint
    from mlx_sdm.usecases.model_folder import read_model_folder
    from mlx_sdm.usecases.model_growth import extended_base

    try:
        manifest = read_model_folder(folder)
    except ArtifactError as exc:
        print(f"mlx-sdm {command}: {exc}", file=sys.stderr)
        return 1
    flag = f" --model {folder}" if named else ""
    print(f"{'model' if named else 'the default model,'} {folder}: {len(manifest.entries)} fine-tuned task(s) on "
          f"{manifest.base_model or 'the embedded model'}")
    for entry in manifest.entries:
        accuracy = "-" if entry.held_out_accuracy is None else f"{entry.held_out_accuracy:.2f}"
        verified = "-" if entry.verified_share is None else f"{entry.verified_share:.0%}"
        print(f"- {entry.name}: held-out accuracy {accuracy}, verified {verified} of its held-out answers"
              f"{'' if entry.verifier else ' (no verifier: its answers go unverified)'}")
        hint = coverage_hint(entry.held_out_accuracy, entry.verified_share) if entry.verifier else None
        if hint:
            print(f"  verifies little: {hint}")
        print(f"  try: mlx-sdm {command}{flag} {json.dumps(entry.instruction.instruction + ' ...')}")
    base = extended_base(Path(folder))
    if base is not None:
        names = {e.name for e in manifest.entries}
        coverage = read_coverage(json.loads((resolve_artifact(base) / "verifier.json").read_text(encoding="utf-8")))
        others = [t for t in coverage.tasks if t.name not in names]
        if others:
            print(f"answered by the model without adapters and judged by the verifier {base}, as without this folder:")
        for task in others:
            print(f"- {task.name}: {task.description}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list_tasks:
        return list_tasks(args.verifier, model=args.model)
    if args.prompt is None or not args.prompt.strip():
        print("mlx-sdm generate: the prompt is empty; give the question to answer, e.g. mlx-sdm generate \"What is 2+2?\"",
              file=sys.stderr)
        return 2
    stop = threading.Event()
    try:
        from mlx_sdm.usecases.loading import load_components
        from mlx_sdm.usecases.prefill_progress import PrefillBar
        from mlx_sdm.lm.pieces import TokenPiece
        from mlx_sdm.turn.monitoring import MonitorConfig, SessionMonitor
        from mlx_sdm.turn.pipeline import TurnPipeline
        from mlx_sdm.turn.values import CheckingAnswers, TurnOptions, TurnRequest

        components = load_components(args.model, verifier=args.verifier, head=args.head, quantized=args.quantized)
        # the monitor as the chat configures it (P(True) reuses the answer's KV cache: the question alone is
        # prefilled); no reflection is generated, so what is printed is the answer alone
        options = TurnOptions(max_tokens=args.max_tokens, system_prompt=args.system, explain=DEFAULT_EXPLAIN if args.explain is None else args.explain,
                              enable_p_true=True, reuse_cache=False, generate_reflection=False,
                              second_look=not args.no_second_look)
        monitor = SessionMonitor("generate", MonitorConfig(), embedder=components.embedder)
        show_prefill_progress = PrefillBar()
        with warnings.catch_warnings():  # the left-truncation notice as one plain line, not a raw UserWarning
            warnings.simplefilter("always", UserWarning)
            warnings.showwarning = lambda message, *_, **__: print(f"mlx-sdm generate: note: {message}", file=sys.stderr)
            request = TurnRequest([{"role": "user", "content": args.prompt}], options)
            for outcome in TurnPipeline(components).stream(request, stop=stop, monitor=monitor,
                                                                  on_prefill=show_prefill_progress):
                if isinstance(outcome, TokenPiece) and outcome.text and not args.json:
                    sys.stdout.write(outcome.text)
                    sys.stdout.flush()
                elif isinstance(outcome, CheckingAnswers) and not args.json:
                    print(f"\nmlx-sdm generate: checking {outcome.k} more answers to the same question (the second "
                          "look; --no-second-look skips it)", file=sys.stderr, flush=True)
        show_prefill_progress.close()
    except KeyboardInterrupt:
        stop.set()
        print("\nmlx-sdm generate: interrupted", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(_payload(args, components, outcome)))
    else:
        _print_report(components, outcome, explain=args.explain is not None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
