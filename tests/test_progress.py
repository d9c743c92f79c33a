"""Progress bars: tqdm on a terminal; piped, a few plain lines and no carriage-return redraws."""

from __future__ import annotations

import io

from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.fitting import _progress
from mlx_sdm.progress import PlainProgress, progress_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_tqdm_bar(monkeypatch):
    from tqdm import tqdm

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    out = Terminal()
    bar = progress_bar(total=10, desc="work", file=out)
    assert isinstance(bar, tqdm)
    bar.update(10)
    bar.close()
    assert "\r" in out.getvalue()


def test_piped_output_is_at_most_a_line_per_quarter():
    out = io.StringIO()
    bar = progress_bar(total=1000, desc="answers", unit="answer", file=out)
    assert isinstance(bar, PlainProgress)
    for i in range(1000):
        bar.set_postfix(loss=f"{i:.1f}")
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert [line.split(" answer ")[0] for line in lines] == ["answers: 250/1000", "answers: 500/1000",
                                                             "answers: 750/1000", "answers: 1000/1000"]
    assert lines[-1].endswith("(loss=999.0)") and " 100%," in lines[-1]


def test_piped_transient_and_disabled_bars_print_nothing_but_still_iterate():
    out = io.StringIO()
    assert list(progress_bar(range(5), desc="batches", leave=False, file=out)) == list(range(5))
    bar = progress_bar(total=4, disable=True, file=out)
    bar.update(4)
    bar.close()
    assert out.getvalue() == ""


def test_a_bar_that_shrinks_reports_its_end():
    out = io.StringIO()
    bar = progress_bar(total=100, desc="answers", file=out)
    bar.update(10)
    bar.total -= 90  # the rest of the work was skipped
    bar.refresh()
    assert out.getvalue().splitlines()[-1].startswith("answers: 10/10 it 100%")


def test_alg1_progress_is_plain_when_piped(capsys):
    callback, bar = _progress(True, FitConfig(iterations=2, epochs=50))
    for j in (1, 2):
        for epoch in range(1, 51):
            callback({"iteration": j, "iterations": 2, "epoch": epoch, "loss": 0.5, "balanced_q": 3.0})
    bar.close()
    err = capsys.readouterr().err
    assert "\r" not in err and len(err.splitlines()) == 4
    assert err.splitlines()[-1].startswith("iteration 2/2: 100/100 epoch 100%")


def test_bars_are_made_only_in_the_progress_module():
    """Every command's bars go through mlx_sdm.progress, so piped output is plain everywhere."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    makers = [str(p.relative_to(root)) for package in ("mlx_sdm", "tui", "scripts") for p in (root / package).rglob("*.py")
              if "import tqdm" in p.read_text(encoding="utf-8") or "from tqdm" in p.read_text(encoding="utf-8")]
    assert makers == ["mlx_sdm/progress.py"]


def test_no_color_or_a_dumb_terminal_gets_plain_lines_without_escape_codes(monkeypatch):
    """NO_COLOR (https://no-color.org) and TERM=dumb: plain lines even on a terminal; no escape code either way."""
    for name, value in (("NO_COLOR", "1"), ("TERM", "dumb")):
        with monkeypatch.context() as env:
            env.delenv("NO_COLOR", raising=False)
            env.setenv(name, value)
            out = Terminal()
            bar = progress_bar(total=4, desc="work", file=out)
            assert isinstance(bar, PlainProgress)
            bar.update(4)
            bar.close()
            assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()


def test_a_finetune_plan_piped_has_no_escape_codes(tmp_path):
    import os
    import subprocess
    import sys

    task = tmp_path / "mail.csv"
    task.write_text("text,label\n" + "".join(f"mail {i},{'spam' if i % 2 else 'ham'}\n" for i in range(80)))
    out = subprocess.run([sys.executable, "-m", "mlx_sdm", "finetune", "--task", str(task), "--instruction", "Junk?",
                          "--plan"], capture_output=True, text=True, timeout=120, env=dict(os.environ, NO_COLOR="1"))
    assert out.returncode == 0, out.stderr
    assert "mail: labels" in out.stdout and "\x1b" not in out.stdout + out.stderr


def test_mlx_lms_coloured_trainer_output_loses_its_escape_codes_when_piped(monkeypatch):
    """mlx-lm's trainer prints through a rich console forced to truecolor; piped, what reaches stdout is plain."""
    import contextlib

    from mlx_lm.cli_ui import TrainUI

    from mlx_sdm.progress import without_escape_codes

    out = io.StringIO()
    with contextlib.redirect_stdout(out), without_escape_codes():
        with TrainUI(2) as ui:
            ui.report_train(1, 0.5, 100.0, 2000)
            ui.advance()
    assert "0.500" in out.getvalue() and "\x1b" not in out.getvalue(), repr(out.getvalue())
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.delenv("NO_COLOR", raising=False)
    terminal = Terminal()
    with contextlib.redirect_stdout(terminal), without_escape_codes():
        TrainUI(1).report_train(1, 0.5, 100.0, 2000)
    assert "\x1b" in terminal.getvalue()  # a terminal keeps mlx-lm's colours
