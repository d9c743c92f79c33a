"""`mlx-sdm serve` driven by the official `openai` client: a real uvicorn server on a free loopback
port (in a thread), the tiny random model and tiny verifier behind it, a real SQLite chat store.

Deterministic: greedy decoding, answer budgets fixed, the overload made with jobs that wait on an
event (not with timing), every wait bounded.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

openai = pytest.importorskip("openai")
uvicorn = pytest.importorskip("uvicorn")

from mlx_sdm.calibration.row_verdict import Exemplar, Verdict  # noqa: E402
from mlx_sdm.monitor.online.degenerate import degenerate_answer  # noqa: E402
from mlx_sdm.network.verdict import DocumentVerdict  # noqa: E402
from mlx_sdm.network.verdict_words import verdict_words  # noqa: E402
from mlx_sdm.commands.serve import bind_socket  # noqa: E402
from mlx_sdm.server import verdicts  # noqa: E402
from mlx_sdm.server.app import ServerConfig, build_app  # noqa: E402
from mlx_sdm.server.auth import authorized, is_loopback  # noqa: E402
from mlx_sdm.server.backend import BackendConfig, SessionBackend  # noqa: E402
from mlx_sdm.server.worker import ModelWorker  # noqa: E402
from mlx_sdm.store.chat_store import ChatStore  # noqa: E402
from tests.tiny_verifier import build_tiny_verifier, tiny_components  # noqa: E402

API_KEY = "test-key"
MODEL = "tiny-llama-0"
MAX_BODY = 20_000
QUESTION = [{"role": "user", "content": "Paris is the capital of France. Is this claim true or false?"}]
VERDICT_KEYS = {"status", "verified", "reason", "explanation", "reason_code", "badge", "p_lower", "q", "d", "q_bin", "prediction", "exemplars",
                "verifier"}


class ThreadServer:
    """uvicorn + the app + the model worker + a store, on 127.0.0.1 and a free port."""

    def __init__(self, directory: Path, *, max_pending: int = 16, components=None, max_tokens: int = 12):
        if components is None:  # the tiny model and verifier
            components = tiny_components(build_tiny_verifier(directory / "verifier"))
        self.store = ChatStore(directory / "chat.db")
        self.worker = ModelWorker(lambda: SessionBackend(BackendConfig(max_tokens=max_tokens), self.store, components),
                                  max_pending=max_pending)
        app = build_app(self.worker, ServerConfig(api_key=API_KEY, max_body_bytes=MAX_BODY))
        self.sock = bind_socket("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def client(self, api_key: str = API_KEY) -> "openai.OpenAI":
        return openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, timeout=60)

    def raw(self, path: str, body: bytes, *, headers: dict | None = None, method: str = "POST") -> tuple[int, dict, dict]:
        """(status, JSON body, headers) of a raw request (for bodies the openai client would never send)."""
        request = urllib.request.Request(self.base_url + path, data=body if method == "POST" else None, method=method,
                                         headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json",
                                                  **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read()), dict(response.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read()), dict(exc.headers)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.worker.shutdown()
        self.store.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    server = ThreadServer(tmp_path_factory.mktemp("serve"))
    yield server
    server.close()


def _store_counts(store: ChatStore) -> tuple[int, int]:
    sessions = store.list_sessions()
    return len(sessions), sum(s.message_count for s in sessions)


# ---------------------------------------------------------------------- answers


def test_models_lists_the_served_model(served):
    client = served.client()
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-9")


def test_chat_completion_carries_a_verdict_and_is_stored(served):
    reply = served.client().chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=8, logprobs=True,
                                                    top_logprobs=3, extra_headers={"X-Session-Id": "conv-nonstream"})
    choice = reply.choices[0]
    assert choice.finish_reason in {"stop", "length"}
    assert reply.usage.completion_tokens == len(choice.logprobs.content) <= 8
    assert all(len(t.top_logprobs) == 3 for t in choice.logprobs.content)
    for t in choice.logprobs.content:  # greedy: the chosen token is the most likely one
        assert t.top_logprobs[0].logprob == pytest.approx(t.logprob, abs=1e-5)
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob
    verdict = reply.model_extra["verdict"]
    assert set(verdict) == VERDICT_KEYS
    assert verdict["status"] in {"verified", "not_verified", "out_of_scope"}
    assert verdict["reason"] and verdict["exemplars"] and {"id", "label", "label_text", "text"} <= set(verdict["exemplars"][0])
    # the turn's monitor reading, as the chat reads it: the stored reading's level and action, and its own risks
    monitor = reply.model_extra["monitor"]
    stored = served.store.messages(reply.model_extra["session_id"])[1].monitor
    assert monitor["level"] == stored.level.value and monitor["action"] == stored.action.value
    assert (monitor["degenerate"] is None) == (degenerate_answer(choice.message.content) is None)
    # stored in the chat's store, under the conversation's own session
    session_id = reply.model_extra["session_id"]
    messages = served.store.messages(session_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].text == choice.message.content
    assert messages[1].verdict_status.value == verdict["status"] and messages[1].features is not None
    assert messages[0].metadata.source == messages[1].metadata.source == "api:chat"  # who asked, typed
    if verdict["status"] != "verified":  # not verified: in the TUI's review queue, its entry's id in the response
        [queued] = served.store.review_queue.review_items(session_id=session_id)
        assert queued.message_id == messages[1].id and reply.model_extra["review_id"] == queued.id
    else:
        assert reply.model_extra["review_id"] is None
    # the same conversation id keeps to the same session
    again = served.client().chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4, user="conv-nonstream")
    assert again.model_extra["session_id"] == session_id
    assert len(served.store.messages(session_id)) == 4


def test_stream_sends_tokens_then_the_verdict_in_the_last_chunk(served):
    client = served.client()
    whole = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=10)
    chunks = list(client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=10, stream=True,
                                                 logprobs=True, stream_options={"include_usage": True}))
    usage = chunks.pop()  # include_usage: a last chunk with no choices
    assert usage.choices == [] and usage.usage.completion_tokens == whole.usage.completion_tokens
    last = chunks[-1]
    assert last.choices[0].finish_reason == whole.choices[0].finish_reason
    assert last.model_extra["verdict"] == whole.model_extra["verdict"] | {"verifier": last.model_extra["verdict"]["verifier"]}
    assert last.model_extra["monitor"]["level"] == whole.model_extra["monitor"]["level"]
    assert all("verdict" not in (c.model_extra or {}) for c in chunks[:-1])
    review_id = last.model_extra["review_id"]  # the streamed answer's own review-queue entry (None: not queued)
    assert review_id is None or served.store.review_queue.review_item(review_id).answer == "".join(
        c.choices[0].delta.content or "" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == whole.choices[0].message.content  # greedy: the stream equals the whole answer
    tokens = [t for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert len(tokens) == whole.usage.completion_tokens


def test_verify_judges_an_answer_made_elsewhere_and_review_changes_it_at_once(served, tmp_path):
    body = {"model": MODEL, "messages": QUESTION, "completion": '{"correctness": true}'}
    headers = {"X-Session-Id": "verify-review"}
    status, first, _ = served.raw("/verify", json.dumps(body).encode(), headers=headers)
    assert status == 200 and first["object"] == "verification" and set(first["verdict"]) == VERDICT_KEYS
    assert first["verdict"]["status"] != "verified"  # the tiny verifier admits nothing
    session_id = first["session_id"]
    [item] = served.store.review_queue.review_items(session_id=session_id)
    assert served.store.message(item.message_id).text == body["completion"]
    assert served.store.message(item.message_id).metadata.source == "api:verify"
    # a review decision made by another process (its own connection to the store), as the TUI would
    with ChatStore(served.store.path) as other:
        decision = other.review_queue.record_decision(item.id, 1, note="reviewed in the TUI")
    status, second, _ = served.raw("/verify", json.dumps(body).encode(), headers=headers)
    nearest = second["verdict"]["exemplars"][0]
    assert nearest["id"] == decision.support_id and nearest["label"] == 1
    assert nearest["distance"] == pytest.approx(0.0, abs=1e-3)  # the reviewed answer itself
    assert decision.support_id not in [e["id"] for e in first["verdict"]["exemplars"]]
    with ChatStore(served.store.path) as other:
        other.review_queue.undo_last_decision()
    status, third, _ = served.raw("/verify", json.dumps(body).encode(), headers=headers)
    assert third["verdict"]["exemplars"] == first["verdict"]["exemplars"]  # undone: back to the base support set


def test_reviews_are_listed_and_decided_over_http_through_the_one_write_path(served, monkeypatch):
    """GET /v1/reviews lists the queue as `mlx-sdm review list` prints it; POST /v1/reviews/{id} decides an answer the
    server gave (recorded by record_review, as the review screen and the CLI record theirs) and the label joins the
    served verifier's support set at once; bad decisions are 4xx naming the field."""
    from mlx_sdm.executor import review as review_mod
    from tests.test_review_command import ENTRY_KEYS

    recorded: list[str] = []
    original = review_mod.record_review
    monkeypatch.setattr(review_mod, "record_review",
                        lambda store, decision, service=None: recorded.append(decision.verb) or original(store, decision, service))
    body = {"model": MODEL, "messages": QUESTION, "completion": '{"correctness": false}'}
    status, first, _ = served.raw("/verify", json.dumps(body).encode(), headers={"X-Session-Id": "http-review"})
    entry = first["review_id"]
    assert status == 200 and entry is not None  # the tiny verifier admits nothing: queued
    status, listed, _ = served.raw("/reviews?status=pending&limit=1000", b"", method="GET")
    [mine] = [e for e in listed["data"] if e["id"] == entry]
    assert status == 200 and listed["object"] == "list" and set(mine) == ENTRY_KEYS
    assert (mine["prompt"], mine["answer"], mine["status"]) == (QUESTION[0]["content"], body["completion"], "pending")

    def decide(decision: dict, review_id: object = entry) -> tuple[int, dict]:
        status, reply, _ = served.raw(f"/reviews/{review_id}", json.dumps(decision).encode())
        return status, reply

    status, accepted = decide({"decision": "accept", "note": "checked over HTTP"})
    assert status == 200 and accepted["decision"] == "accepted" and accepted["applied"] and accepted["replaced"] is None
    assert accepted["entry"]["decision"]["note"] == "checked over HTTP"
    status, second, _ = served.raw("/verify", json.dumps(body).encode(), headers={"X-Session-Id": "http-review"})
    nearest = second["verdict"]["exemplars"][0]  # the label joined the served verifier's support set at once
    assert nearest["label"] == 1 and nearest["distance"] == pytest.approx(0.0, abs=1e-3)
    status, again = decide({"decision": "reject"})
    assert status == 409 and again["error"]["code"] == "already_decided" and "accepted" in again["error"]["message"]
    status, changed = decide({"decision": "reject", "replace": True})
    assert status == 200 and (changed["decision"], changed["replaced"]) == ("rejected", "accepted")
    assert recorded == ["accept", "reject", "reject"]  # the refused one too went to the one write path, which refused it
    for bad, code, param in (({"decision": "correct"}, 400, "answer"), ({"decision": "maybe"}, 400, "decision"),
                             ({}, 400, "decision"), ({"decision": "accept", "replace": "yes"}, 400, "replace")):
        status, error = decide(bad)
        assert (status, error["error"]["param"]) == (code, param), bad
    status, error = decide({"decision": "accept"}, 999_999)
    assert status == 404 and error["error"]["code"] == "not_found" and "999999" in error["error"]["message"]
    assert served.raw("/reviews?status=maybe", b"", method="GET")[0] == 400
    assert served.raw("/reviews", b"", method="GET", headers={"Authorization": "Bearer wrong"})[0] == 401
    with ChatStore(served.store.path) as other:  # leave the shared server's support set as it was
        other.review_queue.undo_last_decision()


