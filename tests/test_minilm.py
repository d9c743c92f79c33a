"""all-MiniLM-L6-v2 MLX port against published reference values and known properties."""

import numpy as np
import pytest

from mlx_sdm.lm.minilm import MODEL_NAME, load_minilm
from tests.tolerance import FLOAT32_UNIT_ROUNDOFF, reordered_forward_atol

# BERT-mini: 6 layers, hidden 384, MLP 1536; outputs are unit vectors (scale 1). Two implementations
# (or a padded batch vs one sentence) differ by reduction order only: tests/tolerance.py.
REORDERED = reordered_forward_atol(1.0, width=1536, layers=6)
PRINTED_4_DECIMALS = 0.5e-4

# sentence-transformers documentation quick-start (docs/index.rst, README) for all-MiniLM-L6-v2:
# model.similarity(embeddings, embeddings) printed to four decimals.
REFERENCE_SENTENCES = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
REFERENCE_SIMILARITY = np.array([[1.0000, 0.6660, 0.1046], [0.6660, 1.0000, 0.1411], [0.1046, 0.1411, 1.0000]])


@pytest.fixture(scope="module")
def embedder():
    return load_minilm()


def test_reproduces_published_similarity_matrix(embedder):
    emb = embedder.encode(REFERENCE_SENTENCES)
    assert emb.shape == (3, 384) and emb.dtype == np.float32
    # the reference is PyTorch's result rounded to 4 decimals; a cosine of two unit vectors moves by
    # at most the sum of their errors
    np.testing.assert_allclose(emb @ emb.T, REFERENCE_SIMILARITY, atol=PRINTED_4_DECIMALS + 2 * REORDERED)


def test_unit_norm_and_metadata(embedder):
    emb = embedder.encode(["a", "", "A much longer sentence about the bank of a river in spring."])
    # v / ||v|| then ||.|| again, in float32: at most (d + 3) roundings of relative size u
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=(384 + 3) * FLOAT32_UNIT_ROUNDOFF)
    assert embedder.dim == 384 and embedder.name == MODEL_NAME
    assert load_minilm() is embedder  # cached loader


def test_paraphrase_closer_than_unrelated(embedder):
    a, b, c = embedder.encode(
        ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply on Monday."]
    )
    assert a @ b > 0.6 and a @ c < 0.2


def test_batching_and_padding_do_not_change_embeddings(embedder):
    texts = ["short", "a considerably longer sentence with many more word pieces in it", "medium length text"]
    together = embedder.encode(texts, batch_size=3)
    alone = np.concatenate([embedder.encode([t]) for t in texts])
    np.testing.assert_allclose(together, alone, atol=REORDERED)


def test_truncates_to_max_seq_length(embedder):
    long = "word " * 300
    assert embedder.max_seq_length == 256
    a, b = embedder.encode([long, long + " extra tail that is cut away"])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_rejects_bare_string(embedder):
    with pytest.raises(TypeError):
        embedder.encode("not a list")
