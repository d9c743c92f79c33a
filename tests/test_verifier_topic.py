"""The shipped BBC News topic verifier (weights/smollm2-bbc-topic, scripts/build_topic_verifier.py).

Two held-out articles from its report (neither is in the support set): SmolLM2, asked in the chat
with the verifier's system prompt, answers ``{"topic": "business"}`` to both. That is right for the
GM article (verified) and wrong for the rugby one (admitted as y = 0, so the chat rejects it as
predicted unacceptable).
"""


import pytest

from mlx_sdm.errors import ModelMismatchError
from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE
from mlx_sdm.network.encoding import TOPIC
from mlx_sdm.network.verifier import DocumentVerifier
from mlx_sdm.resources import TOPIC_VERIFIER_NAME, shipped

TOPIC_VERIFIER_DIR = shipped(TOPIC_VERIFIER_NAME)
SIZE_BUDGET_BYTES = 15e6
BUSINESS_ARTICLE = (
    "GM issues 2005 profits warning General Motors has warned that it expects earnings this year be lower than in "
    "2004. The world's biggest car maker is grappling with losses in its European business, and weak US sales. "
    "GM said higher"
)
SPORTS_ARTICLE = (
    "Tindall aiming to earn Lions spot Bath and England centre Mike Tindall believes he can make this summer's "
    "Lions tour, despite missing most of the season through injury. The World Cup winner has been out of action "
    "since December, having"
)
MODEL_ANSWER = '{"topic": "business"}'


@pytest.fixture(scope="module")
def topic_verifier(smollm2):
    if not (TOPIC_VERIFIER_DIR / "verifier.json").is_file():
        pytest.fail("weights/smollm2-bbc-topic is missing; rebuild it with scripts/build_topic_verifier.py")
    return DocumentVerifier.load(TOPIC_VERIFIER_DIR, expect_fingerprint=smollm2.fingerprint)


@pytest.mark.smollm2
def test_manifest_records_the_model_and_recipe(smollm2, topic_verifier):
    size = sum(f.stat().st_size for f in TOPIC_VERIFIER_DIR.rglob("*") if f.is_file())
    assert size <= SIZE_BUDGET_BYTES
    fingerprint = topic_verifier.model_fingerprint
    assert fingerprint["name"] == "smollm2" and fingerprint["head_sha256"] == smollm2.fingerprint["head_sha256"]
    assert topic_verifier.estimator.input_dim == 2 * smollm2.hidden_size
    assert topic_verifier.recipe.delimiter == DELIMITER_JSON_CLOSE
    assert "topic" in topic_verifier.recipe.system and "sports" in topic_verifier.recipe.system
    assert topic_verifier.info["task"] == "bbc_news" and topic_verifier.info["words"] == 40
    assert topic_verifier.estimator.manifest["threshold_succeeded"] is True
    wrong = dict(smollm2.fingerprint, head_sha256="0" * 64)
    with pytest.raises(ModelMismatchError):
        DocumentVerifier.load(TOPIC_VERIFIER_DIR, expect_fingerprint=wrong)


@pytest.mark.smollm2
def test_held_out_articles_get_the_right_verdicts(smollm2, topic_verifier):
    support = set(topic_verifier.estimator.support_ids)
    assert "bbc_news-business/462" not in support and "bbc_news-sports/419" not in support
    right = topic_verifier.verify_text(smollm2, TOPIC.user_message(BUSINESS_ARTICLE), MODEL_ANSWER)
    assert right.admitted and right.prediction == 1 and right.p_lower >= 0.95
    assert right.reason is None
    wrong = topic_verifier.verify_text(smollm2, TOPIC.user_message(SPORTS_ARTICLE), MODEL_ANSWER)
    assert wrong.admitted and wrong.prediction == 0 and wrong.p_lower >= 0.95


def test_topic_encoding_negatives_name_another_topic_and_views_agree():
    from mlx_sdm.network.encoding import BBC_TOPICS, encode_examples, parse_answer

    topics = [BBC_TOPICS[i % 5] for i in range(200)]
    articles = [{"id": f"a{i}", "input": f"article {i}", "target_scores": {t: 1.0}} for i, t in enumerate(topics)]
    titles = [dict(a, input=f"title {i}") for i, a in enumerate(articles)]
    docs = encode_examples("bbc", articles, TOPIC, seed=0)
    again = encode_examples("bbc", titles, TOPIC, seed=0)
    for doc, topic, twin in zip(docs, topics, again):
        given = parse_answer(doc.completion, TOPIC)
        assert doc.task_label == topic and (given == topic) == (doc.label == 1)  # negatives name another topic
        assert doc.prompt.startswith("Classify the topic") and doc.prompt.endswith(f"ARTICLE: {doc.document}")
        assert (twin.label, twin.completion) == (doc.label, doc.completion)  # same draws for the titles view
    assert 70 < sum(d.label for d in docs) < 130  # Bernoulli(0.5) over 200 articles
