"""Two task files of our own, in the task format ``mlx-sdm finetune --task`` reads, made in code (no source text):

- ``mail_triage.jsonl``: a document-triage task. 800 e-mails to a small company's shared inbox, each put in one
  of four queues (billing, technical, sales, account) by what it asks; 120 more rows marked ``"split":
  "shifted"``: the same kinds of request forwarded by a colleague (a different wrapper and register).
- ``compare_counts.jsonl``: a short reasoning task the untuned model never answers in its JSON. 800 two-person
  count comparisons ("Who has more?" as true/false about the first person); shifted: the question reversed ("Does
  X have fewer than Y?").

Each prompt starts with the task's instruction (the chat routes a question to the task by it). The files are
examples for the docs and the measurements in docs/finetuning.md; the tasks an evaluator brings are not these.

    .venv/bin/python scripts/research/probe_tasks.py --out examples/
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

TRIAGE_INSTRUCTION = ("Route the following e-mail to the team that should answer it. Respond using the following "
                      'JSON: {"queue": str}, where the queue is one of billing, technical, sales, account.')
COMPARE_INSTRUCTION = ('Answer the question about the two counts. Respond using the following JSON: {"answer": bool}.')

GREETINGS = ["Hi", "Hello", "Dear team", "Good morning", "Hey there", "To whom it may concern", "Hi all"]
SIGN_OFFS = ["Thanks", "Best regards", "Cheers", "Kind regards", "Thank you", "Many thanks", "Regards"]
NAMES = ["Maria", "Tom", "Aisha", "Jonas", "Priya", "Lucas", "Mei", "Oscar", "Fatima", "Daniel", "Sofia", "Ken"]
PRODUCTS = ["the Pro plan", "our team workspace", "the mobile app", "the analytics add-on", "the starter plan",
            "the API", "the desktop client", "the storage upgrade"]
REQUESTS = {
    "billing": ["I was charged twice for {p} this month, can you refund one of the payments?",
                "The invoice for {p} shows the wrong VAT number, could you send a corrected one?",
                "My card was declined when renewing {p}; how do I update the payment method?",
                "Why did the price of {p} go up on my last bill?",
                "Please send me the receipts for {p} for the last three months for our accounts.",
                "We were billed for {p} after we cancelled it. We would like the money back."],
    "technical": ["{p} crashes every time I open a file larger than 10 MB.",
                  "Since the last update {p} will not sync; it says error 504.",
                  "I cannot connect {p} to our single sign-on, the login loops back to the start page.",
                  "The export button in {p} does nothing, nothing is downloaded.",
                  "{p} is very slow today, pages take a minute to load.",
                  "Notifications from {p} stopped arriving on my phone."],
    "sales": ["We are a team of 40 and would like a quote for {p}.",
              "Do you offer a discount on {p} for schools or charities?",
              "Could someone show us a demo of {p} next week?",
              "What is the difference between {p} and the enterprise plan? We are thinking of buying.",
              "Is there a yearly price for {p}? We want to buy licences for the whole office.",
              "I would like to talk to someone about buying {p} for our new branch."],
    "account": ["Please change the e-mail address on my account for {p} to my new one.",
                "I forgot my password and the reset link for {p} never arrives.",
                "How can I add a colleague as an administrator of {p}?",
                "I want to delete my account and all data in {p}.",
                "Please transfer ownership of {p} to my manager, I am leaving the company.",
                "My account for {p} is locked after too many login attempts."],
}
QUEUES = tuple(REQUESTS)


def mail(rng: random.Random, queue: str, forwarded: bool) -> str:
    text = rng.choice(REQUESTS[queue]).format(p=rng.choice(PRODUCTS))
    text = text[0].upper() + text[1:]
    sender = rng.choice(NAMES)
    if forwarded:
        colleague = rng.choice([n for n in NAMES if n != sender])
        return (f"FYI, forwarding this from a customer, can you take it? -- {colleague}\n"
                f"---------- Forwarded message ----------\nFrom: {sender.lower()}@example.com\n{text.lower()}")
    return f"{rng.choice(GREETINGS)},\n{text}\n{rng.choice(SIGN_OFFS)},\n{sender}"


def triage_rows(rng: random.Random, count: int, shifted: int) -> list[dict]:
    rows = []
    for i in range(count + shifted):
        queue = QUEUES[i % len(QUEUES)]
        row = {"id": f"mail-{i}", "prompt": f"{TRIAGE_INSTRUCTION} EMAIL: {mail(rng, queue, i >= count)}",
               "answer": {"queue": queue}}
        if i >= count:
            row["split"] = "shifted"
        rows.append(row)
    return rows


THINGS = ["apples", "stamps", "marbles", "books", "coins", "shells", "pencils", "cards", "tickets", "plants"]


def compare_rows(rng: random.Random, count: int, shifted: int) -> list[dict]:
    rows = []
    for i in range(count + shifted):
        a, b = rng.sample(NAMES, 2)
        x, y = rng.sample(range(2, 99), 2)
        thing = rng.choice(THINGS)
        if i < count:
            question, answer = f"Does {a} have more {thing} than {b}?", x > y
        else:
            question, answer = f"Does {a} have fewer {thing} than {b}?", x < y
        row = {"id": f"count-{i}", "prompt": f"{COMPARE_INSTRUCTION} QUESTION: {a} has {x} {thing} and {b} has {y} "
                                             f"{thing}. {question}", "answer": {"answer": answer}}
        if i >= count:
            row["split"] = "shifted"
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="examples", help="folder for the two .jsonl files")
    parser.add_argument("--rows", type=int, default=800)
    parser.add_argument("--shifted", type=int, default=120)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, make in (("mail_triage", triage_rows), ("compare_counts", compare_rows)):
        rows, seen, rng = [], set(), random.Random(args.seed)
        for row in make(rng, 3 * args.rows, 3 * args.shifted):  # more than needed: a repeated prompt is skipped
            if row["prompt"] not in seen:
                seen.add(row["prompt"])
                rows.append(row)
        main_rows = [r for r in rows if "split" not in r][: args.rows]
        shifted = [r for r in rows if "split" in r][: args.shifted]
        rng.shuffle(main_rows)
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in main_rows + shifted),
                                           encoding="utf-8")
        print(f"{out / (name + '.jsonl')}: {args.rows} rows + {args.shifted} shifted")


if __name__ == "__main__":
    main()
