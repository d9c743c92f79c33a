"""Loading what a turn needs from a user's spec: the model, the verifier (``--verifier DIR|none``,
default: the shipped one for the model), the SDM-network head (``--head DIR|none``, default: the
shipped one for the embedded model, :func:`resolve_head`), the TRACER embedder. One rule for every
interface (``generate``, ``chat``, the server)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_sdm.errors import DataError, ModelMismatchError
from mlx_sdm.network.coverage import TaskInstruction
from mlx_sdm.resources import default_head_dir, default_verifier_dir
from mlx_sdm.turn.values import TurnComponents

#: Spellings of "no verification" accepted by ``--verifier``.
VERIFIER_OFF = {"none", "off", "no"}
#: Spellings of "no SDM-network head" accepted by ``--head`` (also the empty string).
HEAD_OFF = VERIFIER_OFF


def verification_off(spec: str | None) -> bool:
    """``--verifier none`` (or off/no): no verifier at all, not a folder named "none"."""
    return spec is not None and spec.strip().lower() in VERIFIER_OFF


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

    if verification_off(spec):
        return LoadedVerifier(None, None, "verification is off (--verifier none)")
    if spec is not None:
        return LoadedVerifier(DocumentVerifier.load(spec, expect_fingerprint=lm.fingerprint), spec, None)
    path = default_verifier_dir()
    if not (Path(path) / VERIFIER_MANIFEST).is_file():
        return LoadedVerifier(None, None, "no default verifier is installed (weights/); "
                                          "rebuild it with `mlx-sdm build-verifier --recipe weights/smollm2-suite/recipe.json --out DIR`")
    try:
        return LoadedVerifier(DocumentVerifier.load(path, expect_fingerprint=lm.fingerprint), str(path), None)
    except ModelMismatchError:
        return LoadedVerifier(None, None, f"no verifier fits {lm.name}: the default one was built for another model; "
                                          "pass --verifier DIR (build one with mlx-sdm train)")


@dataclass
class LoadedHead:
    head: Any | None  # hidden states -> vocabulary logits (VocabularyHeads.vocab_logits), or None
    path: str | None  # the folder it came from
    tasks: tuple[TaskInstruction, ...] | None = None  # the tasks it decodes (None: its manifest names none)


def resolve_head(spec: str | None, model: str | None) -> tuple[str | None, bool]:
    """The head folder a turn decodes with, and whether it is the shipped default. ``--head DIR``: that
    folder; ``--head none`` (or off/no/empty): none; no ``--head``: the shipped default head
    (``resources.DEFAULT_HEAD_NAME``) when one is set and installed and ``model`` names the embedded
    default model. The default goes with the model whatever ``--verifier`` says (its manifest records the
    verifier it was trained with)."""
    from mlx_sdm.lm.loading import EMBEDDED_ALIASES
    from mlx_sdm.network.heads import HEAD_MANIFEST_FILE

    if spec is not None:
        return (None, False) if spec.strip().lower() in HEAD_OFF | {""} else (spec, False)
    folder = default_head_dir()
    if folder is None or model not in EMBEDDED_ALIASES or not (folder / HEAD_MANIFEST_FILE).is_file():
        return None, False
    return str(folder), True


def load_head(spec: str | None, lm: Any, model: str | None = None) -> LoadedHead:
    """The SDM-network head for ``lm`` as :func:`resolve_head` picks it (``model``: the user's model spec).
    A folder named explicitly must fit the model (ModelMismatchError otherwise); the default that does not
    fit is left out, as the default verifier is."""
    path, is_default = resolve_head(spec, model)
    if path is None:
        return LoadedHead(None, None)
    from mlx_sdm.network.heads import load_head as load_heads

    try:
        heads = load_heads(path, lm.model, lm.fingerprint)
    except ModelMismatchError:
        if not is_default:
            raise
        return LoadedHead(None, None)
    if is_default and not heads.tasks:
        return LoadedHead(None, None)  # a default head must say which turns it decodes: never every turn
    return LoadedHead(heads.vocab_logits, path, heads.tasks)


def model_folder_for(model: str | None) -> Path | None:
    """The fine-tuned model folder a ``--model`` spec names: the folder itself (one with an ``mlx-sdm-model.json``),
    or, with no ``--model``, the shipped default folder when one is installed; None: a plain model."""
    from mlx_sdm.resources import default_model_dir
    from mlx_sdm.usecases.model_folder import MODEL_MANIFEST, is_model_folder

    if model is not None:
        return Path(model) if is_model_folder(model) else None
    folder = default_model_dir()
    return folder if folder is not None and (folder / MODEL_MANIFEST).is_file() else None


def load_components(model: str | None = None, *, verifier: str | None = None, head: str | None = None,
                    embedder: str = "none", quantized: bool = False) -> TurnComponents:
    """Model (embedded SmolLM2 by default, with the shipped fine-tuned folder when installed), head, verifier
    and TRACER embedder for a turn."""
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.monitor.online.embedders import EMBEDDER_CHOICES, make_embedder

    if embedder not in EMBEDDER_CHOICES:
        raise DataError(f"unknown embedder {embedder!r}; use one of {', '.join(EMBEDDER_CHOICES)}", field="embedder")
    folder = model_folder_for(model)
    tasks: tuple[TaskInstruction, ...] = ()
    task_heads: tuple[tuple[TaskInstruction, Any], ...] = ()
    if folder is not None:
        parts = load_folder_parts(folder, verifier=verifier, head=head, quantized=quantized)
        lm, loaded, head_loaded, tasks, task_heads = parts.lm, parts.verifier, parts.head, parts.tasks, parts.task_heads
        if model is None and head is None:  # the shipped default folder
            task_heads += shipped_head_beside(lm, tasks)
    else:
        lm = load_model(model, quantized=quantized)
        loaded, head_loaded = load_verifier(verifier, lm), load_head(head, lm, model)
    router = getattr(loaded.verifier, "router", None)
    if router is not None:
        router.embed(["warm up"])  # load the question router's sentence embedder now, not on the first turn
    return TurnComponents(
        lm=lm, verifier=loaded.verifier, verifier_path=loaded.path, unverifiable_reason=loaded.unverifiable_reason,
        head=head_loaded.head, head_path=head_loaded.path, head_tasks=head_loaded.tasks, adapted_tasks=tasks,
        task_heads=task_heads,
        embedder=make_embedder(embedder, model=lm.model, tokenizer=lm.tokenizer, model_name=lm.name),
    )


def shipped_head_beside(lm: Any, adapted: tuple[TaskInstruction, ...]) -> tuple[tuple[TaskInstruction, Any], ...]:
    """The shipped default head, for the tasks it decodes that the shipped default folder has no adapters for: it
    decodes them as it does without the folder, so no task's answer is worse for the folder (none: no head
    shipped, or every task it decodes has its adapters)."""
    loaded = load_head(None, lm, None)
    if loaded.head is None or not loaded.tasks:
        return ()
    names = {t.name for t in adapted}
    return tuple((t, loaded.head) for t in loaded.tasks if t.name not in names)


def load_folder_parts(folder: Path, *, verifier: str | None, head: str | None, quantized: bool) -> FolderParts:
    """A fine-tuned folder's model (its adapters attached), its verifier and heads unless ``--verifier`` /
    ``--head`` name others; a verifier that reads other states than this model's adapters give is refused."""
    from mlx_sdm.usecases.model_folder import VERIFIER_DIR, check_reads_adapters, load_model_folder

    loaded = load_model_folder(folder, quantized=quantized or None)
    lm, manifest = loaded.lm, loaded.manifest
    if verifier is None and not any(e.verifier for e in manifest.entries):
        found = LoadedVerifier(None, None, f"{folder} has no verifier: the fine-tune could not build one (its "
                                           "report.md says why); its answers go unverified")
    else:
        found = load_verifier(verifier if verifier is not None else str(folder / VERIFIER_DIR), lm)
        if found.verifier is not None:
            check_reads_adapters(found.verifier, lm, where=str(found.path))
    if head is not None:
        return FolderParts(lm, found, load_head(head, lm, None), manifest.tasks)
    shared = {e.head for e in manifest.entries if e.head is not None}
    if manifest.format_version == 1 and shared:  # a format-1 folder: one head for all its tasks
        return FolderParts(lm, found, load_head(str(folder / shared.pop()), lm, None), manifest.tasks)
    heads = tuple((e.instruction, load_head(str(folder / e.head), lm, None).head) for e in manifest.entries if e.head)
    return FolderParts(lm, found, LoadedHead(None, None), manifest.tasks, heads)


@dataclass(frozen=True)
class FolderParts:
    """What a fine-tuned folder gives a turn: the model with its adapters, the verifier, a head chosen with
    ``--head`` (or a format-1 folder's one head), the tasks, and each task's own head where it kept one."""

    lm: Any
    verifier: LoadedVerifier
    head: LoadedHead
    tasks: tuple[TaskInstruction, ...]
    task_heads: tuple[tuple[TaskInstruction, Any], ...] = ()


def chat_components(config: Any) -> TurnComponents:
    """The chat engine's loader: :func:`load_components` from an ``EngineConfig``."""
    return load_components(config.model, verifier=config.verifier, head=config.head, embedder=config.embedder,
                           quantized=config.quantized)
