"""``mlx-sdm serve``: the local model behind an OpenAI-compatible endpoint, with a verdict on every answer."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mlx_sdm.commands.arguments import MODEL_HELP, NO_SECOND_LOOK_HELP, CommandParser, port, positive_int
from mlx_sdm.errors import MlxSdmError
from mlx_sdm.lm.defaults import DEFAULT_MAX_TOKENS

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_MAX_PENDING = 16
DEFAULT_MAX_BODY_BYTES = 1_000_000
API_KEY_ENV = "MLX_SDM_API_KEY"


@dataclass
class ServeArgs:
    model: str | None = None
    verifier: str | None = None
    head: str | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: str | None = None
    db: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_pending: int = DEFAULT_MAX_PENDING
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    quantized: bool = False
    log_level: str = "warning"
    quiet: bool = False
    no_second_look: bool = False


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="mlx-sdm serve",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Serve the local model on an OpenAI-compatible endpoint (/v1/models, /v1/chat/completions with streaming "
            "and logprobs, /v1/verify). Every answer carries a `verdict` object: status verified / not_verified / "
            "out_of_scope, the reason in words, p_lower, q, d and the nearest training exemplars. Every served turn "
            "is stored in the chat store, so answers that are not verified land in the TUI's review queue (an "
            "answer's `review_id`; GET /v1/reviews, POST /v1/reviews/{id} or `mlx-sdm review` decide it too), and "
            "review decisions change the server's later verdicts at once."
        ),
        epilog=(
            "examples:\n"
            "  mlx-sdm serve                                        # embedded SmolLM2 + default verifier on 127.0.0.1:8080\n"
            "  mlx-sdm serve --verifier weights/smollm2-bbc-topic   # the topic verifier\n"
            "  mlx-sdm serve --host 0.0.0.0 --api-key s3cret        # reachable from the LAN: a key is required\n"
            "  curl -s localhost:8080/v1/chat/completions -H 'Content-Type: application/json' \\\n"
            "       -d '{\"model\": \"smollm2\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}'\n"
            "  OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=none oterm   # any OpenAI-compatible client\n"
            "\nConversations: send the header `X-Session-Id: ID` (or the `user` field) to keep a conversation in one\n"
            "store session; without it each request is its own session. Overloaded: 503 with Retry-After.\n"
        ),
    )
    parser.add_argument("--model", default=None, help=MODEL_HELP)
    parser.add_argument("--verifier", default=None,
                        help="verifier directory; default: the one shipped for the model; 'none' = no verification (verdicts say so)")
    parser.add_argument("--head", default=None, metavar="DIR|none", help=(
        "SDM-network head directory (mlx-sdm finetune, full or compressed) to decode with; default: the head shipped for "
        "the embedded model, when there is one (kept whatever --verifier says: it belongs to the model); 'none' turns it off"))
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to bind (default %(default)s: this machine only)")
    parser.add_argument("--port", type=port, default=DEFAULT_PORT,
                        help="port, 0 to 65535 (default %(default)s; 0 = any free port)")
    parser.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                        help=f"require 'Authorization: Bearer KEY' (default ${API_KEY_ENV}); needed for a non-loopback --host")
    parser.add_argument("--db", default=None, help="chat store (SQLite) path; default: the chat's own store")
    parser.add_argument("--max-tokens", type=positive_int, default=DEFAULT_MAX_TOKENS,
                        help="answer budget when a request gives no max_tokens, at least 1 (default %(default)s)")
    parser.add_argument("--max-pending", type=positive_int, default=DEFAULT_MAX_PENDING,
                        help="requests queued or running for the model before the server answers 503, at least 1 "
                             "(default %(default)s)")
    parser.add_argument("--max-body-bytes", type=positive_int, default=DEFAULT_MAX_BODY_BYTES,
                        help="largest request body accepted, at least 1; larger ones get 413 (default %(default)s)")
    parser.add_argument("--quantized", action="store_true", help="keep the embedded model 4-bit")
    parser.add_argument("--no-second-look", action="store_true", help=NO_SECOND_LOOK_HELP)
    parser.add_argument("--quiet", action="store_true",
                        help="no request log (by default each request is one line on stderr: method, path, status, "
                             "time in ms, verdict status or '-')")
    parser.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"),
                        help="log level of the HTTP server itself, uvicorn (default %(default)s); its access log is "
                             "off: the request log above replaces it")
    return parser


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind first, so the real port is known (``--port 0``) and a busy port is one clear error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise MlxSdmError(f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port") from exc
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def server_config(args: ServeArgs):
    """The HTTP app's settings from the command line."""
    from mlx_sdm.server.app import ServerConfig

    return ServerConfig(api_key=args.api_key, max_body_bytes=args.max_body_bytes, log_requests=not args.quiet)


def run_server(args: ServeArgs, *, components: Callable[[Any], Any] | None = None, out=sys.stdout) -> int:
    """Load, bind, serve until interrupted. ``components`` is the loader of the model, verifier and head
    (``BackendConfig -> TurnComponents``); None loads them from ``args`` (:func:`mlx_sdm.usecases.loading.load_components`),
    the same seam as ``ChatEngine(components=)``."""
    import uvicorn

    from mlx_sdm.commands.chat import default_db_path
    from mlx_sdm.server.app import build_app
    from mlx_sdm.server.auth import check_bind
    from mlx_sdm.server.backend import BackendConfig, SessionBackend
    from mlx_sdm.server.worker import ModelWorker
    from mlx_sdm.store.chat_store import ChatStore

    check_bind(args.host, args.api_key)
    sock = bind_socket(args.host, args.port)
    store = ChatStore(Path(args.db).expanduser() if args.db else default_db_path())
    config = BackendConfig(model=args.model, verifier=args.verifier, head=args.head, max_tokens=args.max_tokens,
                           quantized=args.quantized, second_look=not args.no_second_look)
    print(f"mlx-sdm serve: loading the model and verifier (store {store.path}) ...", file=out, flush=True)
    worker = ModelWorker(lambda: SessionBackend(config, store, components), max_pending=args.max_pending)
    try:
        backend = worker.ready.result()
        app = build_app(worker, server_config(args))
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        head = backend.components.head_path if backend.components.head is not None else None
        print(f"mlx-sdm serve: listening on http://{shown}:{port}/v1 · model {backend.model_id} · verifier "
              f"{backend.verifier_name or 'none'}" + (f" · head {head}" if head else "")
              + (" · API key required" if args.api_key else ""), file=out, flush=True)
        server = uvicorn.Server(uvicorn.Config(app, log_level=args.log_level, access_log=False,
                                               timeout_graceful_shutdown=5))
        server.run(sockets=[sock])
    finally:
        worker.shutdown()
        store.close()
        sock.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    args = ServeArgs(**{k: v for k, v in vars(ns).items() if k in ServeArgs.__dataclass_fields__})
    return run_server(args)
