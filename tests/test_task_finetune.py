"""``mlx-sdm finetune --task``: the three stages on tiny random models of three families, the folder they write
(loaded back by the chat's loader; its adapters by mlx-lm's own ``generate``), and the LoRA loss."""

from __future__ import annotations

import json
import re
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
    dataset = chat_dataset(rows, tokenizer, 2048, {})
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
    tokens, offset = chat_dataset([row], smollm2.tokenizer, 2048, {})[0]
    prompt = render_prompt(smollm2.tokenizer, row.prompt, system=row.system)
    assert tokens[:offset] == prompt
    assert smollm2.tokenizer.decode(tokens[offset:]).startswith('{"topic": "sports"}')


@pytest.mark.parametrize("family", FAMILIES)
def test_three_stages_on_a_tiny_model_and_the_folder_loads_back(tmp_path, family, monkeypatch):
    from mlx_sdm.usecases import task_finetune
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnRequest
    from mlx_sdm.usecases.loading import load_components
    from mlx_sdm.usecases.model_folder import read_model_folder
    from mlx_sdm.usecases.task_finetune import run_task_finetune

    base = save_tiny_family(tmp_path / "base", family)
    task = write_word_task(tmp_path / "words.jsonl", rows=120, shifted=20)
    if family == "llama":  # the wrong-answer share chosen on D_ca (its halves are small here: the path, not the choice)
        monkeypatch.setattr(task_finetune, "CHOICE_MIN_ROWS", 10)
    outcome = run_task_finetune(tiny_args(task, tmp_path / "tuned", base), log=lambda line: None)
    folder = read_model_folder(tmp_path / "tuned")
    assert folder.fingerprint["architecture"] == family and [t.name for t in folder.tasks] == ["words"]
    assert json.loads((folder.path(folder.entries[0].adapters) / "adapter_config.json").read_text())[
        "fine_tune_type"] == "lora"
    report = (tmp_path / "tuned" / "report.md").read_text()
    assert "| words held-out (" in report and "MiniLM + logistic regression" in report and "untuned" in report
    top = report.splitlines()[:10]  # in plain words first: right vs untuned, what was vouched for, what to do next
    assert top[2].startswith("- On 20 held-out rows it never saw, the tuned model was right ")
    assert any(line.startswith("- Next: ") for line in top)
    from mlx_sdm.usecases.finetune_report import summary_lines

    assert summary_lines(report)[0] == top[2][2:] and summary_lines(report)[-1].startswith("Next: ")
    assert outcome.lora.history and outcome.lora.rank == 8
    assert [p.name for p in (tmp_path / "tuned" / ".work").iterdir()] == ["run.json"]  # a clean folder
    choice = outcome.final.wrong_share
    assert choice is not None and choice.share in task_finetune.WRONG_SHARES
    if family == "llama":
        assert [s for s, _ in choice.tried] == list(task_finetune.WRONG_SHARES)
        assert "the share of wrong answers was chosen on D_ca alone" in report
    else:
        assert choice.tried == () and choice.share == task_finetune.WRONG_SHARES[0]

    components = load_components(str(tmp_path / "tuned"))
    pipeline = TurnPipeline(components)
    question = [{"role": "user", "content": f"{WORD_INSTRUCTION} WORD: pear 7"}]
    assert pipeline.plan(question).adapted and not pipeline.plan([{"role": "user", "content": "hello"}]).adapted
    turn = pipeline.run(TurnRequest(question))
    assert components.lm.adapters.active is False  # the turn put the base model back
    assert turn.answer.text


def test_the_wrong_answer_share_is_the_one_that_verifies_most_with_the_promise_kept():
    """pick_share: the most right answers verified on the held-back half of D_ca; a share that broke the promise
    there (None) or could not be fitted counts as none; a tie goes to the larger share; none verifying any keeps
    the largest."""
    from mlx_sdm.usecases.task_finetune import WRONG_SHARES, pick_share

    third, quarter, fifth = WRONG_SHARES
    assert pick_share([(third, 37), (quarter, 32), (fifth, 0)]).share == third
    assert pick_share([(third, 12), (quarter, 20), (fifth, None)]).share == quarter
    assert pick_share([(third, 12), (quarter, 20), (fifth, 20)]).share == quarter
    assert pick_share([(third, None), (quarter, None), (fifth, 3)]).share == fifth
    assert pick_share([(third, 0), (quarter, None), (fifth, 0)]).share == third
    assert pick_share([(third, 5)]).tried == ((third, 5),)