def test_eight_concurrent_requests_are_all_answered(served):
    client = served.client()

    def ask(i: int):
        messages = [{"role": "user", "content": f"Question number {i}: is Rome in Italy?"}]
        if i % 2:
            return "".join(c.choices[0].delta.content or "" for c in
                           client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, stream=True))
        return client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6).choices[0].message.content

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(8), timeout=120))
    assert len(answers) == 8 and all(isinstance(a, str) for a in answers)


def test_overload_answers_503_with_retry_after_then_recovers(served):
    gate = threading.Event()
    held = [served.worker.submit(lambda backend: gate.wait(30)) for _ in range(served.worker.max_pending - served.worker.pending)]
    try:
        with pytest.raises(openai.APIStatusError) as caught:
            served.client().chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4)
        assert caught.value.status_code == 503
        assert int(caught.value.response.headers["retry-after"]) >= 1
        assert caught.value.body["code"] == "server_overloaded"
    finally:
        gate.set()
    for future in held:
        future.result(timeout=30)
    reply = served.client().chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4)
    assert reply.choices[0].message.content is not None


# ---------------------------------------------------------------------- security and bad requests


def test_missing_or_wrong_api_key_is_401(served):
    with pytest.raises(openai.AuthenticationError) as caught:
        served.client(api_key="wrong").models.list()
    assert caught.value.status_code == 401 and caught.value.body["code"] == "invalid_api_key"
    request = urllib.request.Request(served.base_url + "/models")
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(request, timeout=10)
    assert missing.value.code == 401


