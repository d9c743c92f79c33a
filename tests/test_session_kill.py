"""Kill the chat engine's process (SIGKILL) in the middle of a turn and reopen the store: every
answer the engine reported as stored is there with its verdict and monitor snapshot, the store is
not corrupt, and the reopened session continues."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mlx_sdm.executor.engine import ChatEngine, EngineConfig
from mlx_sdm.store.chat_store import ChatStore
from tests.tiny_verifier import build_tiny_verifier, tiny_components

CHATTER = r"""
import sys
import mlx_sdm
from mlx_sdm.executor.engine import ChatEngine, EngineConfig
from mlx_sdm.store.chat_store import ChatStore
from tests.tiny_verifier import tiny_components

store = ChatStore(sys.argv[1])
engine = ChatEngine(EngineConfig(max_tokens=400, auq_thresholds=(1.0, 1e-9, 0.0)), store, components=tiny_components(sys.argv[2]))
engine.ready.result()
session = store.create_session("killed")
print("session", session.id, flush=True)
from mlx_sdm.lm.pieces import TokenPiece
i = 0
def on_item(ref, item):
    if isinstance(item, TokenPiece) and item.text:
        print("token", flush=True)
while True:
    r = engine.send(session.id, f"question {i}", listener=on_item).result()
    print("stored", r.message_id, r.question_id, flush=True)
    i += 1
"""


def test_kill_mid_turn_loses_nothing_stored(tmp_path):
    verifier = build_tiny_verifier(tmp_path / "verifier")
    db = tmp_path / "chat.db"
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-c", CHATTER, str(db), str(verifier)], stdout=subprocess.PIPE, text=True,
                            cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    stored, session_id, tokens_after = [], None, 0
    deadline = time.monotonic() + 60
    try:
        for line in proc.stdout:
            kind, *rest = line.split()
            if kind == "session":
                session_id = rest[0]
            elif kind == "stored":
                stored.append((int(rest[0]), int(rest[1])))
                tokens_after = 0
            elif kind == "token":
                tokens_after += 1
            # kill in the middle of the third turn's generation
            if (len(stored) >= 2 and tokens_after >= 5) or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL and len(stored) >= 2

    store = ChatStore(db)
    assert store.db.integrity_check() == "ok"
    msgs = {m.id: m for m in store.messages(session_id)}
    for answer_id, user_id in stored:
        assert msgs[user_id].role == "user"
        answer = msgs[answer_id]
        assert answer.verdict_status in {"verified", "not_verified", "out_of_scope"} and answer.monitor.level.value == "medium"
        assert answer.features is not None and answer.token_count > 0
    # the turn that was killed: its question and the answer so far (marked interrupted, text kept)
    *_, question, cut = msgs.values()
    assert question.role == "user" and cut.role == "assistant" and cut.status == "interrupted" and cut.text
    assert cut.verdict is None and cut.review_id is None
    assert all(m.role == "user" or m.id in {a for a, _ in stored} | {cut.id} for m in msgs.values())

    engine = ChatEngine(EngineConfig(max_tokens=4), store, components=tiny_components(verifier))
    try:
        engine.ready.result(60)
        result = engine.send(session_id, "still there?").result(60)
        assert result.outcome.status in {"done", "paused", "aborted"}
        assert store.messages(session_id)[-1].id == result.message_id
    finally:
        engine.shutdown()
