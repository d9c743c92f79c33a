"""SDM-network fine-tuning of the positive vocabulary head (Alg. 4, docs/method.md § 15.4–15.6).

The loop has mlx-lm's trainer shape (``mlx_lm.tuner.trainer.train``): a dataclass of arguments,
an injectable loss and batch iterator, ``nn.value_and_grad`` + ``mx.compile`` over the module and
optimizer state, gradients averaged with ``mlx.nn.average_gradients`` across ``mlx.launch`` ranks,
and reports through mlx-lm's ``TrainingCallback``. Around it, Alg. 4:

    (q, d) of every y = 1 training document ← greedy generation + verifier       (cached)
    best ← admitted count of the untuned model on the calibration set             (reference)
    for each epoch:
        Eq. 32 over the shuffled target tokens of the y = 1 documents, β: 0 → 0.1
        regenerate the training documents → new (q, d)
        regenerate the calibration documents → admitted count
                 (ŷ = 1, admitted at p_lower ≥ α′, parsed task answer correct)
        keep W_pos if the count strictly beats the best
        checkpoint (atomic)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.tuner.callbacks import TrainingCallback

from mlx_sdm.calibration.constants import SOFTMAX_D, SOFTMAX_Q
from mlx_sdm.errors import DataError
from mlx_sdm.network.checkpoint import CheckpointError, read_checkpoint, write_checkpoint
from mlx_sdm.network.data import FinetuneDocument, documents_hash
from mlx_sdm.network.finetune_scoring import Scorer, admitted_count, outcomes_from_rows, score_all
from mlx_sdm.network.finetune_steps import (
    build_train_step,
    gather_token_targets,
    iterate_token_batches,
    local_rows,
    make_optimizer,
    sdm_batch_loss,
)
from mlx_sdm.network.heads import VocabularyHeads
from mlx_sdm.network.loss import BETA_MAX, BETA_MIN, beta_for_batch

#: Paper values (§ 15.4, § 18): Adam lr 1e-5, 50-token mini-batches, 5 epochs, seed 235.
PAPER_HEAD_LEARNING_RATE = 1e-5
PAPER_TOKEN_BATCH_SIZE = 50
PAPER_HEAD_EPOCHS = 5
PAPER_HEAD_SEED = 235


@dataclass
class FinetuneArgs:
    epochs: int = field(default=PAPER_HEAD_EPOCHS, metadata={"help": "Epochs over the target tokens (Alg. 4)."})
    batch_size: int = field(default=PAPER_TOKEN_BATCH_SIZE, metadata={"help": "Target tokens per mini-batch (global)."})
    learning_rate: float = field(default=PAPER_HEAD_LEARNING_RATE, metadata={"help": "Adam learning rate."})
    seed: int = field(default=PAPER_HEAD_SEED, metadata={"help": "Seed of the token shuffling."})
    beta_min: float = BETA_MIN
    beta_max: float = BETA_MAX
    warmup_epochs: int = field(
        default=0,
        metadata={"help": "First epochs with q = e-2, d = 1 (plain joint softmax) instead of generation-based q, d. "
                  "The paper uses 0; a model whose untuned answers are all out of distribution (d = 0) needs 1."},
    )
    steps_per_report: int = field(default=10, metadata={"help": "Mini-batches between loss reports."})
    checkpoint_path: str | None = field(default=None, metadata={"help": "Folder of the per-epoch checkpoint."})
    resume: bool = field(default=False, metadata={"help": "Continue from the checkpoint if there is one."})
    compile: bool = True
    progress: bool = True


class FinetuneCallback(TrainingCallback):
    """mlx-lm's callback, plus a report after each epoch of Alg. 4."""

    def on_epoch_report(self, epoch_info: dict) -> None:
        pass


@dataclass
class FinetuneResult:
    heads: VocabularyHeads
    best_epoch: int
    best_metric: int
    initial_metric: int
    history: list[dict[str, Any]]
    data_hash: str
    epochs_run: int
    last_positive: mx.array | None = None  # W_pos after the last epoch (whether or not it was kept)


def _array_state(heads, best_positive, optimizer) -> dict[str, mx.array]:
    arrays = {"positive": heads.positive, "best_positive": best_positive}
    arrays.update({f"optimizer.{k}": v for k, v in tree_flatten(optimizer.state)})
    return arrays


