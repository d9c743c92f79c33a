"""The time estimate ``finetune`` prints first, and the report's line setting it beside what the run took."""

from __future__ import annotations

from mlx_sdm.usecases.finetune_plan import StageClock
from mlx_sdm.usecases.finetune_report import RunEstimate, estimate_lines


def test_the_estimate_reads_one_epoch_to_every_epoch_of_every_rank():
    guess = RunEstimate(epoch_seconds=600, rest_seconds=720, rows=312, max_epochs=3, ranks=2,
                        later="answers and verifiers")
    assert guess.low_seconds == 1320 and guess.high_seconds == 600 * 6 + 720
    assert guess.text == ("estimate: LoRA about 10 min an epoch over 312 rows (at most 3 epochs per rank); answers "
                          "and verifiers about 12 min; in all about 22–72 min")
    done = RunEstimate(600, 720, 312, 3, 2, "answers and verifiers", lora_done=True)
    assert done.low_seconds == done.high_seconds == 720 and "LoRA is done" in done.text


def test_the_report_sets_the_estimate_beside_the_measured_time_with_each_error():
    guess = RunEstimate(600, 720, 312, 3, 2, "answers and verifiers")
    clock = StageClock({"1 LoRA": 1600.0, "2 head: its verifier": 900.0})  # two epochs of 800 s; the rest 900 s
    [blank, line] = estimate_lines(guess.to_dict(), clock, epochs=2)
    assert blank == ""
    # an epoch: 600 against 800 (-25 %); the rest: 720 against 900 (-20 %); in all 1920 against 2500 (-23 %)
    assert "LoRA 13.3 min an epoch over 2 epochs (estimated 10.0, -25%)" in line
    assert "answers and verifiers 15.0 min (estimated 12.0, -20%)" in line
    assert "the estimate was 32 min (-23%)" in line and "It took 42 min" in line
    assert estimate_lines(None, clock, 2) == []  # no estimate kept
    assert estimate_lines(RunEstimate(600, 720, 312, 3, 2, "x", lora_done=True).to_dict(), clock, 2) == []
