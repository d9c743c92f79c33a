"""The shipped suite verifier's recipe (weights/smollm2-suite/recipe.json) resolves to the documents and
settings the shipped verifier was built from, so `mlx-sdm build-verifier --recipe` rebuilds it from any
install; a bad recipe gets one line naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlx_sdm.cli import main as cli
from mlx_sdm.usecases.suite_verifier import recipe_documents
from mlx_sdm.usecases.verifier_recipe import read_recipe, recipe_from_dict
from mlx_sdm.errors import DataError
from mlx_sdm.network.verifier import document_text

SUITE = Path(__file__).resolve().parents[1] / "weights" / "smollm2-suite"


@pytest.fixture(scope="module")
def shipped():
    from safetensors.numpy import load_file

    verifier = json.loads((SUITE / "verifier.json").read_text())
    manifest = json.loads((SUITE / "estimator" / "manifest.json").read_text())
    support = json.loads((SUITE / "estimator" / "support.json").read_text())
    labels = load_file(str(SUITE / "estimator" / "estimator.safetensors"))["support.labels"]
    return verifier, manifest, support, labels


def test_the_recipe_holds_the_shipped_settings(shipped):
    verifier, manifest, _, _ = shipped
    recipe = read_recipe(SUITE)
    info = verifier["info"]
    assert list(recipe.tasks) == info["tasks"] == [t["name"] for t in verifier["tasks"]]
    assert {t: recipe.pool_size(t) for t in recipe.tasks} == info["pool_sizes"]
    assert (recipe.test_per_task, recipe.seed) == (info["test_per_task"], info["seed"])
    fit = dict(recipe.to_dict()["fit"])
    assert fit.pop("input_scaling") == "scalar"  # the shipped estimator was fitted with the paper's scalar scaling
    assert fit == manifest["config"]
    assert recipe.model == verifier["model_fingerprint"]["name"]


def test_the_recipe_resolves_to_the_shipped_documents(shipped):
    _, _, support, labels = shipped
    docs = recipe_documents(read_recipe(SUITE / "recipe.json"))
    pool = {d.id: d for d in docs.train + docs.calibration}
    assert len(pool) == len(docs.train) + len(docs.calibration) == 1840
    assert len(support["ids"]) == 920 and set(support["ids"]) <= set(pool)  # D_tr* is a half of the pool
    assert [pool[i].label for i in support["ids"]] == [int(y) for y in np.asarray(labels)]
    assert [document_text(pool[i]) for i in support["ids"]] == support["texts"]
    assert [(t.name, split, len(d)) for t, split, d in docs.tests][:2] == [("bbc_topic", "held_out", 40),
                                                                          ("bbc_topic", "shifted", 40)]


def test_the_report_lists_the_same_test_documents(shipped):
    docs = recipe_documents(read_recipe(SUITE))
    rows = json.loads((SUITE / "report.json").read_text())["rows"]
    assert [(r["task"], r["split"], r["n"]) for r in rows] == [(t.name, s, len(d)) for t, s, d in docs.tests]


@pytest.mark.parametrize("raw, field", [
    ({"tasks": ["fever"], "colour": 1}, "colour"),
    ({"tasks": []}, "tasks"),
    ({"tasks": ["fever"], "per_task": -1}, "per_task"),
    ({"tasks": ["fever"], "fit": {"epochz": 3}}, "fit.epochz"),
    ({"tasks": ["fever"], "kind": "own_answers"}, "kind"),
])
def test_a_bad_recipe_names_the_file_and_field(raw, field):
    with pytest.raises(DataError) as info:
        recipe_from_dict(raw, "my/recipe.json")
    assert info.value.path == "my/recipe.json" and info.value.field == field


def test_a_missing_or_broken_recipe_is_one_clear_line(tmp_path):
    with pytest.raises(DataError, match="no recipe here"):
        read_recipe(tmp_path)
    (tmp_path / "recipe.json").write_text("{nope")
    with pytest.raises(DataError, match="not valid JSON"):
        read_recipe(tmp_path)


def test_the_command_refuses_a_setting_the_recipe_holds(capsys, tmp_path):

    assert cli(["build-verifier", "--recipe", str(SUITE), "--tasks", "fever", "--out", str(tmp_path / "v")]) == 2
    assert "the recipe holds --tasks" in capsys.readouterr().err
    assert not (tmp_path / "v").exists()


def test_a_recipe_build_writes_the_verifier_its_recipe_and_report(tmp_path):
    """build_from_recipe end to end on a tiny random model and a JSONL task: the verifier loads, covers the
    task, and the folder keeps the recipe it was built from and the Table 1 report."""
    from mlx_sdm.usecases.suite_verifier import build_from_recipe
    from mlx_sdm.network.verifier import DocumentVerifier
    from tests.test_build_verifier import write_task
    from tests.test_verifier_commands import save_tiny_folder

    model = save_tiny_folder(tmp_path / "tiny-model", seed=0)
    task = write_task(tmp_path / "cities.jsonl")
    recipe = recipe_from_dict({"model": str(model), "tasks": [str(task)], "per_task": 64, "test_per_task": 8,
                               "fit": {"iterations": 1, "epochs": 4}}, "test")
    out = tmp_path / "verifier"
    lines: list[str] = []
    build_from_recipe(recipe, out, plot_png=False, say=lines.append)
    assert read_recipe(out) == recipe
    verifier = DocumentVerifier.load(out)
    assert [t["name"] for t in verifier.tasks] == ["cities"] and verifier.info["pool_sizes"] == {"cities": 64}
    report = (out / "report.md").read_text()
    assert "| cities held_out (8) | p̂ lower |" in report and "build-verifier --recipe" in report
    rows = json.loads((out / "report.json").read_text())["rows"]
    assert all(f"| cities {r['split']} (8) | {r['adaptor_accuracy']:.3f} | {r['logistic_accuracy']:.3f} | "
               f"{r['adaptor_only_correct']} | {r['logistic_only_correct']} | {r['mcnemar_p']:.3g} | {r['verdict']} |"
               in report for r in rows)  # the adaptor against the probe, with the paired test
    assert lines[0] == "cities: pool 64 (y=1 %d)" % sum(d.label for d in recipe_documents(recipe).train
                                                         + recipe_documents(recipe).calibration)
