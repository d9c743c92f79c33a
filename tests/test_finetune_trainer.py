"""Alg. 4 loop on the tiny LM: best-epoch selection from the untuned count, bad input, a disk that
fills mid-checkpoint, and a run killed with SIGKILL then resumed to the same result.

Run as a script (``python tests/test_finetune_trainer.py CKPT OUT [--resume] [--hang-at N]``) it is
the child process of the kill/resume test.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx_sdm  # noqa: F401,E402

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mlx_sdm.errors import DataError  # noqa: E402
from mlx_sdm.network import checkpoint as checkpoint_module  # noqa: E402
from mlx_sdm.network.checkpoint import CheckpointError, read_checkpoint  # noqa: E402
from mlx_sdm.network.data import FinetuneDocument  # noqa: E402
from mlx_sdm.network.heads import VocabularyHeads  # noqa: E402
from mlx_sdm.network.trainer import FinetuneArgs, FinetuneCallback, train_positive_head
from mlx_sdm.network.finetune_scoring import LMScorer
from tests.tiny_verifier import tiny_loaded_model  # noqa: E402


def make_documents(n: int = 12) -> list[FinetuneDocument]:
    docs = []
    for i in range(n):
        truth = i % 2 == 0
        y = 1 if i % 3 else 0
        answer = truth if y else not truth
        docs.append(
            FinetuneDocument(
                id=str(i),
                prompt=f"Check claim {i}: Paris is the capital of France.",
                completion='{"correctness": %s}' % str(answer).lower(),
                label=y,
                task_label=int(truth),
                max_generation_tokens=8,
            )
        )
    return docs


def make_scorer(lm):
    # A stand-in verifier: admits everything as ŷ = 1; q depends on the generated completion, so it
    # changes as the head learns (the real DocumentVerifier is exercised in test_finetune_command.py).
    def verify(features, text):
        return SimpleNamespace(prediction=1, admitted=True, q=float(features.completion_tokens % 5), d=0.5)

    return LMScorer(lm, verify)


def run(checkpoint: str | None, *, resume: bool = False, epochs: int = 3, callback=None, learning_rate: float = 0.05, group=None):
    lm = tiny_loaded_model()
    docs = make_documents()
    args = FinetuneArgs(
        epochs=epochs, batch_size=4, learning_rate=learning_rate, progress=False, checkpoint_path=checkpoint, resume=resume
    )
    return train_positive_head(lm, docs[:8], docs[8:], make_scorer(lm), args, training_callback=callback, group=group)


def test_best_epoch_starts_from_untuned_count():
    reports = []

    class Record(FinetuneCallback):
        def on_epoch_report(self, info):
            reports.append(info)

    result = run(None, callback=Record())
    assert result.initial_metric == 0  # random tiny LM: no parsable JSON before tuning
    counts = [r["calibration_admitted"] for r in reports]
    assert result.best_metric == max([result.initial_metric] + counts)
    assert result.best_metric > 0, counts  # lr 0.05 teaches the positive head the JSON answers
    assert result.best_epoch == 1 + counts.index(result.best_metric)
    # No epoch beats the untuned count -> the original head is kept (lr 0 changes nothing).
    frozen = run(None, epochs=1, learning_rate=0.0)
    assert frozen.best_epoch == 0
    np.testing.assert_array_equal(np.array(frozen.heads.positive), np.array(frozen.heads.negative))


def test_out_of_distribution_answers_give_no_gradient_unless_warmed_up():
    # d = 0 for every generated answer (all out of distribution): Eq. 32's gradient is d (sdm − e_t) = 0.
    lm = tiny_loaded_model()
    docs = make_documents()
    scorer = LMScorer(lm, lambda features, text: SimpleNamespace(prediction=1, admitted=True, q=3.0, d=0.0))
    original = np.array(VocabularyHeads.from_model(lm.model).positive)
    for warmup, moved in ((0, False), (1, True)):
        args = FinetuneArgs(epochs=1, batch_size=4, learning_rate=0.05, progress=False, warmup_epochs=warmup)
        result = train_positive_head(lm, docs[:8], docs[8:], scorer, args)
        assert (not np.allclose(np.array(result.last_positive), original)) is moved


def test_no_verified_documents_is_a_clear_error():
    lm = tiny_loaded_model()
    docs = [d for d in make_documents() if d.label == 0]
    with pytest.raises(DataError, match="no documents with label 1"):
        train_positive_head(lm, docs, docs, make_scorer(lm), FinetuneArgs(epochs=1, progress=False))


def test_disk_full_mid_checkpoint_keeps_last_good(tmp_path, monkeypatch):
    ckpt = tmp_path / "ckpt"
    real_save = mx.save_safetensors
    calls = {"n": 0}

    def flaky_save(path, arrays, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            real_save(path, arrays, *a, **k)  # a partly written file, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(path, arrays, *a, **k)

    monkeypatch.setattr(checkpoint_module.mx, "save_safetensors", flaky_save)
    with pytest.raises(CheckpointError, match=r"disk is full.*after epoch 2.*after epoch 1\) is intact"):
        run(str(ckpt), epochs=2)
    arrays, state = read_checkpoint(ckpt)
    assert state["epoch"] == 1 and "positive" in arrays
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no temporary folder left behind


def test_killed_run_resumes_to_the_same_result(tmp_path):
    ckpt = tmp_path / "ckpt"
    out = tmp_path / "resumed.npy"
    script = Path(__file__).resolve()
    # Keep the caller's PYTHONPATH after the checkout (MLX may come from a folder of wheels there).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(script.parents[1]), os.environ.get("PYTHONPATH", "")) if p))
    child = subprocess.Popen(
        [sys.executable, str(script), str(ckpt), str(out), "--hang-at", "2"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        line = child.stdout.readline()
        assert line.strip() == "HANGING", line
        assert read_checkpoint(ckpt)[1]["epoch"] == 1  # epoch 1 written, epoch 2 in progress
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    resumed = subprocess.run(
        [sys.executable, str(script), str(ckpt), str(out), "--resume"], env=env, timeout=120, stdout=subprocess.PIPE, text=True
    )
    assert resumed.returncode == 0
    assert resumed.stdout.strip().splitlines()[-1] == "EPOCHS 2,3"  # continued after the last checkpoint
    straight = run(None)
    np.testing.assert_allclose(np.load(out), np.array(straight.heads.positive), rtol=1e-5, atol=1e-6)
    assert read_checkpoint(ckpt)[1]["epoch"] == 3


if __name__ == "__main__":
    ckpt_arg, out_arg = sys.argv[1], sys.argv[2]
    hang_at = int(sys.argv[sys.argv.index("--hang-at") + 1]) if "--hang-at" in sys.argv else None

    seen = []

    class Hang(FinetuneCallback):
        def on_epoch_report(self, info):
            seen.append(str(info["epoch"]))
            if hang_at is not None and info["epoch"] == hang_at:
                print("HANGING", flush=True)
                time.sleep(120)

    result = run(ckpt_arg, resume="--resume" in sys.argv, callback=Hang())
    np.save(out_arg, np.array(result.heads.positive))
    print("EPOCHS " + ",".join(seen), flush=True)
