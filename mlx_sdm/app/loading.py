"""Loading what a turn needs from a user's spec: the model, the verifier (``--verifier DIR|none``,
default: the shipped one for the model), the SDM-network head, the TRACER embedder. ONE rule for
every interface (``generate``, ``chat``, the server)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_sdm.errors import DataError, ModelMismatchError
from mlx_sdm.resources import default_verifier_dir
from mlx_sdm.session.pipeline import TurnComponents

#: Spellings of "no verification" accepted by ``--verifier``.
VERIFIER_OFF = {"none", "off", "no"}


@dataclass
class LoadedVerifier:
    verifier: Any | None  # mlx_sdm.network.verifier.DocumentVerifier
    path: str | None
    unverifiable_reason: str | None  # why there is none


def load_verifier(spec: str | None, lm: Any) -> LoadedVerifier:
    """``spec``: a verifier folder, ``none``/``off``/``no``, or None for the shipped default. A folder
    named explicitly must fit the model (ModelMismatchError otherwise); the default that does not fit
    leaves answers unverifiable, with the reason."""
    from mlx_sdm.network.verifier import VERIFIER_MANIFEST, DocumentVerifier

    if spec is not None and spec.lower() in VERIFIER_OFF:
        return LoadedVerifier(None, None, "verification is off (--verifier none)")
    if spec is not None:
        return LoadedVerifier(DocumentVerifier.load(spec, expect_fingerprint=lm.fingerprint), spec, None)
    path = default_verifier_dir()
    if not (Path(path) / VERIFIER_MANIFEST).is_file():
        return LoadedVerifier(None, None, "no default verifier is installed (weights/); "
                                          "build one with scripts/build_default_verifier.py")
    try:
        return LoadedVerifier(DocumentVerifier.load(path, expect_fingerprint=lm.fingerprint), str(path), None)
    except ModelMismatchError:
        return LoadedVerifier(None, None, f"no verifier fits {lm.name}: the default one was built for another model; "
                                          "pass --verifier DIR (build one with mlx-sdm train)")


def load_head(spec: str | None, lm: Any) -> Any | None:
    """The SDM-network head's vocabulary logits (``--head DIR``), or None."""
    if not spec:
        return None
    from mlx_sdm.network.heads import load_head as load_heads

    return load_heads(spec, lm.model, lm.fingerprint).vocab_logits


def load_components(model: str | None = None, *, verifier: str | None = None, head: str | None = None,
                    embedder: str = "none", quantized: bool = False) -> TurnComponents:
    """Model (embedded SmolLM2 by default), head, verifier and TRACER embedder for a turn."""
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.monitor.embedders import EMBEDDER_CHOICES, make_embedder

    if embedder not in EMBEDDER_CHOICES:
        raise DataError(f"unknown embedder {embedder!r}; use one of {', '.join(EMBEDDER_CHOICES)}", field="embedder")
    lm = load_model(model, quantized=quantized)
    loaded = load_verifier(verifier, lm)
    return TurnComponents(
        lm=lm, verifier=loaded.verifier, verifier_path=loaded.path, unverifiable_reason=loaded.unverifiable_reason,
        head=load_head(head, lm), head_path=head,
        embedder=make_embedder(embedder, model=lm.model, tokenizer=lm.tokenizer, model_name=lm.name),
    )


def chat_components(config: Any) -> TurnComponents:
    """The chat engine's loader: :func:`load_components` from an ``EngineConfig``."""
    return load_components(config.model, verifier=config.verifier, head=config.head, embedder=config.embedder,
                           quantized=config.quantized)
