"""What a ``finetune --task`` run found, in plain words, and the one thing to do next: the top of report.md and the
run's last printed lines. The wording rules live here, in one place, on plain numbers (no model, no verifier), so
each rule is tested on numbers made by hand (tests/test_finetune_advice.py).

The rules, in order (the first that holds is the advice):

1. the tuned model is no better on held-out rows than always answering their most common label (within
   :data:`GUESS_MARGIN`): it is guessing: add rows or epochs;
2. it is no better than the untuned model: add rows or epochs;
3. no verifier could be built: add rows (its calibration rows are rows nothing trained on);
4. more than :data:`WRONG_SHARE` of the answers the verifier vouched for were wrong: add calibration rows and
   review answers;
5. it vouched for nothing held out: review answers in the chat's review screen, then ``--from-reviews``;
6. the shifted rows: the model guesses there (add rows like them), or nothing there is vouched for (review some);
7. otherwise it is ready: chat with it, or export it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Accuracy within this of always answering the most common label counts as guessing.
GUESS_MARGIN = 0.05
#: The verifier promises at least 95 % right among what it vouches for; above this share wrong, say so.
WRONG_SHARE = 0.05


@dataclass(frozen=True)
class SplitNumbers:
    """One split's numbers over every task: rows, right answers of the tuned and the untuned model (None: not
    run), answers the verifier vouched for and how many of those were wrong (None: no verifier), and the share of
    the most common label among the rows (what always answering it scores)."""

    name: str  # "held-out" or "shifted"
    rows: int
    right: int
    untuned_right: int | None
    verified: int | None
    verified_wrong: int | None
    majority: float


@dataclass(frozen=True)
class RunNumbers:
    held_out: SplitNumbers
    shifted: SplitNumbers | None  # None: the tasks have no shifted rows
    folder: str
    instruction: str = ""  # the first task's, for the chat hint
    no_verifier: str | None = None  # why no verifier could be built


def _share(count: int, rows: int) -> str:
    return f"{count} of {rows} ({count / rows:.0%})" if rows else f"{count} of {rows}"


def split_lines(s: SplitNumbers) -> list[str]:
    """Two lines: how often the tuned model was right (and the untuned one), and what the verifier vouched for."""
    where = "held-out rows it never saw" if s.name == "held-out" else "shifted rows (other data it never saw)"
    untuned = (f"; the untuned model {_share(s.untuned_right, s.rows)}" if s.untuned_right is not None
               else " (the untuned model was not run)")
    lines = [f"On {s.rows} {where}, the tuned model was right {_share(s.right, s.rows)}{untuned}."]
    if s.verified is None:
        lines.append("No verifier could be built, so none of these answers is vouched for.")
    elif s.verified == 0:
        lines.append("The verifier vouched for none of these answers.")
    else:
        wrong = "all of them right" if not s.verified_wrong else f"{s.verified_wrong} of them wrong"
        lines.append(f"The verifier vouched for {_share(s.verified, s.rows)} answers, {wrong}.")
    return lines


def guessing(s: SplitNumbers) -> bool:
    return s.rows > 0 and s.right / s.rows <= s.majority + GUESS_MARGIN


def next_step(n: RunNumbers) -> str:
    """The one line of what to do next (module docstring: the rules in order)."""
    held, shifted, folder = n.held_out, n.shifted, n.folder
    review = (f"review some in the chat's review screen (mlx-sdm chat --model {folder}, then ctrl+r), then "
              f"`mlx-sdm finetune --from-reviews --model {folder} --out NEW_DIR`")
    if guessing(held):
        return ("Next: the model is guessing (no better than always giving the most common label): add rows or "
                "epochs (--lora-epochs N) and run again.")
    if held.untuned_right is not None and held.right <= held.untuned_right:
        return "Next: fine-tuning did not beat the untuned model: add rows or epochs (--lora-epochs N) and run again."
    if held.verified is None:
        return (f"Next: no verifier could be built{f' ({n.no_verifier})' if n.no_verifier else ''}: add rows (the "
                "verifier calibrates on rows nothing trained on) and run again.")
    if held.verified and (held.verified_wrong or 0) / held.verified > WRONG_SHARE:
        return ("Next: more than 1 in 20 vouched-for answers were wrong: add rows for the verifier to calibrate on "
                f"(--verifier-rows N), and {review}.")
    if held.verified == 0:
        return f"Next: nothing was verified yet: add rows, or {review}."
    if shifted is not None and shifted.rows and guessing(shifted):
        return ("Next: on the shifted rows the model is guessing: add rows like them (without \"split\": \"shifted\") "
                "and run again.")
    if shifted is not None and shifted.rows and not shifted.verified:
        return f"Next: nothing verified on the shifted rows: {review}."
    asked = f" (questions that start with \"{n.instruction[:60]}...\")" if n.instruction else ""
    return (f"Next: use it: `mlx-sdm chat --model {folder}`{asked}, or `mlx-sdm export {folder} --out OUT` for a "
            "plain mlx-lm model.")


def summary(n: RunNumbers) -> list[str]:
    """The top of report.md and the run's last lines: the held-out split, the shifted one, what to do next."""
    lines = split_lines(n.held_out)
    if n.shifted is not None and n.shifted.rows:
        lines += split_lines(n.shifted)
    else:
        lines.append("No shifted rows: mark rows of other data \"split\": \"shifted\" (a split column in a table) to "
                     "see how it does on them.")
    return lines + [next_step(n)]


#: Below this share of held-out answers verified, ``generate --list-tasks`` says why and what would raise it.
LOW_COVERAGE = 0.5


def coverage_hint(accuracy: float | None, verified_share: float | None, majority: float | None = None) -> str | None:
    """One plain line on why a task of a fine-tuned folder verifies little and what would raise it (None: it
    verifies at least :data:`LOW_COVERAGE` of its held-out answers, or its numbers are not known)."""
    if accuracy is None or verified_share is None or verified_share >= LOW_COVERAGE:
        return None
    if majority is not None and accuracy <= majority + GUESS_MARGIN:
        return "the model is guessing on this task: add rows or epochs (finetune --task FILE --out DIR again)"
    if accuracy < 1 - WRONG_SHARE:
        return (f"the model is right on {accuracy:.0%}, under the 95% the verifier promises, so it vouches only for "
                "regions of answers surer than that: add rows, or review answers (ctrl+r) to teach it")
    return ("too few calibration rows for the promise at 95%: add rows to the task file, or review answers in the "
            "chat (ctrl+r): each reviewed answer joins the verifier's support set at once")
