"""Fit and judge the second look on the rows of ``second_look_answers.py``: the SDM estimator (Alg. 1–3, the
build's fit) on the second-look representation, beside the shipped open-question member (SDM on the answer's
hidden states alone), a logistic probe on those states, the answer's mean log-probability and the agreement
features alone, each baseline with the threshold at which its admitted calibration answers are >= 0.95 right.

    .venv/bin/python scripts/research/second_look_fit.py /tmp/second_look.jsonl

Splits: the pool rows halved in order into D_tr / D_ca (the pool is the task's seeded shuffle), the held-out rows
(test) and the WebQuestions rows (shift). Representations: ``agreement`` (the six features of
``network/second_look.py``) and ``agreement+states`` (those six and the answer's [mean(h); h_delimiter]);
both fitted with per-dimension input scaling, so the six agreement numbers are not drowned by the 1,152 states.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from compare_open_verifier import threshold_for  # the baselines' threshold rule, one place (research/)

MEMBER = Path("weights/smollm2-suite/members/open_questions")


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(score of a right answer > score of a wrong one), ties counted half (Mann–Whitney U / n1 n0)."""
    from scipy.stats import rankdata

    pos, neg = labels == 1, labels == 0
    if not pos.any() or not neg.any():
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[pos].sum() - pos.sum() * (pos.sum() + 1) / 2) / (pos.sum() * neg.sum()))


def cell(admitted: np.ndarray, labels: np.ndarray, want: int = 1) -> str:
    n = int(admitted.sum())
    return f"{n} | {'-' if not n else format(float((labels[admitted] == want).mean()), '.3f')}"


