"""The second-look member (network/second_look.py, app/second_look_build.py): its spec in verifier.json, the judge
API, and ``build-verifier --tasks open_questions --second-look K`` on a tiny random model.

A random tiny model never answers an everyday question right, so the builds script its greedy answers (the gold
answer for half the questions, by a hash of the id, else "I do not know."); the K drawn answers, their
log-probabilities and the hidden-state features are the model's own.
"""

from __future__ import annotations

import hashlib
import json

import mlx.core as mx
import numpy as np
import pytest

from mlx_sdm.cli import main as cli
from mlx_sdm.usecases import second_look_build
from mlx_sdm.usecases.build_verifier import BuildVerifierArgs
from mlx_sdm.usecases.second_look_build import ADMITS_NOTHING, build_second_look, read_rows, rows_path
from mlx_sdm.commands import build_verifier as command
from mlx_sdm.errors import DataError
from mlx_sdm.lm.sampling import SampledAnswers
from mlx_sdm.network.second_look import FEATURE_NAMES, SECOND_LOOK_KEY, SecondLookSpec
from mlx_sdm.network.verdict import DocumentVerdict, OPEN_QUESTIONS
from mlx_sdm.network.verifier import DocumentVerifier
from tests.test_verifier_commands import save_tiny_folder

SPEC = SecondLookSpec(k=3, max_tokens=6)
HIDDEN = 32  # tests/tiny_lm.py's hidden size: states [mean(h); h_k] are 64 wide


def embed(texts):
    """A deterministic stand-in for MiniLM: unit vectors from a hash of each text's words (equal texts, equal vectors)."""
    out = np.zeros((len(texts), 16), np.float32)
    for i, t in enumerate(texts):
        for w in t.lower().split() or [""]:
            out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % 16] += 1.0
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def right_by_id(item) -> bool:
    return int(hashlib.md5(item.id.encode()).hexdigest(), 16) % 2 == 0


def scripted_greedy(tokenizer):
    """item -> sampler writing the gold answer (half the items) or "I do not know.", then the end of the turn."""
    eos = min(tokenizer.eos_token_ids)

    def make(item):
        text = f"It is {item.gold.answers[0]}." if right_by_id(item) else "I do not know."
        queue = list(tokenizer.encode(text, add_special_tokens=False)) + [eos]
        return lambda logprobs: mx.array(queue.pop(0) if queue else eos)

    return make


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return save_tiny_folder(tmp_path_factory.mktemp("sl") / "tiny-model", seed=0)


def _args(root, model, **kw) -> BuildVerifierArgs:
    return BuildVerifierArgs(out=root / "member", model=str(model), tasks=["open_questions"], per_task=24, eval_size=4,
                             iterations=1, epochs=4, plot=False, progress=False, batch=8, second_look=SPEC.k, **kw)


def test_the_spec_round_trips_and_a_bad_field_is_named():
    assert SecondLookSpec.from_dict(json.loads(json.dumps(SPEC.to_dict())), "v.json") == SPEC
    assert SPEC.input_dim(2 * HIDDEN) == len(FEATURE_NAMES) + 2 * HIDDEN
    for raw, field in (({"k": 0}, "k"), ({"k": 2.5}, "k"), ({"temperature": 0}, "temperature"),
                       ({"max_tokens": "32"}, "max_tokens"), ({"input_scaling": "log"}, "input_scaling"),
                       ({"features": ["spread"]}, "features"), ({"K": 6}, "K")):
        with pytest.raises(DataError, match=f"v.json: field '{SECOND_LOOK_KEY}.{field}'"):
            SecondLookSpec.from_dict(raw, "v.json")
    with pytest.raises(DataError, match="second_look.k"):
        SecondLookSpec(k=-1)


