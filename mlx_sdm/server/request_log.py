"""One line per HTTP request on stderr: method, path, status, time in ms, and the verdict status when the
response carried a verdict (else "-"). A pure ASGI layer: it watches what the app sends and passes every
message on unchanged, so streams are not buffered.

The verdict is read where every client reads it: the top-level ``verdict.status`` of a JSON answer
(``/v1/chat/completions``, ``/v1/verify``), or of the stream's chunk that carries it (the one with
``finish_reason``). A streamed answer is logged when its stream ends, so the time is the whole answer's.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: JSON bodies above this size are passed on without looking for a verdict (answers are far smaller).
MAX_SNIFFED_BYTES = 4_000_000
NO_VERDICT = "-"


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def format_line(method: str, path: str, status: int, elapsed_s: float, verdict: str | None) -> str:
    return f"{time.strftime('%H:%M:%S')} {method} {path} {status} {elapsed_s * 1000:.0f}ms {verdict or NO_VERDICT}"


def _verdict_status(document: bytes) -> str | None:
    try:
        data = json.loads(document)
    except (ValueError, UnicodeDecodeError):
        return None
    verdict = data.get("verdict") if isinstance(data, dict) else None
    status = verdict.get("status") if isinstance(verdict, dict) else None
    return status if isinstance(status, str) else None


class _Watcher:
    """What one response has sent so far: its status, and its verdict once one went by."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.verdict: str | None = None
        self.stream = False
        self.body: list[bytes] | None = None  # a JSON body, gathered until it ends
        self.size = 0

    def see(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in message.get("headers", [])}
            kind = headers.get("content-type", "")
            self.stream = kind.startswith("text/event-stream")
            self.body = [] if kind.startswith("application/json") else None
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            if self.stream and b'"verdict"' in chunk:
                for line in chunk.splitlines():
                    if line.startswith(b"data:"):
                        self.verdict = _verdict_status(line[5:]) or self.verdict
            elif self.body is not None:
                self.size += len(chunk)
                if self.size > MAX_SNIFFED_BYTES:
                    self.body = None
                    return
                self.body.append(chunk)
                if not message.get("more_body", False):
                    self.verdict = _verdict_status(b"".join(self.body))


class RequestLogMiddleware:
    """Write one line per HTTP request to ``write`` (default: stderr) when its response has ended."""

    def __init__(self, app: ASGIApp, write: Callable[[str], None] | None = None):
        self.app = app
        self.write = write or _stderr_line

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        watcher = _Watcher()

        async def watched_send(message: Message) -> None:
            watcher.see(message)
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        finally:  # an error that escaped the app is answered 500 by the layer outside this one
            self.write(format_line(scope["method"], scope["path"], watcher.status or 500,
                                   time.perf_counter() - start, watcher.verdict))
