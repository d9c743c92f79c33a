"""``mlx-sdm history``: the stored chat sessions from the command line. ``history search`` finds messages
across every session (full-text, SQLite FTS5) and prints them as one JSON array."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mlx_sdm.commands.arguments import CommandParser, positive_int
from mlx_sdm.commands.chat import default_db_path
from mlx_sdm.errors import DataError, MlxSdmError

DEFAULT_LIMIT = 50

SEARCH_EPILOG = """
QUERY is read as words that must all occur in a message (user or assistant), in any order; put a phrase
in double quotes (inside single quotes for the shell) to keep its words together. Case, accents and word
endings are ignored ("verify" also finds "verified"). The filters apply to the verdict of the answer: for a
user message, the answer that followed it.

Prints one JSON array, best match first (then newest first); each hit:
  {"session_id", "session_title", "message_id", "role", "created_at", "snippet", "status", "task"}
where "snippet" is the text around the matches, each match in **, "status" is the answer's verdict
state (verified, not_verified, out_of_scope, no_verifier; null when it has none) and "task" the
verifier's task it was judged under (null for none). Open a hit with `mlx-sdm chat --session SESSION_ID`.

examples:
  mlx-sdm history search capital france
  mlx-sdm history search '"capital of france"' --status verified
  mlx-sdm history search paris --status "not verified" --status out_of_scope
  mlx-sdm history search invoice --task extraction --since 2026-01-01 --until 2026-01-31 --limit 5
  mlx-sdm history search seine | jq -r '.[].session_id' | sort -u     # the sessions that mention it
"""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="mlx-sdm history", description="The stored chat sessions (the store `mlx-sdm chat` writes).",
        epilog="examples:\n  mlx-sdm history search paris --status not_verified\n\n"
               "Run `mlx-sdm history search --help` for the query, the filters and the JSON it prints.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="{search}", required=True, parser_class=CommandParser)
    search = commands.add_parser(
        "search", prog="mlx-sdm history search", help="find messages across every session; prints JSON",
        description="Search every stored session's messages; print the hits as one JSON array.",
        epilog=SEARCH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    search.add_argument("query", nargs="+", metavar="QUERY", help="words to find (all of them), or a \"quoted phrase\"")
    search.add_argument("--status", action="append", default=[], metavar="STATE",
                        help="only answers in this verdict state: verified, not_verified, out_of_scope, no_verifier "
                             "(plain words too: \"not verified\"); repeat for any of several")
    search.add_argument("--task", default=None, metavar="NAME", help="only answers judged under this verifier task")
    search.add_argument("--since", default=None, metavar="YYYY-MM-DD", help="only messages from this UTC day on")
    search.add_argument("--until", default=None, metavar="YYYY-MM-DD", help="only messages up to this UTC day (included)")
    search.add_argument("--limit", type=positive_int, default=DEFAULT_LIMIT, metavar="N",
                        help="at most N hits (default %(default)s)")
    search.add_argument("--db", default=None, metavar="PATH", help=f"chat store (SQLite) path; default {default_db_path()}, as for "
                                                   "`mlx-sdm chat`")
    return parser


def search_hits(args: argparse.Namespace) -> list[dict]:
    """The hits of ``history search`` as JSON-ready dicts; bad input raises a project error."""
    from mlx_sdm.store.search import SearchQuery, parse_day, parse_status, search_sessions
    from mlx_sdm.store.chat_store import ChatStore

    query = SearchQuery(
        " ".join(args.query), statuses=frozenset(parse_status(s, "--status") for s in args.status), task=args.task,
        since=None if args.since is None else parse_day(args.since, "--since"),
        until=None if args.until is None else parse_day(args.until, "--until"), limit=args.limit)
    path = Path(args.db).expanduser() if args.db else default_db_path()
    if not path.is_file():
        raise DataError("no chat store here; `mlx-sdm chat` creates it, or name one with --db PATH", path=str(path))
    with ChatStore(path) as store:
        return [hit.to_dict() for hit in search_sessions(store, query)]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        hits = search_hits(args)
    except MlxSdmError as exc:
        print(f"mlx-sdm history {args.command}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(hits, indent=2, ensure_ascii=False))
    return 0
