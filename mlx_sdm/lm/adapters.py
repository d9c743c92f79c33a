"""LoRA adapters in mlx-lm's own format, switched on for the turns of the tasks they were trained on.

A fine-tuned model folder (``mlx-sdm finetune --task ...``, docs/finetuning.md) keeps its adapters as
mlx-lm writes them: ``adapter_config.json`` + ``adapters.safetensors``, so ``mlx_lm.generate --adapter-path``
loads them too. Here they are attached with mlx-lm's own ``linear_to_lora_layers`` / ``load_adapters``;
nothing in this module implements a LoRA layer.

    adapters = attach_adapters(lm.model, "DIR/adapters", instructions=("Classify the topic of ...",))  # off
    with adapters.use(adapters.serves(route.instruction)):   # a turn of one of its tasks: the adapted model
        ...
    # every other turn: exactly the base model's modules (the LoRA layers are swapped out, not scaled
    # to zero), so an everyday answer is plain mlx-lm's, token for token

Switching swaps the LoRA modules in and out of the model tree (``update_modules``): a dictionary update
per adapted linear layer, microseconds, no copy of any weight (docs/finetuning.md measures it).
"""

from __future__ import annotations

import hashlib
import json
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from mlx_sdm.errors import ArtifactError

#: mlx-lm's file names (mlx_lm/tuner/utils.py load_adapters, mlx_lm/lora.py).
ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapters.safetensors"
#: mlx-lm's defaults for a LoRA run (mlx_lm/lora.py CONFIG_DEFAULTS), except the layer count: the last 8
#: blocks hold what a short supervised run needs (docs/finetuning.md, the rank and layer choice).
DEFAULT_LORA_LAYERS = 8
DEFAULT_LORA_SCALE = 20.0
DEFAULT_LORA_DROPOUT = 0.0
#: The parameter names mlx-lm's LoRA layers add (what an adapter file holds).
ADAPTER_LEAVES = ("lora_a", "lora_b")


