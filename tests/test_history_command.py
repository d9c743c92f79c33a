"""``mlx-sdm history search``: the JSON it prints, its filters, its default store (the chat's), and its help.
Bad input (a bad date, an unknown state, no store, nothing to search for): tests/test_bad_input.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mlx_sdm import cli
from mlx_sdm.commands import history as history_cmd
from mlx_sdm.network.verdict import VerdictStatus
from mlx_sdm.store.chat_store import ChatStore
from tests.test_store_search import turn


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "chat.db"
    with ChatStore(path) as store:
        capitals = store.create_session("Capitals")
        turn(store, capitals.id, "Is Paris the capital of France?", "Yes, Paris is the capital of France.",
             VerdictStatus.VERIFIED, task="capitals", day="2026-01-10")
        rivers = store.create_session("Rivers")
        turn(store, rivers.id, "How long is the Seine?", "The Seine is 777 km long and flows through Paris.",
             VerdictStatus.NOT_VERIFIED, day="2026-02-10")
    return path


def run_search(capsys, *argv: str) -> list[dict]:
    assert cli.main(["history", "search", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_hits_print_as_one_json_array(db, capsys):
    hits = run_search(capsys, "paris", "--db", str(db), "--status", "not verified")
    assert hits == [{"session_id": hits[0]["session_id"], "session_title": "Rivers", "message_id": hits[0]["message_id"],
                     "role": "assistant", "created_at": "2026-02-10T12:00:00.000000Z",
                     "snippet": "The Seine is 777 km long and flows through **Paris**.", "status": "not_verified",
                     "task": None}]
    phrase = run_search(capsys, '"capital of France"', "--db", str(db))
    assert {(h["role"], h["status"], h["task"]) for h in phrase} == {("user", "verified", "capitals"),
                                                                     ("assistant", "verified", "capitals")}
    assert all("**capital of France**" in h["snippet"] for h in phrase)
    assert run_search(capsys, "paris", "--db", str(db), "--status", "verified", "--status", "not_verified",
                      "--since", "2026-02-01", "--until", "2026-02-10", "--limit", "1")[0]["session_title"] == "Rivers"
    assert run_search(capsys, "paris", "--db", str(db), "--task", "capitals", "--limit", "5")[0]["task"] == "capitals"
    assert run_search(capsys, "lisbon", "--db", str(db)) == []


def test_the_default_store_is_the_chats(db, capsys, monkeypatch):
    monkeypatch.setenv("MLX_SDM_HOME", str(db.parent))  # `mlx-sdm chat` keeps its store at $MLX_SDM_HOME/chat.db
    assert {h["session_title"] for h in run_search(capsys, "seine")} == {"Rivers"}


def test_help_teaches_the_query_the_filters_and_the_output(capsys):
    with pytest.raises(SystemExit):
        history_cmd.main(["search", "--help"])
    out = capsys.readouterr().out
    for taught in ("--status STATE", "not verified", "YYYY-MM-DD", "--limit N", "--db PATH", "examples:",
                   '"snippet"', "jq", "mlx-sdm chat --session"):
        assert taught in out, taught
    assert cli.main(["--help"]) == 0 and "history" in capsys.readouterr().out


def test_the_installed_entry_point_runs_it(db):
    out = subprocess.run([sys.executable, "-m", "mlx_sdm", "history", "search", "seine", "--db", str(db)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert {h["session_title"] for h in json.loads(out.stdout)} == {"Rivers"}
