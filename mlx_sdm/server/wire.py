"""The OpenAI wire format: typed requests parsed from JSON bodies (every bad field becomes an
:class:`ApiError` naming it), and the response bodies and stream chunks built from typed results.

Nothing here touches MLX, the store or HTTP: the app (:mod:`mlx_sdm.server.app`) parses with
:func:`parse_chat_request` / :func:`parse_verify_request` and writes what the builders return.

Compatibility rules, as OpenAI's own server behaves: fields we do not know are ignored (clients send
many), fields we know must have the right type and range, and what we cannot honour (``n`` > 1,
image parts) is refused with a 400 naming the field rather than silently changed.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

from mlx_sdm.executor.review import CORRECT, VERBS, ReviewDecision
from mlx_sdm.lm.defaults import MAX_TEMPERATURE

#: Roles a chat message may have (OpenAI's ``developer`` is read as ``system``).
ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_TOP_LOGPROBS = 20  # OpenAI's limit


class ApiError(Exception):
    """An OpenAI-style error: ``{"error": {"message", "type", "param", "code"}}`` with an HTTP status."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type_: str = "invalid_request_error", headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type_
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class ChatMessage:
    role: str  # system | user | assistant | tool ("developer" is stored as "system")
    content: str


@dataclass(frozen=True)
class ChatRequest:
    """``POST /v1/chat/completions``. ``max_tokens=None``: as many as the server's default allows."""

    model: str
    messages: tuple[ChatMessage, ...]
    stream: bool = False
    max_tokens: int | None = None
    temperature: float = 0.0
    logprobs: bool = False
    top_logprobs: int = 0
    include_usage: bool = False  # stream_options.include_usage
    conversation: str | None = None  # the client's conversation id (X-Session-Id header, else `user`)


@dataclass(frozen=True)
class VerifyRequest:
    """``POST /v1/verify``: an answer made elsewhere, judged by the local model's verifier."""

    model: str
    messages: tuple[ChatMessage, ...]
    completion: str
    conversation: str | None = None


# ---------------------------------------------------------------------- parsing


def _decode_body(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise ApiError(400, "the request body is not UTF-8 text; send JSON encoded as UTF-8", code="invalid_json")
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"the request body is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})",
                       code="invalid_json")
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, not {type(data).__name__}", code="invalid_json")
    return data


def _wrong_type(param: str, expected: str, value: Any) -> ApiError:
    return ApiError(400, f"{param} must be {expected}, got {json.dumps(value)[:60]}", param=param, code="invalid_type")


def _opt_int(data: dict, key: str, low: int, high: int | None = None) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong_type(key, "an integer", value)
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ApiError(400, f"{key} must be {bound}, got {value}", param=key, code="invalid_value")
    return value


def _opt_bool(data: dict, key: str, default: bool = False) -> bool:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _wrong_type(key, "true or false", value)
    return value


def _opt_number(data: dict, key: str, low: float, high: float, default: float) -> float:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _wrong_type(key, "a number", value)
    if not low <= value <= high:
        raise ApiError(400, f"{key} must be between {low:g} and {high:g}, got {value:g}", param=key, code="invalid_value")
    return float(value)