def main(argv: list[str] | None = None) -> int:
    from mlx_sdm.calibration.data import LabelledSet
    from mlx_sdm.calibration.estimator import SDMEstimator
    from mlx_sdm.calibration.evaluation import evaluate, table_row
    from mlx_sdm.calibration.fit_config import FitConfig
    from mlx_sdm.calibration.training import logistic_regression
    from mlx_sdm.lm.minilm import load_minilm
    from mlx_sdm.network.second_look import FEATURE_NAMES, SecondLook, agreement_matrix
    from mlx_sdm.network.verifier import DocumentVerifier

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    started = time.time()
    rows = [json.loads(line) for line in args.rows.read_text(encoding="utf-8").splitlines() if line.strip()]
    pool = [r for r in rows if r["split"] == "pool"]
    parts = {"train": pool[: len(pool) // 2], "calibration": pool[len(pool) // 2:],
             "test": [r for r in rows if r["split"] == "held_out"], "shift": [r for r in rows if r["split"] == "shifted"]}
    embed = load_minilm()
    labels = {k: np.array([int(r["greedy_label"]) for r in v]) for k, v in parts.items()}
    states = {k: np.array([r["features"] for r in v], np.float32) for k, v in parts.items()}
    looks = {k: [SecondLook(r["question"], r["greedy"], tuple(r["samples"]),
                            float(np.mean(r["greedy_logprobs"])) if r["greedy_logprobs"] else 0.0,
                            tuple(r["sample_logprobs"])) for r in v] for k, v in parts.items()}
    agree = {k: agreement_matrix(v, embed.encode) for k, v in looks.items()}
    print(f"rows: " + ", ".join(f"{k} {len(v)} ({labels[k].sum()} right)" for k, v in parts.items()))
    before = {k: sum(r["greedy_label_before"] != r["greedy_label"] for r in v) for k, v in parts.items()}
    print("labels changed by person_forms: " + ", ".join(f"{k} {n}" for k, n in before.items()))
    drawn_right = {k: float(np.mean([np.mean(r["sample_labels"]) for r in v])) for k, v in parts.items()}
    print("share of drawn answers right: " + ", ".join(f"{k} {v:.3f}" for k, v in drawn_right.items()))

    print("\nAUROC of each feature for 'the answer is right' (test / shift / calibration):")
    for j, name in enumerate(FEATURE_NAMES):
        sign = -1.0 if name == "spread" else 1.0
        print(f"  {name}: " + " / ".join(f"{auroc(sign * agree[k][:, j], labels[k]):.3f}" for k in ("test", "shift", "calibration")))
    full = FEATURE_NAMES.index("full_agreement")
    for k in ("test", "shift"):
        m = agree[k][:, full] == 1.0
        print(f"  {k}: right among full agreement (K/K): {int(labels[k][m].sum())} of {int(m.sum())}: "
              + "; ".join(parts[k][i]["greedy"][:60].replace("\n", " ") for i in np.flatnonzero(m)[:8]))

    def labelled(name: str, x: dict) -> dict:
        return {k: LabelledSet([r["id"] for r in parts[k]], x[k], labels[k]) for k in parts}

    reps = {"agreement": agree, "agreement+states": {k: np.concatenate([agree[k], states[k]], 1) for k in parts}}
    config = FitConfig(seed=args.seed, input_scaling="per_dimension")
    table = ["| representation | split | estimator | y=0 | y=1 | ŷ=0 | ŷ=1 | marginal |", "|---|---|---|---|---|---|---|---|"]
    summary: dict[str, dict] = {}
    for name, x in reps.items():
        data = labelled(name, x)
        estimator = SDMEstimator.fit(data["train"], data["calibration"], config)
        training = estimator.manifest.get("training", {})
        print(f"\nSDM on {name} ({x['train'].shape[1]} dims): calibration accuracy "
              f"{training.get('calibration_accuracy', float('nan')):.3f} (logistic "
              f"{training.get('logistic_regression', {}).get('calibration_accuracy', float('nan')):.3f}, always wrong "
              f"{1 - labels['calibration'].mean():.3f}); threshold_succeeded={estimator.manifest.get('threshold_succeeded')}")
        for k in ("test", "shift"):
            ev = evaluate(estimator, data[k], k)
            for label, mask in (("no-reject", np.ones(len(ev.labels), bool)), ("p̂ lower", ev.admitted)):
                row = table_row(label, ev.labels, ev.predictions, mask, 2)
                table.append(f"| {name} | {k} ({len(ev.labels)}) | {label} | " + " | ".join(s.markdown() for s in row.strata()) + " |")
            verified = ev.admitted & (ev.predictions == 1)
            wrong = ev.admitted & (ev.predictions == 0)
            summary.setdefault(f"SDM on {name} (verified)", {})[k] = cell(verified, ev.labels)
            summary.setdefault(f"SDM on {name} (admitted as wrong)", {})[k] = cell(wrong, ev.labels, want=0)
    print("\n" + "\n".join(table))

    member = DocumentVerifier.load(MEMBER)
    for k in ("test", "shift"):
        a = member.estimator.predict_arrays(states[k])
        verified = np.asarray(a["admitted"], bool) & (np.asarray(a["prediction"]) == 1)
        summary.setdefault("SDM on states alone (the shipped member, verified)", {})[k] = cell(verified, labels[k])
    mu, sd = states["train"].mean(0), states["train"].std(0) + 1e-6
    w, b = logistic_regression((states["train"] - mu) / sd, labels["train"], 2, l2=1e-2)
    probe = {k: (lambda z: 1 / (1 + np.exp(z[:, 0] - z[:, 1])))((states[k] - mu) / sd @ w + b) for k in parts}
    scores = {"mean log-probability of the answer": {k: agree[k][:, FEATURE_NAMES.index("answer_logprob")] for k in parts},
              "logistic probe on the states": probe,
              "lexical agreement alone": {k: agree[k][:, FEATURE_NAMES.index("lexical_agreement")] for k in parts},
              "embedding agreement alone": {k: agree[k][:, FEATURE_NAMES.index("embedding_agreement")] for k in parts}}
    notes = []
    for name, by in scores.items():
        t = threshold_for(by["calibration"], labels["calibration"])
        on_cal = by["calibration"] >= t
        notes.append(f"{name}: threshold {t:.3f} admits {int(on_cal.sum())} of {len(on_cal)} calibration answers")
        for k in ("test", "shift"):
            summary.setdefault(name + " (threshold from calibration)", {})[k] = cell(by[k] >= t, labels[k])
    print("\n| method | test: admitted as right | their accuracy | shift: admitted as right | their accuracy |")
    print("|---|---|---|---|---|")
    for name, by in summary.items():
        print(f"| {name} | {by['test']} | {by['shift']} |")
    print("\n" + "\n".join(notes))
    print(f"({time.time() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "sizes": {k: len(v) for k, v in parts.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
