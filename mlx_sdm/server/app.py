"""The HTTP app (Starlette): OpenAI-compatible routes in front of the model worker.

    GET  /v1/models             the served model (and /v1/models/{id})
    POST /v1/chat/completions   an answer with its verdict (SSE stream with "stream": true; the verdict
                                rides on the last chunk, the one with finish_reason)
    POST /v1/verify             {"messages": [...], "completion": "..."} -> the verdict of an answer made elsewhere
    GET  /v1/reviews            the review queue (?status=pending|decided|all&task=&limit=), as `mlx-sdm review list`
    POST /v1/reviews/{id}       {"decision": "accept"|"reject"|"correct", "answer"?, "note"?, "replace"?}: decide an
                                entry, through the one write path the review screen and `mlx-sdm review` use
    GET  /health                liveness, no key needed

Every handler only parses (``wire``), queues a job on the worker (``worker``: bounded, 503 when full)
and writes what comes back; the model, the verifier and the store belong to the worker's thread.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mlx_sdm.errors import DataError, MlxSdmError
from mlx_sdm.executor.review import ReviewRefused
from mlx_sdm.server import sse, wire
from mlx_sdm.server.auth import authorized
from mlx_sdm.server.request_log import RequestLogMiddleware
from mlx_sdm.server.backend import SessionBackend
from mlx_sdm.server.results import ServedAnswer, ServedToken
from mlx_sdm.server.worker import ModelWorker, Overloaded

DEFAULT_MAX_BODY_BYTES = 1_000_000  # 1 MB: far above any prompt that fits a local model's context
SESSION_HEADER = "x-session-id"
OPEN_PATHS = {"/health"}
T = TypeVar("T")


@dataclass(frozen=True)
class ServerConfig:
    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    log_requests: bool = True  # one line per request on stderr (server/request_log.py)


class ApiKeyMiddleware:
    """``Authorization: Bearer KEY`` on every path but /health (a pure ASGI layer: streams pass untouched)."""

    def __init__(self, app: ASGIApp, api_key: str | None):
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.api_key and scope["path"] not in OPEN_PATHS:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            if not authorized(headers.get("authorization"), self.api_key):
                error = wire.ApiError(401, "missing or wrong API key: send the header 'Authorization: Bearer KEY' "
                                      "(the --api-key the server was started with)", code="invalid_api_key",
                                      type_="authentication_error")
                await _error_response(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _error_response(error: wire.ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 past ``limit`` bytes (checked while reading, not only by header)."""
    too_big = wire.ApiError(413, f"the request body is larger than {limit} bytes; send a shorter conversation",
                            code="request_too_large")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_big
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


def build_app(worker: ModelWorker[SessionBackend], config: ServerConfig = ServerConfig()) -> Starlette:
    """The app for a worker whose backend is loaded (``worker.ready`` resolved)."""
    backend = worker.ready.result()
    model_id, created = backend.model_id, backend.created  # immutable facts, safe to read off the worker thread
    known = (model_id,)

    async def run(job: Callable[[SessionBackend], T]) -> T:
        return await asyncio.wrap_future(worker.submit(job))

    async def models(request: Request) -> Response:
        return JSONResponse(wire.models_body([(model_id, created)]))

    async def model(request: Request) -> Response:
        name = request.path_params["name"]
        if name != model_id:
            raise wire.ApiError(404, f"the model {name!r} does not exist here; this server serves {model_id}",
                                param="model", code="model_not_found")
        return JSONResponse(wire.models_body([(model_id, created)])["data"][0])

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": model_id, "queued": worker.pending})

    async def chat_completions(request: Request) -> Response:
        body = await read_body(request, config.max_body_bytes)
        req = wire.parse_chat_request(body, known_models=known, session_header=request.headers.get(SESSION_HEADER))
        if req.stream:
            return await _stream(worker, req)
        answer: ServedAnswer = await run(lambda b: b.complete(req, b.prepare(req)))
        ids = wire.StreamIds(model=model_id)
        return JSONResponse(wire.completion_body(
            ids, text=answer.text, finish_reason=answer.finish_reason, usage=answer.usage(), verdict=answer.verdict_json(),
            logprobs=list(answer.logprobs) if req.logprobs else None, session_id=answer.session_id, monitor=answer.monitor,
            review_id=answer.review_id,
        ))

    async def verify(request: Request) -> Response:
        body = await read_body(request, config.max_body_bytes)
        req = wire.parse_verify_request(body, known_models=known, session_header=request.headers.get(SESSION_HEADER))
        answer: ServedAnswer = await run(lambda b: b.verify(req))
        return JSONResponse({"object": "verification", "model": model_id, "verdict": answer.verdict_json(),
                             "usage": answer.usage(),
                             "session_id": answer.session_id, "review_id": answer.review_id})

    routes = [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{name:path}", model, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/verify", verify, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
    ]
    app = Starlette(routes=routes + _review_routes(run, config), exception_handlers={
        wire.ApiError: lambda request, exc: _error_response(exc),
        Overloaded: lambda request, exc: _error_response(_overloaded(exc)),
        ReviewRefused: lambda request, exc: _error_response(_refused(exc)),
        DataError: lambda request, exc: _error_response(wire.ApiError(400, str(exc), param=exc.field)),
        HTTPException: _http_error,
        MlxSdmError: lambda request, exc: _error_response(wire.ApiError(500, str(exc), type_="server_error")),
        Exception: lambda request, exc: _error_response(wire.ApiError(500, f"internal error: {exc}", type_="server_error")),
    })
    return _with_middleware(app, config)


