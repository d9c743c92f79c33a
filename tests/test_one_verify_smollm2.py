"""One verify: `mlx-sdm verify` on text rows, `/v1/verify` and the chat give the same verdict for the
same question and answer under the same defaults (the shipped suite verifier on the embedded SmolLM2),
on 20 pairs: held-out news articles with their right and a wrong topic, a FEVER claim, everyday pairs."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("uvicorn")

from tests.test_server import ThreadServer  # noqa: E402
from mlx_sdm.turn.values import TurnRequest  # noqa: E402

pytestmark = pytest.mark.smollm2


def _pairs() -> list[tuple[str, str]]:
    from mlx_sdm.network.tasks.registry import load_task

    pairs = []
    for item in load_task("bbc_topic").split("held_out", size=8):
        wrong = "business" if item.gold != "business" else "sports"
        pairs += [(item.prompt, json.dumps({"topic": item.gold})), (item.prompt, json.dumps({"topic": wrong}))]
    fever = ("Check the following document for hallucinations and/or factual inaccuracies. Respond using the "
             'following JSON: {"correctness": bool}. DOCUMENT: The Eiffel Tower is in Rome.')
    return pairs + [(fever, '{"correctness": false}'), ("What is the capital of Australia?", "Canberra."),
                    ("Give me three tips for sleeping better.", "1. Keep a schedule. 2. No screens. 3. Dark room."),
                    ("Is Paris in France?", "Yes.")]


@pytest.fixture(scope="module")
def suite(smollm2, tmp_path_factory):
    from mlx_sdm.network.verifier import DocumentVerifier
    from mlx_sdm.resources import default_verifier_dir
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnComponents

    directory = default_verifier_dir()

    def components(config=None):
        verifier = DocumentVerifier.load(directory, expect_fingerprint=smollm2.fingerprint)
        return TurnComponents(lm=smollm2, verifier=verifier, verifier_path=str(directory))

    server = ThreadServer(tmp_path_factory.mktemp("one-verify"), components=components, max_tokens=8)
    yield directory, TurnPipeline(components()), server
    server.close()


def test_verify_rows_the_server_and_the_chat_agree(suite, smollm2_shared, tmp_path):
    from mlx_sdm.usecases.verifiers import verify_text_rows  # (its model: the session's SmolLM2, tests/conftest.py)

    directory, pipeline, server = suite
    pairs = _pairs()
    assert len(pairs) >= 20
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": p, "completion": c}) + "\n" for p, c in pairs))
    cli = verify_text_rows(directory, rows, explain=0)
    statuses = set()
    for (prompt, completion), row in zip(pairs, cli):
        messages = [{"role": "user", "content": prompt}]
        chat = pipeline.judge_text(TurnRequest(messages), completion).verdict
        status, reply, _ = server.raw("/verify", json.dumps({"messages": messages, "completion": completion}).encode())
        served = reply["verdict"]
        assert status == 200 and row["status"] == chat.status.value == served["status"], (prompt[:60], completion)
        assert row["line"] == served["reason"] and row["explanation"] == served["explanation"]
        assert row["badge"] == served["badge"]
        if row["p_lower"] is not None:
            assert abs(row["p_lower"] - served["p_lower"]) < 1e-4
        statuses.add(row["status"])
    assert {"verified", "not_verified", "out_of_scope"} <= statuses  # the pairs exercise every state
