"""One task of the suite as a labelled data set of SmolLM2 document features, for comparisons
(``adaptor_vs_probe.py`` and ``compare_reexpress_sdm.py`` beside it).

The task's § 14 constructed documents (gold answer y = 1, or by Bernoulli(0.5) another answer
y = 0; :mod:`mlx_sdm.usecases.suite_verifier`) become rows of [mean(h); h_delimiter] features, read
from the on-disk feature cache of :func:`mlx_sdm.usecases.verifiers.cached_document_features` (filled by
``mlx-sdm build-verifier`` with its cache folder, or by these scripts with ``--extract``). The
pool's first 3/8 are the training rows, the next 3/8 the calibration rows, the last 1/4 the
held-out test; the task's ``shifted`` documents are the shift when their features are cached.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.errors import ArtifactError
from mlx_sdm.resources import default_verifier_dir

#: Features of a list of documents: an array [len(documents), 2 · hidden].
Features = Callable[[Sequence], np.ndarray]


class NotCached(ArtifactError):
    """A document's features are not in the cache and no LM was given to compute them."""


class CacheOnlyLM:
    """Stands in for SmolLM2 in ``cached_document_features``: it has the shipped suite verifier's
    model fingerprint (the cache key) and refuses to force-decode what is not cached."""

    hidden_size = 576

    def __init__(self, verifier_dir: Path | None = None):
        manifest = Path(verifier_dir or default_verifier_dir()) / "verifier.json"
        try:
            self.fingerprint = json.loads(manifest.read_text(encoding="utf-8"))["model_fingerprint"]
        except (OSError, ValueError, KeyError) as exc:
            raise ArtifactError(f"{manifest}: cannot read the model fingerprint the feature cache is keyed by ({exc})") from exc

    def __getattr__(self, name):
        raise NotCached("SmolLM2 features of these documents are not cached; run again with --extract "
                        "(loads SmolLM2 and force-decodes each document) or point --cache-dir at a filled cache")


def cached_features(cache_dir: Path, lm=None) -> Features:
    """Features read from ``cache_dir``; computed with ``lm`` (and cached) where missing, or
    :class:`NotCached` raised when ``lm`` is None."""
    from mlx_sdm.usecases.verifiers import cached_document_features
    from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE

    model = lm if lm is not None else CacheOnlyLM()
    return lambda docs: cached_document_features(model, list(docs), delimiter=DELIMITER_JSON_CLOSE,
                                                 cache_dir=cache_dir, desc="features")


def task_feature_sets(task_name: str, pool_size: int, features: Features, *, test_size: int = 40,
                      split: int = 0) -> dict[str, LabelledSet]:
    """``train``, ``calibration`` and ``test`` (3/8, 3/8, 1/4 of the task's first ``pool_size`` pool
    documents; ``split`` > 0: another seeded partition of the same pool) and ``shift`` (the task's
    ``test_size`` shifted documents) when ``features`` has them."""
    from mlx_sdm.usecases.suite_verifier import constructed_documents, evaluation_documents
    from mlx_sdm.network.tasks.registry import load_tasks
    from mlx_sdm.network.verifier import labelled_set

    task = load_tasks([task_name])[0]
    pool = constructed_documents(task, task.split("pool", size=pool_size), seed=0)
    feats = features(pool)
    if split:
        order = np.random.default_rng(split).permutation(len(pool))
        pool, feats = [pool[i] for i in order], feats[order]
    a, b = 3 * len(pool) // 8, 3 * len(pool) // 4
    out = {"train": labelled_set(pool[:a], feats[:a]), "calibration": labelled_set(pool[a:b], feats[a:b]),
           "test": labelled_set(pool[b:], feats[b:])}
    shifted = evaluation_documents(task, "shifted", test_size, seed=0)
    try:
        out["shift"] = labelled_set(shifted, features(shifted))
    except NotCached:
        pass
    return out


def parse_suite_dataset(text: str, default_pool: int = 400) -> tuple[str, int]:
    """``suite:TASK[:POOL]`` → (TASK, POOL)."""
    parts = text.split(":")
    if parts[0] != "suite" or len(parts) not in (2, 3) or not parts[1] or (len(parts) == 3 and not parts[2].isdigit()):
        raise ValueError(f"{text!r}: expected suite:TASK or suite:TASK:POOL (POOL a number of documents), "
                         "e.g. suite:sentiment:400")
    return parts[1], int(parts[2]) if len(parts) == 3 else default_pool
