"""``mlx-sdm finetune --task``: the three stages on tiny random models of three families, the folder they write
(loaded back by the chat's loader; its adapters by mlx-lm's own ``generate``), and the LoRA loss."""

from __future__ import annotations

import json
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest

from tests.tiny_family import FAMILIES, WORD_INSTRUCTION, save_tiny_family, write_word_task


def tiny_args(task, out, base, **extra):
    from mlx_sdm.usecases.finetune_plan import TaskFinetuneArgs
    from mlx_sdm.usecases.lora_training import LoraPlan

    lora = LoraPlan(ranks=(8,), num_layers=2, max_epochs=4, learning_rate=1e-3)
    return TaskFinetuneArgs(tasks=(str(task),), out=out, model=str(base), lora=lora, eval_rows=20, head_epochs=1,
                            head_rows=20, progress=False, **extra)


def test_the_lora_loss_is_mlx_lms_on_the_answer_tokens(tiny_lm):
    """answer_loss reads the head at the answer positions only; its value equals mlx-lm's default_loss over the same
    targets (mlx-lm's mask also counts one padding target past each row's end: its span is cut by one here)."""
    from mlx_lm.tuner.trainer import default_loss, iterate_batches

    from mlx_sdm.usecases.lora_training import LoraRow, answer_batches, answer_loss, chat_dataset

    model, tokenizer = tiny_lm
    rows = [LoraRow(str(i), "t", f"Classify text number {i} please", '{"a": "%s"}' % ("x" * (i % 5)), "sys")
            for i in range(8)]
    dataset = chat_dataset(rows, tokenizer, 2048, "rows")
    for (batch, lengths), (same, index, mask) in zip(iterate_batches(dataset, 4, 2048, seed=1),
                                                     answer_batches(dataset, 4, 2048, seed=1)):
        assert mx.array_equal(batch, same).item()
        cut = mx.array(np.array(lengths.tolist()) - np.array([0, 1]))
        expected, n = default_loss(model, batch, cut)
        got, m = answer_loss(model, same, index, mask)
        assert n.item() == m.item()
        np.testing.assert_allclose(got.item(), expected.item(), rtol=1e-5)


def test_a_training_row_is_the_turns_prompt_then_the_answer(smollm2):
    """The tokens LoRA trains on start with exactly what a turn renders (lm.prompt.render_prompt: the task's
    system prompt, the question, the generation prompt), and the loss reads only what follows: the answer."""
    from mlx_sdm.lm.prompt import render_prompt
    from mlx_sdm.usecases.lora_training import LoraRow, chat_dataset

    row = LoraRow("1", "bbc_topic", "Classify the topic of the following news article. ARTICLE: Cup final tonight",
                  '{"topic": "sports"}', "You are a news topic classifier.")
    tokens, offset = chat_dataset([row], smollm2.tokenizer, 2048, "rows")[0]
    prompt = render_prompt(smollm2.tokenizer, row.prompt, system=row.system)
    assert tokens[:offset] == prompt
    assert smollm2.tokenizer.decode(tokens[offset:]).startswith('{"topic": "sports"}')


@pytest.mark.parametrize("family", FAMILIES)
def test_three_stages_on_a_tiny_model_and_the_folder_loads_back(tmp_path, family):
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnRequest
    from mlx_sdm.usecases.loading import load_components
    from mlx_sdm.usecases.model_folder import read_model_folder
    from mlx_sdm.usecases.task_finetune import run_task_finetune

    base = save_tiny_family(tmp_path / "base", family)
    task = write_word_task(tmp_path / "words.jsonl", rows=120, shifted=20)
    outcome = run_task_finetune(tiny_args(task, tmp_path / "tuned", base), log=lambda line: None)
    folder = read_model_folder(tmp_path / "tuned")
    assert folder.fingerprint["architecture"] == family and [t.name for t in folder.tasks] == ["words"]
    assert json.loads((folder.adapters / "adapter_config.json").read_text())["fine_tune_type"] == "lora"
    report = (tmp_path / "tuned" / "report.md").read_text()
    assert "| words held-out (" in report and "MiniLM + logistic regression" in report and "untuned" in report
    assert outcome.lora.history and outcome.lora.rank == 8

    components = load_components(str(tmp_path / "tuned"))
    pipeline = TurnPipeline(components)
    question = [{"role": "user", "content": f"{WORD_INSTRUCTION} WORD: pear 7"}]
    assert pipeline.plan(question).adapted and not pipeline.plan([{"role": "user", "content": "hello"}]).adapted
    turn = pipeline.run(TurnRequest(question))
    assert components.lm.adapters.active is False  # the turn put the base model back
    assert turn.answer.text
