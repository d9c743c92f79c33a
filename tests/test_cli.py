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


def test_a_closed_pipe_ends_quietly_not_in_a_traceback():
    """`mlx-sdm generate --list-tasks | head -1`: the reader leaves before the writer is done. A Python
    stand-in for the command writes more than a pipe buffer to a reader that closes at once."""
    code = ("import sys, types; from mlx_sdm import cli\n"
            "mod = types.ModuleType('fake_cmd'); sys.modules['fake_cmd'] = mod\n"
            "def main(argv):\n"
            "    for i in range(200000): print('line', i)\n"
            "mod.main = main\n"
            "cli.COMMANDS['fake'] = ('fake_cmd', 'writes a lot')\n"
            "cli.available_commands = lambda: dict(cli.COMMANDS)\n"
            "sys.exit(cli.main(['fake']))\n")
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    writer.stdout.readline()
    writer.stdout.close()  # the reader goes away
    err = writer.stderr.read().decode()
    assert writer.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err, err