@dataclass(frozen=True)
class LoraSettings:
    """What ``linear_to_lora_layers`` is called with; written as mlx-lm's ``adapter_config.json``."""

    rank: int
    num_layers: int = DEFAULT_LORA_LAYERS
    scale: float = DEFAULT_LORA_SCALE
    dropout: float = DEFAULT_LORA_DROPOUT

    @property
    def lora_parameters(self) -> dict[str, Any]:
        return {"rank": self.rank, "scale": self.scale, "dropout": self.dropout}

    def adapter_config(self, **extra: Any) -> dict[str, Any]:
        """mlx-lm's ``adapter_config.json`` keys (``fine_tune_type``, ``num_layers``, ``lora_parameters``), plus
        ``extra`` (mlx-lm reads only the keys it knows)."""
        return {"fine_tune_type": "lora", "num_layers": self.num_layers, "lora_parameters": self.lora_parameters,
                **extra}

    @classmethod
    def from_adapter_config(cls, config: dict[str, Any], where: str) -> "LoraSettings":
        if config.get("fine_tune_type", "lora") != "lora":
            raise ArtifactError(f"{where}: fine_tune_type {config.get('fine_tune_type')!r}; mlx-sdm switches LoRA "
                                "adapters per turn and reads only fine_tune_type \"lora\"")
        params = config.get("lora_parameters") or {}
        try:
            return cls(int(params["rank"]), int(config["num_layers"]), float(params["scale"]),
                       float(params.get("dropout", 0.0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(f"{where}: not an mlx-lm LoRA adapter_config.json ({exc!r} missing or wrong)") from None


def lora_layer_names(model: nn.Module) -> list[str]:
    """The dotted names of the model's LoRA layers (mlx-lm's ``LoRALinear`` and the like: a ``linear`` inside)."""
    return [name for name, module in model.named_modules() if "lora_a" in module and "linear" in module]


def add_lora_layers(model: nn.Module, settings: LoraSettings) -> None:
    """mlx-lm's ``linear_to_lora_layers`` on the last ``settings.num_layers`` blocks (all linear layers of each)."""
    from mlx_lm.tuner.utils import linear_to_lora_layers

    linear_to_lora_layers(model, settings.num_layers, settings.lora_parameters)


def adapter_weights(model: nn.Module) -> dict[str, mx.array]:
    """The LoRA parameters of a model (what ``adapters.safetensors`` holds, as mlx-lm saves it)."""
    return {name: value for name, value in tree_flatten(model.parameters())
            if name.rsplit(".", 1)[-1] in ADAPTER_LEAVES}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_adapter_config(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / ADAPTER_CONFIG_FILE
    if not path.is_file() or not (Path(folder) / ADAPTER_WEIGHTS_FILE).is_file():
        raise ArtifactError(f"{folder}: not an adapter folder (needs {ADAPTER_CONFIG_FILE} and {ADAPTER_WEIGHTS_FILE}, "
                            "as mlx_lm.lora writes them)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: corrupt ({exc.msg}); rerun the fine-tune") from None


class TaskAdapters:
    """LoRA adapters attached to one model, off unless a turn of one of their tasks asks for them: a question
    routed to one of ``instructions`` (the task instructions the adapters were trained on)."""

    def __init__(self, model: nn.Module, *, instructions: tuple[str, ...], sha256: str, path: str,
                 settings: LoraSettings):
        self.instructions = tuple(i.strip() for i in instructions)
        self.sha256 = sha256
        self.path = path
        self.settings = settings
        self._model = model
        names = lora_layer_names(model)
        self._lora = [(name, module) for name, module in model.named_modules() if name in set(names)]
        self._base = [(name, module["linear"]) for name, module in self._lora]
        self._on = True
        self.switch(False)

    @property
    def active(self) -> bool:
        return self._on

    def serves(self, instruction: str | None) -> bool:
        """A turn routed to the task of ``instruction`` is answered (and its answer read) with the adapters on."""
        return instruction is not None and instruction.strip() in self.instructions

    def switch(self, on: bool) -> None:
        """Put the LoRA layers in (``on``) or the base model's own layers back."""
        if on == self._on:
            return
        self._model.update_modules(tree_unflatten(self._lora if on else self._base))
        self._on = on

    @contextmanager
    def use(self, on: bool) -> Iterator[None]:
        """The adapters on (or off) for the block, then as they were."""
        before = self._on
        self.switch(on)
        try:
            yield
        finally:
            self.switch(before)


#: The adapters attached to a model object, by ``id`` (a model loaded once and shared, as the tests share
#: SmolLM2, gets the same adapters back instead of a second set of LoRA layers).
_ATTACHED: "weakref.WeakValueDictionary[int, TaskAdapters]" = weakref.WeakValueDictionary()


def attach_adapters(model: nn.Module, folder: str | Path, *, instructions: tuple[str, ...]) -> TaskAdapters:
    """Load an mlx-lm adapter folder onto ``model`` with mlx-lm's ``load_adapters`` (its checks of every
    tensor's name and shape), then keep both module sets so turns switch between them. A model that carries
    these same adapters already gets them back; other LoRA layers on it are removed first."""
    from mlx_lm.tuner.utils import load_adapters, remove_lora_layers

    folder = Path(folder)
    config = read_adapter_config(folder)
    settings = LoraSettings.from_adapter_config(config, str(folder / ADAPTER_CONFIG_FILE))
    sha = file_sha256(folder / ADAPTER_WEIGHTS_FILE)
    existing = _ATTACHED.get(id(model))
    if existing is not None and existing._model is model:
        if existing.sha256 == sha:
            existing.instructions = tuple(i.strip() for i in instructions)
            return existing
        existing.switch(True)
        remove_lora_layers(model)
        del _ATTACHED[id(model)]
    elif lora_layer_names(model):
        remove_lora_layers(model)
    try:
        load_adapters(model, str(folder))
    except ValueError as exc:
        raise ArtifactError(f"{folder}: these adapters do not fit this model ({str(exc).splitlines()[0]}); "
                            "load the base model they were trained on") from None
    model.eval()
    adapters = TaskAdapters(model, instructions=instructions, sha256=sha, path=str(folder), settings=settings)
    _ATTACHED[id(model)] = adapters
    return adapters
