"""Verifier use cases for the commands and scripts: feature extraction with a progress bar and an
on-disk cache, ``mlx-sdm train`` on text rows, ``mlx-sdm verify`` on text rows, the model a verifier
folder needs. The domain object itself is :class:`mlx_sdm.network.verifier.DocumentVerifier`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.errors import ArtifactError, DataError
from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE
from mlx_sdm.network.encoding import VerificationDocument
from mlx_sdm.network.verifier import VERIFIER_MANIFEST, DocumentVerifier, FeatureRecipe, document_features, labelled_set


#: Documents per cache file: an interrupted extraction keeps every finished chunk.
CACHE_CHUNK = 100


def cached_document_features(lm, documents: Sequence[VerificationDocument], *, delimiter: str,
                             cache_dir: str | Path | None, desc: str = "features",
                             max_batch_tokens: int = 4096) -> np.ndarray:
    """``document_features`` with a progress bar and an on-disk cache (chunks of ``CACHE_CHUNK``
    documents) keyed by model fingerprint, delimiter rule and the exact documents."""
    import hashlib
    import io

    from mlx_sdm.atomic import atomic_write_bytes

    width = 2 * lm.hidden_size
    out = np.zeros((len(documents), width), dtype=np.float32)
    from mlx_sdm.progress import progress_bar

    with progress_bar(total=len(documents), desc=desc, unit="doc") as bar:
        for start in range(0, len(documents), CACHE_CHUNK):
            chunk = documents[start : start + CACHE_CHUNK]
            key = hashlib.sha256(json.dumps([lm.fingerprint["head_sha256"], delimiter]).encode())
            for d in chunk:
                key.update(json.dumps([d.id, d.system, d.prompt, d.completion]).encode())
            path = Path(cache_dir) / f"{key.hexdigest()[:24]}.npy" if cache_dir is not None else None
            if path is not None and path.is_file():
                cached = np.load(path)
                if cached.shape == (len(chunk), width):
                    out[start : start + len(chunk)] = cached
                    bar.update(len(chunk))
                    continue
            feats = document_features(lm, chunk, delimiter=delimiter, progress=bar.update,
                                      max_batch_tokens=max_batch_tokens)
            out[start : start + len(chunk)] = feats
            if path is not None:
                buffer = io.BytesIO()
                np.save(buffer, feats)
                atomic_write_bytes(path, buffer.getvalue())
    return out


def is_text_jsonl(path: str | Path) -> bool:
    """True when the first row of a JSONL file is a text row ``{"prompt", "completion", ...}``."""
    from mlx_sdm.jsonl import first_jsonl_object
    from mlx_sdm.network.encoding import is_text_row

    try:  # plain or gzipped; a file that cannot be read is reported by the reader that follows
        row = first_jsonl_object(path)
    except DataError:
        return False
    return row is not None and is_text_row(row)


def is_verifier_dir(path: str | Path) -> bool:
    return (Path(path) / VERIFIER_MANIFEST).is_file()


def model_for_verifier(directory: str | Path, model: str | None, quantized: bool = False):
    """The model a verifier needs: ``model`` if given, else the one named in its manifest."""
    from mlx_sdm.lm.loading import load_model

    if model is None:
        try:
            manifest = json.loads((Path(directory) / VERIFIER_MANIFEST).read_text(encoding="utf-8"))
            fingerprint = manifest["model_fingerprint"]
        except (OSError, json.JSONDecodeError, KeyError) as exc:
            raise ArtifactError(f"{directory}: cannot read {VERIFIER_MANIFEST} ({exc})") from exc
        source = fingerprint.get("source")
        model = source if source and Path(source).exists() else fingerprint.get("name")
    return load_model(model, quantized=quantized)


def train_text_verifier(train_path: str | Path, calibration_path: str | Path, out: str | Path, config: FitConfig, *,
                        model: str | None = None, quantized: bool = False, delimiter: str = DELIMITER_JSON_CLOSE,
                        progress: bool = True) -> DocumentVerifier:
    """``mlx-sdm train`` on text rows: force-decode both files with the LM, fit, save atomically.
    Every row is checked before any model work starts; nothing is written unless fitting succeeds."""
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.encoding import read_text_jsonl

    train = read_text_jsonl(train_path)
    calibration = read_text_jsonl(calibration_path)
    lm = load_model(model, quantized=quantized)
    systems = {d.system for d in train + calibration}
    recipe = FeatureRecipe(delimiter=delimiter, system=systems.pop() if len(systems) == 1 else None)
    tr = labelled_set(train, cached_document_features(lm, train, delimiter=delimiter, cache_dir=None, desc="train rows"))
    ca = labelled_set(calibration, cached_document_features(lm, calibration, delimiter=delimiter, cache_dir=None,
                                                            desc="calibration rows"))
    fingerprint = dict(lm.fingerprint, name=lm.name, source=lm.source)
    source = {"kind": "text", "train": str(train_path), "calibration": str(calibration_path), "model": lm.name,
              "delimiter": delimiter}
    verifier = DocumentVerifier.fit_features(fingerprint, tr, ca, config, recipe=recipe, source=source,
                                             progress=progress)
    verifier.save(out)
    return verifier


def labelled_text_rows(verifier_dir: str | Path, input_path: str | Path, *, model: str | None = None,
                       quantized: bool = False) -> tuple[DocumentVerifier, LabelledSet]:
    """``mlx-sdm report`` on labelled ``{"prompt", "completion", "label"}`` rows: the verifier and the
    rows' features (force-decoded by its model, its system prompt by default) as a LabelledSet."""
    from mlx_sdm.network.encoding import read_text_jsonl

    read_text_jsonl(input_path)  # every row (and its label) checked before any model work
    lm = model_for_verifier(verifier_dir, model, quantized)
    verifier = DocumentVerifier.load(verifier_dir, expect_fingerprint=lm.fingerprint)
    documents = read_text_jsonl(input_path, default_system=verifier.recipe.system)
    feats = cached_document_features(lm, documents, delimiter=verifier.recipe.delimiter, cache_dir=None, desc="rows")
    return verifier, labelled_set(documents, feats)


