"""Where the shipped artifacts live (default verifier, default head).

In a checkout they are in the top-level ``weights/`` folder; in an installed wheel the build puts
the same files inside the package (``mlx_sdm/weights``), found through ``importlib.resources``.
Every caller asks here; nothing else computes a path to ``weights/``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

DEFAULT_VERIFIER_NAME = "smollm2-suite"
TOPIC_VERIFIER_NAME = "smollm2-bbc-topic"  # the shipped verifier with signal (BBC News topics)
#: The SDM-network head shipped for the embedded model (a folder under weights/, usually the compact form of
#: mlx-sdm compress-head); generate/chat/serve decode with it unless --head says otherwise (app/loading.py).
DEFAULT_HEAD_NAME: str | None = "smollm2-suite-head"  # scripts/build_default_head.py (Alg. 4 kept epoch 2)


#: The fine-tuned model folder shipped for the embedded model (``mlx-sdm finetune --task``: LoRA adapters, head and
#: verifier; usecases/model_folder.py): with no ``--model``, generate/chat/serve load it; None: the plain model.
DEFAULT_MODEL_NAME: str | None = "smollm2-tuned"  # scripts/build_default_model.py (one adapter set per task)


WEIGHTS_FOLDER = "weights"  # the checkout's top-level folder; mlx_sdm/weights inside a wheel (setup.py)


def source_weights_dir() -> Path:
    """The checkout's top-level ``weights/`` folder: where the build scripts write shipped artifacts."""
    return Path(__file__).resolve().parents[1] / WEIGHTS_FOLDER


def weights_root() -> Path:
    """The folder holding the shipped verifiers and heads (package data first, then the checkout)."""
    packaged = Path(str(resources.files("mlx_sdm") / WEIGHTS_FOLDER))
    if packaged.is_dir():
        return packaged
    return source_weights_dir()


def shipped(name: str) -> Path:
    """The folder of one shipped artifact, e.g. ``shipped("smollm2-bbc-topic")``."""
    return weights_root() / name


def resolve_artifact(arg: str | Path) -> Path:
    """A verifier/head argument as a folder: the path itself when it exists, else a shipped artifact
    of that name, so ``--verifier weights/smollm2-bbc-topic`` (the docs' spelling) and
    ``--verifier smollm2-bbc-topic`` work from an installed wheel too, with no checkout around."""
    path = Path(arg)
    if path.exists() or path.is_absolute():
        return path
    parts = path.parts[1:] if path.parts[:1] == (WEIGHTS_FOLDER,) else path.parts
    candidate = weights_root().joinpath(*parts) if parts else path
    return candidate if candidate.exists() else path


def default_verifier_dir() -> Path:
    return shipped(DEFAULT_VERIFIER_NAME)


#: The question router every shipped-task verifier routes by meaning with (network/question_router.py).
ROUTER_NAME = "question-router"


def default_router_dir() -> Path | None:
    return shipped(ROUTER_NAME)


def default_model_dir() -> Path | None:
    return shipped(DEFAULT_MODEL_NAME) if DEFAULT_MODEL_NAME else None


def default_head_dir() -> Path | None:
    return shipped(DEFAULT_HEAD_NAME) if DEFAULT_HEAD_NAME else None
