"""``mlx-sdm finetune`` for a person with a labelled file and nothing else: a help that teaches the task run (under
50 lines, none of the paper's notation), ``--plan`` (every check a run makes, the rows, labels and time, nothing
written), and the report's plain summary with what to do next (its wording rules on hand-made numbers)."""

from __future__ import annotations

import os

import pytest

from mlx_sdm.cli import main as cli_main
from mlx_sdm.usecases.finetune_advice import RunNumbers, SplitNumbers, next_step, summary

FORBIDDEN = ("D_tr", "D_ca", "Alg.", "α")


def _run(argv, capsys) -> tuple[int, str, str]:
    try:
        code = cli_main(["finetune", *argv])
    except SystemExit as exc:  # argparse's --help exits
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _mail_csv(path, rows: int):
    words = ("win a prize", "cheap pills", "lunch at noon", "minutes of the meeting")
    lines = ["text,label"] + [f"{words[i % 4]} number {i},{'spam' if i % 4 < 2 else 'ham'}" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_help_teaches_the_task_run_in_under_50_lines(capsys):
    code, out, _ = _run(["--help"], capsys)
    assert code == 0 and len(out.splitlines()) < 50
    assert not [word for word in FORBIDDEN if word in out]
    for needed in ("CSV", "mlx-lm chat", "completions", "--text-column", "--label-column", "--instruction",
                   "at least 58", "--plan", "--lora-epochs", "--train-rows", "--model", "chat --model DIR",
                   "serve --model DIR", "export DIR", "--help-head"):
        assert needed in out, needed
    code, full, _ = _run(["--help-head"], capsys)  # the head alone keeps its whole reference
    assert code == 0 and "--config FILE.yaml" in full and "Alg. 4 alone" in full and "--resume" in full


def test_the_top_level_help_says_what_finetune_and_export_do(capsys):
    assert cli_main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "teach a model your task from a labelled file" in out and "plain mlx-lm model" in out


def test_plan_checks_the_file_prints_rows_labels_and_time_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    task = _mail_csv(tmp_path / "mail.csv", 120)
    before = sorted(os.listdir(tmp_path))
    code, out, err = _run(["--task", str(task), "--instruction", "Is this e-mail junk?", "--plan"], capsys)
    assert code == 0, err
    assert "mail.csv: a table of a text column and a label column: 120 rows" in out
    assert "mail: 120 rows: 48 train the model, 9 check it while it trains, 39 calibrate the verifier, 24 held-out" in out
    assert "mail: labels \"spam\" 60, \"ham\" 60" in out and "minimum: 58 rows" in out and "estimate: LoRA about" in out
    assert sorted(os.listdir(tmp_path)) == before  # nothing written
    code, out, err = _run(["--task", str(task), "--instruction", "Junk?", "--plan", "--out", str(tmp_path / "o")],
                          capsys)
    assert code == 0 and f"into {tmp_path / 'o'}" in out and not (tmp_path / "o").exists()


@pytest.mark.parametrize("rows, flags, message", [
    (40, ["--instruction", "Junk?"], "it needs at least 58"),
    (120, [], "give the question asked before each text"),
    (120, ["--instruction", "Junk?", "--label-column", "kind"], "no column 'kind'; the columns are 'text', 'label'"),
])
def test_plan_refuses_a_bad_file_exactly_as_the_run_does(tmp_path, capsys, rows, flags, message):
    task = _mail_csv(tmp_path / "mail.csv", rows)
    plan = _run(["--task", str(task), *flags, "--plan"], capsys)
    run = _run(["--task", str(task), *flags, "--out", str(tmp_path / "out"), "--quiet"], capsys)
    assert plan[0] == run[0] == 1 and plan[2] == run[2] and message in plan[2] and len(plan[2].splitlines()) == 1
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------------- the advice's wording
def numbers(held: SplitNumbers, shifted: SplitNumbers | None = None, **kw) -> RunNumbers:
    return RunNumbers(held, shifted, "junk-model", 'Is this e-mail junk? Respond using the following JSON', **kw)


def split(name="held-out", rows=100, right=90, untuned=40, verified=50, wrong=0, majority=0.5) -> SplitNumbers:
    return SplitNumbers(name, rows, right, untuned, verified, wrong, majority)


def test_the_summary_says_right_vs_untuned_and_what_was_vouched_for():
    lines = summary(numbers(split(), split("shifted", 50, 40, 20, 10, 1)))
    assert lines[0] == ("On 100 held-out rows it never saw, the tuned model was right 90 of 100 (90%); the untuned "
                        "model 40 of 100 (40%).")
    assert lines[1] == "The verifier vouched for 50 of 100 (50%) answers, all of them right."
    assert lines[2].startswith("On 50 shifted rows (other data it never saw), the tuned model was right 40 of 50")
    assert lines[3] == "The verifier vouched for 10 of 50 (20%) answers, 1 of them wrong."
    assert lines[4].startswith("Next: use it: `mlx-sdm chat --model junk-model`") and len(lines) == 5
    assert not [word for line in lines for word in FORBIDDEN if word in line]
    none = summary(numbers(split(verified=0), None))
    assert none[1] == "The verifier vouched for none of these answers." and "stratum" not in " ".join(none)
    assert none[2].startswith("No shifted rows")
    assert summary(numbers(split(untuned=None, verified=None, wrong=None)))[:2] == [
        "On 100 held-out rows it never saw, the tuned model was right 90 of 100 (90%) (the untuned model was not run).",
        "No verifier could be built, so none of these answers is vouched for."]


@pytest.mark.parametrize("held, shifted, starts", [
    (split(right=52, majority=0.5), None, "Next: the model is guessing"),
    (split(right=70, majority=0.7, untuned=10), None, "Next: the model is guessing"),
    (split(right=60, untuned=60, majority=0.3), None, "Next: fine-tuning did not beat the untuned model"),
    (split(verified=None, wrong=None), None, "Next: no verifier could be built"),
    (split(verified=40, wrong=3), None, "Next: more than 1 in 20 vouched-for answers were wrong"),
    (split(verified=40, wrong=2), None, "Next: use it"),
    (split(verified=0), None, "Next: nothing was verified yet: add rows, or review some in the chat's review screen"),
    (split(), split("shifted", right=45, majority=0.5), "Next: on the shifted rows the model is guessing"),
    (split(), split("shifted", verified=0), "Next: nothing verified on the shifted rows: review some in the chat's "
                                            "review screen (mlx-sdm chat --model junk-model, then ctrl+r), then "
                                            "`mlx-sdm finetune --from-reviews --model junk-model"),
    (split(), split("shifted"), "Next: use it"),
])
def test_what_to_do_next_is_chosen_from_the_numbers(held, shifted, starts):
    assert next_step(numbers(held, shifted)).startswith(starts)


def test_reviews_retrain_a_table_task_with_the_flags_that_made_its_prompts(tmp_path):
    """The folder keeps --instruction and the columns (info.table), so ``--from-reviews --model DIR`` reads its
    table file into the same prompts again; a flag given again wins."""
    from mlx_sdm.network.coverage import TaskInstruction
    from mlx_sdm.usecases.finetune_plan import task_args_from
    from mlx_sdm.usecases.model_folder import write_run_manifest

    task = _mail_csv(tmp_path / "mail.csv", 60)
    folder = tmp_path / "junk-model"
    folder.mkdir()
    write_run_manifest(folder, "smollm2", {}, (TaskInstruction("Junk? Respond", None, "mail"),), "0" * 64, False,
                       has_head=False, has_verifier=False,
                       info={"task_files": {"mail": str(task)}, "table": {"instruction": "Junk?", "label_column": "label"}})
    args = task_args_from({"from_reviews": "chat.db", "model": str(folder), "out": str(tmp_path / "again")}, "test")
    assert args.tasks == (str(task),) and args.instruction == "Junk?" and args.columns.label == "label"
    again = task_args_from({"from_reviews": "chat.db", "model": str(folder), "out": "x", "instruction": "Spam?"}, "t")
    assert again.instruction == "Spam?"


def test_a_csv_run_says_how_it_read_the_file_and_ends_with_what_to_do_next(tmp_path, capsys):
    """The whole command on a CSV and a tiny llama: the form line first, then at the end the folder and the
    report's plain summary (its last line what to do next); the folder's report.md opens with the same lines."""
    from tests.tiny_family import FRUITS, OTHERS, save_tiny_family

    base = save_tiny_family(tmp_path / "base", "llama")
    words = FRUITS + OTHERS
    lines = ["word,kind"] + [f"{words[i % 20]} {i},{'fruit' if i % 20 < 10 else 'other'}" for i in range(200)]
    task = tmp_path / "words.csv"
    task.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = _run(["--task", str(task), "--text-column", "word", "--label-column", "kind", "--instruction",
                           "Is the following word a fruit?", "--out", str(tmp_path / "tuned"), "--model", str(base),
                           "--lora-ranks", "8", "--lora-layers", "2", "--lora-epochs", "1", "--lora-learning-rate",
                           "0.001", "--eval-rows", "20", "--no-head", "--no-baselines", "--verifier-rows", "64",
                           "--quiet"], capsys)
    assert code == 0, err
    printed = out.strip().splitlines()
    assert printed[0] == (f"{task}: a table of a text column and a label column: 200 rows, answers {{\"label\": ...}} "
                          'of 2 values; prompts written as "Is the following word a fruit? Respond using the following '
                          'JSON: {"label": str}, where the label is one of fruit, other. TEXT: ..."')
    assert printed[-1].startswith("Next: ") and any(line.startswith("On 20 held-out rows") for line in printed)
    report = (tmp_path / "tuned" / "reports" / "words" / "report.md").read_text().splitlines()
    assert [line[2:] for line in report[2:8] if line.startswith("- ")][-1] == printed[-1]


def test_finetune_alone_points_to_the_task_run(capsys):
    code, _, err = _run([], capsys)
    assert code == 1 and "name your labelled file: --task FILE --out DIR" in err and len(err.splitlines()) == 1
