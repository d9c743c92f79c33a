"""Export a session to Markdown and to the session JSONL that `mlx-sdm eval-monitor` reads; the plain chat."""

from __future__ import annotations

import io

import pytest

from mlx_sdm.commands import chat as chat_cmd
from mlx_sdm.errors import DataError
from mlx_sdm.executor.engine import ChatEngine, EngineConfig
from mlx_sdm.store.export import export_session, session_to_markdown
from mlx_sdm.monitor.session_file.reader import read_sessions_jsonl
from mlx_sdm.store.chat_store import ChatStore
from tests.stored import answer as stored_answer
from tests.tiny_verifier import build_tiny_verifier, tiny_components

ALWAYS_HIGH = (1.0, 0.9999, 0.0)


@pytest.fixture
def session(tmp_path):
    path = build_tiny_verifier(tmp_path / "verifier")
    store = ChatStore(tmp_path / "chat.db")
    engine = ChatEngine(EngineConfig(max_tokens=8, reflection_max_tokens=4, auq_thresholds=ALWAYS_HIGH), store,
                        components=tiny_components(path))
    s = store.create_session("export me", model="tiny", verifier=str(path))
    first = engine.send(s.id, "Is Paris the capital of France?").result(60)
    second = engine.resume(s.id, "Answer in one word.").result(60)
    engine.shutdown()
    return store, s.id, first, second


def test_markdown_export(session, tmp_path):
    store, sid, first, second = session
    out = export_session(store, sid, tmp_path / "s.md")
    text = out.read_text()
    assert text == session_to_markdown(store, sid)
    assert text.startswith("# export me\n") and "### You\n\nIs Paris the capital of France?" in text
    assert "### You (guidance to resume)\n\nAnswer in one word." in text
    assert any(f"verdict: {state}" in text for state in ("Not verified", "Likely wrong:", "Out of scope:", "Verified:"))
    assert "Evidence: " in text and "q_bin=" not in text
    assert "monitor: AUQ HIGH" in text and "NOT confident" in text and "Nearest training exemplars:" in text


def test_jsonl_export_reads_back_with_the_session_format(session, tmp_path):
    store, sid, first, second = session
    path = export_session(store, sid, tmp_path / "s.jsonl")
    (s,) = read_sessions_jsonl(path)
    assert s.session_id == sid and s.model == "tiny" and s.outcome is None
    assert [(st.actor, st.step_type) for st in s.steps] == [("user", None), ("agent", "llm_call"), ("user", None), ("agent", "llm_call")]
    assert [st.step_id for st in s.steps] == ["user_0", "llm_1", "user_2", "llm_3"]
    agent = s.steps[1]
    assert agent.text == first.outcome.text and len(agent.tokens) == len(agent.token_logprobs) == len(first.outcome.tokens)
    assert agent.verifier.p_lower == first.outcome.verdict.to_dict()["p_lower"] and agent.verifier.reason == first.outcome.verdict.to_dict()["reason"]
    assert agent.auq.level == "high" and agent.auq.propagated_confidence == pytest.approx(first.outcome.monitor.to_dict()["cumulative_confidence"])
    assert agent.tracer.prefix_risk == pytest.approx(first.outcome.monitor.to_dict()["tracer_risk"])
    assert s.steps[3].auq.propagated_confidence == pytest.approx(second.outcome.monitor.to_dict()["cumulative_confidence"])
    with pytest.raises(DataError, match="unknown export format"):
        export_session(store, sid, tmp_path / "s.txt", "pdf")


def test_a_session_records_the_product_that_answered_it(session, tmp_path):
    """The store keeps the provenance of a session's first answer (model, verifier with its
    checksum, head, embedder, version, commit), and the export carries it, not a guess made at export."""
    from mlx_sdm.monitor.session_file.provenance import verifier_sha256

    store, sid, first, second = session
    info = store.get_session(sid)
    verifier = store.messages(sid)[1].verifier
    assert info.provenance is not None and info.provenance.extra["recorded"] == "at the session's first answer"
    assert info.provenance.verifier.sha256 == verifier_sha256(verifier)
    assert info.provenance.model.name == "tiny-llama-0" and info.provenance.head.name is None  # the model loaded, not the label
    (s,) = read_sessions_jsonl(export_session(store, sid, tmp_path / "s.jsonl"))
    assert s.provenance == info.provenance
    fresh = store.create_session("not answered yet")
    assert store.get_session(fresh.id).provenance is None


