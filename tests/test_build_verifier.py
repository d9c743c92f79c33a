"""`mlx-sdm build-verifier` on a tiny random mlx-lm model saved to a folder (and once on SmolLM2).

A random tiny model never writes JSON, so the end-to-end builds script its answers with a sampler that
reads the model's own next-token distribution (the correct JSON when one log-prob beats another, else
a wrong one): the answers, and so the labels, depend on the model's states; the features are the real
ones from the same batched pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from mlx_sdm.cli import main as cli
from mlx_sdm.usecases.build_verifier import BuildVerifierArgs, build_verifier
from mlx_sdm.network.verifier import DocumentVerifier
from tests.test_verifier_commands import save_tiny_folder

ROOT = Path(__file__).resolve().parents[1]
CITIES = ["Paris", "Rome", "Oslo", "Bern"]
QUESTION = 'Which city is meant by code {i}? Respond using the following JSON: {{"city": str}}.'


def write_task(path: Path, n_main: int = 96, n_shift: int = 16) -> Path:
    rows = [{"id": f"c{i}", "prompt": QUESTION.format(i=i), "answer": {"city": CITIES[i % 4]}} for i in range(n_main)]
    rows += [{"id": f"s{i}", "prompt": f"code {i}: which city? JSON {{\"city\": str}}", "answer": {"city": CITIES[i % 4]},
              "split": "shifted"} for i in range(n_shift)]
    rows[0]["system"] = "Reply with JSON only."
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def scripted_sampler_for(tokenizer, delay_s: float = 0.0):
    """item -> sampler: answers the gold city when the model's first-step log p(token 262) is above its
    median over these prompts (-10.56 for the seed-0 tiny model), else another city."""
    eos = min(tokenizer.eos_token_ids)

    def make(item):
        queue: list[int] = []

        def sample(logprobs: mx.array) -> mx.array:
            if delay_s:
                time.sleep(delay_s)
            if not queue and not getattr(sample, "started", False):
                sample.started = True
                right = float(logprobs[0, 262]) > -10.56
                city = item.gold if right else CITIES[(CITIES.index(item.gold) + 1) % 4]
                queue.extend(tokenizer.encode(json.dumps({"city": city}), add_special_tokens=False) + [eos])
            return mx.array(queue.pop(0) if queue else eos)

        return sample

    return make


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return save_tiny_folder(tmp_path_factory.mktemp("bv") / "tiny-model", seed=0)


def _args(root: Path, model: Path, task: Path, **kw) -> BuildVerifierArgs:
    return BuildVerifierArgs(out=root / "verifier", model=str(model), tasks=[str(task)], per_task=64, eval_size=16,
                             iterations=1, epochs=8, plot=False, progress=False, **kw)


def test_build_on_tiny_folder_writes_verifier_tasks_and_report_then_reuses_the_cache(tiny_folder, tmp_path):
    from mlx_sdm.lm.loading import load_model

    task = write_task(tmp_path / "capitals.jsonl")
    sampler = scripted_sampler_for(load_model(str(tiny_folder)).tokenizer)
    args = _args(tmp_path, tiny_folder, task)
    result = build_verifier(args, sampler_for=sampler, sampler_tag="scripted", log=lambda s: None)
    assert result.generated == 64 + 16 + 16 and result.from_cache == 0
    manifest = json.loads((args.out / "verifier.json").read_text())
    assert manifest["tasks"] == [{"name": "capitals", "description": "your task from capitals.jsonl",
                                  "example_prompt": manifest["tasks"][0]["example_prompt"]}]
    assert "city" in manifest["tasks"][0]["example_prompt"]
    report = (args.out / "report.md").read_text()
    assert "| capitals held-out (16) | no-reject |" in report and "| capitals shifted (16) | p̂ lower |" in report
    rows = json.loads((args.out / "report.json").read_text())["rows"]
    assert all(r["calibrated"] for r in rows)  # the promise on held-out and shifted answers (or nothing admitted)
    # beside Table 1: the adaptor against the probe on the same rows, and whether a shortfall is real
    assert "| dataset | adaptor accuracy | logistic-regression reference | b | c | McNemar p | verdict |" in report
    for r in rows:
        assert 0 <= r["adaptor_accuracy"] <= 1 and 0 <= r["logistic_accuracy"] <= 1 and 0 < r["mcnemar_p"] <= 1
        b, c = r["adaptor_only_correct"], r["logistic_only_correct"]
        assert r["adaptor_accuracy"] - r["logistic_accuracy"] == pytest.approx((b - c) / r["size"])
        assert r["verdict"] == "adaptor ≥ probe" if b >= c else r["verdict"].startswith(f"behind by {c - b} row")
        assert f"| {r['name']} ({r['size']}) | {r['adaptor_accuracy']:.3f} | {r['logistic_accuracy']:.3f} | {b} | {c} | " \
            f"{r['mcnemar_p']:.3g} | {r['verdict']} |" in report
    labels = [a.label.label for a in result.outcomes[0].pool]
    assert 0 < sum(labels) < len(labels)  # both labels came from the model's states
    verifier = DocumentVerifier.load(args.out)
    assert verifier.recipe.system_for(QUESTION.format(i=7)) == "Reply with JSON only."
    assert verifier.recipe.system_for("something else") == "Reply with JSON only."  # one task: its system everywhere
    again = build_verifier(_args(tmp_path, tiny_folder, task), sampler_for=sampler, sampler_tag="scripted",
                           log=lambda s: None)
    assert again.generated == 0 and again.from_cache == 96
    x = np.stack([a.features for a in result.outcomes[0].held_out])
    assert [v.p_lower for v in again.verifier.verify_batch(x)] == [v.p_lower for v in result.verifier.verify_batch(x)]


KILL_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from pathlib import Path
from mlx_sdm.usecases.build_verifier import BuildVerifierArgs, build_verifier
from mlx_sdm.lm.loading import load_model
from tests.test_build_verifier import scripted_sampler_for
args = BuildVerifierArgs(out=Path({out!r}), model={model!r}, tasks=[{task!r}], per_task=64, eval_size=16,
                         iterations=1, epochs=8, plot=False, progress=False)
build_verifier(args, sampler_for=scripted_sampler_for(load_model({model!r}).tokenizer, delay_s=0.01),
               sampler_tag="scripted")
"""


