#!/usr/bin/env python
"""Benchmark: plain mlx_lm.stream_generate vs mlx-sdm generation with same-pass feature capture and
a final verdict. One process, the same model, prompt and length (end of turn is masked so both
produce exactly --tokens tokens); runs alternate to share the machine's load fairly.

Prints decode tokens/s of each, their ratio (goal >= 0.95), peak memory, the memory-bandwidth limit
(weight bytes / device bandwidth: each decoded token reads every weight once) and, with a verifier,
the share of the answer's total time spent on verification (routing + features + verdict; goal <= 3%).

    .venv/bin/python scripts/bench/bench_generate.py                 # SmolLM2 float32, 128 tokens, 3 rounds
    .venv/bin/python scripts/bench/bench_generate.py --tokens 128 --rounds 5 --quantized
    # A Phi-3.5-mini-shaped random model (3.8 B parameters; no hub weights; a byte-level tokenizer
    # with the logits of its unused ids masked in both paths): the GPU case. Runs from a checkout
    # with only the wheels on the path (no project install):
    PYTHONPATH=/tmp/site:$PWD python scripts/bench/bench_generate.py --random-phi3 --bits 16
    PYTHONPATH=/tmp/site:$PWD python scripts/bench/bench_generate.py --random-phi3 --bits 4
    python scripts/bench/bench_generate.py --random-phi3 --layers 2 --tokens 16 --rounds 1   # CPU smoke run
    python scripts/bench/bench_generate.py --sync-check   # why the capture costs no device sync
    # Time to first token by turn number: a --turns-turn chat through the chat's own engine and turn
    # service (ChatEngine: the store, the conversation's KV prefix, verdict, monitor, P(True)), as
    # `mlx-sdm chat` runs it; prints each turn's first-token time and the ratio of the last to the first
    .venv/bin/python scripts/bench/bench_generate.py --turns 10 --tokens 48 --head default
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

from checkout import repository_tests  # noqa: E402  (beside this script)
import mlx_sdm  # noqa: F401

DEFAULT_TOKENS = 128
DEFAULT_ROUNDS = 3
DEFAULT_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
# Phi-3.5-mini-instruct's shape (config.json of microsoft/Phi-3.5-mini-instruct).
PHI35_SHAPE = dict(hidden_size=3072, num_hidden_layers=32, intermediate_size=8192, num_attention_heads=32,
                   num_key_value_heads=32, vocab_size=32064, rms_norm_eps=1e-5, rope_theta=10000.0,
                   max_position_embeddings=131072, original_max_position_embeddings=4096)
DEFAULT_GROUP_SIZE = 64
#: Peak memory bandwidth in GB/s by device-name fragment (vendor data sheets), for the bandwidth limit.
KNOWN_BANDWIDTH_GBS = {
    "H200": 4800.0, "H100 PCIe": 2000.0, "H100 NVL": 3900.0, "H100": 3350.0, "GH200": 4000.0,
    "A100-SXM4-80GB": 2039.0, "A100 80GB PCIe": 1935.0, "A100": 1555.0, "L40S": 864.0, "L4": 300.0,
    "RTX 4090": 1008.0, "M1 Max": 400.0, "M2 Max": 400.0, "M3 Max": 400.0, "M4 Max": 546.0,
    "M1 Ultra": 800.0, "M2 Ultra": 800.0, "M1 Pro": 200.0, "M2 Pro": 200.0, "M3 Pro": 150.0, "M4 Pro": 273.0,
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS)
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--model", default=None, help="default: the embedded SmolLM2")
    p.add_argument("--quantized", action="store_true")
    p.add_argument("--verifier", default=None, help="default: the shipped default verifier (SmolLM2 only)")
    p.add_argument("--head", default="none",
                   help="SDM-network head our path decodes with: none (default: the capture alone), 'default' (the "
                        "shipped default head of the embedded model, as `mlx-sdm generate` uses it) or a head folder")
    p.add_argument("--random-phi3", action="store_true",
                   help="a Phi-3.5-mini-shaped random mlx-lm phi3 model instead of --model (no verifier)")
    p.add_argument("--bits", type=int, choices=(16, 8, 4), default=16, help="--random-phi3: bf16 or quantized (group 64)")
    p.add_argument("--layers", type=int, default=PHI35_SHAPE["num_hidden_layers"], help="--random-phi3: layers (default 32)")
    p.add_argument("--bandwidth-gbs", type=float, default=None, help="device memory bandwidth (GB/s) if not known")
    p.add_argument("--turns", type=int, default=0,
                   help="time to first token by turn number: a chat of this many turns through the chat's engine "
                        "(ChatEngine with a temporary store, the chat's defaults; --head default = the chat's head)")
    p.add_argument("--sync-check", action="store_true",
                   help="only time reading a token's log-prob while the next step runs: in-graph gather vs .item()")
    return p


def sync_check(size: int = 2000, depth: int = 20) -> None:
    """Why the capture is free: after a token is read, mlx-lm has already queued the next step. The
    old ``logprobs[token].item()`` is a new op queued behind that step and waits for it; the gather
    made in the step's own graph (ChosenLogprob) is ready with the token."""
    import mlx.core as mx

    from mlx_sdm.lm.generation import ChosenLogprob

    weight = mx.random.normal((size, size)) / size**0.5
    mx.eval(weight)

    def step() -> mx.array:  # stands in for one forward pass
        x = mx.random.normal((1, size))
        for _ in range(depth):
            x = x @ weight
        return x - mx.logsumexp(x, axis=-1, keepdims=True)

    chosen = ChosenLogprob()
    for name in ("in-graph gather (ChosenLogprob)", "logprobs[token].item()"):
        times = []
        for _ in range(5):
            logprobs = step()
            token = chosen(logprobs) if name.startswith("in-graph") else mx.argmax(logprobs, axis=-1)
            mx.async_eval(token, logprobs)
            following = step()
            mx.async_eval(following)  # the next step, queued before the token is read
            index = token.item()
            tic = time.perf_counter()
            _ = chosen.pop() if name.startswith("in-graph") else logprobs[0, index].item()
            times.append(time.perf_counter() - tic)
            mx.eval(following)
        print(f"reading the log-prob after the token, next step queued: {name}: "
              f"median {statistics.median(times) * 1000:.2f} ms")