def test_plain_chat_prints_answer_then_verdict_and_monitor(tmp_path):
    path = build_tiny_verifier(tmp_path / "verifier")
    store = ChatStore(tmp_path / "chat.db")
    config = EngineConfig(max_tokens=6, reflection_max_tokens=4, auq_thresholds=ALWAYS_HIGH)
    stdin = io.StringIO("Is Paris the capital of France?\nAnswer in one word.\n/rename plain test\n/export " + str(tmp_path / "x.md") + "\n/quit\n")
    stdout = io.StringIO()
    rc = chat_cmd.run_plain(config, store, session_id=None, title="plain", stdin=stdin, stdout=stdout,
                            components=tiny_components(path), timing=True)
    out = stdout.getvalue()
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith("[session ") and "verifier" in lines[0]
    verdicts = [l for l in lines if l.startswith("[verdict: ")]
    assert len(verdicts) == 2  # the question, then the guidance that resumed the paused answer
    assert sum(l.startswith("[monitor: AUQ HIGH") for l in lines) == 2
    timings = [l for l in lines if l.startswith("[timing: first token ")]
    assert len(timings) == 2 and "6 tokens" in timings[0] and "0 reused" in timings[0] and "0 reused" not in timings[1]
    assert "[Paused: the session's cumulative confidence" in out and "is HIGH uncertainty" in out
    assert "Type your guidance on the next line" in out and "[queued for review as #1]" in out
    answer_line = lines[lines.index(verdicts[0]) - 1]
    assert answer_line == store.messages(store.list_sessions()[0].id)[1].text.splitlines()[-1]  # answer, then verdict
    assert "[renamed to 'plain test']" in out and (tmp_path / "x.md").exists()
    (s,) = store.list_sessions()
    assert s.title == "plain test" and [m.kind for m in store.messages(s.id)] == ["chat", "chat", "guidance", "chat"]


def test_plain_chat_says_nothing_that_is_the_usual_and_echoes_piped_input(tmp_path):
    """An ordinary turn (MEDIUM, the level the shipped model's everyday turns get) prints the answer and the verdict's
    one line: no monitor line, no "uncertainty logged", no "queued for review" (Escalation.unusual); the answer is
    still monitored and, unless verified, in the review queue. Piped input is echoed as "you> ..."."""
    path = build_tiny_verifier(tmp_path / "verifier")
    store = ChatStore(tmp_path / "chat.db")
    config = EngineConfig(max_tokens=6, auq_thresholds=(1.0, 0.0001, 0.0))  # every turn MEDIUM: logged, goes on
    stdin, stdout = io.StringIO("Is Paris the capital of France?\nAnd of Italy?\n"), io.StringIO()
    rc = chat_cmd.run_plain(config, store, session_id=None, title=None, stdin=stdin, stdout=stdout,
                            components=tiny_components(path))
    out = stdout.getvalue()
    assert rc == 0 and "you> Is Paris the capital of France?\n" in out and "you> And of Italy?\n" in out
    assert "[monitor:" not in out and "logged" not in out and "queued for review" not in out, out
    verdicts = [line for line in out.splitlines() if line.startswith("[verdict: ")]
    assert len(verdicts) == 2 and all(len(v.split()) <= 22 and "q=" not in v and "p_lower" not in v for v in verdicts)
    (s,) = store.list_sessions()
    answers = [m for m in store.messages(s.id) if m.role == "assistant"]
    assert all(a.monitor is not None and a.monitor.level.value == "medium" for a in answers)
    unverified = [a for a in answers if a.verdict is not None and not a.verdict.verified]
    assert len(store.review_queue.review_items(session_id=s.id)) == len(unverified)


def test_ctrl_c_in_plain_chat_stops_the_answer_and_the_chat_goes_on(tmp_path):
    """ctrl+c while an answer streams stops that answer (kept as stopped); the next line is a new question."""
    path = build_tiny_verifier(tmp_path / "verifier")
    store = ChatStore(tmp_path / "chat.db")
    stdin = io.StringIO("Is Paris the capital of France?\nAnswer in one word.\n")

    class InterruptOnFirstToken(io.StringIO):
        interrupted = False

        def write(self, text):
            if not self.interrupted and self.getvalue().count("[session ") and not text.startswith(("[", "you> ")):
                self.interrupted = True
                raise KeyboardInterrupt  # what a terminal's ctrl+c raises in the main thread
            return super().write(text)

    stdout = InterruptOnFirstToken()
    rc = chat_cmd.run_plain(EngineConfig(max_tokens=24), store, session_id=None, title=None, stdin=stdin, stdout=stdout,
                            components=tiny_components(path))
    out = stdout.getvalue()
    assert rc == 0 and stdout.interrupted and "[stopped]" in out, out
    (s,) = store.list_sessions()
    answers = [m for m in store.messages(s.id) if m.role == "assistant"]
    assert len(answers) == 2 and answers[0].status == "cancelled"  # the chat went on to the second question
    assert answers[1].status != "cancelled"


