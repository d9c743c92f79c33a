"""The shipped SpamAssassin MiniLM embeddings (``spam_minilm.npz``, see README.md beside this file)
and the split used by the tests and ``scripts/research/choose_defaults.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlx_sdm.calibration.data import LabelledSet

SPAM_FILE = Path(__file__).resolve().parent / "spam_minilm.npz"
#: Rows per class drawn from the first collection for training, calibration and the held-out test.
TRAIN_PER_CLASS, CALIBRATION_PER_CLASS, TEST_PER_CLASS = 200, 200, 100


def spam_splits(seed: int = 0, path: str | Path = SPAM_FILE) -> dict[str, LabelledSet]:
    """train, calibration, test (first collection: easy-ham-1, spam-1) and shift (the later
    collection: easy-ham-2, spam-2), all balanced."""
    with np.load(path, allow_pickle=False) as z:
        emb, labels, groups = z["emb"].astype(np.float32), z["labels"].astype(np.int64), z["groups"].astype(str)
        ids, texts = [str(i) for i in z["ids"]], [str(s) for s in z["snippets"]]
    rng = np.random.default_rng(seed)
    parts: dict[str, list[int]] = {"train": [], "calibration": [], "test": []}
    a, b = TRAIN_PER_CLASS, TRAIN_PER_CLASS + CALIBRATION_PER_CLASS
    for group in ("easy-ham-1", "spam-1"):
        idx = rng.permutation(np.nonzero(groups == group)[0])
        parts["train"] += idx[:a].tolist()
        parts["calibration"] += idx[a:b].tolist()
        parts["test"] += idx[b:b + TEST_PER_CLASS].tolist()
    parts["shift"] = np.nonzero(np.isin(groups, ("easy-ham-2", "spam-2")))[0].tolist()

    def subset(index: list[int]) -> LabelledSet:
        index = sorted(index)
        return LabelledSet([ids[i] for i in index], emb[index], labels[index], [texts[i] for i in index])

    return {name: subset(index) for name, index in parts.items()}
