"""A tiny document verifier that fits the tiny test LM (``tests/tiny_lm.py``), for session and UI tests.

Real code paths only: the tiny llama force-decodes a few dozen synthetic verification documents
(docs/method.md § 14 encoding: a claim, then ``{"correctness": true|false}``; negatives invert the answer),
an :class:`~mlx_sdm.calibration.estimator.SDMEstimator` is fitted on those features, and it is
wrapped in the project's :class:`~mlx_sdm.network.verifier.DocumentVerifier` with the tiny model's
fingerprint, so it refuses any other model.

    lm = tiny_loaded_model()                               # LoadedModel around build_tiny_lm(seed=0)
    path = build_tiny_verifier(tmp_path / "verifier")      # fitted + saved (cached per process)
    engine = ChatEngine(config, store, components=tiny_components(path))

Everything MLX is (re)built inside ``tiny_components(...)(config)``, which the engine calls on its
own worker thread.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

import numpy as np

import mlx_sdm  # noqa: F401  (BLAS before mlx)

TINY_SEED = 0
SUBJECTS = ["Paris", "Rome", "Berlin", "Madrid", "Lisbon", "Vienna", "Oslo", "Athens", "Dublin", "Prague", "Warsaw", "Bern"]
COUNTRIES = ["France", "Italy", "Germany", "Spain", "Portugal", "Austria", "Norway", "Greece", "Ireland", "Czechia", "Poland", "Switzerland"]


def tiny_documents() -> list[tuple[str, str, int]]:
    """(prompt, completion, label): 48 claims, half true, half false; each gets the correct answer
    (label 1) or the inverted one (label 0), unpaired (docs/method.md § 14)."""
    docs = []
    rng = np.random.default_rng(0)
    for i, (city, country) in enumerate(zip(SUBJECTS, COUNTRIES)):
        wrong = COUNTRIES[(i + 3) % len(COUNTRIES)]
        for claim, truth in ((f"{city} is the capital of {country}.", True), (f"{city} is the capital of {wrong}.", False)):
            for form in ("Is this claim true or false?", "Check the claim."):
                prompt = f"{claim} {form}"
                correct = bool(rng.integers(0, 2))  # which of the pair we keep: correct or inverted answer
                answer = truth if correct else not truth
                completion = '{"correctness": ' + ("true" if answer else "false") + "}"
                docs.append((prompt, completion, int(correct)))
    return docs


def tiny_loaded_model(seed: int = TINY_SEED, max_context: int = 2048):
    """The tiny llama + ChatML tokenizer as the LM layer's :class:`LoadedModel` (with fingerprint).
    ``max_context`` can be raised (RoPE has no hard limit) for tests that need a long stream."""
    from mlx_sdm.lm.loading import LoadedModel, model_fingerprint
    from tests.tiny_lm import build_tiny_lm

    model, tokenizer = build_tiny_lm(seed=seed)
    return LoadedModel(model=model, tokenizer=tokenizer, name=f"tiny-llama-{seed}",
                       fingerprint=model_fingerprint(model, "llama"), max_context=max_context, source="tests/tiny_lm.py")


def tiny_features(lm, docs) -> np.ndarray:
    from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE, force_decode_batch

    feats = force_decode_batch(lm, [(p, c) for p, c, _ in docs], delimiter=DELIMITER_JSON_CLOSE)
    return np.stack([np.asarray(f.vector, dtype=np.float32) for f in feats])


@functools.lru_cache(maxsize=2)
def _fitted_dir(seed: int) -> Path:
    from mlx_sdm.calibration.data import LabelledSet
    from mlx_sdm.calibration.fit_config import FitConfig
    from mlx_sdm.calibration.estimator import SDMEstimator
    from mlx_sdm.network.verifier import DocumentVerifier

    lm = tiny_loaded_model(seed)
    docs = tiny_documents()
    x = tiny_features(lm, docs)
    y = np.array([label for _, _, label in docs], dtype=np.int64)
    ids = [f"tiny-{i}" for i in range(len(docs))]
    texts = [f"{p} {c}" for p, c, _ in docs]
    half = np.arange(len(docs)) % 2 == 0
    train = LabelledSet([i for i, h in zip(ids, half) if h], x[half], y[half], [t for t, h in zip(texts, half) if h])
    cal = LabelledSet([i for i, h in zip(ids, half) if not h], x[~half], y[~half], [t for t, h in zip(texts, half) if not h])
    config = FitConfig(iterations=2, epochs=5, batch_size=8, exemplar_dim=16, seed=seed)
    estimator = SDMEstimator.fit(train, cal, config, source={"tiny": True, "documents": len(docs)})
    verifier = DocumentVerifier(estimator, dict(lm.fingerprint, name=lm.name))  # recipe: JSON close, no system prompt
    out = Path(tempfile.mkdtemp(prefix="tiny-verifier-")) / "verifier"
    verifier.save(out)
    return out


def build_tiny_verifier(directory: str | Path, seed: int = TINY_SEED) -> Path:
    """Fit (once per process) and copy the tiny verifier to ``directory``; returns it."""
    directory = Path(directory)
    if directory.exists():
        shutil.rmtree(directory)
    shutil.copytree(_fitted_dir(seed), directory)
    return directory


def tiny_components(verifier_dir: str | Path | None, seed: int = TINY_SEED, embedder: str = "none",
                    max_context: int = 2048):
    """A components factory for :class:`~mlx_sdm.executor.engine.ChatEngine`: the tiny model and (when
    ``verifier_dir`` is given) the tiny verifier loaded from disk, built on the engine's thread."""

    def factory(config):
        from mlx_sdm.monitor.online.embedders import make_embedder
        from mlx_sdm.turn.values import TurnComponents

        lm = tiny_loaded_model(seed, max_context=max_context)
        verifier = None
        reason = "no verifier fits the tiny model in this test"
        if verifier_dir is not None:
            from mlx_sdm.network.verifier import DocumentVerifier

            verifier = DocumentVerifier.load(verifier_dir, expect_fingerprint=lm.fingerprint)
            reason = None
        emb = make_embedder(embedder, model=lm.model, tokenizer=lm.tokenizer, model_name=lm.name)
        return TurnComponents(lm=lm, verifier=verifier, verifier_path=None if verifier_dir is None else str(verifier_dir),
                                unverifiable_reason=reason, embedder=emb)

    return factory
