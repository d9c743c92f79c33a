import json
import subprocess
import sys

from mlx_sdm import cli


def test_help_lists_every_command(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert name in out, name


def test_help_separates_every_name_from_its_summary(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, (_, summary) in cli.COMMANDS.items():
        row = next(line for line in out.splitlines() if line.strip().startswith(name + " "))
        assert row.split(None, 1) == [name, summary], row


def test_unknown_command_fails_with_usage(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command" in capsys.readouterr().err


def test_bad_input_is_one_clear_line_naming_file_and_line(tmp_path):
    bad = tmp_path / "train.jsonl"
    bad.write_text(json.dumps({"id": "a", "label": 0, "embedding": [0.1, 0.2]}) + "\n{not json\n")
    out = subprocess.run(
        [sys.executable, "-m", "mlx_sdm", "train", "--train", str(bad), "--calibration", str(bad), "--out", str(tmp_path / "est")],
        capture_output=True, text=True,
    )
    assert out.returncode == 1
    assert f"{bad}:2" in out.stderr and "not valid JSON" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "est").exists()


def test_a_port_out_of_range_is_one_line_not_a_traceback():
    out = subprocess.run([sys.executable, "-m", "mlx_sdm", "serve", "--port", "80000"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "loading" not in out.stdout
    assert out.stderr.strip() == ("mlx-sdm serve: error: argument --port: must be a whole number from 0 to 65535 "
                                  "(0 = any free port), got 80000; see `mlx-sdm serve --help`")