def test_the_look_reads_the_answers_first_max_tokens_log_probabilities():
    drawn = SampledAnswers(("Tokyo.", "Kyoto."), ((1,), (2,)), (-0.5, -1.5), 0.1)
    look = SPEC.look("Capital of Japan?", "Tokyo.", [-1.0] * 6 + [-100.0], drawn)
    assert look.answer_logprob == -1.0 and look.drawn == ("Tokyo.", "Kyoto.") and look.drawn_logprobs == (-0.5, -1.5)


@pytest.fixture(scope="module")
def built(tiny_folder, tmp_path_factory):
    """A build stopped after 8 questions (a --limit build whose fit has too few answers), then the full build."""
    from mlx_sdm.lm.loading import load_model

    root = tmp_path_factory.mktemp("build")
    sampler = scripted_greedy(load_model(str(tiny_folder)).tokenizer)
    calls = []
    real = second_look_build.answer_batch

    def counted(lm, task, chunk, spec, sampler_for=None):
        calls.append(len(chunk))
        return real(lm, task, chunk, spec, sampler_for)

    second_look_build.answer_batch = counted
    try:
        with pytest.raises(DataError, match="raise --limit"):
            build_second_look(_args(root, tiny_folder, limit=8), SPEC, embed=embed, sampler_for=sampler,
                              sampler_tag="scripted", log=lambda s: None)
        small = list(calls)
        first = build_second_look(_args(root, tiny_folder), SPEC, embed=embed, sampler_for=sampler,
                                  sampler_tag="scripted", log=lambda s: None)
        again = build_second_look(_args(root, tiny_folder), SPEC, embed=embed, sampler_for=sampler,
                                  sampler_tag="scripted", log=lambda s: None)
    finally:
        second_look_build.answer_batch = real
    return root, small, calls, first, again


def test_a_build_is_resumable_and_writes_a_second_look_member(built, tiny_folder):
    root, small, calls, first, again = built
    assert small == [8]  # the --limit build answered its 8 questions, then the fit refused too few answers
    assert first.generated == 32 - 8 and first.from_cache == 8  # the full build reused them
    assert again.generated == 0 and again.from_cache == 32 and sum(calls) == 32  # a rerun calls the model no more
    assert {r.split for r in first.rows} == {"pool", "held_out", "shifted"}
    assert all(r.drawn.k == SPEC.k and len(r.answer_logprobs) <= SPEC.max_tokens for r in first.rows)
    assert sorted({r.label for r in first.rows}) == [0, 1]
    member = DocumentVerifier.load(root / "member")
    assert member.second_look_spec(OPEN_QUESTIONS) == SPEC and member.second_look_spec(None) == SPEC
    assert member.estimator.input_dim == len(FEATURE_NAMES) + 2 * HIDDEN
    assert member.estimator.manifest["config"]["input_scaling"] == "per_dimension"
    assert json.loads((root / "member" / "verifier.json").read_text())[SECOND_LOOK_KEY] == SPEC.to_dict()
    report = (root / "member" / "report.md").read_text()
    assert "| open_questions held-out (4) | p̂ lower |" in report and "| open_questions shifted (4) | no-reject |" in report
    assert (ADMITS_NOTHING in report) == member.estimator.admits_nothing
    assert (root / "member" / "lean.json").is_file() and OPEN_QUESTIONS in member.leans
    x = second_look_build.labelled(first.rows, SPEC, embed).embeddings
    assert [v.p_lower for v in again.verifier.verify_batch(x)] == [v.p_lower for v in first.verifier.verify_batch(x)]


def test_a_row_cut_by_a_kill_is_answered_again(built, tiny_folder):
    root, *_ = built
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.tasks.registry import OPEN_TASK, load_task

    path = rows_path(root / "member.cache", load_model(str(tiny_folder)), load_task(OPEN_TASK), SPEC, "scripted")
    whole = path.read_bytes()
    path.write_bytes(whole[:-40])  # the last row cut mid-line
    rows = read_rows(path)
    assert len(rows) == 31 and path.read_bytes().endswith(b"\n") and whole.startswith(path.read_bytes())
    path.write_bytes(whole)


