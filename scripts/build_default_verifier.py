#!/usr/bin/env python
"""Rebuild the shipped default verifier (weights/smollm2-fever) from scratch.

FEVER claims (BIG-bench fact_checker_fever) are encoded as verification documents (spec § 14:
`{"correctness": bool}` answers, unpaired negatives by Bernoulli(0.5), seed 0), force-decoded with the
embedded SmolLM2 (float32), and an SDM estimator is fitted on the document features
[mean(h); h_delimiter] (§ 15.3). The same seeded shuffle leaves a disjoint held-out test split for
scripts/report_verifier.py. Features are cached under build/features (outside git).

    .venv/bin/python scripts/build_default_verifier.py            # 1600 documents, the shipped size
    .venv/bin/python scripts/build_default_verifier.py --pool-size 6000 --test-size 612
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import mlx_sdm  # noqa: E402,F401  (BLAS before mlx)

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "bigbench"
from mlx_sdm.resources import DEFAULT_VERIFIER_NAME, source_weights_dir  # noqa: E402

DEFAULT_OUT = source_weights_dir() / DEFAULT_VERIFIER_NAME  # the checkout's weights/, packaged by the build
DEFAULT_CACHE = ROOT / "build" / "features"
DEFAULT_POOL_SIZE = 1600
DEFAULT_TEST_SIZE = 400
SIZE_BUDGET_MB = 30


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="folder holding fact_checker_fever/task.json")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="verifier folder to write (atomically)")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="feature cache (outside git)")
    p.add_argument("--pool-size", type=int, default=DEFAULT_POOL_SIZE, help="train ∪ calibration documents (Alg. 1 splits them)")
    p.add_argument("--test-size", type=int, default=DEFAULT_TEST_SIZE, help="held-out documents left for the report")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--iterations", type=int, default=None, help="Alg. 1 iterations J (default: the estimator's)")
    p.add_argument("--epochs", type=int, default=None, help="Alg. 1 epochs (default: the estimator's)")
    p.add_argument("--quantized", action="store_true", help="extract features with the 4-bit model")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mlx_sdm.calibration.estimator import FitConfig
    from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.encoding import SYSTEM_PROMPT, benchmark_splits, encode_task
    from mlx_sdm.app.verifiers import cached_document_features
    from mlx_sdm.network.verifier import DocumentVerifier, FeatureRecipe, labelled_set

    started = time.time()
    task = args.data_dir / "fact_checker_fever" / "task.json"
    documents = encode_task(task, seed=args.seed)
    pool, _ = benchmark_splits(documents, pool_size=args.pool_size, test_size=args.test_size, seed=args.seed)
    half = len(pool) // 2
    train, calibration = pool[:half], pool[half:]
    lm = load_model(quantized=args.quantized)
    t0 = time.time()
    features = cached_document_features(lm, pool, delimiter=DELIMITER_JSON_CLOSE, cache_dir=args.cache_dir,
                                        desc="FEVER pool")
    extract_s = time.time() - t0
    config = FitConfig(seed=args.seed)
    if args.iterations:
        config.iterations = args.iterations
    if args.epochs:
        config.epochs = args.epochs
    fingerprint = dict(lm.fingerprint, name=lm.name)
    verifier = DocumentVerifier.fit_features(
        fingerprint,
        labelled_set(train, features[:half]),
        labelled_set(calibration, features[half:]),
        config,
        recipe=FeatureRecipe(delimiter=DELIMITER_JSON_CLOSE, system=SYSTEM_PROMPT),
        source={"task": "bigbench/fact_checker_fever", "encoding": "spec § 14 (correctness JSON, seed %d)" % args.seed,
                "pool_size": len(pool), "test_size": args.test_size, "model": lm.name},
        progress=True,
    )
    verifier.info = {"built_by": "scripts/build_default_verifier.py", "pool_size": len(pool),
                     "test_size": args.test_size, "seed": args.seed, "feature_seconds": round(extract_s, 1)}
    verifier.save(args.out)
    size_mb = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file()) / 1e6
    training = verifier.estimator.manifest["training"]
    print(f"saved {args.out} ({size_mb:.1f} MB; budget {SIZE_BUDGET_MB} MB)")
    print(f"features: {len(pool)} documents in {extract_s:.0f} s ({len(pool) / max(extract_s, 1e-9):.1f} docs/s, cached runs ~0 s)")
    print(f"calibration accuracy {training['calibration_accuracy']:.3f}, logistic regression "
          f"{training['logistic_regression']['calibration_accuracy']:.3f}; threshold_succeeded="
          f"{verifier.estimator.manifest['threshold_succeeded']}; total {time.time() - started:.0f} s")
    if size_mb > SIZE_BUDGET_MB:
        print(f"warning: {size_mb:.1f} MB exceeds the {SIZE_BUDGET_MB} MB budget", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