def _review_routes(run: Callable[[Callable[[SessionBackend], Any]], Awaitable[Any]], config: ServerConfig) -> list[Route]:
    """The review queue over HTTP: ``GET /v1/reviews`` lists it (the JSON ``mlx-sdm review list`` prints), ``POST
    /v1/reviews/{id}`` decides an entry on the worker (the store and the verifier are its), through the one write
    path the review screen and ``mlx-sdm review`` use; a refused decision is 404 / 409 / 400 (:func:`_refused`)."""

    async def reviews(request: Request) -> Response:
        query = wire.parse_review_query(request.query_params)
        return JSONResponse({"object": "list", "data": await run(lambda b: b.reviews(query))})

    async def review(request: Request) -> Response:
        body = await read_body(request, config.max_body_bytes)
        decision = wire.parse_review_decision(body, request.path_params["id"])
        return JSONResponse(await run(lambda b: b.decide(decision)))

    return [Route("/v1/reviews", reviews, methods=["GET"]), Route("/v1/reviews/{id}", review, methods=["POST"])]


def _with_middleware(app: Starlette, config: ServerConfig) -> Starlette:
    """The key check, and around it (so that refused requests are logged too) the request log."""
    app.add_middleware(ApiKeyMiddleware, api_key=config.api_key)
    if config.log_requests:
        app.add_middleware(RequestLogMiddleware)
    return app


def _overloaded(exc: Overloaded) -> wire.ApiError:
    return wire.ApiError(503, str(exc), code="server_overloaded", type_="server_error",
                         headers={"Retry-After": str(exc.retry_after)})


#: The HTTP status of each way a review decision is refused (:class:`ReviewRefused`'s code); 400 for the rest.
REFUSED_STATUS = {"not_found": 404, "already_decided": 409}


def _refused(exc: Exception) -> wire.ApiError:
    assert isinstance(exc, ReviewRefused)
    return wire.ApiError(REFUSED_STATUS.get(exc.code, 400), exc.detail, param=exc.field, code=exc.code)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (registered for HTTPException only; Starlette types a handler by Exception)."""
    assert isinstance(exc, HTTPException)
    message = {404: f"no route {request.url.path}; this server has /v1/models, /v1/chat/completions, /v1/verify and "
                    "/v1/reviews",
               405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, str(exc.detail))
    return _error_response(wire.ApiError(exc.status_code, message))


# ---------------------------------------------------------------------- streaming


async def _stream(worker: ModelWorker[SessionBackend], req: wire.ChatRequest) -> Response:
    """Queue the job, wait until the prompt is checked (errors are still plain 4xx answers), then stream.
    A client that goes away stops the generation at the next token; the turn is stored as cancelled."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()

    def put(item: tuple) -> None:
        try:
            loop.call_soon_threadsafe(events.put_nowait, item)
        except RuntimeError:  # the event loop is gone (server shutting down): stop generating
            stop.set()

    def job(backend: SessionBackend) -> ServedAnswer:
        prepared = backend.prepare(req)
        put(("start",))
        for item in backend.stream(req, prepared, stop):
            if isinstance(item, ServedToken):
                put(("token", item))
        assert isinstance(item, ServedAnswer)  # the stream's last item
        return item

    future = worker.submit(job)
    future.add_done_callback(lambda f: put(("done", f)))
    first = await events.get()
    if first[0] == "done":
        first[1].result()  # raises the ApiError (or other error) as an ordinary response
    ids = wire.StreamIds(model=req.model)
    return StreamingResponse(_chunks(ids, req, events, stop), media_type=sse.MEDIA_TYPE, headers=sse.HEADERS)


async def _chunks(ids: wire.StreamIds, req: wire.ChatRequest, events: asyncio.Queue, stop: threading.Event) -> AsyncIterator[bytes]:
    try:
        yield sse.event(wire.chunk_body(ids, delta={"role": "assistant", "content": ""}))
        while True:
            item = await events.get()
            if item[0] == "token":
                piece, logprob = item[1].piece, item[1].logprob
                logprobs = [logprob] if (req.logprobs and logprob is not None) else ([] if req.logprobs else None)
                if piece.text or logprobs:
                    yield sse.event(wire.chunk_body(ids, delta={"content": piece.text}, logprobs=logprobs))
                continue
            try:
                answer: ServedAnswer = item[1].result()
            except Exception as exc:  # headers are sent: the error goes in the stream, as OpenAI does
                error = exc if isinstance(exc, wire.ApiError) else wire.ApiError(500, str(exc), type_="server_error")
                yield sse.event(error.body())
                break
            extra = {"verdict": answer.verdict_json(), "monitor": answer.monitor, "session_id": answer.session_id,
                     "review_id": answer.review_id}
            yield sse.event(wire.chunk_body(ids, delta={}, finish_reason=answer.finish_reason, extra=extra))
            if req.include_usage:
                yield sse.event(dict(wire.chunk_body(ids, delta={}), choices=[], usage=answer.usage()))
            yield sse.DONE
            break
    finally:
        stop.set()  # normal end: no effect; client gone: the generation stops at its next token