@dataclass
class BenchModel:
    """What generation needs (a LoadedModel's fields) plus what the bench reports."""

    model: object
    tokenizer: object
    name: str
    max_context: int
    allowed_vocab: int | None = None  # ids >= this are masked (a random model's unused ids)
    verifier: object | None = None
    system: str | None = None
    fingerprint: dict = field(default_factory=dict)
    head: object | None = None  # the decoding hook (VocabularyHeads.vocab_logits) of --head
    head_path: str | None = None


def random_phi3(layers: int, bits: int, seed: int = 0) -> BenchModel:
    """Phi-3.5-mini's shape with random weights (bf16, or quantized), and the tests' byte-level
    BPE tokenizer (384 ids; the other logits are masked so both paths sample real tokens)."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm.models import phi3

    repository_tests()
    from tests.tiny_lm import build_tiny_tokenizer

    mx.random.seed(seed)
    args = phi3.ModelArgs(model_type="phi3", **dict(PHI35_SHAPE, num_hidden_layers=layers))
    model = phi3.Model(args)
    model.set_dtype(mx.bfloat16)
    if bits < 16:
        nn.quantize(model, group_size=DEFAULT_GROUP_SIZE, bits=bits)
    mx.eval(model.parameters())
    model.eval()
    tokenizer = build_tiny_tokenizer()
    name = f"random phi3 ({layers} layers, {'bf16' if bits == 16 else f'{bits}-bit, group {DEFAULT_GROUP_SIZE}'})"
    return BenchModel(model, tokenizer, name, max_context=4096, allowed_vocab=len(tokenizer._tokenizer))


def weight_bytes(model) -> int:
    from mlx.utils import tree_flatten

    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def device_description() -> tuple[str, float | None, float | None]:
    """(device name, memory GB, bandwidth GB/s when known)."""
    import mlx.core as mx

    name, memory = str(mx.default_device()), None
    if mx.default_device() == mx.gpu and getattr(mx, "cuda", None) is not None and mx.cuda.is_available():
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=20).stdout.splitlines()[0]
            gpu, mib = [x.strip() for x in out.split(",")]
            name, memory = gpu, float(mib) / 1024
        except (OSError, IndexError, ValueError, subprocess.SubprocessError):
            pass
    else:
        info = mx.device_info() if hasattr(mx, "device_info") else {}
        name = str(info.get("device_name", name))
        if info.get("memory_size"):
            memory = info["memory_size"] / 2**30
    bandwidth = next((v for k, v in KNOWN_BANDWIDTH_GBS.items() if k.lower() in name.lower()), None)
    return name, memory, bandwidth


def load_bench_model(args) -> BenchModel:
    if args.random_phi3:
        return random_phi3(args.layers, args.bits)
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.verifier import DEFAULT_VERIFIER_DIR, DocumentVerifier

    from mlx_sdm.usecases.loading import load_head

    lm = load_model(args.model, quantized=args.quantized)
    verifier = DocumentVerifier.load(args.verifier or DEFAULT_VERIFIER_DIR, expect_fingerprint=lm.fingerprint)
    # "default" = no --head flag at all: the one rule (app/loading.resolve_head) picks the shipped head
    head = load_head(None if args.head == "default" else args.head, lm, args.model)
    return BenchModel(lm.model, lm.tokenizer, f"{lm.name} ({'4-bit' if lm.quantized else 'float32'})", lm.max_context,
                      verifier=verifier, system=verifier.recipe.system, fingerprint=lm.fingerprint,
                      head=head.head, head_path=head.path)


#: The chat's turns: each a new question in the same conversation (the previous answers stay in the prompt).
CHAT_TURNS = (
    "What is the capital of France?", "Tell me one thing to see there.", "How old is that monument?",
    "Who designed it?", "What else did that person build?", "Is Paris far from Lyon?",
    "How long is the train ride between them?", "What food is Lyon known for?",
    "Give me a simple recipe with it.", "Which wine goes with that?", "Summarise our conversation.",
    "What should I pack for the trip?",
)


@dataclass
class TurnTiming:
    turn: int
    first_token_s: float  # from send to the engine's first token event (the chat screen's "after Enter")
    pipeline_first_token_s: float | None  # from the pipeline's start (routing, prefill) to its first piece
    total_s: float  # the whole turn: answer, verdict, monitor (P(True)), storing
    prompt_tokens: int
    reused_tokens: int  # prompt tokens the conversation's KV prefix already held (not prefilled)


def chat_turns(args) -> list[TurnTiming]:
    """A ``--turns``-turn chat through :class:`~mlx_sdm.executor.engine.ChatEngine`, timed per turn."""
    import tempfile
    from pathlib import Path

    from mlx_sdm.usecases.loading import chat_components
    from mlx_sdm.executor.engine import ChatEngine, EngineConfig
    from mlx_sdm.lm.pieces import TokenPiece
    from mlx_sdm.store.chat_store import ChatStore

    head = None if args.head == "default" else args.head
    config = EngineConfig(model=args.model, verifier=args.verifier, head=head, max_tokens=args.tokens)
    timings: list[TurnTiming] = []
    with tempfile.TemporaryDirectory() as tmp:
        store = ChatStore(Path(tmp) / "chat.db")
        engine = ChatEngine(config, store, components=chat_components)
        try:
            engine.ready.result(600)
            session = store.create_session("bench")
            for n in range(1, args.turns + 1):
                first: list[float] = []

                def on_item(_ref, item, first=first) -> None:
                    if isinstance(item, TokenPiece) and not first:
                        first.append(time.perf_counter())

                started = time.perf_counter()
                outcome = engine.send(session.id, CHAT_TURNS[(n - 1) % len(CHAT_TURNS)], listener=on_item).result(600)
                total = time.perf_counter() - started
                timings.append(TurnTiming(n, (first[0] - started) if first else float("nan"), outcome.first_token_s,
                                          total, outcome.prompt_tokens, outcome.answer.reused_tokens))
                print(f"turn {n}: first token {timings[-1].first_token_s:.2f} s, prompt {outcome.prompt_tokens} tokens "
                      f"({outcome.answer.reused_tokens} reused), turn {total:.2f} s, {outcome.status.value}", flush=True)
        finally:
            engine.shutdown()
            store.close()
    return timings


def print_turn_table(args, timings: list[TurnTiming]) -> None:
    print(f"\n| turn | first token (s) | pipeline's first piece (s) | prompt tokens | reused from the KV prefix | prefilled | whole turn (s) |")
    print("|---|---|---|---|---|---|---|")
    for t in timings:
        pipe = "—" if t.pipeline_first_token_s is None else f"{t.pipeline_first_token_s:.2f}"
        print(f"| {t.turn} | {t.first_token_s:.2f} | {pipe} | {t.prompt_tokens} | {t.reused_tokens} | "
              f"{t.prompt_tokens - t.reused_tokens} | {t.total_s:.2f} |")
    if len(timings) > 1:
        last, one = timings[-1], timings[0]
        print(f"\nfirst token, turn {last.turn} / turn 1: {last.first_token_s / one.first_token_s:.2f}x "
              f"({last.first_token_s:.2f} s / {one.first_token_s:.2f} s; goal <= 1.5x)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.sync_check:
        sync_check()
        return 0
    if args.turns:
        print_turn_table(args, chat_turns(args))
        return 0
    import mlx.core as mx
    from mlx_lm.generate import stream_generate

    from mlx_sdm.lm.features import DELIMITER_END_OF_TURN
    from mlx_sdm.lm.generation import GenerationConfig, generate_with_features
    from mlx_sdm.lm.prompt import render_prompt

    bench = load_bench_model(args)
    vocab = bench.model.args.vocab_size
    mask = mx.zeros((vocab,))
    mask = mask.at[mx.array(sorted(bench.tokenizer.eos_token_ids))].add(-1e9)
    if bench.allowed_vocab is not None and bench.allowed_vocab < vocab:
        mask = mask.at[mx.arange(bench.allowed_vocab, vocab)].add(-1e9)
    mask = mask.astype(mx.float32)
    mx.eval(mask)

    def masked(tokens, logits):  # both paths: exactly --tokens tokens, only real ids
        return logits + mask

    ids = render_prompt(bench.tokenizer, args.prompt, bench.system)
    # the verifier that judges this prompt, as the chat routes it (a task, or an everyday question's member)
    route = bench.verifier.route(args.prompt) if bench.verifier is not None else None
    judge = bench.verifier.member_for(route.task) if route is not None else None
    delimiter = judge.recipe.delimiter if judge is not None else DELIMITER_END_OF_TURN
    if route is not None:
        print(f"routed: {route.how.value}" + (f" ({route.task})" if route.task else ""))

    def plain() -> tuple[float, float]:
        tic = time.perf_counter()
        first = None
        n = 0
        for response in stream_generate(bench.model, bench.tokenizer, mx.array(ids), max_tokens=args.tokens,
                                        logits_processors=[masked]):
            if first is None:
                first = time.perf_counter()
            n = response.generation_tokens
        end = time.perf_counter()
        return n / (end - first), end - tic

    def ours() -> tuple[float, float, float | None]:
        tic = time.perf_counter()
        routing = 0.0
        if bench.verifier is not None and bench.verifier.router is not None:  # the question router, before generation
            bench.verifier.router.forget()
            bench.verifier.route(args.prompt)
            routing = time.perf_counter() - tic
        config = GenerationConfig(max_tokens=args.tokens, delimiter=delimiter, stop_at_delimiter=False,
                                  extra={"logits_processors": [masked]})
        result = generate_with_features(bench, ids, config, head=bench.head)
        t_verify = time.perf_counter()
        if judge is not None and route.how.value != "no_checkable_answer":
            judge.verify_features(result.features, explain=3)
        end = time.perf_counter()
        verification = routing + result.feature_time_s + (end - t_verify) if bench.verifier is not None else None
        return len(result.tokens) / result.generation_time_s, end - tic, verification

    plain()
    ours()  # warm-up (kernels, caches)
    mx.reset_peak_memory()
    plain_tps, ours_tps, shares, plain_total, ours_total = [], [], [], [], []
    for r in range(args.rounds):
        tps, total = plain()
        plain_tps.append(tps)
        plain_total.append(total)
        tps, total, verification = ours()
        ours_tps.append(tps)
        ours_total.append(total)
        line = f"round {r + 1}: plain {plain_tps[-1]:.1f} tok/s, ours {ours_tps[-1]:.1f} tok/s"
        if verification is not None:
            shares.append(verification / total)
            line += f", verification {verification * 1000:.1f} ms = {shares[-1]:.2%} of {total:.2f} s"
        print(line, flush=True)
    p, o = statistics.median(plain_tps), statistics.median(ours_tps)
    device, memory, bandwidth = device_description()
    bandwidth = args.bandwidth_gbs or bandwidth
    wbytes = weight_bytes(bench.model)
    print(f"device {device}" + (f" ({memory:.0f} GiB)" if memory else "") + f"; mlx {mx.__version__}")
    print(f"model {bench.name}, weights {wbytes / 1e9:.2f} GB, prompt {len(ids)} tokens, answer {args.tokens} tokens, "
          f"{args.rounds} rounds (medians); peak memory {mx.get_peak_memory() / 2**30:.2f} GiB")
    print(f"our path decodes with head: {bench.head_path or 'none (the model head)'}")
    print(f"plain mlx_lm.stream_generate: {p:.1f} tokens/s; with feature capture: {o:.1f} tokens/s; "
          f"ratio {o / p:.3f} (goal >= 0.95)")
    if bandwidth:
        limit = bandwidth * 1e9 / wbytes
        print(f"memory-bandwidth limit: {limit:.0f} tokens/s ({bandwidth:.0f} GB/s / {wbytes / 1e9:.2f} GB); "
              f"plain reaches {p / limit:.0%} of it, ours {o / limit:.0%}")
    else:
        print("memory-bandwidth limit: unknown device bandwidth (pass --bandwidth-gbs)")
    print(f"end-to-end time ratio (plain / ours incl. verdict): {statistics.median(plain_total) / statistics.median(ours_total):.3f}")
    if shares:
        print(f"verification share of a {args.tokens}-token answer: {statistics.median(shares):.2%} (goal <= 3%)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
