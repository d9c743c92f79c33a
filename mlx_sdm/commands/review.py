"""``mlx-sdm review``: the chat's review queue from the command line. ``review list`` prints the queue as one JSON
array; ``review accept|reject|correct ID`` decides an entry through the one write path the review screen and the
server use (:func:`mlx_sdm.executor.review.record_review`). No model is loaded: the decision is kept in the store,
and the verifier takes it as it takes one made in the TUI (a running ``mlx-sdm serve`` before its next answer,
``mlx-sdm chat`` at its next start)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mlx_sdm.commands.arguments import CommandParser, positive_int
from mlx_sdm.commands.chat import default_db_path
from mlx_sdm.errors import DataError, MlxSdmError

if TYPE_CHECKING:
    from mlx_sdm.executor.review import RecordedReview
    from mlx_sdm.store.chat_store import ChatStore

DEFAULT_LIMIT = 100
DEFAULT_STATUS = "pending"
STATUSES = ("pending", "decided", "all")
JUDGED = {"yes": True, "no": False, "any": None}
#: Bad input (an unknown id, an entry already decided, a missing answer or store): exit status 2, as argparse's.
EXIT_BAD_INPUT = 2

LIST_EPILOG = """
Prints one JSON array, newest first; each entry:
  {"id", "prompt", "answer", "task", "status", "verdict_status", "verdict_reason", "judged", "not_judged_because",
   "reasons", "created_at", "session_id", "session_title", "message_id", "decision"}
"prompt" is the user's message the answer replied to, "task" the verifier's task it was judged under (null: none
kept), "status" pending or decided, "decision" null or {"decision": accepted|rejected|corrected, "label",
"answer" (the corrected answer), "note", "task", "decided_at"}. An entry with "judged": false was judged by no
verifier ("not_judged_because" says why): a label on it is kept as a training row and changes no verdict.

examples:
  mlx-sdm review list
  mlx-sdm review list --status decided --task sentiment --limit 10
  mlx-sdm review list | jq -r '.[] | "\\(.id)\\t\\(.prompt)"'
"""

DECIDE_EPILOG = """
Prints the decision as one JSON object: {"id", "decision", "replaced", "applies", "entry"} where "replaced" is the
decision it replaced (null: none) and "applies" says when the verifier takes it. A decided entry is changed only
with --replace (the review screen replaces a decision with a key; a script says so). Bad input (an unknown id, an
entry already decided, an empty corrected answer, no store) is one line on stderr and exit status 2.

examples:
  mlx-sdm review accept 12
  mlx-sdm review reject 13 --note "wrong city"
  mlx-sdm review correct 14 'Paris is the capital of France.'
  mlx-sdm review reject 12 --replace     # change a decision