def _content_text(content: Any, param: str) -> str:
    """A message's text: a string, or a list of ``{"type": "text", "text": ...}`` parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for i, part in enumerate(content):
            where = f"{param}[{i}]"
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ApiError(400, f"{where} is a {kind!s} part; this local text model reads only "
                               '{"type": "text", "text": "..."} parts', param=where, code="invalid_type")
            pieces.append(part["text"])
        return "".join(pieces)
    raise _wrong_type(param, "a string or a list of text parts", content)


def parse_messages(value: Any, param: str = "messages") -> tuple[ChatMessage, ...]:
    if value is None:
        raise ApiError(400, f"{param} is required: a list of {{\"role\", \"content\"}} objects", param=param, code="missing")
    if not isinstance(value, list):
        raise _wrong_type(param, "a list of message objects", value)
    if not value:
        raise ApiError(400, f"{param} is empty; send at least one user message", param=param, code="empty")
    out = []
    for i, item in enumerate(value):
        where = f"{param}[{i}]"
        if not isinstance(item, dict):
            raise _wrong_type(where, "an object with role and content", item)
        role = item.get("role")
        if role not in ROLES:
            raise ApiError(400, f"{where}.role must be one of {', '.join(ROLES)}, got {json.dumps(role)}",
                           param=f"{where}.role", code="invalid_value")
        content = item.get("content")
        text = "" if content is None and role == "assistant" else _content_text(content, f"{where}.content")
        out.append(ChatMessage("system" if role == "developer" else role, text))
    if not any(m.role == "user" and m.content.strip() for m in out):
        raise ApiError(400, f"{param} has no user message with text; send at least one", param=param, code="empty")
    return tuple(out)


def _model(data: dict, known: tuple[str, ...]) -> str:
    model = data.get("model")
    if model is None:
        raise ApiError(400, f"model is required; this server serves {', '.join(known)} (GET /v1/models)",
                       param="model", code="missing")
    if not isinstance(model, str):
        raise _wrong_type("model", "a string", model)
    if model not in known:
        raise ApiError(404, f"the model {model!r} does not exist here; this server serves {', '.join(known)}",
                       param="model", code="model_not_found")
    return model


def _conversation(data: dict, header: str | None) -> str | None:
    user = data.get("user")
    if user is not None and not isinstance(user, str):
        raise _wrong_type("user", "a string", user)
    chosen = header if header else user
    return chosen.strip()[:200] or None if chosen else None


def parse_chat_request(body: bytes, *, known_models: tuple[str, ...], session_header: str | None = None) -> ChatRequest:
    """Parse and validate a chat-completions body; raises :class:`ApiError` naming the bad field."""
    data = _decode_body(body)
    model = _model(data, known_models)
    messages = parse_messages(data.get("messages"))
    n = _opt_int(data, "n", 1)
    if n not in (None, 1):
        raise ApiError(400, "n must be 1: the server answers once per request (send several requests instead)",
                       param="n", code="unsupported_value")
    if data.get("stop") not in (None, [], ""):
        raise ApiError(400, "stop sequences are not supported: the answer runs to the end of its turn, so that the "
                       "verdict covers exactly the text returned; cut the text on your side instead", param="stop",
                       code="unsupported_value")
    max_tokens = _opt_int(data, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _opt_int(data, "max_tokens", 1)
    stream_options = data.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise _wrong_type("stream_options", "an object", stream_options)
    include_usage = _opt_bool(stream_options or {}, "include_usage")
    logprobs = _opt_bool(data, "logprobs")
    top = _opt_int(data, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top and not logprobs:
        raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs", code="invalid_value")
    return ChatRequest(
        model=model, messages=messages, stream=_opt_bool(data, "stream"), max_tokens=max_tokens,
        temperature=_opt_number(data, "temperature", 0.0, MAX_TEMPERATURE, 0.0), logprobs=logprobs, top_logprobs=top or 0,
        include_usage=include_usage, conversation=_conversation(data, session_header),
    )


def parse_verify_request(body: bytes, *, known_models: tuple[str, ...], session_header: str | None = None) -> VerifyRequest:
    """Parse ``{"model"?, "messages": [...], "completion": "..."}``; the model defaults to the served one."""
    data = _decode_body(body)
    if data.get("model") is None and known_models:
        data["model"] = known_models[0]
    model = _model(data, known_models)
    messages = parse_messages(data.get("messages"))
    completion = data.get("completion")
    if completion is None:
        raise ApiError(400, "completion is required: the answer text to verify", param="completion", code="missing")
    if not isinstance(completion, str):
        raise _wrong_type("completion", "a string", completion)
    if not completion.strip():
        raise ApiError(400, "completion is empty; send the answer text to verify", param="completion", code="empty")
    return VerifyRequest(model=model, messages=messages, completion=completion,
                         conversation=_conversation(data, session_header))


#: ``GET /v1/reviews``: the entries sent when the query gives no ``limit``, and the queue statuses a query may ask for.
DEFAULT_REVIEW_LIMIT = 100
REVIEW_STATUSES = ("pending", "decided", "all")


@dataclass(frozen=True)
class ReviewQuery:
    """``GET /v1/reviews?status=&task=&limit=``: which queue entries (the filters of ``mlx-sdm review list``)."""

    status: str = "pending"
    task: str | None = None
    limit: int = DEFAULT_REVIEW_LIMIT


def parse_review_query(params: Mapping[str, str]) -> ReviewQuery:
    """The query string of ``GET /v1/reviews``; a bad value is a 400 naming it."""
    status = params.get("status", "pending")
    if status not in REVIEW_STATUSES:
        raise ApiError(400, f"status must be one of {', '.join(REVIEW_STATUSES)}, got {status!r}", param="status",
                       code="invalid_value")
    limit_text = params.get("limit", str(DEFAULT_REVIEW_LIMIT))
    if not limit_text.isdigit() or int(limit_text) < 1:
        raise ApiError(400, f"limit must be a whole number, at least 1, got {limit_text!r}", param="limit",
                       code="invalid_value")
    return ReviewQuery(status=status, task=params.get("task") or None, limit=int(limit_text))


def parse_review_decision(body: bytes, review_id: str) -> ReviewDecision:
    """``POST /v1/reviews/{id}`` with ``{"decision": "accept"|"reject"|"correct", "answer"?, "note"?, "replace"?}``:
    the decision the one write path records (:func:`mlx_sdm.executor.review.record_review`, which also refuses an
    unknown or already decided entry)."""
    if not review_id.isdigit() or int(review_id) < 1:
        raise ApiError(404, f"no review-queue entry {review_id!r}: ids are whole numbers (GET /v1/reviews lists them)",
                       param="id", code="not_found")
    data = _decode_body(body)
    verb = data.get("decision")
    if verb is None:
        raise ApiError(400, "decision is required: accept, reject or correct (correct with the corrected \"answer\")",
                       param="decision", code="missing")
    if verb not in VERBS:
        raise ApiError(400, f"decision must be accept, reject or correct, got {json.dumps(verb)[:60]}",
                       param="decision", code="invalid_value")
    answer, note = data.get("answer"), data.get("note")
    for name, value in (("answer", answer), ("note", note)):
        if value is not None and not isinstance(value, str):
            raise _wrong_type(name, "a string", value)
    if verb == CORRECT and (answer is None or not answer.strip()):
        raise ApiError(400, f"answer is required with \"decision\": \"correct\": the corrected answer for review "
                       f"#{review_id}", param="answer", code="missing")
    return ReviewDecision(int(review_id), verb, answer if verb == CORRECT else None, note, _opt_bool(data, "replace"))


# ---------------------------------------------------------------------- typed results -> JSON


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token with its log-prob and (when asked) the most likely alternatives."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


def _logprob_entry(item: TokenLogprob) -> dict[str, Any]:
    def entry(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": float(logprob), "bytes": list(token.encode("utf-8"))}

    return dict(entry(item.token, item.logprob), top_logprobs=[entry(t, lp) for t, lp in item.top])


def logprobs_object(items: list[TokenLogprob]) -> dict[str, Any]:
    return {"content": [_logprob_entry(i) for i in items], "refusal": None}


@dataclass
class StreamIds:
    """What every chunk and body of one completion shares."""

    model: str
    id: str = field(default_factory=lambda: "chatcmpl-" + uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))


def usage_object(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI usage; ``cached_tokens``: prompt tokens whose KV cache came from the previous request."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens, "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def completion_body(ids: StreamIds, *, text: str, finish_reason: str, usage: dict[str, Any],
                    verdict: dict[str, Any], logprobs: list[TokenLogprob] | None, session_id: str | None,
                    monitor: dict[str, Any] | None = None, review_id: int | None = None) -> dict[str, Any]:
    """A whole ``chat.completion`` object, with our ``verdict`` and the turn's ``monitor`` reading beside ``choices``,
    and ``review_id``: the answer's review-queue entry (null: not queued), which ``POST /v1/reviews/{id}`` decides."""
    return {
        "id": ids.id, "object": "chat.completion", "created": ids.created, "model": ids.model,
        "choices": [{
            "index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
            "logprobs": logprobs_object(logprobs) if logprobs is not None else None,
            "finish_reason": finish_reason,
        }],
        "usage": usage,
        "system_fingerprint": None,
        "verdict": verdict,
        "monitor": monitor,
        "session_id": session_id,
        "review_id": review_id,
    }


def chunk_body(ids: StreamIds, *, delta: dict[str, Any], finish_reason: str | None = None,
               logprobs: list[TokenLogprob] | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk`` of a stream; ``extra`` adds fields at the top (the verdict, usage)."""
    body = {
        "id": ids.id, "object": "chat.completion.chunk", "created": ids.created, "model": ids.model,
        "choices": [{"index": 0, "delta": delta, "logprobs": logprobs_object(logprobs) if logprobs is not None else None,
                     "finish_reason": finish_reason}],
        "system_fingerprint": None,
    }
    body.update(extra or {})
    return body


def models_body(models: list[tuple[str, int]]) -> dict[str, Any]:
    """``GET /v1/models``: (id, created) pairs."""
    return {"object": "list", "data": [{"id": m, "object": "model", "created": created, "owned_by": "mlx-sdm"}
                                       for m, created in models]}