def train_positive_head(
    lm,
    train_documents: Sequence[FinetuneDocument],
    calibration_documents: Sequence[FinetuneDocument],
    scorer: Scorer,
    args: FinetuneArgs = FinetuneArgs(),
    *,
    heads: VocabularyHeads | None = None,
    loss: Callable = sdm_batch_loss,
    iterate_batches: Callable[[int, int, int, int], Iterator[np.ndarray]] = iterate_token_batches,
    training_callback: FinetuneCallback | None = None,
    group=None,
    run_identity: dict[str, Any] | None = None,
) -> FinetuneResult:
    """Alg. 4 on (train, calibration) documents; returns the best positive head.

    ``lm``: the LM layer's ``LoadedModel`` (or anything with ``.model`` and ``.tokenizer``).
    ``scorer``: generation + verification (:class:`LMScorer`); ``loss`` and ``iterate_batches``
    are injectable as in mlx-lm's trainer; ``group``: the ``mx.distributed`` group (default: the
    global one, size 1 unless started by ``mlx.launch``)."""
    group = group if group is not None else mx.distributed.init()
    run = _Run(args, group, scorer, calibration_documents, training_callback)
    verified = _verified_documents(train_documents, calibration_documents)
    heads = heads if heads is not None else VocabularyHeads.from_model(lm.model)
    data_hash = documents_hash(list(train_documents) + list(calibration_documents))
    run_args = ("batch_size", "learning_rate", "seed", "beta_min", "beta_max", "warmup_epochs")
    identity = {"data_hash": data_hash, "args": {k: v for k, v in asdict(args).items() if k in run_args}}
    identity.update(run_identity or {})
    optimizer = make_optimizer(args.learning_rate)
    optimizer.init(heads.trainable_parameters())
    tokens = gather_token_targets(lm, verified, heads.vocab_size, group, progress=lambda it: run.bar(it, desc="targets"))
    if len(tokens) == 0:
        raise DataError("the verified documents have no completion tokens to train on", field="completion")
    state = run.start(heads, optimizer, identity)
    step = build_train_step(heads, optimizer, loss, group, compile=args.compile)

    def training_qd(epoch: int) -> np.ndarray:
        """(q, d) of every verified training document for ``epoch`` (§ 15.5), [n, 2]."""
        if epoch <= args.warmup_epochs:  # warm-up: the sdm activation reduces to softmax
            return np.tile(np.array([[SOFTMAX_Q, SOFTMAX_D]], dtype=np.float32), (len(verified), 1))
        return score_all(scorer, verified, heads.vocab_logits, group, "training")[:, 2:4]

    if state.qd is None and state.start_epoch <= args.epochs:
        state.qd = training_qd(state.start_epoch)
    epochs_bar = run.bar(range(state.start_epoch, args.epochs + 1), desc="epoch", initial=state.start_epoch - 1,
                         total=args.epochs)
    for epoch in epochs_bar:
        mean_loss = run.train_epoch(epoch, step, heads, optimizer, tokens, state.qd, iterate_batches)
        # Alg. 4: regenerate the training completions (new q, d; not needed after the last epoch)
        # and the calibration ones (metric).
        state.qd = training_qd(epoch + 1) if epoch < args.epochs else None
        run.end_epoch(epoch, mean_loss, heads, optimizer, state, identity, epochs_bar)
    last_positive = heads.positive
    heads.positive = state.best_positive
    mx.eval(heads.positive)
    return FinetuneResult(heads=heads, best_epoch=state.best_epoch, best_metric=state.best_metric,
                          initial_metric=state.initial_metric, history=state.history, data_hash=data_hash,
                          epochs_run=args.epochs, last_positive=last_positive)


def _verified_documents(train_documents: Sequence[FinetuneDocument],
                        calibration_documents: Sequence[FinetuneDocument]) -> list[FinetuneDocument]:
    """The label-1 training documents (the only ones the next-token loss trains on), checked."""
    verified = [doc for doc in train_documents if doc.label == 1]
    if not verified:
        raise DataError(
            "no documents with label 1 (verified); the next-token loss trains only on verified answers. "
            "Add rows whose completion is the correct answer, with \"label\": 1",
            field="label",
        )
    if any(doc.task_label is None for doc in calibration_documents):
        raise DataError("every calibration document needs a task_label to count correct answers", field="task_label")
    return verified


@dataclass
class _State:
    """Where Alg. 4 stands: the best epoch so far and its head, the history, the training (q, d)."""

    best_metric: int
    best_epoch: int
    initial_metric: int
    best_positive: Any
    history: list[dict[str, Any]]
    qd: np.ndarray | None
    start_epoch: int