def test_the_judge_reads_agreement_beside_the_states(built):
    root, *_ = built
    member = DocumentVerifier.load(root / "member")
    row = built[3].rows[0]
    look = SPEC.look(row.question, row.answer, row.answer_logprobs, row.drawn)
    verdict = member.judge_second_look(row.features, look, embed, task=OPEN_QUESTIONS)
    assert isinstance(verdict, DocumentVerdict) and verdict.task == OPEN_QUESTIONS
    expected = member.estimator.predict(second_look_build.labelled([row], SPEC, embed).embeddings)[0]
    assert verdict.verdict.p_lower == expected.p_lower and verdict.admits_nothing == member.estimator.admits_nothing
    with pytest.raises(DataError, match="judge_second_look"):
        member.judge(row.features, task=OPEN_QUESTIONS)  # its estimator reads [agreement; states], not states alone
    with pytest.raises(DataError, match="width"):
        member.judge_second_look(row.features[:-1], look, embed, task=OPEN_QUESTIONS)


def test_the_shipped_default_has_no_second_look():
    default = DocumentVerifier.load("weights/smollm2-suite")
    assert all(default.second_look_spec(t) is None for t in (OPEN_QUESTIONS, None, "fever"))
    with pytest.raises(DataError, match="reads no second look"):
        default.judge_second_look(np.zeros(1152, np.float32), None, embed, task=OPEN_QUESTIONS)


def test_the_command_refuses_what_a_second_look_cannot_build(tmp_path, capsys):
    assert cli(["build-verifier", "--tasks", "fever", "--second-look", "--out", str(tmp_path / "v"), "--model",
                         str(tmp_path / "none")]) == 1
    assert "give --tasks open_questions" in capsys.readouterr().err
    assert cli(["build-verifier", "--limit", "4", "--out", str(tmp_path / "v")]) == 2
    assert "--limit sizes a --second-look build" in capsys.readouterr().err
    args = command.parse_args(["--tasks", "open_questions", "--second-look", "--out", "x"])
    assert args.second_look == 6 and command.parse_args(["--second-look", "3", "--out", "x"]).second_look == 3


def test_the_command_answers_then_says_when_a_build_is_too_small(tiny_folder, tmp_path, capsys):
    """The CLI path on the tiny model (its own greedy answers, never right): the rows are kept, the fit refused."""
    out = tmp_path / "look"
    argv = ["--model", str(tiny_folder), "--tasks", "open_questions", "--second-look", "2", "--limit", "3",
            "--batch", "3", "--no-plot", "--out", str(out)]
    assert cli(["build-verifier", *argv]) == 1
    err = capsys.readouterr().err
    assert "answered 3 questions with 2 drawn answers each in" in err and "s per question" in err
    assert "raise --limit" in err and not out.exists()
    cached = list((tmp_path / "look.cache").glob("open_questions-second-look-*.jsonl"))
    assert len(cached) == 1 and len(read_rows(cached[0])) == 3
    assert cli(["build-verifier", *argv]) == 1  # the rerun answers nothing
    assert f"all 3 questions from {cached[0]}" in capsys.readouterr().err


def test_a_suite_with_a_second_look_member_routes_open_questions_to_it(built, tmp_path):
    """The member placed as a verifier's members/open_questions: the spec and the judge are the member's, the
    verifier's own tasks are judged from their states as before."""
    import shutil

    from tests.tiny_verifier import build_tiny_verifier, tiny_features, tiny_loaded_model

    root, *_, first, _ = built
    suite = build_tiny_verifier(tmp_path / "suite")
    shutil.copytree(root / "member", suite / "members" / OPEN_QUESTIONS)
    verifier = DocumentVerifier.load(suite)
    assert verifier.second_look_spec(OPEN_QUESTIONS) == SPEC and verifier.second_look_spec(None) is None
    row = first.rows[0]
    look = SPEC.look(row.question, row.answer, row.answer_logprobs, row.drawn)
    verdict = verifier.judge_second_look(row.features, look, embed, task=OPEN_QUESTIONS)
    member = verifier.members[OPEN_QUESTIONS]
    assert verdict.task == OPEN_QUESTIONS and verdict.alpha == member.estimator.alpha
    assert verdict.lean == member.lean_for(OPEN_QUESTIONS, int(verdict.verdict.prediction))
    lm = tiny_loaded_model()
    own = verifier.judge(tiny_features(lm, [("Paris is the capital of France.", '{"correctness": true}', 1)])[0])
    assert own.task is None and own.verdict is not None


