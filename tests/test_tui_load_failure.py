"""The chat UI says why the model or verifier could not be loaded, instead of hanging on "loading…",
for a verifier folder with a truncated estimator.safetensors, as a user's disk might leave it."""

from __future__ import annotations

import pytest

from mlx_sdm.executor.engine import ChatEngine, EngineConfig
from mlx_sdm.store.chat_store import ChatStore
from tests.test_tui_flows import wait_until
from tests.tiny_verifier import build_tiny_verifier, tiny_components
from tui.app import SdmChatApp

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def corrupt_verifier(tmp_path_factory):
    folder = build_tiny_verifier(tmp_path_factory.mktemp("tiny") / "verifier")
    weights = next(folder.rglob("estimator.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])  # truncated mid-header
    return folder


def status_text(app) -> str:
    return str(app.screen.query_one("#status-line").render())


async def test_a_verifier_that_cannot_load_is_reported_in_words(tmp_path, corrupt_verifier):
    store = ChatStore(tmp_path / "chat.db")
    engine = ChatEngine(EngineConfig(embedder="none", enable_p_true=False), store,
                        components=tiny_components(corrupt_verifier))
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: "not loaded" in status_text(app), timeout=60)
            text = status_text(app)
            assert "loading…" not in text
            assert "safetensors" in text.lower() or "estimator" in text.lower(), text
        with pytest.raises(Exception):
            engine.ready.result(timeout=0)
    finally:
        engine.shutdown()
        store.close()