class _Run:
    """One Alg. 4 run's plumbing: progress bars, the checkpoint, the per-epoch steps."""

    def __init__(self, args: FinetuneArgs, group, scorer: Scorer, calibration_documents, callback):
        from mlx_sdm.progress import progress_bar

        self.args, self.group, self.scorer, self.callback = args, group, scorer, callback
        self.calibration_documents = calibration_documents
        self.show = args.progress and group.rank() == 0
        self.bar = (lambda it, **kw: progress_bar(it, leave=False, **kw)) if self.show else (lambda it, **kw: it)
        self.checkpoint_path = Path(args.checkpoint_path) if args.checkpoint_path else None

    def admitted_now(self, heads: VocabularyHeads) -> int:
        rows = score_all(self.scorer, self.calibration_documents, heads.vocab_logits, self.group)
        return admitted_count(outcomes_from_rows(rows))

    def start(self, heads: VocabularyHeads, optimizer, identity: dict[str, Any]) -> _State:
        """Resume from the checkpoint (same run only), or score the untuned head: the bar to beat."""
        loaded = read_checkpoint(self.checkpoint_path) if (self.checkpoint_path and self.args.resume) else None
        if loaded is None:
            if self.args.resume and self.group.rank() == 0 and self.checkpoint_path:
                print(f"no checkpoint at {self.checkpoint_path}; starting from the untuned head", flush=True)
            initial = self.admitted_now(heads)
            return _State(initial, 0, initial, mx.array(heads.positive),
                          [{"epoch": 0, "calibration_admitted": initial}], None, 1)
        arrays, state = loaded
        if state.get("identity") != identity:
            raise CheckpointError(
                f"{self.checkpoint_path}: this checkpoint belongs to another run (data, verifier or arguments differ: "
                f"{state.get('identity')} vs {identity}); drop --resume or pass another --adapter-path"
            )
        heads.positive = arrays["positive"]
        optimizer.state = tree_unflatten([(k[len("optimizer.") :], v) for k, v in arrays.items() if k.startswith("optimizer.")])
        qd = np.array(state["train_qd"], dtype=np.float32) if state.get("train_qd") is not None else None
        return _State(int(state["best_metric"]), int(state["best_epoch"]), int(state["initial_metric"]),
                      arrays["best_positive"], list(state["history"]), qd, int(state["epoch"]) + 1)

    def train_epoch(self, epoch: int, step, heads: VocabularyHeads, optimizer, tokens, qd: np.ndarray,
                    iterate_batches) -> float:
        """One pass over the target tokens in mini-batches (Eq. 32, β rising across the epoch); mean loss."""
        args, group = self.args, self.group
        batches = list(iterate_batches(len(tokens), args.batch_size, args.seed, epoch))
        losses, n_tokens, steps, tic = 0.0, 0, 0, time.perf_counter()
        batch_bar = self.bar(batches, desc=f"epoch {epoch} batches", unit="batch")
        for index, global_batch in enumerate(batch_bar):
            local = local_rows(global_batch, group)
            weight = np.ones(len(local), dtype=np.float32)
            if len(local) == 0:  # a short last batch leaves this rank nothing: one dummy row of weight 0
                local, weight = global_batch[:1], np.zeros(1, dtype=np.float32)
            doc_rows = tokens.document_index[local]
            beta = mx.array(beta_for_batch(index, len(batches), args.beta_min, args.beta_max), dtype=mx.float32)
            lvalue, nll = step(mx.array(tokens.hidden[local]), mx.array(tokens.targets[local]),
                               mx.array(qd[doc_rows, 0]), mx.array(qd[doc_rows, 1]), beta,
                               mx.array(float(len(global_batch))), mx.array(weight))
            mx.eval(lvalue, nll, heads.state, optimizer.state)
            losses += lvalue.item()
            n_tokens += len(global_batch)
            steps += 1
            elapsed = time.perf_counter() - tic
            if self.show and hasattr(batch_bar, "set_postfix"):
                batch_bar.set_postfix(loss=f"{lvalue.item():.4f}", tok_s=f"{n_tokens / max(elapsed, 1e-9):.0f}")
            if self.callback is not None and (steps % args.steps_per_report == 0 or index == len(batches) - 1):
                self.callback.on_train_loss_report({
                    "epoch": epoch, "iteration": index + 1, "train_loss": losses / steps,
                    "learning_rate": float(args.learning_rate), "tokens_per_second": n_tokens / max(elapsed, 1e-9),
                    "trained_tokens": n_tokens, "peak_memory": mx.get_peak_memory() / 1e9,
                })
        return losses / max(steps, 1)

    def end_epoch(self, epoch: int, mean_loss: float, heads: VocabularyHeads, optimizer, state: _State,
                  identity: dict[str, Any], epochs_bar) -> None:
        """Score the calibration answers, keep the best epoch, report, checkpoint (rank 0)."""
        metric = self.admitted_now(heads)
        if metric > state.best_metric:
            state.best_metric, state.best_epoch = metric, epoch
            state.best_positive = mx.array(heads.positive)
        info = {"epoch": epoch, "calibration_admitted": metric, "train_loss": mean_loss, "best_epoch": state.best_epoch}
        state.history.append(info)
        if self.callback is not None:
            self.callback.on_epoch_report(dict(info))
        if self.show and hasattr(epochs_bar, "set_postfix"):
            epochs_bar.set_postfix(admitted=metric, best=state.best_metric)
        if self.checkpoint_path is not None and self.group.rank() == 0:
            write_checkpoint(self.checkpoint_path, _array_state(heads, state.best_positive, optimizer), {
                "epoch": epoch, "best_metric": state.best_metric, "best_epoch": state.best_epoch,
                "initial_metric": state.initial_metric, "train_qd": None if state.qd is None else state.qd.tolist(),
                "history": state.history, "identity": identity,
            })
        if self.group.size() > 1:
            mx.eval(mx.distributed.all_sum(mx.array(0.0), group=self.group, stream=mx.cpu))  # wait for rank 0's write
