"""LoRA adapters in mlx-lm's own format, one set per task, switched in for the turns of its task.

A fine-tuned model folder (``mlx-sdm finetune --task ...``, docs/finetuning.md) keeps each task's adapters as
mlx-lm writes them: ``adapter_config.json`` + ``adapters.safetensors`` in ``DIR/adapters/<task>/``, so
``mlx_lm.generate --adapter-path DIR/adapters/<task>`` loads them too. Here each set is attached with mlx-lm's
own ``load_adapters`` (``linear_to_lora_layers`` + ``load_weights``, with its checks of every tensor's name and
shape), its LoRA modules kept, and the base model's own linear layers put back; nothing in this module
implements a LoRA layer.

    adapters = attach_adapters(lm.model, [AdapterSource("words", "DIR/adapters/words", (instruction,))])  # off
    with adapters.use(adapters.serves(route.instruction)):   # a turn of one task: that task's set in
        ...
    # every other turn (``use(None)``): exactly the base model's modules (the LoRA layers are swapped out, not
    # scaled to zero), so an everyday answer is plain mlx-lm's, token for token

Switching swaps one set's LoRA modules in and out of the model tree (``update_modules``): a dictionary update
per adapted linear layer, microseconds, no copy of any weight (docs/finetuning.md measures it). Every set wraps
the same base linear objects, so the sets share the base weights.
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


@dataclass(frozen=True)
class AdapterSource:
    """One adapter folder to attach: the name turns switch it in by (the task's; a format-1 folder's one set
    serves all its tasks under the name "adapters"), the folder, and the instructions of the tasks it serves."""

    name: str
    path: Path
    instructions: tuple[str, ...]


@dataclass(frozen=True)
class AdapterSet:
    """One attached set: its LoRA modules (dotted name -> module), kept out of the model tree while off."""

    name: str
    instructions: tuple[str, ...]
    sha256: str
    path: str
    settings: LoraSettings
    modules: tuple[tuple[str, Any], ...]


class TaskAdapters:
    """The adapter sets attached to one model, all off unless a turn of one of their tasks switches its set in:
    a question routed to one of a set's ``instructions`` (the task instructions it was trained on)."""

    def __init__(self, model: nn.Module, sets: tuple[AdapterSet, ...], base: tuple[tuple[str, Any], ...], *,
                 folder: str | None = None):
        self._model = model
        self.folder = folder  # the model folder the sets came from (what the chat shows)
        self.sets = {s.name: s for s in sets}
        self._base = dict(base)  # every adapted layer's own linear module (the tree holds these while off)
        self._on: str | None = None

    @property
    def active(self) -> bool:
        return self._on is not None

    @property
    def current(self) -> AdapterSet | None:
        """The set switched in now (None: the base model's own modules)."""
        return self.sets[self._on] if self._on is not None else None

    @property
    def only(self) -> AdapterSet | None:
        """The one set, where there is one (a one-task folder, or a format-1 folder's shared set)."""
        return next(iter(self.sets.values())) if len(self.sets) == 1 else None

    def serves(self, instruction: str | None) -> str | None:
        """The set a turn routed to the task of ``instruction`` is answered (and its answer read) with; None:
        no set's task, the base model answers."""
        if instruction is None:
            return None
        return next((s.name for s in self.sets.values() if instruction.strip() in s.instructions), None)

    def set_for(self, task: str | None) -> AdapterSet | None:
        """The set that answers ``task`` (a task name, or a set's instruction), None where none does."""
        if task is None:
            return None
        if task in self.sets:
            return self.sets[task]
        return self.sets.get(self.serves(task) or "")

    def switch(self, which: str | bool | None) -> None:
        """Put one set's LoRA layers in (its name; ``True``: the one set), or the base model's own back (None)."""
        name = self._name(which)
        if name == self._on:
            return
        if self._on is not None:
            self._model.update_modules(tree_unflatten([(n, self._base[n]) for n, _ in self.current.modules]))
        if name is not None:
            self._model.update_modules(tree_unflatten(list(self.sets[name].modules)))
        self._on = name

    def _name(self, which: str | bool | None) -> str | None:
        if which is None or which is False:
            return None
        if which is True:
            if self.only is None:
                raise ArtifactError(f"this model has adapters for {len(self.sets)} tasks ({', '.join(self.sets)}); "
                                    "name the task whose adapters to use")
            return self.only.name
        if which not in self.sets:
            raise ArtifactError(f"no adapters for task {which!r}; this model has them for {', '.join(self.sets)}")
        return which

    @contextmanager
    def use(self, which: str | bool | None) -> Iterator[None]:
        """One set in (its name; ``True``: the one set) or none (None/False) for the block, then as they were."""
        before = self._on
        self.switch(which)
        try:
            yield
        finally:
            self.switch(before)


