#!/usr/bin/env python
"""Side by side with the paper's code (ReexpressAI/sdm, ``research_code/code``) on the same inputs.

Not a test and not part of the install: the paper's code needs torch and faiss, which never go into
the project's venv. Give it a SEPARATE Python that has them (e.g. ``python -m venv /work/refvenv &&
/work/refvenv/bin/pip install torch faiss-cpu numpy scipy``) and a checkout of the reference:

    .venv/bin/python scripts/research/compare_reference.py --reference /path/to/sdm --ref-python /work/refvenv/bin/python \\
        --dataset spam --iterations 2 --epochs 10

Both sides get the same train/calibration pool, the same held-out test and the same shifted set
(see ``scripts/research/choose_defaults.py``), the paper's flags from
``research_code/replication_scripts/classification/paper_sentiment_experiments.sh`` (lr 1e-5, batch
50, alpha 0.95, M = 1000, --use_training_set_max_label_size_as_max_q, rescaler up to 1,000 epochs at
lr 1e-4, batch 1) with J and epochs as given, and ours with the paper's settings and with the
project defaults. ``mlx_lm``/``mlx`` are stubbed for the reference (it imports them at module
level, but the classification path never calls them).

Printed per iteration: the chosen epoch, the balanced median q, the rescaler W'', q̃_min and ψ;
then the robust q̃_min, the admitted counts and every stratum on the test and shifted sets.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import mlx_sdm  # noqa: F401  (BLAS preload before mlx)

from choose_defaults import LOADERS

from mlx_sdm.calibration import constants as K
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.evaluation import table_row

STUB_MLX_LM = "def load(*a, **k):\n    raise RuntimeError('stub')\n\ndef generate(*a, **k):\n    raise RuntimeError('stub')\n"

# Runs inside the reference's Python: load the trained model and its global statistics exactly as
# utils_test.test does, then record ŷ and the p̂_lower admission flag for every row of a JSONL file
# (the reference's code folder comes first on its PYTHONPATH).
REF_PREDICT = r"""
import json, sys
import torch, constants, utils_model, utils_preprocess
model_dir, data_file, out_file = sys.argv[2:5]
model = utils_model.load_model_torch(model_dir, torch.device("cpu"), load_for_inference=True)
stats = utils_model.load_global_uncertainty_statistics_from_disk(model_dir)
qmin_robust = stats.get_min_valid_qbin_with_bounded_error(model.min_valid_qbin_for_class_conditional_accuracy)
offsets = stats.get_summarized_output_magnitude_structure_with_bounded_error_lower_offset_by_bin()
class O: use_embeddings = True; concat_embeddings_to_attributes = False; do_not_normalize_input_embeddings = False
meta, _ = utils_preprocess.get_metadata_lines(O, data_file, use_embeddings=True)
rows = []
with torch.no_grad():
    for emb in meta["embeddings"]:
        m = model(emb.unsqueeze(0), forward_type=constants.FORWARD_TYPE_SINGLE_PASS_TEST,
                  min_valid_qbin_for_class_conditional_accuracy_with_bounded_error=qmin_robust,
                  predicted_class_to_bin_to_output_magnitude_with_bounded_error_lower_offset_by_bin=offsets)
        rows.append([int(m["prediction"]), bool(m["is_valid_index_conditional__lower"])])
summary = {"rows": rows, "q_tilde_min_star": float(model.min_valid_qbin_for_class_conditional_accuracy),
           "q_tilde_min_robust": float(qmin_robust), "psi": [float(x) for x in model.non_odd_thresholds],
           "per_iteration_q_tilde_min": [float(x) for x in stats.min_valid_qbin_across_iterations],
           "rescaler": model.model_rescaler.weight.detach().numpy().tolist()}