@pytest.fixture(scope="module")
def tuned_llama(tmp_path_factory):
    """A tiny llama fine-tuned on the word task (module-wide: the tests below only read it)."""
    from mlx_sdm.usecases.task_finetune import run_task_finetune

    root = tmp_path_factory.mktemp("tuned")
    base = save_tiny_family(root / "base", "llama")
    task = write_word_task(root / "words.jsonl", rows=200, shifted=20)
    run_task_finetune(tiny_args(task, root / "tuned", base), log=lambda line: None)
    return root


def test_mlx_lm_generate_loads_the_adapters_as_they_are(tuned_llama):
    """The folder's adapters are mlx-lm's own format: its `generate --adapter-path` answers the task with them, as
    the chat does (greedy, the same first tokens)."""
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnOptions, TurnRequest
    from mlx_sdm.usecases.loading import load_components

    prompt = f"{WORD_INSTRUCTION} WORD: pear 7"
    out = subprocess.run([sys.executable, "-m", "mlx_lm", "generate", "--model", str(tuned_llama / "base"),
                          "--adapter-path", str(tuned_llama / "tuned" / "adapters"), "--prompt", prompt,
                          "--max-tokens", "6", "--verbose", "False"], capture_output=True, text=True, check=True)
    components = load_components(str(tuned_llama / "tuned"), verifier="none")
    turn = TurnPipeline(components).run(TurnRequest([{"role": "user", "content": prompt}],
                                                    TurnOptions(max_tokens=6, enable_p_true=False)))
    assert turn.answer.text and out.stdout.strip().startswith(turn.answer.text.strip()[:6])


def test_an_everyday_turn_is_the_base_models_token_for_token(tuned_llama):
    """Every turn that is not one of the folder's tasks is answered by the base model: the same tokens as the base
    folder loaded alone (the adapters are swapped out, not scaled down)."""
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnOptions, TurnRequest
    from mlx_sdm.usecases.loading import load_components

    request = TurnRequest([{"role": "user", "content": "The quick brown fox"}], TurnOptions(max_tokens=12,
                                                                                           enable_p_true=False))
    tuned = TurnPipeline(load_components(str(tuned_llama / "tuned"))).run(request)
    plain = TurnPipeline(load_components(str(tuned_llama / "base"), verifier="none")).run(request)
    assert tuned.answer.token_ids == plain.answer.token_ids


