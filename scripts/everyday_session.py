"""A 30-turn everyday chat through the real product, checked as a person would check it.

Runs `mlx-sdm chat --plain` (the embedded SmolLM2, the default verifier and head, a fresh store) on 30 messages:
everyday questions, follow-ups that lean on the turn before, a task question, a greeting and a how-to. Then:

- pauses: how many turns paused, and why (the claim: at most one, and only on an answer that derailed);
- words: no answer that contains its expected fact is called wrong ("likely wrong", "leans ... wrong", a ✘ badge);
- routing: every factual question is judged (never "no checkable answer"); the greeting and the how-to are not.

    .venv/bin/python scripts/everyday_session.py [--max-tokens 48] [--keep-store DIR]

Exit status 0 when every check holds, 1 otherwise (the failing turns are printed).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: The README's article (tests/test_default_verifies_smollm2.py, ARTICLE).
ARTICLE = ("Classify the topic of the following news article. Respond using the following JSON: {\"topic\": str}. "
           "ARTICLE: Striker's late goal sends United into cup semi-final. A stoppage-time header gave United a 2-1 "
           "win away from home and a place in the semi-finals. The manager praised his players for never giving up "
           "after falling behind early.")

#: (message, a pattern the right answer contains, or None; the kind: fact / task / chat)
TURNS: tuple[tuple[str, str | None, str], ...] = (
    ("What is the capital of France?", r"Paris", "fact"),
    ("Who painted the Mona Lisa?", r"Leonardo|da Vinci", "fact"),
    ("What is the boiling point of water in Celsius?", r"\b100\b", "fact"),
    ("What is 12 times 12?", r"\b144\b", "fact"),
    ("In what year did the Berlin Wall fall?", r"1989", "fact"),
    ("Who wrote Romeo and Juliet?", r"Shakespeare", "fact"),
    ("When did he write it?", r"159\d", "fact"),
    ("What is the largest planet in our solar system?", r"Jupiter", "fact"),
    ("How many legs does a spider have?", r"\b(8|eight)\b", "fact"),
    ("What is the chemical symbol for gold?", r"\bAu\b", "fact"),
    ("What is the tallest mountain in the world?", r"Everest", "fact"),
    ("Who was the first president of the United States?", r"Washington", "fact"),
    ("What is the capital of Japan?", r"Tokyo", "fact"),
    ("How many days are in a week?", r"\b(7|seven)\b", "fact"),
    ("What language is spoken in Brazil?", r"Portuguese", "fact"),
    ("What is the freezing point of water in Fahrenheit?", r"\b32\b", "fact"),
    ("Which planet is known as the Red Planet?", r"Mars", "fact"),
    ("What is the square root of 81?", r"\b(9|nine)\b", "fact"),
    ("Who discovered penicillin?", r"Fleming", "fact"),
    ("What gas do plants absorb from the air?", r"carbon dioxide|CO2", "fact"),
    (ARTICLE, r"sports", "task"),
    ("Why did you pick that?", None, "chat"),
    ("What is the capital of Italy?", r"Rome", "fact"),
    ("How many continents are there?", r"\b(7|seven)\b", "fact"),
    ("Hello! How are you today?", None, "chat"),
    ("Give me three tips for sleeping better.", None, "chat"),
    ("What is the longest river in Africa?", r"Nile", "fact"),
    ("Who invented the telephone?", r"Bell", "fact"),
    ("What is the currency of Japan?", r"\byen\b", "fact"),
    ("Thank you, that's all.", None, "chat"),
)

WRONG_WORDS = re.compile(r"likely wrong|leans toward this answer being wrong|confident this answer is wrong|leans wrong")


@dataclass
class Turn:
    number: int
    message: str
    expected: str | None
    kind: str
    answer: str = ""
    badge: str = ""
    sentence: str = ""
    paused: str = ""

    @property
    def right(self) -> bool:
        return self.expected is not None and re.search(self.expected, self.answer, flags=re.IGNORECASE) is not None


def parse(output: str) -> list[dict[str, str]]:
    """Each answer's text, verdict line, sentence and pause line from `chat --plain`'s output."""
    turns, current, answer_lines = [], None, []
    for line in output.splitlines():
        if line.startswith("[verdict: "):
            current = {"answer": "\n".join(answer_lines).strip(), "badge": line[10:-1], "sentence": "", "paused": ""}
            turns.append(current)
            answer_lines = []
        elif current is not None and line.startswith("[") and not current["sentence"] and not line.startswith("[monitor"):
            current["sentence"] = line[1:-1]
        elif current is not None and line.startswith("[Paused:"):
            current["paused"] = line[1:-1]
        elif line.startswith("[queued for review") or line.startswith("[monitor") or line.startswith("["):
            continue
        else:
            answer_lines.append(line)
    return turns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--keep-store", type=Path, default=None, help="keep the chat store here (default: a temp dir)")
    parser.add_argument("--print-turns", action="store_true", help="print the 30 messages, one a line, and stop "
                        "(scripts/e2e_tui.sh types them into the real app)")
    args = parser.parse_args(argv)
    if args.print_turns:
        print("\n".join(message for message, _, _ in TURNS))
        return 0
    home = args.keep_store or Path(tempfile.mkdtemp(prefix="everyday-session-"))
    exe = Path(sys.executable).with_name("mlx-sdm")
    # an empty line after each message: a paused turn moves on instead of taking the next question as guidance
    stdin = "".join(f"{message}\n\n" for message, _, _ in TURNS)
    run = subprocess.run([str(exe), "chat", "--plain", "--max-tokens", str(args.max_tokens)], input=stdin, text=True,
                         capture_output=True, env=dict(os.environ, MLX_SDM_HOME=str(home)), timeout=3600)
    if run.returncode != 0:
        print(run.stdout[-4000:], run.stderr[-4000:], sep="\n")
        return 1
    parsed = parse(run.stdout)
    turns = [Turn(i + 1, m, e, k, **p) for i, ((m, e, k), p) in enumerate(zip(TURNS, parsed))]
    problems = [] if len(parsed) == len(TURNS) else [f"{len(parsed)} answers for {len(TURNS)} messages"]
    for t in turns:
        shown = t.message if len(t.message) <= 48 else t.message[:45] + "..."
        answer = t.answer.replace("\n", " ")
        answer = answer if len(answer) <= 60 else answer[:57] + "..."
        mark = "right" if t.right else ("wrong" if t.expected else "-")
        print(f"{t.number:2d}. {shown:48s} | {answer:60s} | {mark:5s} | {t.badge}" + (f" | PAUSED" if t.paused else ""))
        if t.right and (WRONG_WORDS.search(t.sentence) or t.badge.startswith("NOT VERIFIED") and "✘" in t.badge):
            problems.append(f"turn {t.number}: a right answer is called wrong: {t.badge} / {t.sentence}")
        if t.kind in ("fact", "task") and "no checkable answer" in t.badge:
            problems.append(f"turn {t.number}: a factual question was not judged ({t.badge})")
    pauses = [t for t in turns if t.paused]
    print(f"\n{len(pauses)} pause(s)" + "".join(f"\n  turn {t.number}: {t.paused}" for t in pauses))
    if len(pauses) > 1:
        problems.append(f"{len(pauses)} pauses (at most one expected)")
    problems += [f"turn {t.number} paused on something other than a derailed answer: {t.paused}"
                 for t in pauses if not re.search(r"loops|repeats|quotes and braces", t.paused)]
    right = sum(t.right for t in turns)
    facts = sum(t.expected is not None for t in turns)
    print(f"{right} of {facts} checkable answers contain their expected fact; store: {home}")
    for p in problems:
        print("PROBLEM:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
