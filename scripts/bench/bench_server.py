#!/usr/bin/env python
"""Benchmark: `mlx-sdm serve` against `mlx_lm.server` on the same model, in one run.

The embedded SmolLM2 (or --model) is saved once as an mlx-lm folder; both servers load that folder
and run side by side on 127.0.0.1. Each round sends the same streaming chat request (explicit
system message, greedy, --tokens answer budget) to each server in turn, alternating which goes
first, and times it from the client with the official `openai` package:

  - decode tokens/s: (completion tokens - 1) / (last token - first token), each server's own count;
  - first token: seconds from the request to the first content chunk;
  - the verdict's added latency: our last content chunk -> the chunk that carries the verdict
    (the verifier runs after the last token; this includes storing the turn);
  - /v1/verify: time to judge the same answer made elsewhere (force-decode + verdict + store).

    .venv/bin/python scripts/bench/bench_server.py                  # SmolLM2 float32, 128 tokens, 5 rounds
    .venv/bin/python scripts/bench/bench_server.py --tokens 64 --rounds 3 --verifier weights/smollm2-bbc-topic
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DEFAULT_TOKENS = 128
DEFAULT_ROUNDS = 5
DEFAULT_SYSTEM = "You are a helpful AI assistant."
DEFAULT_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
START_TIMEOUT_S = 300
MLX_LM_SERVER = "import sys, mlx_sdm; from mlx_lm.server import main; sys.argv = ['mlx_lm.server', *sys.argv[1:]]; main()"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help="answer budget (max_tokens)")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--model", default=None, help="default: the embedded SmolLM2 (saved to an mlx-lm folder for both servers)")
    p.add_argument("--verifier", default=None, help="our server's verifier (default: the model's shipped default)")
    return p


def save_mlx_folder(model: str | None, folder: Path) -> str:
    """The model as an mlx-lm folder (weights, config, tokenizer with its chat template); returns its name."""
    from mlx_lm.utils import save_config, save_model

    from mlx_sdm.lm.loading import load_model

    lm = load_model(model)
    folder.mkdir(parents=True, exist_ok=True)
    save_model(folder, lm.model, donate_model=False)
    config = dict(lm.config or vars(lm.model.args))
    config.setdefault("model_type", "llama")
    save_config(config, config_path=folder / "config.json")
    lm.tokenizer._tokenizer.save_pretrained(str(folder))
    return lm.name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(command: list[str], port: int, log: Path) -> subprocess.Popen:
    """Start a server and wait (bounded) until its /v1/models answers."""
    import urllib.request

    proc = subprocess.Popen(command, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{command[0]} exited ({proc.returncode}); see {log}:\n{log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).read()
            return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"{command} did not answer within {START_TIMEOUT_S} s; see {log}")


def timed_stream(client, model: str, messages: list[dict], tokens: int) -> dict:
    """One streaming request, timed from the client."""
    tic = time.perf_counter()
    stamps, pieces, verdict_at, verdict, usage = [], [], None, None, None
    for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=tokens, temperature=0.0,
                                                stream=True, stream_options={"include_usage": True}):
        now = time.perf_counter()
        extra = chunk.model_extra or {}
        if "verdict" in extra:
            verdict_at, verdict = now, extra["verdict"]
        if chunk.usage is not None:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].delta.content:
            stamps.append(now)
            pieces.append(chunk.choices[0].delta.content)
    n = usage.completion_tokens if usage is not None else len(stamps)
    decode = (n - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 and stamps[-1] > stamps[0] else float("nan")
    return {"tps": decode, "first": stamps[0] - tic if stamps else float("nan"), "total": time.perf_counter() - tic,
            "tokens": n, "text": "".join(pieces), "verdict": verdict,
            "verdict_s": (verdict_at - stamps[-1]) if (verdict_at and stamps) else None}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import openai

    work = Path(tempfile.mkdtemp(prefix="bench-server-"))
    folder = work / "model"
    name = save_mlx_folder(args.model, folder)
    ours_port, theirs_port = free_port(), free_port()
    ours_cmd = [sys.executable, "-m", "mlx_sdm", "serve", "--model", str(folder), "--port", str(ours_port),
                "--db", str(work / "chat.db"), "--max-tokens", str(args.tokens)]
    if args.verifier:
        ours_cmd += ["--verifier", args.verifier]
    elif args.model is None:  # the folder is the embedded model: its default verifier fits it (same fingerprint)
        from mlx_sdm.network.verifier import DEFAULT_VERIFIER_DIR

        ours_cmd += ["--verifier", str(DEFAULT_VERIFIER_DIR)]
    # mlx_lm.server in a process that loads the same BLAS first (mlx_sdm/blas.py), so only the servers differ
    theirs_cmd = [sys.executable, "-c", MLX_LM_SERVER, "--model", str(folder), "--port", str(theirs_port),
                  "--max-tokens", str(args.tokens)]
    servers = [start(ours_cmd, ours_port, work / "ours.log"), start(theirs_cmd, theirs_port, work / "mlx_lm.log")]
    try:
        ours = openai.OpenAI(base_url=f"http://127.0.0.1:{ours_port}/v1", api_key="none", max_retries=0, timeout=600)
        theirs = openai.OpenAI(base_url=f"http://127.0.0.1:{theirs_port}/v1", api_key="none", max_retries=0, timeout=600)
        ours_model = ours.models.list().data[0].id
        def chat(r: int) -> list[dict]:  # a new prompt each round: neither server answers from a cached prompt
            return [{"role": "system", "content": DEFAULT_SYSTEM}, {"role": "user", "content": f"({r + 1}) {args.prompt}"}]

        timed_stream(ours, ours_model, chat(-1), 8)  # warm-up both (kernels, caches)
        timed_stream(theirs, str(folder), chat(-1), 8)
        rows: dict[str, list[dict]] = {"ours": [], "mlx_lm": []}
        verify_s = []
        for r in range(args.rounds):
            messages = chat(r)
            order = [("ours", ours, ours_model), ("mlx_lm", theirs, str(folder))]
            for label, client, model in (order if r % 2 == 0 else order[::-1]):
                rows[label].append(timed_stream(client, model, messages, args.tokens))
            tic = time.perf_counter()
            ours.post("/verify", body={"messages": messages, "completion": rows["ours"][-1]["text"]}, cast_to=object)
            verify_s.append(time.perf_counter() - tic)
            o, t = rows["ours"][-1], rows["mlx_lm"][-1]
            print(f"round {r + 1}: ours {o['tps']:.1f} tok/s ({o['tokens']} tokens, verdict +{o['verdict_s'] * 1000:.0f} ms), "
                  f"mlx_lm.server {t['tps']:.1f} tok/s ({t['tokens']} tokens), /v1/verify {verify_s[-1] * 1000:.0f} ms", flush=True)
        report(name, args, rows, verify_s)
    finally:
        for proc in servers:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


def report(name: str, args, rows: dict[str, list[dict]], verify_s: list[float]) -> None:
    def med(label: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[label])

    same = all(o["text"] == t["text"] for o, t in zip(rows["ours"], rows["mlx_lm"]))
    o_tps, t_tps = med("ours", "tps"), med("mlx_lm", "tps")
    paired = statistics.median(o["tps"] / t["tps"] for o, t in zip(rows["ours"], rows["mlx_lm"]))
    print(f"\nmodel {name} (float32, mlx-lm folder), prompt '(round) {args.prompt[:40]}...', max_tokens {args.tokens}, "
          f"{args.rounds} rounds alternating, medians; same answer text from both: {same}")
    print(f"{'':22}{'mlx-sdm serve':>16}{'mlx_lm.server':>16}{'ratio':>8}")
    print(f"{'decode tokens/s':22}{o_tps:16.1f}{t_tps:16.1f}{o_tps / t_tps:8.3f}")
    print(f"{'  (per-round ratios, median)':54}{paired:8.3f}")
    print(f"{'first token (s)':22}{med('ours', 'first'):16.3f}{med('mlx_lm', 'first'):16.3f}"
          f"{med('ours', 'first') / med('mlx_lm', 'first'):8.3f}")
    print(f"{'request total (s)':22}{med('ours', 'total'):16.3f}{med('mlx_lm', 'total'):16.3f}"
          f"{med('ours', 'total') / med('mlx_lm', 'total'):8.3f}")
    verdict_ms = statistics.median(r["verdict_s"] for r in rows["ours"]) * 1000
    print(f"verdict's added latency (last token -> verdict chunk, incl. storing the turn): {verdict_ms:.0f} ms "
          f"= {verdict_ms / 1000 / med('ours', 'total'):.1%} of our request")
    print(f"/v1/verify of the same answer (force-decode + verdict + store): {statistics.median(verify_s) * 1000:.0f} ms")
    print(f"verdict status: {rows['ours'][-1]['verdict']['status']} ({rows['ours'][-1]['verdict']['reason']})")


if __name__ == "__main__":
    sys.exit(main())
