"""Use case: build the question router (``network/question_router.py``) and measure it on held-out prompts.

1. Embed every prompt of ``network/tasks/router_data.py`` with all-MiniLM-L6-v2.
2. Fit a multinomial logistic regression on the training prompts (``calibration.training``).
3. Choose the task threshold on the held-out prompts: the smallest probability at which at most
   ``MAX_TASK_FALSE_ROUTES`` of the held-out open questions and prompts with no checkable answer are
   taken for a suite task.
4. Report the held-out routing (per true kind: where its prompts went) into the router's manifest.

    router = build_router(); router.save("weights/question-router")
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from mlx_sdm.network.question_router import (
    MAX_OPEN_FALSE_ROUTES,
    MAX_TASK_FALSE_ROUTES,
    NO_ANSWER_KIND,
    OPEN_KIND,
    QuestionRouter,
)
from mlx_sdm.network.tasks.router_data import RoutedPrompt, router_prompts

#: L2 penalty of the router's logistic regression (embeddings are unit vectors; a mild penalty).
ROUTER_L2 = 1e-3


def _threshold(router: QuestionRouter, probabilities: np.ndarray, labels: list[str]) -> float:
    """The smallest task threshold that routes at most MAX_TASK_FALSE_ROUTES of the held-out non-task prompts
    to a task (their highest task probability above it)."""
    task_columns = [i for i, k in enumerate(router.labels) if k not in (OPEN_KIND, NO_ANSWER_KIND)]
    others = np.array([k in (OPEN_KIND, NO_ANSWER_KIND) for k in labels])
    best_task = probabilities[others][:, task_columns].max(axis=1)
    allowed = int(np.floor(MAX_TASK_FALSE_ROUTES * len(best_task)))
    ordered = np.sort(best_task)[::-1]
    threshold = float(np.nextafter(ordered[allowed], 1.0)) if allowed < len(ordered) else 0.5
    return max(threshold, 0.5)


def _open_threshold(probabilities: np.ndarray, labels: list[str], router: QuestionRouter) -> float:
    """The smallest P(open question) at which at most MAX_OPEN_FALSE_ROUTES of the held-out prompts with no
    checkable answer count as open questions (never below 0.5: no kind is chosen over a likelier one); for the
    follow-up threshold, ``probabilities`` are those of held-out follow-ups read with their previous question."""
    column = router.labels.index(OPEN_KIND)
    none = np.sort(probabilities[np.array([k == NO_ANSWER_KIND for k in labels]), column])[::-1]
    allowed = int(np.floor(MAX_OPEN_FALSE_ROUTES * len(none)))
    threshold = float(np.nextafter(none[allowed], 1.0)) if allowed < len(none) else 0.5
    return max(threshold, 0.5)


def _embeddings(embedder, texts: list[str], cache_dir: Path | None) -> np.ndarray:
    """MiniLM embeddings, kept per text in ``cache_dir`` (a rebuild embeds only the prompts it has not seen)."""
    path = None if cache_dir is None else Path(cache_dir) / "router-embeddings.npz"
    known: dict[str, np.ndarray] = {}
    if path is not None and path.is_file():
        with np.load(path, allow_pickle=False) as data:
            known = dict(zip(json.loads(str(data["texts"])), data["embeddings"]))
    missing = list(dict.fromkeys(t for t in texts if t not in known))
    if missing:
        known.update(zip(missing, embedder.encode(missing)))
        if path is not None:
            from mlx_sdm.atomic import atomic_write_bytes
            import io

            buffer = io.BytesIO()
            np.savez(buffer, texts=np.array(json.dumps(list(known))), embeddings=np.stack(list(known.values())))
            atomic_write_bytes(path, buffer.getvalue())
    return np.stack([known[t] for t in texts])


def routing_table(router: QuestionRouter, prompts: list[RoutedPrompt], probabilities: np.ndarray) -> dict:
    """Per true kind: how many held-out prompts went where."""
    table: dict[str, Counter] = {}
    for prompt, guess in zip(prompts, router.decide(probabilities)):
        table.setdefault(prompt.label, Counter())[guess.kind] += 1
    return {kind: dict(counts) for kind, counts in sorted(table.items())}


def build_router(cache_dir: Path | None = None) -> QuestionRouter:
    from mlx_sdm.calibration.training import logistic_regression
    from mlx_sdm.lm.minilm import load_minilm

    prompts = router_prompts()
    labels = tuple(sorted({p.label for p in prompts}))
    embedder = load_minilm()
    embeddings = _embeddings(embedder, [p.text for p in prompts], cache_dir)
    y = np.array([labels.index(p.label) for p in prompts])
    train = np.array([not p.held_out for p in prompts])
    # every kind weighs the same in the fit: each training row is repeated in proportion to its kind's rarity
    # (and its own weight within its kind)
    weight = np.array([p.weight for p in prompts])
    counts = np.bincount(y[train], minlength=len(labels))
    repeat = np.round(counts.max() / counts[y[train]]).astype(int) * weight[train]
    x_fit, y_fit = np.repeat(embeddings[train], repeat, axis=0), np.repeat(y[train], repeat)
    weights, bias = logistic_regression(x_fit, y_fit, len(labels), l2=ROUTER_L2, max_iter=500)
    router = QuestionRouter(labels, weights, bias, 0.5)
    held = [p for p, t in zip(prompts, train) if not t]
    probabilities = router.probabilities(embeddings[~train])
    router.task_threshold = _threshold(router, probabilities, [p.label for p in held])
    # the open threshold on single messages, the follow-up threshold on follow-ups read with their previous question
    single = np.array([p.previous is None for p in held])
    router.open_threshold = _open_threshold(probabilities[single], [p.label for p in held if p.previous is None], router)
    router.follow_up_threshold = _open_threshold(probabilities[~single], [p.label for p in held if p.previous], router)
    router.measured = {"held_out": routing_table(router, held, probabilities),
                       "train_size": int(train.sum()), "held_out_size": len(held),
                       "max_task_false_routes": MAX_TASK_FALSE_ROUTES, "max_open_false_routes": MAX_OPEN_FALSE_ROUTES}
    router._embedder = embedder
    return router


def factual_routing(verifier) -> dict:
    """The held-out factual check (``network/tasks/data/factual_check.json``) and the router's held-out prompts
    with no checkable answer, through ``verifier.route`` (the rule a turn is planned with): per set, how many
    prompts it judges (an open question or a task) and how many it leaves with no checkable answer. A
    follow-up is routed with the question it leans on, as the pipeline routes it, and alone for comparison."""
    from mlx_sdm.network.coverage import RouteKind
    from mlx_sdm.network.tasks.open_questions import factual_check

    def judged(rows, with_previous: bool = True) -> dict:
        routes = [verifier.route(r["prompt"], r.get("previous") if with_previous else None) for r in rows]
        missed = [r["prompt"] for r, route in zip(rows, routes) if route.how is not RouteKind.OPEN_QUESTION]
        return {"total": len(rows), "judged": len(rows) - len(missed), "open_question": len(rows) - len(missed),
                "missed": missed}

    def left_out(rows) -> dict:
        routes = [verifier.route(r["prompt"], r.get("previous")) for r in rows]
        given = [r["prompt"] for r, route in zip(rows, routes) if route.how is not RouteKind.NO_CHECKABLE_ANSWER]
        return {"total": len(rows), "no_checkable_answer": len(rows) - len(given), "given_a_verdict": given}

    check = factual_check()
    held_none = [{"prompt": p.prompt, "previous": p.previous} for p in router_prompts()
                 if p.held_out and p.label == NO_ANSWER_KIND]
    held_messages = [r for r in held_none if r["previous"] is None]
    return {"factual questions": judged(check.questions),
            "follow-ups (with the previous question)": judged(check.follow_ups),
            "follow-ups (alone)": judged(check.follow_ups, with_previous=False),
            "follow-ups with no checkable answer": left_out(check.no_checkable_follow_ups),
            "router held-out prompts with no checkable answer": left_out(held_messages),
            "router held-out follow-ups with no checkable answer": left_out([r for r in held_none if r["previous"]])}
