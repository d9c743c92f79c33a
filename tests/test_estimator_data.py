"""Bad input gets a DataError naming the file, the line and the field; nothing is written half."""

import json

import mlx_sdm  # noqa: F401
import pytest

from mlx_sdm.cli import main as cli
from mlx_sdm.calibration.data import check_fit_sets, read_embedding_jsonl
from mlx_sdm.errors import DataError


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _good(n=12, classes=2, dim=3, start=0):
    return [{"id": f"r{start + i}", "label": i % classes, "embedding": [float(i), 1.0, -1.0][:dim]} for i in range(n)]


@pytest.mark.parametrize("bad,line,field,message", [
    ('{"id": "x", "label": 0, "embedding": [1, 2, 3]', 3, None, "not valid JSON"),
    ({"id": "x", "embedding": [1, 2, 3]}, 3, "label", "missing"),
    ({"id": "x", "label": 1.5, "embedding": [1, 2, 3]}, 3, "label", "integer"),
    ({"id": "x", "label": "spam", "embedding": [1, 2, 3]}, 3, "label", "integer"),
    ({"id": "x", "label": True, "embedding": [1, 2, 3]}, 3, "label", "integer"),
    ({"id": "x", "label": -1, "embedding": [1, 2, 3]}, 3, "label", "0..C-1"),
    ({"id": "x", "label": 0, "embedding": [1, 2]}, 3, "embedding", "has 2 numbers but earlier rows have 3"),
    ('{"id": "x", "label": 0, "embedding": [1, NaN, 3]}', 3, "embedding", "finite"),
    ('{"id": "x", "label": 0, "embedding": [1, Infinity, 3]}', 3, "embedding", "finite"),
    ({"id": "x", "label": 0, "embedding": [1, "a", 3]}, 3, "embedding", "not a number"),
    ({"id": "x", "label": 0}, 3, "embedding", "missing"),
    ({"id": "r0", "label": 0, "embedding": [1, 2, 3]}, 3, "id", "already used on line 1"),
])
def test_bad_rows_name_file_line_field(tmp_path, bad, line, field, message):
    path = _write(tmp_path / "t.jsonl", _good(2) + [bad])
    with pytest.raises(DataError) as info:
        read_embedding_jsonl(path)
    err = info.value
    assert err.path == str(path) and err.line == line and err.field == field
    assert message in str(err) and str(path) in str(err) and f":{line}:" in str(err)


def test_set_level_errors(tmp_path):
    train = read_embedding_jsonl(_write(tmp_path / "t.jsonl", _good(12, classes=3)))
    cal = read_embedding_jsonl(_write(tmp_path / "c.jsonl", _good(12, classes=2, start=100)))
    with pytest.raises(DataError, match="class 2 is absent from the calibration set") as info:
        check_fit_sets(train, cal)
    assert info.value.path == str(tmp_path / "c.jsonl") and info.value.field == "label"
    few = read_embedding_jsonl(_write(tmp_path / "f.jsonl", _good(6, classes=2, start=200)))
    with pytest.raises(DataError, match="class 0 has only 3 rows in the training set; need at least 5"):
        check_fit_sets(few, cal)
    wide = read_embedding_jsonl(_write(tmp_path / "w.jsonl", [{"id": f"w{i}", "label": i % 2, "embedding": [1.0, 2.0]}
                                                              for i in range(12)]))
    with pytest.raises(DataError, match="width 2 but the training rows have 3"):
        check_fit_sets(train, wide)
    unl = read_embedding_jsonl(_write(tmp_path / "u.jsonl", [{"embedding": [1.0, 2.0, 3.0]}]), require_label=False)
    assert unl.labels.tolist() == [-1] and unl.ids == ["u.jsonl:1"]
    with pytest.raises(DataError, match="no rows"):
        read_embedding_jsonl(_write(tmp_path / "e.jsonl", []))


def test_train_command_writes_nothing_on_bad_input(tmp_path, capsys):
    t = _write(tmp_path / "t.jsonl", _good(12))
    c = _write(tmp_path / "c.jsonl", _good(11, start=50) + [{"id": "bad", "label": 0, "embedding": [1.0, float("nan"), 0.0]}])
    out = tmp_path / "out"
    rc = cli(["train", "--train", str(t), "--calibration", str(c), "--out", str(out), "--quiet"])
    assert rc == 1 and not out.exists()
    assert f"{c}:12: field 'embedding'" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_ids_must_be_unique_across_files(tmp_path):
    train = read_embedding_jsonl(_write(tmp_path / "t.jsonl", _good(12)))
    cal = read_embedding_jsonl(_write(tmp_path / "c.jsonl", _good(12, start=11)))
    with pytest.raises(DataError, match="id 'r11' is also in the training file") as info:
        check_fit_sets(train, cal)
    assert info.value.path == str(tmp_path / "c.jsonl") and info.value.field == "id"