def test_non_loopback_host_refuses_to_start_without_a_key(capsys, monkeypatch):
    from mlx_sdm.cli import main

    monkeypatch.delenv("MLX_SDM_API_KEY", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 1
    assert "--api-key" in capsys.readouterr().err
    busy = bind_socket("127.0.0.1", 0)  # a port in use: one clear line, before any model is loaded
    try:
        assert main(["serve", "--port", str(busy.getsockname()[1])]) == 1
        assert "pick another --port" in capsys.readouterr().err
    finally:
        busy.close()
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and not is_loopback("0.0.0.0")
    assert authorized("Bearer k", "k") and not authorized("Bearer x", "k") and not authorized(None, "k")


BAD_REQUESTS = [
    # (name, body, status, param)
    ("malformed JSON", b'{"model": "tiny-llama-0", "messages": [', 400, None),
    ("not an object", b"[1, 2]", 400, None),
    ("unknown model", {"model": "gpt-9", "messages": QUESTION}, 404, "model"),
    ("missing model", {"messages": QUESTION}, 400, "model"),
    ("empty message list", {"model": MODEL, "messages": []}, 400, "messages"),
    ("messages of the wrong type", {"model": MODEL, "messages": "hello"}, 400, "messages"),
    ("bad role", {"model": MODEL, "messages": [{"role": "robot", "content": "hi"}]}, 400, "messages[0].role"),
    ("content of the wrong type", {"model": MODEL, "messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    ("max_tokens of the wrong type", {"model": MODEL, "messages": QUESTION, "max_tokens": "ten"}, 400, "max_tokens"),
    ("temperature out of range", {"model": MODEL, "messages": QUESTION, "temperature": 9}, 400, "temperature"),
    ("stream of the wrong type", {"model": MODEL, "messages": QUESTION, "stream": "yes"}, 400, "stream"),
    ("top_logprobs without logprobs", {"model": MODEL, "messages": QUESTION, "top_logprobs": 2}, 400, "top_logprobs"),
    ("n > 1", {"model": MODEL, "messages": QUESTION, "n": 3}, 400, "n"),
    ("stop sequences", {"model": MODEL, "messages": QUESTION, "stop": ["\n"]}, 400, "stop"),
    ("image part", {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     400, "messages[0].content[0]"),
    ("prompt longer than the context", {"model": MODEL, "messages": [{"role": "user", "content": "word " * 2400}]},
     400, "messages"),
    ("answer budget past the context", {"model": MODEL, "messages": QUESTION, "max_tokens": 5000}, 400, "max_tokens"),
]


@pytest.mark.parametrize("name,body,status,param", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_bad_requests_get_an_openai_error_naming_the_field_and_store_nothing(served, name, body, status, param, stream):
    if isinstance(body, dict) and stream and "stream" not in body:
        body = dict(body, stream=True)
    before = _store_counts(served.store)
    code, reply, _ = served.raw("/chat/completions", body if isinstance(body, bytes) else json.dumps(body).encode())
    assert code == status, reply
    error = reply["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param
    assert _store_counts(served.store) == before  # nothing stored half


def test_bad_verify_requests_and_size_limit(served):
    before = _store_counts(served.store)
    for body, param in [({"messages": QUESTION}, "completion"), ({"messages": QUESTION, "completion": 3}, "completion"),
                        ({"messages": QUESTION, "completion": "  "}, "completion"), ({"completion": "x"}, "messages"),
                        ({"model": "other", "messages": QUESTION, "completion": "x"}, "model")]:
        code, reply, _ = served.raw("/verify", json.dumps(body).encode())
        assert code in {400, 404} and reply["error"]["param"] == param
    code, reply, _ = served.raw("/chat/completions", b" " * (MAX_BODY + 1))
    assert code == 413 and reply["error"]["code"] == "request_too_large"
    code, reply, _ = served.raw("/nowhere", b"{}")
    assert code == 404 and "error" in reply
    assert _store_counts(served.store) == before


# ---------------------------------------------------------------------- the three states, in words


def _verdict(prediction: int, admitted: bool, reason: str | None, p_lower: float | None, d: float = 0.5) -> Verdict:
    return Verdict(prediction=prediction, p_lower=p_lower, admitted=admitted, q=7, d=d, q_bin=2, reason=reason,
                   exemplars=[Exemplar(id="a", label=1, prediction=1, distance=0.1, text="an example")])


@pytest.mark.parametrize("verdict,status,code", [
    (_verdict(1, True, None, 0.97), "verified", None),
    (_verdict(0, True, None, 0.97), "not_verified", "predicted_unacceptable"),
    (_verdict(1, False, "below_threshold", 0.7), "not_verified", "below_threshold"),
    (_verdict(1, False, "index_flipped", None), "not_verified", "index_flipped"),
    (_verdict(1, False, "out_of_distribution", None, d=0.0), "out_of_scope", "out_of_distribution"),
])
def test_served_verdict_carries_the_one_rule_and_its_words(verdict, status, code):
    judged = DocumentVerdict(verdict)
    served = verdicts.verdict_body(judged, "v")
    assert (served["status"], served["reason_code"]) == (status, code)
    words = verdict_words(judged)
    assert served["reason"] == words.line and served["explanation"] == words.sentence
    assert served["verified"] == (status == "verified") and len(served["reason"].split()) <= 20
    assert set(served) == VERDICT_KEYS and served["exemplars"][0]["label_text"] == "a correct answer to a similar question"
    assert judged.to_dict()["status"] == status  # what the store keeps (the turn service records the DocumentVerdict)


def test_a_backend_that_fails_to_load_is_reported_and_jobs_fail_cleanly():
    from mlx_sdm.errors import DataError, MlxSdmError

    def broken():
        raise DataError("no such model folder", field="model")

    worker = ModelWorker(broken, max_pending=2)
    try:
        assert isinstance(worker.ready.exception(timeout=30), DataError)
        with pytest.raises(MlxSdmError, match="not loaded"):
            worker.submit(lambda backend: backend).result(timeout=30)
        assert worker.pending == 0
    finally:
        worker.shutdown()


def test_a_conversation_that_continues_reuses_the_kv_cache(served):
    client = served.client()
    first = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=6, user="conv-cache")
    follow_up = QUESTION + [{"role": "assistant", "content": first.choices[0].message.content},
                            {"role": "user", "content": "And is Rome the capital of Italy?"}]
    second = client.chat.completions.create(model=MODEL, messages=follow_up, max_tokens=6, user="conv-cache")
    cached = second.usage.prompt_tokens_details.cached_tokens
    # the first request may reuse what it shares with an earlier one (the same tokens, the same KV entries), never
    # all of its prompt; the follow-up reuses at least the whole first exchange
    assert first.usage.prompt_tokens_details.cached_tokens < first.usage.prompt_tokens
    assert first.usage.prompt_tokens < cached < second.usage.prompt_tokens


def test_a_client_that_goes_away_stops_the_generation_and_the_turn_is_stored_as_cancelled(served):
    stream = served.client().chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=1900, stream=True,
                                                     user="conv-goes-away")
    for i, chunk in enumerate(stream):
        assert chunk.choices[0].finish_reason is None
        if i == 3:
            break
    stream.close()  # the client hangs up mid-answer
    deadline = time.monotonic() + 120
    while served.worker.pending:  # bounded: the job ends at the next token once the server sees the hang-up
        assert time.monotonic() < deadline, "the generation did not stop after the client went away"
        time.sleep(0.05)
    [session] = [s for s in served.store.list_sessions() if s.title == "API · conv-goes-away"]
    answer = served.store.messages(session.id)[-1]
    assert answer.role == "assistant" and answer.status == "cancelled" and answer.token_count < 1900
    assert answer.verdict is None and answer.review_id is None  # nothing judged, nothing queued
    assert (answer.metadata.source, answer.metadata.finish_reason, answer.metadata.verdict_reason) == ("api:chat", "cancelled", None)


# ---------------------------------------------------------------------- the request log


def logged_lines(capsys, path: str, count: int, seen: list[str]) -> list[str]:
    """The request-log lines for ``path``, waiting (bounded) until ``count`` are there: a line is written
    once the response has ended, which the client may see a moment before."""
    deadline = time.monotonic() + 10
    while True:
        seen += capsys.readouterr().err.splitlines()
        lines = [line for line in seen if f" {path} " in line]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.02)


def test_each_request_is_one_log_line_with_status_time_and_verdict(served, capsys):
    import re

    seen: list[str] = []
    capsys.readouterr()
    reply = served.client().chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4)
    [line] = logged_lines(capsys, "/v1/chat/completions", 1, seen)
    status = reply.model_extra["verdict"]["status"]
    assert re.fullmatch(rf"\d\d:\d\d:\d\d POST /v1/chat/completions 200 \d+ms {status}", line), line
    chunks = list(served.client().chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4, stream=True))
    lines = logged_lines(capsys, "/v1/chat/completions", 2, seen)
    assert lines[1].endswith(f" {chunks[-1].model_extra['verdict']['status']}") and " 200 " in lines[1]
    served.raw("/verify", json.dumps({"messages": QUESTION, "completion": "{}"}).encode())
    [line] = logged_lines(capsys, "/v1/verify", 1, seen)
    assert re.search(r" POST /v1/verify 200 \d+ms (verified|not_verified|out_of_scope)$", line), line
    served.raw("/models", b"", method="GET")
    [line] = logged_lines(capsys, "/v1/models", 1, seen)
    assert re.search(r" GET /v1/models 200 \d+ms -$", line), line
    with pytest.raises(openai.AuthenticationError):
        served.client(api_key="wrong").models.list()
    line = logged_lines(capsys, "/v1/models", 2, seen)[1]
    assert re.search(r" GET /v1/models 401 \d+ms -$", line), line  # refused by the key check: logged too


def fake_worker():
    """A worker whose backend is "loaded", for building the app without a model."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    ready: Future = Future()
    ready.set_result(SimpleNamespace(model_id=MODEL, created=0))
    return SimpleNamespace(ready=ready, pending=0, submit=None)


def test_quiet_turns_the_request_log_off(capsys):
    from starlette.testclient import TestClient

    from mlx_sdm.commands.serve import ServeArgs, build_parser, server_config

    assert build_parser().parse_args(["--quiet"]).quiet and not build_parser().parse_args([]).quiet
    assert server_config(ServeArgs()).log_requests and not server_config(ServeArgs(quiet=True)).log_requests
    for config, expected in ((ServerConfig(), 1), (server_config(ServeArgs(quiet=True)), 0)):
        capsys.readouterr()
        with TestClient(build_app(fake_worker(), config)) as client:
            assert client.get("/health").status_code == 200
            assert client.get("/nowhere").status_code == 404
        err = capsys.readouterr().err
        assert len([line for line in err.splitlines() if " GET /health 200 " in line]) == expected, err
        assert len([line for line in err.splitlines() if line.endswith(" -") and " GET /nowhere 404 " in line]) == expected


def test_the_request_log_reads_the_verdict_of_json_and_streamed_answers_and_logs_a_stream_at_its_end():
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from mlx_sdm.server import sse
    from mlx_sdm.server.request_log import RequestLogMiddleware

    lines: list[str] = []
    sent: list[int] = []

    async def answer(request):
        return JSONResponse({"choices": [], "verdict": {"status": "verified"}})

    async def stream(request):
        async def chunks():
            yield sse.event({"choices": [{"delta": {"content": '"verdict"'}}]})  # the word in the text is no verdict
            sent.append(len(lines))  # nothing logged while the stream runs
            yield sse.event({"choices": [{"finish_reason": "stop"}], "verdict": {"status": "out_of_scope"}})
            yield sse.DONE
        return StreamingResponse(chunks(), media_type=sse.MEDIA_TYPE)

    async def broken(request):
        raise RuntimeError("boom")

    app = Starlette(routes=[Route("/a", answer, methods=["POST"]), Route("/s", stream), Route("/b", broken)])
    app.add_middleware(RequestLogMiddleware, write=lines.append)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.post("/a").status_code == 200
        assert client.get("/s").status_code == 200
        assert client.get("/b").status_code == 500
    import re

    assert [re.sub(r" \d+ms ", " Tms ", line.split(" ", 1)[1]) for line in lines] == [
        "POST /a 200 Tms verified", "GET /s 200 Tms out_of_scope", "GET /b 500 Tms -"]
    assert sent == [1]  # nothing logged while the stream ran: a stream is logged at its end
