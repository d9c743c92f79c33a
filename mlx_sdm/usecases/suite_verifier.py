"""The task-suite verifier built the paper's way (docs/method.md § 14): constructed documents.

For every task of the suite the items of its ``pool`` split become constructed documents: the task's
own prompt and system prompt (the text the chat routes to that task) with the gold answer as the
completion (y = 1) or, by a seeded Bernoulli(0.5) draw, another answer of the task's format (y = 0).
Each task's pool is halved into D_tr / D_ca; its ``held_out`` and ``shifted`` splits, constructed the
same way with the next seed, are the report's test sets. The SDM-network head of the suite is trained
on the same halves (:func:`pool_halves`). A :class:`~mlx_sdm.usecases.verifier_recipe.VerifierRecipe` holds
the build's settings; ``mlx-sdm build-verifier --recipe`` runs :func:`build_from_recipe`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from mlx_sdm.usecases.build_verifier import ACCURACY_HEAD, REPORT_JSON, REPORT_MD, REPORT_PLOT, accuracy_cells, \
    against_probe_record
from mlx_sdm.usecases.verifier_recipe import RECIPE_FILE, VerifierRecipe, recipe_text
from mlx_sdm.atomic import atomic_write_text
from mlx_sdm.calibration.evaluation import evaluate, markdown_rows, plot
from mlx_sdm.calibration.paired_test import paired_comparison
from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE
from mlx_sdm.network.lean import counts_of, measure_leans, save_leans
from mlx_sdm.network.encoding import NEGATIVE_PROBABILITY, VerificationDocument
from mlx_sdm.network.tasks.registry import load_tasks
from mlx_sdm.network.verifier import DocumentVerifier, FeatureRecipe, labelled_set

#: truthful_qa shows at most 4 options (registry.MAX_CHOICES): a wrong answer is drawn among those.
MAX_SHOWN_LETTERS = 4


def constructed_documents(task, items, *, seed: int) -> list[VerificationDocument]:
    """Gold completion (y = 1) or, by Bernoulli(0.5), another answer of the task's format (y = 0)."""
    fmt = task.answer_format
    answers = fmt.answers[:MAX_SHOWN_LETTERS] if task.name == "truthful_qa" else fmt.answers
    rng = np.random.default_rng([seed, sum(map(ord, task.name))])
    documents = []
    for item in items:
        negative = bool(rng.random() < NEGATIVE_PROBABILITY)  # construct_negative ~ Bernoulli(0.5)
        others = [a for a in answers if a != item.gold]
        given = others[int(rng.integers(len(others)))] if negative else item.gold
        documents.append(VerificationDocument(
            id=f"{task.name}-{item.id}", prompt=item.prompt, completion=fmt.completion(given),
            label=0 if negative else 1, system=task.system, task_label=item.gold, construct_negative=negative,
            task=task.name, document=None))
    return documents


def pool_halves(task, size: int | None, *, seed: int) -> tuple[list, list]:
    """The task's constructed pool documents split as the verifier is fitted on them: (D_tr, D_ca)."""
    pool = constructed_documents(task, task.split("pool", size=size), seed=seed)
    half = len(pool) // 2
    return pool[:half], pool[half:]


def evaluation_documents(task, split: str, size: int, *, seed: int) -> list:
    """The task's ``held_out`` or ``shifted`` documents, constructed with their own seed (seed + 1)."""
    return constructed_documents(task, task.split(split, size=size), seed=seed + 1)


@dataclass
class SuiteDocuments:
    """Every document a recipe's build reads: the pool halves over all tasks and each task's test sets."""

    tasks: list
    train: list[VerificationDocument]
    calibration: list[VerificationDocument]
    tests: list[tuple[object, str, list[VerificationDocument]]]  # (task, split, documents)


def recipe_documents(recipe: VerifierRecipe) -> SuiteDocuments:
    """The documents ``recipe`` builds from (no model needed): per task its pool halves and its
    ``held_out`` / ``shifted`` documents, in the recipe's task order."""
    tasks = load_tasks(list(recipe.tasks))
    train, calibration, tests = [], [], []
    for task in tasks:
        tr, ca = pool_halves(task, recipe.pool_size(task.name), seed=recipe.seed)
        train += tr
        calibration += ca
        tests += [(task, split, evaluation_documents(task, split, recipe.test_per_task, seed=recipe.seed))
                  for split in ("held_out", "shifted")]
    return SuiteDocuments(tasks, train, calibration, tests)


