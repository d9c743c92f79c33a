"""A fine-tuned folder as a person uses it: a running ``mlx-sdm serve --model DIR`` is asked a task's held-out and
shifted prompts (the rows ``finetune`` never trained or calibrated on) over its OpenAI-compatible endpoint; for
each split: how many answers are right, how many the server says are verified, and how many verified ones are
wrong (the promise: at most 1 in 20).

    mlx-sdm serve --model triage --port 8123 &
    .venv/bin/python scripts/bench/serve_task.py --url http://127.0.0.1:8123 --task examples/mail_triage.jsonl --rows 40
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request

import mlx_sdm  # noqa: F401  (the fast BLAS before mlx)


def served_model(url: str) -> str:
    with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as response:
        return json.load(response)["data"][0]["id"]


def ask(url: str, model: str, prompt: str, timeout: float) -> dict:
    """One chat completion (not streamed): the answer's text and the server's verdict object."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                       "temperature": 0}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        data = json.load(response)
    return {"text": data["choices"][0]["message"]["content"], "verdict": data.get("verdict") or {}}


def main() -> None:
    from mlx_sdm.network.encoding import parse_answer
    from mlx_sdm.network.tasks.registry import load_tasks

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="the server (default %(default)s)")
    parser.add_argument("--task", required=True, help="the task file (or shipped name) the folder was tuned on")
    parser.add_argument("--rows", type=int, default=40, help="prompts per split (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default %(default)s)")
    args = parser.parse_args()
    (task,) = load_tasks([args.task])
    model = served_model(args.url)
    for split in ("held_out", "shifted"):
        items = task.split(split, size=args.rows)
        right = verified = verified_wrong = 0
        started = time.perf_counter()
        for item in items:
            reply = ask(args.url, model, item.prompt, args.timeout)
            ok = parse_answer(reply["text"], task.answer_format) == item.gold
            shown = reply["verdict"].get("status") == "verified"
            right, verified, verified_wrong = right + ok, verified + shown, verified_wrong + (shown and not ok)
        n = len(items)
        print(f"{task.name} {split}: {n} prompts, {right} right ({right / max(n, 1):.0%}), {verified} verified "
              f"({verified / max(n, 1):.0%}), {verified_wrong} verified and wrong; "
              f"{(time.perf_counter() - started) / max(n, 1):.1f} s a prompt", flush=True)


if __name__ == "__main__":
    main()
