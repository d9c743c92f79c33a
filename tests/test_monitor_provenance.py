"""Provenance of logged sessions: one typed value naming the model, verifier, head and
embedder with their checksums and the product version; stored in the session JSONL, printed by
eval-monitor, which refuses to score sessions of different provenance together unless told to."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest

from mlx_sdm.commands import eval_monitor
from mlx_sdm.errors import DataError
from mlx_sdm.monitor.forecast.fused import datasets_dir
from mlx_sdm.monitor.session_file.provenance import (
    Artifact,
    MixedProvenanceError,
    Provenance,
    check_single_provenance,
    file_sha256,
    make_provenance,
    provenance_groups,
    verifier_sha256,
)
from mlx_sdm.monitor.session_file.reader import read_sessions_jsonl
from mlx_sdm.monitor.session_file.writer import write_sessions_jsonl
from mlx_sdm.resources import default_head_dir, default_verifier_dir

FINGERPRINT = {"architecture": "llama", "hidden_size": 576, "head_sha256": "ab" * 32}


class FakeEmbedder:
    name = "hidden:smollm2"


def _corpus(n: int = 12):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_sessions_jsonl(datasets_dir() / "session_corpus.jsonl.gz")[:n]


def _provenance(head: str = "h1") -> Provenance:
    return Provenance(Artifact("smollm2", "ab" * 32), Artifact("suite", "cd" * 32), Artifact(head, "ef" * 32),
                      Artifact(None), "0.1.0", "abc123")


def test_the_shipped_artifacts_are_named_with_their_checksums():
    verifier, head = default_verifier_dir(), default_head_dir()
    p = make_provenance(model_name="smollm2", fingerprint=FINGERPRINT, verifier_path=verifier, head_path=head,
                        embedder=FakeEmbedder())
    assert p.model == Artifact("smollm2", "ab" * 32)
    assert p.verifier == Artifact(verifier.name, verifier_sha256(verifier)) and len(p.verifier.sha256) == 64
    manifest = json.loads((head / "manifest.json").read_text())
    assert p.head == Artifact(head.name, manifest["low_rank"]["sha256"])
    assert manifest["low_rank"]["sha256"] == file_sha256(head / "positive_head_lowrank.safetensors")
    assert p.embedder == Artifact("hidden:smollm2", "ab" * 32)  # the chat model's hidden states
    import mlx_sdm

    assert p.version == mlx_sdm.__version__
    none = make_provenance(model_name="m", fingerprint=None, verifier_path=None, head_path=None, embedder=None)
    assert none.head == Artifact(None) and none.verifier.describe() == "none"


def test_a_labelled_verifier_is_another_verifier(tmp_path):
    import shutil

    copy = shutil.copytree(default_verifier_dir(), tmp_path / "v")
    before = verifier_sha256(copy)
    support = copy / "estimator" / "support.json"
    support.write_text(support.read_text() + " ")
    assert verifier_sha256(copy) != before


def test_provenance_is_stored_and_read_back_and_old_files_read_as_unknown(tmp_path):
    sessions = [dataclasses.replace(s, provenance=None) for s in _corpus(2)]  # as files written before provenance
    sessions[0] = dataclasses.replace(sessions[0], provenance=_provenance())
    write_sessions_jsonl(tmp_path / "s.jsonl", sessions)
    back = read_sessions_jsonl(tmp_path / "s.jsonl")
    assert back[0].provenance == _provenance() and back[1].provenance is None


def test_a_malformed_provenance_names_its_line_and_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    record = {"record": "session", "format_version": 1, "session_id": "s1",
              "provenance": {**_provenance().to_dict(), "verifier": "suite"}}
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(DataError) as err:
        read_sessions_jsonl(path)
    text = str(err.value)
    assert "provenance.verifier" in text and ":1" in text and "sha256" in text


def test_mixed_provenance_is_refused_naming_both(tmp_path, capsys):
    sessions = _corpus(12)
    mixed = [dataclasses.replace(s, provenance=_provenance("h1" if i < 6 else "h2")) for i, s in enumerate(sessions)]
    path = tmp_path / "mixed.jsonl"
    write_sessions_jsonl(path, mixed)
    with pytest.raises(MixedProvenanceError):
        check_single_provenance(provenance_groups(mixed))
    assert eval_monitor.main([str(path), "--no-heldout"]) == 2
    err = capsys.readouterr().err
    assert "2 different products" in err and "head h1" in err and "head h2" in err and "--mix-provenance" in err
    assert eval_monitor.main([str(path), "--no-heldout", "--mix-provenance"]) == 0
    out = capsys.readouterr().out
    assert "6 sessions: mlx-sdm 0.1.0 @ abc123; model smollm2" in out and "head h2" in out


def test_one_provenance_is_printed(tmp_path, capsys):
    path = tmp_path / "one.jsonl"
    write_sessions_jsonl(path, [dataclasses.replace(s, provenance=_provenance()) for s in _corpus(12)])
    assert eval_monitor.main([str(path), "--no-heldout"]) == 0
    assert "Made by:\n  12 sessions: mlx-sdm 0.1.0 @ abc123; model smollm2 (sha256 abababababab); verifier suite" \
        in capsys.readouterr().out
    assert eval_monitor.main([str(datasets_dir() / "session_corpus.jsonl.gz"), "--no-heldout", "--json"]) == 0
    (group,) = json.loads(capsys.readouterr().out)["provenance"]
    assert group["sessions"] == 400


def test_the_shipped_corpus_names_the_shipped_verifier_head_and_embedder(tmp_path):
    """The corpus was made by the product with today's suite verifier and head (their checksums), before the
    default verifier gained its open-question member (docs/monitoring.md says so): the corpus's verifier is
    today's default without ``members/``, and is not today's default with it."""
    import shutil

    from mlx_sdm.monitor.session_file.provenance import head_sha256, verifier_sha256
    from mlx_sdm.monitor.session_file.reader import read_sessions_jsonl
    from mlx_sdm.resources import default_head_dir, default_verifier_dir

    provenances = {s.provenance for s in read_sessions_jsonl(datasets_dir() / "session_corpus.jsonl.gz")}
    (p,) = provenances
    without_members = shutil.copytree(default_verifier_dir(), tmp_path / "smollm2-suite",
                                      ignore=shutil.ignore_patterns("members"))
    assert p.verifier.sha256 == verifier_sha256(without_members) != verifier_sha256(default_verifier_dir())
    assert p.head.sha256 == head_sha256(default_head_dir())
    assert p.embedder.name.startswith("minilm") and p.embedder.sha256


def test_a_chat_export_names_what_the_store_recorded(tmp_path):
    from mlx_sdm.monitor.session_file.provenance import UNKNOWN
    from mlx_sdm.store.export import export_all_sessions
    from mlx_sdm.store.chat_store import ChatStore

    store = ChatStore(tmp_path / "chat.db")
    try:
        s = store.create_session(model="smollm2", verifier=str(default_verifier_dir()))
        store.add_message(s.id, "user", "Hello")
        export_all_sessions(store, tmp_path / "all.jsonl")
    finally:
        store.close()
    p = read_sessions_jsonl(tmp_path / "all.jsonl")[0].provenance
    assert p.model == Artifact("smollm2") and p.verifier.sha256 == verifier_sha256(default_verifier_dir())
    assert p.head.name == UNKNOWN and p.embedder.name == UNKNOWN  # the store does not record them
