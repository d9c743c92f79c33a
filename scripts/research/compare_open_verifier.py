"""The open-question verifier against four baselines on the same held-out answers (test and shift):
a logistic probe on the same features, the mean token log-probability of the answer, and P(True) as the
AUQ monitor computes it, each given the threshold that reaches 0.95 right among admitted answers on the
calibration half (where the SDM estimator calibrates), and then applied unchanged to the test and
shifted answers. SDM admits an answer as right when it is verified (p_lower >= 0.95 and y_hat = 1).

    .venv/bin/python scripts/research/compare_open_verifier.py --verifier weights/smollm2-suite/members/open_questions \
        --cache weights-build/open.cache

`--families` prints the model's accuracy per source of question instead (seconds, from the cache).

The answers and features come from the build's cache (mlx-sdm build-verifier --tasks open_questions,
same --per-task / --eval-size / --batch), so nothing is generated again; the log-probabilities and
P(True) are computed here, batched.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

PRECISION = 0.95


def answered(verifier_dir: Path, cache: Path, per_task: int, eval_size: int, batch: int):
    from mlx_sdm.usecases.build_verifier import EARLY_CHECK
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.tasks.answers import AnswerSettings, answer_items
    from mlx_sdm.network.tasks.registry import OPEN_TASK, load_task

    lm = load_model(None)
    task = load_task(OPEN_TASK)
    settings = AnswerSettings(16, cache_dir=cache, chunk=batch).for_task(task)
    pool_items = task.split("pool", size=per_task)  # answered as the build answers them (same cache chunks)
    pool = answer_items(lm, task, pool_items[:EARLY_CHECK], settings) + \
        answer_items(lm, task, pool_items[EARLY_CHECK:], settings)
    half = len(pool) // 2
    parts = {"train": pool[:half], "calibration": pool[half:],
             "test": answer_items(lm, task, task.split("held_out", size=eval_size), settings),
             "shift": answer_items(lm, task, task.split("shifted", size=eval_size), settings)}
    return lm, parts


def mean_logprobs(lm, items, batch: int = 16) -> np.ndarray:
    """Mean log-probability of each answer's judged tokens under the model (one forward pass per batch)."""
    import mlx.core as mx
    from mlx_lm.models.cache import BatchKVCache

    from mlx_sdm.lm.features import ANSWER_HEAD_TOKENS
    from mlx_sdm.lm.prompt import render_prompt

    from mlx_sdm.lm.generation import default_head

    tok, head = lm.tokenizer, default_head(lm.model)
    out = np.zeros(len(items))
    for start in range(0, len(items), batch):
        rows = items[start:start + batch]
        seqs, spans = [], []
        for a in rows:
            prompt = render_prompt(tok, a.item.prompt, None)
            answer = list(tok.encode(a.text, add_special_tokens=False))[:ANSWER_HEAD_TOKENS] or [tok.eos_token_ids[0]]
            seqs.append(prompt + answer)
            spans.append((len(prompt), len(answer)))
        width = max(len(s) for s in seqs)
        pads = [width - len(s) for s in seqs]
        ids = mx.array([[0] * p + s for p, s in zip(pads, seqs)])
        cache = [BatchKVCache(pads) for _ in lm.model.layers]
        hidden = lm.model.model(ids, cache=cache)  # the vocabulary head only where an answer token is predicted
        for r, ((n_prompt, n_answer), p) in enumerate(zip(spans, pads)):
            first = p + n_prompt  # position of the first answer token
            logits = head(hidden[r, first - 1:first - 1 + n_answer]).astype(mx.float32)
            logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            targets = mx.array(seqs[r][n_prompt:])
            out[start + r] = float(mx.take_along_axis(logprobs, targets[:, None], axis=-1).mean().item())
    return out


def p_true(lm, items, batch: int = 16) -> np.ndarray:
    """P(True) as the AUQ monitor reads it (monitor/online/p_true.py), for each (question, answer)."""
    import mlx.core as mx
    from mlx_lm.models.cache import BatchKVCache

    from mlx_sdm.lm.generation import default_head
    from mlx_sdm.monitor.online.p_true import option_token_ids, render_question_prompt

    true_ids, false_ids = option_token_ids(lm.tokenizer)
    out = np.zeros(len(items))
    for start in range(0, len(items), batch):
        rows = items[start:start + batch]
        seqs = [render_question_prompt(lm.tokenizer, [{"role": "user", "content": a.item.prompt},
                                                      {"role": "assistant", "content": a.text}]) for a in rows]
        width = max(len(s) for s in seqs)
        pads = [width - len(s) for s in seqs]
        cache = [BatchKVCache(pads) for _ in lm.model.layers]
        hidden = lm.model.model(mx.array([[0] * p + s for p, s in zip(pads, seqs)]), cache=cache)[:, -1]
        logits = default_head(lm.model)(hidden).astype(mx.float32)  # the last position only
        lt = mx.logsumexp(logits[:, mx.array(true_ids)], axis=-1)
        lf = mx.logsumexp(logits[:, mx.array(false_ids)], axis=-1)
        out[start:start + len(rows)] = np.array(mx.sigmoid(lt - lf))
    return out


