"""The second look's agreement features (mlx_sdm/network/second_look.py) on hand-written answers."""

import numpy as np
import pytest

from mlx_sdm.network.second_look import (FEATURE_NAMES, SecondLook, agreement_features, agreement_matrix,
                                         embedding_agreement, first_sentence, lexical_agreement, new_content_words)

Q = "What is the capital of Japan?"


def look(answer, drawn, lp=-0.2, drawn_lp=None):
    return SecondLook(Q, answer, tuple(drawn), lp, tuple(drawn_lp or [-0.5] * len(drawn)))


def one_hot_embed(texts):
    """Unit vectors that are equal exactly when the texts' new content words are: a stand-in for MiniLM."""
    keys = sorted({tuple(sorted(new_content_words(t, Q))) for t in texts})
    out = np.zeros((len(texts), len(keys)), np.float32)
    for i, t in enumerate(texts):
        out[i, keys.index(tuple(sorted(new_content_words(t, Q))))] = 1.0
    return out


def test_first_sentence_keeps_decimals_and_stops_at_a_line_break():
    assert first_sentence("The capital of Japan is Tokyo. It is big.") == "The capital of Japan is Tokyo."
    assert first_sentence("It is 1.5 metres long. Yes.") == "It is 1.5 metres long."
    assert first_sentence("Tokyo\nmore") == "Tokyo"
    assert first_sentence("Tokyo") == "Tokyo"


def test_new_content_words_leave_out_the_question_and_function_words():
    assert new_content_words("The capital of Japan is Tokyo.", Q) == {"tokyo"}
    assert new_content_words("The capital of Japan is the capital.", Q) == frozenset()


@pytest.mark.parametrize("answer, drawn, lexical, full", [
    ("The capital of Japan is Tokyo.", ["Tokyo is the capital of Japan."] * 6, 1.0, 1.0),
    ("The capital of Japan is Tokyo.", ["Tokyo."] * 3 + ["It is Kyoto."] * 3, 0.5, 0.5),
    ("Japan's capital is Tokyo City.", ["Tokyo.", "Tokyo City.", "Osaka."], (0.5 + 1 + 0) / 3, 1 / 3),
    ("The capital of Japan is the capital.", ["Tokyo."] * 3, 0.0, 0.0),  # no new content word: no agreement
    ("The capital of Japan is Tokyo. Kyoto was.", ["Kyoto. Tokyo."], 0.0, 0.0),  # first sentences only
])
def test_lexical_agreement_is_the_share_of_new_content_words_repeated(answer, drawn, lexical, full):
    got = lexical_agreement(look(answer, drawn))
    assert got[0] == pytest.approx(lexical, abs=1e-12) and got[1] == pytest.approx(full, abs=1e-12)


def test_embedding_agreement_and_spread():
    same = look("Tokyo.", ["It is Tokyo."] * 4)
    assert embedding_agreement(same, one_hot_embed) == pytest.approx((1.0, 0.0))
    mixed = look("Tokyo.", ["Tokyo.", "Kyoto.", "Osaka.", "Nara."])
    cosine, spread = embedding_agreement(mixed, one_hot_embed)
    assert cosine == pytest.approx(0.25)
    assert spread == pytest.approx(1.0)  # four different answers: every pair orthogonal


def test_the_feature_vector_and_the_batched_matrix_agree():
    looks = [look("The capital of Japan is Tokyo.", ["Tokyo."] * 3 + ["Kyoto."] * 3, lp=-0.1, drawn_lp=[-1, -2, -3, -1, -2, -3]),
             look("It is Osaka.", ["Nara.", "Kyoto.", "Osaka."])]
    rows = agreement_matrix(looks, one_hot_embed)
    assert rows.shape == (2, len(FEATURE_NAMES))
    for r, x in zip(rows, looks):
        np.testing.assert_allclose(r, agreement_features(x, one_hot_embed), atol=1e-6)
    assert rows[0][FEATURE_NAMES.index("answer_logprob")] == pytest.approx(-0.1)
    assert rows[0][FEATURE_NAMES.index("drawn_logprob")] == pytest.approx(-2.0)
    assert rows[0][FEATURE_NAMES.index("lexical_agreement")] == pytest.approx(0.5)
