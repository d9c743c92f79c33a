"""``mlx-sdm generate "PROMPT"``: answer one prompt with the local LM, then print the verifier's
verdict, p_lower, q, d and the nearest training exemplars (spec § 15.7)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from mlx_sdm.errors import MlxSdmError

DEFAULT_MAX_TOKENS = 128
DEFAULT_EXPLAIN = 3
DEFAULT_MODEL = "smollm2"

EPILOG = """
The answer streams as it is generated; the verifier then reads the final hidden states captured
during that same pass ([mean(h); h_delimiter], no second forward pass) and reports:
  verdict   VERIFIED when the verifier predicts "acceptable" (class 1) AND admits it
            (p_lower >= alpha' = 0.95, Eq. 28); otherwise UNVERIFIED with the reason
  p_lower   the calibrated lower probability of the predicted class (only when admitted)
  q, d      similarity (nearest training exemplars that agree) and distance quantile
  exemplars the nearest training documents with their labels

The shipped default verifier (weights/smollm2-fever) was built for SmolLM2 on FEVER claims asked as
'{"correctness": bool}' JSON answers; on other prompts it mostly answers out_of_distribution.

examples:
  mlx-sdm generate "Check the following document for hallucinations and/or factual inaccuracies. \\
      Respond using the following JSON: {\\"correctness\\": bool}. DOCUMENT: The Eiffel Tower is in Rome."
  mlx-sdm generate "What is the capital of France?" --verifier none
  mlx-sdm generate "..." --json --explain 5
  mlx-sdm generate "..." --model path/to/mlx_model --verifier my-verifier --head my-head
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mlx-sdm generate", description="Answer one prompt, then print its verdict.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prompt", help="the user message (rendered with the model's chat template)")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="smollm2 (embedded, default), a local mlx-lm folder or .gguf, a preset (phi-3.5) or a hub id")
    p.add_argument("--quantized", action="store_true", help="keep the GGUF's 4-bit weights (default: float32, faster on CPU)")
    p.add_argument("--verifier", default=None, metavar="DIR|none",
                   help="document verifier folder; default: the shipped one for SmolLM2; 'none' to skip verification")
    p.add_argument("--head", default=None, metavar="DIR",
                   help="decode from the joint negative+positive heads of an SDM network (made by mlx-sdm finetune)")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="answer length limit (default %(default)s)")
    p.add_argument("--system", default=None, help="system prompt (default: the one the verifier was built with)")
    p.add_argument("--explain", type=int, default=DEFAULT_EXPLAIN, help="nearest exemplars to show (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return p


def _load_verifier(arg: str | None, lm):
    from mlx_sdm.network.verifier import DEFAULT_VERIFIER_DIR, DocumentVerifier
    from mlx_sdm.lm.loading import EMBEDDED_NAME

    if arg is not None and arg.lower() == "none":
        return None, None, "verification switched off (--verifier none)"
    if arg is None:
        if lm.name != EMBEDDED_NAME:
            return None, None, f"no default verifier for {lm.name}; pass --verifier DIR (build one with mlx-sdm train)"
        if not (DEFAULT_VERIFIER_DIR / "verifier.json").is_file():
            return None, None, "no default verifier installed; build it with scripts/build_default_verifier.py"
        arg = str(DEFAULT_VERIFIER_DIR)
    return DocumentVerifier.load(arg, expect_fingerprint=lm.fingerprint), arg, None


def verdict_summary(verdict) -> dict:
    verified = bool(verdict.admitted and verdict.prediction == 1)
    return {"verified": verified, **verdict.to_dict()}


def format_verdict(verdict, alpha: float) -> str:
    verified = verdict.admitted and verdict.prediction == 1
    label = {0: "not acceptable", 1: "acceptable"}.get(verdict.prediction, str(verdict.prediction))
    if verified:
        head = "verdict: VERIFIED"
    elif verdict.admitted:
        head = "verdict: UNVERIFIED (the verifier is confident the answer is NOT acceptable)"
    else:
        head = f"verdict: UNVERIFIED ({(verdict.reason or 'not admitted').replace('_', ' ')})"
    p_lower = f"{verdict.p_lower:.4f} (>= alpha' {alpha})" if verdict.p_lower is not None else f"— (below alpha' {alpha})"
    lines = [head, f"prediction: {verdict.prediction} ({label})", f"p_lower: {p_lower}",
             f"q: {verdict.q}   d: {verdict.d:.4f}   q_bin: {verdict.q_bin}"]
    if verdict.exemplars:
        lines.append("nearest exemplars:")
        for i, ex in enumerate(verdict.exemplars, 1):
            text = (ex.text or ex.id).replace("\n", " ")
            text = text if len(text) <= 160 else text[:157] + "..."
            lines.append(f"  {i}. [label {ex.label}, predicted {ex.prediction}, distance {ex.distance:.3f}] {text}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.max_tokens < 1:
        print("mlx-sdm generate: --max-tokens must be at least 1", file=sys.stderr)
        return 2
    stop = threading.Event()
    try:
        from mlx_sdm.lm.generation import GenerationConfig, stream_generate_features
        from mlx_sdm.lm.features import DELIMITER_END_OF_TURN
        from mlx_sdm.lm.loading import load_model

        lm = load_model(args.model, quantized=args.quantized)
        verifier, verifier_path, unverifiable = _load_verifier(args.verifier, lm)
        head = None
        if args.head:
            from mlx_sdm.network.heads import load_head

            head = load_head(args.head, lm.model, lm.fingerprint).vocab_logits
        recipe = verifier.recipe if verifier is not None else None
        config = GenerationConfig(
            max_tokens=args.max_tokens,
            delimiter=recipe.delimiter if recipe else DELIMITER_END_OF_TURN,
            system=args.system if args.system is not None else (recipe.system if recipe else None),
        )
        result = None
        for chunk in stream_generate_features(lm, args.prompt, config, head=head, stop=stop):
            if not args.json and chunk.text:
                sys.stdout.write(chunk.text)
                sys.stdout.flush()
            result = chunk.result or result
        verdict = None
        verify_s = 0.0
        if verifier is not None and not result.text.strip():
            unverifiable = "the model produced an empty answer; there is nothing to verify"
        elif verifier is not None:
            tic = time.perf_counter()
            verdict = verifier.verify_features(result.features, explain=max(0, args.explain))
            verify_s = time.perf_counter() - tic
    except KeyboardInterrupt:
        stop.set()
        print("\nmlx-sdm generate: interrupted", file=sys.stderr)
        return 130
    except MlxSdmError as exc:
        print(f"mlx-sdm generate: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({
            "prompt": args.prompt,
            "answer": result.text,
            "model": lm.name,
            "verifier": verifier_path,
            "unverifiable_reason": unverifiable,
            "verdict": verdict_summary(verdict) if verdict is not None else None,
            "generation": result.to_dict() | {"prompt_s": result.prompt_time_s, "generation_s": result.generation_time_s,
                                              "features_s": result.feature_time_s, "verify_s": verify_s},
        }))
        return 0
    print()
    print("-" * 60)
    if result.truncated_prompt_tokens:
        print(f"note: the prompt was left-truncated by {result.truncated_prompt_tokens} tokens to fit the context")
    if verdict is None:
        print(f"verdict: UNVERIFIABLE ({unverifiable})")
    else:
        print(format_verdict(verdict, verifier.estimator.alpha))
        if result.features.delimiter_kind == "end_of_completion":
            print("note: the answer never closed its JSON unit; the verifier read the whole answer instead")
    print(f"({len(result.tokens)} tokens, {result.generation_tps:.1f} tokens/s, finish: {result.finish_reason})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
