"""A process killed (SIGKILL) in the middle of writing leaves a store with every committed write
and no corruption."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.store.turn_writer import Question, TurnWriter
from tests.stored import answer as stored_answer, judged, reading

WRITER = r"""
import sys
import numpy as np
from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.store.turn_writer import Question
from tests.stored import answer, judged, reading

store = ChatStore(sys.argv[1])
session = store.create_session("killed")
print("session", session.id, flush=True)
i = 0
while True:
    mid = store.add_turn(session.id, Question(f"question {i}"), answer(
        f"answer {i} " + "x" * 2000, tokens=["a"] * 50, logprobs=[-0.1] * 50,
        features=np.full(256, i, dtype=np.float32), feature_model="m", state="not_verified",
        verdict=judged(), monitor=reading("high"),
        review_reasons=["below_threshold"],
    )).message_id
    print("committed", i, mid, flush=True)
    i += 1
"""


def test_sigkill_mid_write_loses_nothing_committed(tmp_path):
    db = tmp_path / "chat.db"
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    committed = []
    session_id = None
    deadline = time.monotonic() + 30
    try:
        for line in proc.stdout:
            parts = line.split()
            if parts[0] == "session":
                session_id = parts[1]
            elif parts[0] == "committed":
                committed.append((int(parts[1]), int(parts[2])))
            if len(committed) >= 40 or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGKILL)  # mid-way through the next write
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert len(committed) >= 5, "the writer did not get going"

    store = ChatStore(db)
    assert store.db.integrity_check() == "ok"
    answers = [m for m in store.messages(session_id) if m.role == "assistant"]
    by_id = {m.id: m for m in answers}
    for i, mid in committed:  # every write the writer saw commit is there, whole
        m = by_id[mid]
        assert m.text.startswith(f"answer {i} ") and m.verdict == judged() and m.verdict.reason == "below_threshold"
        assert m.monitor == reading("high") and m.token_count == 50
        np.testing.assert_array_equal(m.features, np.full(256, i, dtype=np.float32))
    # an answer is never there without its verdict and queue entry, nor a question without its answer (one
    # transaction each turn)
    assert all(m.verdict is not None and m.review_id is not None for m in answers)
    assert [m.role for m in store.messages(session_id)] == ["user", "assistant"] * len(answers)
    assert len(store.review_queue.review_items()) == len(answers) >= len(committed)
    # and the store takes new writes
    store.add_message(session_id, "user", "after the crash")
    assert store.messages(session_id)[-1].text == "after the crash"


PARTIAL_WRITER = r"""
import sys
from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.store.turn_writer import Question, TurnWriter

store = ChatStore(sys.argv[1])
session = store.create_session()
answer_id = TurnWriter(store.answers, session.id, Question("tell me a long story"), partial=True).message_id
print("session", session.id, answer_id, flush=True)
text = ""
i = 0
while True:
    text += f"word{i} "
    if store.answers.update_partial(answer_id, text, force=True):
        print("partial", text.strip(), flush=True)
    i += 1
"""


def test_sigkill_mid_answer_keeps_the_partial_text_marked_interrupted(tmp_path):
    db = tmp_path / "chat.db"
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", PARTIAL_WRITER, str(db)], stdout=subprocess.PIPE, text=True, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    seen, session_id, answer_id = "", None, None
    deadline = time.monotonic() + 30
    try:
        for line in proc.stdout:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "session":
                session_id, answer_id = rest.split()[0], int(rest.split()[1])
            elif kind == "partial":
                seen = rest
            if seen.count("word") >= 20 or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGKILL)  # mid-answer
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL and seen.count("word") >= 20

    store = ChatStore(db)  # opening marks what the dead process was writing
    assert store.db.integrity_check() == "ok"
    user, answer = store.messages(session_id)
    assert user.text == "tell me a long story" and answer.id == answer_id
    assert answer.status == "interrupted" and answer.finished_at is not None
    assert answer.text.startswith(seen)  # every committed word; maybe one more update after the last we saw
    assert store.get_session(session_id).title == "tell me a long story"


def test_a_live_writers_answer_is_not_marked_interrupted_and_finishes_in_place(tmp_path):
    db = tmp_path / "chat.db"
    writer = ChatStore(db)
    session = writer.create_session()
    turn = TurnWriter(writer.answers, session.id, Question("hello"), partial=True)
    answer_id = turn.message_id
    assert writer.answers.update_partial(answer_id, "Hel") and not writer.answers.update_partial(answer_id, "Hell")  # throttled
    assert writer.answers.update_partial(answer_id, "Hello", force=True)
    reader = ChatStore(db)  # another open while this process still writes
    assert reader.messages(session.id)[-1].status == "in_progress" and reader.messages(session.id)[-1].text == "Hello"
    mid = turn.finish(stored_answer(
        "Hello there.", tokens=["Hello", " there."], logprobs=[-0.1, -0.2],
        state="not_verified", verdict=judged(p_lower=0.2),
        review_reasons=["below_threshold"])).message_id
    answer = reader.messages(session.id)[-1]
    assert mid == answer_id and answer.status == "done" and answer.text == "Hello there." and answer.token_count == 2
    assert answer.verdict_status == "not_verified" and answer.review_id is not None
    import pytest

    from mlx_sdm.errors import DataError
    with pytest.raises(DataError, match="not an answer being written"):
        writer.answers.update_partial(answer_id, "late", force=True)



def test_a_streaming_answer_keeps_answer_tokens_and_ends_done_or_failed(tmp_path):
    from mlx_sdm.lm.pieces import TokenPiece

    store = ChatStore(tmp_path / "chat.db")
    session = store.create_session()
    answer = TurnWriter(store.answers, session.id, Question("hi"), partial=True)
    for piece, phase in (("Hel", "answer"), ("lo", "answer"), ("(thinking)", "reflection")):
        answer.token(TokenPiece(piece, phase=phase))
    assert answer.text == "Hello"
    assert store.message(answer.message_id).text == "Hel" and store.message(answer.message_id).status == "in_progress"
    assert answer.finish(stored_answer("Hello.")).message_id == answer.message_id  # throttled writes: the end is whole
    assert store.message(answer.message_id).text == "Hello." and store.message(answer.message_id).status == "done"
    failed = TurnWriter(store.answers, session.id, Question("again"), partial=True)
    failed.token(TokenPiece("Part"))
    failed.fail()
    assert (store.message(failed.message_id).text, store.message(failed.message_id).status) == ("Part", "error")
    failed.fail()  # from an error handler again: nothing more
    answer.fail()  # a finished answer stays as finished
    assert store.message(answer.message_id).status == "done"