"""


def _db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, metavar="PATH",
                        help=f"chat store (SQLite) path; default {default_db_path()}, the one `mlx-sdm chat` and "
                             "`mlx-sdm serve` use")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="mlx-sdm review", description="The review queue of the chat store: list it, decide its entries.",
        epilog="examples:\n  mlx-sdm review list\n  mlx-sdm review accept 12\n\n"
               "Run `mlx-sdm review list --help` for the JSON it prints, `mlx-sdm review accept --help` for deciding.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="{list,accept,reject,correct}", required=True,
                                     parser_class=CommandParser)
    listing = commands.add_parser(
        "list", prog="mlx-sdm review list", help="the queue as one JSON array",
        description="Print the review queue (unverified and escalated answers) as one JSON array.",
        epilog=LIST_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    listing.add_argument("--status", choices=STATUSES, default=DEFAULT_STATUS,
                         help="pending (no decision), decided or all (default %(default)s)")
    listing.add_argument("--task", default=None, metavar="NAME", help="only answers judged under this verifier task")
    listing.add_argument("--reason", default=None, metavar="REASON",
                         help="only entries queued for this reason (below_threshold, escalated_high, ...)")
    listing.add_argument("--session", default=None, metavar="ID", help="only this session's entries")
    listing.add_argument("--since", default=None, metavar="YYYY-MM-DD", help="only entries from this UTC day on")
    listing.add_argument("--until", default=None, metavar="YYYY-MM-DD", help="only entries up to this UTC day (included)")
    listing.add_argument("--judged", choices=tuple(JUDGED), default="any",
                         help="yes: only answers a verifier judged (the review screen's list); no: only the others "
                              "(listed apart there); any (default)")
    listing.add_argument("--limit", type=positive_int, default=DEFAULT_LIMIT, metavar="N",
                         help="at most N entries (default %(default)s)")
    _db_option(listing)
    for verb, summary in (("accept", "the answer is acceptable as written"),
                          ("reject", "the answer is not acceptable"),
                          ("correct", "the answer, corrected: the correction is the acceptable answer")):
        sub = commands.add_parser(verb, prog=f"mlx-sdm review {verb}", help=summary,
                                  description=f"Decide review entry ID: {summary}.", epilog=DECIDE_EPILOG,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        sub.add_argument("id", type=positive_int, metavar="ID", help="the entry's id (`mlx-sdm review list`)")
        if verb == "correct":
            sub.add_argument("answer", metavar="ANSWER", help="the corrected answer's text")
        sub.add_argument("--note", default=None, metavar="TEXT", help="a note kept with the decision")
        sub.add_argument("--replace", action="store_true", help="replace the entry's decision if it has one")
        _db_option(sub)
    return parser


def open_store(db: str | None) -> ChatStore:
    """The chat store at ``db`` (default: the chat's own); an absent file is bad input, never created here."""
    from mlx_sdm.store.chat_store import ChatStore

    path = Path(db).expanduser() if db else default_db_path()
    if not path.is_file():
        raise DataError("no chat store here; `mlx-sdm chat` or `mlx-sdm serve` creates it, or name one with --db PATH",
                        path=str(path), field="--db")
    return ChatStore(path)


def list_entries(args: argparse.Namespace) -> list[dict]:
    """``review list``'s entries as JSON-ready dicts."""
    from mlx_sdm.store.search import parse_day

    since = None if args.since is None else parse_day(args.since, "--since")
    until = None if args.until is None else parse_day(args.until, "--until")
    with open_store(args.db) as store:
        items = store.review_queue.review_items(session_id=args.session, reason=args.reason, since=since, until=until,
                                                status=args.status, judged=JUDGED[args.judged], task=args.task)
    return [item.to_dict() for item in items[:args.limit]]


def decide(args: argparse.Namespace) -> dict:
    """``review accept|reject|correct``: recorded through the one write path; the JSON it prints."""
    from mlx_sdm.executor.review import ReviewDecision, record_review

    decision = ReviewDecision(args.id, args.command, getattr(args, "answer", None), args.note, args.replace)
    with open_store(args.db) as store:
        recorded = record_review(store, decision)
        entry = store.review_queue.review_item(args.id).to_dict()
    return {"id": args.id, "decision": recorded.decision.kind,
            "replaced": None if recorded.replaced is None else recorded.replaced.kind,
            "applies": applies_words(recorded), "entry": entry}


def applies_words(recorded: RecordedReview) -> str:
    """When the verifier takes a decision recorded with no model loaded, in one sentence."""
    if not recorded.item.judged:
        return f"kept as a training row only: {recorded.item.why_a_label_changes_nothing}"
    edit = " reads the corrected answer and" if recorded.decision.awaits_features else ""
    return (f"the verifier that judged the answer{edit} takes it into its support set at the next load: a running "
            "`mlx-sdm serve` before its next answer, `mlx-sdm chat` when it next starts")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        out: object = list_entries(args) if args.command == "list" else decide(args)
    except DataError as exc:  # bad input: one line naming the id or field and what to do
        print(f"mlx-sdm review {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MlxSdmError as exc:
        print(f"mlx-sdm review {args.command}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0