def test_killed_build_resumes_from_the_cache(tiny_folder, tmp_path):
    from mlx_sdm.lm.loading import load_model

    task = write_task(tmp_path / "capitals.jsonl")
    args = _args(tmp_path, tiny_folder, task)
    script = KILL_SCRIPT.format(root=str(ROOT), out=str(args.out), model=str(tiny_folder), task=str(task))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    cache = args.resolved_cache_dir()
    deadline = time.time() + 120
    while time.time() < deadline and len(list(cache.glob("*.npz"))) < 2 and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = len(list(cache.glob("*.npz")))
    assert 2 <= done < 6, "the kill should land mid-build (6 chunks in all)"
    assert not (args.out / "verifier.json").exists()
    result = build_verifier(args, sampler_for=scripted_sampler_for(load_model(str(tiny_folder)).tokenizer),
                            sampler_tag="scripted", log=lambda s: None)
    assert result.from_cache == 16 * done and result.generated == 96 - 16 * done
    assert (args.out / "verifier.json").is_file() and (args.out / "report.md").is_file()


def test_model_that_never_answers_in_format_is_one_line_per_task(tiny_folder, tmp_path, capsys):
    task = write_task(tmp_path / "capitals.jsonl", n_main=60, n_shift=0)
    rc = cli(["build-verifier", "--model", str(tiny_folder), "--tasks", str(task), "--per-task", "48", "--eval-size", "4",
                       "--out", str(tmp_path / "v"), "--no-plot"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert any(line.startswith("task capitals: the model never answered in the expected JSON format ({\"city\": ...})")
               for line in err)
    assert err[-1].startswith("mlx-sdm build-verifier: ") and "no task left" in err[-1]
    assert not (tmp_path / "v").exists()


def test_unknown_task_and_offline_model_are_one_clear_line(tmp_path, capsys, monkeypatch):
    assert cli(["build-verifier", "--tasks", "bbc_topic,nope", "--out", str(tmp_path / "v")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown task 'nope'" in err[0] and "bbc_topic" in err[0]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli(["build-verifier", "--model", "someone/not-cached-model", "--tasks", "sentiment", "--out", str(tmp_path / "v")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "someone/not-cached-model" in err[0] and "embedded default" in err[0]


def test_batched_answers_equal_one_at_a_time_generation(tiny_folder):
    from mlx_sdm.lm.generation import GenerationConfig, generate_with_features
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.tasks.batched import generate_batch

    lm = load_model(str(tiny_folder))
    prompts = ["hello", "The quick brown fox jumps over the lazy dog, twice over", "Paris?"]
    for rule in ("json_close", "end_of_turn"):
        answers = generate_batch(lm, prompts, max_tokens=10, delimiter=rule, system="sys")
        for prompt, answer in zip(prompts, answers):
            one = generate_with_features(lm, prompt, GenerationConfig(max_tokens=10, delimiter=rule, system="sys"))
            assert answer.tokens == one.tokens and answer.features.delimiter_kind == one.features.delimiter_kind
            np.testing.assert_allclose(answer.features.vector, one.features.vector, atol=1e-4)


@pytest.mark.smollm2
def test_build_verifier_on_the_embedded_model(smollm2_shared, tmp_path, capsys):
    """The command end to end on SmolLM2 (the session's copy, tests/conftest.py share_smollm2): 32 answers,
    two batches of 16; the fit itself is checked on the tiny model above."""
    rc = cli(["build-verifier", "--tasks", "sentiment", "--per-task", "32", "--eval-size", "0", "--iterations", "1",
                       "--epochs", "8", "--out", str(tmp_path / "v"), "--no-plot"])
    out = capsys.readouterr().out
    assert rc == 0, out
    manifest = json.loads((tmp_path / "v" / "verifier.json").read_text())
    assert [t["name"] for t in manifest["tasks"]] == ["sentiment"]
    assert "built 1 of 1 tasks" in out and "| sentiment |" in out


def test_generate_list_tasks_prints_what_the_verifier_covers(tmp_path, capsys):

    folder = tmp_path / "v"
    folder.mkdir()
    (folder / "verifier.json").write_text(json.dumps({"tasks": [
        {"name": "sentiment", "description": "Whether a tweet is positive or negative", "example_prompt": "Classify ..."}]}))
    assert cli(["generate", "--list-tasks", "--verifier", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "sentiment: Whether a tweet is positive or negative" in out and 'mlx-sdm generate "Classify ..."' in out


def test_recipe_routes_each_task_to_its_system_prompt():
    from mlx_sdm.network.tasks.registry import load_tasks
    from mlx_sdm.network.verifier import FeatureRecipe

    tasks = load_tasks(["bbc_topic", "sentiment"])
    recipe = FeatureRecipe(task_systems=tuple((t.prompt_prefix, t.system) for t in tasks))
    for task in tasks:
        assert recipe.system_for(task.example_prompt) == task.system
    assert recipe.system_for("What is the capital of Australia?") is None