def build_from_recipe(recipe: VerifierRecipe, out: Path, *, cache_dir: Path | None = None, plot_png: bool = True,
                      say: Callable[[str], None] = print) -> DocumentVerifier:
    """Fit the verifier ``recipe`` describes, write it to ``out`` with ``recipe.json`` and its report
    (``report.md``, ``report.json``, ``reliability.png``), and return it."""
    from mlx_sdm.usecases.verifiers import cached_document_features
    from mlx_sdm.lm.loading import load_model

    out = Path(out)
    cache_dir = Path(cache_dir) if cache_dir is not None else out.with_name(out.name + ".cache")
    docs = recipe_documents(recipe)
    for task in docs.tasks:
        pool = [d for d in docs.train + docs.calibration if d.task == task.name]
        say(f"{task.name}: pool {len(pool)} (y=1 {sum(d.label for d in pool)})")
    lm = load_model(recipe.model)
    started = time.time()
    feats_tr = cached_document_features(lm, docs.train, delimiter=DELIMITER_JSON_CLOSE, cache_dir=cache_dir, desc="D_tr")
    feats_ca = cached_document_features(lm, docs.calibration, delimiter=DELIMITER_JSON_CLOSE, cache_dir=cache_dir,
                                        desc="D_ca")
    feature_s = time.time() - started
    say(f"pool features: {len(docs.train) + len(docs.calibration)} documents in {feature_s:.0f} s")
    routed = [t for t in docs.tasks if t.prompt_prefix]
    feature_recipe = FeatureRecipe(delimiter=DELIMITER_JSON_CLOSE, system=None,
                                   task_systems=tuple((t.prompt_prefix, t.system) for t in routed),
                                   task_names=tuple(t.name for t in routed))
    verifier = DocumentVerifier.fit_features(
        dict(lm.fingerprint, name=lm.name), labelled_set(docs.train, feats_tr), labelled_set(docs.calibration, feats_ca),
        recipe.fit, recipe=feature_recipe,
        source={"tasks": [t.name for t in docs.tasks], "encoding": "constructed documents (gold or, by "
                f"Bernoulli(0.5), another answer; seed {recipe.seed}), docs/method.md § 14", "model": lm.name},
        progress=True)
    verifier.tasks = [t.summary() for t in docs.tasks]
    verifier.info = {"built_by": f"mlx-sdm build-verifier --recipe {RECIPE_FILE}", "tasks": [t.name for t in docs.tasks],
                     "pool_sizes": {t.name: recipe.pool_size(t.name) for t in docs.tasks},
                     "test_per_task": recipe.test_per_task, "seed": recipe.seed, "feature_seconds": round(feature_s, 1)}
    verifier.save(out)
    atomic_write_text(out / RECIPE_FILE, recipe_text(recipe))
    text, data, evaluations = suite_report(lm, verifier, docs.tests, cache_dir, out.name)
    atomic_write_text(out / REPORT_MD, text + "\n")
    atomic_write_text(out / REPORT_JSON, json.dumps(data, indent=2) + "\n")
    save_leans(out, verifier.leans, source="build-verifier --recipe: constructed documents, held-out and shifted splits")
    if plot_png:
        plot(evaluations, str(out / REPORT_PLOT))
    say(text)
    return verifier


