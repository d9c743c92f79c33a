"""The recipe of a verifier built from constructed documents, kept beside its weights as ``recipe.json``.

A recipe holds every setting of the build (model, tasks, pool sizes, test sizes, seed, and the full fit
configuration), so ``mlx-sdm build-verifier --recipe FILE --out DIR`` rebuilds the verifier from a wheel
install with nothing else to remember. The fit settings are written out in full rather than left to
``FitConfig``'s defaults, so a later change of a default does not change what a recipe builds.

    {"kind": "constructed_documents", "model": "smollm2",
     "tasks": ["bbc_topic", "fever", ...], "sizes": {"bbc_topic": 1600}, "per_task": 40,
     "test_per_task": 40, "seed": 0, "fit": {"iterations": 5, "epochs": 40, ...}}
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.errors import DataError

RECIPE_FILE = "recipe.json"
RECIPE_KIND = "constructed_documents"
FIT_KEYS = tuple(f.name for f in dataclasses.fields(FitConfig))


@dataclass(frozen=True)
class VerifierRecipe:
    """What a constructed-documents build reads: ``sizes`` overrides ``per_task`` for the tasks it names."""

    tasks: tuple[str, ...]
    model: str = "smollm2"
    per_task: int = 40
    sizes: dict[str, int] = field(default_factory=dict)
    test_per_task: int = 40
    seed: int = 0
    fit: FitConfig = field(default_factory=FitConfig)

    def pool_size(self, task: str) -> int:
        return self.sizes.get(task, self.per_task)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": RECIPE_KIND, "model": self.model, "tasks": list(self.tasks), "sizes": dict(self.sizes),
                "per_task": self.per_task, "test_per_task": self.test_per_task, "seed": self.seed,
                "fit": dataclasses.asdict(self.fit)}


def _int(raw: dict, key: str, default: int, path: str) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DataError(f"{key!r} must be a whole number ≥ 0, got {value!r}", path=path, field=key)
    return value


def recipe_from_dict(raw: Any, path: str = "recipe") -> VerifierRecipe:
    """A recipe from its JSON object; any unknown key, wrong type or unknown fit setting is a DataError
    naming the file and the field."""
    if not isinstance(raw, dict):
        raise DataError("a recipe is a JSON object", path=path)
    known = {"kind", "model", "tasks", "sizes", "per_task", "test_per_task", "seed", "fit"}
    for key in raw:
        if key not in known:
            raise DataError(f"unknown key {key!r} (known: {', '.join(sorted(known))})", path=path, field=key)
    if raw.get("kind", RECIPE_KIND) != RECIPE_KIND:
        raise DataError(f"'kind' must be {RECIPE_KIND!r}, got {raw.get('kind')!r}", path=path, field="kind")
    tasks = raw.get("tasks")
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) and t for t in tasks):
        raise DataError("'tasks' must be a non-empty list of task names or JSONL paths", path=path, field="tasks")
    sizes = raw.get("sizes", {})
    if not isinstance(sizes, dict):
        raise DataError("'sizes' must map task names to pool sizes", path=path, field="sizes")
    sizes = {str(k): _int(sizes, k, 0, path) for k in sizes}
    fit = raw.get("fit", {})
    if not isinstance(fit, dict):
        raise DataError("'fit' must be an object of FitConfig settings", path=path, field="fit")
    for key in fit:
        if key not in FIT_KEYS:
            raise DataError(f"unknown fit setting {key!r} (known: {', '.join(FIT_KEYS)})", path=path, field=f"fit.{key}")
    model = raw.get("model", "smollm2")
    if not isinstance(model, str) or not model:
        raise DataError("'model' must be a model name or folder", path=path, field="model")
    return VerifierRecipe(tasks=tuple(tasks), model=model, per_task=_int(raw, "per_task", 40, path), sizes=sizes,
                          test_per_task=_int(raw, "test_per_task", 40, path), seed=_int(raw, "seed", 0, path),
                          fit=FitConfig(**fit))


def read_recipe(path: str | Path) -> VerifierRecipe:
    """The recipe in ``path`` (a ``recipe.json``, or a verifier folder holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / RECIPE_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError("no recipe here; give a recipe.json or a verifier folder that has one", path=str(path)) from None
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON ({exc.msg}, line {exc.lineno})", path=str(path)) from None
    return recipe_from_dict(raw, str(path))


def recipe_text(recipe: VerifierRecipe) -> str:
    return json.dumps(recipe.to_dict(), indent=2) + "\n"