#: The adapters attached to a model object, by ``id`` (a model loaded once and shared, as the tests share
#: SmolLM2, gets the sets it already carries back instead of loading them again).
_ATTACHED: "weakref.WeakValueDictionary[int, TaskAdapters]" = weakref.WeakValueDictionary()


def attach_adapters(model: nn.Module, sources: "list[AdapterSource] | str | Path", *,
                    instructions: tuple[str, ...] = (), folder: str | None = None) -> TaskAdapters:
    """Each source's adapter folder loaded onto ``model`` with mlx-lm's ``load_adapters``, its LoRA modules kept,
    then the base linears put back; turns switch one set in at a time. ``sources`` may be one folder (with the
    ``instructions`` it serves: a one-set model). A model that carries the same set (same file sha256) already
    reuses it."""
    from mlx_lm.tuner.utils import remove_lora_layers

    if not isinstance(sources, list):
        sources = [AdapterSource("adapters", Path(sources), tuple(instructions))]
    existing = _ATTACHED.get(id(model))
    known: dict[str, AdapterSet] = {}
    if existing is not None and existing._model is model:
        existing.switch(None)  # the tree holds the base model's own modules again
        known = {s.sha256: s for s in existing.sets.values()}
    elif lora_layer_names(model):
        remove_lora_layers(model)
    base: dict[str, Any] = dict(existing._base) if existing is not None and existing._model is model else {}
    sets = [_load_set(model, source, known, base) for source in sources]
    model.eval()
    adapters = TaskAdapters(model, tuple(sets), tuple(base.items()), folder=folder)
    _ATTACHED[id(model)] = adapters
    return adapters


def _load_set(model: nn.Module, source: AdapterSource, known: dict[str, AdapterSet],
              base: dict[str, Any]) -> AdapterSet:
    """One adapter folder as a kept set; the model's tree is left with its base linears (recorded in ``base``)."""
    from mlx_lm.tuner.utils import load_adapters

    folder = Path(source.path)
    config = read_adapter_config(folder)
    settings = LoraSettings.from_adapter_config(config, str(folder / ADAPTER_CONFIG_FILE))
    sha = file_sha256(folder / ADAPTER_WEIGHTS_FILE)
    instructions = tuple(i.strip() for i in source.instructions)
    if sha in known:
        return AdapterSet(source.name, instructions, sha, str(folder), settings, known[sha].modules)
    try:
        load_adapters(model, str(folder))
    except ValueError as exc:
        raise ArtifactError(f"{folder}: these adapters do not fit this model ({str(exc).splitlines()[0]}); "
                            "load the base model they were trained on") from None
    names = set(lora_layer_names(model))
    modules = tuple((name, module) for name, module in model.named_modules() if name in names)
    for name, module in modules:
        base.setdefault(name, module["linear"])
    model.update_modules(tree_unflatten([(name, module["linear"]) for name, module in modules]))
    return AdapterSet(source.name, instructions, sha, str(folder), settings, modules)
