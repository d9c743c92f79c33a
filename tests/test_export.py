"""``mlx-sdm export DIR --out OUT``: a fine-tuned folder's adapters fused into its base (mlx-lm's fuse) and saved
as a plain mlx-lm model: on a tiny saved llama, the fused model's greedy tokens are the adapted model's; --gguf
writes mlx-lm's GGUF beside it; the adapter set is found as DIR/adapters/ or DIR/adapters/<task>/."""

from __future__ import annotations

import json
import shutil

import mlx.core as mx
import numpy as np
import pytest

from mlx_sdm.errors import DataError
from tests.tiny_family import WORD_INSTRUCTION, save_tiny_family


def tuned_folder(root, family: str = "llama"):
    """A fine-tuned folder as ``finetune --task`` leaves it (manifest + DIR/adapters in mlx-lm's format), with
    random non-zero LoRA weights so the fuse has something to fold in."""
    from mlx.utils import tree_flatten
    from mlx_lm.tuner.utils import linear_to_lora_layers
    from mlx_lm.utils import load

    from mlx_sdm.lm.adapters import file_sha256
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.coverage import TaskInstruction
    from mlx_sdm.usecases.model_folder import write_run_manifest

    base = save_tiny_family(root / "base", family)
    model, _ = load(str(base))
    model.freeze()
    settings = {"rank": 4, "scale": 10.0, "dropout": 0.0}
    linear_to_lora_layers(model, 2, settings)
    mx.random.seed(3)
    trainable = dict(tree_flatten(model.trainable_parameters()))
    weights = {k: mx.random.normal(v.shape) * 0.2 for k, v in trainable.items()}
    folder = root / "tuned"
    (folder / "adapters").mkdir(parents=True)
    mx.save_safetensors(str(folder / "adapters" / "adapters.safetensors"), weights)
    (folder / "adapters" / "adapter_config.json").write_text(json.dumps(
        {"fine_tune_type": "lora", "num_layers": 2, "lora_parameters": settings}))
    lm = load_model(str(base))
    write_run_manifest(folder, str(base), lm.fingerprint, (TaskInstruction(WORD_INSTRUCTION, None, "words"),),
                       file_sha256(folder / "adapters" / "adapters.safetensors"), False, has_head=False,
                       has_verifier=False, info={})
    return base, folder


def greedy(model, tokenizer, prompt: str, n: int = 12) -> list[int]:
    from mlx_lm.generate import generate_step

    tokens = mx.array(tokenizer.encode(prompt))
    out = []
    for token, _ in generate_step(tokens, model, max_tokens=n, sampler=lambda logits: mx.argmax(logits, axis=-1)):
        out.append(int(token))
    return out


def test_the_fused_model_answers_token_for_token_as_the_adapted_one(tmp_path, capsys):
    from mlx_lm.utils import load

    from mlx_sdm.cli import main

    base, folder = tuned_folder(tmp_path)
    assert main(["export", str(folder), "--out", str(tmp_path / "plain"), "--gguf"]) == 0
    out = capsys.readouterr().out
    assert "mlx_lm.generate --model" in out and "the verifier does not travel" in out
    adapted, tokenizer = load(str(base), adapter_path=str(folder / "adapters"))
    plain, plain_tokenizer = load(str(tmp_path / "plain"))  # a plain model: no adapters, no lora layers
    assert not any("lora" in name for name, _ in plain.named_modules())
    prompt = f"{WORD_INSTRUCTION} WORD: pear 7"
    assert greedy(plain, plain_tokenizer, prompt) == greedy(adapted, tokenizer, prompt)
    untuned, _ = load(str(base))
    assert greedy(untuned, tokenizer, prompt) != greedy(adapted, tokenizer, prompt)  # the adapters do change it
    gguf = mx.load(str(tmp_path / "plain" / "model.gguf"))
    assert any(name.startswith("blk.") for name in gguf)
    note = json.loads((tmp_path / "plain" / "mlx-sdm-export.json").read_text())
    assert note["verifier"] is None and note["adapters"] == "adapters"
    assert note["tasks"][0]["instruction"] == WORD_INSTRUCTION


def test_the_adapter_set_of_a_task_is_found_in_either_layout(tmp_path):
    from mlx_sdm.usecases.export_model import adapter_folder_for

    _, folder = tuned_folder(tmp_path)
    assert adapter_folder_for(folder, None, ["words"]) == folder / "adapters"
    assert adapter_folder_for(folder, "words", ["words"]) == folder / "adapters"
    with pytest.raises(DataError, match="no adapters for task 'nope' here; its tasks: words"):
        adapter_folder_for(folder, "nope", ["words"])
    per_task = tmp_path / "per-task"
    for name in ("words", "mail"):
        shutil.copytree(folder / "adapters", per_task / "adapters" / name)
    assert adapter_folder_for(per_task, "mail", ["words", "mail"]) == per_task / "adapters" / "mail"
    with pytest.raises(DataError, match=r"adapters for several tasks: name one with --task \(mail, words\)"):
        adapter_folder_for(per_task, None, ["words", "mail"])
    shutil.rmtree(per_task / "adapters" / "mail")
    assert adapter_folder_for(per_task, None, ["words"]) == per_task / "adapters" / "words"


def test_export_refuses_a_non_empty_out_and_a_gguf_of_another_architecture(tmp_path, capsys):
    from mlx_sdm.cli import main

    _, folder = tuned_folder(tmp_path, "qwen2")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("mine")
    assert main(["export", str(folder), "--out", str(tmp_path / "full")]) == 1
    assert "non-empty folder" in capsys.readouterr().err
    assert main(["export", str(folder), "--out", str(tmp_path / "g"), "--gguf"]) == 1
    err = capsys.readouterr().err
    assert "mlx-lm writes GGUF for llama, mistral, mixtral models; this one is qwen2" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "g").exists()
    np.testing.assert_equal((tmp_path / "full" / "x.txt").read_text(), "mine")