def test_a_folder_refuses_another_base_model(tuned_llama, tmp_path):
    import shutil

    from mlx_sdm.errors import ModelMismatchError
    from mlx_sdm.usecases.loading import load_components

    other = save_tiny_family(tmp_path / "other", "llama", seed=5)
    folder = tmp_path / "tuned"
    shutil.copytree(tuned_llama / "tuned", folder)
    manifest = json.loads((folder / "mlx-sdm-model.json").read_text())
    manifest["base_model"]["spec"] = str(other)
    (folder / "mlx-sdm-model.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelMismatchError, match="head_sha256"):
        load_components(str(folder))


def test_an_out_of_date_manifest_says_what_to_do(tuned_llama, tmp_path):
    import shutil

    from mlx_sdm.errors import ArtifactError
    from mlx_sdm.usecases.loading import load_components

    folder = tmp_path / "tuned"
    shutil.copytree(tuned_llama / "tuned", folder)
    manifest = json.loads((folder / "mlx-sdm-model.json").read_text())
    (folder / "mlx-sdm-model.json").write_text(json.dumps(dict(manifest, format_version=0)))
    with pytest.raises(ArtifactError, match="format_version.*rerun `mlx-sdm finetune`"):
        load_components(str(folder))


def _run_cli(argv, capsys) -> tuple[int, str]:
    """``mlx-sdm finetune ARGV`` through cli.main (its one error handler), in this process."""
    from mlx_sdm.cli import main

    code = main(["finetune", *argv])
    return code, capsys.readouterr().err.strip()


def _rows(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.mark.parametrize("case, rows, message", [
    ("mixed fields", [{"prompt": "Q: a", "answer": {"x": 1}}, {"prompt": "Q: b", "answer": {"y": 1}}],
     r"bad.jsonl:2: field 'answer': every row must answer the same JSON field"),
    ("one class", [{"prompt": f"{WORD_INSTRUCTION} WORD: w{i}", "answer": {"fruit": True}} for i in range(80)],
     r"bad.jsonl: field 'answer': every row of task bad has the same answer \(true\)"),
    ("too few rows", [{"prompt": f"{WORD_INSTRUCTION} WORD: w{i}", "answer": {"fruit": i % 2 == 0}} for i in range(20)],
     r"bad.jsonl: task bad has 20 rows; it needs at least 58 \(a fifth is held out .*\): add 38 rows"),
    ("the same prompt twice", [{"prompt": f"{WORD_INSTRUCTION} WORD: w{i % 61}", "answer": {"fruit": i % 2 == 0}}
                               for i in range(120)],
     r"bad.jsonl: field 'answer': lines 1 and 62 have the same prompt with two answers \(True and False\)"),
    ("no shared instruction", [{"prompt": f"{i} is this a fruit? {{\"fruit\": bool}}", "answer": {"fruit": i % 2 == 0}}
                               for i in range(120)],
     r"bad.jsonl: field 'prompt': the prompts of task bad share no instruction at their start"),
])
def test_a_bad_task_file_is_one_line_naming_the_file_and_what_to_do(tmp_path, capsys, case, rows, message):
    import re

    task = _rows(tmp_path / "bad.jsonl", rows)
    code, err = _run_cli(["--task", str(task), "--out", str(tmp_path / "out"), "--quiet"], capsys)
    assert code == 1 and len(err.splitlines()) == 1 and re.search(message, err), err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_an_unknown_shipped_task_lists_the_shipped_ones(tmp_path, capsys):
    code, err = _run_cli(["--task", "bbc_topics", "--out", str(tmp_path / "out")], capsys)
    assert code == 1 and "unknown task 'bbc_topics'; shipped tasks are bbc_topic" in err


def test_a_row_too_long_for_the_context_is_named(tmp_path, capsys, monkeypatch):
    from mlx_sdm.lm import loading

    base = save_tiny_family(tmp_path / "base", "llama")
    real = loading.load_folder
    monkeypatch.setattr(loading, "load_folder", lambda *a, **k: __import__("dataclasses").replace(real(*a, **k),
                                                                                                 max_context=256))
    rows = [{"prompt": f"{WORD_INSTRUCTION} WORD: w{i}" + (" long" * 300 if i == 3 else ""),
             "answer": {"fruit": i % 2 == 0}} for i in range(120)]
    task = _rows(tmp_path / "long.jsonl", rows)
    code, err = _run_cli(["--task", str(task), "--out", str(tmp_path / "out"), "--model", str(base), "--quiet"], capsys)
    assert code == 1 and re.search(r"long.jsonl: field 'prompt': row 'long-4' is \d+ tokens with its answer; the "
                                   r"model reads at most 256", err), err


def test_a_format_1_folder_does_not_grow(tuned_llama, tmp_path, capsys):
    """A folder of one adapter set for all its tasks (format 1: what one task's run writes, and mlx-sdm wrote
    before) is refused as --out, in one line saying how to rebuild it; nothing in it changes."""
    import shutil

    folder = tmp_path / "tuned"
    shutil.copytree(tuned_llama / "tuned", folder)
    before = sorted(str(p) for p in folder.rglob("*"))
    task = write_word_task(tmp_path / "other.jsonl", rows=150)
    code, err = _run_cli(["--task", str(task), "--out", str(folder), "--model", str(tuned_llama / "base")], capsys)
    assert code == 1 and len(err.splitlines()) == 1, err
    assert "is a format-1 model folder (one adapter set for all its tasks) and cannot grow; rebuild it with " \
           "`mlx-sdm finetune --task" in err
    assert sorted(str(p) for p in folder.rglob("*")) == before


def test_a_full_disk_mid_checkpoint_keeps_the_last_good_one_and_the_rerun_resumes(tmp_path, monkeypatch):
    from mlx_sdm.errors import OutputError
    from mlx_sdm.usecases import lora_training
    from mlx_sdm.usecases.task_finetune import run_task_finetune

    base = save_tiny_family(tmp_path / "base", "llama")
    task = write_word_task(tmp_path / "words.jsonl", rows=200)
    real, calls = mx.save_safetensors, []

    def full_disk(path, arrays, *rest):
        calls.append(path)
        if "epoch-2" in path:
            raise RuntimeError(f"[save_safetensors] Failed to write {path}: No space left on device")
        return real(path, arrays, *rest)

    monkeypatch.setattr(lora_training.mx, "save_safetensors", full_disk)
    args = tiny_args(task, tmp_path / "tuned", base)
    with pytest.raises(OutputError, match="cannot write epoch 2's checkpoint .*rerun the same command"):
        run_task_finetune(args, log=lambda line: None)
    epochs = tmp_path / "tuned" / ".work" / "lora" / "rank-8"
    assert sorted(p.name for p in epochs.iterdir() if "epoch" in p.name) == ["epoch-1"]  # no half-written epoch 2
    assert json.loads((epochs / "epoch-1" / "epoch.json").read_text())["epoch"] == 1
    monkeypatch.setattr(lora_training.mx, "save_safetensors", real)
    lines: list[str] = []
    run_task_finetune(__import__("dataclasses").replace(args, keep_work=True), log=lines.append)
    assert any("rank 8 epoch 1: from the checkpoint" in line for line in lines)
    assert (tmp_path / "tuned" / "mlx-sdm-model.json").is_file()
    assert (epochs / "epoch-1" / "adapters.safetensors").is_file()  # --keep-work


def test_kill_9_mid_run_then_the_same_command_gives_the_same_adapters(tmp_path):
    """The command killed with SIGKILL right after its first LoRA epoch's checkpoint, then run again: the folder it
    finishes holds the adapters an uninterrupted run makes."""
    import os
    import signal
    import time

    base = save_tiny_family(tmp_path / "base", "llama")
    task = write_word_task(tmp_path / "words.jsonl", rows=240)
    env = dict(os.environ, PYTHONPATH=str(__import__("pathlib").Path(__file__).resolve().parents[1]))

    def command(out):
        return [sys.executable, "-m", "mlx_sdm", "finetune", "--task", str(task), "--out", str(out), "--model",
                str(base), "--lora-ranks", "8", "--lora-layers", "2", "--lora-epochs", "3", "--lora-learning-rate",
                "0.001", "--eval-rows", "20", "--no-head", "--no-baselines", "--verifier-rows", "64",
                "--quiet"]  # the adapters are what is compared: no head, a verifier fitted once

    killed = tmp_path / "killed"
    proc = subprocess.Popen(command(killed), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint = killed / ".work" / "words" / ".work" / "lora" / "rank-8" / "epoch-1" / "epoch.json"
    deadline = time.monotonic() + 300
    while not checkpoint.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert checkpoint.exists() and not (killed / "mlx-sdm-model.json").exists()
    subprocess.run(command(killed), env=env, check=True, capture_output=True)
    straight = tmp_path / "straight"
    subprocess.run(command(straight), env=env, check=True, capture_output=True)
    a = mx.load(str(killed / "adapters" / "words" / "adapters.safetensors"))
    b = mx.load(str(straight / "adapters" / "words" / "adapters.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(np.asarray(a[key]), np.asarray(b[key]), rtol=1e-5, atol=1e-6)


def test_reviews_teach_it_the_folders_tasks_on_its_base(tuned_llama, tmp_path, capsys):
    """finetune --from-reviews --model DIR: the folder's own task file and base, plus the review queue's labels on
    its answers: an edit is a training row, a rejected yes/no answer one with the other value and a known-wrong
    answer in the verifier's D_tr; answers to anything else are left out."""
    from mlx_sdm.store.chat_store import ChatStore
    from tests.stored import answer as stored_answer, judged

    store = ChatStore(tmp_path / "chat.db")
    session = store.create_session("reviews")
    for i, text in enumerate(['{"fruit": false}', '{"fruit": false}', '{"fruit": true}', "no idea"]):
        store.add_message(session.id, "user", f"{WORD_INSTRUCTION} WORD: plum r{i}" if i < 3 else "How are you?")
        store.add_turn(session.id, None, stored_answer(text, state="not_verified", verdict=judged(),
                                                       review_reasons=["below_threshold"]))
    items = sorted(store.review_queue.review_items(), key=lambda item: item.id)
    store.review_queue.record_decision(items[0].id, 1, completion='{"fruit": true}')  # edited: the gold
    store.review_queue.record_decision(items[1].id, 0)  # rejected yes/no: the other value, and a wrong answer
    store.review_queue.record_decision(items[2].id, 1)  # accepted as it is
    store.review_queue.record_decision(items[3].id, 0)  # not one of the folder's tasks
    store.close()
    out = tmp_path / "retrained"
    code, err = _run_cli(["--from-reviews", str(tmp_path / "chat.db"), "--model", str(tuned_llama / "tuned"), "--out",
                          str(out), "--lora-ranks", "8", "--lora-layers", "2", "--lora-epochs", "2",
                          "--lora-learning-rate", "0.001", "--eval-rows", "20", "--epochs", "1", "--head-rows", "20",
                          "--no-baselines", "--quiet"], capsys)
    assert code == 0, err
    report = json.loads((out / "reports" / "words" / "report.json").read_text())
    # gold: the edit (its rejected original says the same), the rejected answer's other value, the accepted one;
    # wrong: the edit's original and the rejected answer
    assert report["reviewed"] == {"words": {"gold": 3, "wrong": 2}}
    manifest = json.loads((out / "mlx-sdm-model.json").read_text())
    assert manifest["base_model"]["spec"] == str(tuned_llama / "base")
    code, err = _run_cli(["--from-reviews", str(tmp_path / "none.db"), "--model", str(tuned_llama / "tuned"),
                          "--out", str(tmp_path / "x")], capsys)
    assert code == 1 and "none.db: field '--from-reviews': no chat store here" in err


def test_qlora_trains_adapters_over_a_4_bit_base(tmp_path):
    """--quantized (QLoRA): the base stays 4-bit (mlx-lm's QuantizedLinear under each LoRA layer) and the folder
    loads back over the same 4-bit base."""
    import mlx.nn as nn

    from mlx_sdm.usecases.loading import load_components
    from mlx_sdm.usecases.task_finetune import run_task_finetune

    base = save_tiny_family(tmp_path / "base", "llama", bits=4)
    task = write_word_task(tmp_path / "words.jsonl", rows=200)
    outcome = run_task_finetune(tiny_args(task, tmp_path / "tuned", base, baselines=False), log=lambda line: None)
    assert outcome.lora.history
    lm = load_components(str(tmp_path / "tuned"), verifier="none").lm
    with lm.adapters.use(True):
        lora = [m for _, m in lm.model.named_modules() if "lora_a" in m]
        assert lora and all(isinstance(m["linear"], nn.QuantizedLinear) for m in lora)


def test_the_review_bench_reviews_only_unused_rows_and_finetune_reads_its_edits_as_gold(tmp_path):
    """scripts/bench/review_finetune.py: the questions it reviews are pool rows no split of the run uses, and its
    chat store's edits are what ``--from-reviews`` reads as gold rows of the task."""
    from mlx_sdm.network.tasks.registry import load_task
    from mlx_sdm.store.chat_store import ChatStore
    from mlx_sdm.usecases.finetune_plan import TaskFinetuneArgs, reviewed_rows, split_task

    from tests.scripts_side import load_script

    bench = load_script("bench/review_finetune.py")
    task = load_task(str(write_word_task(tmp_path / "words.jsonl", rows=800)))
    spare = bench.spare_items(task, 4, 0, 20)
    split = split_task(task, TaskFinetuneArgs(tasks=(str(task.path),), out=tmp_path / "x", train_rows=4, eval_rows=20))
    used = {i.prompt for part in (split.train, split.validation, split.verifier, split.held_out, split.shifted)
            for i in part}
    assert spare and not used & {i.prompt for i in spare}
    items = spare[:3]
    bench.write_reviews(tmp_path / "reviews.db", task, items, ["no idea", '{"fruit": maybe', "no"])
    with ChatStore(tmp_path / "reviews.db") as store:
        found = reviewed_rows(store.review_queue.training_rows(), [task])[task.name]
    assert sorted((i.prompt, i.gold) for i in found.gold) == sorted((i.prompt, i.gold) for i in items)
    assert found.wrong == ()  # answers not in the task's JSON are no known-wrong answers


def test_a_format_1_folder_still_loads_its_one_set_serving_all_its_tasks(tuned_llama):
    """What one task's run writes (and mlx-sdm wrote before folders grew): format 1, one adapter set, head and
    verifier for all its tasks; it loads as it is."""
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.usecases.loading import load_components
    from mlx_sdm.usecases.model_folder import read_model_folder

    folder = read_model_folder(tuned_llama / "tuned")
    assert folder.format_version == 1 and [e.adapters for e in folder.entries] == ["adapters"]
    components = load_components(str(tuned_llama / "tuned"))
    (only,) = components.lm.adapters.sets.values()
    assert only.path == str(tuned_llama / "tuned" / "adapters") and components.verifier is not None
    question = [{"role": "user", "content": f"{WORD_INSTRUCTION} WORD: pear 7"}]
    assert TurnPipeline(components).plan(question).adapted == only.name
