"""``mlx-sdm chat``: private, verified chat in the terminal.

In a terminal it opens the Textual UI (``tui/app.py``); with ``--plain``, or when stdin/stdout is
not a terminal (pipes, scripts), it is a line-mode chat with the same verdicts: each answer is
printed, then a verdict line and a monitor line.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from mlx_sdm.commands.arguments import MODEL_HELP, NO_SECOND_LOOK_HELP, CommandParser, positive_int, temperature
from mlx_sdm.errors import MlxSdmError

from mlx_sdm.lm.defaults import DEFAULT_MAX_TOKENS, MAX_TEMPERATURE

if TYPE_CHECKING:
    from mlx_sdm.network.verdict_words import TranscriptVerdicts
    from mlx_sdm.store.turn_writer import TurnReceipt
    from mlx_sdm.turn.values import TurnOutcome
from mlx_sdm.turn.escalation import ladder_words

DEFAULT_EMBEDDER = "minilm"
DEFAULT_DB_NAME = "chat.db"
APP_NAME = "mlx-sdm"
#: Plain-mode commands (a line starting with one of these is not sent to the model).
PLAIN_HELP = ("commands: /help  /sessions  /new [title]  /rename TITLE  /export PATH(.md|.jsonl)  /quit\n"
              "ctrl+c stops the answer being written (twice in a row, or at the prompt, quits).\n"
              f"{ladder_words()}\nA paused turn: type your guidance to resume it, or an empty line to move on.")


def default_data_dir() -> Path:
    """Where sessions live: $MLX_SDM_HOME, else the platform's user data dir (platformdirs, which
    Textual installs), else ~/.local/share/mlx-sdm."""
    if os.environ.get("MLX_SDM_HOME"):
        return Path(os.environ["MLX_SDM_HOME"]).expanduser()
    try:
        from platformdirs import user_data_dir

        return Path(user_data_dir(APP_NAME, appauthor=False))
    except ImportError:
        return Path.home() / ".local" / "share" / APP_NAME


def default_db_path() -> Path:
    return default_data_dir() / DEFAULT_DB_NAME


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="mlx-sdm chat",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Chat with a local model; every answer gets a calibrated verdict in words: verified (p_lower >= alpha' = 0.95), "
            "not verified (in scope, but the verifier cannot vouch for it, and why), out of scope (unlike anything the "
            "verifier was built on; it says what it covers), or unverifiable when no verifier fits the model; and a session monitor reading "
            f"(AUQ confidence level, TRACER risk). {ladder_words()} "
            "Unverified and escalated answers land in a review queue; your labels join the verifier's support set at once."
        ),
        epilog=(
            "examples:\n"
            "  mlx-sdm chat                              # Textual UI, embedded SmolLM2 + default verifier, offline\n"
            "  echo 'Is Paris in France?' | mlx-sdm chat  # line mode (not a terminal): answer, verdict, monitor\n"
            "  mlx-sdm chat --plain --session 3f2a9c1b    # reopen a session in line mode\n"
            "  mlx-sdm chat --list                        # sessions in the store\n"
            "  mlx-sdm chat --session 3f2a9c1b --export s.md      # one session as Markdown\n"
            "  mlx-sdm chat --export all.jsonl            # every session; then: mlx-sdm eval-monitor all.jsonl\n"
            "  mlx-sdm chat --export-labels labels.jsonl  # review decisions as training rows\n"
            "  mlx-sdm chat --irreversible-tools send_email,delete  # pause such tool calls already at MEDIUM\n"
            f"\nThe store defaults to {default_db_path()} (set MLX_SDM_HOME or --db to move it)."
        ),
    )
    parser.add_argument("--model", default=None, help=MODEL_HELP)
    parser.add_argument("--verifier", default=None,
                        help="verifier directory (mlx-sdm train); default: the one shipped in weights/ for the model; 'none' turns verification off")
    parser.add_argument("--head", default=None, metavar="DIR|none", help=(
        "SDM-network head directory (mlx-sdm finetune, full or compressed) to decode with; default: the head shipped for "
        "the embedded model, when there is one (kept whatever --verifier says: it belongs to the model); 'none' turns it off"))
    parser.add_argument("--db", default=None, help=f"chat store (SQLite) path; default {default_db_path()}")
    parser.add_argument("--session", default=None, help="reopen this session id (see --list); default: a new session")
    parser.add_argument("--title", default=None, help="title of a new session")
    parser.add_argument("--max-tokens", type=positive_int, default=DEFAULT_MAX_TOKENS,
                        help="longest answer in tokens, at least 1 (default %(default)s)")
    parser.add_argument("--temperature", type=temperature, default=0.0,
                        help=f"sampling temperature, 0 to {MAX_TEMPERATURE:g}; 0 = greedy (default)")
    parser.add_argument("--irreversible-tools", default="",
                        help="comma-separated tool-name substrings whose calls pause already at MEDIUM uncertainty (case-insensitive)")
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER, choices=("minilm", "hidden", "none"),
                        help="TRACER sentence embedder: all-MiniLM-L6-v2 (default), the chat model's pooled states, or none (lexical only)")
    parser.add_argument("--no-p-true", action="store_true", help="skip the P(True) follow-up question (AUQ then has no confidence signal: 0.5, HIGH)")
    parser.add_argument("--semantic-sampling", action="store_true",
                        help="AUQ System 2: when the confidence lands in [0.50, 0.72], draw 2-5 extra answers at T=0.8 and "
                             "take the semantic-entropy confidence if lower (slower)")
    parser.add_argument("--no-second-look", action="store_true", help=NO_SECOND_LOOK_HELP)
    parser.add_argument("--plain", action="store_true", help="line-mode chat (the default when stdin/stdout is not a terminal)")
    parser.add_argument("--list", action="store_true", help="list the sessions in the store and exit")
    parser.add_argument("--list-tasks", action="store_true",
                        help="list what the verifier covers, with an example prompt each, and exit (f3 in the chat)")
    parser.add_argument("--export", metavar="PATH", default=None,
                        help="write the --session to PATH (.md = Markdown, .jsonl = session JSONL) and exit; "
                             "without --session, every session goes to one session JSONL for `mlx-sdm eval-monitor`")
    parser.add_argument("--export-labels", metavar="PATH", default=None,
                        help="write every review decision as training rows {prompt, completion, label} (JSONL) for `mlx-sdm train` and exit")
    parser.add_argument("--timing", action="store_true",
                        help="line mode: after each answer print first-token latency (from Enter), tokens/s and prompt tokens reused from the KV cache")
    parser.add_argument("--no-monitor-panel", action="store_true", help="start the UI with the monitor panel hidden")
    parser.add_argument("--theme", default=None, help="Textual theme name for the UI")
    return parser


def engine_config(args: argparse.Namespace):
    from mlx_sdm.executor.engine import EngineConfig

    tools = tuple(t.strip() for t in args.irreversible_tools.split(",") if t.strip())
    return EngineConfig(
        model=args.model, verifier=args.verifier, head=args.head, max_tokens=args.max_tokens,
        temperature=args.temperature, irreversible_tools=tools, embedder=args.embedder, enable_p_true=not args.no_p_true,
        semantic_sampling=args.semantic_sampling, second_look=not args.no_second_look,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list_tasks:
        from mlx_sdm.commands.generate import list_tasks

        return list_tasks(args.verifier, command="chat", model=args.model)
    from mlx_sdm.store.chat_store import ChatStore

    try:
        from mlx_sdm.atomic import check_output_file

        for target in (args.export, args.export_labels):
            if target:
                check_output_file(Path(target).expanduser())
        store = ChatStore(Path(args.db).expanduser() if args.db else default_db_path())
        if args.list:
            return _list_sessions(store)
        if args.export_labels:
            n = store.review_queue.export_training_rows(Path(args.export_labels).expanduser())
            print(f"wrote {n} training rows to {args.export_labels}")
            return 0
        if args.session is not None:
            store.get_session(args.session)
        if args.export:
            from mlx_sdm.store.export import export_all_sessions, export_session

            target = Path(args.export).expanduser()
            if args.session is None:
                if target.suffix.lower() != ".jsonl":
                    raise MlxSdmError(f"--export {target} without --session writes every session as session JSONL: "
                                      "name a .jsonl file, or pick one session with --session ID")
                print(f"wrote {export_all_sessions(store, target)} sessions to {target}")
            else:
                print(f"wrote {export_session(store, args.session, target)}")
            return 0
        config = engine_config(args)
    except MlxSdmError as exc:
        print(f"mlx-sdm chat: error: {exc}", file=sys.stderr)
        return 2
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    if not args.plain and interactive:
        return _run_ui(args, config, store)
    return run_plain(config, store, session_id=args.session, title=args.title, stdin=sys.stdin, stdout=sys.stdout,
                     prompt=interactive, timing=args.timing)


def _list_sessions(store) -> int:
    sessions = store.list_sessions()
    if not sessions:
        print(f"no sessions in {store.path}")
    for s in sessions:
        print(f"{s.id}  {s.updated_at[:19].replace('T', ' ')}  {s.message_count:4d} messages  {s.title}")
    return 0


def _run_ui(args, config, store) -> int:
    from mlx_sdm.usecases.loading import chat_components
    from mlx_sdm.executor.engine import ChatEngine

    try:
        from tui.app import run as run_ui
    except ImportError as exc:
        print(f"mlx-sdm chat: the terminal UI is not available ({exc}); falling back to --plain", file=sys.stderr)
        return run_plain(config, store, session_id=args.session, title=args.title, stdin=sys.stdin, stdout=sys.stdout, prompt=True)
    engine = ChatEngine(config, store, components=chat_components)
    try:
        return run_ui(engine, store, session_id=args.session, show_monitor=not args.no_monitor_panel, theme=args.theme,
                      title=args.title)
    finally:
        engine.shutdown(wait=True, timeout=10)
        store.close()


def _plain_turn(engine, session_id: str, text: str, *, resume: bool, out, prefill_progress) -> tuple[TurnReceipt, list[str]]:
    """One turn in line mode, a loop over the engine's stream of the turn's items: a bar while a long prompt is
    read, the answer's tokens to ``out``; ctrl+c stops the answer (a second one quits). Returns the turn's receipt
    (its record and where it is kept) and the messages of a logged escalation."""
    from mlx_sdm.executor.events import PrefillProgress
    from mlx_sdm.lm.pieces import TokenPiece
    from mlx_sdm.monitor.online.auq_escalation import EscalationAction
    from mlx_sdm.turn.escalation import Escalation
    from mlx_sdm.store.turn_writer import TurnReceipt
    from mlx_sdm.turn.values import CheckingAnswers

    logged: list[str] = []
    items, interrupted = engine.stream(session_id, text, resume=resume), False
    while True:
        try:
            item = next(items, None)
            if item is None:
                break
            if isinstance(item, PrefillProgress):
                prefill_progress(item.done, item.total)
            elif isinstance(item, TokenPiece) and item.phase == "answer":
                out(item.text, end="")
            elif isinstance(item, CheckingAnswers):
                out(f"\n  (checking {item.k} more answers: the verifier's second look)", end="")
            elif isinstance(item, Escalation) and item.action is EscalationAction.PROCEED_WITH_LOG and item.unusual:
                logged.append(item.message)  # a log line only when it departs from the usual (Escalation.unusual)
            elif isinstance(item, TurnReceipt):
                result = item
        except KeyboardInterrupt:  # ctrl+c stops the answer (kept, "cancelled"); the chat goes on
            if interrupted:
                raise
            interrupted = True
            engine.cancel()
    return result, logged


def run_plain(config, store, *, session_id: str | None, title: str | None, stdin, stdout, prompt: bool = False,
              components=None, timing: bool = False) -> int:
    """Line mode: each input line is a message; the answer streams to ``stdout``, then its verdict and
    monitor lines. Returns 0, or 2 when the model or verifier cannot be loaded."""
    from mlx_sdm.usecases.loading import chat_components
    from mlx_sdm.usecases.prefill_progress import PrefillBar
    from mlx_sdm.executor.engine import ChatEngine
    from mlx_sdm.network.verdict_words import TranscriptVerdicts

    def out(text: str = "", end: str = "\n") -> None:
        stdout.write(text + end)
        stdout.flush()

    prefill_progress = PrefillBar()

    if hasattr(stdin, "reconfigure"):  # undecodable bytes become lone surrogates, refused line by line below
        stdin.reconfigure(errors="surrogateescape")
    created: list[str] = []  # sessions this run opened: removed again at exit if nothing was said in them
    engine = ChatEngine(config, store, components=components or chat_components)
    try:
        try:
            info = engine.ready.result()
        except MlxSdmError as exc:
            print(f"mlx-sdm chat: error: {exc}", file=sys.stderr)
            return 2
        session_id = _open_plain_session(store, info, session_id, title, out, created)
        verdicts = TranscriptVerdicts()
        paused = engine.pending_pause(session_id) is not None
        for number, text in enumerate(_input_lines(stdin, out, prompt, lambda: paused), start=1):
            if not _is_utf8(text):
                print(f"mlx-sdm chat: input line {number} is not UTF-8 text; skipped (send it as UTF-8)", file=sys.stderr)
                continue
            if text.startswith("/"):
                command = _plain_command(text, store, session_id, out)
                if command == "quit":
                    break
                if command == "new":
                    session_id, paused = _new_plain_session(store, info, text[4:].strip() or None, out, created), False
                    verdicts = TranscriptVerdicts()
                continue
            was_paused, paused = paused, False
            if not text.strip():
                if was_paused:
                    out("[paused answer left as is]")
                continue
            try:
                result, logged = _plain_turn(engine, session_id, text, resume=was_paused, out=out,
                                             prefill_progress=prefill_progress)
            except MlxSdmError as exc:
                out(f"\n[error: {exc}]")
                continue
            paused = _print_turn(result, out, logged, timing, verdicts)
        return 0
    finally:
        engine.shutdown(wait=True, timeout=10)
        _drop_empty_sessions(store, created)


def _input_lines(stdin, out, prompt: bool, paused) -> Iterator[str]:
    """Input lines without their newline, each after its prompt ("you> ", or "guidance> " while paused); piped
    input (no prompt) is echoed after the same prompt, so the transcript shows who said what."""
    while True:
        if prompt:
            out("guidance> " if paused() else "you> ", end="")
        line = stdin.readline()
        if not line:
            return
        if not prompt:
            out(("guidance> " if paused() else "you> ") + line.rstrip("\n"))
        yield line.rstrip("\n")


def _drop_empty_sessions(store, created: list[str]) -> None:
    """Never leave an empty session behind (e.g. input that was all refused)."""
    for sid in created:
        try:
            if store.get_session(sid).message_count == 0:
                store.delete_session(sid)
        except MlxSdmError:  # deleted meanwhile (/delete)
            pass


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from undecodable input bytes
        return False
    return True


def _new_plain_session(store, info, title: str | None, out, created: list[str]) -> str:
    session_id = store.create_session(title, model=info.model_name, verifier=info.verifier_path).id
    created.append(session_id)
    out(f"[session {session_id}]")
    return session_id


def _open_plain_session(store, info, session_id: str | None, title: str | None, out, created: list[str]) -> str:
    """A new session (announced with the model, the verifier and what it covers) or the reopened one."""
    if session_id is None:
        session_id = store.create_session(title, model=info.model_name, verifier=info.verifier_path).id
        created.append(session_id)
        out(f"[session {session_id} · model {info.model_name} · "
            + (f"verifier {info.verifier_path}" if info.verifier_path else f"unverifiable: {info.unverifiable_reason}") + "]")
        if info.coverage.known:
            out(f"[{info.coverage.sentence()}]")
        return session_id
    s = store.get_session(session_id)
    out(f"[reopened session {s.id} \"{s.title}\" · {s.message_count} messages · model {info.model_name}]")
    return session_id


def _print_turn(receipt: TurnReceipt, out, logged: list[str], timing: bool, verdicts: TranscriptVerdicts) -> bool:
    """The lines after an answer: the verdict's one line, unverified text, then what departs from the usual turn
    (:attr:`Escalation.unusual`): the monitor's reading, an escalation and the answer's place in the review queue.
    On an ordinary turn none of those is printed (each answer is still monitored and, unless verified, queued for
    review: ``mlx-sdm chat``'s monitor panel and ctrl+r show them). True when paused."""
    from mlx_sdm.turn.escalation import TurnStatus
    from mlx_sdm.store.export import monitor_line

    result = receipt.outcome
    out()
    if result.prompt_note:
        out(f"[note: {result.prompt_note}]")
    out(f"[{verdicts.line(result.verdict)}]")
    if result.unverified_tail.strip():
        out(f"[unverified: the verdict covers only {result.judged_text.strip()!r}; the rest was not checked]")
    unusual = result.escalation is not None and result.escalation.unusual
    if unusual:
        out(f"[{monitor_line(result.monitor)}]")
    for message in logged:
        out(f"[{message}]")
    if timing:
        out(f"[timing: {_timing_line(result)}]")
    if result.status is TurnStatus.PAUSED:
        out(f"[{result.escalation.message} Type your guidance on the next line, or an empty line to move on.]")
        if result.reflection_shown:
            out(f"[reflection: {result.reflection_shown.strip()}]")
    elif result.status is TurnStatus.ABORTED:
        out(f"[ABORTED: {result.explanation}]")
    elif result.status is TurnStatus.CANCELLED:
        out("[stopped]")
    if receipt.review_id is not None and unusual:  # an ordinary unverified answer is queued too, without a line
        out(f"[queued for review as #{receipt.review_id}]")
    return result.status is TurnStatus.PAUSED


def _timing_line(result: TurnOutcome) -> str:
    first = "n/a" if result.first_token_s is None else f"{result.first_token_s:.3f} s"
    rate = len(result.tokens) / result.generation_s if result.generation_s else 0.0
    return (f"first token {first} after Enter; {len(result.tokens)} tokens in {result.generation_s or 0:.2f} s ({rate:.1f} tok/s); "
            f"prompt {result.prompt_tokens} tokens, {result.reused_tokens} reused from the KV cache")


def _plain_command(text: str, store, session_id: str, out) -> str | None:
    """A /command of the line mode; returns "quit" or "new" when the caller acts on it."""
    from mlx_sdm.store.export import export_session

    name, _, rest = text.partition(" ")
    rest = rest.strip()
    if name in {"/quit", "/exit", "/q"}:
        return "quit"
    if name == "/help":
        out(PLAIN_HELP)
    elif name == "/sessions":
        for s in store.list_sessions():
            out(f"{s.id}  {s.message_count:4d} messages  {s.title}")
    elif name == "/rename":
        if rest:
            out(f"[renamed to {store.rename_session(session_id, rest).title!r}]")
        else:
            out("[usage: /rename TITLE]")
    elif name == "/export":
        if not rest:
            out("[usage: /export PATH.md or PATH.jsonl]")
        else:
            try:
                out(f"[exported to {export_session(store, session_id, Path(rest).expanduser())}]")
            except MlxSdmError as exc:
                out(f"[error: {exc}]")
    elif name == "/new":
        return "new"
    else:
        out(f"[unknown command {name}; /help lists them]")
    return None
