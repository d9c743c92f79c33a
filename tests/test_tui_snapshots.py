"""SVG snapshots of the main screens (pytest-textual-snapshot), made deterministic: the tiny model
decodes greedily from a fixed seed, the store's clock is fixed, the prompt's cursor does not blink,
nothing on these screens shows a clock or a spinner, and the verdict with its exemplars is a fixed,
hand-written one (:class:`FixedVerdictVerifier`): the tiny verifier's own numbers move in the 3rd decimal
with the BLAS kernel (its numeric path is tested in tests/test_network_*.py and tests/test_tui_flows.py).

Update after an intended change with ``pytest tests/test_tui_snapshots.py --snapshot-update`` and
look at the SVGs under ``tests/__snapshots__/test_tui_snapshots/`` before committing them."""

from __future__ import annotations

import itertools

import pytest
from textual.widgets import Input

import mlx_sdm.store.chat_store as store_module
from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.calibration.row_verdict import Exemplar, Verdict
from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.executor.engine import ChatEngine, EngineConfig
from tests.test_tui_flows import HIGH_EVERYWHERE, LOW_EVERYWHERE, MAX_TOKENS, wait_until
from tests.tiny_verifier import tiny_components
from tui.app import SdmChatApp
from tui.screens.prompts import EscalationPrompt
from tui.screens.review import ReviewScreen
from tui.widgets.message import MessageBubble

SIZE = (120, 40)
QUESTION = "Paris is the capital of France. Is this claim true or false?"


#: What the snapshot screens show as the verdict: out of scope, with five nearest exemplars of both labels.
FIXED_VERDICT = Verdict(
    prediction=1, p_lower=None, admitted=False, q=0, d=0.0, q_bin=0, reason="out_of_distribution",
    exemplars=[Exemplar("tiny-34", 0, 0, 2.772, "Dublin is the capital of Switzerland. Is this claim true or false? {\"correctness\": \"see the label\"}"),
               Exemplar("tiny-38", 0, 0, 2.81, "Prague is the capital of France. Is this claim true or false? {\"correctness\": \"see the label\"}"),
               Exemplar("tiny-42", 0, 1, 2.818, "Warsaw is the capital of Italy. Is this claim true or false? {\"correctness\": \"see the label\"}"),
               Exemplar("tiny-2", 1, 1, 2.879, "Paris is the capital of Spain. Is this claim true or false? {\"correctness\": \"see the label\"}"),
               Exemplar("tiny-10", 1, 1, 2.885, "Berlin is the capital of Austria. Is this claim true or false? {\"correctness\": \"see the label\"}")],
    softmax=[0.312, 0.688])


class FixedVerdictVerifier:
    """The tiny verifier (support, coverage, saving: all real) whose ``judge`` gives :data:`FIXED_VERDICT`."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def judge(self, features, explain: int = 5, *, task: str | None = None, route=None, answer=None) -> DocumentVerdict:
        return DocumentVerdict(FIXED_VERDICT, alpha=self._real.estimator.alpha, coverage=self._real.coverage)


def make_engine(store: ChatStore, verifier_dir, **config) -> ChatEngine:
    """tests/test_tui_flows.make_engine with the fixed verdict injected through the pipeline's verifier seam."""
    config.setdefault("max_tokens", MAX_TOKENS)
    config.setdefault("embedder", "none")
    config.setdefault("auq_thresholds", LOW_EVERYWHERE)
    config.setdefault("enable_p_true", False)
    real_factory = tiny_components(verifier_dir)

    def factory(engine_config):
        components = real_factory(engine_config)
        components.verifier = FixedVerdictVerifier(components.verifier)
        return components

    engine = ChatEngine(EngineConfig(**config), store, components=factory)
    engine.ready.result(timeout=120)
    return engine


@pytest.fixture
def fixed_clock(monkeypatch):
    """Every store timestamp is 2026-01-02 03:04:ss, one second per write; calling the fixture's value
    restarts the seconds at ``start``."""
    seconds = [itertools.count()]
    monkeypatch.setattr(store_module, "now_iso", lambda: f"2026-01-02T03:04:{next(seconds[0]) % 60:02d}.000000Z")
    return lambda start=0: seconds.__setitem__(0, itertools.count(start))


@pytest.fixture
def store(tmp_path, fixed_clock):
    store = ChatStore(tmp_path / "chat.db")
    fixed_clock(4)  # the schema's migrations each took a second; a new one must not move the screens' times
    yield store
    store.close()


def steady(app) -> None:
    for widget in app.query(Input):
        widget.cursor_blink = False


async def answered(pilot, text: str = QUESTION) -> None:
    app = pilot.app
    steady(app)
    pilot.app.screen.query_one("#prompt").focus()
    await pilot.press(*text, "enter")
    await wait_until(pilot, lambda: any(b.role == "assistant" for b in app.chat.query(MessageBubble)) and app.chat.active is None)
    await pilot.pause(0.2)


def test_chat_with_an_answer_and_its_evidence(snap_compare, store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    try:

        async def run_before(pilot) -> None:
            await answered(pilot)
            await pilot.press("ctrl+b")
            await pilot.pause(0.2)

        assert snap_compare(SdmChatApp(engine=engine, store=store), terminal_size=SIZE, run_before=run_before)
    finally:
        engine.shutdown()


def test_high_escalation_prompt(snap_compare, store, verifier_dir):
    engine = make_engine(store, verifier_dir, generate_reflection=False, **HIGH_EVERYWHERE)
    try:

        async def run_before(pilot) -> None:
            steady(pilot.app)
            pilot.app.screen.query_one("#prompt").focus()
            await pilot.press(*QUESTION, "enter")
            await wait_until(pilot, lambda: isinstance(pilot.app.screen, EscalationPrompt))
            steady(pilot.app)
            await pilot.pause(0.2)

        assert snap_compare(SdmChatApp(engine=engine, store=store), terminal_size=SIZE, run_before=run_before)
    finally:
        engine.shutdown()


def test_review_queue(snap_compare, store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    try:

        async def run_before(pilot) -> None:
            await answered(pilot)
            await pilot.press("ctrl+r")
            await wait_until(pilot, lambda: isinstance(pilot.app.screen, ReviewScreen))
            steady(pilot.app)
            await pilot.pause(0.2)

        assert snap_compare(SdmChatApp(engine=engine, store=store), terminal_size=SIZE, run_before=run_before)
    finally:
        engine.shutdown()


def test_help(snap_compare, store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    try:

        async def run_before(pilot) -> None:
            steady(pilot.app)
            await pilot.press("f1")
            await pilot.pause(0.2)

        assert snap_compare(SdmChatApp(engine=engine, store=store), terminal_size=SIZE, run_before=run_before)
    finally:
        engine.shutdown()