json.dump(summary, open(out_file, "w"))
"""

ITER_RE = re.compile(r"Current D_tr, D_ca shuffle index (\d+)")
EPOCH_RE = re.compile(r"Max Calibration set Balanced MEDIAN Q: ([\d.]+) at epoch (\d+)")
QMIN_RE = re.compile(r"Min q bin to achieve class-conditional accuracy of [\d.]+: ([\d.eE+-]+)")
PSI_RE = re.compile(r"^Thresholds: \[([^\]]*)\]")
W_RE = re.compile(r"Final rescaler weights: Parameter containing:\s*tensor\((\[\[.*?\]\])", re.S)


def write_jsonl(path: Path, data) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i, emb, y in zip(data.ids, data.embeddings, data.labels):
            f.write(json.dumps({"id": i, "label": int(y), "document": "", "embedding": [float(x) for x in emb]}) + "\n")


def parse_reference_log(text: str) -> list[dict]:
    """Per-iteration chosen epoch, balanced median q, rescaler W'', q̃_min and ψ from the reference log."""
    chunks = ITER_RE.split(text)[1:]
    out = []
    for idx, body in zip(chunks[::2], chunks[1::2]):
        epochs = EPOCH_RE.findall(body)
        qmin = QMIN_RE.findall(body)
        psi = [line for line in body.splitlines() if PSI_RE.match(line)]
        w = W_RE.findall(body)
        out.append({"iteration": int(idx) + 1,
                    "epoch": int(epochs[-1][1]) if epochs else None,
                    "balanced_median_q": float(epochs[-1][0]) if epochs else None,
                    "q_tilde_min": float(qmin[-1]) if qmin else None,
                    "psi": [float(x) for x in PSI_RE.match(psi[-1]).group(1).split()] if psi else None,
                    "rescaler": json.loads(re.sub(r"\s+", "", w[-1])) if w else None})
    return out


def run_reference(args, workdir: Path, files: dict[str, Path]) -> dict:
    code = Path(args.reference) / "research_code" / "code"
    stubs = workdir / "stubs"
    (stubs / "mlx_lm").mkdir(parents=True, exist_ok=True)
    (stubs / "mlx_lm" / "__init__.py").write_text(STUB_MLX_LM)
    (stubs / "mlx").mkdir(exist_ok=True)
    (stubs / "mlx" / "__init__.py").write_text("")
    (stubs / "mlx" / "core.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(stubs), "OMP_NUM_THREADS": str(args.threads)}
    model_dir = workdir / "ref_model"
    model_dir.mkdir(exist_ok=True)
    cmd = [args.ref_python, "-u", "reexpress.py", "--input_training_set_file", str(files["train"]),
           "--input_calibration_set_file", str(files["calibration"]), "--input_eval_set_file", str(files["test"]),
           "--alpha", str(K.ALPHA_PRIME), "--class_size", str(args.num_classes), "--seed_value", str(args.seed),
           "--epoch", str(args.epochs), "--batch_size", str(K.PAPER_BATCH_SIZE),
           "--learning_rate", str(K.PAPER_LEARNING_RATE), "--model_dir", str(model_dir),
           "--number_of_random_shuffles", str(args.iterations), "--use_training_set_max_label_size_as_max_q",
           "--warm_up_epochs", "0", "--model_rescaler_training_max_epochs", str(args.rescaler_max_epochs),
           "--exemplar_vector_dimension", str(K.EXEMPLAR_DIM), "--router_warm_up_epochs", "0", "--use_embeddings"]
    start = time.time()
    log = workdir / "reference_train.log"
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=code, env=env, stdout=f, stderr=subprocess.STDOUT)
    seconds = time.time() - start
    if proc.returncode != 0:
        raise SystemExit(f"reference training failed (exit {proc.returncode}); see {log}")
    result = {"seconds": seconds, "iterations": parse_reference_log(log.read_text()), "views": {}}
    helper = workdir / "ref_predict.py"
    helper.write_text(REF_PREDICT)
    for view in ("test", "shift"):
        out = workdir / f"ref_{view}.json"
        subprocess.run([args.ref_python, str(helper), str(code), str(model_dir), str(files[view]), str(out)],
                       cwd=code, env=dict(env, PYTHONPATH=os.pathsep.join([str(code), str(stubs)])), check=True,
                       stdout=subprocess.DEVNULL)
        result["views"][view] = json.loads(out.read_text())
    return result


def run_ours(sets, config: FitConfig) -> dict:
    start = time.time()
    est = SDMEstimator.fit(sets["train"], sets["calibration"], config)
    seconds = time.time() - start
    m = est.manifest
    iters = [{"iteration": it["iteration"], "epoch": it["epoch_chosen"], "balanced_median_q": it["balanced_median_q"],
              "q_tilde_min": it["q_tilde_min"], "psi": it.get("psi"), "rescaler": it.get("rescaler")}
             for it in m["training"]["iterations"]]
    views = {}
    for view in ("test", "shift"):
        a = est.predict_arrays(sets[view].embeddings)
        views[view] = {"rows": [[int(p), bool(x)] for p, x in zip(a["prediction"], a["admitted"])]}
    return {"seconds": seconds, "iterations": iters, "q_tilde_min_star": m["q_tilde_min_star"],
            "q_tilde_min_robust": m["q_tilde_min_robust"], "psi": m["psi"], "views": views}


def fmt(x, digits=3) -> str:
    if x is None:
        return "-"
    if isinstance(x, list):
        return "[" + ", ".join(fmt(v, digits) for v in x) + "]"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def report(name: str, res: dict, sets, num_classes: int) -> None:
    print(f"\n== {name}: fit {res['seconds']:.0f} s; q̃*_min {fmt(res.get('q_tilde_min_star'))}; robust "
          f"{fmt(res.get('q_tilde_min_robust'))}; ψ {fmt(res.get('psi'), 6)}")
    for it in res["iterations"]:
        w = it.get("rescaler")
        print(f"   iteration {it['iteration']}: epoch {it['epoch']}, balanced median q {fmt(it['balanced_median_q'], 1)}, "
              f"q̃_min {fmt(it['q_tilde_min'])}, ψ {fmt(it.get('psi'), 6)}, W'' {fmt(w, 2) if w else '-'}")
    for view, v in res["views"].items():
        rows = np.array(v["rows"])
        labels = sets[view].labels
        r = table_row("p_lower", labels, rows[:, 0], rows[:, 1].astype(bool), num_classes)
        cells = "  ".join("N/A" if s.accuracy is None else f"{s.accuracy:.3f}/{s.admitted}" for s in r.strata())
        print(f"   {view:<5} admitted {r.marginal.admitted}/{len(labels)} ({r.marginal.fraction:.1%}); strata "
              f"y=0..,ŷ=0..,all: {cells}; every stratum >= 0.95: {'yes' if r.calibrated(0.95) else 'NO'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reference", help="checkout of ReexpressAI/sdm (holds research_code/code)")
    p.add_argument("--ref-python", default="/work/refvenv/bin/python", help="a Python with torch and faiss")
    p.add_argument("--dataset", choices=sorted(LOADERS), default="spam")
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--rescaler-max-epochs", type=int, default=K.RESCALER_MAX_EPOCHS,
                   help="Alg. 2 epoch cap for both sides (paper 1,000; batch 1 makes that ~40 min on 2 busy cores)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workdir", help="keep the reference's files here (default: a temporary folder)")
    p.add_argument("--skip-reference", action="store_true", help="only our two configurations")
    args = p.parse_args(argv)
    sets = LOADERS[args.dataset]()
    args.num_classes = int(sets["train"].labels.max()) + 1
    print(f"dataset {args.dataset}: train {len(sets['train'])}, calibration {len(sets['calibration'])}, test "
          f"{len(sets['test'])}, shift {len(sets['shift'])}; J = {args.iterations}, epochs {args.epochs}")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if not args.skip_reference:
            if not args.reference:
                p.error("--reference is required (or --skip-reference)")
            files = {k: workdir / f"{k}.jsonl" for k in ("train", "calibration", "test", "shift")}
            for k, path in files.items():
                write_jsonl(path, sets[k])
            ref = run_reference(args, workdir, files)
            ref["q_tilde_min_star"] = ref["views"]["test"]["q_tilde_min_star"]
            ref["q_tilde_min_robust"] = ref["views"]["test"]["q_tilde_min_robust"]
            ref["psi"] = ref["views"]["test"]["psi"]
            report("paper's code (research_code/code, paper flags)", ref, sets, args.num_classes)
        paper = FitConfig(iterations=args.iterations, epochs=args.epochs, seed=args.seed,
                          learning_rate=K.PAPER_LEARNING_RATE, rescaler_learning_rate=K.PAPER_RESCALER_LEARNING_RATE,
                          rescaler_batch_size=K.PAPER_RESCALER_BATCH_SIZE, rescaler_max_epochs=args.rescaler_max_epochs)
        report("ours, paper settings", run_ours(sets, paper), sets, args.num_classes)
        for kind in ("v1", "v2"):
            report(f"ours, project defaults, estimator {kind}",
                   run_ours(sets, FitConfig(iterations=args.iterations, seed=args.seed, estimator=kind)), sets,
                   args.num_classes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