def verify_text_rows(verifier_dir: str | Path, input_path: str | Path, *, model: str | None = None,
                     quantized: bool = False, explain: int = 0) -> list[dict]:
    """``mlx-sdm verify`` on ``{"prompt", "completion"}`` rows: one verdict dict per row, in order, judged
    exactly as the chat and ``/v1/verify`` judge that question and answer (the pipeline's
    :meth:`~mlx_sdm.turn.pipeline.TurnPipeline.judge_texts`: the routed task's system prompt unless the row
    names its own, out of scope for a question that starts none of a routing verifier's tasks), with the same
    status, badge and sentence."""
    from mlx_sdm.network.encoding import read_text_jsonl
    from mlx_sdm.network.verdict_words import verdict_json
    from mlx_sdm.progress import progress_bar
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnComponents, TurnOptions, TurnRequest

    documents = read_text_jsonl(input_path, require_label=False, default_system=None)  # checked before model work
    lm = model_for_verifier(verifier_dir, model, quantized)
    verifier = DocumentVerifier.load(verifier_dir, expect_fingerprint=lm.fingerprint)
    pipeline = TurnPipeline(TurnComponents(lm=lm, verifier=verifier, verifier_path=str(verifier_dir)))
    # the nearest exemplar is kept even with explain=0: the sentence names it as the chat's does
    options = TurnOptions(explain=max(explain, 1))
    answers = [(TurnRequest([{"role": "user", "content": doc.prompt}],
                            options if doc.system is None else replace(options, system_prompt=doc.system)),
                doc.completion) for doc in documents]
    with progress_bar(total=len(answers), desc="rows", unit="doc") as bar:
        outcomes = pipeline.judge_texts(answers, on_progress=bar.update)
    out = []
    for doc, outcome in zip(documents, outcomes):
        data = verdict_json(outcome.verdict)
        row = {"id": doc.id, **{k: v for k, v in data.items() if k not in ("exemplars", "softmax", "alpha")}}
        if explain > 0:
            row["exemplars"] = data["exemplars"]
        out.append(row)
    return out
