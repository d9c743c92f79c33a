"""Data-parallel step: 2 ring-backend processes on localhost (``mlx.launch``) give the same updated
positive head as one process on the same global batch.

Run as a script under ``mlx.launch`` it is one rank: it takes its share of the global batch,
does one training step (SGD, then Adam) and writes its updated head to ``OUT_DIR/{sgd,adam}{rank}.npy``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx_sdm  # noqa: F401,E402

import mlx.core as mx  # noqa: E402
import mlx.optimizers as optim  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mlx_sdm.network.distributed import gather_rows, shard, unshard_rows  # noqa: E402
from mlx_sdm.network.heads import VocabularyHeads  # noqa: E402
from tests.references import sdm_next_token_loss  # noqa: E402
from mlx_sdm.network.finetune_steps import build_train_step, local_rows, make_optimizer  # noqa: E402

VOCAB, WIDTH, TOKENS = 50, 16, 8


def problem():
    rng = np.random.default_rng(7)
    reference = rng.normal(size=(VOCAB, WIDTH)).astype(np.float32)
    positive = reference + 2.0 * rng.normal(size=(VOCAB, WIDTH)).astype(np.float32)  # far from ref: r > 1
    hidden = rng.normal(size=(TOKENS, WIDTH)).astype(np.float32)
    targets = rng.integers(0, VOCAB, size=TOKENS) + VOCAB
    q = rng.integers(0, 6, size=TOKENS).astype(np.float32)
    d = rng.uniform(0.2, 1.0, size=TOKENS).astype(np.float32)
    return reference, positive, hidden, targets, q, d


def one_step(group, optimizer_name: str):
    reference, positive, hidden, targets, q, d = problem()
    heads = VocabularyHeads(mx.array(reference), mx.array(positive))
    # SGD shows any error in the gradient's scale (Adam's first step is nearly lr * sign(g)).
    optimizer = make_optimizer(0.01) if optimizer_name == "adam" else optim.SGD(learning_rate=0.5)
    step = build_train_step(heads, optimizer, group=group, compile=False)
    rows = local_rows(np.arange(TOKENS), group)
    loss, _ = step(
        mx.array(hidden[rows]), mx.array(targets[rows]), mx.array(q[rows]), mx.array(d[rows]), mx.array(0.1), mx.array(float(TOKENS))
    )
    mx.eval(heads.positive, loss)
    return np.array(heads.positive), loss.item()


def test_problem_exercises_the_rescaled_regulariser():
    reference, positive, hidden, targets, q, d = problem()
    h = mx.array(hidden)
    _, parts = sdm_next_token_loss(h @ mx.array(reference).T, h @ mx.array(positive).T, mx.array(targets), mx.array(q), mx.array(d), 0.1)
    assert parts.r.item() > 1.0 and 0.0 < parts.s.item() <= 1.0


@pytest.mark.skipif(shutil.which("mlx.launch", path=str(Path(sys.executable).parent)) is None, reason="mlx.launch not installed")
def test_two_ring_processes_match_one_process(tmp_path):
    launcher = str(Path(sys.executable).parent / "mlx.launch")
    script = Path(__file__).resolve()
    env = dict(os.environ, PYTHONPATH=str(script.parents[1]))
    port = random.randint(20000, 40000)
    done = subprocess.run(
        [launcher, "--backend", "ring", "-n", "2", "--starting-port", str(port), "--python", sys.executable, str(script), str(tmp_path)],
        env=env,
        timeout=90,
        capture_output=True,
        text=True,
    )
    # mlx.launch exits 0 even when a rank fails: check for the ranks' own failures too.
    assert done.returncode == 0 and "exited with code" not in done.stdout + done.stderr, done.stdout + done.stderr
    for name in ("sgd", "adam"):
        single, single_loss = one_step(mx.distributed.init(), name)
        assert not np.allclose(single, problem()[1])  # the step moved the head
        for rank in range(2):
            np.testing.assert_allclose(np.load(tmp_path / f"{name}{rank}.npy"), single, rtol=1e-5, atol=1e-6)
            assert float((tmp_path / f"{name}_loss{rank}.txt").read_text()) == pytest.approx(single_loss, rel=1e-5)
    assert (tmp_path / "gather.txt").read_text() == "ok"
    # A whole Alg. 4 run (sharded targets and generation, rank-0 checkpoint) equals the 1-process run.
    from tests.test_finetune_trainer import run

    single_run = run(None, epochs=2)
    np.testing.assert_allclose(np.load(tmp_path / "finetune.npy"), np.array(single_run.heads.positive), rtol=1e-4, atol=1e-5)
    history = json.loads((tmp_path / "finetune_history.json").read_text())
    assert [{k: v for k, v in h.items() if k != "train_loss"} for h in history] == [
        {k: v for k, v in h.items() if k != "train_loss"} for h in single_run.history
    ]
    assert [h.get("train_loss") for h in history] == pytest.approx([h.get("train_loss") for h in single_run.history], rel=1e-5)
    assert (tmp_path / "ckpt" / "state.json").is_file()


if __name__ == "__main__":
    out = Path(sys.argv[1])
    group = mx.distributed.init(backend="ring", strict=True)
    assert group.size() == 2
    for name in ("sgd", "adam"):
        positive, loss = one_step(group, name)
        np.save(out / f"{name}{group.rank()}.npy", positive)
        (out / f"{name}_loss{group.rank()}.txt").write_text(repr(loss))
    # Sharded per-document rows come back in document order on every rank.
    items = list(range(7))
    local = np.array([[i, i * i] for i in shard(items, group)], dtype=np.float32).reshape(-1, 2)
    whole = unshard_rows(local, len(items), group)
    parts = gather_rows(local, group)
    ok = whole[:, 0].tolist() == items and whole[:, 1].tolist() == [i * i for i in items] and sum(len(p) for p in parts) == 7
    if group.rank() == 0:
        (out / "gather.txt").write_text("ok" if ok else f"bad {whole.tolist()}")
    from tests.test_finetune_trainer import run

    result = run(str(out / "ckpt"), epochs=2, group=group)
    if group.rank() == 0:
        np.save(out / "finetune.npy", np.array(result.heads.positive))
        (out / "finetune_history.json").write_text(json.dumps(result.history))
