"""`mlx-sdm serve` on the embedded SmolLM2 with the shipped BBC topic verifier, driven by the `openai`
client: the GM article of docs/verifiers.md gets a verified answer that ends at the judged JSON unit, and
`/v1/verify` rejects a wrong topic made "elsewhere" (the rugby article answered "business")."""

from __future__ import annotations

import json

import pytest

from mlx_sdm.network.verdict import VerdictStatus

pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from mlx_sdm.network.encoding import TOPIC  # noqa: E402
from mlx_sdm.network.verifier import DocumentVerifier  # noqa: E402
from mlx_sdm.resources import TOPIC_VERIFIER_NAME, shipped  # noqa: E402
from tests.test_server import ThreadServer  # noqa: E402
from tests.test_verifier_topic import BUSINESS_ARTICLE, MODEL_ANSWER, SPORTS_ARTICLE  # noqa: E402

pytestmark = pytest.mark.smollm2


@pytest.fixture(scope="module")
def topic_server(smollm2, tmp_path_factory):
    from mlx_sdm.turn.values import TurnComponents

    directory = shipped(TOPIC_VERIFIER_NAME)
    if not (directory / "verifier.json").is_file():
        pytest.fail("weights/smollm2-bbc-topic is missing; rebuild it with scripts/build_topic_verifier.py")

    def components(config):
        verifier = DocumentVerifier.load(directory, expect_fingerprint=smollm2.fingerprint)
        return TurnComponents(lm=smollm2, verifier=verifier, verifier_path=str(directory))

    server = ThreadServer(tmp_path_factory.mktemp("serve-smollm2"), components=components, max_tokens=24)
    yield server
    server.close()


def test_the_readme_article_gets_a_verified_answer_that_ends_at_the_judged_unit(topic_server):
    reply = topic_server.client().chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": TOPIC.user_message(BUSINESS_ARTICLE)}])
    assert reply.choices[0].message.content == MODEL_ANSWER and reply.choices[0].finish_reason == "stop"
    verdict = reply.model_extra["verdict"]
    assert verdict["status"] == "verified" and verdict["p_lower"] >= 0.95 and verdict["reason"].startswith("Verified")
    assert verdict["exemplars"][0]["text"]
    stored = topic_server.store.messages(reply.model_extra["session_id"])[-1]
    assert stored.verdict_status is VerdictStatus.VERIFIED and stored.review_id is None  # verified: not in the review queue


def test_verify_rejects_a_wrong_topic_made_elsewhere(topic_server):
    body = {"messages": [{"role": "user", "content": TOPIC.user_message(SPORTS_ARTICLE)}], "completion": MODEL_ANSWER}
    status, reply, _ = topic_server.raw("/verify", json.dumps(body).encode())
    assert status == 200
    verdict = reply["verdict"]
    assert verdict["status"] == "not_verified" and verdict["reason_code"] == "predicted_unacceptable"
    stored = topic_server.store.messages(reply["session_id"])[-1]
    assert stored.review_id is not None  # in the TUI's review queue
