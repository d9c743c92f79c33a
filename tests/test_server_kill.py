"""kill -9 of a `mlx-sdm serve` process in the middle of a stream leaves the chat store consistent:
finished turns are whole (answer + verdict + review entry), the killed one left no half answer, and
the store opens and passes SQLite's integrity check."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from mlx_sdm.store.chat_store import ChatStore  # noqa: E402
from tests.tiny_verifier import build_tiny_verifier  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODEL = "tiny-llama-0"
QUESTION = [{"role": "user", "content": "Paris is the capital of France. Is this claim true or false?"}]
SERVER = """
import sys
from mlx_sdm.commands.serve import ServeArgs, run_server
from tests.tiny_verifier import tiny_components
sys.exit(run_server(ServeArgs(port=0, db=sys.argv[1], max_tokens=8), components=tiny_components(sys.argv[2], max_context=8192)))
"""


def _start(db: Path, verifier: Path) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env.pop("MLX_SDM_API_KEY", None)
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(db), str(verifier)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    seen = []
    while True:
        try:
            line = lines.get(timeout=120)
        except queue.Empty:
            proc.kill()
            pytest.fail("the server did not start within 120 s:\n" + "".join(seen))
        seen.append(line)
        if "listening on " in line:
            return proc, line.split("listening on ")[1].split()[0]


def test_kill_9_mid_stream_leaves_the_store_consistent(tmp_path):
    verifier = build_tiny_verifier(tmp_path / "verifier")
    db = tmp_path / "chat.db"
    proc, base_url = _start(db, verifier)
    try:
        client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=60)
        done = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=6, user="finished")
        stream = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=6000, stream=True, user="killed")
        received = []
        for chunk in stream:
            received.append(chunk)
            assert chunk.choices[0].finish_reason is None, "the answer ended before the kill; raise max_tokens"
            if len(received) == 5:
                os.kill(proc.pid, signal.SIGKILL)
                break
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)

    with ChatStore(db) as store:
        assert store.db.integrity_check() == "ok"
        sessions = {s.title: s for s in store.list_sessions()}
        finished = store.messages(done.model_extra["session_id"])
        assert [m.role for m in finished] == ["user", "assistant"]
        assert finished[1].text == done.choices[0].message.content
        assert finished[1].verdict_status.value == done.model_extra["verdict"]["status"]
        # the killed stream stored nothing half: no answer, and no lone user message either
        assert "API · killed" not in sessions or store.messages(sessions["API · killed"].id) == []
        for item in store.review_queue.review_items():  # every review entry points at a whole answer with its verdict
            message = store.message(item.message_id)
            assert message.role == "assistant" and message.verdict is not None
