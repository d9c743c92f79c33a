"""The shipped head's recipe (weights/smollm2-suite-head/finetune.yaml) loads through `mlx-sdm finetune`'s
config layer and resolves to the run the head came from: the same documents (the manifest's data hash),
the same sizes and the same training settings, without retraining (a 29-minute run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlx_sdm.usecases.head_training import build_config, load_documents, read_config_file
from mlx_sdm.errors import DataError
from mlx_sdm.network.data import documents_hash

HEAD = Path(__file__).resolve().parents[1] / "weights" / "smollm2-suite-head"


@pytest.fixture(scope="module")
def config():
    return build_config(read_config_file(HEAD / "finetune.yaml"), {}, source=str(HEAD / "finetune.yaml"))


def test_the_recipe_resolves_to_the_heads_documents(config):
    manifest = json.loads((HEAD / "manifest.json").read_text())
    train, calibration = load_documents(config, tokenizer=None)
    assert (len(train), len(calibration), sum(d.label for d in train)) == (200, 132, 108)
    assert documents_hash(list(train) + list(calibration)) == manifest["data_hash"]


def test_the_recipe_holds_the_heads_training_settings(config):
    manifest = json.loads((HEAD / "manifest.json").read_text())
    assert config.args.epochs == manifest["epochs"] == 2
    assert (config.args.learning_rate, config.args.batch_size, config.args.warmup_epochs) == (1e-2, 50, 0)
    assert (config.args.seed, config.args.beta_min, config.args.beta_max) == (235, 0.0, 0.1)
    assert manifest["verifier"]["name"] == Path(config.verifier).name == "smollm2-suite"


def test_a_task_size_that_is_not_a_number_names_its_key(tmp_path):
    with pytest.raises(DataError) as info:
        build_config({"task_train_sizes": {"bbc_topic": "many"}}, {}, source="f.yaml")
    assert info.value.field == "task_train_sizes" and info.value.path == "f.yaml"
