"""A finished ``finetune --task`` run leaves a clean folder: ``DIR/.work`` (epoch checkpoints, cached answers,
the frozen blocks' hidden states) is emptied down to its run.json unless ``--keep-work`` (YAML ``keep_work: true``)."""

from __future__ import annotations

from pathlib import Path


def _task_args(argv):
    from mlx_sdm.commands.finetune import build_parser, task_values
    from mlx_sdm.usecases.finetune_plan import task_args_from

    return task_args_from(task_values(build_parser().parse_args(argv), {}), "command line")


def test_keep_work_is_a_flag_and_a_yaml_key(tmp_path):
    from mlx_sdm.usecases.finetune_plan import task_args_from

    base = ["--task", "bbc_topic", "--out", str(tmp_path / "out")]
    assert _task_args(base).keep_work is False
    assert _task_args(base + ["--keep-work"]).keep_work is True
    assert task_args_from({"task": ["bbc_topic"], "out": "x", "keep_work": True}, "f.yaml").keep_work is True


def test_clean_keeps_only_the_runs_identity(tmp_path):
    from mlx_sdm.usecases.finetune_plan import FinetuneRun, TaskFinetuneArgs

    run = FinetuneRun(TaskFinetuneArgs(tasks=("t",), out=tmp_path / "out"), log=lambda line: None)
    run.check_identity({"tasks": [["t", "h"]]})
    (run.work / "lora" / "rank-8" / "epoch-1").mkdir(parents=True)
    (run.work / "lora" / "rank-8" / "epoch-1" / "adapters.safetensors").write_bytes(b"x")
    (run.work / "answers").mkdir()
    (run.work / "lora.json").write_text("{}")
    run.clean()
    assert [p.name for p in run.work.iterdir()] == ["run.json"]
    run.clean()  # twice: nothing left to do
    FinetuneRun(TaskFinetuneArgs(tasks=("t",), out=Path(tmp_path / "none")), log=lambda line: None).clean()
