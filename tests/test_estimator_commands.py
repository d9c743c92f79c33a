"""`mlx-sdm train`, `verify` and `report` end to end on small embedding JSONL files."""

import json

import mlx_sdm  # noqa: F401
import numpy as np

from mlx_sdm.cli import main as cli


def _write(path, rng, n, tag, labelled=True):
    means = np.random.default_rng(5).normal(0, 2.0, (2, 6))
    y = rng.integers(0, 2, n)
    x = means[y] + rng.normal(0, 1, (n, 6))
    with open(path, "w") as f:
        for i in range(n):
            row = {"id": f"{tag}{i}", "embedding": [float(v) for v in x[i]], "text": f"{tag} text {i}"}
            if labelled:
                row["label"] = int(y[i])
            f.write(json.dumps(row) + "\n")
    return str(path)


def test_train_verify_report(tmp_path, capsys):
    rng = np.random.default_rng(0)
    t, c = _write(tmp_path / "t.jsonl", rng, 150, "t"), _write(tmp_path / "c.jsonl", rng, 150, "c")
    test = _write(tmp_path / "x.jsonl", rng, 40, "x")
    out = tmp_path / "est"
    assert cli(["train", "--train", t, "--calibration", c, "--out", str(out), "--iterations", "2", "--epochs", "3",
                           "--exemplar-dim", "16", "--seed", "1", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "epoch chosen per iteration" in printed and "logistic-regression reference" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["iterations"] == 2 and manifest["config"]["epochs"] == 3 and manifest["source"]["train"] == t

    verdicts = tmp_path / "v.jsonl"
    assert cli(["verify", "--estimator", str(out), test, "--out", str(verdicts), "--explain", "2"]) == 0
    rows = [json.loads(line) for line in verdicts.read_text().splitlines()]
    assert len(rows) == 40 and [r["id"] for r in rows] == [f"x{i}" for i in range(40)]
    for r in rows:
        assert set(r) == {"id", "prediction", "p_lower", "admitted", "q", "d", "q_bin", "reason", "exemplars"}
        assert (r["p_lower"] is None) == (not r["admitted"]) and (r["reason"] is None) == r["admitted"]
        assert r["reason"] in (None, "out_of_distribution", "below_threshold", "index_flipped")
        assert len(r["exemplars"]) == 2 and r["exemplars"][0]["text"].endswith(r["exemplars"][0]["id"][1:])
    capsys.readouterr()

    plot = tmp_path / "r.png"
    assert cli(["report", "--estimator", str(out), test, "--plot", str(plot)]) == 0
    text = capsys.readouterr().out
    for needle in ("no-reject", "softmax>=0.95", "sdm p_lower", "y=0", "ŷ=1", "marginal", "epoch chosen per iteration"):
        assert needle in text
    assert plot.read_bytes()[:4] == b"\x89PNG"

    # a verify input of another width is refused with the line and field named
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "b", "embedding": [1.0, 2.0]}) + "\n")
    assert cli(["verify", "--estimator", str(out), str(bad), "--out", str(tmp_path / "o.jsonl")]) == 1
    assert "bad.jsonl:1: field 'embedding'" in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()


def test_train_v2_and_report_both_kinds_in_one_table(tmp_path, capsys):
    rng = np.random.default_rng(3)
    t, c = _write(tmp_path / "t.jsonl", rng, 150, "t"), _write(tmp_path / "c.jsonl", rng, 150, "c")
    test = _write(tmp_path / "x.jsonl", rng, 40, "x")
    common = ["--train", t, "--calibration", c, "--iterations", "1", "--epochs", "6", "--exemplar-dim", "16", "--quiet"]
    assert cli(["train", *common + ["--out", str(tmp_path / "v1")]]) == 0
    assert cli(["train", *common + ["--out", str(tmp_path / "v2"), "--estimator", "v2"]]) == 0
    assert json.loads((tmp_path / "v2" / "manifest.json").read_text())["estimator"] == "v2"
    capsys.readouterr()
    assert cli(["report", "--estimator", str(tmp_path / "v1"), "--estimator", str(tmp_path / "v2"), test]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = [line.split()[0] for line in lines[:8]]
    assert ["no-reject", "softmax>=0.95", "sdm", "sdm"] == [x for x in table if x in ("no-reject", "softmax>=0.95", "sdm")]
    assert any(line.startswith("sdm p_lower") for line in lines) and any(line.startswith("sdm v2 p_lower") for line in lines)
    assert sum("(estimator kind" in line for line in lines) == 2