def threshold_for(scores: np.ndarray, labels: np.ndarray) -> float:
    """The smallest threshold whose admitted calibration answers (score >= t) are >= 0.95 right; inf if none."""
    for t in np.sort(np.unique(scores)):
        admitted = scores >= t
        if admitted.any() and labels[admitted].mean() >= PRECISION:
            return float(t)
    return float("inf")


def one_sided_lower(n: int, accuracy: float, confidence: float = 0.95) -> float:
    """Clopper-Pearson one-sided lower bound on the precision of n admitted answers at ``accuracy``."""
    from scipy.stats import beta

    k = round(accuracy * n)
    return 0.0 if k == 0 else float(beta.ppf(1 - confidence, k, n - k + 1))


def families(args) -> int:
    """How often the model's answer is right, per source of question (NQ-open, WebQuestions, each made family)."""
    from collections import Counter

    _, parts = answered(args.verifier, args.cache, args.per_task, args.eval_size, args.batch)
    for name, part in (("pool", parts["train"] + parts["calibration"]), ("test", parts["test"]), ("shift", parts["shift"])):
        total, right = Counter(), Counter()
        for a in part:
            family = a.item.id.split("-")[0]
            total[family] += 1
            right[family] += a.label.correct
        cells = ", ".join(f"{f} {right[f]}/{total[f]} ({right[f] / total[f]:.0%})" for f in sorted(total))
        print(f"{name}: {sum(right.values())}/{len(part)} right; {cells}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verifier", type=Path, required=True)
    p.add_argument("--cache", type=Path, required=True)
    p.add_argument("--per-task", type=int, default=1400)
    p.add_argument("--eval-size", type=int, default=300)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--json", type=Path, default=None, help="write the table's numbers here")
    p.add_argument("--families", action="store_true",
                   help="only the model's accuracy per source of question (from the cache; no model pass)")
    args = p.parse_args()
    if args.families:
        return families(args)
    from mlx_sdm.calibration.training import logistic_regression
    from mlx_sdm.network.verifier import DocumentVerifier

    started = time.time()
    lm, parts = answered(args.verifier, args.cache, args.per_task, args.eval_size, args.batch)
    verifier = DocumentVerifier.load(args.verifier)
    labels = {k: np.array([a.label.label for a in v]) for k, v in parts.items()}
    feats = {k: np.stack([a.features for a in v]) for k, v in parts.items()}
    scores: dict[str, dict[str, np.ndarray]] = {"mean log-probability": {}, "P(True)": {}, "logistic probe": {}}
    mu, sd = feats["train"].mean(0), feats["train"].std(0) + 1e-6
    w, b = logistic_regression((feats["train"] - mu) / sd, labels["train"], 2, l2=1e-2)
    for k in ("calibration", "test", "shift"):
        scores["mean log-probability"][k] = mean_logprobs(lm, parts[k])
        scores["P(True)"][k] = p_true(lm, parts[k])
        z = (feats[k] - mu) / sd @ w + b
        scores["logistic probe"][k] = 1 / (1 + np.exp(z[:, 0] - z[:, 1]))
    rows = {}
    for k in ("test", "shift"):
        arrays = verifier.estimator.predict_arrays(feats[k])
        verified = np.asarray(arrays["admitted"], bool) & (np.asarray(arrays["prediction"]) == 1)
        wrong_admitted = np.asarray(arrays["admitted"], bool) & (np.asarray(arrays["prediction"]) == 0)
        rows.setdefault("SDM (verified)", {})[k] = (int(verified.sum()), float(labels[k][verified].mean()) if verified.any() else None)
        rows.setdefault("SDM (admitted as wrong)", {})[k] = (int(wrong_admitted.sum()),
                                                           float(1 - labels[k][wrong_admitted].mean()) if wrong_admitted.any() else None)
        for name, by_part in scores.items():
            t = threshold_for(by_part["calibration"], labels["calibration"])
            admitted = by_part[k] >= t
            rows.setdefault(name, {})[k] = (int(admitted.sum()), float(labels[k][admitted].mean()) if admitted.any() else None)
            on_calibration = by_part["calibration"] >= t
            rows[name]["calibration"] = (int(on_calibration.sum()),
                                         float(labels["calibration"][on_calibration].mean()) if on_calibration.any() else None)
    n = {k: len(parts[k]) for k in ("test", "shift")}
    right = {k: int(labels[k].sum()) for k in ("test", "shift")}
    print(f"held-out test: {n['test']} answers, {right['test']} right; shift (WebQuestions): {n['shift']} answers, "
          f"{right['shift']} right")
    print("| method | test: admitted as right | its accuracy | shift: admitted as right | its accuracy |")
    print("|---|---|---|---|---|")
    for name, by in rows.items():
        cells = [f"{by[k][0]} | {'-' if by[k][1] is None else format(by[k][1], '.3f')}" for k in ("test", "shift")]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for name in scores:  # how much the 0.95 threshold rests on: a point estimate, no finite-sample bound
        count, accuracy = rows[name]["calibration"]
        print(f"{name}: its threshold admits {count} of {len(parts['calibration'])} calibration answers"
              + ("" if accuracy is None else f" ({accuracy:.3f} right; {one_sided_lower(count, accuracy):.3f} lower 95 % bound)"))
    print(f"({time.time() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "sizes": n, "right": right}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
