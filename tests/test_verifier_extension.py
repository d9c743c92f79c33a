"""A verifier that extends a shipped one (``DocumentVerifier.base_ref``): the shipped default fine-tuned folder's
verifier judges its tuned tasks with its own members and every other question with the suite verifier it extends,
kept once, by reference."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mlx_sdm.errors import ArtifactError
from mlx_sdm.network.coverage import MEMBERS_DIR
from mlx_sdm.network.verifier import BASE_REF_KEY, ESTIMATOR_DIR, VERIFIER_MANIFEST, DocumentVerifier
from tests.tiny_verifier import build_tiny_verifier, tiny_loaded_model

TOPIC, SPAM, MAIL = "Classify the topic.", "Decide spam.", "Route the mail."


def _with_tasks(verifier: DocumentVerifier, *pairs: tuple[str, str], info: dict | None = None) -> DocumentVerifier:
    recipe = replace(verifier.recipe, task_systems=tuple((prefix, f"You do {name}.") for prefix, name in pairs),
                     task_names=tuple(name for _, name in pairs))
    tasks = [{"name": name, "description": name} for _, name in pairs]
    return DocumentVerifier(verifier.estimator, verifier.model_fingerprint, recipe, info or {}, tasks)


@pytest.fixture()
def shipped(tmp_path):
    """A base verifier with two tasks and an open-question member, saved where a reference can name it."""
    tiny = DocumentVerifier.load(build_tiny_verifier(tmp_path / "tiny"))
    base = _with_tasks(tiny, (TOPIC, "topic"), (SPAM, "spam"))
    base.members["open_questions"] = _with_tasks(tiny, ("Q:", "open_questions"))
    base.save(tmp_path / "suite")
    return tiny, tmp_path / "suite"


def test_an_extension_judges_its_tasks_with_its_members_and_the_rest_with_the_base(tmp_path, shipped):
    tiny, suite = shipped
    topic = _with_tasks(tiny, (TOPIC, "topic"), info={"adapters": {"sha256": "a" * 64}})
    mail = _with_tasks(tiny, (MAIL, "mail"), info={"adapters": {"sha256": "b" * 64}})
    base = DocumentVerifier.load(suite)
    base.extending(str(suite), {"topic": topic, "mail": mail}, {"tasks": ["topic", "mail"]}).save(tmp_path / "folder")

    saved = tmp_path / "folder"
    assert not (saved / ESTIMATOR_DIR).exists()  # the base's estimator is not copied
    assert sorted(p.name for p in (saved / MEMBERS_DIR).iterdir()) == ["mail", "topic"]
    loaded = DocumentVerifier.load(saved, expect_fingerprint=tiny_loaded_model().fingerprint)
    assert loaded.base_ref == str(suite)
    assert loaded.member_for("topic").info["adapters"]["sha256"] == "a" * 64
    assert loaded.member_for("spam") is loaded  # the base's top level judges spam, as it does alone
    assert loaded.member_for("open_questions").recipe.task_names == ("open_questions",)
    assert loaded.recipe.task_names == ("topic", "spam", "mail")  # the new task is routed by its instruction
    assert loaded.route(MAIL + " Hello").task == "mail"
    features = np.zeros((1, loaded.estimator.input_dim), dtype=np.float32)
    assert loaded.estimator_for("spam") is not loaded.estimator_for("topic")
    assert loaded.verify_features(features).prediction == base.verify_features(features).prediction

    loaded.save(tmp_path / "again")  # saved again: still the reference and the two members
    again = DocumentVerifier.load(tmp_path / "again")
    assert again.base_ref == str(suite) and sorted(p.name for p in (tmp_path / "again" / MEMBERS_DIR).iterdir()) == \
        ["mail", "topic"]


def test_an_extension_whose_base_is_not_installed_is_refused_in_one_line(tmp_path, shipped):
    tiny, suite = shipped
    DocumentVerifier.load(suite).extending(str(suite), {}, {}).save(tmp_path / "folder")
    manifest = (tmp_path / "folder" / VERIFIER_MANIFEST)
    manifest.write_text(manifest.read_text().replace(str(suite), str(tmp_path / "gone")))
    with pytest.raises(ArtifactError, match="extends the verifier at .*gone, which is not installed"):
        DocumentVerifier.load(tmp_path / "folder")
    assert BASE_REF_KEY in manifest.read_text()
