"""The chat UI's session search, driven by Pilot: the palette's "Search sessions…" opens it, a typed query
(with a typed verdict filter) lists the hit, enter opens its session in the chat."""

from __future__ import annotations


import pytest
from textual.command import CommandPalette

from mlx_sdm.network.verdict import VerdictStatus
from mlx_sdm.store.chat_store import ChatStore
from tests.test_store_search import turn
from tests.test_tui_flows import make_engine, wait_until
from tui.app import SdmChatApp
from tui.screens.chat import ChatScreen
from tui.screens.search import SearchScreen
from tui.widgets.search_results import SearchResults

pytestmark = pytest.mark.asyncio

SIZE = (120, 40)


@pytest.fixture
def store(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    capitals = store.create_session("Capitals")
    turn(store, capitals.id, "Is Paris the capital of France?", "Yes, Paris is the capital of France.",
         VerdictStatus.VERIFIED, task="capitals")
    rivers = store.create_session("Rivers")
    turn(store, rivers.id, "How long is the Seine?", "The Seine is 777 km long and flows through Paris.",
         VerdictStatus.NOT_VERIFIED)
    yield store
    store.close()


@pytest.fixture
def engine(store, verifier_dir):
    engine = make_engine(store, verifier_dir)
    yield engine
    engine.shutdown()


def session_id(store: ChatStore, title: str) -> str:
    return next(s.id for s in store.list_sessions() if s.title == title)


async def test_the_palette_opens_search_a_typed_query_finds_the_hit_and_enter_opens_its_session(store, engine):
    app = SdmChatApp(engine=engine, store=store, session_id=session_id(store, "Capitals"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"Search sessions")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, SearchScreen))
        results = app.screen.query_one(SearchResults)

        await pilot.press(*"pari")  # the word being typed matches the words it begins
        await wait_until(pilot, lambda: {h.session_title for h in results.hits} == {"Capitals", "Rivers"})
        await pilot.press("s")
        await wait_until(pilot, lambda: app.screen.query_one("#search-input").value == "paris")
        await pilot.press(*" status:not_verified")  # the verdict filter, typed with the words
        await wait_until(pilot, lambda: {h.session_title for h in results.hits} == {"Rivers"})
        assert {h.status for h in results.hits} == {VerdictStatus.NOT_VERIFIED}
        assert "Paris" in str(results.get_option_at_index(0).prompt)
        await pilot.press(*" task:capitals")  # no not-verified answer under that task
        await wait_until(pilot, lambda: results.hits == [])
        assert "no message matches" in str(app.screen.query_one("#search-status").render())
        await pilot.press(*" status:perhaps")
        await wait_until(pilot, lambda: "unknown verdict status 'perhaps'" in str(app.screen.query_one("#search-status").render()))

        for _ in " task:capitals status:perhaps":
            await pilot.press("backspace")
        await wait_until(pilot, lambda: len(results.hits) == 1)
        await pilot.press("enter", "enter")  # to the hits, then open the first
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
        assert app.chat.session_id == session_id(store, "Rivers")


async def test_escape_closes_search_and_the_chat_stays(store, engine):
    capitals = session_id(store, "Capitals")
    app = SdmChatApp(engine=engine, store=store, session_id=capitals)
    async with app.run_test(size=SIZE) as pilot:
        app.action_search_sessions()
        await wait_until(pilot, lambda: isinstance(app.screen, SearchScreen))
        await pilot.press(*"!!!")
        await wait_until(pilot, lambda: "nothing to search for" in str(app.screen.query_one("#search-status").render()))
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen))
        assert app.chat.session_id == capitals
