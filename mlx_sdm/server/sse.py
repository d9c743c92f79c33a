"""Server-sent events as OpenAI streams them: ``data: {json}\\n\\n`` per chunk, then ``data: [DONE]``."""

from __future__ import annotations

import json
from typing import Any

DONE = b"data: [DONE]\n\n"
MEDIA_TYPE = "text/event-stream"
#: Headers that keep proxies from buffering a stream.
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def event(data: dict[str, Any]) -> bytes:
    """One SSE event carrying a JSON object (one line: JSON never needs a raw newline)."""
    return b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"
