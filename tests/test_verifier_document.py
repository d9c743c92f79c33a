"""DocumentVerifier: verdicts from LM features, the model fingerprint, save/load, the shipped default."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.errors import ArtifactError, DataError, ModelMismatchError
from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE
from mlx_sdm.lm.generation import GenerationConfig, generate_with_features
from mlx_sdm.network.verifier import DEFAULT_VERIFIER_DIR, DocumentVerifier
from tests.tiny_verifier import build_tiny_verifier, tiny_loaded_model


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    path = build_tiny_verifier(tmp_path_factory.mktemp("v") / "verifier")
    return tiny_loaded_model(), path


def test_generation_and_force_decoding_get_the_same_verdict(tiny_setup):
    lm, path = tiny_setup
    verifier = DocumentVerifier.load(path, expect_fingerprint=lm.fingerprint)
    assert verifier.recipe.delimiter == DELIMITER_JSON_CLOSE
    result = generate_with_features(lm, "Paris is the capital of France. Check the claim.",
                                    GenerationConfig(max_tokens=12, delimiter=DELIMITER_JSON_CLOSE))
    from_generation = verifier.verify_features(result.features, explain=3)
    forced = verifier.verify_text(lm, "Paris is the capital of France. Check the claim.", result.tokens, explain=3)
    assert (from_generation.prediction, from_generation.q, from_generation.admitted) == (forced.prediction, forced.q, forced.admitted)
    assert from_generation.d == pytest.approx(forced.d, abs=1e-3)
    assert len(forced.exemplars) == 3 and forced.exemplars[0].text
    assert from_generation.prediction in (0, 1)


def test_other_model_is_refused(tiny_setup):
    lm, path = tiny_setup
    other = tiny_loaded_model(seed=1)
    with pytest.raises(ModelMismatchError, match="head_sha256"):
        DocumentVerifier.load(path, expect_fingerprint=other.fingerprint)
    verifier = DocumentVerifier.load(path)
    with pytest.raises(ModelMismatchError):
        verifier.verify_text(other, "Paris is the capital of France.", '{"correctness": true}')


def test_bad_folders_are_explained(tmp_path, tiny_setup):
    with pytest.raises(ArtifactError, match="not a document verifier folder"):
        DocumentVerifier.load(tmp_path)
    (tmp_path / "verifier.json").write_text("{broken")
    with pytest.raises(ArtifactError, match="corrupt"):
        DocumentVerifier.load(tmp_path)
    (tmp_path / "verifier.json").write_text(json.dumps({"format_version": 99}))
    with pytest.raises(ArtifactError, match="format_version"):
        DocumentVerifier.load(tmp_path)


def test_failed_save_keeps_the_previous_verifier(tmp_path, tiny_setup, monkeypatch):
    lm, path = tiny_setup
    verifier = DocumentVerifier.load(path)
    target = tmp_path / "kept"
    verifier.save(target)
    before = (target / "verifier.json").read_text()

    def boom(directory):
        raise OSError("disk full")

    monkeypatch.setattr(verifier.estimator, "save", boom)
    with pytest.raises(OSError):
        verifier.save(target)
    assert (target / "verifier.json").read_text() == before
    assert DocumentVerifier.load(target, expect_fingerprint=lm.fingerprint).estimator.input_dim == 64


def test_feature_width_must_match_the_model(tiny_setup):
    lm, _ = tiny_setup
    wrong = LabelledSet(["a", "b"], np.zeros((2, 10), np.float32), np.array([0, 1]))
    with pytest.raises(DataError, match="width 10"):
        DocumentVerifier.fit_features(lm.fingerprint, wrong, wrong)


@pytest.mark.smollm2
def test_shipped_default_verifier(smollm2, tiny_setup):
    if not (DEFAULT_VERIFIER_DIR / "verifier.json").is_file():
        pytest.fail(f"{DEFAULT_VERIFIER_DIR} is missing from weights/")
    size = sum(f.stat().st_size for f in DEFAULT_VERIFIER_DIR.rglob("*") if f.is_file())
    assert size <= 30e6
    verifier = DocumentVerifier.load(DEFAULT_VERIFIER_DIR, expect_fingerprint=smollm2.fingerprint)
    assert verifier.estimator.input_dim == 2 * 576 and verifier.recipe.delimiter == DELIMITER_JSON_CLOSE
    with pytest.raises(ModelMismatchError):
        DocumentVerifier.load(DEFAULT_VERIFIER_DIR, expect_fingerprint=tiny_setup[0].fingerprint)
    verdict = verifier.verify_text(
        smollm2,
        "Check the following document for hallucinations and/or factual inaccuracies. Respond using the following "
        'JSON: {"correctness": bool}. DOCUMENT: On June 2017, the following claim was made: Paris is in France.',
        '{"correctness": true}',
    )
    assert verdict.prediction in (0, 1) and (verdict.p_lower is None) == (not verdict.admitted)
