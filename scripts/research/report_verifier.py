#!/usr/bin/env python
"""Report the shipped document verifier in the layout of the paper's Table 1 / Table 7.

Held-out FEVER-derived verification documents (the split scripts/research/build_default_verifier.py left
out) and a shifted task built the same way from BIG-bench sports_understanding
(`{"plausible": bool}` answers). Each cell is `acc / n`: accuracy of the verifier's prediction of y
within the stratum among the documents that row admits, and that count ÷ |D_te|. `no-reject`
admits everything; `p̂ lower` admits where p̂(y|x)_lower ≥ α′ = 0.95 (Eq. 28). N/A = none admitted.

    .venv/bin/python scripts/research/report_verifier.py                    # prints the markdown tables
    .venv/bin/python scripts/research/report_verifier.py --out build/verifier_report.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

import mlx_sdm  # noqa: F401

import numpy as np

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "bigbench"
from mlx_sdm.resources import default_verifier_dir

DEFAULT_VERIFIER = default_verifier_dir()
DEFAULT_CACHE = ROOT / "build" / "features"
DEFAULT_SHIFT_SIZE = 300


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verifier", type=Path, default=DEFAULT_VERIFIER)
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--shift-size", type=int, default=DEFAULT_SHIFT_SIZE, help="sports_understanding documents (seeded sample)")
    p.add_argument("--out", type=Path, default=None, help="also write the markdown here")
    return p


from mlx_sdm.calibration.evaluation import markdown_rows


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.encoding import benchmark_splits, encode_task
    from mlx_sdm.usecases.verifiers import cached_document_features
    from mlx_sdm.network.verifier import DocumentVerifier

    started = time.time()
    lm = load_model()
    verifier = DocumentVerifier.load(args.verifier, expect_fingerprint=lm.fingerprint)
    info = verifier.info
    seed = int(info.get("seed", 0))
    fever = encode_task(args.data_dir / "fact_checker_fever" / "task.json", seed=seed)
    _, fever_test = benchmark_splits(fever, pool_size=int(info["pool_size"]), test_size=int(info["test_size"]), seed=seed)
    sports = encode_task(args.data_dir / "sports_understanding" / "task.json", seed=seed)
    _, sports_test = benchmark_splits(sports, pool_size=0, test_size=min(args.shift_size, len(sports)), seed=seed)
    lines = [
        f"Verifier `{args.verifier.relative_to(ROOT) if args.verifier.is_relative_to(ROOT) else args.verifier}` "
        f"(SmolLM2-135M-Instruct document features, α′ = {verifier.estimator.alpha}); cells are accuracy / admitted fraction.",
        "",
        "| Dataset | Estimator | y=0 | y=1 | ŷ=0 | ŷ=1 | marginal |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, docs in (("FEVER verification (held-out)", fever_test), ("sports_understanding verification (shifted)", sports_test)):
        feats = cached_document_features(lm, docs, delimiter=verifier.recipe.delimiter, cache_dir=args.cache_dir, desc=name[:24])
        arrays = verifier.estimator.predict_arrays(feats)
        labels = np.array([d.label for d in docs])
        lines += markdown_rows(f"{name} ({len(docs)})", labels, arrays["prediction"], arrays["admitted"])
    training = verifier.estimator.manifest["training"]
    lines += ["", f"Built on {info.get('pool_size')} FEVER documents (Alg. 1 split into D_tr/D_ca); calibration-set "
              f"accuracy {training['calibration_accuracy']:.3f} (logistic regression on the same features "
              f"{training['logistic_regression']['calibration_accuracy']:.3f}). Report took {time.time() - started:.0f} s.",
              "Reproduce: `.venv/bin/python scripts/research/build_default_verifier.py && .venv/bin/python scripts/research/report_verifier.py`"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        from mlx_sdm.atomic import atomic_write_text

        atomic_write_text(args.out, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