def suite_report(lm, verifier: DocumentVerifier, tests, cache_dir: Path, name: str) -> tuple[str, dict, list]:
    """Table 1 rows (accuracy / admitted fraction per stratum) per task and split, and over all tasks."""
    from mlx_sdm.usecases.verifiers import cached_document_features

    lines = [f"Verifier `{name}` ({lm.name} document features, α′ = {verifier.estimator.alpha}); constructed "
             "documents (gold answer y = 1, or by Bernoulli(0.5) another answer y = 0), each task under its own "
             "system prompt. Cells: accuracy / admitted fraction.", "",
             "| Dataset | Estimator | y=0 | y=1 | ŷ=0 | ŷ=1 | marginal |", "|---|---|---|---|---|---|---|"]
    records, pooled, counts = [], {"held_out": ([], []), "shifted": ([], [])}, {}
    for task, split, docs in tests:
        feats = cached_document_features(lm, docs, delimiter=verifier.recipe.delimiter, cache_dir=cache_dir,
                                         desc=f"{task.name} {split}"[:24])
        arrays = verifier.estimator.predict_arrays(feats)
        labels = np.array([d.label for d in docs])
        lines += markdown_rows(f"{task.name} {split} ({len(docs)})", labels, arrays["prediction"], arrays["admitted"])
        counts.setdefault(task.name, {})[split] = counts_of(split, labels, arrays["prediction"])
        paired = paired_comparison(labels, arrays["prediction"], verifier.estimator.logistic_regression_predict(feats))
        records.append({"task": task.name, "split": split, "n": len(docs), "admitted": int(arrays["admitted"].sum()),
                        "admitted_correct": int((arrays["admitted"] & (arrays["prediction"] == labels)).sum()),
                        "admitted_y1": int((arrays["admitted"] & (labels == 1)).sum()),
                        "adaptor_accuracy": paired.accuracy_a, "logistic_accuracy": paired.accuracy_b,
                        **against_probe_record(paired)})
        pooled[split][0].extend(docs)
        pooled[split][1].append(feats)
    evaluations = []
    for split, (docs, feats) in pooled.items():
        data = labelled_set(docs, np.concatenate(feats))
        arrays = verifier.estimator.predict_arrays(data.embeddings)
        lines += markdown_rows(f"all tasks {split} ({len(docs)})", data.labels, arrays["prediction"], arrays["admitted"])
        evaluations.append(evaluate(verifier.estimator, data, name=f"suite {split}"))
    lines += ACCURACY_HEAD + [f"| {r['task']} {r['split']} ({r['n']}) | {accuracy_cells(r)}" for r in records]
    training = verifier.estimator.manifest["training"]
    lines += ["", f"Pool sizes {verifier.info['pool_sizes']} (halves: D_tr / D_ca); calibration accuracy "
              f"{training['calibration_accuracy']:.3f} (logistic regression "
              f"{training['logistic_regression']['calibration_accuracy']:.3f}); "
              f"threshold_succeeded={verifier.estimator.manifest['threshold_succeeded']}.",
              f"Reproduce: `mlx-sdm build-verifier --recipe {name}/{RECIPE_FILE} --out DIR`"]
    verifier.leans = {task: measure_leans(splits) for task, splits in counts.items()}
    return "\n".join(lines), {"rows": records}, evaluations


def finetune_documents(task, documents: list, tokenizer=None) -> list:
    """VerificationDocuments -> FinetuneDocuments read with the task's own answer rule; the generation
    budget is the task's longest answer in tokens + 2 (docs/method.md § 14; needs ``tokenizer``)."""
    from functools import partial

    from mlx_sdm.network.data import from_verification_documents
    from mlx_sdm.network.encoding import parse_answer

    fmt = task.answer_format
    out = [dataclasses.replace(f, parse=partial(parse_answer, fmt=fmt)) for f in from_verification_documents(documents)]
    if tokenizer is not None:
        budget = max(len(tokenizer.encode(fmt.completion(a), add_special_tokens=False)) for a in fmt.answers) + 2
        out = [dataclasses.replace(f, max_generation_tokens=budget) for f in out]
    return out


def recipe_finetune_documents(recipe: VerifierRecipe, train_sizes: dict[str, int], calibration_sizes: dict[str, int],
                              tokenizer=None) -> tuple[list, list]:
    """(train, calibration) FinetuneDocuments for Alg. 4 on the verifier's own pool halves: per task the
    leading ``train_sizes[task]`` documents of D_tr and ``calibration_sizes[task]`` of D_ca (all when a
    task is missing), in the recipe's task order."""
    train, calibration = [], []
    for task in load_tasks(list(recipe.tasks)):
        tr, ca = pool_halves(task, recipe.pool_size(task.name), seed=recipe.seed)
        train += finetune_documents(task, tr[:train_sizes.get(task.name, len(tr))], tokenizer)
        calibration += finetune_documents(task, ca[:calibration_sizes.get(task.name, len(ca))], tokenizer)
    return train, calibration