def test_chat_list_and_bad_session(tmp_path, capsys):
    db = tmp_path / "chat.db"
    store = ChatStore(db)
    s = store.create_session("listed")
    store.close()
    assert chat_cmd.main(["--db", str(db), "--list"]) == 0
    assert f"{s.id}" in capsys.readouterr().out
    assert chat_cmd.main(["--db", str(db), "--plain", "--session", "nope"]) == 2
    assert "no session with id 'nope'" in capsys.readouterr().err
    assert chat_cmd.main(["--db", str(db), "--export", str(tmp_path / "a.md")]) == 2
    assert "name a .jsonl file" in capsys.readouterr().err
    assert chat_cmd.main(["--db", str(db), "--export", str(tmp_path / "all.jsonl")]) == 0
    assert [x.session_id for x in read_sessions_jsonl(tmp_path / "all.jsonl")] == [s.id]
    assert chat_cmd.main(["--db", str(db), "--session", s.id, "--export", str(tmp_path / "a.md")]) == 0
    assert (tmp_path / "a.md").read_text().startswith("# listed")
    assert chat_cmd.main(["--db", str(db), "--export-labels", str(tmp_path / "labels.jsonl")]) == 0
    assert (tmp_path / "labels.jsonl").read_text() == "" and "wrote 0 training rows" in capsys.readouterr().out


def test_default_store_location(monkeypatch, tmp_path):
    monkeypatch.setenv("MLX_SDM_HOME", str(tmp_path / "home"))
    assert chat_cmd.default_db_path() == tmp_path / "home" / "chat.db"
    monkeypatch.delenv("MLX_SDM_HOME")
    assert chat_cmd.default_db_path().name == "chat.db" and "mlx-sdm" in str(chat_cmd.default_db_path())


def test_session_outcome_follows_the_verdicts_and_review_labels(tmp_path):
    """docs/monitoring.md, combining with the verifier: success = ends with a verified, accepted answer and no negative feedback."""
    from mlx_sdm.store.export import session_to_format

    store = ChatStore(tmp_path / "o.db")

    def session(*answers):
        s = store.create_session()
        ids = []
        for status, verdict in answers:
            store.add_message(s.id, "user", "q")
            ids.append(store.add_turn(s.id, None, stored_answer("a", status=status, state=verdict,
                                                      review_reasons=["below_threshold"] if verdict == "not_verified" else [])).message_id)
        return s.id, ids

    ok, _ = session(("done", "not_verified"), ("done", "verified"))
    assert (session_to_format(store, ok).outcome, session_to_format(store, ok).termination) == ("success", "complete")
    bad, _ = session(("done", "verified"), ("done", "not_verified"))
    assert session_to_format(store, bad).outcome == "failure"
    aborted, _ = session(("aborted", "verified"),)
    assert session_to_format(store, aborted).outcome == "failure"
    left, _ = session(("paused", "verified"),)
    assert (session_to_format(store, left).outcome, session_to_format(store, left).termination) == (None, "abandoned")
    unknown, _ = session(("done", "no_verifier"),)
    assert session_to_format(store, unknown).outcome is None
    # review labels override: an unacceptable label anywhere is a failure, an acceptable last answer a success
    (first_rejected,) = [i for i in store.review_queue.review_items(session_id=ok)]
    store.review_queue.record_decision(first_rejected.id, 0)
    assert session_to_format(store, ok).outcome == "failure"
    (last_rejected,) = store.review_queue.review_items(session_id=bad)
    store.review_queue.record_decision(last_rejected.id, 1)
    assert session_to_format(store, bad).outcome == "success"


def test_the_verdict_line_is_the_short_line_with_no_numbers():
    """The plain chat's and the export's verdict line is the verdict's one short line (network/verdict_words): at most
    20 words, no q, d, p_lower or q_bin; the numbers are the evidence's."""
    from mlx_sdm.network.verdict import DocumentVerdict
    from mlx_sdm.network.verdict_words import verdict_line

    verified = DocumentVerdict.from_dict({"prediction": 1, "p_lower": 0.998, "admitted": True, "q": 148, "d": 0.833,
                                          "q_bin": 4})
    below = DocumentVerdict.from_dict({"prediction": 1, "p_lower": 0.4, "admitted": False, "reason": "below_threshold",
                                       "q": 3, "d": 0.5, "q_bin": 1})
    assert verdict_line(verified) == "verdict: Verified: answers like this are right at least 95 % of the time."
    assert verdict_line(below) == (  # its lean was never measured
        "verdict: Not verified: the verifier cannot tell whether this answer is right; check it yourself.")
    assert verdict_line(DocumentVerdict.no_verifier("verification is off")) == (
        "verdict: No verifier: verification is off; nothing was checked.")
    assert verdict_line(None) == "verdict: none"