def test_the_turn_pipelines_path_from_a_generated_answer_to_its_verdict(built):
    """What the turn pipeline calls: the answer generated with its cache kept, the spec's draw from that cache
    (sample_from_cache with the spec's settings), the look, and the member's verdict."""
    from mlx_sdm.lm.prompt import render_prompt
    from mlx_sdm.lm.sampling import sample_from_cache
    from mlx_sdm.turn.answer import generate_answer
    from tests.tiny_verifier import tiny_loaded_model

    member = DocumentVerifier.load(built[0] / "member")
    lm = tiny_loaded_model()
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    answer = generate_answer(lm, messages, max_tokens=12, keep_cache=True, delimiter=member.recipe.delimiter)
    prompt = render_prompt(lm.tokenizer, messages)
    drawn = SPEC.draw(lm, answer.cache, prompt)
    again = sample_from_cache(lm, answer.cache, prompt, k=SPEC.k, temperature=SPEC.temperature, seed=SPEC.seed,
                              max_tokens=SPEC.max_tokens)
    assert drawn.k == SPEC.k and drawn.texts == again.texts and drawn.token_ids == again.token_ids
    look = SPEC.look(messages[0]["content"], answer.text, answer.logprobs, drawn)
    assert look.answer_logprob == pytest.approx(np.mean(answer.logprobs[: SPEC.max_tokens]), abs=1e-12)
    verdict = member.judge_second_look(answer.features, look, embed, task=OPEN_QUESTIONS)
    assert isinstance(verdict, DocumentVerdict) and verdict.verdict is not None
    assert verdict.admits_nothing == member.estimator.admits_nothing


@pytest.fixture(scope="module")
def looking_pipeline(built, tmp_path_factory):
    """The turn pipeline over a verifier whose open-question member reads a second look (every question it
    gets is an everyday one: it has no task instructions and no router)."""
    import shutil

    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnComponents
    from tests.tiny_verifier import build_tiny_verifier, tiny_loaded_model

    suite = build_tiny_verifier(tmp_path_factory.mktemp("looking") / "suite")
    shutil.copytree(built[0] / "member", suite / "members" / OPEN_QUESTIONS)
    verifier = DocumentVerifier.load(suite)
    return TurnPipeline(TurnComponents(lm=tiny_loaded_model(), verifier=verifier, verifier_path=str(suite)))


QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def test_a_chat_turn_takes_its_second_look_between_the_answer_and_the_verdict(looking_pipeline):
    """The turn yields CheckingAnswers(K) after the answer and before its verdict; the verdict is the member's on
    the look drawn from the answer's own cache; an answer made elsewhere is judged by the same member from a look
    drawn for it (the draws equal the chat's: tests/test_second_look_sampling.py); --no-second-look leaves the
    answer token for token and says no judgement was made."""
    from mlx_sdm.network.verdict import REASON_SECOND_LOOK_OFF, VerdictStatus
    from mlx_sdm.network.verdict import DocumentVerdict
    from mlx_sdm.network.verdict_words import verdict_words
    from mlx_sdm.turn.values import AnswerComplete, CheckingAnswers, TurnOptions, TurnRequest

    options = TurnOptions(max_tokens=12, enable_p_true=False, generate_reflection=False)
    items = list(looking_pipeline.stream(TurnRequest(QUESTION, options)))
    kinds = [type(i) for i in items]
    assert kinds.index(AnswerComplete) < kinds.index(CheckingAnswers) < kinds.index(DocumentVerdict)
    assert next(i for i in items if isinstance(i, CheckingAnswers)).k == SPEC.k
    outcome = items[-1]
    assert outcome.verdict.task == OPEN_QUESTIONS and outcome.verdict.verdict is not None
    member = looking_pipeline.components.verifier.members[OPEN_QUESTIONS]
    assert outcome.verdict.alpha == member.estimator.alpha and outcome.verdict.admits_nothing == member.estimator.admits_nothing

    # an answer made elsewhere (/v1/verify): its second look is drawn and read by the same member
    elsewhere = looking_pipeline.judge_text(TurnRequest(QUESTION, options), "Paris is the capital of France.")
    assert elsewhere.verdict.task == OPEN_QUESTIONS and elsewhere.verdict.verdict is not None

    off = looking_pipeline.run(TurnRequest(QUESTION, TurnOptions(max_tokens=12, enable_p_true=False,
                                                                 generate_reflection=False, second_look=False)))
    assert off.text == outcome.text and off.token_ids == outcome.token_ids  # the answer is the plain model's
    assert off.verdict.reason == REASON_SECOND_LOOK_OFF and off.verdict.status is VerdictStatus.NOT_VERIFIED
    words = verdict_words(off.verdict)
    assert words.badge == "? not verified · second look off" and "--no-second-look" in words.sentence


def test_the_default_verifier_takes_no_second_look():
    """The shipped default reads no second look: a turn yields no CheckingAnswers (the chat is unchanged)."""
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import CheckingAnswers, TurnComponents, TurnOptions, TurnRequest
    from tests.tiny_verifier import build_tiny_verifier, tiny_loaded_model

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        verifier = DocumentVerifier.load(build_tiny_verifier(Path(tmp) / "v"))
        pipeline = TurnPipeline(TurnComponents(lm=tiny_loaded_model(), verifier=verifier))
        items = list(pipeline.stream(TurnRequest(QUESTION, TurnOptions(max_tokens=6, enable_p_true=False))))
    assert not any(isinstance(i, CheckingAnswers) for i in items) and items[-1].verdict is not None


def test_a_label_on_a_second_look_answer_is_kept_as_a_training_row(built, tmp_path):
    """The review queue under a verifier whose open-question member reads a second look: the label is recorded
    (a training row) but joins no support set (the drawn answers are not kept with the answer, so no
    [agreement; states] point can be made), the count the status line shows stays, and the next turn is judged."""
    import shutil

    from mlx_sdm.executor.engine import ChatEngine, EngineConfig
    from mlx_sdm.store.chat_store import ChatStore
    from tests.tiny_verifier import build_tiny_verifier, tiny_components

    suite = build_tiny_verifier(tmp_path / "suite")
    shutil.copytree(built[0] / "member", suite / "members" / OPEN_QUESTIONS)
    engine = ChatEngine(EngineConfig(max_tokens=8, generate_reflection=False, enable_p_true=False),
                        ChatStore(tmp_path / "chat.db"), components=tiny_components(suite))
    try:
        engine.ready.result(120)
        before = engine.info().support_size
        session = engine.store.create_session("look")
        first = engine.send(session.id, "What is the capital of France?").result(60)
        assert first.outcome.verdict.task == OPEN_QUESTIONS and first.review_id is not None
        decided = engine.decide(first.review_id, 1).result(60)
        assert not decided.applied and "second look" in decided.message and "training row" in decided.message
        assert decided.support_size == before == engine.info().support_size
        assert engine.store.review_queue.decision(decided.decision_id).label == 1  # kept for export
        again = engine.send(engine.store.create_session("again").id, "What is the capital of France?").result(60)
        assert again.outcome.verdict.task == OPEN_QUESTIONS and again.outcome.verdict.verdict is not None
        assert again.outcome.verdict.verdict.q == first.outcome.verdict.verdict.q  # judged by the member as it was built
    finally:
        engine.shutdown()
