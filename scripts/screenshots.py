#!/usr/bin/env python
"""SVG screenshots of the chat UI for the README: a verified answer with its evidence expanded, and
the review queue.

It runs the real app headless (Textual's ``run_test``) on the embedded SmolLM2 and its default
verifier, asks fact-check questions in the verifier's own format (docs/method.md § 14: a claim, answer with
``{"correctness": bool}``) until one answer is verified, expands that answer's evidence and saves the
screen; the answers that were not verified or escalated on the way fill the review queue, which is saved
next. Nothing is staged: every badge, number and exemplar on the pictures comes from the model and
verifier as they ran.

    .venv/bin/python scripts/screenshots.py                      # -> docs/screenshots/*.svg
    .venv/bin/python scripts/screenshots.py --tiny               # the tiny test model + verifier (no weights needed)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from repository_tests import repository_tests  # noqa: E402  (beside this script)
import mlx_sdm  # noqa: F401  (BLAS before mlx)

DEFAULT_OUT_DIR = ROOT / "docs" / "screenshots"
DEFAULT_SIZE = "120x40"
DEFAULT_MAX_TOKENS = 32
DEFAULT_TRIES = 8
TURN_TIMEOUT_S = 600.0
INSTRUCTION = (
    "Check the following document for hallucinations and/or factual inaccuracies. "
    'Respond using the following JSON: {"correctness": bool}. DOCUMENT: '
)
CLAIMS = [
    "Paris is the capital of France.",
    "The Pacific Ocean is the largest ocean on Earth.",
    "Mount Everest is in Australia.",
    "Water boils at 100 degrees Celsius at sea level.",
    "The Moon is larger than the Earth.",
    "William Shakespeare wrote Hamlet.",
    "Berlin is the capital of Spain.",
    "The Nile is a river in Africa.",
]


def fact_check_prompt(claim: str) -> str:
    return INSTRUCTION + f"On June 2017, the following claim was made: {claim} Q: Was this claim true or false?"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR, help="where the SVGs go (default %(default)s)")
    p.add_argument("--model", default=None, help="model for the engine (default: the embedded SmolLM2)")
    p.add_argument("--verifier", default=None, help="verifier directory (default: the one shipped for the model)")
    p.add_argument("--prompt", action="append", default=None,
                   help="a question to ask (repeatable); default: fact-check questions in the verifier's format")
    p.add_argument("--tries", type=int, default=DEFAULT_TRIES, help="most questions to ask while looking for a verified answer")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="longest answer (default %(default)s)")
    p.add_argument("--size", default=DEFAULT_SIZE, help="terminal size COLSxROWS (default %(default)s)")
    p.add_argument("--tiny", action="store_true", help="use the tiny test model and tiny verifier (tests/) instead")
    return p


def make_engine(args: argparse.Namespace, store):
    from mlx_sdm.app.loading import chat_components
    from mlx_sdm.executor.engine import ChatEngine, EngineConfig

    config = EngineConfig(model=args.model, verifier=args.verifier, max_tokens=args.max_tokens)
    components = chat_components
    if args.tiny:
        repository_tests()
        from tests.tiny_verifier import build_tiny_verifier, tiny_components

        config = EngineConfig(max_tokens=args.max_tokens, embedder="none")
        components = tiny_components(build_tiny_verifier(Path(store.path).parent / "tiny-verifier"))
    engine = ChatEngine(config, store, components=components)
    engine.ready.result(timeout=TURN_TIMEOUT_S)
    return engine


async def shoot(args: argparse.Namespace, engine, store) -> int:
    from tui.app import SdmChatApp
    from tui.screens.prompts import EscalationPrompt
    from tui.screens.review import ReviewScreen
    from tui.widgets.message import MessageBubble

    cols, rows = (int(x) for x in args.size.lower().split("x"))
    prompts = args.prompt or [fact_check_prompt(c) for c in CLAIMS]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    app = SdmChatApp(engine=engine, store=store)

    async def wait(pilot, predicate) -> None:
        deadline = time.monotonic() + TURN_TIMEOUT_S
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("the app did not reach the expected state")
            await pilot.pause(0.1)

    verified = None
    async with app.run_test(size=(cols, rows)) as pilot:
        chat = app.chat
        for prompt in prompts[: args.tries]:
            answers_before = len([b for b in chat.query(MessageBubble) if b.role == "assistant"])
            box = chat.query_one("#prompt")
            box.value = prompt
            box.focus()
            await pilot.press("enter")
            await wait(pilot, lambda: len([b for b in chat.query(MessageBubble) if b.role == "assistant"]) > answers_before
                       and chat.active is None)
            await pilot.pause(0.3)
            if isinstance(app.screen, EscalationPrompt):  # HIGH: leave the turn paused for the queue
                await pilot.press("escape")
                await pilot.pause(0.2)
            bubble = [b for b in chat.query(MessageBubble) if b.role == "assistant"][-1]
            badge = bubble.badge
            p_lower = (badge.verdict or {}).get("p_lower")
            print(f"{badge.status:>12}  p_lower={p_lower}  {bubble.text.strip()[:60]!r}")
            if badge.status == "verified":
                verified = bubble
                break
        for widget in app.query("Input"):
            widget.cursor_blink = False
        await pilot.press("ctrl+b")  # expand the evidence of the last answer
        await pilot.pause(0.3)
        if verified is None:
            print("no answer was verified (does this verifier admit anything? see its report): saving the last "
                  "answer with its evidence as chat-everyday.svg instead of verified-answer.svg", file=sys.stderr)
            print("saved", app.save_screenshot("chat-everyday.svg", str(args.out_dir)))
        else:
            verified.scroll_visible(animate=False)
            await pilot.pause(0.3)
            print("saved", app.save_screenshot("verified-answer.svg", str(args.out_dir)))
        await pilot.press("ctrl+r")
        await wait(pilot, lambda: isinstance(app.screen, ReviewScreen))
        for widget in app.query("Input"):
            widget.cursor_blink = False
        await pilot.pause(0.3)
        print("saved", app.save_screenshot("review-queue.svg", str(args.out_dir)))
    return 0 if verified is not None else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mlx_sdm.store.chat_store import ChatStore

    with tempfile.TemporaryDirectory(prefix="mlx-sdm-shots-") as tmp:
        store = ChatStore(Path(tmp) / "chat.db")
        engine = make_engine(args, store)
        try:
            return asyncio.run(shoot(args, engine, store))
        finally:
            engine.shutdown()
            store.close()


if __name__ == "__main__":
    sys.exit(main())
