"""Bad input ends in one clear line, not a traceback: each gets one line naming the file,
line or field and the fix, nothing of the user's is renamed or replaced, and gzipped JSONL is read."""

from __future__ import annotations

import gzip
import json
import io
import warnings
from pathlib import Path

import numpy as np
import pytest

from mlx_sdm.cli import main as cli
from mlx_sdm.commands import generate as generate_cmd
from mlx_sdm.commands import verify as verify_cmd
from mlx_sdm.errors import ArtifactError, DataError, OutputError
from tests.test_verifier_commands import save_tiny_folder, write_rows
from tests.tiny_verifier import tiny_components, tiny_documents

FAST = ["--iterations", "1", "--epochs", "2", "--batch-size", "16", "--exemplar-dim", "8", "--quiet"]


def embedding_rows(n: int, offset: int = 0) -> list[dict]:
    rng = np.random.default_rng(offset)
    return [{"id": f"e{offset + i}", "label": i % 2, "embedding": (rng.normal(size=4) + 3.0 * (i % 2)).round(4).tolist()}
            for i in range(n)]


@pytest.fixture
def files(tmp_path) -> tuple[Path, Path]:
    return write_rows(tmp_path / "train.jsonl", embedding_rows(60)), write_rows(tmp_path / "cal.jsonl", embedding_rows(60, 100))


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# --------------------------------------------------------------------------- input files
def test_non_utf8_file_is_named_with_its_line(files, tmp_path, capsys):
    train, cal = files
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(train.read_bytes() + '{"id": "caf\xe9", "label": 0, "embedding": [1, 2, 3, 4]}\n'.encode("latin-1"))
    assert cli(["train", "--train", str(bad), "--calibration", str(cal), "--out", str(tmp_path / "o"), *FAST]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "latin1.jsonl:61" in line and "UTF-8" in line and not (tmp_path / "o").exists()


def test_gzipped_jsonl_is_read(files, tmp_path, capsys):
    train, cal = files
    gz = tmp_path / "train.jsonl.gz"
    gz.write_bytes(gzip.compress(train.read_bytes()))
    assert cli(["train", "--train", str(gz), "--calibration", str(cal), "--out", str(tmp_path / "est"), *FAST]) == 0
    assert (tmp_path / "est" / "manifest.json").is_file()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gz.read_bytes()[: len(gz.read_bytes()) // 2])
    assert cli(["train", "--train", str(cut), "--calibration", str(cal), "--out", str(tmp_path / "o"), *FAST]) == 1
    assert "cut.jsonl.gz" in one_error_line(capsys.readouterr().err)


def test_bad_label_in_the_calibration_file_blames_the_calibration_file(files, tmp_path, capsys):
    train, cal = files
    rows = embedding_rows(60, 100)
    rows[6]["label"] = 2
    cal2 = write_rows(tmp_path / "cal2.jsonl", rows)
    assert cli(["train", "--train", str(train), "--calibration", str(cal2), "--out", str(tmp_path / "o"), *FAST]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "cal2.jsonl:7" in line and "'label'" in line and "train.jsonl:" not in line


def test_text_row_without_prompt_names_the_prompt_field(tmp_path, capsys):
    rows = [{"prompt": p, "completion": c, "label": y} for p, c, y in tiny_documents()[:6]]
    del rows[0]["prompt"]
    bad = write_rows(tmp_path / "text.jsonl", rows)
    assert cli(["train", "--train", str(bad), "--calibration", str(bad), "--out", str(tmp_path / "o"), *FAST]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "text.jsonl:1" in line and "'prompt'" in line and "embedding" not in line.split("needs")[0]


# --------------------------------------------------------------------------- artifacts and outputs
def test_truncated_estimator_weights_in_a_verifier_folder(text_verifier, tmp_path, capsys):
    import shutil

    from mlx_sdm.network.verifier import DocumentVerifier

    _, model_dir, built, cal = text_verifier
    folder = tmp_path / "verifier"
    shutil.copytree(built, folder)
    weights = folder / "estimator" / "estimator.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # "incomplete metadata"
    with pytest.raises(ArtifactError, match="cannot read the estimator files"):
        DocumentVerifier.load(folder)
    weights.write_bytes(weights.read_bytes()[:100])  # "invalid header length"
    assert cli(["verify", "--estimator", str(folder), str(cal), "--out", str(tmp_path / "v.jsonl"),
                            "--model", str(model_dir)]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "cannot read the estimator files" in line and str(folder) in line and not (tmp_path / "v.jsonl").exists()


def test_train_never_renames_a_users_file(files, tmp_path, capsys):
    train, cal = files
    precious = tmp_path / "notes.txt"
    precious.write_text("keep me")
    assert cli(["train", "--train", str(train), "--calibration", str(cal), "--out", str(precious), "--force", *FAST]) == 1
    assert "existing file" in one_error_line(capsys.readouterr().err)
    assert precious.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["cal.jsonl", "notes.txt", "train.jsonl"]


def test_train_over_an_existing_artifact_needs_force(files, tmp_path, capsys):
    train, cal = files
    out = tmp_path / "est"
    args = ["--train", str(train), "--calibration", str(cal), "--out", str(out), *FAST]
    assert cli(["train", *args]) == 0
    before = (out / "manifest.json").read_text()
    capsys.readouterr()
    assert cli(["train", *args]) == 1
    assert "--force" in one_error_line(capsys.readouterr().err) and (out / "manifest.json").read_text() == before
    assert cli(["train", *args, "--seed", "1", "--force"]) == 0
    assert (out / "manifest.json").read_text() != before
    other = tmp_path / "photos"
    other.mkdir()
    (other / "a.jpg").write_bytes(b"x")
    assert cli(["train", "--train", str(train), "--calibration", str(cal), "--out", str(other), "--force", *FAST]) == 1
    assert "not an mlx-sdm artifact" in capsys.readouterr().err and (other / "a.jpg").read_bytes() == b"x"


def test_verify_out_a_folder_or_an_unwritable_path_is_one_line(files, tmp_path, capsys):
    train, cal = files
    est = tmp_path / "est"
    assert cli(["train", "--train", str(train), "--calibration", str(cal), "--out", str(est), *FAST]) == 0
    capsys.readouterr()
    folder = tmp_path / "folder"
    folder.mkdir()
    assert cli(["verify", "--estimator", str(est), str(cal), "--out", str(folder)]) == 1
    assert "is a folder" in one_error_line(capsys.readouterr().err)
    under_a_file = tmp_path / "train.jsonl" / "verdicts.jsonl"
    assert cli(["verify", "--estimator", str(est), str(cal), "--out", str(under_a_file)]) == 1
    assert "is a file, not a folder" in one_error_line(capsys.readouterr().err)


def test_atomic_writes_raise_output_errors_not_raw_os_errors(tmp_path):
    from mlx_sdm.atomic import atomic_directory, atomic_write_text

    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError):
        atomic_write_text(tmp_path / "file" / "child.txt", "y")
    with pytest.raises(OutputError, match="existing file"):
        with atomic_directory(tmp_path / "file"):
            pass
    assert (tmp_path / "file").read_text() == "x" and not (tmp_path / "file.old").exists()


# --------------------------------------------------------------------------- text rows: train -> verify -> report
@pytest.fixture(scope="module")
def text_verifier(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    model_dir = save_tiny_folder(root / "tiny-model", seed=0)
    rows = [{"id": f"d{i}", "prompt": p, "completion": c, "label": y} for i, (p, c, y) in enumerate(tiny_documents())]
    train, cal = write_rows(root / "train.jsonl", rows[0::2]), write_rows(root / "cal.jsonl", rows[1::2])
    out = root / "verifier"
    assert cli(["train", "--train", str(train), "--calibration", str(cal), "--out", str(out), "--model", str(model_dir),
                           "--iterations", "1", "--epochs", "3", "--batch-size", "8", "--exemplar-dim", "16", "--quiet"]) == 0
    return root, model_dir, out, cal


def test_report_on_a_verifier_built_from_text_rows(text_verifier, capsys):
    root, model_dir, out, cal = text_verifier
    assert cli(["verify", "--estimator", str(out), str(cal), "--out", str(root / "v.jsonl")]) == 0
    capsys.readouterr()
    assert cli(["report", "--estimator", str(out), str(cal), "--plot", str(root / "r.png")]) == 0
    printed = capsys.readouterr().out
    assert "sdm p_lower" in printed and "training (from the estimator's manifest)" in printed and (root / "r.png").is_file()
    # the estimator subfolder with text rows: say what to pass instead of "'embedding' missing"
    assert cli(["report", "--estimator", str(out / "estimator"), str(cal)]) == 1
    assert "verifier.json" in one_error_line(capsys.readouterr().err)


# --------------------------------------------------------------------------- generate and chat
def test_generate_refuses_an_empty_prompt_before_loading_a_model(capsys):
    assert cli(["generate", "", "--model", "/nonexistent/model"]) == 2
    assert "prompt is empty" in one_error_line(capsys.readouterr().err)
    from mlx_sdm.lm.prompt import render_prompt

    with pytest.raises(DataError, match="empty"):
        render_prompt(object(), "  ", system="You are helpful.")  # a system prompt alone is no question


def test_prompt_longer_than_the_context_is_one_note_not_a_userwarning(text_verifier, capsys):
    _, model_dir, _, _ = text_verifier
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        rc = cli(["generate", "word " * 2500, "--model", str(model_dir), "--verifier", "none", "--max-tokens", "2"])
    captured = capsys.readouterr()
    assert rc == 0 and not [w for w in escaped if issubclass(w.category, UserWarning)]
    notes = [line for line in captured.err.splitlines() if "note:" in line]
    assert len(notes) == 1 and "were left out" in notes[0] and "UserWarning" not in captured.err
    assert "note: Your message is" in captured.out and "between were left out" in captured.out


def test_plain_chat_skips_non_utf8_input_and_leaves_no_empty_session(tmp_path, capsys):
    from mlx_sdm.commands import chat as chat_cmd
    from mlx_sdm.executor.engine import EngineConfig
    from mlx_sdm.store.chat_store import ChatStore

    store = ChatStore(tmp_path / "chat.db")
    stdin = io.TextIOWrapper(io.BytesIO(b"caf\xe9 au lait?\n"), encoding="utf-8")
    stdout = io.StringIO()
    rc = chat_cmd.run_plain(EngineConfig(max_tokens=4), store, session_id=None, title=None, stdin=stdin, stdout=stdout,
                            components=tiny_components(None))
    assert rc == 0
    assert "input line 1 is not UTF-8" in one_error_line(capsys.readouterr().err)
    assert store.list_sessions() == []


# --------------------------------------------------------------------------- the last unclear cases
def read_only(folder: Path, monkeypatch) -> Path:
    """Make ``folder`` read-only; as root (where permissions do not stop a write) the access check sees it so."""
    import os

    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o555)
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if (Path(p).resolve() == folder.resolve()
                                                                          and mode & os.W_OK) else real(p, mode, **kw))
    return folder


def test_a_label_beyond_the_classes_is_blamed_on_its_line(files, tmp_path, capsys):
    train, cal = files
    rows = embedding_rows(60)
    rows[9]["label"] = 7
    bad = write_rows(tmp_path / "train7.jsonl", rows)
    assert cli(["train", "--train", str(bad), "--calibration", str(cal), "--out", str(tmp_path / "o"), *FAST]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "train7.jsonl:10: field 'label': label 7" in line and "classes 2..6" in line and "0, 1" in line


def test_rows_wider_than_the_estimator_name_the_estimator_and_the_rows_width(files, tmp_path, capsys):
    train, cal = files  # 4 wide
    est = tmp_path / "est"
    assert cli(["train", "--train", str(train), "--calibration", str(cal), "--out", str(est), *FAST]) == 0
    capsys.readouterr()
    wide = write_rows(tmp_path / "wide.jsonl", [{**r, "embedding": r["embedding"] * 2} for r in embedding_rows(8)])
    assert cli(["report", "--estimator", str(est), str(wide)]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "wide.jsonl:1" in line and "this row has 8 numbers" in line and f"the estimator {est} is 4 wide" in line
    assert "earlier rows" not in line
    assert cli(["verify", "--estimator", str(est), str(wide), "--out", str(tmp_path / "v.jsonl")]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "wide.jsonl:1" in line and f"the estimator {est} is 4 wide" in line and "earlier rows" not in line
    assert cli(["train", "--train", str(train), "--calibration", str(wide), "--out", str(tmp_path / "o"), *FAST]) == 1
    assert f"the training file {train} is 4 wide" in one_error_line(capsys.readouterr().err)


def test_embedding_rows_where_text_rows_are_needed_say_which_rows_are_needed(text_verifier, files, tmp_path, capsys):
    from mlx_sdm.network.data import read_documents_jsonl

    _, model_dir, verifier, _ = text_verifier
    embeddings, _ = files
    assert cli(["verify", "--estimator", str(verifier), str(embeddings), "--out", str(tmp_path / "v.jsonl"),
                            "--model", str(model_dir)]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "train.jsonl:1" in line and "holds embedding rows" in line and "{prompt, completion, label}" in line
    with pytest.raises(DataError, match="holds embedding rows"):
        read_documents_jsonl(embeddings)  # finetune's data folder


def test_a_folder_of_task_files_is_taken_and_a_folder_without_any_is_listed(tmp_path):
    from mlx_sdm.network.tasks.registry import load_tasks

    folder = tmp_path / "my_tasks"
    folder.mkdir()
    for name, field_name in (("cities", "city"), ("colours", "colour")):
        write_rows(folder / f"{name}.jsonl", [{"prompt": f"q{i}? JSON {{\"{field_name}\": str}}", "answer": {field_name: "a"}}
                                               for i in range(3)])
    (folder / "notes.md").write_text("x")
    assert [t.name for t in load_tasks(["sentiment", str(folder)])] == ["sentiment", "cities", "colours"]
    empty = tmp_path / "nothing_here"
    empty.mkdir()
    (empty / "notes.md").write_text("x")
    (empty / "old").mkdir()
    with pytest.raises(DataError, match=r"needs \.jsonl task files; it holds notes\.md, old/"):
        load_tasks([str(empty)])


def test_json_errors_say_at_once(tmp_path, capsys):
    bad = tmp_path / "ctrl.jsonl"
    bad.write_text('{"id": "a", "label": 0, "embedding": [1, 2]}\n{"id": "b\n')
    assert cli(["train", "--train", str(bad), "--calibration", str(bad), "--out", str(tmp_path / "o"), *FAST]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "ctrl.jsonl:2: not valid JSON (Invalid control character at column 10)" in line and "at at" not in line


def test_build_verifier_checks_out_before_any_work_and_leaves_no_cache(tmp_path, capsys):

    data = write_rows(tmp_path / "train.jsonl", embedding_rows(3))
    before = data.read_text()
    # a model that does not exist: had any work started, the error would be about the model
    assert cli(["build-verifier", "--model", str(tmp_path / "no-model"), "--tasks", "sentiment", "--out", str(data)]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert f"{data}: is an existing file" in line and data.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.jsonl"]  # no train.jsonl.cache/


def test_finetune_checks_its_outputs_and_resume_before_loading_anything(tmp_path, monkeypatch, capsys):

    locked = read_only(tmp_path / "locked", monkeypatch)
    missing_model = ["--model", str(tmp_path / "no-model"), "--data", str(tmp_path / "no-data"), "--quiet"]
    assert cli(["finetune", *missing_model, "--adapter-path", str(locked / "head")]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert f"{locked / 'head'}: no permission to write in {locked}" in line
    assert cli(["finetune", *missing_model, "--adapter-path", str(tmp_path / "head"), "--resume"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert f"nothing to resume: no checkpoint at {tmp_path / 'head.checkpoint'}" in line and "drop --resume" in line


def test_a_chat_store_in_a_read_only_folder_says_so(tmp_path, monkeypatch):
    from mlx_sdm.store.chat_store import ChatStore

    locked = read_only(tmp_path / "locked", monkeypatch)
    with pytest.raises(OutputError, match="is not writable") as caught:
        ChatStore(locked / "chat.db")
    assert "--db" in str(caught.value) and "move it aside" not in str(caught.value)
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(OutputError, match="cannot create its folder"):
        ChatStore(tmp_path / "a_file" / "chat.db")


# --------------------------------------------------------------------------- command-line values, before any model work
def no_model_loads(monkeypatch) -> None:
    """Any model load fails the test: the checks below must come before it."""
    import mlx_sdm.lm.loading

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr(mlx_sdm.lm.loading, "load_model", refuse)


@pytest.mark.parametrize("command, argv, option, wanted", [
    ("serve", ["--port", "80000"], "--port", "from 0 to 65535"),
    ("serve", ["--port", "-1"], "--port", "from 0 to 65535"),
    ("serve", ["--port", "http"], "--port", "got 'http'"),
    ("serve", ["--max-tokens", "0"], "--max-tokens", "at least 1"),
    ("serve", ["--max-pending", "-3"], "--max-pending", "at least 1"),
    ("serve", ["--max-body-bytes", "0"], "--max-body-bytes", "at least 1"),
    ("generate", ["hi", "--explain", "-1"], "--explain", "at least 0"),
    ("generate", ["hi", "--max-tokens", "0"], "--max-tokens", "at least 1"),
    ("chat", ["--temperature", "-1"], "--temperature", "from 0 to 2"),
    ("chat", ["--temperature", "2.5"], "--temperature", "from 0 to 2"),
    ("chat", ["--temperature", "nan"], "--temperature", "from 0 to 2"),
    ("chat", ["--max-tokens", "-5"], "--max-tokens", "at least 1"),
    ("verify", ["--estimator", "e", "in.jsonl", "--out", "o.jsonl", "--explain", "-1"], "--explain", "at least 0"),
    ("demo", ["--explain", "-2"], "--explain", "at least 0"),
    ("build-verifier", ["--out", "v", "--max-tokens", "2"], "--max-tokens", "at least 4"),
    ("build-verifier", ["--out", "v", "--eval-size", "-1"], "--eval-size", "at least 0"),
    ("train", ["--train", "t", "--calibration", "c", "--out", "o", "--batch-size", "0"], "--batch-size", "at least 1"),
    ("train", ["--train", "t", "--calibration", "c", "--out", "o", "--exemplar-dim", "0"], "--exemplar-dim", "at least 1"),
    ("compress-head", ["--head", "h", "--out", "o", "--rank", "0"], "--rank", "at least 1"),
])
def test_a_bad_number_is_one_line_naming_the_option_before_any_model_work(command, argv, option, wanted, monkeypatch,
                                                                         capsys):
    import importlib

    from mlx_sdm import cli

    no_model_loads(monkeypatch)
    module = importlib.import_module(cli.COMMANDS[command][0])
    with pytest.raises(SystemExit) as exited:
        module.main(argv)
    assert exited.value.code == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"mlx-sdm {command}: error: argument {option}: must be") and wanted in line, line
    assert f"see `mlx-sdm {command} --help`" in line


def test_help_gives_the_valid_ranges(capsys):
    from mlx_sdm.commands import chat as chat_cmd
    from mlx_sdm.commands import serve as serve_cmd

    serve_help = " ".join(serve_cmd.build_parser().format_help().split())
    assert "port, 0 to 65535" in serve_help and "--quiet" in serve_help
    assert "at least 1" in " ".join(generate_cmd.build_parser().format_help().split())
    assert "0 or more" in " ".join(verify_cmd.build_parser().format_help().split())
    assert "sampling temperature, 0 to 2" in " ".join(chat_cmd.build_parser().format_help().split())


@pytest.mark.parametrize("spelling", ["none", "NONE", "off"])
def test_list_tasks_with_verifier_none_means_no_verifier_not_a_folder(spelling, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no folder called "none" here: it must not be looked for
    assert cli(["generate", "--list-tasks", "--verifier", spelling]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"--verifier {spelling} turns verification off" in line and "verifier.json" not in line


def refusing(folder: Path, monkeypatch) -> Path:
    """A folder whose permission bits allow writing but that takes no new file (a read-only mount, /proc)."""
    import errno
    import tempfile

    folder.mkdir(parents=True, exist_ok=True)
    real = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and Path(dir).resolve() == folder.resolve():
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    return folder


def test_verify_out_under_proc_is_refused_before_reading_anything(tmp_path, capsys):
    if not Path("/proc").is_dir():
        pytest.skip("no /proc on this system")
    # an estimator that does not exist: had any work started, the error would be about it
    assert cli(["verify", "--estimator", str(tmp_path / "no-verifier"), str(tmp_path / "in.jsonl"),
                            "--out", "/proc/x.jsonl"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("mlx-sdm verify: /proc/x.jsonl: /proc does not take new files") and "no-verifier" not in line


def test_every_output_path_is_checked_before_any_model_work(tmp_path, monkeypatch, capsys):
    no_model_loads(monkeypatch)
    locked = refusing(tmp_path / "locked", monkeypatch)
    missing = str(tmp_path / "missing")
    runs = [  # through the CLI, whose one handler says a refused path in one line
        (["verify", "--estimator", missing, missing, "--out", str(locked / "v.jsonl")], 1, "v.jsonl"),
        (["compress-head", "--head", missing, "--model", missing, "--out", str(locked / "head")], 1, "head"),
        (["demo", "--data", missing, "--plot", str(locked / "r.png")], 1, "r.png"),
        (["demo", "--data", missing, "--out", str(locked / "est")], 1, "est"),
        (["eval-monitor", missing, "--plot", str(locked / "m.png")], 2, "m.png"),
        (["chat", "--db", str(tmp_path / "chat.db"), "--export", str(locked / "all.jsonl")], 2, "all.jsonl"),
        (["train", "--train", missing, "--calibration", missing, "--out", str(locked / "o"), *FAST], 1, "o"),
    ]
    for argv, code, name in runs:
        assert cli(argv) == code, argv
        line = one_error_line(capsys.readouterr().err)
        assert f"{locked / name}: {locked} does not take new files (Read-only file system)" in line, line
    assert sorted(p.name for p in locked.iterdir()) == []


def test_history_search_bad_input_is_one_line(tmp_path, capsys):
    from mlx_sdm.commands import history as history_cmd
    from mlx_sdm.store.chat_store import ChatStore

    db = tmp_path / "chat.db"
    ChatStore(db).close()
    cases = {("--since", "2026-13-01"): "field '--since': '2026-13-01' is not a date; write it as YYYY-MM-DD",
             ("--until", "yesterday"): "field '--until': 'yesterday' is not a date",
             ("--status", "maybe"): "field '--status': unknown verdict status 'maybe'; use one of verified, not_verified",
             ("--since", "2026-03-01", "--until", "2026-02-01"): "since 2026-03-01 is after until 2026-02-01"}
    for extra, expected in cases.items():
        assert history_cmd.main(["search", "paris", "--db", str(db), *extra]) == 1
        assert expected in one_error_line(capsys.readouterr().err), extra
    with pytest.raises(SystemExit) as exit_:  # a count is checked as the options are read, as in every command
        history_cmd.main(["search", "paris", "--db", str(db), "--limit", "0"])
    assert exit_.value.code == 2
    assert "argument --limit: must be a whole number, at least 1, got 0" in one_error_line(capsys.readouterr().err)
    assert history_cmd.main(["search", "!!!", "--db", str(db)]) == 1
    assert "nothing to search for" in one_error_line(capsys.readouterr().err)
    missing = tmp_path / "none" / "chat.db"
    assert history_cmd.main(["search", "paris", "--db", str(missing)]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert f"{missing}: no chat store here; `mlx-sdm chat` creates it, or name one with --db PATH" in line
    assert not missing.parent.exists()  # a search never creates a store


def test_generate_prints_the_monitor_reading_and_json_carries_it(text_verifier, capsys):
    """With ``--explain``, after the verdict's line and evidence, ``generate`` prints the session monitor's reading as
    the chat's panel shows it (AUQ level, P, R, the fused forecast's ok% and its sentence); ``--json`` carries it as
    "monitor". Without it, an ordinary turn prints the line alone (what is usual is not said)."""
    _, model_dir, out, _ = text_verifier
    args = ["Is Paris the capital of France?", "--model", str(model_dir), "--verifier", str(out), "--max-tokens", "4"]
    assert cli(["generate", *args]) == 0
    quiet = capsys.readouterr().out
    assert "monitor: AUQ " not in quiet and "q: " not in quiet and quiet.count("verdict: ") == 1
    assert cli(["generate", *args, "--explain", "2"]) == 0
    printed = capsys.readouterr().out
    report = printed[printed.index("verdict:"):]
    assert "evidence: " in report
    line = next(l for l in report.splitlines() if l.startswith("monitor: AUQ "))
    assert " · P " in line and " · R " in line and " · ok " in line
    assert cli(["generate", "--json", *args]) == 0
    monitor = json.loads(capsys.readouterr().out)["monitor"]
    assert monitor["level"] in ("low", "medium", "high", "critical") and monitor["action"]
    assert 0.0 <= monitor["cumulative_confidence"] <= 1.0
    assert f"AUQ {monitor['level'].upper()} · P {monitor['cumulative_confidence']:.3f}" in line
    if monitor["fused_p"] is not None:
        ok = f"{100 * monitor['fused_p']:.0f}%"
        assert f"ok {ok}" in line and (monitor["fused_message"] is None or f"ok {ok}: {monitor['fused_message']}" in report)
